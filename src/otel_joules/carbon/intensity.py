"""Which carbon intensity applies, and where it came from.

:func:`resolve_carbon_intensity` picks, in this order:

1. ``explicit``: a value the caller passes (gCO2eq/kWh);
2. each configured live provider in turn (``electricitymaps``, ``uk_carbon_intensity``,
   ``energidataservice``; see :mod:`otel_joules.carbon.providers`); a failing one is
   skipped with one logged warning;
3. ``offline``: the yearly average for the country (``country=`` or
   ``OTEL_JOULES_COUNTRY``; ISO 3166 codes, case-insensitive) from the packaged table;
   the country may come from opt-in IP geolocation (``geolocator=``) when none is set;
4. ``world_average``: 445 gCO2eq/kWh, the IEA's world average for 2024.

The result is a :class:`CarbonIntensity` whose ``source`` and ``detail`` say which one was used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Mapping

from otel_joules.config import OTEL_JOULES_COUNTRY, Settings, report_bad_value
from otel_joules.errors import ConfigurationError

if TYPE_CHECKING:
    from otel_joules.carbon.providers import IpGeolocator, LiveProvider

#: World average carbon intensity of electricity, gCO2eq/kWh (IEA, 2024 data; carbontracker's figure).
WORLD_AVERAGE_GCO2EQ_PER_KWH = 445.0
#: The year :data:`WORLD_AVERAGE_GCO2EQ_PER_KWH` is for.
WORLD_AVERAGE_YEAR = 2024

#: Every value ``CarbonIntensity.source`` can take, in resolution order.
SOURCES = ("explicit", "electricitymaps", "uk_carbon_intensity", "energidataservice", "offline", "world_average")


@dataclass(frozen=True)
class CarbonIntensity:
    """A carbon intensity and its provenance.

    Attributes:
        gco2eq_per_kwh: Grams of CO2eq per kWh of electricity.
        source: One of :data:`SOURCES`.
        region: ISO code, Electricity Maps zone or price area the value is for, if known.
        year: The year of a yearly average (offline table, world average); None for live values.
        detail: One human-readable line: what exactly was used (and why, for fallbacks).
    """

    gco2eq_per_kwh: float
    source: str
    region: str | None
    year: int | None
    detail: str

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"source={self.source!r} is not one of {SOURCES}")
        value = self.gco2eq_per_kwh
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"gco2eq_per_kwh={value!r} must be a finite number >= 0")

    def __str__(self) -> str:
        return f"{self.gco2eq_per_kwh:.2f} gCO2eq/kWh ({self.source}: {self.detail})"


def _explicit(value: float, country: str | None) -> CarbonIntensity:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigurationError(
            f"explicit carbon intensity {value!r} is not a number; pass gCO2eq/kWh, e.g. 445.0"
        ) from None
    if isinstance(value, bool) or not math.isfinite(number) or number < 0:
        raise ConfigurationError(f"explicit carbon intensity {value!r} must be a finite number of gCO2eq/kWh >= 0")
    return CarbonIntensity(number, "explicit", country, None, "value given by the caller")


def resolve_carbon_intensity(
    explicit_gco2eq_per_kwh: float | None = None,
    country: str | None = None,
    providers: Iterable["LiveProvider"] = (),
    *,
    env: Mapping[str, str] | None = None,
    geolocator: "IpGeolocator | None" = None,
) -> CarbonIntensity:
    """The carbon intensity to use now, and where it came from (see the module docstring).

    Args:
        explicit_gco2eq_per_kwh: A value to use as is; wins over everything else.
        country: ISO 3166 code (``DK``, ``DNK``, ``US-CA``); default ``OTEL_JOULES_COUNTRY``.
        providers: Live providers to try in order; each is cached and time-bounded and
            never raises (a failure logs one warning and falls through).
        env: Environment to read ``OTEL_JOULES_COUNTRY`` from (default ``os.environ``).
        geolocator: Opt-in IP geolocation (:class:`~otel_joules.carbon.providers.IpGeolocator`),
            asked only when no country is configured and nothing earlier gave a value.

    Raises:
        ConfigurationError: the explicit value is not a number >= 0, or ``country`` is
            unknown (the message says how to list valid codes). An unknown
            ``OTEL_JOULES_COUNTRY`` is reported once and ignored; live providers never
            cause an exception here.
    """
    from otel_joules.carbon.offline import lookup_country

    explicit_country = country is not None and bool(str(country).strip())
    configured = str(country).strip() if explicit_country else Settings.from_env(env).country
    # A wrong code given in code is an error even when a live value would be found: it
    # would silently change results the day the provider is down. From the environment it
    # is said once and ignored (a setting never breaks the program).
    row_and_note = None
    if configured and explicit_country:
        row_and_note = lookup_country(configured)
    elif configured:
        try:
            row_and_note = lookup_country(configured)
        except ConfigurationError as exc:
            report_bad_value(OTEL_JOULES_COUNTRY, configured, f"is unusable ({exc})", "no country")
    region = row_and_note[0].iso_code if row_and_note else None

    if explicit_gco2eq_per_kwh is not None:
        return _explicit(explicit_gco2eq_per_kwh, region)

    for provider in providers:
        live = provider.current()
        if live is not None:
            return live

    located_note = ""
    if row_and_note is None and geolocator is not None:
        located = geolocator.locate()
        if located is not None:
            try:
                row_and_note = lookup_country(located)
                located_note = " (country from IP geolocation)"
            except ConfigurationError:
                located_note = f"; IP geolocation gave {located!r}, which is not in the offline table"

    if row_and_note is not None:
        row, note = row_and_note
        detail = f"{row.country} yearly average for {row.year} ({row.source}){located_note}"
        if note:
            detail += f"; {note}"
        return CarbonIntensity(row.gco2eq_per_kwh, "offline", row.iso_code, row.year, detail)

    return CarbonIntensity(
        WORLD_AVERAGE_GCO2EQ_PER_KWH,
        "world_average",
        None,
        WORLD_AVERAGE_YEAR,
        f"world average for {WORLD_AVERAGE_YEAR} (IEA); set OTEL_JOULES_COUNTRY to use your country's figure"
        + located_note,
    )
