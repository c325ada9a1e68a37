"""Energy *estimates* for machines without a readable energy counter.

CPU: a per-thread power model (:mod:`otel_joules.sensors.cpu_power`): every logical CPU draws its idle watts
for the wall time and its full-load watts while busy, interpolated by machine-wide busy CPU time (psutil):
``cpus x idle_W x wall_s + (busy_W - idle_W) x busy_cpu_s``. The figures are Cloud Carbon Footprint's
per-vCPU watts for the CPU's architecture on a VM or cloud instance, a TDP-style model
(``OTEL_JOULES_CPU_TDP_WATTS`` / logical CPUs at full load) on bare metal with a known CPU. Memory: installed
memory in GiB x ``OTEL_JOULES_MEMORY_WATTS_PER_GB`` (default 0.375 W/GB) x wall time. Both are models, not
measurements: their domains carry :attr:`Method.ESTIMATE` (``energy.source = "estimate"`` on spans), the model's
name (``Domain.estimate_source``) and an uncertainty band (``Domain.estimate_band``).

An input the estimator cannot read (``/proc/meminfo`` hidden or without ``MemTotal``
in some containers, ``/proc/stat`` unreadable) drops that one estimate with one warning
and an :class:`~otel_joules.sensors.base.Unavailable` entry; the other estimate and the
GPUs are still measured. An unreadable ``cpuinfo`` or DMI only widens the band (the CPU is then unknown).
"""

from __future__ import annotations

import logging
import time
from typing import Callable

import psutil

from otel_joules.config import DEFAULT_MEMORY_WATTS_PER_GB, Settings
from otel_joules.sensors import cpu_power
from otel_joules.sensors.base import Channel, Discovery, Domain, Method, Unavailable
from otel_joules.sensors.cpu_power import CpuPowerModel
from otel_joules.semconv import KIND_CPU, KIND_MEMORY

_log = logging.getLogger("otel_joules")

#: psutil's CPU times come from /proc/stat, counted in clock ticks (10 ms on Linux).
CPU_TIMES_RESOLUTION_S = 0.01
#: Ticks an interval needs before the CPU-time estimate is more than quantisation: a count
#: can be one tick off at each end, so below ten ticks one tick is over 10% of a busy CPU's
#: time in the interval (``run -- true``, ~15 ms, reads 0, 1 or 2 ticks: 0 W or an
#: impossible wattage). The memory estimate is a smooth model of wall time: no steps.
CPU_TIME_ESTIMATE_RESOLUTION_TICKS = 10
#: Intervals shorter than this are flagged ``below_resolution`` for the CPU-time estimate.
CPU_TIME_ESTIMATE_RESOLUTION_S = CPU_TIME_ESTIMATE_RESOLUTION_TICKS * CPU_TIMES_RESOLUTION_S
_BYTES_PER_GB = 1024**3
#: Where the installed memory (``MemTotal``) is read when :func:`discover` is given no path.
MEMINFO_PATH = "/proc/meminfo"
#: The memory estimate's band as factors on its joules. No maintained reference gives a spread for watts per GB:
#: the two published figures (CodeCarbon's 0.375, Cloud Carbon Footprint's 0.392 W/GB) agree within 5%, but both
#: average over DIMM generations and activity, so the band is a stated judgement of half to one and a half times.
MEMORY_BAND = (0.5, 1.5)
_MEMINFO_UNITS = {b"kb": 1024, b"mb": 1024**2, b"gb": 1024**3, b"b": 1}


def installed_memory_bytes(meminfo_path: str | None = None) -> int:
    """Installed memory from the ``MemTotal:`` line of ``meminfo_path`` (default :data:`MEMINFO_PATH`).

    Raises:
        OSError: the file cannot be read.
        ValueError: it has no readable ``MemTotal:`` line.
    """
    path = MEMINFO_PATH if meminfo_path is None else meminfo_path
    with open(path, "rb") as meminfo:
        for line in meminfo:
            if line.startswith(b"MemTotal:"):
                fields = line.split()
                unit = fields[2].lower() if len(fields) > 2 else b"b"
                if len(fields) < 2 or not fields[1].isdigit() or unit not in _MEMINFO_UNITS:
                    raise ValueError(f"{path}: unreadable MemTotal line {line.strip()!r}")
                return int(fields[1]) * _MEMINFO_UNITS[unit]
    raise ValueError(f"{path} has no MemTotal line")


def busy_cpu_seconds() -> float:
    """Seconds all CPUs of the machine spent not idle since boot."""
    times = psutil.cpu_times()
    idle = times.idle + getattr(times, "iowait", 0.0)
    # guest time is already included in user time on Linux; counting it again would double it.
    total = sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)
    return total - idle


class CpuTimeEstimateChannel(Channel):
    """CPU energy modelled per logical CPU: idle watts for the wall time, plus the busy increment for busy CPU time.

    Args:
        model: The per-thread figures, their band and source (:func:`~otel_joules.sensors.cpu_power.power_model`).
        cpus: Logical CPUs of the machine (each draws the idle figure).
        busy_seconds: Busy CPU-seconds of the whole machine since boot.
        clock: Wall seconds (monotonic).
    """

    def __init__(
        self,
        model: CpuPowerModel,
        cpus: int,
        busy_seconds: Callable[[], float] = busy_cpu_seconds,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(
            Domain(
                id="cpu_estimate",
                kind=KIND_CPU,
                hw_name=f"CPU (estimated: {model.source})",
                hw_id="cpu_estimate",
                method=Method.ESTIMATE,
                update_period_s=CPU_TIME_ESTIMATE_RESOLUTION_S,
                source=f"estimator ({model.source}, CPU time)",
                covers=f"the CPUs, modelled, not measured: {model.description}",
                estimate_source=model.source,
                estimate_band=(model.low_factor, model.high_factor),
                estimate_static_watts=cpus * model.idle_watts_per_cpu,
            )
        )
        self.model = model
        self.cpus = cpus
        self._busy_seconds = busy_seconds
        self._clock = clock
        self._origin_busy_s = busy_seconds()
        self._origin_s = clock()

    def read_uj(self) -> int:
        """The model's joules since the channel was created, in microjoules."""
        wall_s = self._clock() - self._origin_s
        busy_s = self._busy_seconds() - self._origin_busy_s
        idle_w = self.model.idle_watts_per_cpu
        return round((self.cpus * idle_w * wall_s + busy_s * (self.model.busy_watts_per_cpu - idle_w)) * 1e6)


class MemoryEstimateChannel(Channel):
    """Memory energy estimated as installed GiB x W/GB x wall time (``watts``; ``watts_per_gb`` names the figure)."""

    def __init__(self, watts: float, clock: Callable[[], float] = time.monotonic, watts_per_gb: float = DEFAULT_MEMORY_WATTS_PER_GB) -> None:
        super().__init__(
            Domain(
                id="memory_estimate",
                kind=KIND_MEMORY,
                hw_name="Memory (estimated from size x W/GB)",
                hw_id="memory_estimate",
                method=Method.ESTIMATE,
                update_period_s=0.0,
                source="estimator (memory size)",
                covers=f"memory, modelled, not measured: its size x {watts_per_gb:g} W per GB",
                # energy.estimate.source's part for memory: memory:<W/GB>_w_per_gb.
                estimate_source=f"{KIND_MEMORY}:{watts_per_gb:g}_w_per_gb",
                estimate_band=MEMORY_BAND,
            )
        )
        self.watts = watts
        self._clock = clock
        self._origin_s = clock()

    def read_uj(self) -> int:
        """Wall seconds since the channel was created, times the memory's modelled power, in microjoules."""
        return round((self._clock() - self._origin_s) * self.watts * 1e6)


def discover(settings: Settings, *, meminfo_path: str | None = None) -> Discovery:
    """The estimator's two channels, sized for this machine from ``settings``.

    Args:
        settings: TDP, W/GB, and the sysfs and procfs roots (DMI and ``cpuinfo`` are read there).
        meminfo_path: Where to read ``MemTotal`` (default :data:`MEMINFO_PATH`).

    An estimate whose input cannot be read is left out (one warning, one
    :class:`Unavailable` entry saying why and what to do); the other one is kept.
    """
    found = Discovery()
    cpus = psutil.cpu_count(logical=True) or 1
    model = cpu_power.power_model(cpu_power.detect_machine(settings.sysfs_root, settings.procfs_root), cpus, settings.cpu_tdp_watts)
    try:
        found.channels.append(CpuTimeEstimateChannel(model, cpus))
    except Exception as exc:  # noqa: BLE001 - a missing input drops this estimate only
        _drop(found, "cpu_estimate", f"cannot read the CPU times (/proc/stat): {exc}", "mount /proc readable in the container")
    try:
        memory_gb = installed_memory_bytes(meminfo_path) / _BYTES_PER_GB
    except (OSError, ValueError) as exc:
        path = MEMINFO_PATH if meminfo_path is None else meminfo_path
        _drop(
            found,
            "memory_estimate",
            f"cannot read the installed memory from {path}: {exc}",
            "make /proc/meminfo readable in the container",
        )
    else:
        found.channels.append(MemoryEstimateChannel(memory_gb * settings.memory_watts_per_gb, watts_per_gb=settings.memory_watts_per_gb))
    return found


def _drop(found: Discovery, domain_id: str, reason: str, remedy: str) -> None:
    found.unavailable.append(Unavailable(domain_id, reason, remedy))
    _log.warning("otel-joules: no %s: %s. The other domains are still measured (to fix: %s).", domain_id, reason, remedy)
