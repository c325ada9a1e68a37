"""What a measured training run produces: one :class:`EpochResult` per epoch, and :class:`Consumption` blocks."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Mapping

from otel_joules.carbon.equivalents import Equivalent


class ConsumptionKind(str, enum.Enum):
    """Which consumption block: measured so far, or predicted for the whole training."""

    ACTUAL = "actual"
    PREDICTED = "predicted"


@dataclass(frozen=True)
class EpochResult:
    """One measured epoch.

    Attributes:
        epoch: Its number (1-based).
        duration_s: Seconds between the epoch's start and end.
        energy_joules: IT energy of the chosen components (no PUE).
        joules_by_domain: Joules per measured domain (``package_0``, ``nvidia_gpu_1``, ...).
        power_watts_by_component: Average power of each component (``gpu``, ``cpu``): the
            sum over its devices; None when the epoch had no duration.
        co2eq_grams: ``energy_joules / 3.6e6 x pue x intensity_gco2eq_per_kwh``.
        intensity_gco2eq_per_kwh: The carbon intensity applied to this epoch.
        source: ``measured``, ``estimate``, ``mixed`` or ``partial`` (as ``energy.source``: ``partial`` when a
            counter was being retried at the epoch's start or end, so its energy leaves that domain out).
        below_resolution: The epoch was shorter than a counter's update period.
        interrupted: The epoch was still running when the run was stopped.
    """

    epoch: int
    duration_s: float
    energy_joules: float
    joules_by_domain: Mapping[str, float]
    power_watts_by_component: Mapping[str, float | None]
    co2eq_grams: float
    intensity_gco2eq_per_kwh: float
    source: str
    below_resolution: bool = False
    interrupted: bool = False


@dataclass(frozen=True)
class Consumption:
    """A consumption block: what carbontracker prints as "Actual/Predicted consumption".

    Attributes:
        kind: ``"actual"`` (measured epochs) or ``"predicted"`` (the whole training).
        epochs: Epochs it covers.
        duration_s: Seconds (sum of epoch durations, or the predicted total).
        energy_joules: IT energy in joules, without PUE.
        pue: The PUE applied.
        energy_kwh: ``energy_joules x pue / 3.6e6``: facility energy, what carbontracker
            prints as ``Energy: ... kWh``.
        co2eq_grams: Grams of CO2eq.
        intensity_gco2eq_per_kwh: The intensity behind ``co2eq_grams`` (for actual
            consumption the energy-weighted average over the epochs).
        intensity_source: Where it came from (:data:`otel_joules.carbon.SOURCES`).
        equivalents: ``co2eq_grams`` as km by car and more, each with its source figure
            (always computed; ``interpretable=False`` only keeps them out of the text).
    """

    kind: str
    epochs: int
    duration_s: float
    energy_joules: float
    pue: float
    energy_kwh: float
    co2eq_grams: float
    intensity_gco2eq_per_kwh: float
    intensity_source: str
    equivalents: tuple[Equivalent, ...] = ()

    @property
    def equivalents_by_unit(self) -> dict[str, float]:
        """``{"km travelled by car": 0.0024, ...}``: the amounts keyed by carbontracker's unit phrase."""
        return {item.unit: item.amount for item in self.equivalents}

    def as_carbontracker_dict(self) -> dict[str, Any]:
        """The shape of ``carbontracker.parser.get_consumption``'s dictionaries."""
        return {
            "epochs": self.epochs,
            "duration (s)": self.duration_s,
            "energy (kWh)": self.energy_kwh,
            "co2eq (g)": self.co2eq_grams,
            "equivalents": self.equivalents_by_unit or None,
        }
