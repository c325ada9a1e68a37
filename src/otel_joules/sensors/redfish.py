"""The platform's power and energy from a Redfish BMC, over plain HTTP(S) (the standard library's ``urllib``).

Where a chassis' readings are (DMTF schemas; the first found is read at every poll):

1. ``Chassis/{id}/EnvironmentMetrics`` (the model that came with ``PowerSubsystem``, Chassis v1_15_0 and later):
   ``EnergyJoules.Reading`` (J) or ``EnergykWh.Reading`` (kWh) as an energy counter, ``PowerWatts.Reading`` (W).
2. ``Chassis/{id}/Power`` (deprecated, still what most BMCs serve): ``PowerControl[].PowerConsumedWatts`` (W), the
   first entry that has a reading.

``PowerSubsystem`` itself holds no reading (its power supplies' metrics do, per supply): it is not read.

The chassis is the one the configuration names, else the first member of ``/redfish/v1/Chassis`` that has a
reading. Authentication is HTTP Basic (accepted by most services, DSP0266); the header is built here and sent to
the configured host only: redirects are refused (they would carry it elsewhere) and proxies are not used. A reply
that is not JSON, lacks the reading, or holds a value that is not a finite number from 0 to
:data:`MAX_PLATFORM_WATTS` is a :class:`BmcError` that names the resource and never the credentials.
"""

from __future__ import annotations

import base64
import json
import math
import ssl
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from otel_joules.sensors.bmc_reading import MAX_PLATFORM_WATTS, BmcError, BmcReading

#: Redfish's service root.
SERVICE_ROOT = "/redfish/v1"
#: Joules in a kilowatt-hour (``EnergykWh``).
JOULES_PER_KWH = 3.6e6
#: A reply larger than this is not a reading: refused, not read into memory.
MAX_REPLY_BYTES = 1 << 20


class NoRedirect(urllib.request.HTTPRedirectHandler):
    """Refuse every redirect: a redirected request would carry the credentials to wherever it points."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        raise urllib.error.HTTPError(req.full_url, code, f"redirect refused ({code})", headers, fp)


def _number(value: Any, what: str) -> float:
    """``value`` as a reading: a finite, non-negative number (not a boolean), else BmcError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise BmcError(f"{what} is {value!r}, not a finite non-negative number")
    return float(value)


def _reading(document: dict[str, Any], key: str) -> Any:
    excerpt = document.get(key)
    return excerpt.get("Reading") if isinstance(excerpt, dict) else None


def parse_environment_metrics(document: dict[str, Any]) -> BmcReading:
    """An ``EnvironmentMetrics`` resource's power (``PowerWatts``) and energy (``EnergyJoules``, else ``EnergykWh``)."""
    power = _reading(document, "PowerWatts")
    joules = _reading(document, "EnergyJoules")
    kwh = _reading(document, "EnergykWh")
    power_watts = None if power is None else _number(power, "PowerWatts.Reading")
    if joules is not None:
        energy_joules: float | None = _number(joules, "EnergyJoules.Reading")
    elif kwh is not None:
        energy_joules = _number(kwh, "EnergykWh.Reading") * JOULES_PER_KWH
    else:
        energy_joules = None
    if power_watts is None and energy_joules is None:
        raise BmcError("EnvironmentMetrics has no PowerWatts, EnergyJoules or EnergykWh reading")
    if power_watts is not None and power_watts > MAX_PLATFORM_WATTS:
        raise BmcError(f"PowerWatts.Reading is {power_watts:g} W, more than any platform draws ({MAX_PLATFORM_WATTS:g} W)")
    return BmcReading(power_watts, energy_joules)


def parse_power(document: dict[str, Any]) -> BmcReading:
    """A (deprecated) ``Power`` resource's ``PowerControl[].PowerConsumedWatts``: the first entry with a reading."""
    controls = document.get("PowerControl")
    if not isinstance(controls, list):
        raise BmcError("Power has no PowerControl list")
    for control in controls:
        if isinstance(control, dict) and control.get("PowerConsumedWatts") is not None:
            watts = _number(control["PowerConsumedWatts"], "PowerControl[].PowerConsumedWatts")
            if watts > MAX_PLATFORM_WATTS:
                raise BmcError(f"PowerConsumedWatts is {watts:g} W, more than any platform draws ({MAX_PLATFORM_WATTS:g} W)")
            return BmcReading(watts, None)
    raise BmcError("Power.PowerControl has no PowerConsumedWatts reading")


#: The resources a chassis' readings may be in, in the order they are tried, with their parsers.
_RESOURCES = (("EnvironmentMetrics", parse_environment_metrics), ("Power", parse_power))


class RedfishReader:
    """Reads one chassis' power (and energy, where the BMC counts it) from a Redfish service.

    Args:
        url: The service's base URL (``https://bmc.example``); no user or password in it.
        username: HTTP Basic user, or None for a service without authentication.
        password: HTTP Basic password.
        chassis: The chassis id (``1U``), or None for the first chassis that has a reading.
        timeout_s: Socket timeout of each request.
        verify_tls: Check the service's certificate (and host name).
        ca_file: A CA bundle to check it against instead of the system's.
    """

    def __init__(
        self,
        url: str,
        username: str | None,
        password: str | None,
        chassis: str | None,
        timeout_s: float,
        verify_tls: bool = True,
        ca_file: str | None = None,
    ) -> None:
        parts = urlsplit(url)
        self.base_url = f"{parts.scheme}://{parts.netloc}"
        self.host = parts.hostname or parts.netloc
        self.chassis = chassis
        self._timeout_s = timeout_s
        self._headers = {"Accept": "application/json", "OData-Version": "4.0"}
        if username is not None:
            token = base64.b64encode(f"{username}:{password or ''}".encode()).decode("ascii")
            self._headers["Authorization"] = f"Basic {token}"
        handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({}), NoRedirect()]
        if parts.scheme == "https":
            context = ssl.create_default_context(cafile=ca_file)
            if not verify_tls:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            handlers.append(urllib.request.HTTPSHandler(context=context))
        self._opener = urllib.request.build_opener(*handlers)
        #: The resource read at every poll and its parser, once found.
        self._source: tuple[str, Any] | None = None

    @property
    def resource(self) -> str | None:
        """The path read at every poll (``/redfish/v1/Chassis/1U/Power``), once found."""
        return None if self._source is None else self._source[0]

    def get(self, path: str) -> dict[str, Any]:
        """GET ``path`` (an ``@odata.id``) as a JSON object; BmcError for anything else."""
        if not path.startswith("/"):
            raise BmcError(f"{path!r} is not a path on the service")
        request = urllib.request.Request(self.base_url + path, headers=self._headers)
        try:
            with self._opener.open(request, timeout=self._timeout_s) as response:
                body = response.read(MAX_REPLY_BYTES + 1)
        except urllib.error.HTTPError as exc:
            raise BmcError(f"GET {path}: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise BmcError(f"GET {path}: {reason}") from None
        if len(body) > MAX_REPLY_BYTES:
            raise BmcError(f"GET {path}: a reply of more than {MAX_REPLY_BYTES} bytes")
        try:
            document = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise BmcError(f"GET {path}: the reply is not JSON ({body[:40]!r})") from None
        if not isinstance(document, dict):
            raise BmcError(f"GET {path}: the reply is not a JSON object")
        return document

    def _link(self, document: dict[str, Any], key: str) -> str | None:
        link = document.get(key)
        target = link.get("@odata.id") if isinstance(link, dict) else None
        return target if isinstance(target, str) else None

    def _find(self) -> tuple[str, Any]:
        """The resource holding the chassis' readings: its path and parser (one request per candidate)."""
        root = self.get(SERVICE_ROOT)
        chassis_path = self._link(root, "Chassis") or f"{SERVICE_ROOT}/Chassis"
        members = self.get(chassis_path).get("Members")
        paths = [m["@odata.id"] for m in members or () if isinstance(m, dict) and isinstance(m.get("@odata.id"), str)]
        if self.chassis is not None:
            paths = [p for p in paths if p.rstrip("/").rsplit("/", 1)[-1] == self.chassis]
            if not paths:
                raise BmcError(f"no chassis {self.chassis!r} in {chassis_path}: give one of its members' ids")
        problems: list[str] = []
        for path in paths:
            chassis = self.get(path)
            for key, parse in _RESOURCES:
                target = self._link(chassis, key)
                if target is None:
                    continue
                try:
                    parse(self.get(target))
                except BmcError as exc:
                    problems.append(f"{target}: {exc}")
                    continue
                return target, parse
        detail = "; ".join(problems) or "no chassis links EnvironmentMetrics or Power"
        raise BmcError(f"no chassis power reading found ({detail})")

    def read(self) -> BmcReading:
        """One reading of the chassis (finding where it is at the first call)."""
        if self._source is None:
            self._source = self._find()
        path, parse = self._source
        return parse(self.get(path))

    def close(self) -> None:
        """Nothing is held between polls (each request opens its own connection)."""
