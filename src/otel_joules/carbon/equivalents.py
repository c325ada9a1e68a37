"""Human-readable equivalents of an amount of CO2eq ("as much as driving 2.4 km").

Each factor carries the published figure it comes from, so a reader of a report can
check it. Factors are grams of CO2eq per unit of the equivalent activity:

========================  ================  =====================================================
Key                       g CO2eq / unit    Source
========================  ================  =====================================================
``km_by_car``             106.8             EEA, average CO2 emissions of new passenger cars
                                            registered in Europe in 2024 (provisional data):
                                            106.8 g CO2/km (WLTP). Same figure as carbontracker.
``smartphone_charges``    12.4              US EPA Greenhouse Gas Equivalencies Calculator
                                            (2024 revision): 1.24 x 10^-5 metric tons CO2 per
                                            smartphone charged.
``litres_of_petrol``      2347.7...         US EPA Greenhouse Gas Equivalencies Calculator:
                                            8.887 x 10^-3 metric tons CO2 per US gallon of
                                            gasoline, / 3.785411784 litres per US gallon.
``tree_seedlings_10y``    60000             US EPA Greenhouse Gas Equivalencies Calculator:
                                            0.060 metric tons CO2 sequestered by one urban tree
                                            seedling grown for 10 years.
========================  ================  =====================================================
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from otel_joules.errors import ConfigurationError

#: Litres in one US gallon (exact, by definition of the US liquid gallon).
LITRES_PER_US_GALLON = 3.785411784


@dataclass(frozen=True)
class EquivalentFactor:
    """One conversion factor: ``grams_per_unit`` grams of CO2eq per ``unit``.

    Attributes:
        key: Stable machine name (``km_by_car``).
        unit: Phrase used in text (``km travelled by car``), as carbontracker prints it.
        grams_per_unit: Grams of CO2eq per one unit.
        source: Where the figure comes from, with the published number.
    """

    key: str
    unit: str
    grams_per_unit: float
    source: str


#: The factors used by :func:`equivalents`, in display order.
FACTORS: tuple[EquivalentFactor, ...] = (
    EquivalentFactor(
        key="km_by_car",
        unit="km travelled by car",
        grams_per_unit=106.8,
        source="EEA 2024: average new passenger car in Europe emits 106.8 gCO2/km (provisional 2024 data)",
    ),
    EquivalentFactor(
        key="smartphone_charges",
        unit="smartphone charges",
        grams_per_unit=12.4,
        source="US EPA Greenhouse Gas Equivalencies Calculator: 1.24e-5 tCO2 per smartphone charged",
    ),
    EquivalentFactor(
        key="litres_of_petrol",
        unit="litres of petrol burned",
        # 8.887e-3 t CO2 per US gallon, converted to grams per litre.
        grams_per_unit=8887.0 / LITRES_PER_US_GALLON,
        source="US EPA Greenhouse Gas Equivalencies Calculator: 8.887e-3 tCO2 per US gallon of gasoline (3.785411784 L)",
    ),
    EquivalentFactor(
        key="tree_seedlings_10y",
        unit="tree seedlings grown for 10 years",
        grams_per_unit=60000.0,
        source="US EPA Greenhouse Gas Equivalencies Calculator: 0.060 tCO2 sequestered per urban tree seedling grown for 10 years",
    ),
)


@dataclass(frozen=True)
class Equivalent:
    """An amount of CO2eq expressed as ``amount`` of ``factor.unit``."""

    amount: float
    factor: EquivalentFactor

    @property
    def key(self) -> str:
        """The factor's machine name, e.g. ``km_by_car``."""
        return self.factor.key

    @property
    def unit(self) -> str:
        """The factor's unit phrase, e.g. ``km travelled by car``."""
        return self.factor.unit

    def text(self, decimals: int = 3) -> str:
        """``"2.414 km travelled by car"``."""
        return f"{self.amount:.{decimals}f} {self.factor.unit}"


def equivalents(co2eq_grams: float) -> tuple[Equivalent, ...]:
    """Every equivalent of ``co2eq_grams`` grams of CO2eq, in the order of :data:`FACTORS`."""
    try:
        grams = float(co2eq_grams)
    except (TypeError, ValueError):
        raise ConfigurationError(f"co2eq_grams={co2eq_grams!r} is not a number; pass grams of CO2eq >= 0") from None
    if not math.isfinite(grams) or grams < 0:
        raise ConfigurationError(f"co2eq_grams={co2eq_grams!r} must be a finite number >= 0")
    return tuple(Equivalent(amount=grams / factor.grams_per_unit, factor=factor) for factor in FACTORS)


def km_by_car(co2eq_grams: float) -> float:
    """Kilometres driven by an average new European car (106.8 gCO2/km, EEA 2024) for ``co2eq_grams``."""
    (car,) = [item for item in equivalents(co2eq_grams) if item.key == "km_by_car"]
    return car.amount


def equivalents_text(co2eq_grams: float, decimals: int = 3) -> str:
    """One line per equivalent (``"<amount> <unit>"``), in the order of :data:`FACTORS`."""
    return "\n".join(item.text(decimals) for item in equivalents(co2eq_grams))
