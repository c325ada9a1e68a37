"""Live providers against a local HTTP server serving each service's documented response shapes.

Also: timeouts, HTTP errors and garbage bodies fall through to the next source with
exactly one warning; the cache avoids repeated requests; opt-in IP geolocation.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest

from otel_joules.carbon import (
    CarbonIntensity,
    ElectricityMapsProvider,
    EnergiDataServiceProvider,
    IpGeolocator,
    UKCarbonIntensityProvider,
    offline_table,
    providers_from_env,
    resolve_carbon_intensity,
)
from otel_joules.carbon.providers import LiveProvider, LiveReading, ProviderError
from otel_joules.errors import ConfigurationError
from tests.helpers.processes import closed_port

TIMEOUT_S = 0.2


@dataclass
class Route:
    status: int = 200
    body: bytes = b""
    delay_s: float = 0.0


@dataclass
class Seen:
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]


@dataclass
class FakeService:
    """A 127.0.0.1 HTTP server with canned answers per path; records every request."""

    url: str
    routes: dict[str, Route] = field(default_factory=dict)
    requests: list[Seen] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    def json(self, path: str, payload: object, status: int = 200, delay_s: float = 0.0) -> None:
        self.routes[path] = Route(status, json.dumps(payload).encode(), delay_s)

    def raw(self, path: str, body: bytes, status: int = 200, delay_s: float = 0.0) -> None:
        self.routes[path] = Route(status, body, delay_s)

    def hits(self, path: str) -> int:
        return sum(1 for seen in self.requests if seen.path == path)


@pytest.fixture
def service() -> Iterator[FakeService]:
    state: dict[str, FakeService] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            fake = state["fake"]
            parts = urllib.parse.urlsplit(self.path)
            headers = {name.lower(): value for name, value in self.headers.items()}
            fake.requests.append(Seen(parts.path, urllib.parse.parse_qs(parts.query), headers))
            route = fake.routes.get(parts.path, Route(404, b'{"error": "not found"}'))
            if route.delay_s:
                fake.release.wait(route.delay_s)
            try:
                self.send_response(route.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(route.body)))
                self.end_headers()
                self.wfile.write(route.body)
            except OSError:
                pass  # the client gave up (timeout test); nothing to answer

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet test output
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state["fake"] = FakeService(url=f"http://127.0.0.1:{server.server_address[1]}")
    # A short poll interval keeps shutdown() (once per test) from adding 0.5 s each.
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield state["fake"]
    finally:
        state["fake"].release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


class FakeClock:
    """Monotonic clock the test moves by hand, to test cache expiry without sleeping."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == "otel_joules.carbon"]


# Documented response shapes (values chosen per test).
def em_body(zone: str = "DE", value: object = 302) -> dict[str, object]:
    return {
        "zone": zone,
        "carbonIntensity": value,
        "datetime": "2019-05-21T00:00:00.000Z",
        "updatedAt": "2022-04-07T15:32:21.002Z",
        "emissionFactorType": "lifecycle",
        "isEstimated": False,
        "estimationMethod": None,
    }


def uk_national(forecast: object = 266, actual: object = 263) -> dict[str, object]:
    return {"data": [{"from": "2018-01-20T12:00Z", "to": "2018-01-20T12:30Z", "intensity": {"forecast": forecast, "actual": actual, "index": "moderate"}}]}


def uk_regional(forecast: object = 181) -> dict[str, object]:
    return {
        "data": [
            {
                "regionid": 3,
                "dnoregion": "Electricity North West",
                "shortname": "North West England",
                "postcode": "RG10",
                "data": [
                    {
                        "from": "2018-01-20T12:00Z",
                        "to": "2018-01-20T12:30Z",
                        "intensity": {"forecast": forecast, "index": "moderate"},
                        "generationmix": [{"fuel": "gas", "perc": 43.6}, {"fuel": "coal", "perc": 0.7}],
                    }
                ],
            }
        ]
    }


def eds_body(records: list[tuple[str, str, object]]) -> dict[str, object]:
    return {
        "total": 1465496,
        "limit": 12,
        "dataset": "CO2Emis",
        "records": [
            {"Minutes5UTC": when, "Minutes5DK": when, "PriceArea": area, "CO2Emission": value} for when, area, value in records
        ],
    }


EM_PATH = "/v3/carbon-intensity/latest"
EDS_PATH = "/dataset/CO2Emis"


# --- Electricity Maps -------------------------------------------------------------------------


def test_electricitymaps_by_zone(service: FakeService) -> None:
    service.json(EM_PATH, em_body("DE", 302))
    result = ElectricityMapsProvider("secret-token", "DE", base_url=service.url, timeout_s=1.0).current()
    assert result is not None
    assert (result.gco2eq_per_kwh, result.source, result.region, result.year) == (302.0, "electricitymaps", "DE", None)
    assert "2019-05-21T00:00:00.000Z" in result.detail and "lifecycle" in result.detail
    (seen,) = service.requests
    assert seen.path == EM_PATH and seen.query == {"zone": ["DE"]}
    assert seen.headers.get("auth-token") == "secret-token"


def test_electricitymaps_by_coordinates(service: FakeService) -> None:
    service.json(EM_PATH, em_body("DK-DK2", 131.5))
    result = ElectricityMapsProvider("k", lat=55.68, lon=12.57, base_url=service.url, timeout_s=1.0).current()
    assert result is not None and (result.gco2eq_per_kwh, result.region) == (131.5, "DK-DK2")
    assert service.requests[0].query == {"lat": ["55.68"], "lon": ["12.57"]}


@pytest.mark.parametrize(
    "kwargs",
    [{"zone": None}, {"zone": "DE", "lat": 1.0, "lon": 2.0}, {"zone": None, "lat": 1.0}, {"zone": None, "lat": 91.0, "lon": 0.0}],
)
def test_electricitymaps_needs_zone_or_coordinates(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        ElectricityMapsProvider("k", **kwargs)  # type: ignore[arg-type]


def test_electricitymaps_needs_a_key() -> None:
    with pytest.raises(ConfigurationError, match="API key"):
        ElectricityMapsProvider(" ", "DE")


# --- carbonintensity.org.uk --------------------------------------------------------------------


def test_uk_national_prefers_actual(service: FakeService) -> None:
    service.json("/intensity", uk_national(forecast=266, actual=263))
    result = UKCarbonIntensityProvider(base_url=service.url, timeout_s=1.0).current()
    assert result is not None
    assert (result.gco2eq_per_kwh, result.source, result.region) == (263.0, "uk_carbon_intensity", "GB")
    assert "national actual" in result.detail and "2018-01-20T12:00Z" in result.detail


def test_uk_national_uses_forecast_when_actual_not_yet_published(service: FakeService) -> None:
    service.json("/intensity", uk_national(forecast=148, actual=None))
    result = UKCarbonIntensityProvider(base_url=service.url, timeout_s=1.0).current()
    assert result is not None and result.gco2eq_per_kwh == 148.0 and "forecast" in result.detail


def test_uk_regional_by_postcode_outward_code(service: FakeService) -> None:
    service.json("/regional/postcode/RG10", uk_regional(181))
    result = UKCarbonIntensityProvider("rg10 9xx", base_url=service.url, timeout_s=1.0).current()
    assert result is not None and result.gco2eq_per_kwh == 181.0
    assert "RG10" in result.detail and "North West England" in result.detail
    assert [seen.path for seen in service.requests] == ["/regional/postcode/RG10"]


def test_uk_regional_failure_falls_back_to_national(service: FakeService) -> None:
    service.raw("/regional/postcode/RG10", b"oops", status=500)
    service.json("/intensity", uk_national(forecast=200, actual=199))
    result = UKCarbonIntensityProvider("RG10", base_url=service.url, timeout_s=1.0).current()
    assert result is not None and result.gco2eq_per_kwh == 199.0
    assert "national" in result.detail and "HTTP 500" in result.detail


def test_uk_rejects_a_non_postcode() -> None:
    with pytest.raises(ConfigurationError, match="postcode"):
        UKCarbonIntensityProvider("not a postcode")


# --- Energi Data Service -----------------------------------------------------------------------


def test_energidataservice_averages_newest_dk1_and_dk2(service: FakeService) -> None:
    service.json(
        EDS_PATH,
        eds_body(
            [
                ("2023-12-20T12:05:00", "DK1", 94.0),
                ("2023-12-20T12:05:00", "DK2", 120.0),
                ("2023-12-20T12:00:00", "DK1", 500.0),
                ("2023-12-20T12:00:00", "DK2", 500.0),
            ]
        ),
    )
    result = EnergiDataServiceProvider(base_url=service.url, timeout_s=1.0).current()
    assert result is not None
    assert (result.gco2eq_per_kwh, result.source, result.region) == (107.0, "energidataservice", "DK")
    assert "DK1 94" in result.detail and "DK2 120" in result.detail
    (seen,) = service.requests
    assert json.loads(seen.query["filter"][0]) == {"PriceArea": ["DK1", "DK2"]}
    assert seen.query["sort"] == ["Minutes5UTC DESC"]


def test_energidataservice_single_price_area(service: FakeService) -> None:
    service.json(EDS_PATH, eds_body([("2023-12-20T12:05:00", "DK2", 61.0)]))
    result = EnergiDataServiceProvider("dk2", base_url=service.url, timeout_s=1.0).current()
    assert result is not None and (result.gco2eq_per_kwh, result.region) == (61.0, "DK2")
    assert json.loads(service.requests[0].query["filter"][0]) == {"PriceArea": ["DK2"]}


def test_energidataservice_missing_area_is_a_failure(service: FakeService, caplog: pytest.LogCaptureFixture) -> None:
    service.json(EDS_PATH, eds_body([("2023-12-20T12:05:00", "DK1", 94.0)]))
    assert EnergiDataServiceProvider(base_url=service.url, timeout_s=1.0).current() is None
    assert any("DK2" in message for message in warnings_of(caplog))


def test_energidataservice_rejects_unknown_area() -> None:
    with pytest.raises(ConfigurationError, match="DK1"):
        EnergiDataServiceProvider("DK3")


# --- failures fall through with one warning -----------------------------------------------------


def _provider(kind: str, url: str) -> object:
    if kind == "electricitymaps":
        return ElectricityMapsProvider("k", "DK", base_url=url, timeout_s=TIMEOUT_S)
    if kind == "uk":
        return UKCarbonIntensityProvider(base_url=url, timeout_s=TIMEOUT_S)
    return EnergiDataServiceProvider(base_url=url, timeout_s=TIMEOUT_S)


PATHS = {"electricitymaps": EM_PATH, "uk": "/intensity", "eds": EDS_PATH}
GOOD = {
    "electricitymaps": em_body("DK", 100),
    "uk": uk_national(100, 100),
    "eds": eds_body([("t", "DK1", 100), ("t", "DK2", 100)]),
}
GARBAGE = {
    "not json": b"<html>502 Bad Gateway</html>",
    "empty": b"",
    "wrong shape": b'{"unexpected": []}',
    "string value": None,
    "negative value": None,
    "absurd value": None,
}


def _garbage_body(kind: str, name: str) -> bytes:
    body = GARBAGE[name]
    if body is not None:
        return body
    value: object = {"string value": "high", "negative value": -5, "absurd value": 1e9}[name]
    payload = {
        "electricitymaps": em_body("DK", value),
        "uk": uk_national(value, value),
        "eds": eds_body([("t", "DK1", value), ("t", "DK2", value)]),
    }[kind]
    return json.dumps(payload).encode()


def _assert_fell_through(result: CarbonIntensity, caplog: pytest.LogCaptureFixture, *reasons: str) -> None:
    assert result.source == "offline" and result.region == "DK"
    assert result.gco2eq_per_kwh == offline_table()["DK"].gco2eq_per_kwh
    messages = warnings_of(caplog)
    assert len(messages) == 1, messages
    assert "unavailable" in messages[0] and "next source" in messages[0]
    if reasons:
        assert any(reason in messages[0] for reason in reasons), messages[0]


@pytest.mark.parametrize("kind", ["electricitymaps", "uk", "eds"])
def test_timeout_falls_through_fast_with_one_warning(
    kind: str, service: FakeService, caplog: pytest.LogCaptureFixture
) -> None:
    service.json(PATHS[kind], GOOD[kind], delay_s=5.0)
    started = time.monotonic()
    result = resolve_carbon_intensity(country="DK", providers=[_provider(kind, service.url)], env={})  # type: ignore[list-item]
    elapsed = time.monotonic() - started
    assert elapsed < TIMEOUT_S + 0.5
    # Either the deadline or the socket timeout (both 0.2 s) may fire first.
    _assert_fell_through(result, caplog, "no answer within 0.2 s", "timed out")


@pytest.mark.parametrize("kind", ["electricitymaps", "uk", "eds"])
def test_http_500_falls_through_with_one_warning(kind: str, service: FakeService, caplog: pytest.LogCaptureFixture) -> None:
    service.raw(PATHS[kind], b'{"error": "internal"}', status=500)
    result = resolve_carbon_intensity(country="DK", providers=[_provider(kind, service.url)], env={})  # type: ignore[list-item]
    _assert_fell_through(result, caplog, "HTTP 500")


@pytest.mark.parametrize("kind", ["electricitymaps", "uk", "eds"])
@pytest.mark.parametrize("garbage", sorted(GARBAGE))
def test_garbage_body_falls_through_with_one_warning(
    kind: str, garbage: str, service: FakeService, caplog: pytest.LogCaptureFixture
) -> None:
    service.raw(PATHS[kind], _garbage_body(kind, garbage))
    result = resolve_carbon_intensity(country="DK", providers=[_provider(kind, service.url)], env={})  # type: ignore[list-item]
    _assert_fell_through(result, caplog)
    assert service.hits(PATHS[kind]) == 1


def test_unreachable_server_falls_through(caplog: pytest.LogCaptureFixture) -> None:
    port = closed_port()  # connection refused
    provider = UKCarbonIntensityProvider(base_url=f"http://127.0.0.1:{port}", timeout_s=TIMEOUT_S)
    result = resolve_carbon_intensity(country="DK", providers=[provider], env={})
    _assert_fell_through(result, caplog, "cannot reach", "no answer within")


def test_failed_provider_falls_through_to_the_next_provider(service: FakeService, caplog: pytest.LogCaptureFixture) -> None:
    service.raw(EM_PATH, b"garbage")
    service.json(EDS_PATH, eds_body([("t", "DK1", 80.0), ("t", "DK2", 90.0)]))
    providers = [_provider("electricitymaps", service.url), _provider("eds", service.url)]
    result = resolve_carbon_intensity(country="DK", providers=providers, env={})  # type: ignore[arg-type]
    assert (result.source, result.gco2eq_per_kwh) == ("energidataservice", 85.0)
    assert len(warnings_of(caplog)) == 1


def test_first_working_provider_wins_and_later_ones_are_not_asked(service: FakeService) -> None:
    service.json(EM_PATH, em_body("DK", 150))
    service.json(EDS_PATH, eds_body([("t", "DK1", 80.0), ("t", "DK2", 90.0)]))
    providers = [_provider("electricitymaps", service.url), _provider("eds", service.url)]
    result = resolve_carbon_intensity(country="DK", providers=providers, env={})  # type: ignore[arg-type]
    assert (result.source, result.gco2eq_per_kwh) == ("electricitymaps", 150.0)
    assert service.hits(EDS_PATH) == 0


def test_explicit_value_beats_live_providers(service: FakeService) -> None:
    service.json(EM_PATH, em_body("DK", 150))
    result = resolve_carbon_intensity(7.0, providers=[_provider("electricitymaps", service.url)], env={})  # type: ignore[list-item]
    assert (result.source, result.gco2eq_per_kwh) == ("explicit", 7.0)
    assert service.requests == []


def test_all_live_failing_and_no_country_gives_world_average(service: FakeService, caplog: pytest.LogCaptureFixture) -> None:
    service.raw(EM_PATH, b"", status=503)
    result = resolve_carbon_intensity(providers=[_provider("electricitymaps", service.url)], env={})  # type: ignore[list-item]
    assert (result.source, result.gco2eq_per_kwh) == ("world_average", 445.0)
    assert len(warnings_of(caplog)) == 1


# --- cache ----------------------------------------------------------------------------------------


def test_cache_hit_avoids_a_second_request_until_ttl(service: FakeService) -> None:
    service.json(EM_PATH, em_body("DE", 302))
    clock = FakeClock()
    provider = ElectricityMapsProvider("k", "DE", base_url=service.url, timeout_s=1.0, cache_ttl_s=900, clock=clock)
    first = provider.current()
    service.json(EM_PATH, em_body("DE", 250))
    clock.now += 899.0
    assert provider.current() == first
    assert service.hits(EM_PATH) == 1 and provider.requests_made == 1
    clock.now += 1.0
    refreshed = provider.current()
    assert refreshed is not None and refreshed.gco2eq_per_kwh == 250.0
    assert service.hits(EM_PATH) == 2


def test_failure_is_not_retried_until_retry_after(service: FakeService, caplog: pytest.LogCaptureFixture) -> None:
    service.raw(EM_PATH, b"", status=500)
    clock = FakeClock()
    provider = ElectricityMapsProvider("k", "DK", base_url=service.url, timeout_s=1.0, retry_after_s=300, clock=clock)
    for _ in range(3):
        assert resolve_carbon_intensity(country="DK", providers=[provider], env={}).source == "offline"
        clock.now += 10.0
    assert service.hits(EM_PATH) == 1
    assert len(warnings_of(caplog)) == 1
    service.json(EM_PATH, em_body("DK", 120))
    clock.now += 300.0
    result = resolve_carbon_intensity(country="DK", providers=[provider], env={})
    assert (result.source, result.gco2eq_per_kwh) == ("electricitymaps", 120.0)
    assert service.hits(EM_PATH) == 2


@pytest.mark.parametrize(
    "kwargs",
    [{"base_url": "ftp://x"}, {"base_url": "nohost"}, {"timeout_s": 0}, {"cache_ttl_s": -1}, {"retry_after_s": float("nan")}],
)
def test_provider_options_are_validated(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        UKCarbonIntensityProvider(**kwargs)  # type: ignore[arg-type]


# --- opt-in geolocation ----------------------------------------------------------------------------


def test_geolocation_only_when_opted_in_and_no_country(service: FakeService) -> None:
    service.json("/json", {"ip": "192.0.2.1", "city": "Copenhagen", "country": "DK", "loc": "55.6759,12.5655", "postal": "1050"})
    assert resolve_carbon_intensity(env={}).source == "world_average"
    assert service.requests == []
    located = resolve_carbon_intensity(env={}, geolocator=IpGeolocator(base_url=service.url, timeout_s=1.0))
    assert (located.source, located.region, located.year) == ("offline", "DK", 2024)
    assert "IP geolocation" in located.detail
    # A configured country wins; the geolocator is not asked.
    configured = resolve_carbon_intensity(country="FR", env={}, geolocator=IpGeolocator(base_url=service.url, timeout_s=1.0))
    assert configured.region == "FR"
    assert service.hits("/json") == 1


def test_geolocation_failure_gives_world_average(service: FakeService, caplog: pytest.LogCaptureFixture) -> None:
    service.json("/json", {"ip": "10.0.0.1", "bogon": True})
    result = resolve_carbon_intensity(env={}, geolocator=IpGeolocator(base_url=service.url, timeout_s=1.0))
    assert result.source == "world_average"
    assert len(warnings_of(caplog)) == 1


def test_geolocation_unknown_country_is_noted_not_raised(service: FakeService) -> None:
    service.json("/json", {"ip": "192.0.2.1", "country": "AQ"})
    result = resolve_carbon_intensity(env={}, geolocator=IpGeolocator(base_url=service.url, timeout_s=1.0))
    assert result.source == "world_average" and "'AQ'" in result.detail


# --- providers from the environment ---------------------------------------------------------------


def test_no_live_provider_by_default() -> None:
    assert providers_from_env({}) == ()


def test_electricitymaps_key_alone_enables_it_for_the_country() -> None:
    (provider,) = providers_from_env({"OTEL_JOULES_ELECTRICITYMAPS_API_KEY": "k", "OTEL_JOULES_COUNTRY": "de"})
    assert isinstance(provider, ElectricityMapsProvider) and provider.zone == "DE"
    (from_api_keys,) = providers_from_env({}, country="FR", api_keys={"electricitymaps": "k2"})
    assert isinstance(from_api_keys, ElectricityMapsProvider) and from_api_keys.zone == "FR"
    (alpha3,) = providers_from_env({"OTEL_JOULES_ELECTRICITYMAPS_API_KEY": "k"}, country="dnk")
    assert isinstance(alpha3, ElectricityMapsProvider) and alpha3.zone == "DK"


def test_provider_list_order_and_options() -> None:
    providers = providers_from_env(
        {
            "OTEL_JOULES_CARBON_PROVIDERS": "energidataservice, uk_carbon_intensity",
            "OTEL_JOULES_UK_POSTCODE": "SW1A 1AA",
            "OTEL_JOULES_DK_PRICE_AREA": "DK1",
        }
    )
    assert [type(p) for p in providers] == [EnergiDataServiceProvider, UKCarbonIntensityProvider]
    assert providers[0].areas == ("DK1",)  # type: ignore[attr-defined]
    assert providers[1].outcode == "SW1A"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"OTEL_JOULES_CARBON_PROVIDERS": "wattime"}, "unknown provider 'wattime'"),
        ({"OTEL_JOULES_CARBON_PROVIDERS": "electricitymaps", "OTEL_JOULES_COUNTRY": "DE"}, "no API key"),
        ({"OTEL_JOULES_ELECTRICITYMAPS_API_KEY": "k"}, "OTEL_JOULES_COUNTRY"),
    ],
)
def test_provider_configuration_problems_are_said_once_and_skipped(env: dict[str, str], message: str, caplog) -> None:
    # From the environment: one warning naming the variable, the provider left out, no exception.
    with caplog.at_level(logging.WARNING, logger="otel_joules"):
        assert providers_from_env(env) == ()
        assert providers_from_env(env) == ()
    (record,) = [r for r in caplog.records if message in r.getMessage()]
    assert "OTEL_JOULES_CARBON_PROVIDERS=" in record.getMessage() or "OTEL_JOULES_ELECTRICITYMAPS_API_KEY='<set>'" in record.getMessage()


def test_provider_problems_in_arguments_are_errors() -> None:
    with pytest.raises(ConfigurationError, match="OTEL_JOULES_COUNTRY"):
        providers_from_env({}, api_keys={"electricitymaps": "k"})


# The cache and back-off defaults docs/carbon.md documents, on the real base class.


class _Clock:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


class _ScriptedProvider(LiveProvider):
    """A live provider whose service answers from a script; caching and back-off are the real base class."""

    source = "electricitymaps"
    service = "scripted service"

    def __init__(self, clock: _Clock, answers: list[float | Exception]) -> None:
        super().__init__(base_url="http://127.0.0.1:9", clock=clock)
        self.answers = answers
        self.fetches = 0

    def fetch(self) -> LiveReading:
        self.fetches += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return LiveReading(answer, "DE", "scripted")


def test_live_values_are_cached_for_900_s_by_default() -> None:
    clock = _Clock()
    provider = _ScriptedProvider(clock, [300.0, 250.0])
    assert provider.current().gco2eq_per_kwh == 300.0
    clock.now += 899.9
    assert provider.current().gco2eq_per_kwh == 300.0 and provider.fetches == 1
    clock.now += 0.1
    assert provider.current().gco2eq_per_kwh == 250.0 and provider.fetches == 2


def test_failed_provider_is_not_asked_again_for_300_s_by_default(caplog: pytest.LogCaptureFixture) -> None:
    clock = _Clock()
    provider = _ScriptedProvider(clock, [ProviderError("HTTP 500"), 120.0])
    assert provider.current() is None
    clock.now += 299.9
    assert provider.current() is None and provider.fetches == 1
    clock.now += 0.1
    assert provider.current().gco2eq_per_kwh == 120.0 and provider.fetches == 2


def test_electricity_maps_advice_works(caplog) -> None:
    from otel_joules.carbon import ElectricityMapsProvider, providers_from_env

    # A provider the environment configures badly is said once, with what to set, and skipped
    # (a setting never raises into the program); following each piece of advice enables it.
    env = {"OTEL_JOULES_CARBON_PROVIDERS": "electricitymaps"}
    with caplog.at_level(logging.WARNING, logger="otel_joules"):
        assert list(providers_from_env(env)) == []
    assert "set OTEL_JOULES_ELECTRICITYMAPS_API_KEY" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="otel_joules"):
        assert list(providers_from_env({**env, "OTEL_JOULES_ELECTRICITYMAPS_API_KEY": "key"})) == []
    assert "set OTEL_JOULES_COUNTRY (e.g. DE)" in caplog.text
    (provider,) = providers_from_env({**env, "OTEL_JOULES_ELECTRICITYMAPS_API_KEY": "key", "OTEL_JOULES_COUNTRY": "DE"})
    assert isinstance(provider, ElectricityMapsProvider)
