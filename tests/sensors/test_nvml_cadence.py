"""The GPU reader reads NVML at the counter's own cadence, and not at all while the program is idle.

Through the real ``pynvml`` and the stand-in ``libnvidia-ml.so.1``, which counts every
``nvmlDeviceGetTotalEnergyConsumption`` call in a shared file (``FakeNvml.reads_path``). Counts,
not timings: a loaded machine makes fewer reads, never more.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.fakes.nvml import FakeCard, FakeNvml, run_python, uuid_for
from tests.fakes.powercap import make_powercap

IDLE = r"""
import json, time
from opentelemetry.sdk.trace import TracerProvider
import otel_joules
from otel_joules.attribution.sampling import IDLE_AFTER_S
from tests.fakes.nvml import energy_reads

provider = TracerProvider()
otel_joules.instrument(provider, sysfs_root={sysfs!r})
with provider.get_tracer("t").start_as_current_span("work"):
    time.sleep(0.2)
# Past the idle period: the sampler has been idle for IDLE_AFTER_S and backs off.
time.sleep(IDLE_AFTER_S + 2.0)
before = energy_reads({reads!r})
time.sleep({window_s})
print(json.dumps({{"reads": energy_reads({reads!r}) - before}}))
"""

SPANS = r"""
import json, time
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import otel_joules
from tests.fakes.nvml import energy_reads

provider = TracerProvider()
exporter = InMemorySpanExporter()
provider.add_span_processor(SimpleSpanProcessor(exporter))
otel_joules.instrument(provider, sysfs_root={sysfs!r})
tracer = provider.get_tracer("t")
# Warm up: the reader learns the counter's period from its first readings.
for _ in range(25):
    with tracer.start_as_current_span("warm"):
        time.sleep(0.02)
exporter.clear()
before = energy_reads({reads!r})
start = time.monotonic()
while time.monotonic() - start < {seconds}:
    with tracer.start_as_current_span("step"):
        time.sleep(0.02)
elapsed_s = time.monotonic() - start
reads = energy_reads({reads!r}) - before
spans = exporter.get_finished_spans()
print(json.dumps({{
    "reads_per_s": reads / elapsed_s,
    "gpu_joules": sum(s.attributes.get("energy.nvidia_gpu_0.joules", 0.0) for s in spans),
    "span_seconds": sum((s.end_time - s.start_time) / 1e9 for s in spans),
    "first_start_ns": spans[0].start_time, "last_end_ns": spans[-1].end_time,
    "spans": len(spans),
}}))
"""


def _fake(tmp_path: Path, update_ms: float) -> FakeNvml:
    return FakeNvml(
        cards=[FakeCard(uuid=uuid_for(0), watts=300.0)],
        update_ms=update_ms,
        epoch_monotonic_s=time.monotonic(),
        reads_path=str(tmp_path / "nvml-reads"),
    )


def test_an_idle_process_makes_no_gpu_energy_reads(tmp_path: Path) -> None:
    # A realistic power bound (250 W): RAPL's counters need no read for minutes, so the sampler backs off.
    pc = make_powercap(tmp_path / "sys", "amd", max_power_uw=250_000_000)
    fake = _fake(tmp_path, update_ms=100)
    out = run_python(IDLE.format(sysfs=pc.sysfs_root, reads=fake.reads_path, window_s=2.0), fake, tmp_path).data
    assert out["reads"] == 0


def test_spans_read_the_gpu_at_the_counters_cadence_and_add_up_to_its_energy(tmp_path: Path) -> None:
    pc = make_powercap(tmp_path / "sys", "amd")
    fake = _fake(tmp_path, update_ms=100)
    out = run_python(SPANS.format(sysfs=pc.sysfs_root, reads=fake.reads_path, seconds=5.0), fake, tmp_path).data
    # NVML's counter moves every 100 ms: twice that rate is 20 reads a second (and a few more
    # when a span finds the reader asleep).
    assert out["reads_per_s"] <= 50
    # Back-to-back 20 ms spans: their GPU joules add up to the card's 300 W over their time.
    truth_j = 300.0 * (out["last_end_ns"] - out["first_start_ns"]) / 1e9
    assert out["gpu_joules"] == pytest.approx(truth_j, rel=0.03)


INTEGRATED_SPANS = r"""
import json, random, time
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import otel_joules

provider = TracerProvider()
exporter = InMemorySpanExporter()
provider.add_span_processor(SimpleSpanProcessor(exporter))
otel_joules.instrument(provider, sysfs_root={sysfs!r})
tracer = provider.get_tracer("t")
rng = random.Random(7)
with tracer.start_as_current_span("warm"):
    time.sleep(0.2)
exporter.clear()
for _ in range(30):
    with tracer.start_as_current_span("step"):
        time.sleep(rng.uniform(0.03, 0.15))
    time.sleep(rng.uniform(0.0, 0.05))  # ends and starts fall anywhere between two readings
print(json.dumps([
    [s.attributes.get("energy.nvidia_gpu_0.joules"), s.attributes.get("energy.nvidia_gpu_0.method"),
     (s.end_time - s.start_time) / 1e9]
    for s in exporter.get_finished_spans()
]))
"""


def test_a_power_reading_read_off_the_span_path_gives_each_span_its_energy_through_its_ends(tmp_path: Path) -> None:
    # A GPU without an energy counter: its power reading is integrated, read every 50 ms by the reader
    # thread. A span's ends fall between readings; each span still gets the power times its own
    # duration, not the integral up to the reading before its end (up to 50 ms x 80 W = 4 J off).
    pc = make_powercap(tmp_path / "sys", "amd")
    fake = FakeNvml(cards=[FakeCard(uuid=uuid_for(0), watts=80.0, energy=False)], update_ms=20)
    rows = run_python(INTEGRATED_SPANS.format(sysfs=pc.sysfs_root), fake, tmp_path).data
    assert len(rows) == 30
    for joules, method, duration_s in rows:
        assert method == "power_integration"
        # The span's own clock reads bracket the snapshots by a few microseconds to a millisecond.
        assert joules == pytest.approx(80.0 * duration_s, abs=80.0 * 0.002), (joules, duration_s)
