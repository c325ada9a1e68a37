"""Energy *estimates* for machines without a readable energy counter.

CPU: machine-wide busy CPU time (psutil) x per-core power, where per-core power is
the CPU's TDP (``OTEL_JOULES_CPU_TDP_WATTS``, default 85 W) divided by the number of
logical CPUs. Memory: installed memory in GiB x ``OTEL_JOULES_MEMORY_WATTS_PER_GB``
(default 0.375 W/GB) x wall time. Both are models, not measurements: their domains
carry :attr:`Method.ESTIMATE`, which spans report as ``energy.source = "estimate"``.

The figures are coarse (TDP is neither idle nor peak power), but they scale with
the work done, which is what lets a user compare two runs on a laptop or CI box.
"""

from __future__ import annotations

import time
from typing import Callable

import psutil

from otel_joules.config import Settings
from otel_joules.sensors.base import Channel, Discovery, Domain, HardwareType, Method

#: psutil's CPU times come from /proc/stat, counted in clock ticks (10 ms on Linux).
CPU_TIMES_RESOLUTION_S = 0.01
_BYTES_PER_GB = 1024**3


def busy_cpu_seconds() -> float:
    """Seconds all CPUs of the machine spent not idle since boot."""
    times = psutil.cpu_times()
    idle = times.idle + getattr(times, "iowait", 0.0)
    # guest time is already included in user time on Linux; counting it again would double it.
    total = sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)
    return total - idle


class CpuTimeEstimateChannel(Channel):
    """CPU energy estimated as busy CPU seconds x watts per logical CPU."""

    def __init__(self, watts_per_cpu: float, busy_seconds: Callable[[], float] = busy_cpu_seconds) -> None:
        super().__init__(
            Domain(
                id="cpu_estimate",
                hw_type=HardwareType.CPU,
                hw_name="CPU (estimated from CPU time x TDP)",
                hw_id="cpu_estimate",
                method=Method.ESTIMATE,
                update_period_s=CPU_TIMES_RESOLUTION_S,
            )
        )
        self.watts_per_cpu = watts_per_cpu
        self._busy_seconds = busy_seconds
        self._origin_s = busy_seconds()

    def read_uj(self) -> int:
        """Busy CPU seconds since the channel was created, times watts per CPU, in microjoules."""
        return round((self._busy_seconds() - self._origin_s) * self.watts_per_cpu * 1e6)


class MemoryEstimateChannel(Channel):
    """Memory energy estimated as installed GiB x W/GB x wall time."""

    def __init__(self, watts: float, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(
            Domain(
                id="memory_estimate",
                hw_type=HardwareType.MEMORY,
                hw_name="Memory (estimated from size x W/GB)",
                hw_id="memory_estimate",
                method=Method.ESTIMATE,
                update_period_s=0.0,
            )
        )
        self.watts = watts
        self._clock = clock
        self._origin_s = clock()

    def read_uj(self) -> int:
        """Wall seconds since the channel was created, times the memory's modelled power, in microjoules."""
        return round((self._clock() - self._origin_s) * self.watts * 1e6)


def discover(settings: Settings) -> Discovery:
    """The estimator's two channels, sized for this machine from ``settings``."""
    cpus = psutil.cpu_count(logical=True) or 1
    memory_gb = psutil.virtual_memory().total / _BYTES_PER_GB
    return Discovery(
        channels=[
            CpuTimeEstimateChannel(settings.cpu_tdp_watts / cpus),
            MemoryEstimateChannel(memory_gb * settings.memory_watts_per_gb),
        ]
    )
