"""The packaged offline table: coverage, integrity, reference figures, lookups and the listing command."""

from __future__ import annotations

import csv
import importlib.resources
import re
from pathlib import Path

import pytest

from otel_joules.carbon import lookup_country, offline_table
from otel_joules.carbon.__main__ import main as list_main
from otel_joules.errors import ConfigurationError


def _raw_rows() -> list[dict[str, str]]:
    text = importlib.resources.files("otel_joules.carbon").joinpath("data", "carbon_intensity.csv").read_text("utf-8")
    return list(csv.DictReader(text.splitlines()))


def test_csv_has_the_documented_columns_and_200_plus_unique_codes() -> None:
    rows = _raw_rows()
    assert set(rows[0]) >= {"iso_code", "country", "gco2eq_per_kwh", "year", "source"}
    assert len(rows) >= 200
    codes = [row["iso_code"] for row in rows]
    assert len(codes) == len(set(codes))
    assert all(re.fullmatch(r"[A-Z]{2}", code) for code in codes)
    iso3 = [row["iso3_code"] for row in rows]
    assert len(iso3) == len(set(iso3)) and all(re.fullmatch(r"[A-Z]{3}", code) for code in iso3)
    for row in rows:
        assert row["country"] and row["source"]
        assert 2000 <= int(row["year"]) <= 2025
        assert 0.0 <= float(row["gco2eq_per_kwh"]) < 1500.0
    assert len(offline_table()) == len(rows)


@pytest.mark.parametrize(
    ("code", "expected"),
    [("US", 383.5), ("DK", 143.3), ("GB", 210.9), ("FR", 44.2)],
)
def test_reference_figures(code: str, expected: float) -> None:
    row = offline_table()[code]
    assert round(row.gco2eq_per_kwh, 1) == expected
    assert row.year == 2024
    assert "Our World in Data" in row.source


def test_every_row_equals_carbontrackers_shipped_owid_figure() -> None:
    # carbontracker 2.4.7 (dev dependency) ships the same OWID export; it is the oracle
    # that no figure was altered while converting the file.
    import carbontracker

    path = Path(carbontracker.__file__).parent / "data" / "carbon-intensities.csv"
    with path.open(newline="") as handle:
        theirs = {row["alpha-2"]: row for row in csv.DictReader(handle)}
    ours = offline_table()
    assert set(ours) == set(theirs)
    for code, row in ours.items():
        assert row.gco2eq_per_kwh == float(theirs[code]["Carbon intensity of electricity (gCO2eq/kWh)"])
        assert row.year == int(theirs[code]["Year"])
        assert row.iso3_code == theirs[code]["Code"]
        assert row.country == theirs[code]["Entity"]


def test_table_is_read_only() -> None:
    with pytest.raises(TypeError):
        offline_table()["XX"] = offline_table()["DK"]  # type: ignore[index]


@pytest.mark.parametrize("code", ["DK", "dk", " Dk ", "DNK", "dnk"])
def test_lookup_alpha2_and_alpha3_case_insensitive(code: str) -> None:
    row, note = lookup_country(code)
    assert row.iso_code == "DK" and row.country == "Denmark" and note == ""


def test_subdivision_falls_back_to_national_figure_with_a_note() -> None:
    row, note = lookup_country("us-ca")
    assert row.iso_code == "US"
    assert "US-CA" in note and "national" in note


@pytest.mark.parametrize(("code", "suggestion"), [("UK", "GB"), ("el", "GR"), ("Denmark", "DK")])
def test_unknown_code_suggests_the_iso_code(code: str, suggestion: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        lookup_country(code)
    message = str(info.value)
    assert f"Did you mean '{suggestion}'" in message
    assert "python -m otel_joules.carbon" in message


def test_unknown_code_without_suggestion() -> None:
    with pytest.raises(ConfigurationError, match=r"'QQ'.*ISO 3166-1 alpha-2.*python -m otel_joules.carbon") as info:
        lookup_country("QQ")
    assert "Did you mean" not in str(info.value)


def test_listing_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert list_main([]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(offline_table())
    (dk,) = [line for line in lines if line.startswith("DK ")]
    assert "143.3" in dk and "2024" in dk and "Denmark" in dk


def test_listing_one_code_and_an_unknown_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert list_main(["gbr"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("GB  GBR     210.9 gCO2eq/kWh  2024  United Kingdom")
    assert list_main(["UK"]) == 2
    assert "Did you mean 'GB'" in capsys.readouterr().err
