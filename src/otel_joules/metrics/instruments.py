"""Observable metric instruments following the OpenTelemetry hardware semantic conventions.

Every plain sum over one metric counts each joule once (:mod:`otel_joules.metrics.series` puts each
domain in exactly one family):

``hw.energy``       Counter, ``J``, measured top-level devices (packages, DRAM, GPUs): ``hw.id``, ``hw.type``, ``hw.name``
``hw.power``        Gauge,   ``W``, the same devices
``hw.host.energy``  Counter, ``J``, the entire host, from a whole-platform meter (psys); absent without one
``hw.host.power``   Gauge,   ``W``, the same as power
``energy.components`` Counter, ``J``, the sum of ``hw.energy`` (not the host: no fans, disks, PSU losses)
``power.components``  Gauge,   ``W``, the same as power
``energy.nested``   Counter, ``J``, readings inside another series (core, uncore: ``hw.parent``)
``power.nested``    Gauge,   ``W``, the same as power
``energy.estimate`` Counter, ``J``, modelled domains (never mixed with measurements)
``power.estimate``  Gauge,   ``W``, the same as power
``energy.missing``  Counter, ``s``, per domain: time its counter was failing and being retried
``energy.uncovered``  Counter, ``J``, the host's energy the components do not cover (``hw.host.energy`` minus
                    ``energy.components``), where a platform meter exists
``energy.coverage`` Gauge,   ``1``, ``energy.components`` / ``hw.host.energy`` since the meter started, the same
``process.energy``  Counter, ``J``, this process's attributed share per ``hw.type`` (``cpu``, ``memory``, ``gpu``)
``process.power``   Gauge,   ``W``, the same as power over the latest attribution period
``energy.unattributed``  Counter, ``J``, the host's energy given to no process, per ``hw.type`` (``cpu``, ``memory``)
``energy.baseline.power``  Gauge, ``W``, each domain's static baseline
``energy.baseline.state``  Gauge, ``1``, per domain and ``energy.baseline`` (learned, configured, unknown): 1 for the current one

A series' attributes never change during a run: a domain being retried after a failed read is
left out of the power series over that time and counted in ``energy.missing``; its energy
counters keep their last known joules. Every series carries ``energy.domain``, the key of the
span attribute ``energy.<domain>.joules``, so a span's domain joins its series on the same host.

``hw.*`` describe the hardware: every otel-joules process on a host without an agent reports the
same devices (take one per ``host.name`` and ``hw.id``, e.g. ``max``, never a sum over processes).
``process.*`` are shares: summed over processes and hosts they count each joule once
(:mod:`otel_joules.attribution`), under the attribution policy (``OTEL_JOULES_ATTRIBUTION_POLICY``).
Energy the model gives to nobody (idle periods; the static energy of unused CPU capacity under
``capacity``, all static energy under ``none``) is in ``energy.unattributed``, a host figure that
every process computes alike (from ``/proc/stat`` and the counters, from its own start): take one
per host, never a sum over processes:
``max by (hw_id) (rate(energy_unattributed_joules_total[5m]))`` beside
``sum by (service_name) (rate(process_energy_joules_total[5m]))``. (GPUs' idle energy is not in it:
a process sees only its own fraction of a GPU.)
"""

from __future__ import annotations

import atexit
import socket
import threading
import time
import weakref
from typing import Callable, Iterable

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from otel_joules._fork import register_fork_hook
from otel_joules._version import __version__
from otel_joules.attribution.attributor import Attributor
from otel_joules.attribution.registry import attributor_from
from otel_joules.attribution.shares import ATTRIBUTION_KIND
from otel_joules.meter.meter import EnergyMeasurement, EnergyMeter, EnergySnapshot
from otel_joules.metrics.series import DomainSeries, Family, device_attributes, domain_series, missing_attributes
from otel_joules.semconv import (
    BASELINE_CONFIGURED,
    BASELINE_LEARNED,
    BASELINE_UNKNOWN,
    ENERGY_BASELINE,
    ENERGY_SOURCE,
    HW_ID,
    HW_NAME,
    HW_TYPE,
    METRIC_ENERGY_BASELINE_POWER,
    METRIC_ENERGY_BASELINE_STATE,
    METRIC_ENERGY_COMPONENTS,
    METRIC_ENERGY_COMPONENTS_POWER,
    METRIC_ENERGY_COVERAGE,
    METRIC_ENERGY_ESTIMATE,
    METRIC_ENERGY_ESTIMATE_POWER,
    METRIC_ENERGY_MISSING,
    METRIC_ENERGY_NESTED,
    METRIC_ENERGY_NESTED_POWER,
    METRIC_ENERGY_UNATTRIBUTED,
    METRIC_ENERGY_UNCOVERED,
    METRIC_HW_ENERGY,
    METRIC_HW_HOST_ENERGY,
    METRIC_HW_HOST_POWER,
    METRIC_HW_POWER,
    METRIC_PROCESS_ENERGY,
    METRIC_PROCESS_POWER,
    SOURCE_ESTIMATE,
    SOURCE_MEASURED,
    SOURCE_MIXED,
)

INSTRUMENTATION_SCOPE = "otel_joules"
#: Every ``energy.baseline`` value: ``energy.baseline.state`` has one series per domain and value, for the run.
BASELINE_STATES = (BASELINE_LEARNED, BASELINE_CONFIGURED, BASELINE_UNKNOWN)
#: One collection calls the four callbacks within microseconds of each other; they
#: share a snapshot younger than this, and two collections never do.
_SNAPSHOT_REUSE_S = 0.05


class EnergyMetrics:
    """Registers the energy instruments on a meter provider and feeds them from an :class:`EnergyMeter`.

    Args:
        meter: Where the joules come from.
        meter_provider: The OpenTelemetry ``MeterProvider``; the global one when omitted.
        host_id: ``hw.id`` of the host total (default: the host name).
        attribution: Where ``process.*``, ``energy.unattributed`` and ``energy.baseline.*``
            come from, as for :class:`~otel_joules.tracing.EnergySpanProcessor`: True (default)
            the meter's shared :class:`~otel_joules.attribution.Attributor`, an Attributor that
            one, False none of those instruments (``hw.*`` only). Reading through ``otel-joules agent``,
            only ``process.*`` are registered (:attr:`publishes_host`).
        gate: Asked at each collection; while it returns False the instruments report
            nothing, so an exporter with nowhere to send (a collector that is not there,
            :class:`~otel_joules.delivery.reachability.EndpointGate`) is given nothing of
            ours to retry. Counters are cumulative: what is measured meanwhile shows up
            in the first collection after it returns True. None: always report.
    """

    def __init__(
        self,
        meter: EnergyMeter,
        meter_provider: metrics.MeterProvider | None = None,
        host_id: str | None = None,
        attribution: bool | Attributor = True,
        gate: Callable[[], bool] | None = None,
    ) -> None:
        self.meter = meter
        self.enabled = True
        self._gate = gate
        host = host_id or socket.gethostname()
        self._host_attributes = {HW_ID: host, HW_NAME: host}
        self._series = domain_series(meter.domains, host)
        self._domain_attributes = [device_attributes(domain) for domain in meter.domains]
        self._components = [s for s in self._series if s.family is Family.COMPONENT]
        self._components_attributes = {**self._host_attributes, ENERGY_SOURCE: SOURCE_MEASURED}
        #: The platform meter the host's energy comes from (``hw.host.*``), if any: coverage is measured against it.
        self._platform = next((s for s in self._series if s.family is Family.HOST), None)
        # The host's, as energy.components' (no energy.domain: that joins a domain's own joules to spans).
        self._coverage_attributes = self._components_attributes
        #: ``energy.uncovered`` last reported: it never goes back.
        self._uncovered_joules = 0.0
        #: Per domain, seconds of collection intervals at either end of which its counter was being retried.
        self._missing_s = [0.0] * len(meter.domains)
        self._missing_attributes = [missing_attributes(s) for s in self._series]
        #: ``energy.baseline.state``'s device attributes (the same as ``energy.missing``'s): which domain.
        self._baseline_state_attributes = self._missing_attributes
        self._lock = threading.Lock()
        # The metric reader's thread holds the lock across counter reads: a fork at that
        # moment must not leave the child's collections (and its exit-time freeze) waiting.
        register_fork_hook(self, "_new_lock")
        self._previous = meter.snapshot()
        self._current = self._previous
        self._current_at = time.monotonic()
        self._last_known = [0.0] * len(meter.domains)
        #: The host's total last reported: it never goes backwards.
        self._host_energy_joules = 0.0
        self._remember(self._current)
        self._frozen = False
        # At exit the SDK's meter provider collects once more, after the shared meter and
        # NVML have shut down (atexit runs hooks last-registered-first, and the provider
        # usually exists before instrument()). Freezing here, in a hook registered after
        # theirs, gives that collection the final values without reading closed counters.
        atexit.register(_freeze_at_exit, weakref.ref(self))
        provider = meter_provider or metrics.get_meter_provider()
        otel_meter = provider.get_meter(INSTRUMENTATION_SCOPE, __version__)
        #: Whether this process publishes the host's devices (``hw.*``, ``energy.components``, ``energy.nested``,
        #: ``energy.estimate``, ``energy.missing``) and host figures (``energy.unattributed``,
        #: ``energy.baseline.*``). False when the meter reads through ``otel-joules agent``: the agent
        #: publishes them, once per host, and this process only its ``process.*`` share.
        self.publishes_host: bool = not meter.agent_domain_ids
        if self.publishes_host:
            self._register_hardware(otel_meter)
        #: The attributor behind the share instruments (None: attribution is off, or CPU times cannot be read).
        self.attributor: Attributor | None = attributor_from(attribution, meter)
        if self.attributor is not None:
            self._register_shares(otel_meter, self.attributor)

    def _register_hardware(self, otel_meter: metrics.Meter) -> None:
        """The device instruments: one energy counter and one power gauge per family, the components' sum, the gaps."""
        families = (
            (Family.COMPONENT, METRIC_HW_ENERGY, METRIC_HW_POWER, "the component"),
            (Family.HOST, METRIC_HW_HOST_ENERGY, METRIC_HW_HOST_POWER, "the entire physical host (a whole-platform meter)"),
            (Family.NESTED, METRIC_ENERGY_NESTED, METRIC_ENERGY_NESTED_POWER, "a component inside another series (hw.parent)"),
            (Family.ESTIMATE, METRIC_ENERGY_ESTIMATE, METRIC_ENERGY_ESTIMATE_POWER, "a modelled component (an estimate)"),
        )
        for family, energy_name, power_name, what in families:
            members = [s for s in self._series if s.family is family]
            otel_meter.create_observable_counter(
                energy_name, [self._energy_observer(members)], unit="J", description=f"Energy consumed by {what}"
            )
            otel_meter.create_observable_gauge(
                power_name, [self._power_observer(members)], unit="W", description=f"Power consumed by {what}"
            )
        otel_meter.create_observable_counter(
            METRIC_ENERGY_COMPONENTS,
            [self._observe_components_energy],
            unit="J",
            description="Sum of the host's hw.energy series (measured components; not the whole host)",
        )
        otel_meter.create_observable_gauge(
            METRIC_ENERGY_COMPONENTS_POWER,
            [self._observe_components_power],
            unit="W",
            description="Sum of the host's hw.power series (measured components; not the whole host)",
        )
        if self._platform is not None and self._components:
            otel_meter.create_observable_counter(
                METRIC_ENERGY_UNCOVERED,
                [self._observe_uncovered],
                unit="J",
                description="The host's energy its components do not cover (hw.host.energy minus energy.components)",
            )
            otel_meter.create_observable_gauge(
                METRIC_ENERGY_COVERAGE,
                [self._observe_coverage],
                unit="1",
                description="The components' share of the host's energy (energy.components / hw.host.energy) since the publisher started",
            )
        otel_meter.create_observable_counter(
            METRIC_ENERGY_MISSING,
            [self._observe_missing],
            unit="s",
            description="Time a domain's counter failed reads and was being retried (left out of power meanwhile)",
        )

    def _register_shares(self, otel_meter: metrics.Meter, attributor: Attributor) -> None:
        """The attributor's instruments: this process's share; the host's unattributed energy and baselines where it publishes the host."""
        meter = self.meter
        self._process_attributes = {
            kind: {HW_TYPE: kind, ENERGY_SOURCE: _source(meter, kind)} for kind in attributor.kinds
        }
        #: Where the agent's domains have standby estimates, the share priced from them while it was away goes
        #: to a series of its own (energy.source estimate), never into the measured one; from the start, so
        #: neither series' attributes change during the run.
        standby_kinds = {ATTRIBUTION_KIND[d.kind] for d in meter.domains if d.id in meter.standby_domain_ids}
        self._process_estimated_attributes = {
            kind: {HW_TYPE: kind, ENERGY_SOURCE: SOURCE_ESTIMATE}
            for kind in attributor.kinds
            if kind in standby_kinds and self._process_attributes[kind][ENERGY_SOURCE] != SOURCE_ESTIMATE
        }
        self._last_process_sample = time.monotonic()
        otel_meter.create_observable_counter(
            METRIC_PROCESS_ENERGY,
            [self._observe_process_energy],
            unit="J",
            description="This process's attributed share of the host's energy, per hw.type",
        )
        otel_meter.create_observable_gauge(
            METRIC_PROCESS_POWER,
            [self._observe_process_power],
            unit="W",
            description="This process's attributed share of the host's power, per hw.type",
        )
        if self.publishes_host:
            self._register_host_figures(otel_meter, attributor)

    def _register_host_figures(self, otel_meter: metrics.Meter, attributor: Attributor) -> None:
        """The attributor's host-wide instruments: the energy given to no process, the baselines."""
        meter = self.meter
        self._unattributed_attributes = {
            kind: {**self._host_attributes, HW_TYPE: kind, ENERGY_SOURCE: _source(meter, kind)}
            for kind in attributor.kinds
        }
        otel_meter.create_observable_counter(
            METRIC_ENERGY_UNATTRIBUTED,
            [self._observe_unattributed],
            unit="J",
            description="The host's energy attributed to no process (idle), per hw.type: one per host, never summed",
        )
        otel_meter.create_observable_gauge(
            METRIC_ENERGY_BASELINE_POWER,
            [self._observe_baselines],
            unit="W",
            description="Each domain's static (idle) power (energy.baseline.state says where it comes from)",
        )
        otel_meter.create_observable_gauge(
            METRIC_ENERGY_BASELINE_STATE,
            [self._observe_baseline_states],
            unit="1",
            description="1 for where each domain's baseline comes from now (energy.baseline: learned, configured, unknown), 0 for the others",
        )

    def _new_lock(self) -> None:
        self._lock = threading.Lock()

    def _reporting(self) -> bool:
        """Whether this collection gets observations: enabled, and the gate (if any) open."""
        if not self.enabled:
            return False
        if self._gate is None:
            return True
        try:
            return bool(self._gate())
        except Exception:  # noqa: BLE001 - a failing check must not cost the metrics
            return True

    def refresh(self) -> None:
        """Make the next collection read the counters, however recent the last read."""
        with self._lock:
            self._current_at = float("-inf")

    def freeze(self) -> None:
        """Read the counters one last time; later collections report these values without reading.

        Called at interpreter exit, so the SDK's final collection still exports the run's
        last values after the counters are closed.
        """
        self.refresh()
        self._snapshots()
        self._process_sample(force=True)
        with self._lock:
            self._frozen = True

    def _snapshots(self) -> tuple[EnergySnapshot, EnergySnapshot]:
        """(previous, current) snapshots; a new current one unless the last is fresh."""
        with self._lock:
            now = time.monotonic()
            if not self._frozen and now - self._current_at >= _SNAPSHOT_REUSE_S:
                self._previous, self._current = self._current, self.meter.snapshot()
                self._current_at = now
                self._remember(self._current)
                self._count_missing(self._previous, self._current)
            return self._previous, self._current

    def _remember(self, snapshot: EnergySnapshot) -> None:
        for i, joules in enumerate(snapshot.joules):
            if joules is not None:
                self._last_known[i] = joules

    def _count_missing(self, previous: EnergySnapshot, current: EnergySnapshot) -> None:
        """Add the interval's seconds to each domain that was being retried at either end of it."""
        seconds = (current.monotonic_ns - previous.monotonic_ns) / 1e9
        for i in set(previous.missing) | set(current.missing):
            self._missing_s[i] += seconds

    def _energy_observer(self, members: list[DomainSeries]) -> Callable[[CallbackOptions], Iterable[Observation]]:
        """The callback of one family's energy counter: each member's joules since the meter started."""

        def observe(options: CallbackOptions) -> Iterable[Observation]:
            if not members or not self._reporting():
                return []
            _, current = self._snapshots()
            return [
                Observation(current.joules[s.index], s.attributes) for s in members if current.joules[s.index] is not None
            ]

        return observe

    def _power_observer(self, members: list[DomainSeries]) -> Callable[[CallbackOptions], Iterable[Observation]]:
        """The callback of one family's power gauge: each member's watts over the latest collection interval."""

        def observe(options: CallbackOptions) -> Iterable[Observation]:
            measurement = self._interval() if members and self._reporting() else None
            if measurement is None:
                return []
            joules = measurement.joules_by_domain
            return [
                Observation(joules[s.domain.id] / measurement.duration_s, s.attributes)
                for s in members
                if s.domain.id in joules
            ]

        return observe

    def _interval(self) -> EnergyMeasurement | None:
        """Energy between the two latest snapshots; None before time has passed."""
        previous, current = self._snapshots()
        measurement = self.meter.measure(previous, current)
        return measurement if measurement.duration_s > 0 else None

    def _observe_components_energy(self, options: CallbackOptions) -> Iterable[Observation]:
        if not self._components or not self._reporting():
            return []
        self._snapshots()
        # Last known values: a domain being retried keeps its joules in the sum, so it never goes backwards.
        return [Observation(sum(self._last_known[s.index] for s in self._components), self._components_attributes)]

    def _observe_components_power(self, options: CallbackOptions) -> Iterable[Observation]:
        measurement = self._interval() if self._components and self._reporting() else None
        if measurement is None:
            return []
        joules = measurement.joules_by_domain
        watts = sum(joules.get(s.domain.id, 0.0) for s in self._components) / measurement.duration_s
        return [Observation(watts, self._components_attributes)]

    def _observe_uncovered(self, options: CallbackOptions) -> Iterable[Observation]:
        if not self._reporting():
            return []
        self._snapshots()
        assert self._platform is not None
        components = sum(self._last_known[s.index] for s in self._components)
        # Never back: a platform reading a poll behind its components is caught up with, not subtracted.
        self._uncovered_joules = max(self._uncovered_joules, self._last_known[self._platform.index] - components)
        return [Observation(self._uncovered_joules, self._coverage_attributes)]

    def _observe_coverage(self, options: CallbackOptions) -> Iterable[Observation]:
        if not self._reporting():
            return []
        self._snapshots()
        assert self._platform is not None
        # Since the meter started, from last known values: a part being retried changes neither the labels nor
        # the ratio (its joules arrive when it reads again).
        platform = self._last_known[self._platform.index]
        if platform <= 0:
            return []
        return [Observation(sum(self._last_known[s.index] for s in self._components) / platform, self._coverage_attributes)]

    def _observe_missing(self, options: CallbackOptions) -> Iterable[Observation]:
        if not self._reporting():
            return []
        self._snapshots()
        return [
            Observation(self._missing_s[s.index], self._missing_attributes[s.index])
            for s in self._series
            if s.family is not Family.ESTIMATE
        ]

    def _process_sample(self, force: bool = False) -> None:
        """Extend the attribution history before a collection unless a sample is recent (or frozen)."""
        attributor = self.attributor
        if attributor is None or self._frozen:
            return
        now = time.monotonic()
        if force or now - self._last_process_sample >= _SNAPSHOT_REUSE_S:
            self._last_process_sample = now
            attributor.sample()

    def _observe_process_energy(self, options: CallbackOptions) -> Iterable[Observation]:
        if self.attributor is None or not self._reporting():
            return []
        self._process_sample()
        return self._split_by_source(self.attributor.process_joules(), self.attributor.process_joules_estimated)

    def _observe_unattributed(self, options: CallbackOptions) -> Iterable[Observation]:
        if self.attributor is None or not self._reporting():
            return []
        self._process_sample()
        joules = self.attributor.unattributed_joules()
        return [Observation(j, self._unattributed_attributes[kind]) for kind, j in joules.items()]

    def _observe_baselines(self, options: CallbackOptions) -> Iterable[Observation]:
        if self.attributor is None or not self._reporting():
            return []
        self._process_sample()
        return [
            Observation(watts, self._domain_attributes[i]) for i, watts, _ in self.attributor.baseline_watts() if watts is not None
        ]

    def _observe_baseline_states(self, options: CallbackOptions) -> Iterable[Observation]:
        if self.attributor is None or not self._reporting():
            return []
        self._process_sample()
        return [
            Observation(int(state == current), {**self._baseline_state_attributes[i], ENERGY_BASELINE: state})
            for i, _, current in self.attributor.baseline_watts()
            for state in BASELINE_STATES
        ]

    def _observe_process_power(self, options: CallbackOptions) -> Iterable[Observation]:
        if self.attributor is None or not self._reporting():
            return []
        self._process_sample()
        return self._split_by_source(self.attributor.process_watts(), self.attributor.process_watts_estimated)

    def _split_by_source(
        self, values: dict[str, float], estimated_of: Callable[[], dict[str, float]]
    ) -> list[Observation]:
        """A process share per kind as observations: the part priced from standby estimates apart, where it can be."""
        estimated_attributes = self._process_estimated_attributes
        estimated = estimated_of() if estimated_attributes else {}
        observations = []
        for kind, attributes in self._process_attributes.items():
            if kind in estimated_attributes:
                observations.append(Observation(max(0.0, values[kind] - estimated[kind]), attributes))
                observations.append(Observation(estimated[kind], estimated_attributes[kind]))
            else:
                observations.append(Observation(values[kind], attributes))
        return observations


def _source(meter: EnergyMeter, kind: str | None) -> str:
    """``energy.source`` of the domains adding to the total (of one attribution kind, or all); the agent's standby
    estimates stand in only while it is away, and what they give is reported apart."""
    standby = meter.standby_domain_ids
    methods = {
        d.method.is_measurement
        for d in meter.domains
        if d.in_total and d.id not in standby and (kind is None or ATTRIBUTION_KIND[d.kind] == kind)
    }
    if methods == {True}:
        return SOURCE_MEASURED
    if methods == {False}:
        return SOURCE_ESTIMATE
    return SOURCE_MIXED


def _freeze_at_exit(ref: "weakref.ref[EnergyMetrics]") -> None:
    metrics = ref()
    if metrics is not None and metrics.enabled:
        try:
            metrics.freeze()
        except Exception:  # noqa: BLE001 - nothing may fail interpreter shutdown
            pass
