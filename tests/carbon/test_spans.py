"""CO2eq on spans: instrument() puts carbon on spans when an intensity is known, never blocking a span."""

from __future__ import annotations

import time

import pytest

import otel_joules
from otel_joules import EnergyMeter
from otel_joules.carbon import ElectricityMapsProvider, co2eq_grams, lookup_country, resolve_carbon_intensity
from otel_joules.carbon.spans import SpanCarbon, span_carbon_from_settings
from otel_joules.errors import ConfigurationError
from otel_joules.tracing.processor import EnergySpanProcessor

from tests.carbon.test_providers import EM_PATH, FakeClock, FakeService, em_body, service  # noqa: F401  (fixture)

CARBON_VARIABLES = ("OTEL_JOULES_COUNTRY", "OTEL_JOULES_CARBON_PROVIDERS", "OTEL_JOULES_ELECTRICITYMAPS_API_KEY")


@pytest.fixture(autouse=True)
def _no_carbon_settings(monkeypatch):
    for name in CARBON_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def _spend(tracer_provider, powercap, name: str = "step"):
    """One span during which the package spends 2 J and DRAM 0.5 J."""
    with tracer_provider.get_tracer("t").start_as_current_span(name):
        powercap.zones["package_0"].advance_joules(2.0)
        powercap.zones["dram_0"].advance_joules(0.5)


def test_explicit_intensity_puts_co2_on_interval_and_attributed_energy(tracer_provider, span_exporter, powercap):
    handle = otel_joules.instrument(tracer_provider, metrics_enabled=False, carbon_intensity=300.0, pue=1.2,
                                    sysfs_root=powercap.sysfs_root)
    try:
        _spend(tracer_provider, powercap)
    finally:
        handle.uninstrument()
    (span,) = span_exporter.get_finished_spans()
    a = span.attributes
    assert a["energy.joules"] == pytest.approx(2.5)
    assert a["energy.co2eq.grams"] == pytest.approx(2.5 / 3.6e6 * 1.2 * 300)
    assert a["energy.co2eq.grams"] == co2eq_grams(a["energy.joules"], 300.0, 1.2)
    # Of whatever shares the span carries when it ends (read from the live span).
    assert a["energy.attributed.co2eq.grams"] == co2eq_grams(a["energy.attributed.joules"], 300.0, 1.2)
    assert a["energy.attributed.self.co2eq.grams"] == co2eq_grams(a["energy.attributed.self.joules"], 300.0, 1.2)
    assert (a["carbon.intensity.gco2eq_per_kwh"], a["carbon.intensity.source"], a["carbon.pue"]) == (300.0, "explicit", 1.2)


def test_the_configured_country_gives_the_offline_figure(tracer_provider, span_exporter, powercap, monkeypatch):
    monkeypatch.setenv("OTEL_JOULES_COUNTRY", "DK")
    handle = otel_joules.instrument(tracer_provider, metrics_enabled=False, sysfs_root=powercap.sysfs_root)
    try:
        _spend(tracer_provider, powercap)
    finally:
        handle.uninstrument()
    (span,) = span_exporter.get_finished_spans()
    dk = lookup_country("DK")[0].gco2eq_per_kwh
    assert span.attributes["carbon.intensity.source"] == "offline"
    assert span.attributes["carbon.intensity.gco2eq_per_kwh"] == dk
    assert span.attributes["energy.co2eq.grams"] == pytest.approx(2.5 / 3.6e6 * dk)


def test_no_intensity_configured_means_no_co2_on_spans(tracer_provider, span_exporter, powercap):
    handle = otel_joules.instrument(tracer_provider, metrics_enabled=False, sysfs_root=powercap.sysfs_root)
    try:
        _spend(tracer_provider, powercap)
    finally:
        handle.uninstrument()
    (span,) = span_exporter.get_finished_spans()
    assert span.attributes["energy.joules"] == pytest.approx(2.5)
    assert not [key for key in span.attributes if "co2" in key or key.startswith("carbon.")]


def test_bad_carbon_settings_fail_instrument_with_what_to_do(tracer_provider, powercap):
    with pytest.raises(ConfigurationError, match="python -m otel_joules.carbon"):
        otel_joules.instrument(tracer_provider, country="XX", sysfs_root=powercap.sysfs_root)
    with pytest.raises(ConfigurationError, match="did you mean 1.5"):
        otel_joules.instrument(tracer_provider, carbon_intensity=100, pue=0.5, sysfs_root=powercap.sysfs_root)


def test_live_provider_is_resolved_once_and_refreshed_without_blocking_a_span(service: FakeService, tracer_provider, span_exporter, powercap):
    clock = FakeClock()
    service.json(EM_PATH, em_body("DE", 302))
    provider = ElectricityMapsProvider("key", "DE", base_url=service.url, timeout_s=5.0, cache_ttl_s=60, clock=clock)
    carbon = span_carbon_from_settings(providers=[provider], env={})
    assert carbon is not None and carbon.intensity.gco2eq_per_kwh == 302.0 and service.hits(EM_PATH) == 1

    # The same provider, with a clock the test moves, behind the span processor.
    hook = SpanCarbon(carbon.intensity, refresh=lambda: resolve_carbon_intensity(providers=[provider], env={}),
                      refresh_after_s=60, clock=clock)
    meter = EnergyMeter(sysfs_root=powercap.sysfs_root)
    tracer_provider.add_span_processor(EnergySpanProcessor(meter, on_measurement=hook))
    try:
        _spend(tracer_provider, powercap, "cached")
        assert service.hits(EM_PATH) == 1  # within the cache: no request

        # Expired; the service now answers 150, slowly: the span must not wait for it.
        service.json(EM_PATH, em_body("DE", 150), delay_s=30)
        clock.now += 61
        started = time.monotonic()
        _spend(tracer_provider, powercap, "while-refreshing")
        assert time.monotonic() - started < 2.0
        service.release.set()
        deadline = time.monotonic() + 10
        while hook.intensity.gco2eq_per_kwh != 150.0 and time.monotonic() < deadline:
            time.sleep(0.01)
        _spend(tracer_provider, powercap, "refreshed")
    finally:
        meter.close()
    by_name = {s.name: s.attributes for s in span_exporter.get_finished_spans()}
    assert by_name["cached"]["carbon.intensity.gco2eq_per_kwh"] == 302.0
    assert by_name["while-refreshing"]["carbon.intensity.gco2eq_per_kwh"] == 302.0
    assert by_name["refreshed"]["carbon.intensity.gco2eq_per_kwh"] == 150.0
    assert by_name["refreshed"]["carbon.intensity.source"] == "electricitymaps"
    assert by_name["refreshed"]["energy.co2eq.grams"] == pytest.approx(2.5 / 3.6e6 * 150)
    assert service.hits(EM_PATH) == 2
