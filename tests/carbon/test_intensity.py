"""Resolution order without live providers: explicit, offline country figure, world average.

Live providers (and their fall-through) are tested against a local HTTP server in
tests/carbon/test_providers.py.
"""

from __future__ import annotations

import logging

import pytest

from otel_joules.carbon import (
    SOURCES,
    WORLD_AVERAGE_GCO2EQ_PER_KWH,
    CarbonIntensity,
    offline_table,
    resolve_carbon_intensity,
)
from otel_joules.errors import ConfigurationError


def test_world_average_when_nothing_is_configured() -> None:
    result = resolve_carbon_intensity(env={})
    assert WORLD_AVERAGE_GCO2EQ_PER_KWH == 445.0
    assert result == CarbonIntensity(445.0, "world_average", None, 2024, result.detail)
    assert "IEA" in result.detail and "OTEL_JOULES_COUNTRY" in result.detail


def test_country_argument_gives_the_offline_yearly_average() -> None:
    result = resolve_carbon_intensity(country="dk", env={})
    assert result.source == "offline"
    assert result.region == "DK"
    assert result.year == 2024
    assert result.gco2eq_per_kwh == offline_table()["DK"].gco2eq_per_kwh
    assert round(result.gco2eq_per_kwh, 1) == 143.3
    assert "Denmark" in result.detail and "2024" in result.detail and "Our World in Data" in result.detail


def test_country_from_environment_variable() -> None:
    result = resolve_carbon_intensity(env={"OTEL_JOULES_COUNTRY": "fr"})
    assert (result.source, result.region, round(result.gco2eq_per_kwh, 1)) == ("offline", "FR", 44.2)


def test_country_argument_beats_environment() -> None:
    result = resolve_carbon_intensity(country="GB", env={"OTEL_JOULES_COUNTRY": "FR"})
    assert (result.region, round(result.gco2eq_per_kwh, 1)) == ("GB", 210.9)


def test_blank_country_is_the_same_as_none() -> None:
    assert resolve_carbon_intensity(country="  ", env={"OTEL_JOULES_COUNTRY": ""}).source == "world_average"


def test_os_environ_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_JOULES_COUNTRY", "usa")
    result = resolve_carbon_intensity()
    assert (result.source, result.region, round(result.gco2eq_per_kwh, 1)) == ("offline", "US", 383.5)


def test_explicit_value_wins_and_keeps_the_country_as_region() -> None:
    result = resolve_carbon_intensity(12.5, country="DK", env={"OTEL_JOULES_COUNTRY": "FR"})
    assert result == CarbonIntensity(12.5, "explicit", "DK", None, result.detail)
    assert resolve_carbon_intensity(0, env={}).gco2eq_per_kwh == 0.0


def test_subdivision_uses_national_figure_and_says_so() -> None:
    result = resolve_carbon_intensity(country="US-TX", env={})
    assert result.region == "US" and result.source == "offline"
    assert "US-TX" in result.detail


@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf"), "much", True])
def test_bad_explicit_value_is_a_configuration_error(value: object) -> None:
    with pytest.raises(ConfigurationError, match="explicit carbon intensity"):
        resolve_carbon_intensity(value, env={})  # type: ignore[arg-type]


def test_unknown_country_is_an_error_even_with_an_explicit_value() -> None:
    with pytest.raises(ConfigurationError, match=r"'XX'.*python -m otel_joules.carbon"):
        resolve_carbon_intensity(100.0, country="XX", env={})


def test_unknown_country_in_the_environment_is_said_once_and_ignored(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="otel_joules"):
        first = resolve_carbon_intensity(env={"OTEL_JOULES_COUNTRY": "XQ"})
        resolve_carbon_intensity(env={"OTEL_JOULES_COUNTRY": "XQ"})
    assert first.source == "world_average"
    (record,) = [r for r in caplog.records if "OTEL_JOULES_COUNTRY='XQ'" in r.getMessage()]
    assert "python -m otel_joules.carbon" in record.getMessage()


def test_carbon_intensity_validates_itself() -> None:
    assert SOURCES == ("explicit", "electricitymaps", "uk_carbon_intensity", "energidataservice", "offline", "world_average")
    with pytest.raises(ValueError, match="source"):
        CarbonIntensity(1.0, "guess", None, None, "")
    with pytest.raises(ValueError, match="gco2eq_per_kwh"):
        CarbonIntensity(-1.0, "explicit", None, None, "")
    assert str(CarbonIntensity(143.30042, "offline", "DK", 2024, "x")) == "143.30 gCO2eq/kWh (offline: x)"


def test_world_average_advice_to_set_the_country_works() -> None:
    from otel_joules.carbon import resolve_carbon_intensity

    fallback = resolve_carbon_intensity(env={})
    assert fallback.source == "world_average"
    assert "set OTEL_JOULES_COUNTRY to use your country's figure" in fallback.detail
    followed = resolve_carbon_intensity(env={"OTEL_JOULES_COUNTRY": "DK"})
    assert followed.source == "offline" and followed.gco2eq_per_kwh != fallback.gco2eq_per_kwh
