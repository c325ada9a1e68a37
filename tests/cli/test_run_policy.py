"""``otel-joules run`` prices the command as spans are priced (issue 22): static and dynamic energy, the
policy from OTEL_JOULES_ATTRIBUTION_POLICY, baselines learned by a sampler in the waiting parent or
configured by OTEL_JOULES_STATIC_WATTS, and a summary line saying what was charged and why."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.fakes.powercap import ConstantPower, make_powercap
from tests.helpers.processes import clean_env, otel_joules_command

import subprocess

#: A command that works a little, then waits: long enough for the parent's sampler to see the host's power.
COMMAND = [sys.executable, "-c", "import time; sum(range(2_000_000)); time.sleep(0.8)"]


def _run(tmp_path: Path, **env: str) -> tuple[dict, str]:
    """Run COMMAND on a fake host drawing package 10 W, dram 3 W, with a written /proc whose busy time does not
    move (only the command is busy: its share is capacity's and busy's alike); its span's attributes and stderr."""
    powercap = make_powercap(tmp_path / "sys", "one_socket")
    procfs = tmp_path / "proc"
    procfs.mkdir()
    (procfs / "stat").write_text("cpu  100 0 50 1000 0 0 0 0 0 0\n")
    out = tmp_path / "run.jsonl"
    variables = {"OTEL_JOULES_SYSFS_ROOT": powercap.sysfs_root, "OTEL_JOULES_PROCFS_ROOT": str(procfs), **env}
    with ConstantPower(powercap, {"package_0": 10.0, "dram_0": 3.0}):
        result = subprocess.run(
            otel_joules_command("run", "--exporter", f"jsonl:{out}", "--", *COMMAND),
            env=clean_env(tmp_path, variables), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        )
    assert result.returncode == 0, result.stderr
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    return record["attributes"], result.stderr


def test_run_under_the_default_policy_says_what_it_charged_and_why(tmp_path: Path) -> None:
    attributes, stderr = _run(tmp_path)
    print(stderr)
    assert attributes["energy.attribution"] == "cpu_time_share/capacity"
    assert attributes["energy.baseline"] == "unknown"  # a constant power teaches no fit
    # Constant power: the floor is the whole power, so nothing is dynamic, and the share is the static part.
    assert attributes["energy.attributed.dynamic.joules"] == pytest.approx(0.0, abs=0.05 * attributes["energy.joules"])
    assert "  policy   capacity: " in stderr
    assert "each of its CPU seconds carries one core's share of the host's idle power" in stderr
    assert "(baseline unknown; OTEL_JOULES_ATTRIBUTION_POLICY)" in stderr


def test_run_with_configured_baselines_and_the_dynamic_policy_charges_dynamic_energy_only(tmp_path: Path) -> None:
    """Static 4 W + 1 W of the 13 W: the command, alone on the host, is charged the other 8 W x its duration."""
    attributes, stderr = _run(tmp_path, OTEL_JOULES_ATTRIBUTION_POLICY="dynamic", OTEL_JOULES_STATIC_WATTS="package_0=4,dram_0=1")
    print(stderr)
    assert attributes["energy.attribution"] == "cpu_time_share/dynamic"
    assert attributes["energy.baseline"] == "configured"
    total = attributes["energy.joules"]
    assert attributes["energy.attributed.joules"] == pytest.approx(attributes["energy.attributed.dynamic.joules"])
    assert attributes["energy.attributed.dynamic.joules"] == pytest.approx(total * 8 / 13, rel=0.1)
    assert "  policy   dynamic: " in stderr and "only the energy above the idle baseline counts" in stderr
    assert "(baseline configured;" in stderr
