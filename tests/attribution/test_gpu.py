"""GPU shares through the real pynvml and the stand-in library (which processes run on a GPU, their SM use)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.fakes.nvml import FakeCard, FakeNvml, build_library, run_python, subprocess_env, uuid_for

CHILD = textwrap.dedent(
    """
    import json, os, sys, time
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from otel_joules import EnergyMeter, EnergySpanProcessor
    from otel_joules.attribution import Attributor

    go = sys.argv[2] if len(sys.argv) > 2 else None
    os.makedirs("empty-sys", exist_ok=True)
    meter = EnergyMeter(sysfs_root="empty-sys", estimate=False, gpus=[0], sample=False)
    attributor = Attributor(meter, sample=False)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.add_span_processor(EnergySpanProcessor(meter, attribution=attributor))
    print(json.dumps({"pid": os.getpid()}), flush=True)
    if go:
        while not os.path.exists(go):
            time.sleep(0.005)
    first = attributor.sample()
    time.sleep(0.2)
    attributor.sample()  # sets the process's GPU power: the span below is priced by it
    with provider.get_tracer("t").start_as_current_span("step"):
        time.sleep(0.4)
    last = attributor.sample()
    gpu_joules = meter.measure(first.snapshot, last.snapshot).total_joules
    (span,) = exporter.get_finished_spans()
    process_gpu = last.process_joules[2] - first.process_joules[2]
    print(json.dumps({"process_gpu": process_gpu, "gpu_joules": gpu_joules,
                      "span": dict(span.attributes), "fractions": attributor.gpu_shares.fractions()}))
    """
)


def card(**kwargs) -> FakeCard:
    return FakeCard(uuid=uuid_for(0), watts=100.0, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "fraction"),
    [
        ({"compute_pids": ("self",)}, 1.0),  # used only by this process: all of it
        ({"compute_pids": ("self", "999999"), "process_utilization": ("self:75", "999999:25")}, 0.75),
        ({"compute_pids": ("self", "999999")}, 0.5),  # no per-process utilisation: equal split
        ({"compute_pids": ("999999",)}, 0.0),  # another process's GPU
        ({}, 0.0),  # nobody runs on it: idle, nobody's
    ],
)
def test_a_processs_share_of_a_gpu(tmp_path: Path, kwargs: dict, fraction: float) -> None:
    fake = FakeNvml(cards=[card(**kwargs)], update_ms=1, epoch_monotonic_s=time.monotonic())
    out = run_python(CHILD, fake, tmp_path).data
    assert out["fractions"] == [fraction]
    assert out["process_gpu"] == pytest.approx(fraction * out["gpu_joules"], rel=1e-9, abs=1e-9)
    span = out["span"]
    # Alone in its process, the span gets the process's GPU power for its 0.4 s (one 1 ms counter update of slack).
    assert span["energy.attributed.gpu.joules"] == pytest.approx(fraction * 100.0 * 0.4, rel=0.15, abs=1e-9)
    assert span["energy.attributed.joules"] == span["energy.attributed.gpu.joules"]  # no CPU domain measured


def test_a_gpu_shared_by_two_processes_is_split_by_their_utilisation(tmp_path: Path) -> None:
    pids_file, util_file, go = tmp_path / "pids", tmp_path / "util", tmp_path / "go"
    fake = FakeNvml(cards=[card(compute_pids_file=str(pids_file), process_utilization_file=str(util_file))],
                    update_ms=1, epoch_monotonic_s=time.monotonic())
    config = fake.write(tmp_path / "fake_nvml.conf")
    env = subprocess_env(config, build_library())
    children = [subprocess.Popen([sys.executable, "-c", CHILD, "x", str(go)], env=env, cwd=tmp_path,
                                 stdout=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        pids = [json.loads(child.stdout.readline())["pid"] for child in children]
        pids_file.write_text(f"{pids[0]},{pids[1]}")
        util_file.write_text(f"{pids[0]}:60,{pids[1]}:20")
        go.write_text("go")
        outs = [json.loads(child.communicate(timeout=60)[0].splitlines()[-1]) for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    assert [out["fractions"] for out in outs] == [[0.75], [0.25]]
    for out, fraction in zip(outs, (0.75, 0.25)):
        assert out["process_gpu"] == pytest.approx(fraction * out["gpu_joules"], rel=1e-9)
    # Together they are attributed the GPU once, not twice.
    assert sum(out["process_gpu"] / out["gpu_joules"] for out in outs) == pytest.approx(1.0)


@pytest.mark.parametrize(("policy", "gpu_watts"), [("capacity", 100.0), ("busy", 100.0), ("dynamic", 60.0)])
def test_a_gpus_dynamic_share_is_above_its_baseline_and_its_static_goes_with_the_policy(
    tmp_path: Path, policy: str, gpu_watts: float
) -> None:
    """A 100 W GPU, 40 W of it static (configured), this process alone on it: a span's dynamic share is 60 W x
    its time; its share is all 100 W under capacity and busy (a GPU in use is held whole), 60 W under dynamic."""
    fake = FakeNvml(cards=[card(compute_pids=("self",))], update_ms=1, epoch_monotonic_s=time.monotonic())
    env = {"OTEL_JOULES_STATIC_WATTS": "nvidia_gpu_0=40", "OTEL_JOULES_ATTRIBUTION_POLICY": policy}
    out = run_python(CHILD, fake, tmp_path, env=env).data
    span = out["span"]
    assert span["energy.attribution"] == f"cpu_time_share/{policy}"
    assert span["energy.attributed.gpu.joules"] == pytest.approx(gpu_watts * 0.4, rel=0.15)
    assert span["energy.attributed.dynamic.self.joules"] == pytest.approx(60.0 * 0.4, rel=0.15)
