"""Zero-code instrumentation: energy on every span under ``opentelemetry-instrument``.

Its own module because it subclasses ``BaseInstrumentor`` from the optional
``opentelemetry-instrumentation`` package: only this module needs the ``[instrument]``
extra, never ``import otel_joules.instrumentation``.

With ``pip install 'otel-joules[instrument]'``::

    opentelemetry-instrument python app.py

loads :class:`EnergyInstrumentor` through its ``opentelemetry_instrumentor`` entry point
(named ``otel_joules``) after the distro configured the SDK. It calls
:func:`otel_joules.instrument` with the tracer and meter providers the distro set up, so
the app's own spans get ``energy.*`` attributes and the energy metrics (``hw.*``,
``process.*``: docs/metrics.md) are exported with the app's other metrics, with
no change to the app. Turn it off with ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=otel_joules``.

What else it does:

- **Every process measures, whatever else runs on the host.** Spans carry the host's
  energy during their interval (``energy.joules``) and their share of it
  (``energy.attributed.*``); no process is elected and no lock file is used.
- **Joins the parent's trace.** When ``TRACEPARENT`` is set (``otel-joules run`` sets it
  for the command it runs), the context it carries becomes current in the main thread,
  so spans started there without an explicit parent belong to that trace.
- **Last metrics at exit.** The SDK's final collection at exit reads the counters live
  and fresh, so the last ``hw.energy`` values include everything the app spent.
- **No collector, no wait.** While nothing answers at the OTLP metrics endpoint, the
  energy instruments report nothing (one log line says so), so the SDK has nothing of
  ours to retry there: an app exits as soon after its last request as it would without
  this instrumentor (:mod:`otel_joules.delivery.reachability`).
- Job resource attributes (``host.name``, Slurm, torchrun) come from the SDK's resource
  detection: set ``OTEL_EXPERIMENTAL_RESOURCE_DETECTORS=otel_joules``.
- CO2eq on spans when ``OTEL_JOULES_COUNTRY`` or a live carbon provider is configured
  (:mod:`otel_joules.carbon.spans`).

Keyword arguments of ``EnergyInstrumentor().instrument(...)`` (for use in code):
``tracer_provider``, ``meter_provider``, ``join_parent_trace`` (default True), and any :class:`~otel_joules.EnergyMeter` option.
"""

from __future__ import annotations

import logging
from typing import Any, Collection

from opentelemetry import context as otel_context
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from otel_joules.delivery.reachability import sdk_metrics_gate
from otel_joules.errors import OtelJoulesError
from otel_joules.instrumentation.instrument import Instrumentation, instrument
from otel_joules.instrumentation.context import attach_environment_context

_log = logging.getLogger("otel_joules")

_METER_OPTION_KEYS = ("sysfs_root", "procfs_root", "gpus", "devices_by_pid", "estimate", "host")


class EnergyInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """``BaseInstrumentor`` putting energy on every span of the SDK providers (module docstring)."""

    def __init__(self) -> None:
        # BaseInstrumentor is a singleton: __init__ runs on every EnergyInstrumentor() call.
        if not hasattr(self, "_handle"):
            self._handle: Instrumentation | None = None
            self._context_token: object | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        """None: energy needs no instrumented library."""
        return ()

    @property
    def instrumentation(self) -> Instrumentation | None:
        """What :func:`otel_joules.instrument` returned, while instrumented."""
        return self._handle

    def _instrument(self, **kwargs: Any) -> None:
        options = {key: kwargs[key] for key in _METER_OPTION_KEYS if key in kwargs}
        meter_provider = kwargs.get("meter_provider")
        try:
            # The SDK's own provider was configured from the OTEL_* variables, so they say where
            # its metrics go; a provider passed in code may send anywhere.
            gate = sdk_metrics_gate() if meter_provider is None else None
            self._handle = instrument(kwargs.get("tracer_provider"), meter_provider, metrics_gate=gate, **options)
        except OtelJoulesError as exc:
            # Raising here would stop opentelemetry-instrument from loading the
            # instrumentors after this one: say what is wrong and leave the app alone.
            _log.warning("otel-joules: energy instrumentation is off: %s", exc)
            self._handle = None
            return
        if kwargs.get("join_parent_trace", True):
            self._context_token = attach_environment_context()

    def _uninstrument(self, **kwargs: Any) -> None:
        if self._context_token is not None:
            try:
                otel_context.detach(self._context_token)  # type: ignore[arg-type]
            except Exception:  # noqa: BLE001 - detaching from another thread/context is harmless
                pass
            self._context_token = None
        if self._handle is not None:
            self._handle.uninstrument()
            self._handle = None
