"""``instrument()``: one line that puts energy on every span (and exports energy metrics).

The composition root: it wires the meter, the span processor (:mod:`otel_joules.tracing`),
the metric instruments (:mod:`otel_joules.metrics`) and CO2eq on spans
(:mod:`otel_joules.carbon.spans`), which is why it lives above all of them.

Called before the application has set an SDK ``TracerProvider`` globally (the API then
hands out its ``ProxyTracerProvider``), ``instrument()`` does not raise, as OpenTelemetry
instrumentors do not at set-up: it warns once and returns a waiting handle that attaches
the moment ``trace.set_tracer_provider(...)`` sets one (:func:`_call_when_global_tracer_provider_set`).
"""

from __future__ import annotations

import inspect
import logging
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from opentelemetry import metrics, trace

from otel_joules._fork import register_fork_hook
from otel_joules.attribution.attributor import Attributor, check_attribution_options
from otel_joules.attribution.registry import check_attribution
from otel_joules.carbon.spans import span_carbon_from_settings
from otel_joules.config import sdk_disabled
from otel_joules.errors import ConfigurationError
from otel_joules.meter.meter import EnergyMeter
from otel_joules.meter.notice import announce_estimates
from otel_joules.meter.registry import get_energy_meter
from otel_joules.meter.sync import Synchronize, resolve_synchronizer
from otel_joules.metrics.instruments import EnergyMetrics
from otel_joules.tracing._sdk import remove_span_processor, wrap_global_tracer_provider_setter
from otel_joules.tracing.processor import EnergySpanProcessor

_log = logging.getLogger("otel_joules")


@dataclass
class Instrumentation:
    """What :func:`instrument` set up; :meth:`uninstrument` undoes it.

    Attributes:
        tracer_provider: The provider whose spans get energy (None when disabled, and while
            waiting for one to be set globally).
        processor: The span processor added to it.
        metrics: The metric instruments, if a meter provider was instrumented.
        meter: The meter behind both.
        active: True from :func:`instrument` (waiting included) until :meth:`uninstrument`.
    """

    tracer_provider: Any = None
    processor: EnergySpanProcessor | None = None
    metrics: EnergyMetrics | None = None
    meter: EnergyMeter | None = None
    active: bool = field(default=False)
    # Stops the wait for a global SDK provider; None once attached (or never waiting).
    _cancel_wait: Callable[[], None] | None = field(default=None, repr=False)

    @property
    def waiting(self) -> bool:
        """True while no SDK ``TracerProvider`` is set globally yet: energy is attached once one is."""
        return self.active and self._cancel_wait is not None

    def uninstrument(self) -> None:
        """Stop adding energy to spans and reporting metrics, or stop waiting to. Idempotent."""
        with _handles.lock:
            if not self.active:
                return
            self.active = False
            if self._cancel_wait is not None:
                self._cancel_wait()
                self._cancel_wait = None
            if self.processor is not None:
                self.processor.enabled = False
                remove_span_processor(self.tracer_provider, self.processor)
            if self.metrics is not None:
                # The SDK cannot unregister instruments; they report nothing from now on.
                self.metrics.enabled = False
            _handles.forget(self)


class InstrumentationRegistry:
    """Active instrumentations by tracer provider, so ``instrument()`` is idempotent."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        # Held across creating an instrumentation (hardware discovery): a fork meanwhile
        # must not leave the child's instrument()/uninstrument() waiting for ever.
        register_fork_hook(self, "_new_lock")
        self._by_provider: "weakref.WeakKeyDictionary[Any, Instrumentation]" = weakref.WeakKeyDictionary()

    def _new_lock(self) -> None:
        self._lock = threading.RLock()

    @property
    def lock(self) -> threading.RLock:
        """Held while a handle is created, attached or undone."""
        return self._lock

    def get_or_create(self, provider: Any, create: Any) -> Instrumentation:
        with self._lock:
            handle = self._by_provider.get(provider)
            if handle is None or not handle.active:
                handle = create()
                self._by_provider[provider] = handle
            return handle

    def active_handle(self, provider: Any) -> Instrumentation | None:
        with self._lock:
            handle = self._by_provider.get(provider)
            return handle if handle is not None and handle.active else None

    def put(self, provider: Any, handle: Instrumentation) -> None:
        with self._lock:
            self._by_provider[provider] = handle

    def forget(self, handle: Instrumentation) -> None:
        """Drop every provider's entry that is ``handle`` (a waiting one is filed under the API's proxy)."""
        with self._lock:
            for provider in [p for p, h in self._by_provider.items() if h is handle]:
                del self._by_provider[provider]


_handles = InstrumentationRegistry()


def instrument(
    tracer_provider: Any = None,
    meter_provider: Any = None,
    *,
    meter: EnergyMeter | None = None,
    metrics_enabled: bool = True,
    carbon_intensity: float | None = None,
    country: str | None = None,
    pue: float = 1.0,
    attribution: bool | Attributor = True,
    metrics_gate: Callable[[], bool] | None = None,
    synchronize: Synchronize = None,
    attribution_policy: str | None = None,
    static_watts: Mapping[str, float] | None = None,
    **options: Any,
) -> Instrumentation:
    """Put energy attributes on every span of ``tracer_provider`` and export energy metrics.

    Args:
        tracer_provider: An SDK ``TracerProvider``; the global one when omitted (waited for,
            when none is set yet: see Returns).
        meter_provider: Where ``hw.energy``/``hw.power`` go; the global one when omitted.
            Metrics are skipped when no SDK meter provider is configured.
        meter: The meter to read; the process-wide shared meter when omitted.
        metrics_enabled: Register the metric instruments.
        carbon_intensity: gCO2eq/kWh to put CO2eq on spans with (``energy.co2eq.grams``,
            ``energy.attributed.co2eq.grams``, ``energy.attributed.self.co2eq.grams``,
            ``carbon.*``). Without it, spans get CO2eq when a live provider is configured
            (``OTEL_JOULES_CARBON_PROVIDERS``, ``OTEL_JOULES_ELECTRICITYMAPS_API_KEY``) or a
            country is (``country`` or ``OTEL_JOULES_COUNTRY``), and none otherwise. The
            intensity is resolved once, here; see :mod:`otel_joules.carbon.spans`.
        country: ISO 3166 code for the carbon intensity (default ``OTEL_JOULES_COUNTRY``).
        pue: Data-centre PUE applied to the CO2eq (>= 1.0).
        attribution: Give spans their share (``energy.attributed.*``, about 5-8 µs per span) and
            export ``process.energy`` and the other share metrics: True (default) from the
            meter's shared :class:`~otel_joules.attribution.Attributor`, an Attributor from that
            one, False neither: only ``energy.joules`` and friends and ``hw.*``, for the lowest
            overhead.
        metrics_gate: Asked at each metric collection; while it returns False the energy
            instruments report nothing (zero-code passes
            :func:`~otel_joules.delivery.reachability.sdk_metrics_gate`, so a collector that
            is not there is given nothing of ours to retry, at exit least of all).
        synchronize: Wait for queued GPU work at every span's start and end: ``"torch"``
            (CUDA or ROCm; skipped on the CPU), ``"jax"``, ``"cupy"`` or a callable (see
            :mod:`otel_joules.meter.sync`). Off by default: it stalls pipelines that overlap
            host and device work, at every span boundary.
        attribution_policy: Who carries the host's static (idle) energy in shares: ``"capacity"``
            (default: each CPU second carries one core's share of it), ``"busy"`` (the busy CPU
            time carries all of it) or ``"dynamic"`` (dynamic energy only; ``"none"``, its former name, warns); default
            ``OTEL_JOULES_ATTRIBUTION_POLICY``. Set on the meter's attributor, shared by its spans and
            ``process.energy`` (:mod:`otel_joules.attribution.model`).
        static_watts: Static watts by domain id (``{"package_0": 10.0, "dram_0": 3.0}``) instead of
            the learned baseline, over ``OTEL_JOULES_STATIC_WATTS``.
        **options: :class:`~otel_joules.EnergyMeter` keywords for the shared meter
            (``sysfs_root``, ``procfs_root``, ``gpus``, ``devices_by_pid``, ``estimate``, ``host``).
            Every process measures the host whatever else runs on it: spans carry the
            host's energy during their interval and their own share of it.

    Returns:
        A handle whose ``uninstrument()`` undoes this. Calling ``instrument()`` again for
        the same provider returns the same handle. With ``OTEL_SDK_DISABLED=true`` it
        returns an inactive handle and measures nothing. Without ``tracer_provider`` and
        before an SDK ``TracerProvider`` is set globally, it logs one warning and returns a
        waiting handle (``handle.waiting``) that attaches as soon as
        ``trace.set_tracer_provider(...)`` sets one, with the metrics if a meter provider
        is set by then; ``uninstrument()`` cancels the wait, and calling ``instrument()``
        again meanwhile returns the same handle.

    Raises:
        ConfigurationError: ``tracer_provider``, or the global provider once set, is not an
            SDK ``TracerProvider`` (it has no ``add_span_processor``), or the options are
            invalid (an unknown country, a PUE below 1, a keyword that is neither
            ``instrument()``'s nor an ``EnergyMeter``'s, ...).
    """
    if sdk_disabled():
        _log.info("otel-joules: OTEL_SDK_DISABLED=true, energy is not measured")
        return Instrumentation()
    provider = trace.get_tracer_provider() if tracer_provider is None else tracer_provider
    waiting = tracer_provider is None and isinstance(provider, trace.ProxyTracerProvider)
    if not waiting and not hasattr(provider, "add_span_processor"):
        raise ConfigurationError(_not_sdk_provider(provider, explicit=tracer_provider is not None))

    # Resolved before the handle exists, so a bad setting fails instrument() itself.
    span_carbon = span_carbon_from_settings(carbon_intensity, country, pue)
    resolve_synchronizer(synchronize)
    check_attribution(attribution)
    attribution_policy = check_attribution_options(attribution_policy, static_watts)
    _check_meter_options(options)

    def attach(handle: Instrumentation, sdk_provider: Any) -> Instrumentation:
        used = meter or get_energy_meter(**options)
        announce_estimates(used)
        processor = EnergySpanProcessor(
            used,
            on_measurement=span_carbon,
            attribution=attribution,
            synchronize=synchronize,
            attribution_policy=attribution_policy,
            static_watts=static_watts,
        )
        processor.attributor  # noqa: B018 - read /proc/stat now rather than on the first span
        sdk_provider.add_span_processor(processor)
        energy_metrics = None
        if metrics_enabled:
            mp = meter_provider or metrics.get_meter_provider()
            # The API's no-op/proxy providers would silently drop the instruments.
            if type(mp).__module__.startswith("opentelemetry.sdk"):
                energy_metrics = EnergyMetrics(used, mp, attribution=attribution, gate=metrics_gate)
        handle.tracer_provider, handle.processor, handle.metrics, handle.meter = sdk_provider, processor, energy_metrics, used
        return handle

    if waiting:
        return _handles.get_or_create(provider, lambda: _wait_for_global_provider(attach))
    return _handles.get_or_create(provider, lambda: attach(Instrumentation(active=True), provider))


def _check_meter_options(options: Mapping[str, Any]) -> None:
    """Raise :class:`ConfigurationError` for a keyword that is neither ``instrument()``'s nor an :class:`EnergyMeter`'s."""
    meter_keywords = [name for name in inspect.signature(EnergyMeter.__init__).parameters if name != "self"]
    unknown = sorted(set(options) - set(meter_keywords))
    if unknown:
        raise ConfigurationError(
            f"instrument() has no option {', '.join(unknown)}: give a meter of your own as meter=, or the shared "
            f"meter's EnergyMeter keywords ({', '.join(meter_keywords)})"
        )


def _not_sdk_provider(provider: Any, explicit: bool) -> str:
    given = "tracer_provider=" if explicit else "the global TracerProvider"
    return (
        f"{given} is a {type(provider).__module__}.{type(provider).__qualname__}, not an OpenTelemetry SDK "
        "TracerProvider (it has no add_span_processor), so its spans cannot carry energy: use "
        "opentelemetry.sdk.trace.TracerProvider, or add otel_joules.EnergySpanProcessor() to your provider yourself"
    )


def _wait_for_global_provider(attach: Callable[[Instrumentation, Any], Instrumentation]) -> Instrumentation:
    """A waiting handle that ``attach`` completes when an SDK provider is set globally (under the registry's lock)."""
    handle = Instrumentation(active=True)
    _log.warning(
        "otel-joules: no OpenTelemetry SDK TracerProvider is set yet; energy will be attached to spans once one is "
        "set with trace.set_tracer_provider(...)"
    )

    def on_set() -> bool:
        """Attach if the global provider is set now; True once there is nothing left to wait for."""
        provider = trace.get_tracer_provider()
        if isinstance(provider, trace.ProxyTracerProvider):
            return False
        with _handles.lock:
            if not handle.waiting:
                return True  # uninstrument() came first
            handle._cancel_wait = None
            _handles.forget(handle)
            try:
                if not hasattr(provider, "add_span_processor"):
                    raise ConfigurationError(_not_sdk_provider(provider, explicit=False))
                existing = _handles.active_handle(provider)
                if existing is not None:
                    # Instrumented by hand before it was set globally: one processor, not two.
                    handle.tracer_provider, handle.processor = existing.tracer_provider, existing.processor
                    handle.metrics, handle.meter = existing.metrics, existing.meter
                else:
                    attach(handle, provider)
                    _handles.put(provider, handle)
            except Exception as exc:  # noqa: BLE001 - never fail the application's set_tracer_provider()
                handle.active = False
                _log.warning("otel-joules: energy instrumentation is off: %s", exc)
        return True

    stop = handle._cancel_wait = _call_when_global_tracer_provider_set(on_set)
    if on_set():  # set by another thread between the check in instrument() and the hook
        stop()
    return handle


def _call_when_global_tracer_provider_set(callback: Callable[[], bool]) -> Callable[[], None]:
    """Call ``callback()`` right after each setting of the API's global tracer provider until it returns True.

    Returns a function that stops it. The API has no public hook for this, and energy must be
    on the new provider before its first span: :func:`~otel_joules.tracing._sdk.wrap_global_tracer_provider_setter`
    hears every way the global is set.
    ``tests/instrumentation/test_deferred.py::test_the_api_still_sets_the_global_where_we_hook``
    fails loudly when the API stops doing so.
    """
    done = threading.Event()

    def after() -> None:
        if not done.is_set() and callback():
            stop()

    def stop() -> None:
        done.set()
        unwrap()

    unwrap = wrap_global_tracer_provider_setter(after)
    return stop
