"""CarbonTracker (carbontracker's API) on fake powercap trees and the NVML stand-in: whole training loops at known power.

Counters are advanced inside epochs by known joules, so energies, kWh and grams are
checked against exact truths; the logs the tracker writes are read back by our parser
and by carbontracker 2.4.7's own parser.
"""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NoOpTracerProvider, StatusCode

import otel_joules
from otel_joules import EnergyMeter
from otel_joules.carbon import ElectricityMapsProvider
from otel_joules.carbontracker import parser as our_parser
from otel_joules.carbontracker.tracker import (
    CarbonTracker,
    CarbonTrackerError,
    NoComponentsError,
    TrainingCancelledError,
)
from otel_joules.errors import ConfigurationError

from tests.fakes.electricity_maps import electricity_maps_server
from tests.fakes.nvml import FakeCard, FakeNvml, run_python, uuid_for
from tests.fakes.powercap import FakePowercap, make_powercap
from tests.helpers.processes import REPO

J_PER_KWH = 3.6e6
PUE = 1.58

# Joules per epoch put into the fake counters: package 60 J (core 30 J inside it), dram 15 J.
PACKAGE_J, CORE_J, DRAM_J = 60.0, 30.0, 15.0
EPOCH_J = PACKAGE_J + DRAM_J  # core is inside the package: not added


def _meter(pc: FakePowercap) -> EnergyMeter:
    return EnergyMeter(sysfs_root=pc.sysfs_root, gpus=[], sample=False)


def _spend(pc: FakePowercap, factor: float = 1.0) -> None:
    pc.zones["package_0"].advance_joules(PACKAGE_J * factor)
    pc.zones["core_0"].advance_joules(CORE_J * factor)
    pc.zones["dram_0"].advance_joules(DRAM_J * factor)


def _train(tracker: CarbonTracker, pc: FakePowercap, epochs: int, *, sleep_s: float = 0.0) -> None:
    for _ in range(epochs):
        tracker.epoch_start()
        _spend(pc)
        if sleep_s:
            time.sleep(sleep_s)
        tracker.epoch_end()


@pytest.fixture(autouse=True)
def _no_country(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_JOULES_COUNTRY", "OTEL_JOULES_CARBON_PROVIDERS", "OTEL_JOULES_ELECTRICITYMAPS_API_KEY"):
        monkeypatch.delenv(name, raising=False)


# ----------------------------------------------------------------------- whole loops


def test_training_loop_gives_exact_joules_kwh_and_grams(powercap, tracer_provider, span_exporter, capsys) -> None:
    tracker = CarbonTracker(
        epochs=4, meter=_meter(powercap), intensity_gco2eq_per_kwh=200.0, tracer_provider=tracer_provider
    )
    _train(tracker, powercap, 4)
    result = tracker.stop()

    assert [e.epoch for e in result.epochs] == [1, 2, 3, 4]
    for epoch in result.epochs:
        assert epoch.energy_joules == pytest.approx(EPOCH_J, abs=1e-9)
        assert epoch.joules_by_domain["package_0"] == pytest.approx(PACKAGE_J, abs=1e-9)
        assert epoch.joules_by_domain["dram_0"] == pytest.approx(DRAM_J, abs=1e-9)
        assert epoch.joules_by_domain["core_0"] == pytest.approx(CORE_J, abs=1e-9)
        assert epoch.power_watts_by_component["cpu"] == pytest.approx(EPOCH_J / epoch.duration_s)
        assert epoch.co2eq_grams == pytest.approx(EPOCH_J / J_PER_KWH * PUE * 200.0)
        assert epoch.source == "measured"
    actual = result.actual
    assert actual is not None and actual.kind == "actual"
    assert actual.epochs == 4
    assert actual.energy_joules == pytest.approx(4 * EPOCH_J, abs=1e-9)
    assert actual.pue == PUE
    assert actual.energy_kwh == pytest.approx(4 * EPOCH_J * PUE / J_PER_KWH, rel=1e-12)
    assert actual.co2eq_grams == pytest.approx(4 * EPOCH_J * PUE / J_PER_KWH * 200.0, rel=1e-12)
    assert actual.intensity_gco2eq_per_kwh == 200.0
    assert actual.intensity_source == "explicit"
    assert actual.duration_s == pytest.approx(sum(e.duration_s for e in result.epochs))
    assert actual.equivalents_by_unit["km travelled by car"] == pytest.approx(actual.co2eq_grams / 106.8)
    # The prediction after 1 epoch: 4 x the first epoch.
    predicted = result.predicted
    assert predicted is not None and predicted.epochs == 4
    assert predicted.energy_joules == pytest.approx(4 * EPOCH_J, abs=1e-9)
    assert predicted.duration_s == pytest.approx(4 * result.epochs[0].duration_s)
    assert predicted.co2eq_grams == pytest.approx(4 * EPOCH_J * PUE / J_PER_KWH * 200.0, rel=1e-12)
    assert result.components == {"cpu": ("cpu:0", "dram:0")}
    assert result.early_stop is False and result.error is None
    assert tracker.actual == actual and tracker.predicted == predicted
    assert tracker.monitoring is False
    # stop() after the last monitored epoch reports nothing new and returns the same.
    assert tracker.stop() == result

    spans = span_exporter.get_finished_spans()
    epochs = [s for s in spans if s.name == "epoch"]
    (root,) = [s for s in spans if s.name == "training"]
    assert root.parent is None
    assert [s.attributes["training.epoch.number"] for s in epochs] == [1, 2, 3, 4]
    for span in epochs:
        assert span.parent.span_id == root.context.span_id
        assert span.context.trace_id == root.context.trace_id
        assert span.attributes["energy.joules"] == pytest.approx(EPOCH_J, abs=1e-9)
        assert span.attributes["energy.package_0.joules"] == pytest.approx(PACKAGE_J, abs=1e-9)
        assert span.attributes["energy.co2eq.grams"] == pytest.approx(EPOCH_J / J_PER_KWH * PUE * 200.0)
        assert span.attributes["carbon.intensity.gco2eq_per_kwh"] == 200.0
        assert span.attributes["carbon.intensity.source"] == "explicit"
        assert span.attributes["carbon.pue"] == PUE
        assert span.attributes["energy.source"] == "measured"
    assert root.attributes["energy.joules"] == pytest.approx(4 * EPOCH_J, abs=1e-9)
    assert root.attributes["energy.co2eq.grams"] == pytest.approx(actual.co2eq_grams, rel=1e-12)
    assert root.attributes["training.epochs.count"] == 4
    assert root.attributes["training.epochs.planned"] == 4
    assert root.attributes["training.early_stop"] is False
    (event,) = root.events
    assert event.name == "training.prediction"
    assert event.attributes["training.epochs.count"] == 4
    assert event.attributes["energy.joules"] == pytest.approx(4 * EPOCH_J, abs=1e-9)
    assert event.attributes["energy.kwh"] == pytest.approx(predicted.energy_kwh)
    assert event.attributes["energy.co2eq.grams"] == pytest.approx(predicted.co2eq_grams)
    assert [s.name for s in tracker.spans] == ["epoch"] * 4 + ["training"]

    out = capsys.readouterr().out
    assert "CarbonTracker: The following components were found: CPU with device(s) cpu:0, dram:0." in out
    assert "PUE coefficient of 1.58 (Daniel Bizo, 2023, Uptime Institute Global Data Center Survey)" in out
    assert "Predicted consumption for 4 epoch(s):" in out
    assert "Actual consumption for 4 epoch(s):" in out
    assert f"\tEnergy:\t{actual.energy_kwh:.12f} kWh" in out
    assert "Source: explicit" in out
    assert out.rstrip().endswith("CarbonTracker: Finished monitoring.")


def test_own_meter_from_a_sysfs_root_and_epochs_of_a_few_milliseconds(powercap) -> None:
    tracker = CarbonTracker(
        epochs=3, components="cpu", sysfs_root=powercap.sysfs_root, intensity_gco2eq_per_kwh=100.0, verbose=0
    )
    _train(tracker, powercap, 3, sleep_s=0.002)
    result = tracker.stop()
    assert [e.energy_joules for e in result.epochs] == pytest.approx([EPOCH_J] * 3, abs=1e-9)
    # Short epochs are measured, not None (carbontracker needs 1 s per CPU sample).
    assert all(e.power_watts_by_component["cpu"] is not None for e in result.epochs)
    assert all(e.duration_s >= 0.002 for e in result.epochs)
    assert tracker.meter is None  # its own meter is closed once monitoring has ended


def test_time_between_epochs_is_in_the_training_span_not_in_actual_consumption(
    powercap, tracer_provider, span_exporter
) -> None:
    tracker = CarbonTracker(
        epochs=2, meter=_meter(powercap), intensity_gco2eq_per_kwh=100.0, tracer_provider=tracer_provider, verbose=0
    )
    tracker.epoch_start()
    _spend(powercap)
    tracker.epoch_end()
    powercap.zones["package_0"].advance_joules(40.0)  # validation between epochs
    tracker.epoch_start()
    _spend(powercap)
    tracker.epoch_end()
    assert tracker.actual.energy_joules == pytest.approx(2 * EPOCH_J, abs=1e-9)
    (root,) = [s for s in span_exporter.get_finished_spans() if s.name == "training"]
    assert root.attributes["energy.joules"] == pytest.approx(2 * EPOCH_J + 40.0, abs=1e-9)


# ---------------------------------------------------------------------------- logs


def _logged_run(tmp_path: Path, pc: FakePowercap, **options) -> CarbonTracker:
    tracker = CarbonTracker(
        epochs=3,
        log_dir=tmp_path / "logs",
        meter=_meter(pc),
        intensity_gco2eq_per_kwh=250.0,
        verbose=0,
        **options,
    )
    _train(tracker, pc, 3, sleep_s=0.03)
    tracker.stop()
    return tracker


def test_our_logs_read_back_by_our_parser(tmp_path, powercap) -> None:
    tracker = _logged_run(tmp_path, powercap)
    result = tracker.result
    (run,) = our_parser.parse_all_logs(tmp_path / "logs")
    assert run["standard_filename"] == str(result.std_log)
    assert run["output_filename"] == str(result.output_log)
    assert run["early_stop"] is False
    actual, pred = run["actual"], run["pred"]
    assert actual["epochs"] == 3
    assert actual["energy (kWh)"] == pytest.approx(result.actual.energy_kwh, abs=1e-12)
    assert actual["co2eq (g)"] == pytest.approx(result.actual.co2eq_grams, abs=1e-12)
    assert actual["duration (s)"] == round(result.actual.duration_s)
    assert actual["equivalents"]["km travelled by car"] == pytest.approx(result.actual.co2eq_grams / 106.8, abs=1e-12)
    assert pred["epochs"] == 3
    assert pred["energy (kWh)"] == pytest.approx(result.predicted.energy_kwh, abs=1e-12)
    cpu = run["components"]["cpu"]
    assert cpu["devices"] == ["cpu:0", "dram:0"]
    # Power is written as the shortest exact decimal: it reads back to the same float.
    assert cpu["avg_power_usages (W)"][:, 0].tolist() == [e.power_watts_by_component["cpu"] for e in result.epochs]
    assert cpu["epoch_durations (s)"].tolist() == [round(e.duration_s, 2) for e in result.epochs]
    # Durations are written with two decimals (carbontracker's format): energy = power x rounded duration.
    assert cpu["avg_energy_usages (J)"][:, 0].tolist() == pytest.approx([EPOCH_J] * 3, rel=0.2)
    kwh, grams, equivalents = our_parser.aggregate_consumption(tmp_path / "logs")
    assert kwh == pytest.approx(result.actual.energy_kwh, abs=1e-12)
    assert grams == pytest.approx(result.actual.co2eq_grams, abs=1e-12)
    text = result.std_log.read_text()
    (root,) = [s for s in tracker.spans if s.name == "training"]
    assert result.trace_id == format(root.context.trace_id, "032x")
    assert f" - OpenTelemetry trace_id {result.trace_id}: " in text
    log = our_parser.parse_standard_log(text)
    assert log.software == "otel-joules"
    assert log.pue == PUE
    assert log.average_intensity_g_per_kwh == 250.0


def test_our_logs_read_by_carbontracker_own_parser(tmp_path, powercap) -> None:
    from carbontracker import parser as ct_parser

    tracker = _logged_run(tmp_path, powercap)
    result = tracker.result
    (run,) = ct_parser.parse_all_logs(str(tmp_path / "logs"))
    actual, pred = run["actual"], run["pred"]
    assert actual["energy (kWh)"] == pytest.approx(result.actual.energy_kwh, abs=1e-12)
    assert actual["co2eq (g)"] == pytest.approx(result.actual.co2eq_grams, abs=1e-12)
    assert actual["equivalents"]["km travelled by car"] == pytest.approx(result.actual.co2eq_grams / 106.8, abs=1e-12)
    assert pred["epochs"] == 3
    assert pred["energy (kWh)"] == pytest.approx(result.predicted.energy_kwh, abs=1e-12)
    assert pred["co2eq (g)"] == pytest.approx(result.predicted.co2eq_grams, abs=1e-12)
    cpu = run["components"]["cpu"]
    assert cpu["avg_power_usages (W)"].ravel().tolist() == [e.power_watts_by_component["cpu"] for e in result.epochs]
    assert cpu["epoch_durations (s)"].tolist() == [round(e.duration_s, 2) for e in result.epochs]
    assert [name.strip() for name in cpu["devices"]] == ["cpu:0", "dram:0"]
    kwh, grams, _ = ct_parser.aggregate_consumption(str(tmp_path / "logs"))
    # All epochs monitored: its aggregate uses our prediction for 3 epochs, equal to the actual.
    assert kwh == pytest.approx(result.actual.energy_kwh, abs=1e-12)
    assert grams == pytest.approx(result.actual.co2eq_grams, abs=1e-12)


def test_early_stop_counts_the_open_epoch_and_both_parsers_see_it(tmp_path, powercap) -> None:
    from carbontracker import parser as ct_parser

    tracker = CarbonTracker(
        epochs=10, log_dir=tmp_path / "logs", meter=_meter(powercap), intensity_gco2eq_per_kwh=100.0, verbose=0
    )
    _train(tracker, powercap, 2, sleep_s=0.02)
    tracker.epoch_start()
    _spend(powercap, 0.5)  # the third epoch is cut short
    result = tracker.stop()
    assert [e.interrupted for e in result.epochs] == [False, False, True]
    assert result.epochs[2].energy_joules == pytest.approx(EPOCH_J / 2, abs=1e-9)
    assert result.early_stop is True
    assert result.actual.epochs == 3
    assert result.actual.energy_joules == pytest.approx(2.5 * EPOCH_J, abs=1e-9)
    assert result.predicted.epochs == 10
    text = result.std_log.read_text()
    assert "Training was interrupted before all 10 epochs were monitored." in text
    (ours,) = our_parser.parse_all_logs(tmp_path / "logs")
    assert ours["early_stop"] is True and ours["actual"]["epochs"] == 3
    (theirs,) = ct_parser.parse_all_logs(str(tmp_path / "logs"))
    assert theirs["early_stop"] is True
    assert theirs["actual"]["energy (kWh)"] == pytest.approx(result.actual.energy_kwh, abs=1e-12)
    kwh, _, _ = ct_parser.aggregate_consumption(str(tmp_path / "logs"))
    assert kwh == pytest.approx(result.actual.energy_kwh, abs=1e-12)  # early stop: the actual, not the prediction


def test_no_prediction_and_partial_monitoring(tmp_path, powercap, capsys) -> None:
    tracker = CarbonTracker(
        epochs=5, epochs_before_pred=0, monitor_epochs=2, meter=_meter(powercap), intensity_gco2eq_per_kwh=1.0,
        log_dir=tmp_path / "logs",
    )
    _train(tracker, powercap, 5)  # epochs 3..5 are not monitored
    result = tracker.stop()
    assert result.predicted is None
    assert result.actual.epochs == 2
    assert result.actual.energy_joules == pytest.approx(2 * EPOCH_J, abs=1e-9)
    assert result.early_stop is False
    out = capsys.readouterr().out
    assert "Actual consumption:\n" in out and "Predicted" not in out
    assert "interrupted" not in result.std_log.read_text()


def test_interpretable_false_and_precision(powercap, capsys) -> None:
    tracker = CarbonTracker(
        epochs=1, meter=_meter(powercap), intensity_gco2eq_per_kwh=100.0, interpretable=False, decimal_precision=3
    )
    _train(tracker, powercap, 1)
    out = capsys.readouterr().out
    assert "equivalent" not in out
    assert f"\tEnergy:\t{EPOCH_J * PUE / J_PER_KWH:.3f} kWh" in out
    assert tracker.actual.equivalents  # still in the result


def test_verbose_zero_prints_nothing(powercap, capsys) -> None:
    tracker = CarbonTracker(epochs=1, meter=_meter(powercap), intensity_gco2eq_per_kwh=1.0, verbose=0)
    _train(tracker, powercap, 1)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


# ------------------------------------------------------------------------- GPUs


GPU_TRAINING = r"""
import json, time
from otel_joules.carbontracker.tracker import CarbonTracker
tracker = CarbonTracker(epochs=2, components="gpu", log_dir={log_dir!r}, sysfs_root={sysfs!r},
                        intensity_gco2eq_per_kwh=100.0, verbose=0)
for _ in range(2):
    tracker.epoch_start()
    time.sleep(0.3)
    tracker.epoch_end()
result = tracker.stop()
print(json.dumps({{"epochs": [{{"duration_s": e.duration_s, "power": e.power_watts_by_component,
                                "joules": e.energy_joules, "by_domain": dict(e.joules_by_domain)}} for e in result.epochs],
                   "components": {{k: list(v) for k, v in result.components.items()}}}}))
"""


def test_two_gpus_at_300_and_100_watts_log_400_watts(tmp_path) -> None:
    from carbontracker import parser as ct_parser

    cards = [
        FakeCard(name="NVIDIA A100-SXM4-40GB", uuid=uuid_for(0), watts=300.0),
        FakeCard(name="NVIDIA T4", uuid=uuid_for(1), watts=100.0, pci="00000000:08:00.0"),
    ]
    fake = FakeNvml(cards=cards, update_ms=1, epoch_monotonic_s=time.monotonic())
    sysfs = tmp_path / "sys"
    sysfs.mkdir()
    log_dir = tmp_path / "logs"
    out = run_python(GPU_TRAINING.format(log_dir=str(log_dir), sysfs=str(sysfs)), fake, tmp_path).data
    assert out["components"] == {"gpu": ["NVIDIA A100-SXM4-40GB", "NVIDIA T4"]}
    for epoch in out["epochs"]:
        assert epoch["power"]["gpu"] == pytest.approx(400.0, rel=0.05)  # summed, not averaged (200 W)
        assert epoch["by_domain"]["nvidia_gpu_0"] == pytest.approx(300.0 * epoch["duration_s"], rel=0.05)
        assert epoch["by_domain"]["nvidia_gpu_1"] == pytest.approx(100.0 * epoch["duration_s"], rel=0.05)
    (theirs,) = ct_parser.parse_all_logs(str(log_dir))
    gpu = theirs["components"]["gpu"]
    assert gpu["avg_power_usages (W)"].ravel().tolist() == [e["power"]["gpu"] for e in out["epochs"]]
    (ours,) = our_parser.parse_all_logs(log_dir)
    assert ours["components"]["gpu"]["devices"] == ["NVIDIA A100-SXM4-40GB", "NVIDIA T4"]
    assert ours["components"]["gpu"]["avg_power_usages (W)"][:, 0].tolist() == pytest.approx([400.0, 400.0], rel=0.05)


# ---------------------------------------------------------------------- failures


def _break_logs_after_first_epoch(tracker: CarbonTracker, pc: FakePowercap, log_dir: Path) -> None:
    tracker.epoch_start()
    _spend(pc)
    tracker.epoch_end()
    shutil.rmtree(log_dir)  # the next log write fails
    tracker.epoch_start()
    _spend(pc)


def test_ignore_errors_true_stops_monitoring_and_training_goes_on(
    tmp_path, powercap, tracer_provider, span_exporter, capsys
) -> None:
    log_dir = tmp_path / "logs"
    tracker = CarbonTracker(
        epochs=4, ignore_errors=True, log_dir=log_dir, meter=_meter(powercap), intensity_gco2eq_per_kwh=100.0,
        tracer_provider=tracer_provider, verbose=0,
    )
    _break_logs_after_first_epoch(tracker, powercap, log_dir)
    tracker.epoch_end()  # fails inside: no exception
    assert tracker.monitoring is False
    for _ in range(2):  # the rest of training runs unmonitored
        tracker.epoch_start()
        _spend(powercap)
        tracker.epoch_end()
    result = tracker.stop()
    assert "LogWriteError" in result.error
    assert result.actual.epochs == 2  # both epochs measured before the failure are kept
    assert result.actual.energy_joules == pytest.approx(2 * EPOCH_J, abs=1e-9)
    err = capsys.readouterr().err
    assert "Ignored error" in err and "Continued training without monitoring" in err
    (root,) = [s for s in span_exporter.get_finished_spans() if s.name == "training"]
    assert root.status.status_code is StatusCode.ERROR
    assert len([s for s in span_exporter.get_finished_spans() if s.name == "epoch"]) == 2


def test_ignore_errors_false_raises_a_clear_error_in_the_training_thread(tmp_path, powercap) -> None:
    log_dir = tmp_path / "logs"
    tracker = CarbonTracker(
        epochs=4, log_dir=log_dir, meter=_meter(powercap), intensity_gco2eq_per_kwh=100.0, verbose=0
    )
    _break_logs_after_first_epoch(tracker, powercap, log_dir)
    with pytest.raises(CarbonTrackerError, match="ignore_errors=True") as caught:
        tracker.epoch_end()
    assert type(caught.value.__cause__).__name__ == "LogWriteError"
    assert tracker.result.actual.energy_joules == pytest.approx(2 * EPOCH_J, abs=1e-9)
    tracker.epoch_start()  # later calls are no-ops, never sys.exit
    tracker.epoch_end()
    assert tracker.stop().error is not None


def test_misuse_goes_through_ignore_errors(powercap) -> None:
    tracker = CarbonTracker(epochs=2, meter=_meter(powercap), intensity_gco2eq_per_kwh=1.0, verbose=0)
    with pytest.raises(CarbonTrackerError, match="before any epoch_start"):
        tracker.epoch_end()
    tracker = CarbonTracker(epochs=2, meter=_meter(powercap), intensity_gco2eq_per_kwh=1.0, verbose=0)
    tracker.epoch_start()
    with pytest.raises(CarbonTrackerError, match="still running"):
        tracker.epoch_start()
    lenient = CarbonTracker(
        epochs=2, meter=_meter(powercap), intensity_gco2eq_per_kwh=1.0, verbose=0, ignore_errors=True
    )
    lenient.epoch_end()
    assert lenient.monitoring is False and "before any epoch_start" in lenient.result.error


def test_no_measurable_component(powercap) -> None:
    with pytest.raises(NoComponentsError, match="gpu"):
        CarbonTracker(epochs=2, components="gpu", meter=_meter(powercap), verbose=0)
    tracker = CarbonTracker(epochs=2, components="gpu", meter=_meter(powercap), ignore_errors=True, verbose=0)
    assert tracker.monitoring is False
    tracker.epoch_start()
    tracker.epoch_end()
    assert tracker.stop().actual is None


# -------------------------------------------------------------- stop_and_confirm


class _Terminal(io.StringIO):
    """Answers typed at a terminal."""

    def isatty(self) -> bool:
        return True


def test_stop_and_confirm_without_a_terminal_goes_on_and_says_so(powercap, monkeypatch, capsys, tmp_path) -> None:
    stdin = io.StringIO("n\n")  # not a terminal: must not be read
    monkeypatch.setattr(sys, "stdin", stdin)
    tracker = CarbonTracker(
        epochs=3, stop_and_confirm=True, meter=_meter(powercap), intensity_gco2eq_per_kwh=1.0,
        log_dir=tmp_path / "logs",
    )
    _train(tracker, powercap, 3)
    assert tracker.actual.epochs == 3
    assert stdin.read() == "n\n"
    out = capsys.readouterr().out
    assert "standard input is not a terminal" in out and "continuing training without asking" in out
    assert "standard input is not a terminal" in tracker.result.output_log.read_text()


def test_stop_and_confirm_yes_continues_no_cancels(powercap, capsys) -> None:
    tracker = CarbonTracker(
        epochs=3, stop_and_confirm=True, meter=_meter(powercap), intensity_gco2eq_per_kwh=1.0,
        stdin=_Terminal("maybe\ny\n"),
    )
    _train(tracker, powercap, 3)
    out = capsys.readouterr().out
    assert "Continue training (y/n)?" in out and "Input not recognized" in out and "Continuing..." in out
    assert tracker.actual.epochs == 3

    tracker = CarbonTracker(
        epochs=3, stop_and_confirm=True, meter=_meter(powercap), intensity_gco2eq_per_kwh=1.0, stdin=_Terminal("n\n")
    )
    tracker.epoch_start()
    _spend(powercap)
    with pytest.raises(TrainingCancelledError, match="user's request after 1 epoch"):
        tracker.epoch_end()
    assert tracker.actual.epochs == 1 and tracker.result.early_stop is True
    assert tracker.actual.energy_joules == pytest.approx(EPOCH_J, abs=1e-9)
    assert "Quitting..." in capsys.readouterr().out


def test_stop_and_confirm_on_a_real_terminal(tmp_path) -> None:
    import pty

    code = textwrap.dedent(
        """
        import sys
        from otel_joules.carbontracker.tracker import CarbonTracker, TrainingCancelledError
        tracker = CarbonTracker(epochs=3, stop_and_confirm=True, intensity_gco2eq_per_kwh=1.0, components="cpu")
        try:
            for _ in range(3):
                tracker.epoch_start()
                tracker.epoch_end()
        except TrainingCancelledError:
            print("CANCELLED", tracker.actual.epochs)
        """
    )
    master, slave = pty.openpty()
    try:
        os.write(master, b"n\n")
        proc = subprocess.run(
            [sys.executable, "-c", code], stdin=slave, capture_output=True, text=True, timeout=60, cwd=tmp_path
        )
    finally:
        os.close(slave)
        os.close(master)
    assert proc.returncode == 0, proc.stderr
    assert "Continue training (y/n)?" in proc.stdout
    assert "CANCELLED 1" in proc.stdout


# -------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"epochs": -1}, "epochs=-1 must be an integer >= 0"),
        ({"epochs": "10"}, "epochs='10' must be an integer"),
        ({"epochs": 5, "monitor_epochs": 0}, "monitor_epochs cannot be zero"),
        ({"epochs": 5, "monitor_epochs": 2, "epochs_before_pred": 3}, "cannot be less than epochs_before_pred=3"),
        ({"epochs": 5, "epochs_before_pred": -1, "monitor_epochs": 4}, "cannot be less than epochs_before_pred=-1"),
        ({"epochs": 5, "epochs_before_pred": -2}, "epochs_before_pred=-2"),
        ({"epochs": 5, "components": "tpu"}, "unknown component 'tpu'"),
        ({"epochs": 5, "components": "gpu,disk"}, "unknown component 'disk'"),
        ({"epochs": 5, "components": ""}, "names nothing"),
        ({"epochs": 5, "update_interval": 0}, "update_interval=0 must be greater than 0"),
        ({"epochs": 5, "decimal_precision": -1}, "decimal_precision=-1"),
        ({"epochs": 5, "verbose": -1}, "verbose=-1"),
        ({"epochs": 5, "sim_cpu": "Xeon"}, "you must also specify the CPU TDP"),
        ({"epochs": 5, "sim_gpu": "A100"}, "you must also specify the GPU power consumption"),
        ({"epochs": 5, "sim_cpu": "Xeon", "sim_cpu_tdp": 100, "sim_cpu_util": 1.5}, "sim_cpu_util=1.5"),
        ({"epochs": 5, "pue": 0.58}, "did you mean 1.58"),
        ({"epochs": 5, "api_keys": {"wattime": "k"}}, "unknown provider 'wattime'"),
        ({"epochs": 5, "intensity_gco2eq_per_kwh": -3}, "must be a finite number"),
        ({"epochs": 5, "country": "XX"}, "XX"),
        ({"epochs": 5, "log_file_prefix": "a/b"}, "path separator"),
    ],
)
def test_invalid_arguments_are_clear_errors(options, message, powercap) -> None:
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(").replace("[", r"\[")):
        CarbonTracker(**{"meter": _meter(powercap), "ignore_errors": True, "verbose": 0, **options})


# ------------------------------------------------------------- carbon intensity


def test_offline_country_and_world_average_are_said(powercap, capsys) -> None:
    tracker = CarbonTracker(epochs=1, meter=_meter(powercap), country="DK")
    _train(tracker, powercap, 1)
    assert tracker.intensity.source == "offline" and tracker.intensity.region == "DK"
    dk = tracker.intensity.gco2eq_per_kwh
    assert tracker.actual.co2eq_grams == pytest.approx(EPOCH_J / J_PER_KWH * PUE * dk)
    assert "Source: offline" in capsys.readouterr().out
    tracker = CarbonTracker(epochs=1, meter=_meter(powercap))
    _train(tracker, powercap, 1)
    assert tracker.actual.intensity_gco2eq_per_kwh == 445.0
    assert tracker.actual.intensity_source == "world_average"
    assert "Source: world_average" in capsys.readouterr().out


def test_live_provider_value_is_used(powercap) -> None:
    with electricity_maps_server() as (base_url, _):
        provider = ElectricityMapsProvider("key", "DE", base_url=base_url)
        tracker = CarbonTracker(epochs=1, meter=_meter(powercap), intensity_providers=[provider], verbose=0)
        _train(tracker, powercap, 1)
    assert tracker.actual.intensity_source == "electricitymaps"
    assert tracker.actual.co2eq_grams == pytest.approx(EPOCH_J / J_PER_KWH * PUE * 321.0)


def test_pue_is_a_parameter(powercap, capsys) -> None:
    tracker = CarbonTracker(epochs=1, meter=_meter(powercap), intensity_gco2eq_per_kwh=100.0, pue=1.0)
    _train(tracker, powercap, 1)
    assert tracker.actual.energy_kwh == pytest.approx(EPOCH_J / J_PER_KWH)
    assert "PUE coefficient of 1." in capsys.readouterr().out


# -------------------------------------------------------- estimates and simulation


def test_cpu_estimate_is_said_to_be_one(tmp_path, capsys) -> None:
    empty = tmp_path / "sys"
    empty.mkdir()
    meter = EnergyMeter(sysfs_root=str(empty), gpus=[], sample=False)
    tracker = CarbonTracker(epochs=1, meter=meter, intensity_gco2eq_per_kwh=1.0, log_dir=tmp_path / "logs")
    tracker.epoch_start()
    sum(i * i for i in range(20000))
    tracker.epoch_end()
    assert tracker.result.components == {"cpu": ("cpu (estimate)", "dram (estimate)")}
    assert tracker.epoch_results[0].source == "estimate"
    assert "ESTIMATE, not a measurement: cpu_estimate, memory_estimate" in capsys.readouterr().out
    assert "ESTIMATE" in tracker.result.std_log.read_text()


def test_simulated_cpu_is_a_constant_power_estimate(tracer_provider, span_exporter) -> None:
    tracker = CarbonTracker(
        epochs=2, components="cpu", sim_cpu="Xeon 8380", sim_cpu_tdp=100.0, sim_cpu_util=0.4,
        intensity_gco2eq_per_kwh=100.0, tracer_provider=tracer_provider, verbose=0,
    )
    for _ in range(2):
        tracker.epoch_start()
        time.sleep(0.01)
        tracker.epoch_end()
    for epoch in tracker.epoch_results:
        assert epoch.energy_joules == pytest.approx(40.0 * epoch.duration_s, rel=1e-12)
        assert epoch.power_watts_by_component["cpu"] == pytest.approx(40.0)
        assert epoch.source == "estimate"
    assert tracker.result.components == {"cpu": ("Xeon 8380 (simulated)",)}
    span = [s for s in span_exporter.get_finished_spans() if s.name == "epoch"][0]
    assert span.attributes["energy.sim_cpu.method"] == "estimate"


# ------------------------------------------------------------------------ spans


def test_spans_without_an_sdk_provider_still_exist(powercap, monkeypatch) -> None:
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: NoOpTracerProvider())
    tracker = CarbonTracker(epochs=1, meter=_meter(powercap), intensity_gco2eq_per_kwh=1.0, verbose=0)
    _train(tracker, powercap, 1)
    assert isinstance(tracker.tracer_provider, TracerProvider)
    assert [s.name for s in tracker.spans] == ["epoch", "training"]
    assert tracker.spans[0].attributes["energy.joules"] == pytest.approx(EPOCH_J, abs=1e-9)


def test_global_sdk_provider_is_used(powercap, monkeypatch, tracer_provider, span_exporter) -> None:
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: tracer_provider)
    tracker = CarbonTracker(epochs=1, meter=_meter(powercap), intensity_gco2eq_per_kwh=1.0, verbose=0)
    _train(tracker, powercap, 1)
    assert sorted(s.name for s in span_exporter.get_finished_spans()) == ["epoch", "training"]


def test_user_spans_nest_in_epochs_and_instrument_does_not_overwrite(powercap, tracer_provider, span_exporter, tmp_path) -> None:
    other = make_powercap(tmp_path / "other", "amd")
    handle = otel_joules.instrument(
        tracer_provider, meter=EnergyMeter(sysfs_root=other.sysfs_root, gpus=[], sample=False), metrics_enabled=False
    )
    try:
        tracker = CarbonTracker(
            epochs=1, meter=_meter(powercap), intensity_gco2eq_per_kwh=1.0, tracer_provider=tracer_provider, verbose=0
        )
        tracker.epoch_start()
        with tracer_provider.get_tracer("user").start_as_current_span("batch"):
            other.zones["package_0"].advance_joules(5.0)
        _spend(powercap)
        tracker.epoch_end()
    finally:
        handle.uninstrument()
    spans = {s.name: s for s in span_exporter.get_finished_spans()}
    assert spans["batch"].parent.span_id == spans["epoch"].context.span_id
    assert spans["batch"].attributes["energy.joules"] == pytest.approx(5.0, abs=1e-9)  # the user's instrumentation
    assert spans["epoch"].attributes["energy.joules"] == pytest.approx(EPOCH_J, abs=1e-9)  # ours, not overwritten
    assert "energy.package_0.joules" in spans["epoch"].attributes
    assert trace.get_current_span() is not spans["epoch"]  # the epoch's context was detached


# ------------------------------------------------------------- import prefix, example


def test_import_prefix_change_only() -> None:
    code = "from otel_joules.carbontracker.tracker import CarbonTracker\nfrom otel_joules.carbontracker import parser\n"
    code += "print(parser.parse_all_logs.__module__, CarbonTracker.__name__)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["otel_joules.carbontracker.parser", "CarbonTracker"]


def test_example_training_script_runs(tmp_path) -> None:
    script = REPO / "examples" / "train_carbontracker.py"
    env = dict(os.environ)
    env.pop("OTEL_JOULES_COUNTRY", None)
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(script), "--epochs", "3", "--log-dir", str(tmp_path / "logs")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - started < 60
    assert "Actual consumption for 3 epoch(s):" in proc.stdout
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["epochs"] == 3
    assert summary["energy_joules"] > 0 and math.isfinite(summary["co2eq_grams"])
    assert summary["final_loss"] < summary["first_loss"]  # it really trains
    (run,) = our_parser.parse_all_logs(tmp_path / "logs")
    assert run["actual"]["epochs"] == 3


def test_summary_shows_this_processs_share_beside_the_hosts_consumption(tmp_path, powercap, capsys) -> None:
    """On a written /proc where only this process is busy, its share is the whole consumption; labelled apart."""
    from tests.fakes.procfs import FakeProcfs

    proc = FakeProcfs(tmp_path / "proc")
    proc.add_process(os.getpid(), 0.0)
    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, procfs_root=proc.procfs_root, gpus=[], sample=False)
    tracker = CarbonTracker(epochs=2, meter=meter, intensity_gco2eq_per_kwh=100.0, epochs_before_pred=0)
    time.sleep(0.35)  # a few sampler periods: prices come from a window, not from one instant
    for _ in range(2):
        tracker.epoch_start()
        _spend(powercap)
        proc.add_process(os.getpid(), 1.0)
        tracker.epoch_end()
    result = tracker.stop()
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if "Of which this process's share" in line]
    share_kwh = float(line.split("share: ")[1].split(" kWh")[0])
    assert result.actual is not None
    assert share_kwh == pytest.approx(result.actual.energy_kwh, rel=0.05)
    assert "what the host's devices used, measured or estimated as said above" in line
    meter.close()


def test_prediction_is_the_mean_of_the_first_epochs_times_all_epochs(powercap) -> None:
    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False)
    tracker = CarbonTracker(epochs=4, epochs_before_pred=2, meter=meter, intensity_gco2eq_per_kwh=100.0, verbose=0)
    for joules in (10.0, 30.0, 50.0, 70.0):  # package joules per epoch; nothing else moves
        tracker.epoch_start()
        powercap.zones["package_0"].advance_joules(joules)
        tracker.epoch_end()
    result = tracker.stop()
    assert [e.energy_joules for e in result.epochs] == pytest.approx([10.0, 30.0, 50.0, 70.0], abs=1e-9)
    assert result.predicted is not None and result.predicted.epochs == 4
    assert result.predicted.energy_joules == pytest.approx((10.0 + 30.0) / 2 * 4, abs=1e-9)
    first_two_s = result.epochs[0].duration_s + result.epochs[1].duration_s
    assert result.predicted.duration_s == pytest.approx(first_two_s / 2 * 4)
    assert result.actual is not None and result.actual.energy_joules == pytest.approx(160.0, abs=1e-9)
