"""``instrument()``: one line that puts energy on every span (and exports energy metrics).

The composition root: it wires the meter, the span processor (:mod:`otel_joules.tracing`),
the metric instruments (:mod:`otel_joules.metrics`) and CO2eq on spans
(:mod:`otel_joules.carbon.spans`), which is why it lives above all of them.
"""

from __future__ import annotations

import logging
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

from opentelemetry import metrics, trace

from otel_joules._fork import register_fork_hook
from otel_joules.carbon.spans import span_carbon_from_settings
from otel_joules.config import sdk_disabled
from otel_joules.errors import ConfigurationError
from otel_joules.meter.meter import EnergyMeter
from otel_joules.meter.registry import get_energy_meter
from otel_joules.metrics.instruments import EnergyMetrics
from otel_joules.tracing.processor import EnergySpanProcessor

__all__ = ["Instrumentation", "instrument"]

_log = logging.getLogger("otel_joules")


@dataclass
class Instrumentation:
    """What :func:`instrument` set up; :meth:`uninstrument` undoes it.

    Attributes:
        tracer_provider: The provider whose spans get energy (None when disabled).
        processor: The span processor added to it.
        metrics: The metric instruments, if a meter provider was instrumented.
        energy_meter: The meter behind both.
    """

    tracer_provider: Any = None
    processor: EnergySpanProcessor | None = None
    metrics: EnergyMetrics | None = None
    energy_meter: EnergyMeter | None = None
    active: bool = field(default=False)

    def uninstrument(self) -> None:
        """Stop adding energy to spans and reporting metrics. Idempotent."""
        if not self.active:
            return
        self.active = False
        if self.processor is not None:
            self.processor.enabled = False
            _remove_processor(self.tracer_provider, self.processor)
        if self.metrics is not None:
            # The SDK cannot unregister instruments; they report nothing from now on.
            self.metrics.enabled = False
        _handles.forget(self.tracer_provider)


class _HandleRegistry:
    """Active instrumentations by tracer provider, so ``instrument()`` is idempotent."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        # Held across creating an instrumentation (hardware discovery): a fork meanwhile
        # must not leave the child's instrument()/uninstrument() waiting for ever.
        register_fork_hook(self, "_new_lock")
        self._by_provider: "weakref.WeakKeyDictionary[Any, Instrumentation]" = weakref.WeakKeyDictionary()

    def _new_lock(self) -> None:
        self._lock = threading.RLock()

    def get_or_create(self, provider: Any, create: Any) -> Instrumentation:
        with self._lock:
            handle = self._by_provider.get(provider)
            if handle is None or not handle.active:
                handle = create()
                self._by_provider[provider] = handle
            return handle

    def forget(self, provider: Any) -> None:
        with self._lock:
            if provider is not None:
                self._by_provider.pop(provider, None)


_handles = _HandleRegistry()


def instrument(
    tracer_provider: Any = None,
    meter_provider: Any = None,
    *,
    energy_meter: EnergyMeter | None = None,
    metrics_enabled: bool = True,
    carbon_intensity: float | None = None,
    country: str | None = None,
    pue: float = 1.0,
    attribution: bool = True,
    metrics_gate: Callable[[], bool] | None = None,
    **options: Any,
) -> Instrumentation:
    """Put energy attributes on every span of ``tracer_provider`` and export energy metrics.

    Args:
        tracer_provider: An SDK ``TracerProvider``; the global one when omitted.
        meter_provider: Where ``hw.energy``/``hw.power`` go; the global one when omitted.
            Metrics are skipped when no SDK meter provider is configured.
        energy_meter: The meter to read; the process-wide shared meter when omitted.
        metrics_enabled: Register the metric instruments.
        carbon_intensity: gCO2eq/kWh to put CO2eq on spans with (``energy.co2eq.grams``,
            ``energy.attributed.co2eq.grams``, ``energy.attributed.self.co2eq.grams``,
            ``carbon.*``). Without it, spans get CO2eq when a live provider is configured
            (``OTEL_JOULES_CARBON_PROVIDERS``, ``OTEL_JOULES_ELECTRICITYMAPS_API_KEY``) or a
            country is (``country`` or ``OTEL_JOULES_COUNTRY``), and none otherwise. The
            intensity is resolved once, here; see :mod:`otel_joules.carbon.spans`.
        country: ISO 3166 code for the carbon intensity (default ``OTEL_JOULES_COUNTRY``).
        pue: Data-centre PUE applied to the CO2eq (>= 1.0).
        attribution: Give spans their share (``energy.attributed.*``, about 5-8 µs per span);
            False keeps only ``energy.joules`` and friends, for the lowest overhead.
        metrics_gate: Asked at each metric collection; while it returns False the energy
            instruments report nothing (zero-code passes
            :func:`~otel_joules.delivery.reachability.sdk_metrics_gate`, so a collector that
            is not there is given nothing of ours to retry, at exit least of all).
        **options: :class:`~otel_joules.EnergyMeter` keywords for the shared meter
            (``sysfs_root``, ``procfs_root``, ``gpus``, ``devices_by_pid``, ``estimate``, ``host``).
            Every process measures the host whatever else runs on it: spans carry the
            host's energy during their interval and their own share of it.

    Returns:
        A handle whose ``uninstrument()`` undoes this. Calling ``instrument()`` again for
        the same provider returns the same handle. With ``OTEL_SDK_DISABLED=true`` it
        returns an inactive handle and measures nothing.

    Raises:
        ConfigurationError: no SDK tracer provider is configured, or the options are invalid
            (an unknown country, a PUE below 1, ...).
    """
    if sdk_disabled():
        _log.info("otel-joules: OTEL_SDK_DISABLED=true, energy is not measured")
        return Instrumentation()
    provider = tracer_provider or trace.get_tracer_provider()
    if not hasattr(provider, "add_span_processor"):
        raise ConfigurationError(
            "no OpenTelemetry SDK TracerProvider is configured, so spans cannot carry energy. Configure one first "
            "(from opentelemetry.sdk.trace import TracerProvider; trace.set_tracer_provider(TracerProvider())) "
            "or pass tracer_provider=..."
        )

    # Resolved before the handle exists, so a bad setting fails instrument() itself.
    span_carbon = span_carbon_from_settings(carbon_intensity, country, pue)

    def create() -> Instrumentation:
        meter = energy_meter or get_energy_meter(**options)
        processor = EnergySpanProcessor(meter, on_measurement=span_carbon, attribution=attribution)
        processor.attributor  # noqa: B018 - read /proc/stat now rather than on the first span
        provider.add_span_processor(processor)
        energy_metrics = None
        if metrics_enabled:
            mp = meter_provider or metrics.get_meter_provider()
            # The API's no-op/proxy providers would silently drop the instruments.
            if type(mp).__module__.startswith("opentelemetry.sdk"):
                energy_metrics = EnergyMetrics(meter, mp, gate=metrics_gate)
        return Instrumentation(provider, processor, energy_metrics, meter, active=True)

    return _handles.get_or_create(provider, create)


def _remove_processor(provider: Any, processor: EnergySpanProcessor) -> None:
    """Take the processor out of the provider's list, where the SDK's structure allows it.

    The SDK has no public removal; when its internals differ the disabled processor
    stays registered and does nothing, which is still correct.
    """
    multi = getattr(provider, "_active_span_processor", None)
    lock = getattr(multi, "_lock", None)
    processors = getattr(multi, "_span_processors", None)
    if lock is None or not isinstance(processors, tuple):
        return
    with lock:
        multi._span_processors = tuple(p for p in multi._span_processors if p is not processor)
