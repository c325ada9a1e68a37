"""CarbonAccounting (the one joules -> kWh -> CO2eq formula for measurements) and RefreshingIntensity."""

from __future__ import annotations

import threading

import pytest

from otel_joules.carbon import CarbonIntensity, co2eq_grams
from otel_joules.carbon.accounting import CarbonAccounting
from otel_joules.carbon.refresh import RefreshingIntensity
from otel_joules.errors import ConfigurationError
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

INTENSITY = CarbonIntensity(gco2eq_per_kwh=300.0, source="explicit", region=None, year=None, detail="given")


def test_kwh_and_grams_are_the_units_formulas() -> None:
    accounting = CarbonAccounting(INTENSITY, 1.5)
    assert accounting.kwh(7.2e6) == pytest.approx(3.0, rel=1e-15)  # 2 kWh IT x PUE 1.5
    # The same number as the user-input function, to the last bit.
    assert accounting.co2eq_grams(7.2e6) == co2eq_grams(7.2e6, INTENSITY, 1.5)


def test_measurement_noise_below_zero_counts_as_zero() -> None:
    accounting = CarbonAccounting(INTENSITY, 1.2)
    assert accounting.kwh(-1e-9) == 0.0
    assert accounting.co2eq_grams(-1e-9) == 0.0
    assert CarbonAccounting.it_joules(-3.0) == 0.0 and CarbonAccounting.it_joules(3.0) == 3.0


def test_pue_is_validated_once() -> None:
    with pytest.raises(ConfigurationError, match="pue"):
        CarbonAccounting(INTENSITY, 0.58)


def test_span_attributes_name_the_intensity_pue_and_attributed_shares() -> None:
    accounting = CarbonAccounting(INTENSITY, 1.2)
    plain = accounting.span_attributes(3.6e6)
    assert plain == {
        ENERGY_CO2EQ_GRAMS: pytest.approx(360.0, rel=1e-12),
        CARBON_INTENSITY_GCO2EQ_PER_KWH: 300.0,
        CARBON_INTENSITY_SOURCE: "explicit",
        CARBON_PUE: 1.2,
    }
    shared = accounting.span_attributes(
        3.6e6, {ENERGY_ATTRIBUTED_JOULES: 1.8e6, ENERGY_ATTRIBUTED_SELF_JOULES: -0.1, "other": "x"}
    )
    assert shared[ENERGY_ATTRIBUTED_CO2EQ_GRAMS] == pytest.approx(180.0, rel=1e-12)
    assert shared[ENERGY_ATTRIBUTED_SELF_CO2EQ_GRAMS] == 0.0  # a share rounded below zero


def test_refreshing_intensity_resolves_once_and_never_refreshes_an_explicit_value() -> None:
    source = RefreshingIntensity.resolve(250.0, None, ())
    assert source.current().gco2eq_per_kwh == 250.0 and source.current().source == "explicit"
    source.start()  # nothing to refresh: no thread
    assert source._thread is None
    assert source.values() == [250.0]
    source.stop()


def test_refreshing_intensity_refreshes_from_live_providers_in_the_background(monkeypatch: pytest.MonkeyPatch) -> None:
    import otel_joules.carbon.refresh as refresh_module

    first = CarbonIntensity(gco2eq_per_kwh=100.0, source="offline", region="DK", year=2024, detail="table")
    newer = CarbonIntensity(gco2eq_per_kwh=120.0, source="electricitymaps", region="DK", year=None, detail="live")
    refreshed = threading.Event()

    def resolve(explicit: object, country: object, providers: object, **_kwargs: object) -> CarbonIntensity:
        refreshed.set()
        return newer

    monkeypatch.setattr(refresh_module, "resolve_carbon_intensity", resolve)
    source = RefreshingIntensity(first, None, "DK", [object()], refresh_s=3600.0)  # type: ignore[list-item]
    try:
        source.start(now=True)  # asks once now, in the background, then every hour
        assert refreshed.wait(5)
        for _ in range(500):
            if source.current() is newer:
                break
            threading.Event().wait(0.01)
    finally:
        source.stop()
    assert source.current() is newer
    assert source.values() == [100.0, 120.0]
