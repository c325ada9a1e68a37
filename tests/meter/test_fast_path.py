"""The compiled span path (otel_joules.meter._fastsnap) gives exactly what its pure-Python reference gives.

Same counter readings through wraps, restarts, jumps and faults on a fake powercap tree; the same attribute
dicts, float for float, from the same snapshots; the same span attributes with the real pynvml on the
gcc-built NVML stand-in. ``OTEL_JOULES_FAST_PATH=0`` selects the reference.
"""

from __future__ import annotations

import logging
import random
import shutil
import time
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_joules import EnergyMeter, EnergySpanProcessor
from otel_joules.attribution.shares import SpanAttribution
from otel_joules.config import OTEL_JOULES_FAST_PATH, Settings
from otel_joules.meter.fastpath import COMPILED
from otel_joules.meter.meter import EnergySnapshot
from otel_joules.semconv import KIND_CPU, KIND_GPU, KIND_MEMORY, KIND_PLATFORM
from otel_joules.sensors.base import Breadth, Channel, Domain, Method
from otel_joules.tracing.attributes import MeterAttributes
from tests.fakes.nvml import FakeCard, FakeNvml, run_python, uuid_for
from tests.fakes.powercap import FakePowercap, make_powercap

needs_compiled = pytest.mark.skipif(COMPILED is None, reason="otel_joules.meter._fastsnap is not built here (no C compiler)")

#: A 10 J counter range and a 100 W bound: moves above 1 J (the bound's 10 ms slack) are judged by the bound.
RANGE_UJ = 10_000_000
MAX_POWER_UW = 100_000_000


def test_the_extension_is_built_where_a_compiler_is() -> None:
    if shutil.which("gcc") is None and shutil.which("cc") is None:
        pytest.skip("no C compiler here: the install takes the pure-Python path")
    assert COMPILED is not None, (
        "otel_joules.meter._fastsnap is not built although a C compiler is here: run `pip install -e .` "
        "(or `python setup.py build_ext --inplace` in the checkout)"
    )


def test_the_variable_selects_the_reference(powercap: FakePowercap, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OTEL_JOULES_FAST_PATH, "0")
    with EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False) as meter:
        assert meter.fast_path is False
    monkeypatch.setenv(OTEL_JOULES_FAST_PATH, "maybe")  # a bad value: said, and the default used
    with EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False) as meter:
        assert meter.fast_path is (COMPILED is not None)


def _tree(tmp_path: Path) -> FakePowercap:
    tree = FakePowercap(tmp_path / "sys")
    tree.add_zone("intel-rapl:0", "package-0", "package_0", range_uj=RANGE_UJ, max_power_uw=MAX_POWER_UW)
    tree.add_zone("intel-rapl:0:0", "dram", "dram_0", range_uj=RANGE_UJ, max_power_uw=MAX_POWER_UW)
    return tree


def _state(meter: EnergyMeter) -> list[tuple]:
    return [
        (s.total_uj, s.last_raw_uj, s.jumps, s.resets, s.failures, s.failed) for s in meter._states  # noqa: SLF001
    ]


@needs_compiled
def test_both_paths_read_the_same_through_wraps_restarts_jumps_and_faults(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tree = _tree(tmp_path)
    package, dram = tree.zones["package_0"], tree.zones["dram_0"]
    meters = {
        fast: EnergyMeter(sysfs_root=tree.sysfs_root, gpus=[], sample=False, settings=Settings.from_env(
            sysfs_root=tree.sysfs_root, fast_path=fast)) for fast in (True, False)
    }
    assert meters[True].fast_path and not meters[False].fast_path
    assert meters[True]._read_counters is COMPILED.read_counters  # noqa: SLF001
    for name in ("snapshot", "open_interval", "close_interval"):
        assert getattr(meters[True], name).__func__ is getattr(COMPILED, name) and name not in vars(meters[False])

    def both_read() -> None:
        with caplog.at_level(logging.WARNING, logger="otel_joules"):
            caplog.clear()
            fast = meters[True].snapshot()
            fast_log = [r.getMessage() for r in caplog.records]
            caplog.clear()
            reference = meters[False].snapshot()
            reference_log = [r.getMessage() for r in caplog.records]
        assert fast[1:] == reference[1:]
        assert all(type(a) is type(b) for a, b in zip(fast[1], reference[1]))
        assert _state(meters[True]) == _state(meters[False])
        assert [m.split(" in ")[0] for m in fast_log] == [m.split(" in ")[0] for m in reference_log]
        steps.append(fast)

    steps: list[EnergySnapshot] = []
    both_read()
    for _ in range(5):  # moves within the slack: the inline case
        package.advance_uj(123_457)
        dram.advance_uj(7)
        both_read()
    package.advance_joules(2.5)  # above the slack: judged by the bound, and too fast for it (a jump)
    both_read()
    package.total_uj = (package.total_uj // RANGE_UJ + 1) * RANGE_UJ - 300_000
    package.write()  # just under the range: judged (a big move), counted
    both_read()
    package.advance_uj(500_000)  # wraps
    both_read()
    package.total_uj += 1_000_000_000  # 1 kJ in microseconds: beyond the bound, a jump
    package.write()
    both_read()
    package.write_raw("200000\n")  # far below: neither a wrap nor a jump fits, a restart from 200 mJ
    both_read()
    dram.write_raw("not a number\n")  # a failed read: retried after the back-off
    both_read()
    dram.write()
    time.sleep(0.12)  # past the first back-off (50 ms)
    both_read()
    assert steps[-2][3] == (1,) and steps[-1][3] == ()  # dram missing, then back
    assert any(steps[i][4] != steps[i + 1][4] for i in range(len(steps) - 1))  # the jump was seen
    for meter in meters.values():
        meter.close()


class _Fixed(Channel):
    """A counter whose readings the test sets (never read for the snapshots built by hand here)."""

    def __init__(self, domain: Domain) -> None:
        super().__init__(domain)

    def read_uj(self) -> int:
        return 0


def _plans(kinds: tuple[str, ...]) -> tuple[MeterAttributes, MeterAttributes, int]:
    domains = [
        Domain("package_0", KIND_CPU, "package", "rapl"),
        Domain("core_0", KIND_CPU, "core", "rapl", in_total=False),
        Domain("dram_0", KIND_MEMORY, "dram", "rapl"),
        Domain("cpu_estimate", KIND_CPU, "estimate", "estimate", method=Method.ESTIMATE, update_period_s=0.05),
        Domain("nvidia_gpu_0", KIND_GPU, "gpu", "nvml", method=Method.POWER_INTEGRATION, update_period_s=0.1),
        # Read beside the package, not in the total: the meter names it (energy.platform.domain, with its joules).
        Domain("psys", KIND_PLATFORM, "psys", "rapl", in_total=False, breadth=Breadth.SOC),
    ]
    plans = []
    for fast in (True, False):
        meter = EnergyMeter(channels=[_Fixed(d) for d in domains], sample=False, settings=Settings(fast_path=fast))
        assert meter.platform_domain == "psys"
        plans.append(MeterAttributes(meter, kinds))
        meter.close()
    return plans[0], plans[1], len(domains)


@needs_compiled
@pytest.mark.parametrize("kinds", [(KIND_CPU, KIND_MEMORY, KIND_GPU), (KIND_CPU,), ()])
def test_both_paths_build_the_same_attributes_float_for_float(kinds: tuple[str, ...]) -> None:
    fast, reference, count = _plans(kinds)
    assert fast._compiled is not None and reference._compiled is None  # noqa: SLF001
    rng = random.Random(21)
    for case in range(3000):
        t0 = rng.randrange(0, 10**15)
        t1 = t0 + rng.choice([0, 1, rng.randrange(1, 10**6), rng.randrange(1, 10**11)])
        if case % 50 == 0:
            t1 = t0 - 5  # snapshots out of order: a zero-length interval
        a = tuple(None if rng.random() < 0.1 else rng.uniform(0, 1e6) for _ in range(count))
        b = tuple(None if x is None or rng.random() < 0.05 else x + rng.expovariate(1.0) * rng.choice([1e-6, 1, 1e3])
                  for x in a)
        flags = rng.random()
        stale = (4,) if flags < 0.05 else ()
        missing = (2,) if 0.05 <= flags < 0.1 else ()
        jumps = ((0, 1, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0)) if 0.1 <= flags < 0.15 else ((), ())
        start = EnergySnapshot(t0, a, (), (), jumps[0])
        end = EnergySnapshot(t1, b, stale, missing, jumps[1])
        attribution = None if rng.random() < 0.3 else SpanAttribution(
            rng.random(), rng.random() * 1e-3, rng.random() * 10, rng.random(), rng.random() / 3, rng.random() / 7,
            "capacity", "learned",
        )
        got, want = fast.span_attributes(start, end, attribution), reference.span_attributes(start, end, attribution)
        assert got == want, (case, start, end, attribution)
        if want is not None and "energy.joules" in want:
            assert ("energy.platform.domain" in want) == (a[5] is not None and b[5] is not None)
        if want is not None:
            assert list(got.items()) == list(want.items())  # same keys in the same order
            assert [type(v) for v in got.values()] == [type(v) for v in want.values()]


def _spans(tree: FakePowercap, fast: bool) -> dict:
    meter = EnergyMeter(settings=Settings.from_env(sysfs_root=tree.sysfs_root, fast_path=fast), gpus=[])
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.add_span_processor(EnergySpanProcessor(meter))
    with provider.get_tracer("t").start_as_current_span("outer"):
        with provider.get_tracer("t").start_as_current_span("inner"):
            tree.zones["package_0"].advance_joules(42.5)
            tree.zones["dram_0"].advance_joules(1.25)
            time.sleep(0.005)  # longer than RAPL's update period: no energy.below_resolution on either path
    meter.close()
    return {span.name: dict(span.attributes) for span in exporter.get_finished_spans()}


@needs_compiled
def test_spans_get_the_same_attributes_on_both_paths(tmp_path: Path) -> None:
    tree = make_powercap(tmp_path / "sys", "one_socket")
    fast, reference = _spans(tree, True), _spans(tree, False)
    for name in ("outer", "inner"):
        assert list(fast[name]) == list(reference[name])
        assert fast[name]["energy.package_0.joules"] == reference[name]["energy.package_0.joules"] == 42.5
        assert fast[name]["energy.dram_0.joules"] == reference[name]["energy.dram_0.joules"] == 1.25
        assert fast[name]["energy.joules"] == reference[name]["energy.joules"] == 43.75
        assert "energy.attributed.self.joules" in fast[name]


GPU_BOTH_PATHS = r"""
import json, time
from otel_joules import EnergyMeter
from otel_joules.config import Settings
from otel_joules.tracing.attributes import MeterAttributes
meters = {fast: EnergyMeter(settings=Settings.from_env(sysfs_root=SYSFS_ROOT, fast_path=fast), sample=False)
          for fast in (True, False)}
plans = {fast: MeterAttributes(meter, ("cpu", "gpu")) for fast, meter in meters.items()}
out = {"fast_path": {str(k): m.fast_path for k, m in meters.items()}, "same": [], "gpu_joules": []}
for source in (True, False):
    a = meters[source].snapshot()
    time.sleep(0.3)
    b = meters[source].snapshot()
    got, want = plans[True].span_attributes(a, b, None), plans[False].span_attributes(a, b, None)
    out["same"].append(got == want and list(got) == list(want))
    out["gpu_joules"].append([got["energy.nvidia_gpu_0.joules"], (b[0] - a[0]) / 1e9])
    out["domains"] = [d.id for d in meters[source].domains]
for meter in meters.values():
    meter.close()
print(json.dumps(out))
"""


@needs_compiled
def test_both_paths_agree_on_the_nvml_stand_in(tmp_path: Path) -> None:
    tree = make_powercap(tmp_path / "sys", "amd")
    fake = FakeNvml(cards=[FakeCard(uuid=uuid_for(0), watts=300.0)], update_ms=1, epoch_monotonic_s=time.monotonic())
    out = run_python(GPU_BOTH_PATHS.replace("SYSFS_ROOT", repr(tree.sysfs_root)), fake, tmp_path).data
    assert out["fast_path"] == {"True": True, "False": False}
    assert "nvidia_gpu_0" in out["domains"]
    assert out["same"] == [True, True]
    for joules, duration_s in out["gpu_joules"]:
        assert joules == pytest.approx(300.0 * duration_s, rel=0.1)
