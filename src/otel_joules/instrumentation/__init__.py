"""Zero-code instrumentation: energy on every span under ``opentelemetry-instrument``.

With ``pip install 'otel-joules[instrument]'``::

    opentelemetry-instrument python app.py

loads :class:`EnergyInstrumentor` through its ``opentelemetry_instrumentor`` entry point
(named ``otel_joules``) after the distro configured the SDK. It calls
:func:`otel_joules.instrument` with the tracer and meter providers the distro set up, so
the app's own spans get ``energy.*`` attributes and ``hw.energy``, ``hw.power``,
``hw.host.energy``, ``hw.host.power`` are exported with the app's other metrics, with
no change to the app. Turn it off with ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=otel_joules``.

What else it does:

- **One process per host counts the host.** :func:`otel_joules.delivery.host_owner`
  decides (``OTEL_JOULES_HOST_DOMAINS=auto|always|never``); the other processes report
  their GPUs only.
- **Joins the parent's trace.** When ``TRACEPARENT`` is set (``otel-joules run`` sets it
  for the command it runs), the context it carries becomes current in the main thread,
  so spans started there without an explicit parent belong to that trace.
- **Last metrics before exit.** At exit it flushes the meter provider while the energy
  meter is still open, so the final ``hw.energy`` values are exported.
- Job resource attributes (``host.name``, Slurm, torchrun) come from the SDK's resource
  detection: set ``OTEL_EXPERIMENTAL_RESOURCE_DETECTORS=otel_joules``.

Keyword arguments of ``EnergyInstrumentor().instrument(...)`` (for use in code):
``tracer_provider``, ``meter_provider``, ``host_domains`` (``auto``/``always``/``never``),
``join_parent_trace`` (default True), and any :class:`~otel_joules.EnergyMeter` option.
"""

from __future__ import annotations

import atexit
import logging
from typing import Any, Collection

from opentelemetry import context as otel_context
from opentelemetry import metrics
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from otel_joules.delivery.context import attach_environment_context
from otel_joules.delivery.hosts import HostOwnership, host_owner
from otel_joules.delivery.setup import expire_metric_snapshot
from otel_joules.errors import OtelJoulesError
from otel_joules.tracing.instrument import Instrumentation, instrument

_log = logging.getLogger("otel_joules")

#: Longest wait for the last metric export at exit, in milliseconds.
EXIT_FLUSH_TIMEOUT_MILLIS = 10_000

_METER_OPTION_KEYS = ("sysfs_root", "gpus", "devices_by_pid", "estimate", "host")


class EnergyInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """``BaseInstrumentor`` putting energy on every span of the SDK providers (module docstring)."""

    def __init__(self) -> None:
        # BaseInstrumentor is a singleton: __init__ runs on every EnergyInstrumentor() call.
        if not hasattr(self, "_handle"):
            self._handle: Instrumentation | None = None
            self._ownership: HostOwnership | None = None
            self._context_token: object | None = None
            self._exit_hook: Any = None
            self._meter_provider: Any = None

    def instrumentation_dependencies(self) -> Collection[str]:
        """None: energy needs no instrumented library."""
        return ()

    @property
    def instrumentation(self) -> Instrumentation | None:
        """What :func:`otel_joules.instrument` returned, while instrumented."""
        return self._handle

    @property
    def ownership(self) -> HostOwnership | None:
        """The host-domain decision this process made, while instrumented."""
        return self._ownership

    def _instrument(self, **kwargs: Any) -> None:
        options = {key: kwargs[key] for key in _METER_OPTION_KEYS if key in kwargs}
        try:
            if "host" not in options:
                self._ownership = host_owner(kwargs.get("host_domains"))
                options.update(self._ownership.meter_options())
            self._handle = instrument(kwargs.get("tracer_provider"), kwargs.get("meter_provider"), **options)
        except OtelJoulesError as exc:
            # Raising here would stop opentelemetry-instrument from loading the
            # instrumentors after this one: say what is wrong and leave the app alone.
            _log.warning("otel-joules: energy instrumentation is off: %s", exc)
            self._handle = None
            return
        if self._ownership is not None and not self._ownership.owner and self._handle.energy_meter is not None:
            if not self._handle.energy_meter.domains:
                _log.info("otel-joules: %s and no GPU is measured here, so spans of this process carry no energy", self._ownership.reason)
        if kwargs.get("join_parent_trace", True):
            self._context_token = attach_environment_context()
        if self._handle.metrics is not None:
            self._meter_provider = kwargs.get("meter_provider") or metrics.get_meter_provider()
            # atexit runs hooks last-registered-first: this one was registered after the
            # shared energy meter's close hook and the SDK's shutdown hook, so it runs
            # before both, while the meter can still be read.
            self._exit_hook = self._flush_metrics_at_exit
            atexit.register(self._exit_hook)

    def _flush_metrics_at_exit(self) -> None:
        handle = self._handle
        if handle is None or handle.metrics is None or not handle.active:
            return
        try:
            expire_metric_snapshot(handle.metrics)
            force_flush = getattr(self._meter_provider, "force_flush", None)
            if force_flush is not None:
                force_flush(timeout_millis=EXIT_FLUSH_TIMEOUT_MILLIS)
        except Exception as exc:  # noqa: BLE001 - exiting must not fail because of metrics
            _log.debug("otel-joules: final metric flush failed: %s", exc)
        finally:
            # The SDK collects once more at its own shutdown, after the meter is closed:
            # report nothing then rather than warnings about closed counters.
            handle.metrics.enabled = False

    def _uninstrument(self, **kwargs: Any) -> None:
        if self._exit_hook is not None:
            atexit.unregister(self._exit_hook)
            self._exit_hook = None
        if self._context_token is not None:
            try:
                otel_context.detach(self._context_token)  # type: ignore[arg-type]
            except Exception:  # noqa: BLE001 - detaching from another thread/context is harmless
                pass
            self._context_token = None
        if self._handle is not None:
            self._handle.uninstrument()
            self._handle = None
        self._ownership = None
        self._meter_provider = None


__all__ = ["EnergyInstrumentor"]
