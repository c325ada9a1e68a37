"""otel-joules: the energy (joules) and carbon of your code, as OpenTelemetry spans and metrics.

Quick start::

    import otel_joules
    otel_joules.instrument()          # every span of the global SDK TracerProvider gets energy.*

See :func:`instrument`, :class:`EnergySpanProcessor` and :class:`EnergyMeter`.

The names below are imported on first use (PEP 562), so ``import otel_joules`` and
importing one subpackage (``otel_joules.carbontracker.parser``, ``otel_joules.carbon``)
load neither the OpenTelemetry SDK nor the meter, the sensors or the span processor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from otel_joules._lazy import lazy_exports
from otel_joules._version import __version__
from otel_joules.errors import ConfigurationError, OtelJoulesError

if TYPE_CHECKING:
    from otel_joules.instrumentation import Instrumentation, instrument
    from otel_joules.meter import EnergyMeasurement, EnergyMeter, EnergySnapshot, get_energy_meter
    from otel_joules.tracing import EnergySpanProcessor

__all__ = [
    "ConfigurationError",
    "EnergyMeasurement",
    "EnergyMeter",
    "EnergySnapshot",
    "EnergySpanProcessor",
    "Instrumentation",
    "OtelJoulesError",
    "__version__",
    "get_energy_meter",
    "instrument",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "EnergyMeasurement": "otel_joules.meter",
        "EnergyMeter": "otel_joules.meter",
        "EnergySnapshot": "otel_joules.meter",
        "get_energy_meter": "otel_joules.meter",
        "EnergySpanProcessor": "otel_joules.tracing",
        "Instrumentation": "otel_joules.instrumentation",
        "instrument": "otel_joules.instrumentation",
    },
)
