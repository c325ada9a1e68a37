"""otel-joules: the energy (joules) and carbon of your code, as OpenTelemetry spans and metrics.

Quick start::

    import otel_joules
    otel_joules.instrument()          # every span of the global SDK TracerProvider gets energy.*

See :func:`instrument`, :class:`EnergySpanProcessor` and :class:`EnergyMeter`.
"""

from otel_joules._version import __version__
from otel_joules.errors import ConfigurationError, OtelJoulesError
from otel_joules.meter import EnergyMeasurement, EnergyMeter, EnergySnapshot, get_energy_meter
from otel_joules.tracing import EnergySpanProcessor, Instrumentation, instrument

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
