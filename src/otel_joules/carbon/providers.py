"""Live carbon-intensity providers: Electricity Maps, carbonintensity.org.uk, Energi Data Service.

Each provider is an explicit object the user configures (nothing goes to the network
unless one is built and passed to :func:`~otel_joules.carbon.resolve_carbon_intensity`).
:meth:`LiveProvider.current` never raises and never blocks much longer than
``timeout_s``: the request runs in a daemon thread that is abandoned at the deadline
(DNS lookups ignore socket timeouts, so a socket timeout alone is not enough).
A value is cached for ``cache_ttl_s`` (default 900 s, carbontracker's refresh
interval); after a failure the provider is skipped for ``retry_after_s`` so a dead
endpoint costs one timeout and one warning, not one per epoch.

Response shapes (as documented by each service):

* Electricity Maps ``GET /v3/carbon-intensity/latest?zone=DE`` (or ``lat=..&lon=..``),
  header ``auth-token``: ``{"zone": "DE", "carbonIntensity": 302, "datetime": "...",
  "updatedAt": "...", "emissionFactorType": "lifecycle", "isEstimated": false, ...}``.
* carbonintensity.org.uk ``GET /intensity``: ``{"data": [{"from": "...", "to": "...",
  "intensity": {"forecast": 266, "actual": 263, "index": "moderate"}}]}``;
  ``GET /regional/postcode/RG10``: ``{"data": [{"regionid": 3, "dnoregion": "...",
  "shortname": "North West England", "postcode": "RG10", "data": [{"from": "...",
  "to": "...", "intensity": {"forecast": 266, "index": "moderate"}, "generationmix": [...]}]}]}``.
* Energi Data Service ``GET /dataset/CO2Emis?filter={"PriceArea":["DK1"]}&sort=Minutes5UTC DESC``:
  ``{"total": ..., "limit": ..., "dataset": "CO2Emis", "records": [{"Minutes5UTC": "...",
  "Minutes5DK": "...", "PriceArea": "DK1", "CO2Emission": 94.0}]}`` (g/kWh, 5-minute values).
* ipinfo.io ``GET /json`` (opt-in geolocation only): ``{"ip": "...", "country": "DK",
  "loc": "55.6,12.5", "postal": "...", ...}``.
"""

from __future__ import annotations

import abc
import json
import logging
import math
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Callable, ClassVar, Mapping, TypeVar

from otel_joules._fork import register_fork_hook
from otel_joules.carbon.intensity import CarbonIntensity
from otel_joules.config import OTEL_JOULES_CARBON_PROVIDERS, OTEL_JOULES_ELECTRICITYMAPS_API_KEY, Settings, report_bad_value
from otel_joules.errors import ConfigurationError, OtelJoulesError

logger = logging.getLogger("otel_joules.carbon")

_T = TypeVar("_T")

#: Responses larger than this are not carbon-intensity answers; refuse them.
_MAX_RESPONSE_BYTES = 1_000_000
#: Sanity bound: the dirtiest national grid in the offline table is about 1,300 gCO2eq/kWh
#: (an all-coal grid emits roughly 1,000), so a larger number is a garbled response.
_MAX_PLAUSIBLE_GCO2EQ_PER_KWH = 2000.0
_USER_AGENT = "otel-joules (carbon intensity)"


class ProviderError(OtelJoulesError):
    """A live provider gave no usable value (timeout, HTTP error, unexpected body)."""


@dataclass(frozen=True)
class LiveReading:
    """What one successful request to a provider yields, before caching."""

    gco2eq_per_kwh: float
    region: str | None
    detail: str


def _run_with_deadline(fn: Callable[[], _T], timeout_s: float, name: str) -> _T:
    outcome: dict[str, object] = {}

    def target() -> None:
        try:
            outcome["value"] = fn()
        except Exception as exc:  # noqa: BLE001 - handed back to the caller below
            outcome["error"] = exc

    worker = threading.Thread(target=target, name=f"otel-joules-{name}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise ProviderError(f"no answer within {timeout_s:g} s")
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]


def _http_get_json(url: str, headers: Mapping[str, str], timeout_s: float) -> object:
    request = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT, "Accept": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 - http(s) URL built by us
            body = response.read(_MAX_RESPONSE_BYTES + 1)
    except urllib.error.HTTPError as exc:
        exc.close()  # the error carries the open response; leaking it warns at garbage collection
        raise ProviderError(f"HTTP {exc.code} from {_redact(url)}") from None
    except urllib.error.URLError as exc:
        raise ProviderError(f"cannot reach {_redact(url)}: {exc.reason}") from None
    except (TimeoutError, OSError) as exc:
        raise ProviderError(f"request to {_redact(url)} failed: {exc or type(exc).__name__}") from None
    if len(body) > _MAX_RESPONSE_BYTES:
        raise ProviderError(f"response from {_redact(url)} is larger than {_MAX_RESPONSE_BYTES} bytes")
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ProviderError(f"response from {_redact(url)} is not JSON: {body[:80]!r}") from None


def _redact(url: str) -> str:
    # Query strings may carry coordinates; keep logs to scheme, host and path.
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


def _intensity_number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProviderError(f"{what} is {value!r}, not a number")
    number = float(value)
    if not math.isfinite(number) or number < 0 or number > _MAX_PLAUSIBLE_GCO2EQ_PER_KWH:
        raise ProviderError(f"{what} is {value!r}, not a plausible gCO2eq/kWh value")
    return number


def _field(container: object, key: str | int, what: str) -> object:
    try:
        return container[key]  # type: ignore[index]
    except (KeyError, IndexError, TypeError):
        raise ProviderError(f"unexpected response shape: no {what}") from None


class LiveProvider(abc.ABC):
    """Base of the live providers: caching, deadline, fall-through on failure.

    Subclasses implement :meth:`fetch` (one uncached request, may raise
    :class:`ProviderError`); callers use :meth:`current`.

    Args:
        base_url: Service root, e.g. ``https://api.electricitymaps.com``; tests point
            it at a local server.
        timeout_s: Longest time :meth:`current` waits for an answer.
        cache_ttl_s: How long a value is reused before asking again.
        retry_after_s: How long a failed provider is skipped before it is asked again.
        clock: Monotonic clock in seconds (injectable for tests).
    """

    #: ``CarbonIntensity.source`` of values from this provider.
    source: ClassVar[str]
    #: Human-readable service name for log lines.
    service: ClassVar[str]

    def __init__(
        self,
        *,
        base_url: str,
        timeout_s: float = 2.0,
        cache_ttl_s: float = 900.0,
        retry_after_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        parsed = urllib.parse.urlsplit(str(base_url))
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigurationError(f"base_url={base_url!r} must be an http(s) URL such as https://host[:port]")
        for name, value in (("timeout_s", timeout_s), ("cache_ttl_s", cache_ttl_s), ("retry_after_s", retry_after_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ConfigurationError(f"{name}={value!r} must be a finite number of seconds >= 0")
        if timeout_s <= 0:
            raise ConfigurationError(f"timeout_s={timeout_s!r} must be > 0")
        self.base_url = str(base_url).rstrip("/")
        self.timeout_s = float(timeout_s)
        self.cache_ttl_s = float(cache_ttl_s)
        self.retry_after_s = float(retry_after_s)
        self._clock = clock
        self._lock = threading.Lock()
        # Held across the request (up to timeout_s): renewed in a child forked meanwhile.
        register_fork_hook(self, "_new_lock")
        self._cached: tuple[float, CarbonIntensity] | None = None
        self._skip_until: float | None = None
        #: Number of requests actually attempted (cache hits and skips excluded).
        self.requests_made = 0

    def _new_lock(self) -> None:
        self._lock = threading.Lock()

    @abc.abstractmethod
    def fetch(self) -> LiveReading:
        """Ask the service once, without cache or deadline; raises ProviderError on any problem."""

    def current(self) -> CarbonIntensity | None:
        """The provider's intensity now, from cache when fresh; None (and one warning) on failure."""
        with self._lock:
            now = self._clock()
            if self._cached is not None and now - self._cached[0] < self.cache_ttl_s:
                return self._cached[1]
            if self._skip_until is not None and now < self._skip_until:
                return None
            self.requests_made += 1
            try:
                reading = _run_with_deadline(self.fetch, self.timeout_s, self.source)
            except Exception as exc:  # noqa: BLE001 - a provider must never break the caller
                self._skip_until = self._clock() + self.retry_after_s
                logger.warning(
                    "carbon intensity from %s unavailable (%s); using the next source, retrying in %g s",
                    self.service,
                    exc,
                    self.retry_after_s,
                )
                return None
            value = CarbonIntensity(
                gco2eq_per_kwh=reading.gco2eq_per_kwh,
                source=self.source,
                region=reading.region,
                year=None,
                detail=reading.detail,
            )
            self._cached = (self._clock(), value)
            self._skip_until = None
            return value

    def _get_json(self, path: str, query: Mapping[str, str] | None = None, headers: Mapping[str, str] | None = None) -> object:
        url = self.base_url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        return _http_get_json(url, headers or {}, self.timeout_s)


class ElectricityMapsProvider(LiveProvider):
    """Electricity Maps ``/v3/carbon-intensity/latest`` (needs an API key), by zone or by lat/lon.

    Args:
        api_key: Sent as the ``auth-token`` header.
        zone: Electricity Maps zone, e.g. ``DE``, ``US-CAL-CISO`` (or give ``lat`` and ``lon``).
        lat, lon: Coordinates instead of a zone.
        base_url: Defaults to ``https://api.electricitymaps.com``.
    """

    source = "electricitymaps"
    service = "Electricity Maps"

    def __init__(
        self,
        api_key: str,
        zone: str | None = None,
        *,
        lat: float | None = None,
        lon: float | None = None,
        base_url: str = "https://api.electricitymaps.com",
        **options: object,
    ) -> None:
        super().__init__(base_url=base_url, **options)  # type: ignore[arg-type]
        if not isinstance(api_key, str) or not api_key.strip():
            raise ConfigurationError("Electricity Maps needs an API key (api_key=, or OTEL_JOULES_ELECTRICITYMAPS_API_KEY)")
        has_coords = lat is not None or lon is not None
        if (zone is None) == (not has_coords) or (has_coords and (lat is None or lon is None)):
            raise ConfigurationError("Electricity Maps needs either zone= (e.g. 'DE') or both lat= and lon=, not both")
        if has_coords and not (-90 <= float(lat) <= 90 and -180 <= float(lon) <= 180):  # type: ignore[arg-type]
            raise ConfigurationError(f"lat={lat!r}, lon={lon!r} are not valid coordinates")
        self._api_key = api_key.strip()
        self.zone = zone.strip() if zone is not None else None
        self._coords = (float(lat), float(lon)) if has_coords else None  # type: ignore[arg-type]

    def fetch(self) -> LiveReading:
        """One request to ``/v3/carbon-intensity/latest``."""
        if self.zone is not None:
            query = {"zone": self.zone}
        else:
            assert self._coords is not None
            query = {"lat": repr(self._coords[0]), "lon": repr(self._coords[1])}
        body = self._get_json("/v3/carbon-intensity/latest", query, {"auth-token": self._api_key})
        value = _intensity_number(_field(body, "carbonIntensity", "carbonIntensity"), "carbonIntensity")
        zone = body.get("zone") if isinstance(body, dict) else None  # type: ignore[union-attr]
        zone = zone if isinstance(zone, str) and zone else self.zone
        when = body.get("datetime", "unknown time")  # type: ignore[union-attr]
        factor = body.get("emissionFactorType")  # type: ignore[union-attr]
        estimated = body.get("isEstimated") is True  # type: ignore[union-attr]
        extras = ", ".join(part for part in (str(factor) if factor else "", "estimated" if estimated else "") if part)
        detail = f"Electricity Maps latest for zone {zone} at {when}" + (f" ({extras})" if extras else "")
        return LiveReading(value, zone, detail)


_OUTCODE = re.compile(r"^[A-Z]{1,2}[0-9][A-Z0-9]?$")


class UKCarbonIntensityProvider(LiveProvider):
    """National Grid ESO's carbonintensity.org.uk (Great Britain, no key).

    Without ``postcode`` the national figure (``/intensity``: ``actual`` when
    published, else ``forecast``); with one, the regional forecast for its outward
    code (``/regional/postcode/RG10``), falling back to the national figure if the
    regional request fails. These are operational (combustion) emission factors, not
    lifecycle ones like Electricity Maps and the offline table.

    Args:
        postcode: A GB postcode or outward code (``RG10 9XX`` or ``RG10``).
        base_url: Defaults to ``https://api.carbonintensity.org.uk``.
    """

    source = "uk_carbon_intensity"
    service = "carbonintensity.org.uk"

    def __init__(self, postcode: str | None = None, *, base_url: str = "https://api.carbonintensity.org.uk", **options: object) -> None:
        super().__init__(base_url=base_url, **options)  # type: ignore[arg-type]
        self.outcode: str | None = None
        if postcode is not None and str(postcode).strip():
            outcode = str(postcode).strip().upper().split()[0]
            if not _OUTCODE.match(outcode):
                raise ConfigurationError(
                    f"postcode={postcode!r} is not a GB postcode; give one like 'RG10 9XX' or its outward code 'RG10'"
                )
            self.outcode = outcode

    def fetch(self) -> LiveReading:
        """One request (two if the regional one fails) to carbonintensity.org.uk."""
        if self.outcode is None:
            return self._national("")
        try:
            return self._regional(self.outcode)
        except ProviderError as exc:
            return self._national(f"; regional figure for {self.outcode} unavailable ({exc})")

    def _national(self, note: str) -> LiveReading:
        body = self._get_json("/intensity")
        period = _field(_field(body, "data", "data"), 0, "data[0]")
        intensity = _field(period, "intensity", "data[0].intensity")
        actual = intensity.get("actual") if isinstance(intensity, dict) else None
        if actual is not None:
            value, kind = _intensity_number(actual, "intensity.actual"), "actual"
        else:
            value, kind = _intensity_number(_field(intensity, "forecast", "intensity.forecast"), "intensity.forecast"), "forecast"
        when = f"{period.get('from', '?')} to {period.get('to', '?')}" if isinstance(period, dict) else "?"
        return LiveReading(value, "GB", f"carbonintensity.org.uk national {kind} for {when}{note}")

    def _regional(self, outcode: str) -> LiveReading:
        body = self._get_json(f"/regional/postcode/{urllib.parse.quote(outcode)}")
        region = _field(body, "data", "data")
        # The current-period endpoint wraps the region in a list; dated ones do not.
        if isinstance(region, list):
            region = _field(region, 0, "data[0]")
        period = _field(_field(region, "data", "region data"), 0, "region data[0]")
        intensity = _field(period, "intensity", "region intensity")
        value = _intensity_number(_field(intensity, "forecast", "intensity.forecast"), "intensity.forecast")
        name = region.get("shortname", "unknown region") if isinstance(region, dict) else "unknown region"
        when = f"{period.get('from', '?')} to {period.get('to', '?')}" if isinstance(period, dict) else "?"
        return LiveReading(value, "GB", f"carbonintensity.org.uk regional forecast for {outcode} ({name}) for {when}")


class EnergiDataServiceProvider(LiveProvider):
    """Energinet's Energi Data Service, dataset ``CO2Emis`` (Denmark, 5-minute values, no key).

    Args:
        price_area: ``DK1`` (west) or ``DK2`` (east); None averages both, as carbontracker does.
        base_url: Defaults to ``https://api.energidataservice.dk``.
    """

    source = "energidataservice"
    service = "Energi Data Service"
    _AREAS = ("DK1", "DK2")

    def __init__(self, price_area: str | None = None, *, base_url: str = "https://api.energidataservice.dk", **options: object) -> None:
        super().__init__(base_url=base_url, **options)  # type: ignore[arg-type]
        if price_area is not None and str(price_area).strip():
            area = str(price_area).strip().upper()
            if area not in self._AREAS:
                raise ConfigurationError(f"price_area={price_area!r} must be DK1 (west Denmark), DK2 (east) or unset for both")
            self.areas: tuple[str, ...] = (area,)
        else:
            self.areas = self._AREAS

    def fetch(self) -> LiveReading:
        """One request for the newest ``CO2Emis`` record of each price area."""
        query = {
            "filter": json.dumps({"PriceArea": list(self.areas)}, separators=(",", ":")),
            "sort": "Minutes5UTC DESC",
            # Records come two per 5-minute step (one per area); a few steps cover gaps.
            "limit": str(6 * len(self.areas)),
        }
        body = self._get_json("/dataset/CO2Emis", query)
        records = _field(body, "records", "records")
        if not isinstance(records, list):
            raise ProviderError("unexpected response shape: records is not a list")
        latest: dict[str, tuple[float, str]] = {}
        for record in records:
            if not isinstance(record, dict):
                raise ProviderError("unexpected response shape: a record is not an object")
            area = record.get("PriceArea")
            if area in self.areas and area not in latest:
                value = _intensity_number(record.get("CO2Emission"), f"CO2Emission of {area}")
                latest[area] = (value, str(record.get("Minutes5UTC", "?")))
        missing = [area for area in self.areas if area not in latest]
        if missing:
            raise ProviderError(f"no CO2Emis record for {', '.join(missing)}")
        mean = sum(value for value, _ in latest.values()) / len(latest)
        parts = ", ".join(f"{area} {latest[area][0]:g} at {latest[area][1]} UTC" for area in self.areas)
        region = self.areas[0] if len(self.areas) == 1 else "DK"
        how = "" if len(self.areas) == 1 else "mean of "
        return LiveReading(mean, region, f"Energi Data Service CO2Emis, {how}{parts}")


class IpGeolocator:
    """Opt-in country lookup from the machine's public IP address (ipinfo.io ``/json``).

    Only used when passed to :func:`~otel_joules.carbon.resolve_carbon_intensity` as
    ``geolocator=``: it sends a request revealing the public IP to a third party,
    so it is never done by default. :meth:`locate` never raises.
    """

    def __init__(self, *, base_url: str = "https://ipinfo.io", timeout_s: float = 2.0) -> None:
        parsed = urllib.parse.urlsplit(str(base_url))
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigurationError(f"base_url={base_url!r} must be an http(s) URL such as https://host[:port]")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
            raise ConfigurationError(f"timeout_s={timeout_s!r} must be a number of seconds > 0")
        self.base_url = str(base_url).rstrip("/")
        self.timeout_s = float(timeout_s)

    def locate(self) -> str | None:
        """ISO 3166-1 alpha-2 code of the public IP's country, or None (with a warning)."""
        try:
            body = _run_with_deadline(
                lambda: _http_get_json(self.base_url + "/json", {}, self.timeout_s), self.timeout_s, "geolocation"
            )
            country = _field(body, "country", "country")
            if not isinstance(country, str) or not re.fullmatch(r"[A-Za-z]{2}", country):
                raise ProviderError(f"country is {country!r}, not a two-letter code")
            return country.upper()
        except Exception as exc:  # noqa: BLE001 - geolocation must never break the caller
            logger.warning("IP geolocation failed (%s); carrying on without a location", exc)
            return None


#: Electricity Maps zones: an ISO 3166-1 alpha-2 code, optionally with dash-separated parts.
_ZONE = re.compile(r"^[A-Z]{2}(?:-[A-Z0-9]+)*$")


def _provider(name: str, settings: Settings, api_key: str, country: str | None) -> LiveProvider:
    """One configured provider; raises :class:`ConfigurationError` when it lacks what it needs."""
    if name == "electricitymaps":
        zone = (country or settings.country or "").strip()
        if not api_key.strip():
            raise ConfigurationError(
                "electricitymaps is configured but has no API key: set OTEL_JOULES_ELECTRICITYMAPS_API_KEY "
                "or pass api_keys={'electricitymaps': KEY}"
            )
        if not zone:
            raise ConfigurationError("Electricity Maps needs a zone: set OTEL_JOULES_COUNTRY (e.g. DE) or pass country=")
        zone = zone.upper()
        if len(zone) == 3 and zone.isalpha():
            # Electricity Maps zones start with alpha-2 codes; accept DNK as we do offline.
            from otel_joules.carbon.offline import lookup_country

            zone = lookup_country(zone)[0].iso_code
        if not _ZONE.match(zone):
            raise ConfigurationError(f"{zone!r} is not an Electricity Maps zone (such as DE, US-CAL-CISO or DK-DK1)")
        return ElectricityMapsProvider(api_key, zone)
    if name == "uk_carbon_intensity":
        return UKCarbonIntensityProvider(settings.uk_postcode)
    return EnergiDataServiceProvider(settings.dk_price_area)


def providers_from_env(
    env: Mapping[str, str] | None = None,
    *,
    country: str | None = None,
    api_keys: Mapping[str, str] | None = None,
) -> tuple[LiveProvider, ...]:
    """Build the live providers the environment asks for (none by default).

    * ``OTEL_JOULES_CARBON_PROVIDERS``: comma-separated, tried in that order, from
      ``electricitymaps``, ``uk_carbon_intensity``, ``energidataservice``. When unset,
      Electricity Maps alone is used if an API key is configured, else nothing.
    * ``OTEL_JOULES_ELECTRICITYMAPS_API_KEY`` or ``api_keys={"electricitymaps": KEY}``
      (carbontracker's ``api_keys`` argument); its zone is ``country`` or
      ``OTEL_JOULES_COUNTRY``.
    * ``OTEL_JOULES_UK_POSTCODE``: regional GB figures; ``OTEL_JOULES_DK_PRICE_AREA``: DK1 or DK2.

    A provider the environment configures badly (unknown name, no key, no zone, a bad
    postcode) is reported once and left out: a setting never breaks the program. The same
    problem in arguments (``country``, ``api_keys``) is a :class:`ConfigurationError`.
    """
    settings = Settings.from_env(env)
    explicit_key = (api_keys or {}).get("electricitymaps")
    api_key = explicit_key or settings.electricitymaps_api_key or ""
    names = list(settings.carbon_providers)
    if not names and api_key.strip():
        names = ["electricitymaps"]
    providers: list[LiveProvider] = []
    for name in names:
        try:
            providers.append(_provider(name, settings, api_key, country))
        except ConfigurationError as exc:
            if name == "electricitymaps" and (explicit_key or country):
                raise
            if settings.carbon_providers:
                report_bad_value(OTEL_JOULES_CARBON_PROVIDERS, ",".join(names), f"cannot use {name}: {exc}", "the others")
            else:  # implied by the key alone; never print the key
                report_bad_value(OTEL_JOULES_ELECTRICITYMAPS_API_KEY, "<set>", f"cannot be used: {exc}", "no live provider")
    return tuple(providers)
