"""measure_energy, EnergyContext and the manual EnergyMeter: values against known counter deltas.

Every energy the tests expect is what they advanced the fake powercap counters by, in
microjoules; the shared meter runs without its sampler, so counters are read only by
the code under test.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import otel_joules
from otel_joules.meter.meter import EnergyMeter as CoreEnergyMeter
from otel_joules.pyjoules.device import DeviceFactory
from otel_joules.pyjoules.device.rapl_device import RaplDramDomain, RaplPackageDomain
from otel_joules.pyjoules.energy_meter import (
    EnergyContext,
    EnergyMeter,
    EnergyMeterNotStartedError,
    EnergyMeterNotStoppedError,
    measure_energy,
)
from otel_joules.pyjoules.energy_trace import EnergySample, EnergyTrace
from otel_joules.pyjoules.handler import EnergyHandler

from tests.fakes.powercap import FakePowercap, make_powercap

RAPL_ORDER = ["package_0", "dram_0", "core_0", "uncore_0"]


def samples(handler: EnergyHandler) -> list[EnergySample]:
    return [sample for trace in handler.traces for sample in trace]


def test_decorator_reports_counter_deltas_in_microjoules(powercap: FakePowercap, shared_meter: CoreEnergyMeter) -> None:
    handler = EnergyHandler()

    @measure_energy(handler=handler)
    def work(x: int) -> int:
        powercap.zones["package_0"].advance_joules(1.5)
        powercap.zones["core_0"].advance_joules(1.0)
        powercap.zones["dram_0"].advance_uj(250_001)
        return x * 2

    wall_before, mono_before = time.time(), time.monotonic()
    assert work(21) == 42
    wall_after, mono_after = time.time(), time.monotonic()
    assert work.__name__ == "work"
    (sample,) = samples(handler)
    assert sample.tag == "work"
    assert list(sample.energy) == RAPL_ORDER
    assert sample.energy == {"package_0": 1_500_000.0, "dram_0": 250_001.0, "core_0": 1_000_000.0, "uncore_0": 0.0}
    assert all(type(v) is float for v in sample.energy.values())
    assert wall_before <= sample.timestamp <= wall_after
    assert 0 < sample.duration <= mono_after - mono_before


def test_bare_decorator_prints_by_default(powercap: FakePowercap, shared_meter: CoreEnergyMeter, capsys: pytest.CaptureFixture[str]) -> None:
    @measure_energy
    def foo() -> str:
        powercap.zones["package_0"].advance_joules(0.5)
        return "done"

    assert foo() == "done"
    line = capsys.readouterr().out
    head, energy = line.split("; package_0 : ")
    assert head.startswith("begin timestamp : ") and "; tag : foo; duration : " in head
    assert energy == "500000.0; dram_0 : 0.0; core_0 : 0.0; uncore_0 : 0.0\n"


def test_explicit_domains_keep_the_order_given(powercap: FakePowercap, shared_meter: CoreEnergyMeter) -> None:
    handler = EnergyHandler()

    @measure_energy(handler=handler, domains=[RaplDramDomain(0), RaplPackageDomain(0)])
    def work() -> None:
        powercap.zones["package_0"].advance_joules(3)
        powercap.zones["dram_0"].advance_joules(0.125)
        powercap.zones["core_0"].advance_joules(1)

    work()
    (sample,) = samples(handler)
    assert list(sample.energy.items()) == [("dram_0", 125_000.0), ("package_0", 3_000_000.0)]


def test_a_wrapping_counter_is_corrected(tmp_path: Path) -> None:
    # pyJoules 0.5.1 subtracted raw counters: 900000 -> 200000 gave -700000 uJ.
    pc = make_powercap(tmp_path / "sys", "one_socket", range_uj=1_000_000, start_uj=900_000)
    otel_joules.get_energy_meter(sysfs_root=pc.sysfs_root, gpus=[], sample=False)
    handler = EnergyHandler()

    @measure_energy(handler=handler, domains=[RaplPackageDomain(0)])
    def work() -> None:
        pc.zones["package_0"].advance_uj(300_000)

    work()
    assert samples(handler)[0].energy == {"package_0": 300_000.0}


def test_two_sockets_and_psys_by_default(tmp_path: Path) -> None:
    pc = make_powercap(tmp_path / "sys", "two_sockets")
    otel_joules.get_energy_meter(sysfs_root=pc.sysfs_root, gpus=[], sample=False)
    handler = EnergyHandler()

    @measure_energy(handler=handler)
    def work() -> None:
        pc.zones["package_1"].advance_joules(2)
        pc.zones["psys"].advance_joules(9)

    work()
    (sample,) = samples(handler)
    assert list(sample.energy) == ["package_0", "package_1", "dram_0", "dram_1", "core_0", "core_1", "psys"]
    assert sample.energy["package_1"] == 2_000_000.0 and sample.energy["psys"] == 9_000_000.0
    assert sample.energy["package_0"] == 0.0


def test_estimates_are_the_default_where_no_counter_exists(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    otel_joules.get_energy_meter(sysfs_root=str(tmp_path / "empty"), gpus=[], sample=False)
    handler = EnergyHandler()
    measure_energy(handler=handler)(lambda: sum(range(10_000)))()
    (sample,) = samples(handler)
    assert list(sample.energy) == ["cpu_estimate", "memory_estimate"]


def test_context_segments(powercap: FakePowercap, shared_meter: CoreEnergyMeter) -> None:
    handler = EnergyHandler()
    with EnergyContext(handler=handler, domains=[RaplPackageDomain(0), RaplDramDomain(0)], start_tag="foo") as ctx:
        powercap.zones["package_0"].advance_joules(1)
        ctx.record(tag="bar")
        powercap.zones["dram_0"].advance_joules(2)
        powercap.zones["package_0"].advance_uj(3)
        ctx.record()
        powercap.zones["package_0"].advance_uj(5)
    assert len(handler.traces) == 1
    got = [(s.tag, s.energy) for s in samples(handler)]
    assert got == [
        ("foo", {"package_0": 1_000_000.0, "dram_0": 0.0}),
        ("bar", {"package_0": 3.0, "dram_0": 2_000_000.0}),
        ("", {"package_0": 5.0, "dram_0": 0.0}),
    ]
    stamps = [s.timestamp for s in samples(handler)]
    assert stamps == sorted(stamps)


def test_context_default_start_tag_and_meter(powercap: FakePowercap, shared_meter: CoreEnergyMeter) -> None:
    handler = EnergyHandler()
    context = EnergyContext(handler=handler)
    with context as ctx:
        assert isinstance(ctx, EnergyMeter) and context.energy_meter is ctx
        powercap.zones["uncore_0"].advance_uj(11)
    (sample,) = samples(handler)
    assert sample.tag == "start" and sample.energy["uncore_0"] == 11.0


def test_manual_meter(powercap: FakePowercap, shared_meter: CoreEnergyMeter) -> None:
    meter = EnergyMeter(DeviceFactory.create_devices([RaplPackageDomain(0)]), default_tag="x")
    assert meter.get_trace().__len__() == 0
    with pytest.raises(EnergyMeterNotStartedError):
        meter.record("a")
    with pytest.raises(EnergyMeterNotStartedError):
        meter.stop()
    meter.start("a")
    powercap.zones["package_0"].advance_uj(1)
    meter.record("b")
    powercap.zones["package_0"].advance_uj(2)
    with pytest.raises(EnergyMeterNotStoppedError):
        meter.get_trace()
    with pytest.raises(EnergyMeterNotStoppedError):
        meter.resume()
    meter.stop()
    powercap.zones["package_0"].advance_uj(100)  # between stop and resume: not in any sample
    meter.resume()
    powercap.zones["package_0"].advance_uj(4)
    meter.stop()
    trace = meter.get_trace()
    assert [(s.tag, s.energy["package_0"]) for s in trace] == [("a", 1.0), ("b", 2.0), ("x", 4.0)]
    assert trace["b"].energy == {"package_0": 2.0} and trace[2].tag == "x"
    assert "a" in trace and "zzz" not in trace
    with pytest.raises(KeyError):
        trace["zzz"]
    with pytest.raises(IndexError):
        trace[3]


def test_a_user_tag_named_like_pyjoules_stop_marker_is_a_sample(powercap: FakePowercap, shared_meter: CoreEnergyMeter) -> None:
    meter = EnergyMeter(DeviceFactory.create_devices([RaplPackageDomain(0)]))
    meter.start("__stop__")
    powercap.zones["package_0"].advance_uj(6)
    meter.stop()
    assert [(s.tag, s.energy) for s in meter.get_trace()] == [("__stop__", {"package_0": 6.0})]


def test_gen_idle_sleeps_each_sample_duration(shared_meter: CoreEnergyMeter) -> None:
    meter = EnergyMeter(DeviceFactory.create_devices([RaplPackageDomain(0)]))
    trace = EnergyTrace([EnergySample(0.0, "a", 0.05, {"package_0": 9.0}), EnergySample(0.0, "b", 0.03, {"package_0": 4.0})])
    started = time.monotonic()
    idle = meter.gen_idle(trace)
    # pyJoules divided the seconds by 1e9 and never slept.
    assert time.monotonic() - started >= 0.08
    assert idle == [{"package_0": 0.0}, {"package_0": 0.0}]
    trace.remove_idle([{"package_0": 1.0}, {"package_0": 5.0}])
    assert [s.energy["package_0"] for s in trace] == [8.0, -1.0]
    trace.clean_data()
    assert [s.tag for s in trace] == ["a"]


def test_trace_arithmetic() -> None:
    a = EnergyTrace([EnergySample(1.0, "a", 0.5, {"package_0": 1.0})])
    b = EnergyTrace([EnergySample(2.0, "b", 0.5, {"package_0": -2.0})])
    both = a + b
    assert [s.tag for s in both] == ["a", "b"] and len(a) == 1
    a += b
    assert len(a) == 2
    with pytest.raises(ValueError, match="idle holds 1 entries but the trace has 2 samples"):
        a.remove_idle([{"package_0": 0.0}])
    with pytest.raises(ValueError, match="domain not present in idle values: package_0"):
        a.remove_idle([{"package_0": 0.0}, {}])
    assert a[0].energy == {"package_0": 1.0}  # a refused remove_idle changes nothing
    a.clean_data([lambda s: s.tag != "a"])
    assert len(a) == 0
