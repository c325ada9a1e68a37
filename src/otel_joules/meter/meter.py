"""The energy meter: cumulative, wrap-corrected joules per domain since the meter started.

Every read of every channel, whether for a span or by the background sampler, goes
through :meth:`EnergyMeter.snapshot` under one lock, so each counter's wrap-around is
corrected against the previous read whoever made it. The sampler reads often enough
that no counter can wrap twice between two reads (see
:attr:`Channel.max_read_interval_s`); a span of any length is then exact however many
times its counters wrapped inside it.

The read policy of each channel (:class:`_ChannelState`) keeps the host program safe and
the energy honest: a counter restart is told from a wrap by the zone's power bound, a move
that bound rules out is a jump, not energy (``energy.<domain>.rejected_jump``), a failing
read is retried with back-off before the domain is dropped (spans meanwhile say it is
``energy.<domain>.missing``), and channels that may block (NVML) are read in their own
thread with a deadline, so a stalled device makes a span's value stale
(``energy.<domain>.stale``), never the span slow.

This module holds the meter and its values; the per-channel read policy is in
:mod:`otel_joules.meter.channels` (applied in :mod:`otel_joules.meter._channels`), the background sampler in :mod:`otel_joules.meter.sampler`.
Its values (:class:`EnergySnapshot`, :class:`EnergyMeasurement`) are in :mod:`otel_joules.meter.values`, its
history of sampled snapshots in :mod:`otel_joules.meter.history`, and the intervals it measures
(:meth:`EnergyMeter.open_interval`, :meth:`EnergyMeter.close_interval`) in :mod:`otel_joules.meter.interval`.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from types import MethodType
from typing import Callable, Collection, Iterable, Mapping, Sequence

from otel_joules.config import Settings
from otel_joules.errors import ConfigurationError, DeviceLostError, SensorReadError
from otel_joules.meter._channels import _ChannelState
from otel_joules.meter.outages import Outages
from otel_joules.meter.values import EnergyMeasurement, EnergySnapshot
from otel_joules.meter.energy import EnergyPlan, energy_between, estimate_band
from otel_joules.meter.fastpath import COMPILED, use_compiled
from otel_joules.meter.history import SnapshotHistory
from otel_joules.meter.interval import close_interval, open_interval
from otel_joules.meter.sampler import MeterSampler, _sample_period_s
from otel_joules.sensors import agent, estimator, hwmon, overlap, rapl
from otel_joules.sensors.overlap import Overlap
from otel_joules.semconv import KIND_CPU, KIND_GPU, KIND_PLATFORM, SOURCE_ESTIMATE, SOURCE_MIXED, SOURCE_PARTIAL
from otel_joules.sensors.base import Channel, Discovery, Domain, Method, Unavailable, domain_kinds
from otel_joules.sensors.gpu_selection import GpuInfo

_new_tuple = tuple.__new__
_pread = os.pread


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
        #: Estimates that stand in for the agent's domains while it is away (read only then).
        standby: list[Channel] = []
        overlaps: list[Overlap] = []
        if channels is None:
            found = _discover(self.settings, gpus, devices_by_pid, estimate, host, unavailable, first_reads_uj, standby, overlaps)
        else:
            found = list(channels)
        primary_count = len(found)
        found += standby
        ids = [c.domain.id for c in found]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise ConfigurationError(f"two channels measure the same domain(s) {duplicates}; give each domain once")
        self.unavailable: tuple[Unavailable, ...] = tuple(unavailable)
        #: Where two sources cover the same hardware: which one is left out of the total (or not read), and why.
        self.overlaps: tuple[Overlap, ...] = tuple(overlaps)
        self._lock = threading.Lock()
        self._states: list[_ChannelState] = []
        #: Bumped by a channel at every rejected jump (shared with the states): the snapshot then
        #: renews :attr:`_jump_counts`.
        self._jump_events = [0]
        self._jumps_seen = 0
        self._jump_counts: tuple[int, ...] = ()
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
            if first is None and failure is None:
                # A source away at the very start (the agent): retried like a failed first read.
                failure = SensorReadError(f"{channel.domain.id}: its source is away")
            state = _ChannelState(channel, first, time.monotonic_ns(), self._jump_events)
            if failure is not None:
                state.failed_read(failure, state.last_ns)
            self._states.append(state)
        #: The states read by every snapshot, and the standby estimates read only while a source is away
        #: (their positions None otherwise). Standby states come last, so positions match ``domains``.
        self._primary_states = tuple(self._states[:primary_count])
        self._standby_states = tuple(self._states[primary_count:])
        #: The agent's comings and goings, and the standby estimates that stand in meanwhile.
        self._outages = Outages(self._primary_states, self._standby_states, self.settings.agent_socket)
        #: Domains of the standby estimates (counted only while the agent is away).
        self.standby_domain_ids: tuple[str, ...] = tuple(s.channel.domain.id for s in self._standby_states)
        self.domains: tuple[Domain, ...] = tuple(s.channel.domain for s in self._states)
        #: Domains read through the agent, sorted (``energy.agent.domains``).
        self.agent_domain_ids: tuple[str, ...] = tuple(sorted(d.id for d in self.domains if d.via_agent))
        self._index = {d.id: i for i, d in enumerate(self.domains)}
        #: What :func:`~otel_joules.meter.energy.energy_between` needs of these domains, unpacked once.
        self.plan = EnergyPlan(self.domains, standby=range(len(self._primary_states), len(self._states)))
        self._ids = tuple(d.id for d in self.domains)
        self._methods = tuple(d.method for d in self.domains)
        #: ``energy.domain_kinds`` of every measurement over all domains, built once.
        self.domain_kinds = domain_kinds(self.domains)
        #: ``energy.platform.domain``: the broadest whole-platform reading that is not the total itself (the
        #: components are: it is reported beside them), by its sensor's breadth; None where there is none.
        platforms = [d for d in self.domains if d.kind == KIND_PLATFORM and not d.in_total and d.method.is_measurement]
        self.platform_domain: str | None = min(platforms, key=lambda d: d.breadth).id if platforms else None
        self._max_snapshot_age_ns = round(self.settings.max_snapshot_age_s * 1e9)
        #: Whether this meter's counter loop and its spans' attributes take the compiled path
        #: (:mod:`otel_joules.meter.fastpath`); False: the pure-Python reference.
        self.fast_path = use_compiled(self.settings)
        self._read_counters = COMPILED.read_counters if self.fast_path else read_counters  # type: ignore[union-attr]
        self._last_snapshot: EnergySnapshot | None = None
        #: The samplers' recent snapshots: what intervals with explicit times are measured in.
        self.history = SnapshotHistory()
        self._closed = False
        self.sample_period_s = _sample_period_s(s.channel for s in self._states)
        #: The meter's one sampler thread (an attributor subscribes to it).
        self.sampler = MeterSampler(self.sample_period_s, sample)
        #: Whether the first snapshot is to start the sampler (it samples on its own).
        self._start_sampling = self.sampler.own
        #: (position, state) of the channels read off the span path (NVML), for the stale flags.
        self._off_path_states = tuple((i, s) for i, s in enumerate(self._states) if s.reader is not None)
        #: The device counters a snapshot may hold (:meth:`snapshot`): cumulative, so a later read
        #: loses nothing; a power reading integrated per read is never held.
        self._holdable_states = tuple(
            s for _, s in self._off_path_states if s.channel.max_read_interval_s is None
        )
        #: What the compiled snapshot reads of this meter besides its lock and the values it keeps: fixed at start.
        self._snapshot_spec = (
            self._primary_states, self._off_path_states, tuple(self._states), self._jump_events,
            self._max_snapshot_age_ns, EnergySnapshot, self._outages if self._standby_states else None,
            self._standby_states,
        )
        if self.fast_path:
            # The compiled twin of snapshot() (otel_joules.meter._fastsnap), bound to this meter: an instance
            # attribute, found before the method. The interval's two ends likewise (otel_joules.meter.interval's
            # functions are the reference).
            self.snapshot = MethodType(COMPILED.snapshot, self)  # type: ignore[method-assign,union-attr]
            self.open_interval = MethodType(COMPILED.open_interval, self)  # type: ignore[method-assign,union-attr]
            self.close_interval = MethodType(COMPILED.close_interval, self)  # type: ignore[method-assign,union-attr]
        _live_meters.add(self)

    # -- reading -----------------------------------------------------------------------------

    def snapshot(self, *, hold_devices: bool = False) -> EnergySnapshot:
        """Read every counter now and return joules per domain since the meter started.

        With ``max_snapshot_age_s`` > 0, a snapshot younger than that is returned again
        instead of reading the counters (see the class docstring).

        ``hold_devices``: the device counters (NVML) are not read; each keeps the value last read,
        so the energy since then counts in the next snapshot that reads them. For an idle sampler,
        which must not wake a GPU's reader: such a snapshot is never reused for another caller.

        Never raises for a sensor failure: a failing domain is None (in :attr:`EnergySnapshot.missing`
        while it is retried) and said on the ``otel_joules`` logger (``WARNING``) when it starts
        failing and when it reads again or is dropped.
        """
        if self._start_sampling:
            self._start_sampling = False
            self.sampler.ensure_running(self)
        with self._lock:
            now_ns = time.monotonic_ns()
            if self._closed:
                # Spans ended by other exit hooks after the meter closed: leave them
                # without energy rather than read closed descriptors and warn per domain.
                return _new_tuple(EnergySnapshot, (now_ns, (None,) * len(self._states), (), (), self._jump_counts, None))
            cached = self._last_snapshot
            if cached is not None and now_ns - cached[0] < self._max_snapshot_age_ns:
                return cached
            outage = None
            # An idle sampler's snapshot leaves the device counters unread (see the docstring).
            held = self._holdable_states if hold_devices else ()
            for state in held:
                state.holding = True
            try:
                if self._standby_states:
                    before_uj = self._outages.agent_totals_uj() if self._outages.away else None
                    values, failing, away = self._read_counters(self._primary_states, now_ns)
                    failing, outage = self._outages.update(values, failing, away, now_ns, before_uj)
                else:
                    values, failing, away = self._read_counters(self._primary_states, now_ns)
            finally:
                for state in held:
                    state.holding = False
            # tuple.__new__ skips the named tuple's Python-level __new__: this runs twice per span.
            joules = tuple(values)
            stale: tuple[int, ...] = ()
            for i, off_path in self._off_path_states:
                if off_path.stale and joules[i] is not None:
                    stale += (i,)
            missing: tuple[int, ...] = ()
            if failing:
                # Retried, not dropped: a dropped domain is no longer one this meter measures.
                missing = tuple(i for i, s in enumerate(self._states) if s.failures and not s.failed)
            if self._jump_events[0] != self._jumps_seen:
                self._jumps_seen = self._jump_events[0]
                self._jump_counts = tuple(s.jumps for s in self._states)
            snapshot = _new_tuple(EnergySnapshot, (now_ns, joules, stale, missing, self._jump_counts, outage))
            if not hold_devices:
                self._last_snapshot = snapshot
            return snapshot

    def sample(self, *, hold_devices: bool = False, min_gap_s: float = 0.0) -> EnergySnapshot:
        """A sampler's snapshot (:meth:`snapshot`), added to :attr:`history` unless the latest one kept is under
        ``min_gap_s`` old."""
        snapshot = self.snapshot(hold_devices=hold_devices)
        if not self._closed:
            self.history.record(snapshot, round(min_gap_s * 1e9))
        return snapshot

    # An interval's two ends (:mod:`otel_joules.meter.interval`): the module's functions are this meter's methods.
    open_interval = open_interval
    close_interval = close_interval

    def device_readers_cpu_s(self) -> float:
        """CPU seconds this meter's device reader threads (NVML) have spent so far: the library's, not the program's."""
        return sum(state.reader.cpu_s for _, state in self._off_path_states)  # type: ignore[union-attr]

    def measure(
        self,
        start: EnergySnapshot,
        end: EnergySnapshot,
        domains: Collection[str] | None = None,
        *,
        constant_watts: Mapping[str, float] | None = None,
    ) -> EnergyMeasurement:
        """Energy spent between two snapshots of this meter, by domain id.

        Computed by :func:`~otel_joules.meter.energy.energy_between`, as spans' energy is.

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
        selected = None if domains is None else self.plan.selection(domains)
        energy = energy_between(self.plan, start, end, selected)
        ids = self._ids
        plan_methods = self._methods
        by_domain: dict[str, float] = {}
        methods: dict[str, Method] = {}
        for i, joules in enumerate(energy.joules):
            if joules is not None:
                by_domain[ids[i]] = joules
                methods[ids[i]] = plan_methods[i]
        total, source = energy.total_joules, energy.source
        if constant_watts:
            measured = any(
                j is not None and d.in_total and d.method.is_measurement for j, d in zip(energy.joules, self.domains)
            )
            for domain_id, watts in constant_watts.items():
                if domain_id in self._index:
                    raise ConfigurationError(
                        f"constant_watts names {domain_id!r}, which this meter measures; give a modelled domain its own id"
                    )
                # An estimate that never changes between reads: nothing to be below the resolution of.
                by_domain[domain_id] = watts * energy.duration_s
                methods[domain_id] = Method.ESTIMATE
                total += by_domain[domain_id]
            if source != SOURCE_PARTIAL:
                source = SOURCE_MIXED if measured else SOURCE_ESTIMATE
        through_agent = tuple(d for d in self.agent_domain_ids if d in by_domain) if self.agent_domain_ids else ()
        duration_s = energy.duration_s
        band = estimate_band(self.plan, energy.joules, energy.total_joules)
        if band is not None:
            # Simulated devices' constant watts are the caller's own figures: in both ends as they are.
            band = (band[0] + total - energy.total_joules, band[1] + total - energy.total_joules)
        return EnergyMeasurement(
            duration_s,
            by_domain,
            total,
            total / duration_s if duration_s > 0 else 0.0,
            source,
            energy.below_resolution,
            methods,
            tuple(ids[i] for i in energy.stale),
            tuple(ids[i] for i in energy.missing),
            tuple(ids[i] for i in energy.jumped),
            through_agent,
            self._kinds_of(domains, constant_watts),
            energy.estimated_s,
            band,
            self.plan.estimate_source if band is not None else None,
            self.platform_domain if self.platform_domain in by_domain else None,
        )

    def _kinds_of(self, domains: Collection[str] | None, constant_watts: Mapping[str, float] | None) -> tuple[str, ...] | None:
        """``energy.domain_kinds`` of a measurement over ``domains`` (None: all); None with simulated devices,
        which have no kind here."""
        if constant_watts:
            return None
        if domains is None:
            return self.domain_kinds
        return domain_kinds(d for d in self.domains if d.id in domains)

    def withheld_estimate_joules(self) -> float:
        """Standby estimates (of domains in the host's total) that the agent's counters bridged when it came
        back, or may still bridge (the current outage while shorter than a wrap of its counters): the measured
        domains hold, or will hold, that energy, so the host's total leaves these out. 0.0 without an agent."""
        return self._outages.withheld_estimate_joules(time.monotonic_ns())

    def domain_index(self, domain_id: str) -> int:
        """Position of ``domain_id`` in :attr:`domains` and in snapshots."""
        try:
            return self._index[domain_id]
        except KeyError:
            known = ", ".join(self._index) or "none"
            raise ConfigurationError(f"domain {domain_id!r} is not measured here (measured: {known})") from None

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (every snapshot from then on reads nothing)."""
        return self._closed

    def close(self) -> None:
        """Stop the sampler and release every channel. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.sampler.stop()
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
        self.sampler.after_fork_in_child()
        self._start_sampling = self.sampler.own and not self._closed
        self.history.after_fork_in_child()
        for state in self._states:
            state.after_fork_in_child()

    def __enter__(self) -> "EnergyMeter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"EnergyMeter(domains={[d.id for d in self.domains]})"


def read_counters(states: tuple[_ChannelState, ...], now_ns: int) -> tuple[list[float | None], bool, bool]:
    """Read each channel state's counter at ``now_ns``: (joules per state, whether one is failing, whether a
    source is away). The meter's lock is held.

    The pure-Python reference of :func:`otel_joules.meter._fastsnap.read_counters` (see
    :mod:`otel_joules.meter.fastpath`), which does this loop's common case in C and calls the same
    methods as here for every other.
    """
    values: list[float | None] = []
    append = values.append
    failing = away = False
    source = reading = None  # the shared reading taken in this loop (Channel.shared_reading), and its source
    for state in states:
        # The common case inlined (this runs for every domain, twice per span): a healthy
        # counter read in this thread that moved forward within its power bound's slack.
        # Anything else (backing off, failed, read off the span path, a wrap, restart or
        # larger move) takes read_joules or advance.
        reader = state.reader
        if reader is not None and now_ns < reader.fresh_until_ns and not state.failures:
            # A device read under DEVICE_FRESH_S old, already handed over: its value stands.
            append(state.total_uj / 1e6)
            continue
        if state.failures or reader is not None:
            value = state.read_joules(now_ns)
            append(value)
            if value is None:
                failing = True
            continue
        fd = state.fd
        try:
            if fd is not None:
                # Channel.pread_fd: the channel's read_uj without the call. Anything odd is
                # read again by read_uj below, which names the problem.
                raw = int(_pread(fd, 32, 0))
                if raw < 0 or raw > state.wrap_uj:  # type: ignore[operator]
                    raise ValueError(raw)
            elif state.shared is not None:
                # Channel.shared_reading: one reading for every channel that shares it, taken once per
                # snapshot (None: its source is away). Anything odd is read again by read_uj below.
                if state.shared is not source:
                    reading, source = state.shared.current(), state.shared
                raw = None if reading is None else reading[state.shared_index]
                if reading is not None and (raw is None or not 0 <= raw <= state.wrap_uj):  # type: ignore[operator]
                    raise ValueError(raw)
            else:
                raw = state.read_uj()
        except Exception:  # noqa: BLE001 - never raise into the user's span
            try:
                raw = state.read_uj()
            except Exception as exc:  # noqa: BLE001 - never raise into the user's span
                state.failed_read(exc, now_ns)
                append(None)
                failing = True
                continue
        if raw is None:
            # Its source is away for now (Channel.may_be_away): no value, not a failure.
            append(None)
            away = True
            continue
        delta = raw - state.last_raw_uj  # type: ignore[operator]
        if 0 <= delta <= state.jump_free_uj:
            state.total_uj += delta
            state.last_raw_uj = raw
            state.last_ns = now_ns
        else:
            state.advance(raw, now_ns)
        append(state.total_uj / 1e6)
    return values, failing, away


def _discover(
    settings: Settings,
    gpus: Sequence[int | str] | None,
    devices_by_pid: bool,
    estimate: bool | None,
    host: bool,
    unavailable: list[Unavailable],
    first_reads_uj: dict[str, int | Exception],
    standby: list[Channel],
    overlaps: list[Overlap],
) -> list[Channel]:
    channels: list[Channel] = []
    counters_found = False
    #: The GPUs the agent serves, by UUID, where this process reads through it: their energy comes from there.
    served_gpus: dict[str, Callable[[GpuInfo], Channel]] = {}
    if host:
        # One reader per host: where an agent answers, every process reads through it, even one that could read
        # the counters itself (root, a group given access), so the agent alone reads and publishes the host's devices.
        through = agent.discover(settings)
        if through.channels:
            found = through
            channels += through.channels
            served_gpus = agent.served_gpus(settings)
            if estimate is None:
                estimated = estimator.discover(settings)
                standby += estimated.channels
                unavailable += estimated.unavailable
        else:
            found = rapl.discover(settings)
            channels += found.channels
            unavailable += found.unavailable
            if not found.channels:
                # Why the agent could not stand in (refused, not answering) matters only where nothing else reads.
                unavailable += through.unavailable
        counters_found = bool(found.channels)
    elif estimate:
        raise ConfigurationError("estimate=True needs host=True: the estimator measures the host's CPU and memory")
    # hwmon after RAPL: a package both read is RAPL's (overlap.count_once). Its GPUs (Intel) are measured
    # unless the caller chose GPUs (NVML indices or UUIDs name other GPUs; [] names none).
    found_hwmon = hwmon.discover(settings) if host or gpus is None else Discovery()
    unavailable += found_hwmon.unavailable
    wanted = [c for c in found_hwmon.channels if (host and c.domain.kind != KIND_GPU) or (c.domain.kind == KIND_GPU and gpus is None)]
    for channel in found_hwmon.channels:
        if channel not in wanted:
            channel.close()
    kept, same = overlap.count_once(channels, wanted)
    channels += kept
    overlaps += same
    host_end = len(channels)
    if gpus is None or len(gpus) > 0:  # explicitly no GPU: do not even load NVML
        gpu_found = _discover_gpus(settings, gpus, devices_by_pid, served_gpus)
        channels += gpu_found.discovery.channels
        unavailable += gpu_found.discovery.unavailable
        first_reads_uj.update(gpu_found.first_reads_uj)
    if host:
        cpu_measured = counters_found or overlap.platform_counts(channels) or any(
            c.domain.in_total and c.domain.kind == KIND_CPU and c.domain.method.is_measurement for c in kept
        )
        if estimate or (estimate is None and not cpu_measured):
            estimated = estimator.discover(settings)
            channels[host_end:host_end] = estimated.channels  # the host's domains first, then the GPUs'
            unavailable += estimated.unavailable
    overlaps += overlap.settle_platforms(channels)
    return channels


def _discover_gpus(  # type: ignore[no-untyped-def]
    settings: Settings,
    gpus: Sequence[int | str] | None,
    devices_by_pid: bool,
    served: Mapping[str, Callable[[GpuInfo], Channel]] | None = None,
):
    """NVIDIA GPUs (NVML), then AMD GPUs (amdsmi). AMD GPUs are measured unless the caller chose GPUs: an
    explicit choice names NVML indices and UUIDs, as for hwmon's Intel GPUs. ``served``: the GPUs the agent
    serves, by UUID (NVML still lists and selects them here; their energy comes from the agent)."""
    from otel_joules.sensors import amdsmi, nvml

    found = nvml.discover_within(settings, gpus=gpus, devices_by_pid=devices_by_pid, served=served)
    if gpus is None:
        amd = amdsmi.discover_within(settings, devices_by_pid=devices_by_pid)
        found.discovery.channels += amd.discovery.channels
        found.discovery.unavailable += amd.discovery.unavailable
        found.first_reads_uj.update(amd.first_reads_uj)
    return found


def _first_read_uj(channel: Channel, first_reads_uj: dict[str, int | Exception]) -> int:
    """The channel's first reading: made during discovery if it was, else now."""
    value = first_reads_uj.pop(channel.domain.id, None)
    if value is None:
        return channel.read_uj()
    if isinstance(value, Exception):
        raise value
    return value


#: Every open meter, so a fork can repair them all. Part of the meter registry's
#: lifecycle, not user-visible state; weak so it never keeps a meter alive.
_live_meters: "weakref.WeakSet[EnergyMeter]" = weakref.WeakSet()


def _repair_meters_after_fork() -> None:
    for meter in list(_live_meters):
        meter._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_repair_meters_after_fork)
