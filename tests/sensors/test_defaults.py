"""The sensors' figures the documentation (README.md, docs/) gives as defaults, checked on the code paths that use them.

Other tests pass these values explicitly (``max_power_watts=1000.0``, ``cache_ttl_s=900``)
or hand the estimator channels their watts directly, so a changed default or a broken
sizing of the estimator from this machine's CPU count and memory went unnoticed. Each
expected number here is the documentation's figure or arithmetic on inputs the test fixes.
"""

from __future__ import annotations

import collections
import time
from pathlib import Path
from typing import Callable

import psutil
import pytest

from otel_joules import EnergyMeter
from otel_joules.config import Settings
from otel_joules.meter.meter import EnergySnapshot
from otel_joules.sensors import estimator, rapl

from tests.fakes.machine import write_cpuinfo
from tests.fakes.nvml import FakeCard, FakeNvml, run_python, uuid_for
from tests.fakes.powercap import make_powercap

GIB = 1024**3
ESTIMATOR_VARIABLES = ("OTEL_JOULES_CPU_TDP_WATTS", "OTEL_JOULES_MEMORY_WATTS_PER_GB")

#: The fields of psutil's Linux ``scputimes``, as /proc/stat reports them.
CpuTimes = collections.namedtuple(
    "CpuTimes", "user nice system idle iowait irq softirq steal guest guest_nice"
)


def test_busy_cpu_time_leaves_out_idle_and_does_not_count_guest_time_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    # Linux counts guest time inside user time and guest_nice inside nice time.
    times = CpuTimes(user=100.0, nice=10.0, system=20.0, idle=500.0, iowait=5.0, irq=1.0, softirq=2.0, steal=3.0,
                     guest=30.0, guest_nice=4.0)
    monkeypatch.setattr(psutil, "cpu_times", lambda: times)
    assert estimator.busy_cpu_seconds() == 100.0 + 10.0 + 20.0 + 1.0 + 2.0 + 3.0


def _fake_machine(monkeypatch: pytest.MonkeyPatch, cpus: int, memory_gib: int, tmp_path: Path) -> Callable[[float], None]:
    """A bare-metal machine with ``cpus`` logical CPUs of an Intel Xeon Gold 6148 (Skylake) and ``memory_gib`` GiB
    (cpuinfo in ``tmp_path/proc``, no DMI, no powercap); returns a function that adds busy CPU seconds."""
    busy = [1000.0]
    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: cpus)
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(f"MemTotal:       {memory_gib * GIB // 1024} kB\nMemFree:        1024 kB\n")
    monkeypatch.setattr(estimator, "MEMINFO_PATH", str(meminfo))
    write_cpuinfo(tmp_path / "proc", cpus, "Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz")
    monkeypatch.setattr(
        psutil,
        "cpu_times",
        lambda: CpuTimes(user=busy[0], nice=0.0, system=0.0, idle=9000.0, iowait=0.0, irq=0.0, softirq=0.0, steal=0.0,
                         guest=0.0, guest_nice=0.0),
    )

    def spend(cpu_seconds: float) -> None:
        busy[0] += cpu_seconds

    return spend


def _estimated(tmp_path: Path, spend: Callable[[float], None], cpu_seconds: float, wall_s: float) -> dict[str, float]:
    """Estimator joules and watts per domain over an interval in which the machine was busy for ``cpu_seconds``."""
    meter = EnergyMeter(sysfs_root=str(tmp_path / "no-powercap"), procfs_root=str(tmp_path / "proc"), gpus=[], sample=False)
    try:
        assert [d.id for d in meter.domains] == ["cpu_estimate", "memory_estimate"]
        start = meter.snapshot()
        spend(cpu_seconds)
        time.sleep(wall_s)
        m = meter.measure(start, meter.snapshot())
    finally:
        meter.close()
    assert m.source == "estimate"
    return {
        "cpu_joules": m.joules_by_domain["cpu_estimate"],
        "memory_watts": m.joules_by_domain["memory_estimate"] / m.duration_s,
        "duration_s": m.duration_s,
    }


#: Cloud Carbon Footprint's Skylake figures, watts per thread at idle and at full load: the idle/full ratio of the
#: TDP-style model on bare metal.
SKYLAKE_IDLE_TO_FULL = 0.65 / 4.26


def test_estimator_default_model_on_bare_metal_is_tdp_per_cpu_and_watts_per_gb(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ESTIMATOR_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    spend = _fake_machine(monkeypatch, cpus=4, memory_gib=16, tmp_path=tmp_path)
    got = _estimated(tmp_path, spend, cpu_seconds=2.0, wall_s=0.2)
    # A known CPU on bare metal: 85 W / 4 CPUs at full load, Skylake's idle/full ratio at idle; every CPU draws its
    # idle watts for the wall time, the two busy CPU-seconds the rest. 16 GiB x 0.375 W/GB = 6 W for memory.
    full = 85.0 / 4
    idle = full * SKYLAKE_IDLE_TO_FULL
    assert got["cpu_joules"] == pytest.approx(4 * idle * got["duration_s"] + 2.0 * (full - idle), rel=1e-3)
    assert got["memory_watts"] == pytest.approx(16 * 0.375, rel=0.01)


def test_estimator_settings_from_the_environment_size_the_model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OTEL_JOULES_CPU_TDP_WATTS", "120")
    monkeypatch.setenv("OTEL_JOULES_MEMORY_WATTS_PER_GB", "0.5")
    spend = _fake_machine(monkeypatch, cpus=8, memory_gib=64, tmp_path=tmp_path)
    got = _estimated(tmp_path, spend, cpu_seconds=4.0, wall_s=0.2)
    full = 120.0 / 8
    idle = full * SKYLAKE_IDLE_TO_FULL
    assert got["cpu_joules"] == pytest.approx(8 * idle * got["duration_s"] + 4.0 * (full - idle), rel=1e-3)
    assert got["memory_watts"] == pytest.approx(64 * 0.5, rel=0.01)


def test_rapl_zone_without_power_constraint_is_sampled_for_1_kw(tmp_path: Path) -> None:
    # docs/measuring.md: four reads per wrap period at the zone's maximum power, else 1 kW.
    pc = make_powercap(tmp_path, "amd", range_uj=1_000_000, max_power_uw=None)
    (package, _core) = rapl.discover(Settings.from_env({"OTEL_JOULES_SYSFS_ROOT": pc.sysfs_root})).channels
    assert package.max_read_interval_s == pytest.approx(1.0 / 1000.0 / 4)


def test_rapl_resolution_is_one_millisecond(powercap) -> None:
    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False)
    start = meter.snapshot()
    powercap.zones["package_0"].advance_joules(1.0)
    joules = meter.snapshot().joules
    meter.close()
    shorter = meter.measure(start, EnergySnapshot(start.monotonic_ns + 900_000, joules))
    longer = meter.measure(start, EnergySnapshot(start.monotonic_ns + 1_100_000, joules))
    assert (shorter.below_resolution, longer.below_resolution) == (True, False)
    assert shorter.joules_by_domain["package_0"] == longer.joules_by_domain["package_0"] == 1.0


GPU_RESOLUTION = r"""
import json
from otel_joules import EnergyMeter
from otel_joules.meter.meter import EnergySnapshot
meter = EnergyMeter(host=False, sample=False)
start = meter.snapshot()
out = {"domains": [d.id for d in meter.domains]}
for ms in (90, 110):
    out[str(ms)] = meter.measure(start, EnergySnapshot(start.monotonic_ns + ms * 1_000_000, start.joules)).below_resolution
meter.close()
print(json.dumps(out))
"""


def test_nvml_energy_counter_resolution_is_100_ms(tmp_path: Path) -> None:
    out = run_python(GPU_RESOLUTION, FakeNvml(cards=[FakeCard(uuid=uuid_for(0))]), tmp_path).data
    assert out == {"domains": ["nvidia_gpu_0"], "90": True, "110": False}
