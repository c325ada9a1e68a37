"""A run's PUE, kWh and CO2eq from its joules, and the options that override what it recorded.

``kWh = joules x PUE / 3.6e6`` and ``grams = kWh x intensity``; which PUE and intensity
(an option, the run's own, or a fallback) is :func:`run_carbon`'s choice, described in
:mod:`otel_joules.report`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from otel_joules.carbon.intensity import CarbonIntensity, resolve_carbon_intensity
from otel_joules.carbon.accounting import CarbonAccounting


@dataclass(frozen=True)
class CarbonOptions:
    """What the user asked for on the command line; None: use what each run recorded.

    Attributes:
        intensity_gco2eq_per_kwh: ``--intensity``: use this for every run.
        country: ``--country``: the offline yearly average of this country for every run.
        pue: ``--pue``: use this PUE for every run.
    """

    intensity_gco2eq_per_kwh: float | None = None
    country: str | None = None
    pue: float | None = None


class Intensities:
    """Resolves the override and the fallback intensity once each, when first needed."""

    def __init__(self, options: CarbonOptions) -> None:
        self.options = options
        self._override: CarbonIntensity | None = None
        self._fallback: CarbonIntensity | None = None
        if options.intensity_gco2eq_per_kwh is not None or options.country is not None:
            # Resolved now so that a bad value fails before any file is read.
            self._override = resolve_carbon_intensity(options.intensity_gco2eq_per_kwh, options.country)

    @property
    def override(self) -> CarbonIntensity | None:
        """The intensity of ``--intensity`` or ``--country`` for every run; None without either."""
        return self._override

    @property
    def fallback(self) -> CarbonIntensity:
        """The intensity for a run that recorded none (``OTEL_JOULES_COUNTRY`` or the world average)."""
        if self._fallback is None:
            self._fallback = resolve_carbon_intensity(None, None)
        return self._fallback


class RunCarbon(NamedTuple):
    """A run's carbon figures, named as :class:`RunSummary`'s fields (passed on with ``**_asdict()``)."""

    pue: float
    pue_origin: str
    energy_kwh: float
    co2eq_grams: float
    intensity_gco2eq_per_kwh: float | None
    intensity_source: str


def run_carbon(
    joules: float,
    *,
    recorded_pue: float | None,
    recorded_intensity: float | None,
    recorded_co2eq_grams: float | None,
    intensities: Intensities,
    recorded_kwh: float | None = None,
    prefer_recorded_co2eq: bool = False,
) -> RunCarbon:
    """PUE, kWh, grams and the intensity behind them for one run.

    A carbontracker log's own totals (``recorded_kwh``, and ``recorded_co2eq_grams`` with
    ``prefer_recorded_co2eq``) are used as they are unless an option overrides what they
    were computed with, so the report repeats the number the tracker printed instead of
    recomputing a near copy from the log's rounded intensity. Spans record their
    intensity as a full double, so for them the recorded intensity comes first.
    """
    options = intensities.options
    if options.pue is not None:
        pue, pue_origin = options.pue, "option"
    elif recorded_pue is not None and math.isfinite(recorded_pue) and recorded_pue >= 1.0:
        pue, pue_origin = recorded_pue, "recorded"
    else:
        pue, pue_origin = 1.0, "default"
    kwh = CarbonAccounting.facility_kwh(joules, pue)
    if recorded_kwh is not None and pue_origin == "recorded":
        kwh = recorded_kwh
    override = intensities.override
    if override is not None:
        return RunCarbon(pue, pue_origin, kwh, kwh * override.gco2eq_per_kwh, override.gco2eq_per_kwh, override.source)
    if prefer_recorded_co2eq and recorded_co2eq_grams is not None and options.pue is None:
        return RunCarbon(pue, pue_origin, kwh, recorded_co2eq_grams, recorded_intensity, "recorded")
    if recorded_intensity is not None:
        return RunCarbon(pue, pue_origin, kwh, kwh * recorded_intensity, recorded_intensity, "recorded")
    if recorded_co2eq_grams is not None and options.pue is None:
        derived = recorded_co2eq_grams / kwh if kwh > 0 else None
        return RunCarbon(pue, pue_origin, kwh, recorded_co2eq_grams, derived, "recorded co2eq")
    fallback = intensities.fallback
    return RunCarbon(pue, pue_origin, kwh, kwh * fallback.gco2eq_per_kwh, fallback.gco2eq_per_kwh, fallback.source)
