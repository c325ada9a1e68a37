"""Observable metric instruments following the OpenTelemetry hardware semantic conventions.

``hw.energy``       Counter, ``J``, per domain, attributes ``hw.id``, ``hw.type``, ``hw.name`` (+ ``hw.parent``)
``hw.power``        Gauge,   ``W``, per domain, same attributes
``hw.host.energy``  Counter, ``J``, the host's non-overlapping total (what ``energy.joules`` adds up)
``hw.host.power``   Gauge,   ``W``, the same as power
``process.energy``  Counter, ``J``, this process's attributed share per ``hw.type`` (``cpu``, ``memory``, ``gpu``)
``process.power``   Gauge,   ``W``, the same as power over the latest attribution period
``energy.unattributed``  Counter, ``J``, the host's energy given to no process, per ``hw.type`` (``cpu``, ``memory``)
``energy.baseline.power``  Gauge, ``W``, each domain's static baseline, ``energy.baseline`` = learned|configured|unknown

``hw.*`` describe the hardware: every otel-joules process on a host reports the same devices
(take one per ``host.name`` and ``hw.id``, e.g. ``max``, never a sum over processes).
``process.*`` are shares: summed over processes and hosts they count each joule once
(:mod:`otel_joules.attribution`), under the attribution policy (``OTEL_JOULES_ATTRIBUTION_POLICY``).
Energy the model gives to nobody (idle periods; the static energy of unused CPU capacity under
``capacity``, all static energy under ``none``) is in ``hw.*`` and in ``energy.unattributed``.
``energy.unattributed`` is a host figure that every process computes alike (from ``/proc/stat`` and
the counters, from its own start): like ``hw.*``, take one per host, never a sum over processes:
``max by (hw_id) (rate(energy_unattributed_joules_total[5m]))`` beside
``sum by (service_name) (rate(process_energy_joules_total[5m]))``. (GPUs' idle energy is not in it:
a process sees only its own fraction of a GPU.)

Every data point also carries ``energy.source`` (``measured`` or ``estimate``), so an
estimate is never mistaken for a measurement in a dashboard; per-domain points add
``energy.method`` (``counter``, ``power_integration`` or ``estimate``). ``hw.host.power`` over
an interval in which a domain was being retried after a failed read says ``partial``: that
power leaves the domain out (``hw.host.energy`` keeps its last known joules instead).
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
from otel_joules.sensors.base import Domain
from otel_joules.semconv import (
    ENERGY_BASELINE,
    ENERGY_METHOD,
    ENERGY_SOURCE,
    HW_ID,
    HW_NAME,
    HW_PARENT,
    HW_TYPE,
    METRIC_HW_ENERGY,
    METRIC_HW_HOST_ENERGY,
    METRIC_HW_HOST_POWER,
    METRIC_HW_POWER,
    METRIC_ENERGY_BASELINE_POWER,
    METRIC_ENERGY_UNATTRIBUTED,
    METRIC_PROCESS_ENERGY,
    METRIC_PROCESS_POWER,
    SOURCE_ESTIMATE,
    SOURCE_MEASURED,
    SOURCE_MIXED,
)

INSTRUMENTATION_SCOPE = "otel_joules"
#: One collection calls the four callbacks within microseconds of each other; they
#: share a snapshot younger than this, and two collections never do.
_SNAPSHOT_REUSE_S = 0.05


class EnergyMetrics:
    """Registers the energy instruments on a meter provider and feeds them from an :class:`EnergyMeter`.

    Args:
        meter: Where the joules come from.
        meter_provider: The OpenTelemetry ``MeterProvider``; the global one when omitted.
        host_id: ``hw.id`` of the host total (default: the host name).
        attribution: Where ``process.*``, ``energy.unattributed`` and ``energy.baseline.power``
            come from, as for :class:`~otel_joules.tracing.EnergySpanProcessor`: True (default)
            the meter's shared :class:`~otel_joules.attribution.Attributor`, an Attributor that
            one, False none of those instruments (``hw.*`` only).
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
        self._host_attributes = {HW_ID: host_id or socket.gethostname(), HW_NAME: host_id or socket.gethostname()}
        self._domain_attributes = [_domain_attributes(domain) for domain in meter.domains]
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
        self._has_host_total = any(domain.in_total for domain in meter.domains)
        self._host_energy_attributes = {**self._host_attributes, ENERGY_SOURCE: _host_source(meter)}
        # At exit the SDK's meter provider collects once more, after the shared meter and
        # NVML have shut down (atexit runs hooks last-registered-first, and the provider
        # usually exists before instrument()). Freezing here, in a hook registered after
        # theirs, gives that collection the final values without reading closed counters.
        atexit.register(_freeze_at_exit, weakref.ref(self))
        provider = meter_provider or metrics.get_meter_provider()
        otel_meter = provider.get_meter(INSTRUMENTATION_SCOPE, __version__)
        self._register_hardware(otel_meter)
        #: The attributor behind the share instruments (None: attribution is off, or CPU times cannot be read).
        self.attributor: Attributor | None = attributor_from(attribution, meter)
        if self.attributor is not None:
            self._register_shares(otel_meter, self.attributor)

    def _register_hardware(self, otel_meter: metrics.Meter) -> None:
        """The ``hw.*`` instruments: each domain's energy and power, and the host's (no overlap)."""
        otel_meter.create_observable_counter(
            METRIC_HW_ENERGY, [self._observe_energy], unit="J", description="Energy consumed by the component"
        )
        otel_meter.create_observable_gauge(
            METRIC_HW_POWER, [self._observe_power], unit="W", description="Instantaneous power consumed by the component"
        )
        otel_meter.create_observable_counter(
            METRIC_HW_HOST_ENERGY, [self._observe_host_energy], unit="J", description="Energy consumed by the host (no overlap)"
        )
        otel_meter.create_observable_gauge(
            METRIC_HW_HOST_POWER, [self._observe_host_power], unit="W", description="Power consumed by the host (no overlap)"
        )

    def _register_shares(self, otel_meter: metrics.Meter, attributor: Attributor) -> None:
        """The attributor's instruments: this process's share, the host's unattributed energy, the baselines."""
        meter = self.meter
        self._process_attributes = {
            kind: {HW_TYPE: kind, ENERGY_SOURCE: _source(meter, kind)} for kind in attributor.kinds
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
            description="Each domain's static (idle) power, learned, configured or unknown (energy.baseline)",
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
            return self._previous, self._current

    def _remember(self, snapshot: EnergySnapshot) -> None:
        for i, joules in enumerate(snapshot.joules):
            if joules is not None:
                self._last_known[i] = joules

    def _observe_energy(self, options: CallbackOptions) -> Iterable[Observation]:
        if not self._reporting():
            return []
        _, current = self._snapshots()
        return [
            Observation(joules, attributes)
            for joules, attributes in zip(current.joules, self._domain_attributes)
            if joules is not None
        ]

    def _interval(self) -> EnergyMeasurement | None:
        """Energy between the two latest snapshots; None before time has passed."""
        previous, current = self._snapshots()
        measurement = self.meter.measure(previous, current)
        return measurement if measurement.duration_s > 0 else None

    def _observe_power(self, options: CallbackOptions) -> Iterable[Observation]:
        measurement = self._interval() if self._reporting() else None
        if measurement is None:
            return []
        return [
            Observation(measurement.joules_by_domain[domain.id] / measurement.duration_s, attributes)
            for domain, attributes in zip(self.meter.domains, self._domain_attributes)
            if domain.id in measurement.joules_by_domain
        ]

    def _observe_host_energy(self, options: CallbackOptions) -> Iterable[Observation]:
        if not self._reporting():
            return []
        if not self._has_host_total:
            return []  # e.g. a process that leaves the host to another and has no GPU
        self._snapshots()
        # Last known values: a domain that fails keeps its joules in the total, so the
        # host counter never goes backwards. The standby estimates of agent outages that its
        # counters bridged, or may still bridge, are left out (the measured domains hold that energy):
        # counted once, never counted and then taken back.
        total = sum(joules for joules, domain in zip(self._last_known, self.meter.domains) if domain.in_total)
        total -= self.meter.withheld_estimate_joules()
        self._host_energy_joules = total = max(total, self._host_energy_joules)
        return [Observation(total, self._host_energy_attributes)]

    def _observe_host_power(self, options: CallbackOptions) -> Iterable[Observation]:
        measurement = self._interval() if self._has_host_total and self._reporting() else None
        if measurement is None:
            return []
        return [Observation(measurement.watts, {**self._host_attributes, ENERGY_SOURCE: measurement.source})]

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
        joules = self.attributor.process_joules()
        return [Observation(joules[kind], attributes) for kind, attributes in self._process_attributes.items()]

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
            Observation(watts, {**self._domain_attributes[i], ENERGY_BASELINE: state})
            for i, watts, state in self.attributor.baseline_watts()
            if watts is not None
        ]

    def _observe_process_power(self, options: CallbackOptions) -> Iterable[Observation]:
        if self.attributor is None or not self._reporting():
            return []
        self._process_sample()
        watts = self.attributor.process_watts()
        return [Observation(watts[kind], attributes) for kind, attributes in self._process_attributes.items()]


def _domain_attributes(domain: Domain) -> dict[str, str]:
    """A domain's ``hw.*`` metric attributes, with whether it is measured and how."""
    attributes = {
        HW_ID: domain.hw_id,
        HW_TYPE: domain.hw_type.value,
        HW_NAME: domain.hw_name,
        ENERGY_SOURCE: SOURCE_MEASURED if domain.method.is_measurement else SOURCE_ESTIMATE,
        # counter, power_integration or estimate: a GPU without an energy counter
        # is measured, but by integrating its power sensor, and says so here.
        ENERGY_METHOD: domain.method.value,
    }
    if domain.hw_parent:
        attributes[HW_PARENT] = domain.hw_parent
    return attributes


def _host_source(meter: EnergyMeter) -> str:
    """``energy.source`` of the host total, fixed by which domains add to it."""
    return _source(meter, None)


def _source(meter: EnergyMeter, kind: str | None) -> str:
    """``energy.source`` of the domains adding to the total (of one attribution kind, or all)."""
    methods = {
        d.method.is_measurement
        for d in meter.domains
        if d.in_total and (kind is None or ATTRIBUTION_KIND[d.kind] == kind)
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
