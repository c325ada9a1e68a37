"""The energy meter: cumulative, wrap-corrected joules per domain since the meter started.

Every read of every channel, whether for a span or by the background sampler, goes
through :meth:`EnergyMeter.snapshot` under one lock, so each counter's wrap-around is
corrected against the previous read whoever made it. The sampler reads often enough
that no counter can wrap twice between two reads (see
:attr:`Channel.max_read_interval_s`); a span of any length is then exact however many
times its counters wrapped inside it.

The read policy of each channel (:class:`_ChannelState`) keeps the host program safe and
the energy honest: a counter restart is told from a wrap by the zone's power bound, a
failing read is retried with back-off before the domain is dropped, and channels that may
block (NVML) are read in their own thread with a deadline, so a stalled device makes a
span's value stale (``energy.<domain>.stale``), never the span slow.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Callable, Collection, Iterable, Mapping, NamedTuple, Sequence

from otel_joules.config import Settings
from otel_joules.errors import ConfigurationError, DeviceLostError
from otel_joules.sensors import estimator, rapl
from otel_joules.semconv import SOURCE_ESTIMATE, SOURCE_MEASURED, SOURCE_MIXED
from otel_joules.sensors.base import Channel, Domain, Method, Unavailable

_log = logging.getLogger("otel_joules")
_new_tuple = tuple.__new__
_pread = os.pread

#: The sampler never reads more often than this (it would cost CPU for nothing) ...
SAMPLER_FLOOR_S = 0.01
#: ... and never less often than this, so cached power stays fresh for metrics.
SAMPLER_CEILING_S = 60.0



class EnergySnapshot(NamedTuple):
    """Cumulative joules per domain at one instant.

    A named tuple rather than a dataclass: two are taken for every span, and tuple
    construction is several times cheaper.

    Attributes:
        monotonic_ns: ``time.monotonic_ns()`` when the counters were read.
        joules: Joules since the meter started, aligned with :attr:`EnergyMeter.domains`;
            None for a domain that has failed (it is then left out of measurements).
        stale: Positions in :attr:`joules` holding a device's last known value because its
            read did not finish within :data:`DEVICE_READ_DEADLINE_S` (a stalled NVML).
    """

    monotonic_ns: int
    joules: tuple[float | None, ...]
    stale: tuple[int, ...] = ()


@dataclass(slots=True)
class EnergyMeasurement:
    """Energy spent between two snapshots.

    Attributes:
        duration_s: Seconds between the snapshots.
        joules_by_domain: Joules per measured domain (domains that failed in between are absent).
        total_joules: Sum over the domains that do not overlap (packages, dram, GPUs,
            estimates; psys only where no package exists; never core or uncore).
        watts: ``total_joules / duration_s`` (0.0 for a zero-length interval).
        source: ``measured``, ``estimate`` or ``mixed``.
        below_resolution: True when the interval is shorter than the update period of
            a counter it includes: the values are then quantised, not wrong.
        methods_by_domain: How each domain was obtained (counter, integrated power, estimate).
        stale_domains: Domains whose value at either end is a device's last known value, not a
            fresh read (the device did not answer within :data:`DEVICE_READ_DEADLINE_S`): the
            span's figure for them is late, not lost; the energy shows up in later spans.

    Not frozen: one is built for every span, and a frozen dataclass's ``__init__`` costs
    several times more. Treat it as read-only.
    """

    duration_s: float
    joules_by_domain: Mapping[str, float]
    total_joules: float
    watts: float
    source: str
    below_resolution: bool
    methods_by_domain: Mapping[str, Method] = field(default_factory=dict)
    stale_domains: tuple[str, ...] = ()


#: Longest a snapshot waits for a device read that may stall (NVML): past this, the span
#: gets the domain's last known value, flagged stale, and the read finishes off the span path.
#: NVML's counter updates about every 100 ms, so a longer wait gains nothing; a shorter one
#: flagged healthy reads stale on a loaded machine (the reader thread waits for the GIL and a
#: core). A stalled device costs this once per stall: later snapshots go on at once.
DEVICE_READ_DEADLINE_S = 0.1
#: A device read (NVML) that started less than this long ago is reused by a snapshot instead of
#: handing a new read to the device's thread: the hand-off (two thread switches and the GIL) costs
#: ~10-20 us, more than a bare span, while NVML's counter itself updates only about every 100 ms,
#: so a value at most 1 ms old (1% of that period) is one a fresh read would almost always return.
#: Back-to-back spans then share one read per millisecond; spans further apart read as before.
DEVICE_FRESH_S = 0.001
#: A failing read is retried after this long, doubling after every further failure ...
READ_RETRY_FIRST_DELAY_S = 0.05
#: ... and the domain is dropped for good after this many consecutive failures (~6 s).
READ_FAILURES_BEFORE_DROP = 8
#: A wrap must fit the zone's power bound x the time between the reads, within this factor
#: (RAPL's PL2 bursts exceed the long-term limit) ...
RESET_POWER_TOLERANCE = 2.0
#: ... plus this much time at full power (counter update period and read jitter).
RESET_SLACK_S = 0.01


_NO_RESULTS: tuple[int | Exception, ...] = ()


class _DeviceReader:
    """Reads one channel that may block (NVML) in its own thread, so a snapshot waits at most a deadline.

    A read is requested by :meth:`poll`; if it completes within
    :data:`DEVICE_READ_DEADLINE_S` of its request the caller gets it, else the caller goes on
    without it and the read's result, when it comes, is handed to the next :meth:`poll`. Only
    one read is in flight at a time, so a stalled device costs one thread, not one per span.
    Results are raw counter values or the exception the read raised.
    """

    __slots__ = (
        "_read_uj", "_name", "_deadline_ns", "_fresh_ns", "_cond", "_pending", "_requested_ns", "_result", "_thread",
        "_closed", "_fresh_until_ns",
    )

    def __init__(
        self,
        read_uj: Callable[[], int],
        name: str,
        deadline_s: float = DEVICE_READ_DEADLINE_S,
        fresh_s: float = DEVICE_FRESH_S,
    ) -> None:
        self._read_uj = read_uj
        self._name = name
        self._deadline_ns = round(deadline_s * 1e9)
        self._fresh_ns = round(fresh_s * 1e9)
        self._reset()

    def _reset(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._pending = False
        self._requested_ns = 0
        self._result: list[int | Exception] = []
        self._thread: threading.Thread | None = None
        self._closed = False
        #: Until this instant the last read, a success already handed over, counts as fresh (DEVICE_FRESH_S).
        self._fresh_until_ns = 0

    def poll(self) -> tuple[Sequence[int | Exception], bool]:
        """Results of reads that finished late, then this read's; and whether this read finished in time.

        No new result and True when the last successful read, already handed over, started less
        than :data:`DEVICE_FRESH_S` ago: the caller's last value is then as good as a new read.
        """
        # Read without the lock: a result appended meanwhile is simply taken by the next poll, in order.
        if not self._result and not self._pending and time.monotonic_ns() < self._fresh_until_ns:
            return _NO_RESULTS, True
        with self._cond:
            late, self._result = self._result, []
            if self._closed:
                return late, False
            if not self._pending:
                self._pending = True
                self._requested_ns = time.monotonic_ns()
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name=f"otel-joules-read-{self._name}", daemon=True)
                    self._thread.start()
                self._cond.notify_all()
            # The deadline counts from the request: a read that already overran it makes
            # later snapshots go on at once instead of each waiting the deadline again.
            deadline_ns = self._requested_ns + self._deadline_ns
            while not self._result:
                remaining_ns = deadline_ns - time.monotonic_ns()
                if remaining_ns <= 0:
                    return late, False
                self._cond.wait(remaining_ns / 1e9)
            fresh, self._result = self._result, []
            return late + fresh, True

    def _run(self) -> None:
        cond = self._cond
        while True:
            with cond:
                while not self._pending and not self._closed:
                    cond.wait()
                if self._closed:
                    return
            started_ns = time.monotonic_ns()
            try:
                value: int | Exception = self._read_uj()
            except Exception as exc:  # noqa: BLE001 - handed to the meter's failure policy
                value = exc
            with cond:
                self._result.append(value)
                self._pending = False
                # Only a success is worth reusing: a failure goes through the meter's retry policy.
                self._fresh_until_ns = 0 if isinstance(value, Exception) else started_ns + self._fresh_ns
                cond.notify_all()

    def close(self) -> None:
        """Stop the thread (a read in flight finishes on its own; its thread is a daemon)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def after_fork_in_child(self) -> None:
        """The thread does not exist in a child and the condition may be held: start afresh."""
        self._reset()


class _ChannelState:
    """Per-channel bookkeeping and read policy, touched only under the meter's lock.

    * Wrap or restart: a counter lower than before either wrapped (energy = range - before
      + after) or restarted from 0 (driver reload, suspend/resume). A wrap that implies more
      energy than the zone's power bound allows in the time between the reads, when the new
      value itself fits that bound, was a restart: count from the new origin, say so once.
    * Failures: a failed read is retried with back-off (the domain is left out of spans
      meanwhile); the domain is dropped only after :data:`READ_FAILURES_BEFORE_DROP`
      consecutive failures or a lost device. Each fault is said once, when its outcome is
      known: dropped, or back (with the error and how long). The counter is cumulative, so
      the first good read covers the gap: no energy is invented or lost.
    * Channels that may block are read through a :class:`_DeviceReader`; :attr:`stale` says
      the last :meth:`read_joules` returned the last known value instead of a fresh one.
    """

    __slots__ = (
        "channel", "read_uj", "wrap_uj", "max_power_watts", "last_raw_uj", "last_ns", "total_uj", "failed",
        "failures", "retry_at_ns", "first_failure_ns", "first_error", "resets", "reader", "stale", "fd",
    )

    def __init__(self, channel: Channel, first_raw_uj: int | None, first_ns: int | None = None) -> None:
        self.channel = channel
        self.read_uj = channel.read_uj  # bound once: this runs twice per span per domain
        #: Read inline by the snapshot when the channel is a plain counter file (Channel.pread_fd).
        self.fd = channel.pread_fd
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
        self.reader = _DeviceReader(channel.read_uj, channel.domain.id) if channel.may_block else None
        self.stale = False

    def read_joules(self, now_ns: int | None = None) -> float | None:
        """Read the channel; return wrap-corrected joules since the meter started, None while failing."""
        if self.failed:
            return None
        if now_ns is None:
            now_ns = time.monotonic_ns()
        if self.failures and now_ns < self.retry_at_ns:
            return None  # backing off after a failure
        if self.reader is not None:
            return self._read_off_path(now_ns)
        try:
            raw = self.read_uj()
        except Exception as exc:  # noqa: BLE001 - never raise into the user's span
            self._failed_read(exc, now_ns)
            return None
        self._advance(raw, now_ns)
        return self.total_uj / 1e6

    def _read_off_path(self, now_ns: int) -> float | None:
        values, fresh = self.reader.poll()  # type: ignore[union-attr]
        for value in values:
            if isinstance(value, Exception):
                self._failed_read(value, now_ns)
            else:
                self._advance(value, now_ns)
        self.stale = not fresh
        if self.failed or (values and isinstance(values[-1], Exception)):
            return None
        if self.failures and not fresh:
            return None  # still failing as far as we know
        return self.total_uj / 1e6

    def _advance(self, raw: int, now_ns: int) -> None:
        if self.failures:
            self._recovered(now_ns)
            if self.last_raw_uj is None:  # the first read of all failed: this one is the origin
                self.last_raw_uj, self.last_ns = raw, now_ns
                return
        delta = raw - self.last_raw_uj  # type: ignore[operator]
        if delta < 0:
            if self.wrap_uj is None or self._restarted(raw, delta + self.wrap_uj, now_ns):
                # A counter that cannot wrap went backwards, or a wrap the hardware could not
                # have produced in the time: the counter restarted. Count from the new origin.
                delta = raw
            else:
                delta += self.wrap_uj
        self.last_raw_uj = raw
        self.last_ns = now_ns
        self.total_uj += delta

    def _restarted(self, raw_uj: int, wrapped_uj: int, now_ns: int) -> bool:
        if self.max_power_watts is None:
            return False
        elapsed_s = max(0, now_ns - self.last_ns) / 1e9
        allowed_uj = self.max_power_watts * (elapsed_s * RESET_POWER_TOLERANCE + RESET_SLACK_S) * 1e6
        # Both must hold: the wrap is impossible and the restart is possible. Where neither
        # is (a stalled clock), a wrap is assumed as before.
        if wrapped_uj <= allowed_uj or raw_uj > allowed_uj:
            return False
        self.resets += 1
        if self.resets == 1:
            _log.warning(
                "otel-joules: the %s counter restarted (%d uJ -> %d uJ in %.3f s; a wrap would mean %.0f J, more than "
                "its %.0f W bound allows): counting from the new value (driver reload or suspend/resume?)",
                self.channel.domain.id,
                self.last_raw_uj,
                raw_uj,
                elapsed_s,
                wrapped_uj / 1e6,
                self.max_power_watts,
            )
        return True

    def _failed_read(self, exc: BaseException, now_ns: int) -> None:
        # One message per fault, when its outcome is known: dropped (here) or back (_recovered).
        self.failures += 1
        if self.failures == 1:
            self.first_failure_ns = now_ns
            self.first_error = str(exc)
        if not (isinstance(exc, DeviceLostError) or self.failures >= READ_FAILURES_BEFORE_DROP):
            self.retry_at_ns = now_ns + round(READ_RETRY_FIRST_DELAY_S * 2 ** (self.failures - 1) * 1e9)
            return
        self.failed = True
        if self.reader is not None:
            self.reader.close()
        domain_id = self.channel.domain.id
        _log.warning(
            "otel-joules: stopped measuring %s%s: %s. Other domains are still measured; "
            "spans and metrics leave %s out from now on.",
            domain_id,
            "" if self.failures == 1 else f" after {self.failures} failed reads over {(now_ns - self.first_failure_ns) / 1e9:.1f} s",
            exc,
            domain_id,
        )

    def _recovered(self, now_ns: int) -> None:
        _log.warning(
            "otel-joules: %s could not be read %d time(s) over %.1f s (%s) and reads again: spans that ended "
            "meanwhile left it out; it is measured again (its counter is cumulative, so nothing spent in the gap is lost).",
            self.channel.domain.id,
            self.failures,
            (now_ns - self.first_failure_ns) / 1e9,
            self.first_error,
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


class EnergyMeter:
    """Reads every energy domain of this machine and keeps wrap-corrected totals.

    Most code should use the process-wide meter from
    :func:`otel_joules.meter.get_energy_meter`; construct one directly for a custom
    sysfs root, GPU selection or channel list.

    Args:
        sysfs_root: Where sysfs is mounted (default ``OTEL_JOULES_SYSFS_ROOT`` or ``/sys``).
        gpus: GPUs to measure by NVML index or UUID; None selects the GPUs this process
            may use (``CUDA_VISIBLE_DEVICES``); an empty sequence measures no GPU.
        devices_by_pid: Measure only GPUs running a process of this process tree.
        estimate: Add the CPU-time estimator: None (default) where no RAPL zone can be
            read, True always, False never.
        host: Measure host-level domains (RAPL or the estimator); False measures GPUs only.
            Every process may measure the host: shares (:mod:`otel_joules.attribution`) add up.
        settings: Resolved settings; built from the environment when omitted.
        channels: Use exactly these channels instead of discovering hardware.
        sample: Run the background sampler (needed for wrap safety and power integration).
        max_snapshot_age_s: Reuse a snapshot younger than this instead of reading the
            counters again (default 0: every snapshot reads; ``OTEL_JOULES_MAX_SNAPSHOT_AGE_S``).
            Hardware counters change only every update period (RAPL ~1 ms, NVML ~100 ms),
            so a window well below it, such as 0.0002 s, costs at most one counter update
            at a span's ends while sparing the reads of back-to-back and nested spans.
        procfs_root: Where procfs is mounted, for the attribution of energy to processes
            and spans (default ``OTEL_JOULES_PROCFS_ROOT`` or ``/proc``; see
            :mod:`otel_joules.attribution`).
    """

    def __init__(
        self,
        *,
        sysfs_root: str | None = None,
        gpus: Sequence[int | str] | None = None,
        devices_by_pid: bool = False,
        estimate: bool | None = None,
        host: bool = True,
        settings: Settings | None = None,
        channels: Iterable[Channel] | None = None,
        sample: bool = True,
        max_snapshot_age_s: float | None = None,
        procfs_root: str | None = None,
    ) -> None:
        self.settings = settings or Settings.from_env(
            sysfs_root=sysfs_root, max_snapshot_age_s=max_snapshot_age_s, procfs_root=procfs_root
        )
        unavailable: list[Unavailable] = []
        # GPU channels' first reads, made within discovery's deadline (a stalled NVML must not
        # hold up the program here either).
        first_reads_uj: dict[str, int | Exception] = {}
        if channels is None:
            found = _discover(self.settings, gpus, devices_by_pid, estimate, host, unavailable, first_reads_uj)
        else:
            found = list(channels)
        ids = [c.domain.id for c in found]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise ConfigurationError(f"two channels measure the same domain(s) {duplicates}; give each domain once")
        self.unavailable: tuple[Unavailable, ...] = tuple(unavailable)
        self._lock = threading.Lock()
        self._states: list[_ChannelState] = []
        for channel in found:
            try:
                first: int | None = _first_read_uj(channel, first_reads_uj)
                failure: Exception | None = None
            except DeviceLostError as exc:
                self.unavailable += (Unavailable(channel.domain.id, f"first read failed: {exc}"),)
                channel.close()
                continue
            except Exception as exc:  # noqa: BLE001 - a sensor must never break the user's program
                # Maybe transient: retried like any failed read; its first good read is the origin.
                first, failure = None, exc
            state = _ChannelState(channel, first, time.monotonic_ns())
            if failure is not None:
                state._failed_read(failure, state.last_ns)
            self._states.append(state)
        self.domains: tuple[Domain, ...] = tuple(s.channel.domain for s in self._states)
        self._index = {d.id: i for i, d in enumerate(self.domains)}
        # What measure() needs per domain, unpacked once instead of per span.
        self._plan = tuple(
            (d.id, d.method, d.in_total, d.method.is_measurement, d.update_period_s) for d in self.domains
        )
        self._max_snapshot_age_ns = round(self.settings.max_snapshot_age_s * 1e9)
        self._last_snapshot: EnergySnapshot | None = None
        self._sample = sample
        self._sampler: _Sampler | None = None
        self._closed = False
        self.sample_period_s = _sample_period_s(s.channel for s in self._states)
        self._off_path = tuple(i for i, s in enumerate(self._states) if s.reader is not None)
        _live_meters.add(self)

    # -- reading -----------------------------------------------------------------------------

    def snapshot(self) -> EnergySnapshot:
        """Read every counter now and return joules per domain since the meter started.

        With ``max_snapshot_age_s`` > 0, a snapshot younger than that is returned again
        instead of reading the counters (see the class docstring).

        Never raises for a sensor failure: a failing domain is reported once (logging
        ``WARNING`` on the ``otel_joules`` logger) and is None from then on.
        """
        if self._sampler is None and self._sample and not self._closed:
            self._start_sampler()
        with self._lock:
            now_ns = time.monotonic_ns()
            if self._closed:
                # Spans ended by other exit hooks after the meter closed: leave them
                # without energy rather than read closed descriptors and warn per domain.
                return _new_tuple(EnergySnapshot, (now_ns, (None,) * len(self._states), ()))
            cached = self._last_snapshot
            if cached is not None and now_ns - cached[0] < self._max_snapshot_age_ns:
                return cached
            values: list[float | None] = []
            append = values.append
            for state in self._states:
                # The common case inlined (this runs for every domain, twice per span): a healthy
                # counter read in this thread that did not go backwards. Anything else (backing
                # off, failed, read off the span path, a wrap or restart) takes read_joules.
                if state.failures or state.reader is not None:
                    append(state.read_joules(now_ns))
                    continue
                fd = state.fd
                try:
                    if fd is None:
                        raw = state.read_uj()
                    else:
                        # Channel.pread_fd: the channel's read_uj without the call. Anything odd is
                        # read again by read_uj below, which names the problem.
                        raw = int(_pread(fd, 32, 0))
                        if raw < 0 or raw > state.wrap_uj:  # type: ignore[operator]
                            raise ValueError(raw)
                except Exception:  # noqa: BLE001 - never raise into the user's span
                    try:
                        raw = state.read_uj()
                    except Exception as exc:  # noqa: BLE001 - never raise into the user's span
                        state._failed_read(exc, now_ns)
                        append(None)
                        continue
                last_uj = state.last_raw_uj
                if raw >= last_uj:  # type: ignore[operator]
                    state.total_uj += raw - last_uj  # type: ignore[operator]
                    state.last_raw_uj = raw
                    state.last_ns = now_ns
                else:
                    state._advance(raw, now_ns)
                append(state.total_uj / 1e6)
            # tuple.__new__ skips the named tuple's Python-level __new__: this runs twice per span.
            joules = tuple(values)
            stale = self._stale_positions(joules) if self._off_path else ()
            snapshot = _new_tuple(EnergySnapshot, (now_ns, joules, stale))
            self._last_snapshot = snapshot
            return snapshot

    def _stale_positions(self, joules: tuple[float | None, ...]) -> tuple[int, ...]:
        states = self._states
        return tuple(i for i in self._off_path if states[i].stale and joules[i] is not None)

    def measure(
        self,
        start: EnergySnapshot,
        end: EnergySnapshot,
        domains: Collection[str] | None = None,
        *,
        constant_watts: Mapping[str, float] | None = None,
    ) -> EnergyMeasurement:
        """Energy spent between two snapshots of this meter.

        Args:
            start: The earlier snapshot.
            end: The later snapshot.
            domains: Only these domain ids count (joules, total, source and
                below_resolution are computed over them alone); None: every domain.
            constant_watts: Modelled domains at a constant power (carbontracker's simulated
                devices), by domain id: ``watts x duration_s`` joules each, reported as
                :attr:`Method.ESTIMATE` and added to the total.

        Raises:
            ConfigurationError: ``domains`` names a domain this meter does not measure, or
                ``constant_watts`` names one it does.
        """
        duration_s = max(0, end.monotonic_ns - start.monotonic_ns) / 1e9
        rows: Iterable[tuple[tuple[str, Method, bool, bool, float], float | None, float | None]] = zip(
            self._plan, start.joules, end.joules
        )
        if domains is not None or constant_watts is not None:
            # Not for every span: only callers that choose domains pay for building rows.
            rows = self._selected_rows(rows, domains, constant_watts or {}, duration_s)
        by_domain: dict[str, float] = {}
        methods: dict[str, Method] = {}
        total = 0.0
        measured = estimated = False
        slowest_update_s = 0.0
        for (domain_id, method, in_total, is_measurement, update_period_s), a, b in rows:
            if a is None or b is None:
                continue
            joules = b - a
            by_domain[domain_id] = joules
            methods[domain_id] = method
            if in_total:
                total += joules
                if is_measurement:
                    measured = True
                else:
                    estimated = True
            if update_period_s > slowest_update_s:
                slowest_update_s = update_period_s
        stale_domains: tuple[str, ...] = ()
        if start.stale or end.stale:
            ids = [self.domains[i].id for i in {*start.stale, *end.stale}]
            stale_domains = tuple(sorted(d for d in ids if d in by_domain))
        return EnergyMeasurement(
            duration_s,
            by_domain,
            total,
            total / duration_s if duration_s > 0 else 0.0,
            SOURCE_MIXED if measured and estimated else SOURCE_ESTIMATE if estimated else SOURCE_MEASURED,
            duration_s < slowest_update_s,
            methods,
            stale_domains,
        )

    def _selected_rows(
        self,
        rows: Iterable[tuple[tuple[str, Method, bool, bool, float], float | None, float | None]],
        domains: Collection[str] | None,
        constant_watts: Mapping[str, float],
        duration_s: float,
    ) -> list[tuple[tuple[str, Method, bool, bool, float], float | None, float | None]]:
        """``measure``'s rows restricted to ``domains``, plus one row per constant-power domain."""
        if domains is not None:
            for domain_id in domains:
                self.domain_index(domain_id)  # raises for a domain not measured here
            rows = [row for row in rows if row[0][0] in domains]
        else:
            rows = list(rows)
        for domain_id, watts in constant_watts.items():
            if domain_id in self._index:
                raise ConfigurationError(
                    f"constant_watts names {domain_id!r}, which this meter measures; give a modelled domain its own id"
                )
            # An estimate that never changes between reads: nothing to be below the resolution of.
            rows.append(((domain_id, Method.ESTIMATE, True, False, 0.0), 0.0, watts * duration_s))
        return rows

    def domain_index(self, domain_id: str) -> int:
        """Position of ``domain_id`` in :attr:`domains` and in snapshots."""
        try:
            return self._index[domain_id]
        except KeyError:
            known = ", ".join(self._index) or "none"
            raise ConfigurationError(f"domain {domain_id!r} is not measured here (measured: {known})") from None

    # -- lifecycle ---------------------------------------------------------------------------

    def _start_sampler(self) -> None:
        with self._lock:
            if self._sampler is None and not self._closed and self.sample_period_s is not None:
                self._sampler = _Sampler(self, self.sample_period_s)
                self._sampler.start()

    def close(self) -> None:
        """Stop the sampler and release every channel. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            sampler, self._sampler = self._sampler, None
        if sampler is not None:
            sampler.stop()
        with self._lock:
            for state in self._states:
                try:
                    state.close()
                except Exception:  # noqa: BLE001 - closing must not fail shutdown
                    pass
        _live_meters.discard(self)

    def _after_fork_in_child(self) -> None:
        # The sampler thread does not exist in the child and the lock may be held by a
        # thread that was copied mid-read: rebuild both, and let channels re-acquire
        # handles (NVML) before the child's first read.
        self._lock = threading.Lock()
        self._sampler = None
        for state in self._states:
            state.after_fork_in_child()

    def __enter__(self) -> "EnergyMeter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"EnergyMeter(domains={[d.id for d in self.domains]})"


def _discover(
    settings: Settings,
    gpus: Sequence[int | str] | None,
    devices_by_pid: bool,
    estimate: bool | None,
    host: bool,
    unavailable: list[Unavailable],
    first_reads_uj: dict[str, int | Exception],
) -> list[Channel]:
    channels: list[Channel] = []
    if host:
        found = rapl.discover(settings)
        channels += found.channels
        unavailable += found.unavailable
        if estimate or (estimate is None and not found.channels):
            estimated = estimator.discover(settings)
            channels += estimated.channels
            unavailable += estimated.unavailable
    elif estimate:
        raise ConfigurationError("estimate=True needs host=True: the estimator measures the host's CPU and memory")
    if gpus is not None and len(gpus) == 0:
        return channels  # explicitly no GPU: do not even load NVML
    gpu_found = _discover_gpus(settings, gpus, devices_by_pid)
    channels += gpu_found.discovery.channels
    unavailable += gpu_found.discovery.unavailable
    first_reads_uj.update(gpu_found.first_reads_uj)
    return channels


def _discover_gpus(settings: Settings, gpus: Sequence[int | str] | None, devices_by_pid: bool):  # type: ignore[no-untyped-def]
    from otel_joules.sensors import nvml

    return nvml.discover_within(settings, gpus=gpus, devices_by_pid=devices_by_pid)


def _first_read_uj(channel: Channel, first_reads_uj: dict[str, int | Exception]) -> int:
    """The channel's first reading: made during discovery if it was, else now."""
    value = first_reads_uj.pop(channel.domain.id, None)
    if value is None:
        return channel.read_uj()
    if isinstance(value, Exception):
        raise value
    return value


def _sample_period_s(channels: Iterable[Channel]) -> float | None:
    """Sampler period: the tightest channel bound, within floor and ceiling; None if no channel needs one."""
    bounds = [c.max_read_interval_s for c in channels if c.max_read_interval_s is not None]
    if not bounds:
        return None
    return min(max(min(bounds), SAMPLER_FLOOR_S), SAMPLER_CEILING_S)


class _Sampler(threading.Thread):
    """Reads the meter periodically so no counter wraps twice unseen and power is integrated."""

    def __init__(self, meter: EnergyMeter, period_s: float) -> None:
        super().__init__(name="otel-joules-sampler", daemon=True)
        # A weak reference: a meter nobody uses any more must be collectable even
        # though its sampler thread still runs.
        self._meter_ref = weakref.ref(meter)
        self._period_s = period_s
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self._period_s):
            meter = self._meter_ref()
            if meter is None:
                return
            meter.snapshot()
            del meter

    def stop(self) -> None:
        self._stop_event.set()
        if self is not threading.current_thread():
            self.join(timeout=5)


#: Every open meter, so a fork can repair them all. Part of the meter registry's
#: lifecycle, not user-visible state; weak so it never keeps a meter alive.
_live_meters: "weakref.WeakSet[EnergyMeter]" = weakref.WeakSet()


def _repair_meters_after_fork() -> None:
    for meter in list(_live_meters):
        meter._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_repair_meters_after_fork)
