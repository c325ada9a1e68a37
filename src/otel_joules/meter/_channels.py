"""The per-channel state the meter's snapshot reads (:class:`_ChannelState`) and the device reader thread
(:class:`_DeviceReader`): the policy of :mod:`otel_joules.meter.channels` applied.

:class:`_ChannelState` is the per-channel bookkeeping the meter's snapshot reads under its lock (the
snapshot's hot loop touches its fields directly). The policy's numbers are read from
:mod:`otel_joules.meter.channels` when used.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from otel_joules.errors import DeviceLostError
from otel_joules.semconv import (
    ENERGY_JOULES,
    ENERGY_SOURCE,
    SOURCE_PARTIAL,
    domain_missing_key,
    domain_rejected_jump_key,
)
from otel_joules.meter import channels as policy
from otel_joules.sensors.base import Channel, Method

_log = logging.getLogger("otel_joules")

#: Spans see suspend as elapsed time (their wall clock runs on) but the monotonic clock stops, and a
#: counter may count on meanwhile (RAPL's package does in s2idle): a forward move is judged over the
#: time since the last read on CLOCK_BOOTTIME, which includes suspend, where the kernel has it.
_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", None)


def _suspended_ns() -> int:
    """Nanoseconds the machine has spent suspended since boot (CLOCK_BOOTTIME - CLOCK_MONOTONIC; 0 without it)."""
    if _BOOTTIME is None:
        return 0
    return time.clock_gettime_ns(_BOOTTIME) - time.monotonic_ns()


class _DeviceReader:
    """Reads one channel that may block (NVML) in its own thread; a snapshot takes its newest value without waiting.

    The thread swaps each result in whole, as one immutable ``(sequence, started_ns, value)``
    tuple, and while snapshots keep asking (within :data:`DEVICE_IDLE_S` of the last
    :meth:`poll`) it reads again every half of the counter's update period (:attr:`period_s`:
    the domain's stated period until the readings tell, then learned from them, never faster
    than :data:`DEVICE_REREAD_MIN_S`; a power reading integrated per read keeps the stated one,
    every read of it being a new value): a snapshot then
    takes the newest value with no lock and no wait, stale only when that value started more than
    the larger of :data:`DEVICE_READ_DEADLINE_S` and one period ago (a stalled device). Only a
    poll that finds the thread idle (the first after a quiet spell, or after a failed read, which
    goes through the meter's retry policy) asks for a read and waits for it, at most the deadline
    from its request. One read is in flight at a time, so a stalled device costs one thread, not
    one per span. Values are raw counter values or the exception the read raised. The thread's
    own CPU time is kept (:attr:`cpu_s`), so an idle test can leave the library's reads out.
    """

    __slots__ = (
        "_read_uj", "_name", "_deadline_ns", "_fresh_ns", "_idle_ns", "_cond", "_pending",
        "_requested_ns", "_published", "_taken", "_wanted_until_ns", "_thread", "_closed", "fresh_until_ns",
        "_period_ns", "_reread_ns", "_stale_ns", "_gaps_ns", "_last_change", "cpu_s", "_period_guess_ns",
        "_learn_period", "_probing", "_fresh_until_next_read",
    )

    def __init__(
        self,
        read_uj: Callable[[], int],
        name: str,
        period_guess_s: float = policy.DEVICE_PERIOD_GUESS_S,
        learn_period: bool = True,
        deadline_s: float = policy.DEVICE_READ_DEADLINE_S,
        fresh_s: float = policy.DEVICE_FRESH_S,
        idle_s: float = policy.DEVICE_IDLE_S,
        fresh_until_next_read: bool = False,
    ) -> None:
        self._read_uj = read_uj
        self._fresh_until_next_read = fresh_until_next_read
        self._name = name
        self._period_guess_ns = round(period_guess_s * 1e9)
        self._learn_period = learn_period
        self._deadline_ns = round(deadline_s * 1e9)
        self._fresh_ns = round(fresh_s * 1e9)
        self._idle_ns = round(idle_s * 1e9)
        self._reset()

    def _reset(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        #: A read is asked for: requested by an idle poll, or the thread reading on while polls come.
        self._pending = False
        self._requested_ns = 0
        #: The newest read, swapped in whole by the thread: (sequence, started_ns, raw uJ or exception).
        self._published: tuple[int, int, int | Exception] | None = None
        #: Sequence of the newest read handed to the caller.
        self._taken = 0
        #: The thread reads on until this instant (each poll moves it on by DEVICE_IDLE_S).
        self._wanted_until_ns = 0
        self._thread: threading.Thread | None = None
        self._closed = False
        #: Until this instant the newest read handed over, a success, counts as fresh (DEVICE_FRESH_S):
        #: the meter's snapshot checks it inline and then does not poll.
        self.fresh_until_ns = 0
        #: CPU seconds this reader's thread has spent (written by that thread only).
        self.cpu_s = 0.0
        #: Gaps between the counter's steps seen so far (the thread's only) ...
        self._gaps_ns: list[int] = []
        #: ... and (started_ns, value, whether that reading saw a step) of the latest reading whose
        #: value differed from the one before; None after a pause (a step's time is then unknown).
        self._last_change: tuple[int, int, bool] | None = None
        #: Until the counter has stepped twice, the thread reads at DEVICE_REREAD_MIN_S, as Zeus probes
        #: NVML's period: once per reader, at most DEVICE_PERIOD_MAX_S of reads, after which every read
        #: of a counter that steps every millisecond is no older than the counter itself.
        self._probing = self._learn_period
        self._set_period(self._period_guess_ns)

    @property
    def period_s(self) -> float:
        """The counter's update period as learned so far (the domain's stated period until its readings tell)."""
        return self._period_ns / 1e9

    def _set_period(self, period_ns: int) -> None:
        self._period_ns = min(period_ns, round(policy.DEVICE_PERIOD_MAX_S * 1e9))
        floor_ns = round(policy.DEVICE_REREAD_MIN_S * 1e9)
        self._reread_ns = floor_ns if self._probing else max(self._period_ns // 2, floor_ns)
        self._stale_ns = max(self._deadline_ns, self._period_ns)

    def _learn(self, started_ns: int, value: int) -> None:
        """Learn the counter's update period from a successful reading (the thread's, while it reads on)."""
        if not self._learn_period:
            return
        last = self._last_change
        if last is not None and value == last[1]:
            if self._probing and started_ns - last[0] > round(policy.DEVICE_PERIOD_MAX_S * 1e9):
                # No step within the longest period: a counter that barely moves needs no probe.
                self._probing = False
                self._set_period(round(policy.DEVICE_PERIOD_MAX_S * 1e9))
            return
        self._last_change = (started_ns, value, last is not None)
        if last is None or not last[2]:
            return  # the first step seen: the next one gives a period
        gap_ns = started_ns - last[0]
        if self._probing:
            self._probing = False
            self._set_period(gap_ns)
            return
        gaps = self._gaps_ns
        gaps.append(gap_ns)
        one_read_ns = self._reread_ns * 3 // 2
        fast = policy.DEVICE_PERIOD_FAST_GAPS
        if len(gaps) >= fast and all(gap <= one_read_ns for gap in gaps[-fast:]):
            # Every read saw a step: the counter may step faster than we read.
            self._set_period(self._reread_ns)
            gaps.clear()
        elif len(gaps) >= policy.DEVICE_PERIOD_GAPS:
            del gaps[: -policy.DEVICE_PERIOD_GAPS]
            self._set_period(sorted(gaps)[len(gaps) // 2])

    def _take(self, published: tuple[int, int, int | Exception] | None) -> list[int | Exception]:
        """The published read if the caller has not had it yet (single consumer: the meter's lock is held)."""
        if published is None or published[0] == self._taken:
            return []
        self._taken, started_ns, value = published
        self.fresh_until_ns = 0 if isinstance(value, Exception) else started_ns + self._fresh_window_ns()
        return [value]

    def _fresh_window_ns(self) -> int:
        """How long after a read started its value stands for the snapshots (:attr:`fresh_until_ns`).

        A cumulative counter's reading (``fresh_until_next_read``) stands until the thread's next read is
        due: no newer value can exist before it, so a poll meanwhile would hand over nothing and every
        snapshot would pay for it. Within three quarters of the idle window, so the polls that keep the
        thread reading on still come while spans do. Otherwise (an integral, which grows through now)
        ``fresh_s``.
        """
        if not self._fresh_until_next_read:
            return self._fresh_ns
        return max(self._fresh_ns, min(self._reread_ns, self._idle_ns * 3 // 4))

    def poll(self) -> tuple[list[int | Exception], bool]:
        """The newest read not yet handed over (a list of at most one), and whether the value is fresh.

        Without a lock or a wait while the thread reads on and its newest value started within the
        deadline. Whether the last value handed over is still fresh enough to skip this
        (:attr:`fresh_until_ns`) is the caller's check, made before calling (the meter's snapshot).
        """
        now_ns = time.monotonic_ns()
        self._wanted_until_ns = now_ns + self._idle_ns
        published = self._published
        if (
            self._pending
            and published is not None
            and now_ns - published[1] < self._stale_ns
            and not isinstance(published[2], Exception)
        ):
            taken = self._take(published)
            if not taken and self._fresh_until_next_read:
                # The next read is due or in flight, not yet handed over: the value stands another fresh_s.
                self.fresh_until_ns = now_ns + self._fresh_ns
            return taken, True
        with self._cond:
            if self._closed:
                return self._take(self._published), False
            if not self._pending:
                published = self._published
                if published is not None and published[0] != self._taken and isinstance(published[2], Exception):
                    # A failure the caller has not seen: its retry policy decides when to read again.
                    return self._take(published), True
                self._pending = True
                self._requested_ns = now_ns
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name=f"otel-joules-read-{self._name}", daemon=True)
                    self._thread.start()
                self._cond.notify_all()
            # The deadline counts from the request: a read that already overran it makes
            # later snapshots go on at once instead of each waiting the deadline again.
            # Only a read not yet handed over that started after the request answers it (an older one
            # may be the thread's last before it went idle).
            requested_ns = self._requested_ns
            deadline_ns = requested_ns + self._deadline_ns
            while self._published is None or self._published[1] < requested_ns or self._published[0] == self._taken:
                remaining_ns = deadline_ns - time.monotonic_ns()
                if remaining_ns <= 0:
                    return self._take(self._published), False
                self._cond.wait(remaining_ns / 1e9)
            return self._take(self._published), True

    def _run(self) -> None:
        cond = self._cond
        sequence = 0
        cpu_start_s = time.thread_time()
        while True:
            with cond:
                if not self._pending and not self._closed:
                    # A pause: gaps across it say nothing about the counter's period.
                    self._last_change = None
                    self.cpu_s += time.thread_time() - cpu_start_s
                    while not self._pending and not self._closed:
                        cond.wait()
                    cpu_start_s = time.thread_time()
                if self._closed:
                    return
            started_ns = time.monotonic_ns()
            try:
                value: int | Exception = self._read_uj()
            except Exception as exc:  # noqa: BLE001 - handed to the meter's failure policy
                value = exc
            sequence += 1
            if isinstance(value, Exception):
                self._last_change = None
            else:
                self._learn(started_ns, value)
            with cond:
                self._published = (sequence, started_ns, value)
                # Read on while polls keep coming; a failure waits to be asked again (the meter's
                # retry policy decides when).
                self._pending = not isinstance(value, Exception) and time.monotonic_ns() < self._wanted_until_ns
                cond.notify_all()
                self.cpu_s += time.thread_time() - cpu_start_s
                cpu_start_s = time.thread_time()
                if self._pending and not self._closed:
                    # Timed from the read's start: the reads keep to the period's grid.
                    wait_ns = started_ns + self._reread_ns - time.monotonic_ns()
                    if wait_ns > 0:
                        cond.wait(wait_ns / 1e9)

    def close(self) -> None:
        """Stop the thread (a read in flight finishes on its own; its thread is a daemon)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def after_fork_in_child(self) -> None:
        """The thread does not exist in a child and the condition may be held: start afresh."""
        self._reset()


def _device_reader(channel: Channel, integrates: bool) -> _DeviceReader:
    """The reader thread of a channel that may block: at the counter's learned cadence, or the channel's own
    re-read period where it states one (a slowly changing or costly reading: its period is not learned).
    A cumulative counter's reading stands until the next read is due; one that ``integrates`` (taken through
    now at every snapshot) only ``DEVICE_FRESH_S``."""
    reread_s = channel.device_reread_s
    if reread_s is None:
        return _DeviceReader(
            channel.read_uj,
            channel.domain.id,
            channel.domain.update_period_s,
            learn_period=channel.max_read_interval_s is None,
            fresh_until_next_read=not integrates,
        )
    # Read every reread_s (half the period), and a value no older than that is as fresh as this channel gets.
    return _DeviceReader(channel.read_uj, channel.domain.id, 2 * reread_s, learn_period=False, fresh_s=reread_s)


class _PyChannelFields:
    """The numbers of a channel state the counter loop reads and moves, for an install without the C extension."""

    __slots__ = (
        "reader", "failures", "fd", "shared", "shared_index", "wrap_uj", "last_raw_uj", "last_ns", "total_uj", "jump_free_uj",
    )


try:
    from otel_joules.meter._fastsnap import ChannelFields as _ChannelFields
except ImportError:  # built without a C compiler
    _ChannelFields = _PyChannelFields  # type: ignore[assignment,misc]


class _ChannelState(_ChannelFields):  # type: ignore[misc,valid-type]
    """Per-channel bookkeeping and read policy, touched only under the meter's lock.

    * Wrap or restart: a counter lower than before either wrapped (energy = range - before
      + after) or restarted from 0 (driver reload, suspend/resume). A wrap that implies more
      energy than the zone's power bound allows in the time between the reads, when the new
      value itself fits that bound, was a restart: count from the new origin, say so once.
    * Jumps: a move the bound rules out (forward by more than it allows, or backward where
      neither a wrap nor a restart fits) is a counter fault: it counts as no energy, the counter
      is counted on from its new value, :attr:`jumps` grows (spans across it are flagged
      ``energy.<domain>.rejected_jump``), and the first is said once. Here, under the meter's
      lock, so every consumer of the meter (spans, metrics, the pyJoules and carbontracker
      layers) gets the same answer.
    * Failures: a failed read is retried with back-off; meanwhile the domain is left out of
      spans, which the snapshot marks (``energy.<domain>.missing``). The first failure is said
      at once (what spans carry meanwhile), and the outcome when known: dropped (after
      :data:`READ_FAILURES_BEFORE_DROP` consecutive failures or a lost device), or back (with
      how long). The counter is cumulative, so the first good read covers the gap: no energy
      is invented or lost.
    * Channels that may block are read through a :class:`_DeviceReader`; :attr:`stale` says
      the last :meth:`read_joules` returned the last known value instead of a fresh one.

    The numbers the meter's counter loop reads and moves are its base's (``ChannelFields``: C fields where
    the extension is built, which the compiled loop reads directly).
    """

    __slots__ = (
        "channel", "read_uj", "max_power_watts", "failed", "retry_at_ns", "first_failure_ns", "first_error", "resets",
        "stale", "jumps", "jump_events", "suspended_ns", "holding", "integrates",
    )

    def __init__(
        self,
        channel: Channel,
        first_raw_uj: int | None,
        first_ns: int | None = None,
        jump_events: list[int] | None = None,
    ) -> None:
        self.channel = channel
        self.read_uj = channel.read_uj  # bound once: this runs twice per span per domain
        #: Read inline by the snapshot when the channel is a plain counter file (Channel.pread_fd).
        self.fd = channel.pread_fd
        #: Read by the snapshot from a reading several channels share, once for all of them (Channel.shared_reading).
        self.shared, self.shared_index = channel.shared_reading or (None, 0)
        self.wrap_uj = channel.wrap_uj
        self.max_power_watts = channel.max_power_watts
        self.last_raw_uj = first_raw_uj
        self.last_ns = time.monotonic_ns() if first_ns is None else first_ns
        self.total_uj = 0
        self.failed = False
        self.failures = 0
        self.retry_at_ns = 0
        self.first_failure_ns = 0
        self.first_error = ""
        self.resets = 0
        #: A power reading integrated per read, read off the span path: a snapshot takes its integral through
        #: now (Channel.energy_uj_now), so a span's end is not up to a reread period late.
        self.integrates = (
            channel.may_block
            and channel.domain.method is Method.POWER_INTEGRATION
            and type(channel).energy_uj_now is not Channel.energy_uj_now
        )
        self.reader = _device_reader(channel, self.integrates) if channel.may_block else None
        self.stale = False
        #: Set by the meter around a snapshot that must not wake the device (an idle sampler's):
        #: the last value handed over stands, and the next read counts the energy since it.
        self.holding = False
        #: A forward move up to this many microjoules fits the power bound whatever the time between
        #: the reads (its slack alone allows it): the snapshot takes it without reading a clock.
        #: Without a bound nothing is a jump.
        self.jump_free_uj: float = (
            float("inf") if self.max_power_watts is None else self.max_power_watts * policy.RESET_SLACK_S * 1e6
        )
        #: Moves rejected as jumps so far (the meter's snapshots carry these counts: a span whose
        #: ends differ is flagged).
        self.jumps = 0
        #: Shared by the meter's channels: bumped at every rejected jump, so one comparison per
        #: snapshot tells the meter its counts changed.
        self.jump_events = [0] if jump_events is None else jump_events
        self.suspended_ns = _suspended_ns() if self.max_power_watts is not None else 0

    def read_joules(self, now_ns: int | None = None) -> float | None:
        """Read the channel; return wrap-corrected joules since the meter started, None while failing."""
        if self.failed:
            return None
        if now_ns is None:
            now_ns = time.monotonic_ns()
        if self.failures and now_ns < self.retry_at_ns:
            return None  # backing off after a failure
        if self.reader is not None:
            if self.holding and self.last_raw_uj is not None and not self.failures:
                return self.total_uj / 1e6
            return self._read_off_path(now_ns)
        try:
            raw = self.read_uj()
        except Exception as exc:  # noqa: BLE001 - never raise into the user's span
            self.failed_read(exc, now_ns)
            return None
        if raw is None:
            return None  # its source is away for now (Channel.may_be_away): not a failure
        self.advance(raw, now_ns)
        return self.total_uj / 1e6

    def _read_off_path(self, now_ns: int) -> float | None:
        values, fresh = self.reader.poll()  # type: ignore[union-attr]
        for value in values:
            if isinstance(value, Exception):
                self.failed_read(value, now_ns)
            elif not self.integrates or self.failures:
                # An integral's reading is taken below, through now; after a failure its reading re-originates it.
                self.advance(value, now_ns)
        self.stale = not fresh
        if self.failed or (values and isinstance(values[-1], Exception)):
            return None
        if self.failures and not fresh:
            return None  # still failing as far as we know
        if self.integrates and fresh:
            # The integral through now, not through its last reading (the thread's reading, handed over
            # above, is inside it): the integral never goes back, so no reading is counted twice.
            through_now_uj = self.channel.energy_uj_now()
            if through_now_uj is not None:
                self.advance(through_now_uj, now_ns)
        return self.total_uj / 1e6

    def advance(self, raw: int, now_ns: int) -> None:
        """Take a good reading ``raw`` (µJ) at ``now_ns``: add its move under the wrap policy, or refuse a jump its
        power bound rules out; the first good reading after failures ends the retry. The meter's counter loop
        calls it for any move it does not add itself."""
        if self.failures:
            self._recovered(now_ns)
            if self.last_raw_uj is None:  # the first read of all failed: this one is the origin
                self.last_raw_uj, self.last_ns = raw, now_ns
                return
        delta = raw - self.last_raw_uj  # type: ignore[operator]
        if delta < 0:
            if self.wrap_uj is None:
                delta = raw  # a counter that cannot wrap went backwards: it restarted
            else:
                delta = self._backward(raw, delta + self.wrap_uj)
        elif delta > self.jump_free_uj:
            delta = self._forward(raw, delta)
        self.last_raw_uj = raw
        self.last_ns = now_ns
        self.total_uj += delta

    def _allowed_uj(self, elapsed_ns: int) -> float:
        """The most energy the zone's power bound allows in ``elapsed_ns`` (tolerance and slack included)."""
        return self.max_power_watts * (elapsed_ns / 1e9 * policy.RESET_POWER_TOLERANCE + policy.RESET_SLACK_S) * 1e6  # type: ignore[operator]

    def _elapsed_ns(self) -> int:
        """Nanoseconds from the previous read to now, read after this read.

        The snapshot's timestamp is taken before its reads: a read delayed after it (the thread
        preempted, the GIL elsewhere) holds energy of more time than the timestamps say, which
        the clock read here includes. The previous read's timestamp is at most its start.
        """
        return max(0, time.monotonic_ns() - self.last_ns)

    def _backward(self, raw_uj: int, wrapped_uj: int) -> int:
        """The energy of a move to a lower value: a wrap, a restart (counted from the new value), or a jump (none)."""
        if self.max_power_watts is None:
            return wrapped_uj
        elapsed_ns = self._elapsed_ns()
        allowed_uj = self._allowed_uj(elapsed_ns)
        if wrapped_uj <= allowed_uj:
            return wrapped_uj
        if raw_uj > allowed_uj:
            # Neither a wrap nor a restart from 0 fits the bound: the counter jumped.
            return self._rejected(raw_uj, raw_uj - self.last_raw_uj, elapsed_ns, allowed_uj)  # type: ignore[operator]
        self.resets += 1
        if self.resets == 1:
            _log.warning(
                "otel-joules: the %s counter restarted (%d uJ -> %d uJ in %.3f s; a wrap would mean %.0f J, more than "
                "its %.0f W bound allows): counting from the new value (driver reload or suspend/resume?)",
                self.channel.domain.id,
                self.last_raw_uj,
                raw_uj,
                elapsed_ns / 1e9,
                wrapped_uj / 1e6,
                self.max_power_watts,
            )
        return raw_uj

    def _forward(self, raw_uj: int, delta_uj: int) -> int:
        """The energy of a move up by more than the bound's slack: the move, unless the bound rules it out."""
        elapsed_ns = self._elapsed_ns()
        # Time suspended since the last check counts as elapsed (judged on CLOCK_BOOTTIME).
        suspended_ns = _suspended_ns()
        elapsed_ns += max(0, suspended_ns - self.suspended_ns)
        self.suspended_ns = suspended_ns
        allowed_uj = self._allowed_uj(elapsed_ns)
        if delta_uj <= allowed_uj:
            return delta_uj
        return self._rejected(raw_uj, delta_uj, elapsed_ns, allowed_uj)

    def _rejected(self, raw_uj: int, delta_uj: int, elapsed_ns: int, allowed_uj: float) -> int:
        """Count a move the power bound rules out as no energy (the counter goes on from ``raw_uj``); say the first."""
        self.jumps += 1
        self.jump_events[0] += 1
        if self.jumps == 1:
            domain_id = self.channel.domain.id
            _log.warning(
                "otel-joules: the %s counter jumped by %+.1f J (%d uJ -> %d uJ) in %.3f s, more than its %.0f W bound "
                "allows (%.1f J): not counted as energy, and counted on from the new value. Spans across such a jump "
                "carry %s = true (a counter fault; later ones are not said again).",
                domain_id,
                delta_uj / 1e6,
                self.last_raw_uj,
                raw_uj,
                elapsed_ns / 1e9,
                self.max_power_watts,
                allowed_uj / 1e6,
                domain_rejected_jump_key(domain_id),
            )
        return 0

    def failed_read(self, exc: BaseException, now_ns: int) -> None:
        """Count a failed read at ``now_ns``: retry later with back-off, or drop the domain (a lost device at once)."""
        # Said when it starts (what spans carry meanwhile) and when its outcome is known: dropped
        # (here) or back (_recovered). A lost device is dropped at once: one message.
        self.failures += 1
        if self.failures == 1:
            self.first_failure_ns = now_ns
            self.first_error = str(exc)
        if not (isinstance(exc, DeviceLostError) or self.failures >= policy.READ_FAILURES_BEFORE_DROP):
            self.retry_at_ns = now_ns + round(policy.READ_RETRY_FIRST_DELAY_S * 2 ** (self.failures - 1) * 1e9)
            if self.failures == 1:
                self._retrying(exc)
            return
        self.failed = True
        if self.reader is not None:
            self.reader.close()
        domain_id = self.channel.domain.id
        _log.warning(
            "otel-joules: stopped measuring %s%s: %s. Other domains are still measured; "
            "spans and metrics leave %s out from now on (without %s: it is no longer measured here).",
            domain_id,
            "" if self.failures == 1 else f" after {self.failures} failed reads over {(now_ns - self.first_failure_ns) / 1e9:.1f} s",
            exc,
            domain_id,
            domain_missing_key(domain_id),
        )

    def _retrying(self, exc: BaseException) -> None:
        domain = self.channel.domain
        _log.warning(
            "otel-joules: %s could not be read (%s): retrying with back-off, for up to %.1f s before it is dropped. "
            "Until it reads again, spans leave it out and carry %s = true%s.",
            domain.id,
            exc,
            policy.read_retry_window_s(),
            domain_missing_key(domain.id),
            f" and {ENERGY_SOURCE} = {SOURCE_PARTIAL!r} (their {ENERGY_JOULES} is low)" if domain.in_total else "",
        )

    def _recovered(self, now_ns: int) -> None:
        _log.warning(
            "otel-joules: %s reads again after %d failed read(s) over %.1f s (%s): spans that started or ended "
            "meanwhile left it out (flagged %s); it is measured again (its counter is cumulative, so nothing spent "
            "in the gap is lost).",
            self.channel.domain.id,
            self.failures,
            (now_ns - self.first_failure_ns) / 1e9,
            self.first_error,
            domain_missing_key(self.channel.domain.id),
        )
        self.failures = 0

    def close(self) -> None:
        """Stop the device reader, if any, and release the channel."""
        if self.reader is not None:
            self.reader.close()
        self.channel.close()

    def after_fork_in_child(self) -> None:
        """Re-create what a forked child does not inherit in a usable state."""
        if self.reader is not None:
            self.reader.after_fork_in_child()
        self.channel.reset_after_fork()
