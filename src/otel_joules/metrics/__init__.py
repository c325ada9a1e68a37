"""Metric instruments (``hw.energy``, ``hw.power``, ``hw.host.energy``, ``hw.host.power``) fed by the meter."""

from otel_joules.metrics.instruments import EnergyMetrics

__all__ = ["EnergyMetrics"]
