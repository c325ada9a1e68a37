"""An AMD GPU's metrics: ``hw.energy`` and ``hw.power`` with ``hw.type = gpu`` and ``hw.vendor = AMD``, read through the
real ``amdsmi`` package and the stand-in ``libamd_smi.so``."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.fakes.amdsmi import FakeAmdGpu, FakeAmdSmi, run_python, uuid_for

CHILD = r"""
import json, os, time
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from otel_joules import EnergyMeter
from otel_joules.metrics import EnergyMetrics
os.makedirs("empty-sys", exist_ok=True)
meter = EnergyMeter(sysfs_root="empty-sys", estimate=False, sample=False)
reader = InMemoryMetricReader()
provider = MeterProvider(metric_readers=[reader])
EnergyMetrics(meter, provider, host_id="host-a")
reader.collect()
t0 = time.monotonic()
time.sleep(1.0)
data = reader.get_metrics_data()
t1 = time.monotonic()
points = {}
for rm in data.resource_metrics:
    for sm in rm.scope_metrics:
        for m in sm.metrics:
            points[m.name] = [[dict(p.attributes), p.value] for p in m.data.data_points]
print(json.dumps({"points": points, "seconds": t1 - t0}))
"""


def test_hw_energy_and_power_carry_the_gpu_type_and_amd_vendor(tmp_path: Path) -> None:
    fake = FakeAmdSmi(gpus=[FakeAmdGpu(uuid=uuid_for(0), watts=200.0)], epoch_monotonic_s=time.monotonic())
    out = run_python(CHILD, fake, tmp_path).data
    (energy,) = [p for p in out["points"]["hw.energy"] if p[0].get("hw.id") == uuid_for(0)]
    attributes, joules = energy
    assert attributes["hw.type"] == "gpu"
    assert attributes["hw.vendor"] == "AMD"
    assert attributes["energy.domain"] == "amd_gpu_0"
    assert attributes["energy.method"] == "counter"
    assert joules > 0
    (power,) = [p for p in out["points"]["hw.power"] if p[0].get("hw.id") == uuid_for(0)]
    assert power[0]["hw.vendor"] == "AMD" and power[0]["hw.type"] == "gpu"
    assert power[1] == pytest.approx(200.0, rel=0.05)
