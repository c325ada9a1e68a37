"""carbontracker drop-in: what a carbontracker 2.4.7 user's script does, unchanged after the import prefix changes.

epochs=0 (resumed trainings), sim_* numbers without a name, set_api_keys(), and the
console's "This is equivalent to" lines compared with what carbontracker 2.4.7 itself prints.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Iterator

import pytest

from otel_joules import EnergyMeter
from otel_joules.carbon.providers import ElectricityMapsProvider
from otel_joules.carbontracker import parser as our_parser
from otel_joules.carbontracker.tracker import CarbonTracker
from otel_joules.errors import ConfigurationError

from tests.fakes.electricity_maps import electricity_maps_server
from tests.fakes.powercap import FakePowercap

PACKAGE_J, DRAM_J = 60.0, 15.0
EPOCH_J = PACKAGE_J + DRAM_J
J_PER_KWH = 3.6e6
PUE = 1.58


def _meter(pc: FakePowercap) -> EnergyMeter:
    return EnergyMeter(sysfs_root=pc.sysfs_root, gpus=[], sample=False)


def _epoch(tracker: CarbonTracker, pc: FakePowercap) -> None:
    tracker.epoch_start()
    pc.zones["package_0"].advance_joules(PACKAGE_J)
    pc.zones["dram_0"].advance_joules(DRAM_J)
    tracker.epoch_end()


@pytest.fixture(autouse=True)
def _no_country(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_JOULES_COUNTRY", "OTEL_JOULES_CARBON_PROVIDERS", "OTEL_JOULES_ELECTRICITYMAPS_API_KEY"):
        monkeypatch.delenv(name, raising=False)


# ------------------------------------------------------------------------ epochs=0


def test_epochs_zero_with_no_epoch_left(tmp_path: Path, powercap: FakePowercap, capsys) -> None:
    # A resumed training at its last epoch: CarbonTracker(epochs=max_epochs - start) is 0, the loop never runs.
    tracker = CarbonTracker(epochs=0, meter=_meter(powercap), intensity_gco2eq_per_kwh=100.0, log_dir=tmp_path / "logs")
    result = tracker.stop()
    assert result.predicted is None
    assert result.actual.epochs == 0 and result.actual.energy_joules == 0.0
    assert result.early_stop is False
    out = capsys.readouterr().out
    assert "Actual consumption for 0 epoch(s):" in out and "Predicted" not in out
    # carbontracker writes "Actual consumption for -1 epoch(s)" here (stop() decrements its counter).
    assert "-1 epoch" not in result.output_log.read_text()
    assert our_parser.parse_all_logs(tmp_path / "logs")[0]["actual"]["epochs"] == 0


def test_epochs_zero_measures_every_epoch_until_stop(tmp_path: Path, powercap: FakePowercap, capsys) -> None:
    tracker = CarbonTracker(epochs=0, meter=_meter(powercap), intensity_gco2eq_per_kwh=100.0, log_dir=tmp_path / "logs")
    for _ in range(3):
        _epoch(tracker, powercap)
    assert tracker.monitoring  # "all 0 epochs" is no limit: stop() ends monitoring
    result = tracker.stop()
    assert result.predicted is None  # carbontracker prints a prediction "for 0 epoch(s)" of 0 kWh
    assert result.actual.epochs == 3
    assert result.actual.energy_joules == pytest.approx(3 * EPOCH_J, abs=1e-9)
    assert result.actual.energy_kwh == pytest.approx(3 * EPOCH_J * PUE / J_PER_KWH, rel=1e-12)
    out = capsys.readouterr().out
    assert "Predicted consumption" not in out
    kwh, grams, _ = our_parser.aggregate_consumption(tmp_path / "logs")
    assert kwh == pytest.approx(3 * EPOCH_J * PUE / J_PER_KWH, rel=1e-9)
    assert grams == pytest.approx(3 * EPOCH_J * PUE / J_PER_KWH * 100.0, rel=1e-9)


def test_epochs_zero_with_monitor_epochs_reports_by_itself(powercap: FakePowercap) -> None:
    tracker = CarbonTracker(epochs=0, monitor_epochs=2, meter=_meter(powercap), intensity_gco2eq_per_kwh=1.0, verbose=0)
    _epoch(tracker, powercap)
    _epoch(tracker, powercap)
    assert not tracker.monitoring
    assert tracker.actual.epochs == 2 and tracker.predicted is None


# ------------------------------------------------------------- sim_* without a name


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"sim_cpu_tdp": 100}, "sim_cpu_tdp"),
        ({"sim_cpu_util": 0.3}, "sim_cpu_util"),
        ({"sim_gpu_watts": 300}, "sim_gpu_watts"),
        ({"sim_gpu_util": 0.9, "sim_cpu_tdp": 50}, "sim_cpu_tdp, sim_gpu_util"),
    ],
)
def test_sim_numbers_without_a_name_are_ignored_as_carbontracker_does(
    options, named, tmp_path: Path, powercap: FakePowercap, capsys
) -> None:
    tracker = CarbonTracker(
        epochs=1, meter=_meter(powercap), intensity_gco2eq_per_kwh=100.0, log_dir=tmp_path / "logs", **options
    )
    _epoch(tracker, powercap)
    # The real hardware is measured, as carbontracker does when sim_cpu/sim_gpu is None.
    assert tracker.result.components == {"cpu": ("cpu:0", "dram:0")}
    assert tracker.actual.energy_joules == pytest.approx(EPOCH_J, abs=1e-9)
    out = capsys.readouterr().out
    assert out.count(f"Ignored {named}: simulation needs sim_cpu=/sim_gpu=") == 1
    assert f"Ignored {named}" in tracker.result.std_log.read_text()


# ------------------------------------------------------------------- set_api_keys


@pytest.fixture
def electricity_maps(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A local Electricity Maps service (321 gCO2eq/kWh); the provider's default service root points at it."""
    with electricity_maps_server() as (base_url, tokens):
        monkeypatch.setitem(ElectricityMapsProvider.__init__.__kwdefaults__, "base_url", base_url)
        yield tokens


def test_set_api_keys_switches_to_the_live_provider(powercap: FakePowercap, electricity_maps: list[str]) -> None:
    tracker = CarbonTracker(epochs=2, meter=_meter(powercap), country="DE", verbose=0)
    assert tracker.intensity.source == "offline"
    tracker.set_api_keys({"electricitymaps": "MY-KEY"})
    assert tracker.api_keys == {"electricitymaps": "MY-KEY"}
    deadline = time.monotonic() + 10
    while tracker.intensity.source != "electricitymaps" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert tracker.intensity.gco2eq_per_kwh == 321.0
    assert electricity_maps and set(electricity_maps) == {"MY-KEY"}
    _epoch(tracker, powercap)
    _epoch(tracker, powercap)
    assert tracker.actual.co2eq_grams == pytest.approx(2 * EPOCH_J / J_PER_KWH * PUE * 321.0, rel=1e-12)


def test_set_api_keys_refuses_unknown_services(powercap: FakePowercap) -> None:
    tracker = CarbonTracker(epochs=1, meter=_meter(powercap), intensity_gco2eq_per_kwh=1.0, verbose=0)
    with pytest.raises(ConfigurationError, match="unknown provider 'wattime'"):
        tracker.set_api_keys({"wattime": "k"})
    with pytest.raises(ConfigurationError, match="must be a dict"):
        tracker.set_api_keys("KEY")  # type: ignore[arg-type]
    tracker.set_api_keys(None)
    _epoch(tracker, powercap)
    assert tracker.actual.intensity_gco2eq_per_kwh == 1.0


# ------------------------------------------- "This is equivalent to", vs carbontracker


def _equivalent_lines(console: str) -> list[list[str]]:
    """The lines under each "This is equivalent to:" (tab-indented amounts)."""
    blocks = []
    for match in re.finditer(r"\tThis is equivalent to:\n((?:\t[^\n]*\n?)+)", console):
        blocks.append([re.sub(r"^[\d.e+-]+ ", "<n> ", line.strip()) for line in match.group(1).splitlines()])
    return blocks


CARBONTRACKER_RUN = textwrap.dedent(
    """
    import time
    from carbontracker.tracker import CarbonTracker
    tracker = CarbonTracker(epochs=2, epochs_before_pred=1, sim_cpu="X", sim_cpu_tdp=100, components="cpu",
                            update_interval=0.1, interpretable={interpretable})
    for _ in range(2):
        tracker.epoch_start()
        time.sleep(1.1)
        tracker.epoch_end()
    """
)


@pytest.mark.parametrize("interpretable", [True, False])
def test_equivalent_lines_are_carbontrackers(interpretable: bool, tmp_path: Path, powercap: FakePowercap, capsys) -> None:
    env = {**os.environ, "HOME": str(tmp_path), "no_proxy": "*"}
    theirs = subprocess.run(
        [sys.executable, "-c", CARBONTRACKER_RUN.format(interpretable=interpretable)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert theirs.returncode == 0, theirs.stderr
    tracker = CarbonTracker(
        epochs=2, meter=_meter(powercap), intensity_gco2eq_per_kwh=100.0, interpretable=interpretable
    )
    _epoch(tracker, powercap)
    _epoch(tracker, powercap)
    ours = capsys.readouterr().out
    expected = [["<n> km travelled by car"]] * 2 if interpretable else []
    assert _equivalent_lines(theirs.stdout) == expected
    assert _equivalent_lines(ours) == expected
    # The other equivalents stay available to code.
    assert {e.key for e in tracker.actual.equivalents} >= {"km_by_car", "smartphone_charges"}


# ------------------------------------------- threads after stop(), vs carbontracker

THREADS_AFTER_STOP = textwrap.dedent(
    """
    import importlib, sys, threading, time
    CarbonTracker = importlib.import_module(sys.argv[1] + "carbontracker.tracker").CarbonTracker
    sims = {{"cpu": dict(sim_cpu="Xeon", sim_cpu_tdp=100), "gpu": dict(sim_gpu="A100", sim_gpu_watts=300)}}
    before = set(threading.enumerate())
    ours = {{"intensity_gco2eq_per_kwh": 100.0}} if sys.argv[1] else {{}}
    tracker = CarbonTracker(epochs=3, components={components!r}, update_interval=0.05, verbose=0,
                            **sims[{components!r}], **ours)
    tracker.epoch_start()
    time.sleep(0.3)
    tracker.epoch_end()
    started = sorted(t.name for t in threading.enumerate() if t not in before)
    tracker.stop()  # early: 1 of 3 epochs
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and [t for t in threading.enumerate() if t not in before and t.is_alive()]:
        time.sleep(0.01)
    left = sorted(t.name for t in threading.enumerate() if t not in before and t.is_alive())
    print(started, left, sep="\\n")
    """
)


@pytest.mark.parametrize("components", ["cpu", "gpu"])
def test_stop_with_simulated_devices_ends_every_thread_as_carbontracker(components: str, tmp_path: Path) -> None:
    # carbontracker 2.4.7's stop() ends the threads it started; with sim_cpu/sim_gpu ours left
    # otel-joules-attribution running until the tracker was dropped.
    env = {**os.environ, "HOME": str(tmp_path), "no_proxy": "*"}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        env[name] = "http://127.0.0.1:9"  # carbontracker's geolocation fails at once, offline
    script = THREADS_AFTER_STOP.format(components=components)
    left = {}
    for prefix in ("", "otel_joules."):
        run = subprocess.run([sys.executable, "-c", script, prefix], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        started, left[prefix] = run.stdout.splitlines()[-2:]
        assert started != "[]", (prefix, "the tracker started no thread: nothing is tested")
    assert left == {"": "[]", "otel_joules.": "[]"}
