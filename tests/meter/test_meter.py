"""The meter: cumulative joules, wrap correction, the sampler, failures, the estimator fallback."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

from otel_joules import ConfigurationError, EnergyMeter, get_energy_meter
from otel_joules.meter.sampler import SAMPLER_FLOOR_S
from otel_joules.sensors.base import Channel, Domain, Method
from otel_joules.semconv import KIND_GPU

from tests.fakes.powercap import make_powercap


def test_cumulative_joules_per_domain(powercap) -> None:
    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False)
    start = meter.snapshot()
    powercap.zones["package_0"].advance_joules(12.5)
    powercap.zones["core_0"].advance_joules(8.0)
    powercap.zones["uncore_0"].advance_joules(1.0)
    powercap.zones["dram_0"].advance_joules(3.25)
    m = meter.measure(start, meter.snapshot())
    assert m.joules_by_domain == {"package_0": 12.5, "core_0": 8.0, "uncore_0": 1.0, "dram_0": 3.25}
    assert m.total_joules == 15.75  # package + dram; core and uncore are inside the package
    assert m.source == "measured"


def test_several_wraps_inside_one_interval_are_exact(tmp_path: Path) -> None:
    # A 10 J counter; the span spends 47.3 J, i.e. wraps four times, read between wraps.
    # The fake advances instantly, so the zone's power bound (1 kW) must allow 4.3 J within
    # the meter's slack: else each wrap would rightly be taken for a counter restart.
    pc = make_powercap(tmp_path, "amd", range_uj=10_000_000, start_uj=9_000_000, max_power_uw=1_000_000_000)
    meter = EnergyMeter(sysfs_root=pc.sysfs_root, gpus=[], sample=False)
    start = meter.snapshot()
    for _ in range(11):
        pc.zones["package_0"].advance_joules(4.3)
        meter.snapshot()  # what the sampler does between two wraps
    m = meter.measure(start, meter.snapshot())
    assert m.joules_by_domain["package_0"] == pytest.approx(47.3, abs=1e-9)


def test_background_sampler_keeps_long_spans_right_across_wraps(tmp_path: Path) -> None:
    # 1 J range at 10 W max power: the sampler must read every 25 ms.
    pc = make_powercap(tmp_path, "amd", range_uj=1_000_000, max_power_uw=10_000_000)
    with EnergyMeter(sysfs_root=pc.sysfs_root, gpus=[]) as meter:
        assert meter.sample_period_s == pytest.approx(0.025)
        start = meter.snapshot()  # starts the sampler
        for _ in range(8):
            pc.zones["package_0"].advance_joules(0.3)
            time.sleep(0.15)  # six sampler periods: it has read in between
        m = meter.measure(start, meter.snapshot())
    assert m.joules_by_domain["package_0"] == pytest.approx(2.4, abs=1e-9)


def test_sampler_period_has_a_floor(tmp_path: Path) -> None:
    pc = make_powercap(tmp_path, "amd", range_uj=1000, max_power_uw=1_000_000_000)
    meter = EnergyMeter(sysfs_root=pc.sysfs_root, gpus=[], sample=False)
    assert meter.sample_period_s == SAMPLER_FLOOR_S


def test_unreadable_garbage_is_retried_reported_once_and_others_go_on(powercap, caplog) -> None:
    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False)
    start = meter.snapshot()
    powercap.zones["dram_0"].write_raw("garbage")
    powercap.zones["package_0"].advance_joules(2.0)
    with caplog.at_level(logging.WARNING, logger="otel_joules"):
        middle = meter.snapshot()
        meter.snapshot()  # backing off: not even read
        m = meter.measure(start, middle)
        assert "dram_0" not in m.joules_by_domain
        assert m.joules_by_domain["package_0"] == 2.0
        assert m.missing_domains == ("dram_0",) and m.source == "partial"
        # Said at the first failed read; the outcome is said when known.
        (retrying,) = [r.getMessage() for r in caplog.records if "dram_0" in r.getMessage()]
        assert "not an integer" in retrying and "retrying" in retrying
        powercap.zones["dram_0"].advance_joules(0.75)  # rewrites the counter: it reads again
        time.sleep(0.06)  # past the first back-off
        end = meter.snapshot()
    # The gap is covered by the cumulative counter: exact, nothing invented.
    assert meter.measure(start, end).joules_by_domain["dram_0"] == 0.75
    warnings = [r.getMessage() for r in caplog.records if "dram_0" in r.getMessage()]
    assert len(warnings) == 2 and "not an integer" in warnings[1] and "reads again" in warnings[1]


def test_no_rapl_falls_back_to_the_estimator(tmp_path: Path) -> None:
    meter = EnergyMeter(sysfs_root=str(tmp_path), gpus=[], sample=False)
    assert [d.id for d in meter.domains] == ["cpu_estimate", "memory_estimate"]
    assert all(d.method is Method.ESTIMATE for d in meter.domains)
    assert any("does not exist" in u.reason for u in meter.unavailable)
    start = meter.snapshot()
    time.sleep(0.05)
    m = meter.measure(start, meter.snapshot())
    assert m.source == "estimate"
    assert m.joules_by_domain["memory_estimate"] > 0


def test_measured_gpu_with_estimated_host_is_mixed(powercap) -> None:
    from otel_joules.sensors.cpu_power import CpuPowerModel
    from otel_joules.sensors.estimator import CpuTimeEstimateChannel
    from otel_joules.sensors.rapl import discover
    from otel_joules.config import Settings

    busy, clock = [100.0], [50.0]
    model = CpuPowerModel("ccf:test", "a test model", idle_watts_per_cpu=1.0, busy_watts_per_cpu=11.0, low_factor=0.5, high_factor=2.0)
    channels = discover(Settings(sysfs_root=powercap.sysfs_root)).channels[:1] + [
        CpuTimeEstimateChannel(model, 2, busy_seconds=lambda: busy[0], clock=lambda: clock[0])
    ]
    meter = EnergyMeter(channels=channels, sample=False)
    start = meter.snapshot()
    busy[0] += 1.5
    clock[0] += 3.0
    powercap.zones["package_0"].advance_joules(4.0)
    m = meter.measure(start, meter.snapshot())
    # 2 CPUs x 1 W idle x 3 s, plus 1.5 busy CPU-seconds x (11 - 1) W.
    assert m.joules_by_domain == {"package_0": 4.0, "cpu_estimate": 21.0}
    assert m.source == "mixed"
    # The measured package as read, the estimate at its band's ends.
    assert m.estimate_band == (4.0 + 21.0 * 0.5, 4.0 + 21.0 * 2.0)
    assert m.estimate_source == "ccf:test"


def test_estimator_cpu_model_interpolates_per_cpu_watts_by_busy_time() -> None:
    from otel_joules.sensors.cpu_power import CpuPowerModel
    from otel_joules.sensors.estimator import CpuTimeEstimateChannel, MemoryEstimateChannel

    # Cloud Carbon Footprint's AWS fleet average: 0.74 W per idle vCPU, 3.5 W per busy one.
    model = CpuPowerModel("ccf:aws", "AWS", idle_watts_per_cpu=0.74, busy_watts_per_cpu=3.5, low_factor=0.2, high_factor=2.15)
    busy, clock = [50.0], [7.0]
    cpu = CpuTimeEstimateChannel(model, 2, busy_seconds=lambda: busy[0], clock=lambda: clock[0])
    busy[0] += 10.0  # one of two vCPUs busy for 10 s
    clock[0] += 10.0
    assert cpu.read_uj() == round((2 * 0.74 * 10 + 10 * (3.5 - 0.74)) * 1e6)  # 42.4 J: 4.24 W, not 46.5 W per busy vCPU
    assert cpu.domain.estimate_source == "ccf:aws" and cpu.domain.estimate_band == (0.2, 2.15)
    clock = [10.0]
    memory = MemoryEstimateChannel(16 * 0.375, clock=lambda: clock[0])
    clock[0] += 10.0
    assert memory.read_uj() == 60_000_000


def test_estimator_settings_from_environment(monkeypatch, tmp_path: Path, caplog) -> None:
    monkeypatch.setenv("OTEL_JOULES_CPU_TDP_WATTS", "120")
    assert EnergyMeter(sysfs_root=str(tmp_path), gpus=[], sample=False).settings.cpu_tdp_watts == 120.0
    # A bad value is said once, by name, and the default is used: the estimate is kept.
    monkeypatch.setenv("OTEL_JOULES_CPU_TDP_WATTS", "nonsense")
    with caplog.at_level(logging.WARNING, logger="otel_joules"):
        meter = EnergyMeter(sysfs_root=str(tmp_path), gpus=[], sample=False)
    assert meter.settings.cpu_tdp_watts == 85.0
    assert "cpu_estimate" in [d.id for d in meter.domains]
    assert [r.getMessage() for r in caplog.records if "OTEL_JOULES_CPU_TDP_WATTS" in r.getMessage()] == [
        "otel-joules: OTEL_JOULES_CPU_TDP_WATTS='nonsense' is not a number; using the default 85 instead"
    ]


def test_shared_meter_is_one_per_process_and_rejects_other_options(powercap) -> None:
    a = get_energy_meter(sysfs_root=powercap.sysfs_root, gpus=[])
    assert get_energy_meter() is a
    assert get_energy_meter(sysfs_root=powercap.sysfs_root, gpus=[]) is a
    with pytest.raises(ConfigurationError, match="Create your own"):
        get_energy_meter(sysfs_root="/elsewhere")


def test_fork_child_reads_on_its_own(powercap) -> None:
    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[])
    start = meter.snapshot()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            powercap.zones["package_0"].advance_joules(1.0)
            value = meter.measure(start, meter.snapshot()).joules_by_domain["package_0"]
            os.write(write, repr(value).encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    assert float(os.read(read, 100)) == 1.0
    meter.close()


def test_snapshot_reuse_window_is_opt_in_and_bounded(powercap) -> None:
    exact = EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False)
    cached = EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False, max_snapshot_age_s=0.05)
    a_exact, a_cached = exact.snapshot(), cached.snapshot()
    powercap.zones["package_0"].advance_joules(1.0)
    assert exact.measure(a_exact, exact.snapshot()).joules_by_domain["package_0"] == 1.0
    assert cached.snapshot() is a_cached  # younger than the window: reused, not re-read
    time.sleep(0.06)
    assert cached.measure(a_cached, cached.snapshot()).joules_by_domain["package_0"] == 1.0


def test_snapshot_reuse_window_from_environment(monkeypatch, powercap) -> None:
    monkeypatch.setenv("OTEL_JOULES_MAX_SNAPSHOT_AGE_S", "0.5")
    assert EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False).settings.max_snapshot_age_s == 0.5
    monkeypatch.setenv("OTEL_JOULES_MAX_SNAPSHOT_AGE_S", "-1")
    assert EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False).settings.max_snapshot_age_s == 0.0
    with pytest.raises(ConfigurationError, match=">= 0"):  # in code, a bad keyword is an error
        EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False, max_snapshot_age_s=-1)


def _meter_with_counters_and_estimates(powercap, busy: list[float], clock: list[float]) -> EnergyMeter:
    """package_0, core_0, uncore_0, dram_0 (1 ms counters), cpu_estimate (100 ms: ten 10 ms ticks), memory_estimate (0 s)."""
    from otel_joules.config import Settings
    from otel_joules.sensors.cpu_power import CpuPowerModel
    from otel_joules.sensors.estimator import CpuTimeEstimateChannel, MemoryEstimateChannel
    from otel_joules.sensors.rapl import discover

    # No idle watts: the CPU estimate moves with busy time alone, 10 W per busy CPU.
    model = CpuPowerModel("ccf:test", "a test model", idle_watts_per_cpu=0.0, busy_watts_per_cpu=10.0, low_factor=1.0, high_factor=1.0)
    channels = discover(Settings(sysfs_root=powercap.sysfs_root)).channels + [
        CpuTimeEstimateChannel(model, 4, busy_seconds=lambda: busy[0], clock=lambda: clock[0]),
        MemoryEstimateChannel(3.0, clock=lambda: clock[0]),
    ]
    return EnergyMeter(channels=channels, sample=False)


def test_measure_counts_only_the_chosen_domains(powercap) -> None:
    from otel_joules.meter.meter import EnergySnapshot

    busy, clock = [100.0], [10.0]
    meter = _meter_with_counters_and_estimates(powercap, busy, clock)
    start = meter.snapshot()
    powercap.zones["package_0"].advance_joules(4.0)
    powercap.zones["core_0"].advance_joules(3.0)
    powercap.zones["uncore_0"].advance_joules(0.5)
    powercap.zones["dram_0"].advance_joules(1.0)
    busy[0] += 1.5  # 15 J at 10 W per CPU
    clock[0] += 2.0  # 6 J at 3 W
    # 5 ms: longer than the counters' 1 ms update period, shorter than the CPU-time estimate's 100 ms.
    end = EnergySnapshot(start.monotonic_ns + 5_000_000, meter.snapshot().joules)

    everything = meter.measure(start, end)
    assert everything.total_joules == 4.0 + 1.0 + 15.0 + 6.0
    assert everything.source == "mixed" and everything.below_resolution is True

    counters = meter.measure(start, end, {"package_0", "core_0", "dram_0"})
    assert counters.joules_by_domain == {"package_0": 4.0, "core_0": 3.0, "dram_0": 1.0}
    assert counters.methods_by_domain == {"package_0": Method.COUNTER, "core_0": Method.COUNTER, "dram_0": Method.COUNTER}
    assert counters.total_joules == 5.0  # core_0 is inside package_0
    assert counters.watts == pytest.approx(1000.0)
    assert counters.source == "measured"
    assert counters.below_resolution is False
    assert counters.duration_s == 0.005

    with_cpu_time = meter.measure(start, end, ("package_0", "cpu_estimate"))
    assert with_cpu_time.joules_by_domain == {"package_0": 4.0, "cpu_estimate": 15.0}
    assert with_cpu_time.total_joules == 19.0
    assert with_cpu_time.source == "mixed"
    assert with_cpu_time.below_resolution is True

    memory = meter.measure(start, end, ["memory_estimate"])
    assert memory.joules_by_domain == {"memory_estimate": 6.0}
    assert memory.total_joules == 6.0
    assert memory.source == "estimate"
    assert memory.below_resolution is False

    nothing = meter.measure(start, end, ())
    assert nothing.joules_by_domain == {} and nothing.total_joules == 0.0 and nothing.below_resolution is False

    with pytest.raises(ConfigurationError, match="'nvidia_gpu_0' is not measured here"):
        meter.measure(start, end, {"package_0", "nvidia_gpu_0"})


def test_cpu_time_estimate_is_below_resolution_under_ten_ticks(powercap) -> None:
    """`run -- true` on the estimator (~15 ms) reads 0, 1 or 2 ticks of 10 ms: flagged, whatever it read.

    The memory estimate is a smooth model (no steps), so it alone is never below resolution;
    the RAPL counters keep their 1 ms.
    """
    from otel_joules.meter.meter import EnergySnapshot

    busy, clock = [100.0], [10.0]
    meter = _meter_with_counters_and_estimates(powercap, busy, clock)
    start = meter.snapshot()
    busy[0] += 0.01  # one tick in 15 ms: 0.1 J at 10 W per CPU, "6.7 W" from a single step
    clock[0] += 0.015
    joules = meter.snapshot().joules
    meter.close()

    def measured(duration_ns: int, domains: tuple[str, ...]) -> tuple[float, bool]:
        m = meter.measure(start, EnergySnapshot(start.monotonic_ns + duration_ns, joules), domains)
        return m.total_joules, m.below_resolution

    estimator = ("cpu_estimate", "memory_estimate")
    assert measured(15_000_000, estimator) == (pytest.approx(0.1 + 0.045), True)
    assert measured(99_000_000, estimator)[1] is True
    assert measured(100_000_000, estimator)[1] is False
    assert measured(15_000_000, ("memory_estimate",))[1] is False
    assert measured(15_000_000, ("package_0",))[1] is False


def test_measure_adds_constant_power_domains_as_estimates(powercap) -> None:
    from otel_joules.meter.meter import EnergySnapshot

    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False)
    start = meter.snapshot()
    powercap.zones["package_0"].advance_joules(4.0)
    end = EnergySnapshot(start.monotonic_ns + 2_000_000_000, meter.snapshot().joules)

    m = meter.measure(start, end, {"package_0"}, constant_watts={"sim_gpu": 150.0})
    assert m.joules_by_domain == {"package_0": 4.0, "sim_gpu": 300.0}
    assert m.methods_by_domain["sim_gpu"] is Method.ESTIMATE
    assert m.total_joules == 304.0
    assert m.watts == 152.0
    assert m.source == "mixed"

    only_modelled = meter.measure(start, end, (), constant_watts={"sim_cpu": 20.0})
    assert only_modelled.joules_by_domain == {"sim_cpu": 40.0}
    assert only_modelled.source == "estimate" and only_modelled.below_resolution is False

    with pytest.raises(ConfigurationError, match="constant_watts names 'package_0'"):
        meter.measure(start, end, constant_watts={"package_0": 1.0})


class ScriptedCounter(Channel):
    """A counter without a wrap range (like NVML's) that returns the given microjoules in turn."""

    def __init__(self, values_uj: list[int]) -> None:
        super().__init__(Domain("nvidia_gpu_0", KIND_GPU, "scripted GPU", "GPU-scripted", update_period_s=0.0))
        self._values_uj = values_uj

    def read_uj(self) -> int:
        return self._values_uj.pop(0)


def test_a_counter_that_restarts_counts_from_its_new_origin() -> None:
    # 5 J -> 7 J, then the driver reloads and the counter restarts: 1 J, 4 J.
    meter = EnergyMeter(channels=[ScriptedCounter([5_000_000, 7_000_000, 1_000_000, 4_000_000])], sample=False)
    start = meter.snapshot()
    assert start.joules == (2.0,)
    assert meter.snapshot().joules == (3.0,)
    end = meter.snapshot()
    assert meter.measure(start, end).joules_by_domain == {"nvidia_gpu_0": 4.0}
