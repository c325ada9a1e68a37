"""An estimator input that cannot be read (containers without a readable /proc/meminfo) drops that estimate only.

Before, the whole meter failed to start with ``KeyError: b'MemTotal:'`` and GPU
measurement was lost with it. The meminfo file is faked in a temp dir: missing, or
present without a MemTotal line (what psutil choked on).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from otel_joules.config import Settings
from otel_joules.sensors import estimator

from tests.fakes.nvml import FakeCard, FakeNvml, run_python, uuid_for

GIB = 1024**3


@pytest.fixture(params=["missing", "no_memtotal", "directory"])
def bad_meminfo(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    path = tmp_path / "meminfo"
    if request.param == "no_memtotal":
        path.write_text("MemFree:         123 kB\nCached:          456 kB\n")
    elif request.param == "directory":
        path.mkdir()
    return path


def test_memory_estimate_is_dropped_with_one_message(bad_meminfo: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="otel_joules"):
        found = estimator.discover(Settings.from_env(), meminfo_path=str(bad_meminfo))
    assert [c.domain.id for c in found.channels] == ["cpu_estimate"]
    (entry,) = found.unavailable
    assert entry.what == "memory_estimate"
    assert f"cannot read the installed memory from {bad_meminfo}" in entry.reason
    assert entry.remedy
    warnings = [r.getMessage() for r in caplog.records if "memory_estimate" in r.getMessage()]
    assert len(warnings) == 1 and "other domains are still measured" in warnings[0]


def test_memtotal_is_read_in_its_unit(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16384 kB\nMemFree:  1 kB\n")
    assert estimator.installed_memory_bytes(str(meminfo)) == 16384 * 1024
    found = estimator.discover(Settings.from_env(), meminfo_path=str(meminfo))
    memory = [c for c in found.channels if c.domain.id == "memory_estimate"][0]
    assert memory.watts == pytest.approx(16 / 1024 * 0.375)  # 16 MiB at the default 0.375 W/GB


METER_WITHOUT_MEMINFO = r"""
import json, time
from otel_joules.sensors import estimator
estimator.MEMINFO_PATH = {meminfo!r}
from otel_joules import EnergyMeter
meter = EnergyMeter(sysfs_root={sysfs!r})
start = meter.snapshot()
time.sleep(0.3)
m = meter.measure(start, meter.snapshot())
print(json.dumps({{
    "domains": [d.id for d in meter.domains],
    "unavailable": [u.what for u in meter.unavailable],
    "gpu_joules": m.joules_by_domain.get("nvidia_gpu_0"),
    "duration_s": m.duration_s,
    "source": m.source,
}}))
"""


def test_meter_keeps_gpus_and_cpu_estimate_without_meminfo(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"  # no powercap at all: no RAPL
    sysfs.mkdir()
    fake = FakeNvml(cards=[FakeCard(uuid=uuid_for(0), watts=200)], update_ms=1, epoch_monotonic_s=time.monotonic())
    code = METER_WITHOUT_MEMINFO.format(meminfo=str(tmp_path / "no-meminfo"), sysfs=str(sysfs))
    result = run_python(code, fake, tmp_path)
    out = result.data
    assert out["domains"] == ["cpu_estimate", "nvidia_gpu_0"]
    assert "memory_estimate" in out["unavailable"]
    assert out["gpu_joules"] == pytest.approx(200 * out["duration_s"], rel=0.05)
    assert out["source"] == "mixed"
    assert result.stderr.count("no memory_estimate") == 1
