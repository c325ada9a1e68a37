"""Meter: snapshots of every channel, wrap correction, sampling, the shared process meter."""

from otel_joules.meter.meter import EnergyMeasurement, EnergyMeter, EnergySnapshot
from otel_joules.meter.registry import MeterRegistry, default_registry, get_energy_meter

__all__ = [
    "EnergyMeasurement",
    "EnergyMeter",
    "EnergySnapshot",
    "MeterRegistry",
    "default_registry",
    "get_energy_meter",
]
