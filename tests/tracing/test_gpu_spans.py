"""Spans whose exporter sees RAPL and GPU domains together, through the meter, the real pynvml and the stand-in."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.fakes.nvml import FakeCard, FakeNvml, run_python, uuid_for
from tests.fakes.powercap import make_powercap

SPAN_WITH_GPUS = r"""
import json, sys, time
from tests.fakes.powercap import FakePowercap, FakeZone
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import otel_joules

provider = TracerProvider()
exporter = InMemorySpanExporter()
provider.add_span_processor(SimpleSpanProcessor(exporter))
handle = otel_joules.instrument(provider, sysfs_root={sysfs!r})
meter = handle.meter
zone = FakeZone(__import__("pathlib").Path({package_path!r}), "package-0", {range_uj})
with provider.get_tracer("t").start_as_current_span("step"):
    t0 = time.monotonic()
    zone.total_uj = int(open({package_path!r} + "/energy_uj").read())
    zone.advance_joules(42.5)
    time.sleep({sleep_s})
t1 = time.monotonic()
(span,) = exporter.get_finished_spans()
print(json.dumps({{"attributes": dict(span.attributes), "domains": [d.id for d in meter.domains],
                   "duration_s": (span.end_time - span.start_time) / 1e9}}))
"""


def _run(
    tmp_path: Path,
    cards: list[FakeCard],
    sleep_s: float = 0.6,
    *,
    stderr: list[str] | None = None,
    epoch_at_first_use: bool = False,
):
    pc = make_powercap(tmp_path / "sys", "amd")
    # The cards' clocks start now, or (epoch_at_first_use) when the child first calls NVML: a card
    # lost N seconds in must not be lost before the child has even started on a loaded machine.
    fake = FakeNvml(cards=cards, update_ms=1, epoch_monotonic_s=None if epoch_at_first_use else time.monotonic())
    code = SPAN_WITH_GPUS.format(
        sysfs=pc.sysfs_root,
        package_path=str(pc.zones["package_0"].path),
        range_uj=pc.zones["package_0"].range_uj,
        sleep_s=sleep_s,
    )
    result = run_python(code, fake, tmp_path)
    if stderr is not None:
        stderr.append(result.stderr)
    return result.data


def test_one_span_carries_rapl_and_every_gpu_in_joules(tmp_path: Path) -> None:
    cards = [
        FakeCard(uuid=uuid_for(0), watts=300.0, energy_start_mj=10_000_000),
        FakeCard(uuid=uuid_for(1), watts=100.0, pci="00000000:08:00.0"),
    ]
    out = _run(tmp_path, cards)
    a = out["attributes"]
    assert out["domains"] == ["package_0", "core_0", "nvidia_gpu_0", "nvidia_gpu_1"]
    assert a["energy.package_0.joules"] == 42.5
    duration_s = out["duration_s"]
    # Joules, not millijoules: 300 W x ~0.6 s is ~180 J (pyJoules' bug would show 0.18).
    assert a["energy.nvidia_gpu_0.joules"] == pytest.approx(300.0 * duration_s, rel=0.05)
    assert a["energy.nvidia_gpu_1.joules"] == pytest.approx(100.0 * duration_s, rel=0.05)
    total = a["energy.package_0.joules"] + a["energy.nvidia_gpu_0.joules"] + a["energy.nvidia_gpu_1.joules"]
    assert a["energy.joules"] == pytest.approx(total)  # every GPU adds to the total
    assert a["energy.source"] == "measured"
    assert "energy.nvidia_gpu_0.method" not in a


def test_gpu_without_energy_counter_is_integrated_by_the_sampler(tmp_path: Path) -> None:
    cards = [FakeCard(uuid=uuid_for(0), watts=150.0, energy=False)]
    out = _run(tmp_path, cards, sleep_s=1.0)
    a = out["attributes"]
    assert a["energy.nvidia_gpu_0.method"] == "power_integration"
    assert a["energy.nvidia_gpu_0.joules"] == pytest.approx(150.0 * out["duration_s"], rel=0.05)
    assert a["energy.source"] == "measured"


def test_gpu_lost_mid_span_is_dropped_and_the_rest_goes_on(tmp_path: Path) -> None:
    cards = [
        FakeCard(uuid=uuid_for(0), watts=300.0, lost_after_s=0.3),
        FakeCard(uuid=uuid_for(1), watts=100.0, pci="00000000:08:00.0"),
    ]
    stderr: list[str] = []
    out = _run(tmp_path, cards, sleep_s=0.8, stderr=stderr, epoch_at_first_use=True)
    a = out["attributes"]
    warnings = [line for line in stderr[0].splitlines() if "stopped measuring nvidia_gpu_0" in line]
    assert len(warnings) == 1, stderr[0]
    assert "energy.nvidia_gpu_0.joules" not in a  # lost: no partial value passed off as the span's
    assert a["energy.nvidia_gpu_1.joules"] == pytest.approx(100.0 * out["duration_s"], rel=0.05)
    assert a["energy.package_0.joules"] == 42.5
