"""Carbon accounting of measured energy: joules -> facility kWh -> grams of CO2eq, and the span attributes.

:class:`CarbonAccounting` is the one place that turns *measured* joules into kWh and
CO2eq (the tracker's epochs and predictions, ``otel-joules run``, the span hook of
:mod:`otel_joules.carbon.spans`). The functions of :mod:`otel_joules.carbon.units` are for
numbers a user gives and reject negatives; measurements can be a hair below zero (a
counter read a moment early, a share rounded down), so here such joules count as zero,
clamped once, in :meth:`CarbonAccounting.it_joules`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from otel_joules.carbon.intensity import CarbonIntensity
from otel_joules.carbon.units import JOULES_PER_KWH, validate_pue
from otel_joules.semconv import (
    CARBON_INTENSITY_GCO2EQ_PER_KWH,
    CARBON_INTENSITY_SOURCE,
    CARBON_PUE,
    ENERGY_ATTRIBUTED_CO2EQ_GRAMS,
    ENERGY_ATTRIBUTED_JOULES,
    ENERGY_ATTRIBUTED_SELF_CO2EQ_GRAMS,
    ENERGY_ATTRIBUTED_SELF_JOULES,
    ENERGY_CO2EQ_GRAMS,
)

#: Which share's CO2eq comes from which joules attribute.
_ATTRIBUTED_CO2EQ = (
    (ENERGY_ATTRIBUTED_JOULES, ENERGY_ATTRIBUTED_CO2EQ_GRAMS),
    (ENERGY_ATTRIBUTED_SELF_JOULES, ENERGY_ATTRIBUTED_SELF_CO2EQ_GRAMS),
)


@dataclass(frozen=True)
class CarbonAccounting:
    """The carbon of measured IT energy at one intensity and PUE.

    Attributes:
        intensity: The grid carbon intensity applied (value and source).
        pue: Data-centre PUE (validated: finite, >= 1.0).

    Raises:
        ConfigurationError: a PUE below 1 or not a number.
    """

    intensity: CarbonIntensity
    pue: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "pue", validate_pue(self.pue))

    @staticmethod
    def it_joules(joules: float) -> float:
        """Measured joules as accounted: measurement noise below zero counts as zero."""
        return max(joules, 0.0)

    @staticmethod
    def facility_kwh(joules: float, pue: float) -> float:
        """Facility energy in kWh of ``joules`` of measured IT energy at ``pue``: ``joules x pue / 3.6e6``.

        For callers that know the PUE but not (yet) the intensity, such as ``otel-joules report``.
        """
        return CarbonAccounting.it_joules(joules) * pue / JOULES_PER_KWH

    def kwh(self, joules: float) -> float:
        """Facility energy in kWh of ``joules`` of IT energy: ``joules x pue / 3.6e6``."""
        return self.facility_kwh(joules, self.pue)

    def co2eq_grams(self, joules: float) -> float:
        """Grams of CO2eq of ``joules`` of IT energy: ``joules / 3.6e6 x pue x intensity``."""
        return self.it_joules(joules) / JOULES_PER_KWH * self.pue * self.intensity.gco2eq_per_kwh

    def span_attributes(self, joules: float, span_attributes: Mapping[str, Any] | None = None) -> dict[str, float | str]:
        """The carbon attributes of a span whose interval energy is ``joules``.

        ``energy.co2eq.grams``, ``carbon.intensity.gco2eq_per_kwh``, ``carbon.intensity.source``
        and ``carbon.pue``; with ``span_attributes`` (the span's attributes so far), also the
        CO2eq of the attributed shares the span carries (``energy.attributed[.self].co2eq.grams``).
        """
        attributes: dict[str, float | str] = {
            ENERGY_CO2EQ_GRAMS: self.co2eq_grams(joules),
            CARBON_INTENSITY_GCO2EQ_PER_KWH: self.intensity.gco2eq_per_kwh,
            CARBON_INTENSITY_SOURCE: self.intensity.source,
            CARBON_PUE: self.pue,
        }
        if span_attributes:
            for joules_key, grams_key in _ATTRIBUTED_CO2EQ:
                share = span_attributes.get(joules_key)
                if isinstance(share, (int, float)) and not isinstance(share, bool):
                    attributes[grams_key] = self.co2eq_grams(float(share))
        return attributes
