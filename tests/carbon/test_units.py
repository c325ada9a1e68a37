"""Conversions (joules, kWh, PUE, grams) and equivalents, against exact arithmetic and carbontracker."""

from __future__ import annotations

import math

import pytest

from otel_joules.carbon import (
    FACTORS,
    JOULES_PER_KWH,
    co2eq_grams,
    equivalents,
    equivalents_text,
    joules_to_kwh,
    km_by_car,
    kwh_to_joules,
    resolve_carbon_intensity,
    validate_pue,
)
from otel_joules.errors import ConfigurationError


def test_kwh_is_3_6_megajoules() -> None:
    assert JOULES_PER_KWH == 3_600_000.0
    assert joules_to_kwh(3.6e6) == 1.0
    assert joules_to_kwh(1800.0) == 0.0005
    assert kwh_to_joules(2.5) == 9.0e6
    assert joules_to_kwh(kwh_to_joules(0.123)) == pytest.approx(0.123, rel=1e-15)
    assert joules_to_kwh(0) == 0.0


def test_co2eq_grams_is_kwh_times_pue_times_intensity() -> None:
    # 1 kWh at the world average is exactly 445 g.
    assert co2eq_grams(3.6e6, 445.0) == 445.0
    # 100 W for an hour = 0.1 kWh; PUE 1.58 (carbontracker's default) -> 0.158 kWh at 143.3 g/kWh.
    assert co2eq_grams(100 * 3600, 143.3, pue=1.58) == pytest.approx(0.158 * 143.3, rel=1e-12)
    assert co2eq_grams(0.0, 445.0, pue=2.0) == 0.0
    assert co2eq_grams(7.2e6, 0.0) == 0.0


def test_co2eq_grams_accepts_a_resolved_intensity() -> None:
    dk = resolve_carbon_intensity(country="DK", env={})
    assert co2eq_grams(7.2e6, dk, pue=1.5) == pytest.approx(2 * 1.5 * dk.gco2eq_per_kwh, rel=1e-15)


def test_co2eq_matches_carbontracker_output_block() -> None:
    # carbontracker's example block: 0.000579398850 kWh -> 0.257832488281 g at 445 gCO2eq/kWh.
    grams = co2eq_grams(kwh_to_joules(0.000579398850), 445.0)
    assert grams == pytest.approx(0.257832488281, rel=1e-9)


@pytest.mark.parametrize("pue", [0.58, 0.0, -1.0, float("nan"), float("inf"), "abc", None])
def test_pue_below_one_or_not_a_number_is_rejected(pue: object) -> None:
    with pytest.raises(ConfigurationError, match="pue"):
        co2eq_grams(3.6e6, 445.0, pue=pue)  # type: ignore[arg-type]


def test_pue_hint_for_overhead_fraction() -> None:
    with pytest.raises(ConfigurationError, match=r"did you mean 1\.58"):
        validate_pue(0.58)
    assert validate_pue(1) == 1.0
    assert validate_pue("1.58") == 1.58  # type: ignore[arg-type]


@pytest.mark.parametrize("joules", [-1.0, float("nan"), float("inf"), "x"])
def test_bad_energy_is_rejected(joules: object) -> None:
    with pytest.raises(ConfigurationError, match="joules"):
        co2eq_grams(joules, 445.0)  # type: ignore[arg-type]


def test_bad_intensity_is_rejected() -> None:
    with pytest.raises(ConfigurationError, match="gco2eq_per_kwh"):
        co2eq_grams(3.6e6, -5.0)


def test_factor_figures_are_the_published_ones() -> None:
    by_key = {factor.key: factor for factor in FACTORS}
    assert set(by_key) == {"km_by_car", "smartphone_charges", "litres_of_petrol", "tree_seedlings_10y"}
    assert by_key["km_by_car"].grams_per_unit == 106.8
    assert by_key["smartphone_charges"].grams_per_unit == 12.4
    # EPA: 8.887e-3 t CO2 per US gallon; a US gallon is 3.785411784 L.
    assert by_key["litres_of_petrol"].grams_per_unit == pytest.approx(2347.70, abs=0.01)
    assert by_key["tree_seedlings_10y"].grams_per_unit == 60000.0
    for factor in FACTORS:
        assert factor.source and factor.unit


def test_equivalents_values() -> None:
    result = {item.key: item.amount for item in equivalents(1068.0)}
    assert result["km_by_car"] == pytest.approx(10.0, rel=1e-15)
    assert result["smartphone_charges"] == pytest.approx(1068.0 / 12.4, rel=1e-15)
    assert result["litres_of_petrol"] == pytest.approx(1068.0 * 3.785411784 / 8887.0, rel=1e-12)
    assert result["tree_seedlings_10y"] == pytest.approx(0.0178, rel=1e-12)
    assert km_by_car(0.0) == 0.0


def test_km_by_car_matches_carbontracker_text_and_converter() -> None:
    from carbontracker.emissions.conversion import co2eq as ct_co2eq

    # carbontracker prints 0.002414161875 km for 0.257832488281 g.
    assert f"{km_by_car(0.257832488281):.12f}" == "0.002414161875"
    ((ct_units, ct_unit),) = ct_co2eq.convert(0.257832488281)
    assert ct_unit == "km travelled by car"
    assert km_by_car(0.257832488281) == pytest.approx(ct_units, rel=1e-15)


def test_equivalents_text() -> None:
    lines = equivalents_text(106.8, decimals=2).splitlines()
    assert lines[0] == "1.00 km travelled by car"
    assert lines[1] == f"{106.8 / 12.4:.2f} smartphone charges"
    assert len(lines) == len(FACTORS)
    assert equivalents(0.257832488281)[0].text(12) == "0.002414161875 km travelled by car"


@pytest.mark.parametrize("grams", [-0.1, math.nan, "lots"])
def test_equivalents_reject_bad_input(grams: object) -> None:
    with pytest.raises(ConfigurationError, match="co2eq_grams"):
        equivalents(grams)  # type: ignore[arg-type]


def test_one_duration_form_for_every_table_row() -> None:
    from otel_joules.carbon.units import format_duration

    assert [format_duration(s) for s in (0.526, 2.0, 59.9996, 3723.25, 0.0)] == [
        "0:00:00.526", "0:00:02.000", "0:01:00.000", "1:02:03.250", "0:00:00.000"
    ]
    assert format_duration(None) == format_duration(float("nan")) == "-"
