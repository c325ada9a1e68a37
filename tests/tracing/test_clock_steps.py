"""A stepped wall clock changes no span's energy, and no exported duration is negative.

Each case runs tests/tracing/clock_step_child.py, a real instrumented process on a fake powercap
tree, with its wall clock stepped by the preload shim of tests/fakes/wall_clock.py
(``CLOCK_MONOTONIC`` runs on, as after ``date -s``, an NTP or chrony step, or a VM resume). The
child puts known joules on the package counter inside each span and between spans (not constant
watts from a thread here: on a loaded machine such a thread lags by some ms at times, and the
figures would measure the lag); a span's true energy is what went on while it was open, its true
duration the monotonic time the child measured just outside it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from otel_joules.semconv import ENERGY_CLOCK_STEP_S, ENERGY_JOULES, ENERGY_UNAVAILABLE_REASON
from tests.fakes.powercap import make_powercap
from tests.fakes.wall_clock import SteppedWallClock, build_shim
from tests.helpers.processes import clean_env, otel_joules_command

CHILD = Path(__file__).with_name("clock_step_child.py")
#: The child's spans that start and end on one side of a step: their wall times are right.
AFTER = [f"after_{k}" for k in range(8)]
#: What the processor counts as a step (and as an explicit time): 2 ms.
STEP_TOLERANCE_S = 0.002


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_shim(tmp_path_factory.mktemp("wall-clock-shim"))


def run_child(tmp_path: Path, shim: Path, step_s: float) -> tuple[dict[str, dict], dict[str, dict], str]:
    """The child's exported records by span name, its truth by span name, and its stderr."""
    powercap = make_powercap(tmp_path / "sys", "amd")
    clock = SteppedWallClock(tmp_path / "wall-offset")
    spans_path = tmp_path / "spans.jsonl"
    env = clean_env(tmp_path, {"OTEL_JOULES_SYSFS_ROOT": powercap.sysfs_root, **clock.env(shim)})
    proc = subprocess.run(
        [sys.executable, str(CHILD), repr(step_s), str(spans_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    truth = json.loads(proc.stdout.splitlines()[-1])
    records = {}
    for line in spans_path.read_text().splitlines():
        record = json.loads(line)
        records[record["name"]] = record
    return records, truth, proc.stderr


def true_s(truth: dict[str, dict], name: str) -> float:
    t0, t1 = truth[name]["monotonic_ns"]
    return (t1 - t0) / 1e9


def true_joules(truth: dict[str, dict], name: str) -> float:
    return float(truth[name]["joules"])


STEPS_S = [0.5, -0.5, 30.0, -30.0, 3600.0, -3600.0]


@pytest.mark.parametrize("step_s", STEPS_S, ids=[f"{s:+g}s" for s in STEPS_S])
def test_a_wall_clock_step_changes_no_spans_energy_and_no_duration_is_negative(
    tmp_path: Path, shim: Path, step_s: float
) -> None:
    records, truth, stderr = run_child(tmp_path, shim, step_s)
    figures = {
        name: (record["attributes"].get(ENERGY_JOULES), true_joules(truth, name), record["duration_s"], true_s(truth, name))
        for name, record in records.items()
    }
    detail = f"(energy.joules, true joules, duration_s, true s) by span: {figures}"

    # Across the step: the energy of its true interval, its measured duration, and the step flagged.
    across = records["across"]
    assert ENERGY_UNAVAILABLE_REASON not in across["attributes"], detail
    assert across["attributes"][ENERGY_JOULES] == pytest.approx(true_joules(truth, "across"), rel=1e-6), detail
    # Four sleeps of 0.15 s inside the span, and the child's reads just outside it.
    assert 0.6 <= across["duration_s"] <= true_s(truth, "across") + 0.001, detail
    assert across["attributes"][ENERGY_CLOCK_STEP_S] == pytest.approx(step_s, abs=STEP_TOLERANCE_S), detail
    # The span's wall-clock times are the SDK's, as given: they place it in the trace.
    wall_s = (across["end_time_unix_nano"] - across["start_time_unix_nano"]) / 1e9
    assert wall_s == pytest.approx(across["duration_s"] + step_s, abs=STEP_TOLERANCE_S), detail

    # Just after a step: each short span gets its own interval's energy, never none or that of an
    # interval off by the step.
    for name in AFTER:
        record = records[name]
        assert ENERGY_UNAVAILABLE_REASON not in record["attributes"], detail
        assert record["attributes"][ENERGY_JOULES] == pytest.approx(true_joules(truth, name), rel=1e-6), detail
        assert ENERGY_CLOCK_STEP_S not in record["attributes"], detail
        assert 0.01 <= record["duration_s"] <= true_s(truth, name) + 0.001, detail

    # Explicit times, each read from the wall clock as it was then, are the interval they say (from
    # the meter's history, interpolated between its 0.1 s samples).
    explicit = records["explicit"]
    assert ENERGY_UNAVAILABLE_REASON not in explicit["attributes"], detail
    assert explicit["attributes"][ENERGY_JOULES] == pytest.approx(true_joules(truth, "explicit"), rel=1e-6), detail
    # The child reads each stated time just after its monotonic truth: a GIL switch in between may part them by ms.
    assert explicit["duration_s"] == pytest.approx(true_s(truth, "explicit"), abs=0.02), detail
    assert explicit["attributes"][ENERGY_CLOCK_STEP_S] == pytest.approx(step_s, abs=STEP_TOLERANCE_S), detail

    # A step between the SDK's stamp and the processor's on_start: the stamp is the clock before the step.
    stamped = records["stamped_before_step"]
    assert stamped["attributes"][ENERGY_JOULES] == pytest.approx(true_joules(truth, "stamped_before_step"), rel=1e-6)
    assert stamped["attributes"][ENERGY_CLOCK_STEP_S] == pytest.approx(step_s, abs=STEP_TOLERANCE_S), detail
    assert 0.1 <= stamped["duration_s"] <= true_s(truth, "stamped_before_step") + 0.001, detail

    assert all(record["duration_s"] >= 0 for record in records.values()), detail
    # Four steps, said once.
    assert stderr.count("wall clock stepped") == 1, stderr

    # otel-joules report reads every span back (one trace each), with its measured duration.
    report = subprocess.run(
        otel_joules_command("report", "--json", str(tmp_path / "spans.jsonl")),
        env=clean_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert report.returncode == 0, report.stderr
    result = json.loads(report.stdout)
    assert result["skipped"] == [], result["skipped"]
    runs = {run["name"]: run for run in result["runs"]}
    assert runs.keys() == records.keys()
    for name, record in records.items():
        assert runs[name]["duration_s"] == pytest.approx(record["duration_s"], abs=1e-6), (name, runs[name])
        assert runs[name]["host_interval_joules"] == pytest.approx(record["attributes"][ENERGY_JOULES], rel=1e-9)
