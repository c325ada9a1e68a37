"""Every "what to do" line the console commands print works when followed; estimates are never listed as measured.

(The GPU selection advice is checked in tests/pyjoules/test_gpu.py, the carbon-intensity advice in
tests/carbon/.)

Each test provokes the message as a user would (console commands in child processes on
fake powercap trees and the stand-in NVML), follows its advice literally, and checks
that the advice then does what it said.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from otel_joules import EnergyMeter
from otel_joules.cli.child import StatusLine

from tests.fakes.machine import write_dmi
from tests.fakes.powercap import make_powercap
from tests.helpers.processes import REPO, clean_env, otel_joules_command


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(otel_joules_command(*args), env=env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


# --------------------------------------------------------------------- devices and run


def test_devices_never_lists_estimates_as_measured_and_its_sysfs_advice_works(tmp_path: Path) -> None:
    env = clean_env(tmp_path, {"OTEL_JOULES_SYSFS_ROOT": str(tmp_path / "nosys")})
    out = _cli("devices", env=env).stdout
    assert "Measured domains:" not in out
    estimated = out.split("Estimated domains (no energy counter: a model, NOT a measurement):\n")[1]
    assert estimated.splitlines()[0].split()[:3] == ["cpu_estimate", "cpu", "estimate"]
    assert "set OTEL_JOULES_SYSFS_ROOT to where it is mounted" in out
    # Followed: the host's /sys "mounted" elsewhere, and the variable pointing there.
    pc = make_powercap(tmp_path / "host-sys", "one_socket")
    out = _cli("devices", env={**env, "OTEL_JOULES_SYSFS_ROOT": pc.sysfs_root}).stdout
    measured = out.split("Measured domains:\n")[1]
    assert measured.splitlines()[0].split()[:2] == ["package_0", "cpu"]
    assert "Estimated domains" not in out


def test_run_on_a_box_without_counters_reports_the_estimate_devices_lists(tmp_path: Path) -> None:
    # Not "nothing measurable here" while `devices` lists estimates: every process measures
    # the host (no election), so run reports the same estimated domains devices lists.
    env = clean_env(tmp_path, {"OTEL_JOULES_SYSFS_ROOT": str(tmp_path / "nosys")})
    devices = _cli("devices", env=env).stdout
    assert "cpu_estimate" in devices.split("Estimated domains")[1]
    result = _cli("run", "--exporter", "none", "--", sys.executable, "-c", "pass", env=env)
    assert result.returncode == 0, result.stderr
    assert "nothing measurable" not in result.stderr
    assert "(estimate: cpu_estimate, memory_estimate)" in result.stderr


def test_on_a_cloud_vm_run_prints_the_estimates_band_and_devices_names_its_model(tmp_path: Path) -> None:
    # No powercap; DMI (in the sysfs root) says an EC2 instance: the CPU model is Cloud Carbon Footprint's per vCPU
    # (the architecture from this host's cpuinfo, else AWS's fleet average), never a TDP shared by the vCPUs.
    write_dmi(tmp_path / "sys", sys_vendor="Amazon EC2", product_name="m5.large")
    env = clean_env(tmp_path, {"OTEL_JOULES_SYSFS_ROOT": str(tmp_path / "sys")})
    devices = _cli("devices", env=env).stdout
    estimated = devices.split("Estimated domains (no energy counter: a model, NOT a measurement):\n")[1]
    assert "DMI sys_vendor 'Amazon EC2'" in estimated
    (model_line,) = [line for line in estimated.splitlines() if line.strip().startswith("model ccf:")]
    assert re.search(r"band 0\.\d\dx to \d\.\d\dx the estimate", model_line), model_line
    result = _cli("run", "--exporter", "none", "--", sys.executable, "-c", "sum(range(3_000_000))", env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    energy = next(line for line in lines if line.startswith("  energy   "))
    (band,) = [line for line in lines if line.startswith("  band     ESTIMATE between ")]
    joules = float(energy.split()[1])
    low, high = float(band.split()[3]), float(band.split()[6])
    assert low < joules < high
    assert "(model: ccf:" in band and "memory:0.375_w_per_gb" in band


def test_run_summary_says_below_resolution_for_a_short_run() -> None:
    from otel_joules.carbon.intensity import CarbonIntensity
    from otel_joules.cli.summary import RunResult, summary_lines
    from otel_joules.meter.meter import EnergyMeasurement
    from otel_joules.sensors.base import Method

    def summary(below: bool) -> str:
        # `run -- true` on RAPL: 0.3 J in 1 ms is "300 W on average", from one counter step.
        measurement = EnergyMeasurement(0.001, {"package_0": 0.3}, 0.3, 300.0, "measured", below, {"package_0": Method.COUNTER})
        result = RunResult(["true"], 0, 0.001, measurement, 0.0001, CarbonIntensity(445.0, "world_average", None, 2024, "x"),
                           1.0, None, None)
        return "\n".join(summary_lines(result, None))

    assert "300 W on average" in summary(True)
    assert "BELOW RESOLUTION: 0:00:00.001 is shorter than a counter's update period" in summary(True)
    assert "quantised, not exact; measure a longer run" in summary(True)
    assert "BELOW RESOLUTION" not in summary(False)


def test_short_run_end_to_end_is_labelled_the_same_in_the_summary_and_the_report(tmp_path: Path) -> None:
    env = clean_env(tmp_path, {"OTEL_JOULES_SYSFS_ROOT": str(tmp_path / "nosys")})
    result = _cli("run", "--exporter", "jsonl:" + str(tmp_path / "runs.jsonl"), "--", "true", env=env)
    assert result.returncode == 0, result.stderr
    (span,) = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    # The example: `run -- true` lasts far less than the CPU-time estimate's ten
    # 10 ms ticks, so its watts are a tick count, and the span, the summary and the
    # report all say so.
    assert span["attributes"]["energy.source"] == "estimate"
    assert span["attributes"]["energy.below_resolution"] is True, span["attributes"]
    assert "BELOW RESOLUTION:" in result.stderr, result.stderr
    report = _cli("report", str(tmp_path / "runs.jsonl"), env=env)
    assert report.returncode == 0, report.stderr
    assert "estimate (below resolution)" in report.stdout, report.stdout
    assert "estimate" in report.stdout.splitlines()[4]


def test_status_line_says_estimate(tmp_path: Path) -> None:
    empty = tmp_path / "nosys"
    empty.mkdir()
    stream = io.StringIO()
    with EnergyMeter(sysfs_root=str(empty), gpus=[], sample=False) as meter:
        status = StatusLine(meter, stream, "train")
        status.start()
        time.sleep(1.2)
        status.stop()
    updates = [part for part in stream.getvalue().split("\r\x1b[K") if part.startswith("otel-joules: train")]
    assert updates and all(" W estimate, " in part for part in updates), updates


def test_report_advice_for_nothing_readable_works(tmp_path: Path) -> None:
    env = clean_env(tmp_path, {"OTEL_JOULES_SYSFS_ROOT": str(tmp_path / "nosys")})
    (tmp_path / "empty").mkdir()
    nothing = _cli("report", str(tmp_path / "empty"), env=env)
    assert nothing.returncode == 1 and nothing.stdout == ""
    assert "`otel-joules run --exporter jsonl:runs.jsonl -- CMD` then `otel-joules report runs.jsonl`" in nothing.stderr
    # Followed literally, in one working directory.
    for args in (("run", "--exporter", "jsonl:runs.jsonl", "--", "true"), ("report", "runs.jsonl")):
        followed = subprocess.run(otel_joules_command(*args), env=env, capture_output=True, text=True, timeout=60,
                                  cwd=tmp_path, stdin=subprocess.DEVNULL)
        assert followed.returncode == 0, followed.stderr
    assert "1 run(s)" in followed.stdout


# ------------------------------------------------------------------- installs, tracker


def test_every_pip_install_the_package_advises_names_something_real() -> None:
    from importlib import metadata

    sources = "\n".join(path.read_text() for path in REPO.joinpath("src").rglob("*.py"))
    extras = set(re.findall(r"pip install 'otel-joules\[(\w+)\]'", sources))
    assert extras and extras <= set(metadata.metadata("otel-joules").get_all("Provides-Extra") or [])
    # "pip install nvidia-ml-py (not the old `pynvml` package)": that distribution provides pynvml.
    assert "pip install nvidia-ml-py" in sources
    assert "nvidia-ml-py" in metadata.packages_distributions()["pynvml"]


def test_tracker_advice_for_a_component_that_cannot_be_measured_works(tmp_path: Path) -> None:
    from otel_joules.carbontracker.tracker import CarbonTracker, NoComponentsError

    empty = tmp_path / "nosys"
    empty.mkdir()
    with pytest.raises(NoComponentsError) as raised:
        CarbonTracker(epochs=1, components="gpu", meter=EnergyMeter(sysfs_root=str(empty), gpus=[], sample=False),
                      intensity_gco2eq_per_kwh=100.0, verbose=0)
    assert "Run `otel-joules devices` to see what this machine exposes, or choose other components." in str(raised.value)
    env = clean_env(tmp_path, {"OTEL_JOULES_SYSFS_ROOT": str(empty)})
    devices = _cli("devices", env=env).stdout
    assert "Not measured:" in devices and "what to do:" in devices  # why, and what to do
    tracker = CarbonTracker(epochs=1, components="cpu", meter=EnergyMeter(sysfs_root=str(empty), gpus=[], sample=False),
                            intensity_gco2eq_per_kwh=100.0, verbose=0)
    tracker.epoch_start()
    tracker.epoch_end()
    assert tracker.actual is not None and tracker.actual.energy_joules >= 0
