"""The offline table of yearly average grid carbon intensity per country.

``data/carbon_intensity.csv`` ships with the package (one row per ISO 3166-1
country or territory: ``iso_code, iso3_code, country, gco2eq_per_kwh, year, source``).
The figures are Our World in Data's "Carbon intensity of electricity generation"
series (Ember yearly electricity data and the Energy Institute Statistical Review),
the latest year published for each country, as carbontracker 2.4.7 ships them.
The year differs per row (mostly 2022-2024): read it, don't assume it.

List the codes with ``python -m otel_joules.carbon``.
"""

from __future__ import annotations

import csv
import functools
import importlib.resources
import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from otel_joules.errors import ConfigurationError

_DATA_FILE = "carbon_intensity.csv"

# Codes people use that are not the ISO 3166-1 alpha-2 code of that country.
_COMMON_MISTAKES = {"UK": "GB", "EL": "GR", "EN": "GB"}


@dataclass(frozen=True)
class OfflineIntensity:
    """One row of the offline table.

    Attributes:
        iso_code: ISO 3166-1 alpha-2 code (``DK``).
        iso3_code: ISO 3166-1 alpha-3 code (``DNK``).
        country: Country or territory name as the source spells it.
        gco2eq_per_kwh: Yearly average carbon intensity of electricity generation.
        year: The year that average is for.
        source: Who published the figure.
    """

    iso_code: str
    iso3_code: str
    country: str
    gco2eq_per_kwh: float
    year: int
    source: str


@functools.lru_cache(maxsize=1)
def offline_table() -> Mapping[str, OfflineIntensity]:
    """The packaged table, keyed by upper-case ISO 3166-1 alpha-2 code (read-only, read once)."""
    text = importlib.resources.files("otel_joules.carbon").joinpath("data", _DATA_FILE).read_text(encoding="utf-8")
    rows: dict[str, OfflineIntensity] = {}
    for line_no, raw in enumerate(csv.DictReader(text.splitlines()), start=2):
        code = raw["iso_code"].strip().upper()
        value = float(raw["gco2eq_per_kwh"])
        # A broken packaged file is a packaging bug: fail loudly with the line number.
        if len(code) != 2 or not code.isalpha() or code in rows or not math.isfinite(value) or value < 0:
            raise RuntimeError(f"{_DATA_FILE} line {line_no}: bad or duplicate row {raw!r}")
        rows[code] = OfflineIntensity(
            iso_code=code,
            iso3_code=raw["iso3_code"].strip().upper(),
            country=raw["country"].strip(),
            gco2eq_per_kwh=value,
            year=int(raw["year"]),
            source=raw["source"].strip(),
        )
    return MappingProxyType(rows)


def lookup_country(code: str) -> tuple[OfflineIntensity, str]:
    """Find ``code`` in the offline table; returns ``(row, note)``.

    Accepts, case-insensitively, an ISO 3166-1 alpha-2 code (``dk``), an alpha-3 code
    (``DNK``) or an ISO 3166-2 subdivision (``US-CA``), for which the national figure
    is returned and ``note`` says so (the table has no sub-national figures).
    ``note`` is empty otherwise.

    Raises:
        ConfigurationError: the code is not in the table; the message says how to
            list valid codes and suggests one when the input looks like a known mistake
            (``UK`` for ``GB``) or a country name.
    """
    table = offline_table()
    cleaned = str(code).strip().upper()
    if cleaned in table:
        return table[cleaned], ""
    for row in table.values():
        if row.iso3_code == cleaned:
            return row, ""
    country_part, dash, subdivision = cleaned.partition("-")
    if dash and subdivision and country_part in table:
        row = table[country_part]
        return row, f"no figure for {cleaned}; national average of {row.iso_code} used"
    raise ConfigurationError(_unknown_code_message(code, table))


def _unknown_code_message(code: str, table: Mapping[str, OfflineIntensity]) -> str:
    cleaned = str(code).strip().upper()
    suggestion = _COMMON_MISTAKES.get(cleaned)
    if suggestion is None:
        for row in table.values():
            if row.country.upper() == cleaned:
                suggestion = row.iso_code
                break
    hint = f" Did you mean {suggestion!r}?" if suggestion else ""
    return (
        f"country {code!r} (OTEL_JOULES_COUNTRY or country=) is not in the offline carbon-intensity table.{hint} "
        "Use an ISO 3166-1 alpha-2 code such as US, GB, DE or FR (alpha-3 codes and ISO 3166-2 "
        "subdivisions like US-CA also work); list all known codes with `python -m otel_joules.carbon`, "
        "or pass an explicit intensity in gCO2eq/kWh instead."
    )
