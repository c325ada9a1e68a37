"""A powercap tree laid out the way the Linux kernel lays it out, with counters tests can advance.

The kernel keeps zones under ``devices/virtual/powercap/intel-rapl/`` and links each one
(sub-zones included) from ``class/powercap/``; sub-zones also sit inside their parent's
directory. ``energy_uj`` wraps at ``max_energy_range_uj``: a zone that has consumed
``total_uj`` in all shows ``total_uj % max_energy_range_uj``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

# The range real Intel CPUs report (32-bit counter x 61.035 uJ units).
INTEL_RANGE_UJ = 262143328850
#: The zones' default power bound (``constraint_0_max_power_uw``): 1 MW. Tests advance counters
#: instantly by up to kJ between two reads, which the meter takes as energy only within the bound's
#: slack (10 ms at full power: 10 kJ here); a realistic bound would rightly reject such moves as
#: counter jumps. Tests of the bound itself give a realistic one (``max_power_uw=``).
DEFAULT_MAX_POWER_UW = 1_000_000_000_000


@dataclass
class FakeZone:
    """One zone: its directory and its true cumulative energy."""

    path: Path
    name: str
    range_uj: int
    total_uj: int = 0

    def advance_uj(self, uj: int) -> None:
        """Consume ``uj`` more microjoules (wrapping the visible counter like the hardware)."""
        self.total_uj += uj
        self.write()

    def advance_joules(self, joules: float) -> None:
        """Consume ``joules`` more joules."""
        self.advance_uj(round(joules * 1e6))

    def write(self) -> None:
        # In place (same inode: the meter keeps the file open and preads it) and in one
        # fixed-width pwrite, so the sampler thread never sees a half-written value.
        # The kernel's file holds the bare number; the padding is whitespace int() ignores.
        fd = os.open(self.path / "energy_uj", os.O_WRONLY)
        try:
            os.pwrite(fd, f"{self.total_uj % self.range_uj}\n".ljust(24).encode(), 0)
        finally:
            os.close(fd)

    def write_raw(self, text: str) -> None:
        """Put arbitrary text in energy_uj (garbage, empty)."""
        with open(self.path / "energy_uj", "r+") as f:
            f.seek(0)
            f.truncate()
            f.write(text)


@dataclass
class FakePowercap:
    """A sysfs root with a powercap tree; ``zones`` by pyJoules domain id."""

    root: Path
    zones: dict[str, FakeZone] = field(default_factory=dict)

    @property
    def sysfs_root(self) -> str:
        return str(self.root)

    def add_zone(
        self,
        zone_id: str,
        name: str,
        domain_id: str,
        *,
        range_uj: int = INTEL_RANGE_UJ,
        start_uj: int = 0,
        max_power_uw: int | None = DEFAULT_MAX_POWER_UW,
        interface: str = "intel-rapl",
        mode: int = 0o444,
    ) -> FakeZone:
        """Add zone ``zone_id`` (``intel-rapl:0`` or ``intel-rapl:0:1``) named ``name``."""
        devices = self.root / "devices" / "virtual" / "powercap" / interface
        parts = zone_id.split(":")
        if len(parts) == 3:  # sub-zone: inside its parent's directory
            path = devices / f"{parts[0]}:{parts[1]}" / zone_id
        else:
            path = devices / zone_id
        path.mkdir(parents=True, exist_ok=True)
        (path / "name").write_text(name + "\n")
        (path / "max_energy_range_uj").write_text(f"{range_uj}\n")
        (path / "enabled").write_text("1\n")
        if max_power_uw is not None:
            (path / "constraint_0_name").write_text("long_term\n")
            (path / "constraint_0_max_power_uw").write_text(f"{max_power_uw}\n")
            (path / "constraint_0_power_limit_uw").write_text(f"{max_power_uw}\n")
        zone = FakeZone(path, name, range_uj, start_uj)
        (path / "energy_uj").write_text("")
        zone.write()
        os.chmod(path / "energy_uj", mode)
        link = self.root / "class" / "powercap" / zone_id
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists():
            link.symlink_to(os.path.relpath(path, link.parent))
        self.zones[domain_id] = zone
        return zone


def make_powercap(root: Path, layout: str = "one_socket", **kwargs: object) -> FakePowercap:
    """Build a typical tree.

    Layouts: ``one_socket`` (package, core, uncore, dram), ``two_sockets`` (two packages with
    core and dram each, plus psys at index 2 and an MMIO duplicate of package 0),
    ``psys_first`` (psys at index 0, package at index 1), ``amd`` (package and core only),
    ``psys_only``, ``four_domains`` (package, core, dram, psys: the benchmark's tree).
    """
    pc = FakePowercap(root)
    control = root / "devices" / "virtual" / "powercap" / "intel-rapl"
    control.mkdir(parents=True, exist_ok=True)
    (control / "enabled").write_text("1\n")
    (root / "class" / "powercap").mkdir(parents=True, exist_ok=True)
    (root / "class" / "powercap" / "intel-rapl").symlink_to(os.path.relpath(control, root / "class" / "powercap"))
    if layout == "one_socket":
        pc.add_zone("intel-rapl:0", "package-0", "package_0", **kwargs)
        pc.add_zone("intel-rapl:0:0", "core", "core_0", **kwargs)
        pc.add_zone("intel-rapl:0:1", "uncore", "uncore_0", **kwargs)
        pc.add_zone("intel-rapl:0:2", "dram", "dram_0", **kwargs)
    elif layout == "two_sockets":
        for socket in (0, 1):
            pc.add_zone(f"intel-rapl:{socket}", f"package-{socket}", f"package_{socket}", **kwargs)
            pc.add_zone(f"intel-rapl:{socket}:0", "core", f"core_{socket}", **kwargs)
            pc.add_zone(f"intel-rapl:{socket}:1", "dram", f"dram_{socket}", **kwargs)
        pc.add_zone("intel-rapl:2", "psys", "psys", **kwargs)
        pc.add_zone("intel-rapl-mmio:0", "package-0", "mmio_package_0", interface="intel-rapl-mmio", **kwargs)
    elif layout == "psys_first":
        pc.add_zone("intel-rapl:0", "psys", "psys", **kwargs)
        pc.add_zone("intel-rapl:1", "package-0", "package_0", **kwargs)
        pc.add_zone("intel-rapl:1:0", "core", "core_0", **kwargs)
    elif layout == "amd":
        pc.add_zone("intel-rapl:0", "package-0", "package_0", **kwargs)
        pc.add_zone("intel-rapl:0:0", "core", "core_0", **kwargs)
    elif layout == "psys_only":
        pc.add_zone("intel-rapl:0", "psys", "psys", **kwargs)
    elif layout == "four_domains":
        pc.add_zone("intel-rapl:0", "package-0", "package_0", **kwargs)
        pc.add_zone("intel-rapl:0:0", "core", "core_0", **kwargs)
        pc.add_zone("intel-rapl:0:1", "dram", "dram_0", **kwargs)
        pc.add_zone("intel-rapl:1", "psys", "psys", **kwargs)
    else:
        raise ValueError(layout)
    return pc


@contextmanager
def root_only_powercap(layout: str = "one_socket") -> Iterator[FakePowercap]:
    """A tree whose ``energy_uj`` files are root-only (0400, as since CVE-2020-8694), in a directory every user can walk.

    For tests that drop to an unprivileged user: pytest's tmp dirs are private to root, so the
    tree lives in its own temp dir (a fresh, unique name), removed on exit.
    """
    world = Path(tempfile.mkdtemp(prefix="otel-joules-root-only-"))
    try:
        os.chmod(world, 0o755)
        pc = make_powercap(world / "sys", layout, mode=0o400)
        for dirpath, _, _ in os.walk(world):
            os.chmod(dirpath, 0o755)
        yield pc
    finally:
        shutil.rmtree(world)


class ConstantPower:
    """Advances zones continuously at fixed watts (counter = watts x elapsed seconds), in a thread.

    For tests whose measurements run in other processes (a Collector stack, ``otel-joules
    run``): every process reading the tree sees the same power, as on a real host.
    """

    def __init__(self, powercap: FakePowercap, watts_by_domain: dict[str, float], period_s: float = 0.005) -> None:
        self._zones = [(powercap.zones[domain], watts) for domain, watts in watts_by_domain.items()]
        self._start_uj = {id(zone): zone.total_uj for zone, _ in self._zones}
        self._period_s = period_s
        self._stop_event = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fake-power", daemon=True)

    def __enter__(self) -> "ConstantPower":
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop_event.set()
        self._thread.join(5)

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop_event.wait(self._period_s):
            elapsed_s = time.monotonic() - started
            for zone, watts in self._zones:
                zone.total_uj = self._start_uj[id(zone)] + round(watts * elapsed_s * 1e6)
                zone.write()


def urgent() -> None:
    """Raise the calling thread's scheduling priority where allowed (root): a fake counter that lags on a
    loaded box would make its power jitter, which real hardware does not."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), -15)
    except (OSError, AttributeError):
        pass


class LoadPower:
    """Advances zones as a host whose power depends on its load, in a thread: each zone gains its static
    watts x elapsed seconds plus its watts per busy core x the busy CPU seconds ``<procfs_root>/stat`` counted
    meanwhile (the real ``/proc`` by default, or a written one).

    For tests of static and dynamic energy: on ``package_0`` 10 W + 12 W per busy core and ``dram_0`` 3 W
    (:data:`LOAD_STATIC_WATTS`, :data:`LOAD_WATTS_PER_BUSY_CORE`), a CPU second's dynamic energy is 12 J
    whoever else is busy, and the baselines to learn are 10 W and 3 W.
    """

    def __init__(
        self,
        powercap: FakePowercap,
        static_watts: dict[str, float] | None = None,
        watts_per_busy_core: dict[str, float] | None = None,
        procfs_root: str = "/proc",
        period_s: float = 0.001,
    ) -> None:
        static_watts = dict(LOAD_STATIC_WATTS if static_watts is None else static_watts)
        per_core = dict(LOAD_WATTS_PER_BUSY_CORE if watts_per_busy_core is None else watts_per_busy_core)
        self._zones = [
            (powercap.zones[domain], static_watts.get(domain, 0.0), per_core.get(domain, 0.0))
            for domain in dict.fromkeys([*static_watts, *per_core])
        ]
        self._stat = os.path.join(procfs_root, "stat")
        self._period_s = period_s
        self._stop_event = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fake-load-power", daemon=True)
        #: The busy CPU seconds the power followed so far.
        self.busy_s = 0.0

    def __enter__(self) -> "LoadPower":
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop_event.set()
        self._thread.join(5)

    def _busy_s(self) -> float:
        with open(self._stat) as f:
            fields = f.readline().split()
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in (fields[1:9] + ["0"] * 8)[:8])
        return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")

    def _run(self) -> None:
        urgent()  # a counter the kernel updates every millisecond, whatever the load: as near as a thread gets
        last_t, last_busy = time.monotonic(), self._busy_s()
        exact = {id(zone): float(zone.total_uj) for zone, _, _ in self._zones}
        while not self._stop_event.wait(self._period_s):
            now, busy = time.monotonic(), self._busy_s()
            dt_s, d_busy = now - last_t, max(0.0, busy - last_busy)
            self.busy_s += d_busy
            for zone, static, per_core in self._zones:
                exact[id(zone)] += (static * dt_s + per_core * d_busy) * 1e6
                zone.total_uj = round(exact[id(zone)])
                zone.write()
            last_t, last_busy = now, busy


#: :class:`LoadPower`'s default static watts and watts per busy core.
LOAD_STATIC_WATTS = {"package_0": 10.0, "dram_0": 3.0}
LOAD_WATTS_PER_BUSY_CORE = {"package_0": 12.0}


class PlatformPower:
    """Sets a whole-platform power reading, in a thread, to ``factor`` x the fake zones' power over the last
    ``window_s`` (as an ACPI meter or a BMC averages), so the platform's energy follows the load like its components'
    (the rest standing for fans, disks, the supplies' losses: what no component counter covers).

    Args:
        set_watts: Sets the platform's reading (a fake hwmon power file's, a file a fake BMC serves).
        powercap: The fake zones.
        zones: The zones the platform covers.
        factor: The platform's power over theirs.
        window_s: The averaging window.
    """

    def __init__(
        self, set_watts: Callable[[float], None], powercap: FakePowercap, zones: tuple[str, ...], factor: float, window_s: float = 0.05
    ) -> None:
        self._set_watts = set_watts
        self._zones = [powercap.zones[zone] for zone in zones]
        self._factor = factor
        self._window_s = window_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fake-platform-power", daemon=True)

    def __enter__(self) -> "PlatformPower":
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        seen: deque[tuple[float, int]] = deque()
        while not self._stop.wait(0.005):
            now = time.monotonic()
            seen.append((now, sum(zone.total_uj for zone in self._zones)))
            while len(seen) > 2 and now - seen[1][0] >= self._window_s:
                seen.popleft()
            (t0, uj0), (t1, uj1) = seen[0], seen[-1]
            if t1 > t0:
                self._set_watts(self._factor * (uj1 - uj0) / 1e6 / (t1 - t0))
