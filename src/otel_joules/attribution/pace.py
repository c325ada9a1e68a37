"""The price history's pace on the meter's sampler thread: every :data:`~.sampling.HISTORY_PERIOD_S`, aligned
across processes, and longer while this process is idle (:data:`~.sampling.IDLE_PERIOD_MAX_S`).

A meter runs one sampler thread (:class:`~otel_joules.meter.sampler.MeterSampler`); the price history
subscribes to it and takes its ticks while it samples. :class:`SamplerPace` decides when the next sample
is due; the samples themselves, their prices and the history are :class:`~.history.PriceHistory`'s, which
owns one pace (composition: the pace never holds the history, and the meter's sampler holds its tick
weakly, so an attributor nobody uses is collected and the meter's own sampling resumes).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable

from otel_joules.attribution.procfs import ProcfsReadError
from otel_joules.attribution.sampling import IDLE_AFTER_S, IDLE_CPU_FRACTION, IDLE_PERIOD_MAX_S, HistorySample
from otel_joules.meter.sampler import MeterSampler, PeriodicThread

if TYPE_CHECKING:
    from otel_joules.attribution.history import PriceHistory


class SamplerPace:
    """When the price history's next sample is due, on the meter's sampler thread.

    Args:
        period_s: The sampler period.
        wrap_safe_s: The meter's wrap-safe read interval (``EnergyMeter.sample_period_s``; None: none): the
            idle back-off never reads less often, so no counter can wrap twice unseen.
        enabled: Sample on the meter's thread (subscribed by :meth:`ensure_running`).

    Attributes:
        dozing: True while the sampler waits longer than its period: a span that opens wakes it (:meth:`wake`).
        fractions: The GPU fractions of the latest sample.
    """

    __slots__ = (
        "period_s", "_idle_period_max_s", "_enabled", "_sampler", "_idle_period_s",
        "_idle_since_ns", "_tick_last", "dozing", "fractions", "_fractions_changed",
    )

    def __init__(self, period_s: float, wrap_safe_s: float | None, enabled: bool) -> None:
        self.period_s = period_s
        self._idle_period_max_s = IDLE_PERIOD_MAX_S if wrap_safe_s is None else min(IDLE_PERIOD_MAX_S, wrap_safe_s)
        self._enabled = enabled
        #: The meter's sampler, once subscribed to.
        self._sampler: MeterSampler | None = None
        #: The back-off's current period; when the process's idleness began (None while it is not idle);
        #: (sample, the process's and the sampler thread's CPU seconds just after it) at the thread's last tick.
        self._idle_period_s = period_s
        self._idle_since_ns: int | None = None
        self._tick_last: "tuple[HistorySample, float, float, float] | None" = None
        self.dozing = False
        self.fractions: list[float] = []
        self._fractions_changed = False

    def note_fractions(self, fractions: list[float]) -> None:
        """A sample's GPU fractions: a change keeps the sampler at its period (the shares move)."""
        if fractions != self.fractions:
            self.fractions, self._fractions_changed = fractions, True

    def tick(self, history: "PriceHistory") -> float:
        """The sampler thread's tick: one sample of ``history``, then the seconds until the next (the idle back-off)."""
        # The process's CPU time around the sample: what the sample itself costs (this thread's reads)
        # is not the process's work, so only the time between ticks counts, less this thread's own
        # share of it (its wait and wake-up) and the device readers' (NVML reads are the library's:
        # counted as the program's, they would keep the sampler, and so themselves, awake).
        clocks, meter = history.clocks, history.meter
        own_before_s = time.thread_time() if clocks.native else 0.0
        readers_before_s = meter.device_readers_cpu_s()
        before_s = _process_cpu_s(history)
        # Idle and owning no GPU share: the GPUs' counters need no read now (their energy is
        # nobody's here, and the next read counts it), so an idle program wakes no GPU reader.
        hold = self.dozing and not any(self.fractions) and not history.spans_open()
        sample = history.sample(hold_devices=hold)
        after_s = _process_cpu_s(history)
        own_after_s = time.thread_time() if clocks.native else 0.0
        readers_after_s = meter.device_readers_cpu_s()
        others_s = None
        last = self._tick_last
        if last is not None and before_s is not None:
            others_s = (before_s - last[1]) - (own_before_s - last[2]) - (readers_before_s - last[3])
        self._tick_last = (
            None if sample is None or after_s is None else (sample, after_s, own_after_s, readers_after_s)
        )
        return self.next_period_s(sample, None if last is None else last[0], others_s, history.spans_open)

    def next_period_s(
        self,
        sample: HistorySample | None,
        last_sample: HistorySample | None,
        others_cpu_s: float | None,
        spans_open: Callable[[], bool],
    ) -> float:
        """:attr:`period_s`, or longer while this process is idle (:data:`~.sampling.IDLE_PERIOD_MAX_S`).

        ``last_sample``: the sampler thread's previous sample; ``others_cpu_s``: the process's CPU
        seconds since, outside the samples and the sampler thread (None: unknown); ``spans_open``: says
        whether a span is open on any thread.

        Wrap safety is not at stake: every sample reads every counter, and the back-off stops at
        the meter's wrap-safe read interval (``EnergyMeter.sample_period_s``: a quarter of the time
        the fastest counter needs to wrap at its zone's maximum power), so even a meter that does not
        sample itself is read at least four times per wrap while this process is idle.
        """
        changed, self._fractions_changed = self._fractions_changed, False
        if (
            sample is None
            or last_sample is None
            or others_cpu_s is None
            or changed
            or self._idle_period_max_s <= self.period_s
        ):
            return self._awake()
        elapsed_s = (sample.monotonic_ns - last_sample.monotonic_ns) / 1e9
        if others_cpu_s > IDLE_CPU_FRACTION * elapsed_s:
            return self._awake()
        # Said before looking for open spans: a span opening meanwhile either is seen here or sees
        # this and wakes the thread (the GIL orders the two).
        self.dozing = True
        if spans_open():
            return self._awake()
        if self._idle_since_ns is None:
            self._idle_since_ns = last_sample.monotonic_ns
        if sample.monotonic_ns - self._idle_since_ns < IDLE_AFTER_S * 1e9:
            self.dozing = False  # not yet: the period stays (a span opening meanwhile needs no wake)
            return self.aligned_period_s()
        self._idle_period_s = min(self._idle_period_s * 2, self._idle_period_max_s)
        return self._idle_period_s

    def _awake(self) -> float:
        self.dozing = False
        self._idle_since_ns = None
        self._idle_period_s = self.period_s
        return self.aligned_period_s()

    def aligned_period_s(self) -> float:
        """The wait until the next multiple of :attr:`period_s` on the monotonic clock at least half a period away.

        Every process's sampler on a host then samples at nearly the same instants (CLOCK_MONOTONIC is the
        host's): their periods are the same periods at the same prices, so the shares of all processes and
        the unattributed remainder add up to the host's energy period by period, whatever the policy.
        """
        period_ns = round(self.period_s * 1e9)
        if period_ns <= 0:
            return self.period_s
        now_ns = time.monotonic_ns()
        target_ns = ((now_ns + period_ns // 2) // period_ns + 1) * period_ns
        return (target_ns - now_ns) / 1e9

    @property
    def thread(self) -> PeriodicThread | None:
        """The meter's sampler thread while this pace is subscribed to it (None otherwise)."""
        sampler = self._sampler
        return None if sampler is None else sampler.thread

    def wake(self) -> None:
        """A span opened while the sampler dozed: sample now, and at :attr:`period_s` while spans are open."""
        self.dozing = False
        sampler = self._sampler
        if sampler is not None:
            sampler.wake()

    def ensure_running(self, history: "PriceHistory") -> None:
        """Take ``history``'s samples on its meter's sampler thread, from a period from now on, unless subscribed
        already, sampling is off or the history is closed."""
        if self._sampler is None and self._enabled and not history.closed:
            sampler = self._sampler = history.meter.sampler
            sampler.subscribe(history.meter, history.on_sampler_tick, self.period_s)

    def stop(self, history: "PriceHistory") -> None:
        """Stop taking ``history``'s samples (after a tick under way). Idempotent."""
        sampler, self._sampler = self._sampler, None
        if sampler is not None:
            sampler.unsubscribe(history.on_sampler_tick)


def _process_cpu_s(history: "PriceHistory") -> float | None:
    try:
        return history.clocks.process_cpu_s()
    except (ProcfsReadError, OSError):
        return None
