"""benchmarks/gpu_check.py against the stand-in library: every figure it prints checked against the stand-in's truth."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.nvml import FakeCard, FakeNvml, build_library, run_python, subprocess_env, uuid_for
from tests.helpers.processes import REPO

SCRIPT = REPO / "benchmarks" / "gpu_check.py"


def test_gpu_check_reports_counter_integral_update_period_and_read_cost(tmp_path: Path) -> None:
    update_ms = 20
    cards = [
        FakeCard(name="NVIDIA H200", uuid=uuid_for(0), watts=250, energy_start_mj=4_000_000),
        FakeCard(name="Tesla P100-PCIE-16GB", uuid=uuid_for(1), watts=80, energy=False, cc="6.0", pci="00000000:08:00.0"),
    ]
    args = [str(SCRIPT), "--seconds", "1.0", "--probe-seconds", "0.4", "--reads", "200", "--no-torch", "--json"]
    report = run_python("", FakeNvml(cards=cards, update_ms=update_ms), tmp_path, args=args).data

    assert report["workload"] == "CPU loop (GPUs idle)"
    assert report["synchronization"] is None  # --no-torch: the synchronize= check needs torch with CUDA
    seconds = report["seconds"]
    assert seconds == pytest.approx(1.0, abs=0.05)
    counter, integrated_only = report["gpus"]
    # One quantum of the counter at 250 W, the most a read can lag the truth.
    quantum_j = 250 * update_ms / 1000

    assert (counter["domain"], counter["method"], counter["uuid"]) == ("nvidia_gpu_0", "counter", uuid_for(0))
    assert counter["counter_joules"] == pytest.approx(250 * seconds, abs=quantum_j + 1)
    assert counter["integrated_joules"] == pytest.approx(250 * seconds, rel=0.01)
    assert abs(counter["integrated_vs_counter_percent"]) < (quantum_j + 1) / (250 * seconds) * 100
    # The span was measured by the meter through the same counter; it encloses the counter reads.
    assert counter["span_joules"] == pytest.approx(counter["counter_joules"], abs=2 * quantum_j)
    assert counter["average_watts"] == pytest.approx(250, rel=0.03)
    assert counter["counter_update_period_ms"] == pytest.approx(update_ms, rel=0.1)
    assert 0 < counter["energy_read_us"] < 1000
    assert 0 < counter["power_read_us"] < 1000

    assert (integrated_only["domain"], integrated_only["method"]) == ("nvidia_gpu_1", "power_integration")
    assert integrated_only["counter_joules"] is None and integrated_only["counter_update_period_ms"] is None
    assert integrated_only["integrated_joules"] == pytest.approx(80 * seconds, rel=0.01)
    assert integrated_only["span_joules"] == pytest.approx(80 * seconds, rel=0.03)


def test_gpu_check_without_a_gpu_says_why(tmp_path: Path) -> None:
    config = FakeNvml(cards=[]).write(tmp_path / "fake.conf")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--seconds", "0.1"],
        env=subprocess_env(config, build_library()),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "no GPU can be measured: nvidia_gpu: NVML found no GPU on this machine" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_gpu_check_skips_the_synchronize_check_cleanly_without_cuda(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    cards = [FakeCard(name="NVIDIA H200", uuid=uuid_for(0), watts=250)]
    args = [str(SCRIPT), "--seconds", "0.2", "--probe-seconds", "0.1", "--reads", "20", "--json"]
    report = run_python("", FakeNvml(cards=cards), tmp_path, args=args, timeout_s=120).data
    # torch is installed but there is no CUDA: the workload is the CPU loop and the check is skipped.
    assert report["workload"] == "CPU loop (GPUs idle)"
    assert report["synchronization"] is None
