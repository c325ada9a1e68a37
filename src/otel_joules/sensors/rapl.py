"""RAPL energy counters through the Linux powercap interface.

Layout the kernel exposes (``<sysfs>/class/powercap``)::

    intel-rapl            control type (no energy_uj)
    intel-rapl:0          name "package-0"   energy_uj  max_energy_range_uj  constraint_*_max_power_uw
    intel-rapl:0/intel-rapl:0:0   name "core"
    intel-rapl:0/intel-rapl:0:1   name "uncore"
    intel-rapl:0/intel-rapl:0:2   name "dram"
    intel-rapl:1          name "psys"  (index 1 is *not* socket 1)
    intel-rapl-mmio:0     name "package-0"  (same package through MMIO: not counted twice)

AMD Zen (kernel 5.8+) exposes package and core through the same interface and has no dram.
Domain ids follow pyJoules: ``package_N`` where N comes from the zone's *name*, and
sub-zones inherit their package's number (``core_0``, ``dram_1``).
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from otel_joules.config import DEFAULT_AGENT_SOCKET, OTEL_JOULES_AGENT_SOCKET, OTEL_JOULES_SYSFS_ROOT, Settings
from otel_joules.errors import SensorReadError
from otel_joules.sensors.base import Breadth, Channel, Discovery, Domain, Method, Unavailable
from otel_joules.semconv import KIND_CPU, KIND_MEMORY, KIND_PLATFORM

_TOP_ZONE = re.compile(r"^(intel-rapl|intel-rapl-mmio):(\d+)$")
_SUB_ZONE = re.compile(r"^(intel-rapl|intel-rapl-mmio):(\d+):(\d+)$")
_PACKAGE_NAME = re.compile(r"^package-(\d+)$")

#: RAPL counters update about every millisecond (Intel SDM; AMD behaves alike).
RAPL_UPDATE_PERIOD_S = 0.001
#: Read a counter at least this many times per wrap period, so one missed sampler
#: tick still cannot let it wrap twice between two reads.
_READS_PER_WRAP = 4

#: Said with every remedy: why the counters are never opened to everyone.
WORLD_READABLE_RISK = (
    "Never make energy_uj world-readable: that reopens CVE-2020-8694 (PLATYPUS), letting any local process infer "
    "secrets such as cryptographic keys from the energy a computation draws."
)
#: The two safe routes to measured energy without running as root.
PERMISSION_REMEDY = (
    "energy_uj is readable only by root since the fix for CVE-2020-8694. Run the agent as root "
    "(`sudo otel-joules agent --group otel-joules`, or the unit from `otel-joules agent --print-systemd-unit`) and "
    "join its group: the library then reads the counters through its socket by itself; or, on a single-user machine, "
    "give the counters to a group (`sudo otel-joules setup-access --group otel-joules --install`). " + WORLD_READABLE_RISK
)


@dataclass(frozen=True)
class PowercapZone:
    """One powercap zone directory: its path, its name (``package-0``, ``dram``) and its interface."""

    path: Path
    name: str
    interface: str  # "intel-rapl" or "intel-rapl-mmio"


#: What a top-level zone or dram covers, for ``otel-joules devices``.
_COVERS = {
    KIND_CPU: "the CPU package: cores, caches, uncore (not its memory)",
    KIND_MEMORY: "the package's DRAM",
    "psys": "the whole platform (SoC and more), packages included",
}


def _covers(name: str, kind: str, parent_package: int | None) -> str:
    """What a zone covers, in words: core and uncore are parts of their package."""
    if parent_package is not None and name in ("core", "uncore"):
        return f"the {name} part of package {parent_package} (inside it)"
    return _COVERS.get("psys" if name == "psys" else kind, "")


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _domain_for(name: str, parent_package: int | None) -> tuple[str, str, bool] | None:
    """Map a zone name to (domain id, kind, counts in total); None for names we do not know."""
    match = _PACKAGE_NAME.match(name)
    if match and parent_package is None:
        return f"package_{int(match.group(1))}", KIND_CPU, True
    if name == "psys" and parent_package is None:
        # psys covers the whole platform; whether it joins the total is decided
        # once all zones are known (only where no package zone exists).
        return "psys", KIND_PLATFORM, True
    if parent_package is not None and name in ("core", "uncore"):
        return f"{name}_{parent_package}", KIND_CPU, False
    if parent_package is not None and name == "dram":
        return f"dram_{parent_package}", KIND_MEMORY, True
    return None


class RaplChannel(Channel):
    """One powercap zone's ``energy_uj``, read through a file descriptor kept open."""

    def __init__(self, domain: Domain, fd: int, wrap_uj: int, max_power_watts: float) -> None:
        super().__init__(domain)
        self._fd = fd
        self._wrap_uj = wrap_uj
        self._max_power_watts = max_power_watts
        wrap_seconds = (wrap_uj / 1e6) / max_power_watts
        self._max_read_interval_s = wrap_seconds / _READS_PER_WRAP

    @property
    def wrap_uj(self) -> int:
        """``max_energy_range_uj``: the counter runs from 0 up to this value, then wraps."""
        return self._wrap_uj

    @property
    def pread_fd(self) -> int | None:
        """The ``energy_uj`` descriptor: :meth:`read_uj` is ``int(os.pread(fd, 32, 0))`` checked against the range."""
        return self._fd if self._fd >= 0 else None

    @property
    def max_read_interval_s(self) -> float:
        """A quarter of the time the counter needs to wrap at the zone's maximum power."""
        return self._max_read_interval_s

    @property
    def max_power_watts(self) -> float:
        """The zone's largest ``constraint_*_max_power_uw``, else ``OTEL_JOULES_MAX_POWER_WATTS``."""
        return self._max_power_watts

    def read_uj(self) -> int:
        """Read ``energy_uj`` with ``pread`` (no reopen, no seek)."""
        try:
            raw = os.pread(self._fd, 32, 0)
        except OSError as exc:
            raise SensorReadError(f"{self.domain.hw_id}/energy_uj could not be read: {exc.strerror}") from exc
        try:
            value = int(raw)
        except ValueError:
            reason = "is empty (the zone disappeared?)" if not raw.strip() else f"holds {raw[:20]!r}, not an integer"
            raise SensorReadError(f"{self.domain.hw_id}/energy_uj {reason}") from None
        if value < 0 or value > self._wrap_uj:
            raise SensorReadError(
                f"{self.domain.hw_id}/energy_uj = {value} is outside 0..max_energy_range_uj ({self._wrap_uj})"
            )
        return value

    def close(self) -> None:
        """Close the file descriptor."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _list_zones(powercap: Path) -> list[tuple[PowercapZone, list[PowercapZone]]]:
    """Top-level RAPL zones with their sub-zones, in a stable order."""
    zones: list[tuple[PowercapZone, list[PowercapZone]]] = []
    for entry in sorted(powercap.iterdir(), key=lambda p: p.name):
        top = _TOP_ZONE.match(entry.name)
        if not top or not entry.is_dir():
            continue
        name = _read_text(entry / "name")
        if name is None:
            continue
        subs: list[PowercapZone] = []
        for child in sorted(entry.iterdir(), key=lambda p: p.name):
            sub = _SUB_ZONE.match(child.name)
            if sub and sub.group(2) == top.group(2) and child.is_dir():
                sub_name = _read_text(child / "name")
                if sub_name is not None:
                    subs.append(PowercapZone(child, sub_name, sub.group(1)))
        zones.append((PowercapZone(entry, name, top.group(1)), subs))
    return zones


def discover(settings: Settings) -> Discovery:
    """Find every readable RAPL zone under ``settings.sysfs_root``.

    Zones that exist but cannot be read are listed in ``Discovery.unavailable`` with
    the reason and the remedy; this function never raises for a missing or locked zone.
    """
    found = Discovery()
    powercap = Path(settings.sysfs_root) / "class" / "powercap"
    if not powercap.is_dir():
        found.unavailable.append(
            Unavailable(
                "RAPL",
                f"{powercap} does not exist (no powercap driver, not Linux, or a VM/container without it)",
                "on bare-metal Linux load the driver (`modprobe intel_rapl_msr`); in a container mount the host's "
                f"otel-joules agent socket ({DEFAULT_AGENT_SOCKET}, or where {OTEL_JOULES_AGENT_SOCKET} says), or mount "
                f"the host's /sys and set {OTEL_JOULES_SYSFS_ROOT} to where it is mounted",
            )
        )
        return found

    zones = _list_zones(powercap)
    # MSR zones first, so an MMIO zone naming an already-seen package is skipped
    # rather than counting that package twice.
    zones.sort(key=lambda z: z[0].interface != "intel-rapl")
    seen: set[str] = set()
    for top, subs in zones:
        parent_match = _PACKAGE_NAME.match(top.name)
        parent_package = int(parent_match.group(1)) if parent_match else None
        # Only a package's sub-zones have pyJoules names (core_N, uncore_N, dram_N).
        package_subs = [(s, parent_package) for s in subs] if parent_package is not None else []
        for zone, parent in [(top, None), *package_subs]:
            mapped = _domain_for(zone.name, parent)
            if mapped is None or mapped[0] in seen:
                continue
            domain_id, kind, in_total = mapped
            channel = _open_zone(zone, domain_id, kind, in_total, parent, settings, found)
            if channel is not None:
                seen.add(domain_id)
                found.channels.append(channel)

    has_package = any(c.domain.id.startswith("package_") for c in found.channels)
    if has_package:
        found.channels = [_exclude_psys(c) if c.domain.id == "psys" else c for c in found.channels]
    if not found.channels and not found.unavailable:
        found.unavailable.append(
            Unavailable("RAPL", f"no RAPL zone under {powercap}", "this CPU or kernel exposes no RAPL powercap zones")
        )
    return found


def _exclude_psys(channel: Channel) -> Channel:
    # psys covers the whole platform, packages included: adding it would count them twice.
    channel.domain = replace(channel.domain, in_total=False)
    return channel


def _open_zone(
    zone: PowercapZone,
    domain_id: str,
    kind: str,
    in_total: bool,
    parent_package: int | None,
    settings: Settings,
    found: Discovery,
) -> RaplChannel | None:
    what = f"{domain_id} ({zone.path})"
    range_text = _read_text(zone.path / "max_energy_range_uj")
    try:
        wrap_uj = int(range_text) if range_text is not None else 0
    except ValueError:
        wrap_uj = 0
    if wrap_uj <= 0:
        found.unavailable.append(
            Unavailable(what, f"max_energy_range_uj is missing or invalid ({range_text!r})", "report this kernel/CPU to us")
        )
        return None
    try:
        fd = os.open(zone.path / "energy_uj", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except PermissionError:
        found.unavailable.append(Unavailable(what, "energy_uj is not readable by this user", PERMISSION_REMEDY))
        return None
    except OSError as exc:
        reason = "has no energy_uj" if exc.errno == errno.ENOENT else f"energy_uj cannot be opened: {exc.strerror}"
        found.unavailable.append(Unavailable(what, reason, ""))
        return None
    max_power_watts = _max_power_watts(zone.path) or settings.max_power_watts
    domain = Domain(
        id=domain_id,
        kind=kind,
        hw_name=f"RAPL {zone.name}",
        hw_id=str(zone.path.name),
        method=Method.COUNTER,
        in_total=in_total,
        update_period_s=RAPL_UPDATE_PERIOD_S,
        # hw.parent is the parent's hw.id (its zone directory), per the semantic conventions.
        hw_parent=zone.path.parent.name if parent_package is not None else None,
        source="RAPL (powercap)",
        covers=_covers(zone.name, kind, parent_package),
        breadth=Breadth.SOC if kind == KIND_PLATFORM else Breadth.NONE,
    )
    channel = RaplChannel(domain, fd, wrap_uj, max_power_watts)
    try:
        channel.read_uj()
    except SensorReadError as exc:
        channel.close()
        found.unavailable.append(Unavailable(what, str(exc), ""))
        return None
    return channel


def _max_power_watts(zone_path: Path) -> float | None:
    """Largest ``constraint_*_max_power_uw`` of the zone, in watts, if the kernel exposes one."""
    best_uw = 0
    for entry in zone_path.glob("constraint_*_max_power_uw"):
        text = _read_text(entry)
        if text and text.isdigit():
            best_uw = max(best_uw, int(text))
    return best_uw / 1e6 if best_uw > 0 else None
