"""otel_joules.carbontracker.report.generate_report_from_log: a PDF of one run, with carbontracker's sections.

The figures are checked against the tracker's own result (the run's one total) and,
for carbontracker's own logs, against carbontracker 2.4.7's parser; where carbontracker's
report computes differently (average power x total duration, no PUE) or cannot read its
own log, the test shows both.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from carbontracker import parser as ct_parser
from carbontracker.report import LogParser as CarbontrackerReportParser

from otel_joules import EnergyMeter
from otel_joules.carbontracker.logs import LogFilesNotFoundError, LogFormatError
from otel_joules.carbontracker.report import generate_report_from_log, read_run_report
from otel_joules.carbontracker.tracker import CarbonTracker

from tests.fakes.powercap import FakePowercap
from tests.helpers.carbontracker_oracle import carbontracker_logger, log_components, log_epoch, output_energy

J_PER_KWH = 3.6e6
PUE = 1.58


def _pages(pdf: Path) -> int:
    data = pdf.read_bytes()
    assert data.startswith(b"%PDF-")
    return len(re.findall(rb"/Type\s*/Page\b(?!s)", data))


def test_report_of_a_tracker_run_shows_the_runs_total(tmp_path: Path, powercap: FakePowercap) -> None:
    tracker = CarbonTracker(
        epochs=3, meter=EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False),
        intensity_gco2eq_per_kwh=210.9, log_dir=tmp_path / "logs", verbose=0,
    )
    for joules in (100.0, 200.0, 300.0):
        tracker.epoch_start()
        powercap.zones["package_0"].advance_joules(joules)
        time.sleep(0.01)
        tracker.epoch_end()
    result = tracker.result
    pdf = tmp_path / "report.pdf"
    generate_report_from_log(result.std_log, pdf)
    assert _pages(pdf) == 1
    report = read_run_report(result.std_log)
    assert report.from_consumption_block and report.output_log == str(result.output_log)
    # The totals are the tracker's (the output log holds them to 12 decimals).
    assert report.energy_kwh == pytest.approx(result.actual.energy_kwh, abs=1e-12)
    assert report.co2eq_grams == pytest.approx(result.actual.co2eq_grams, abs=1e-12)
    assert result.actual.energy_kwh == pytest.approx(600.0 * PUE / J_PER_KWH, rel=1e-12)
    assert [e.epoch for e in report.epochs] == [1, 2, 3]
    assert report.pue == PUE and report.intensity_gco2eq_per_kwh == 210.9
    assert report.devices == {"cpu": ["cpu:0", "dram:0"]}
    assert report.software == "otel-joules" and report.energy_source == "measured"


def test_report_of_carbontrackers_own_log(tmp_path: Path) -> None:
    # Epochs of different lengths at different power: 1 s at 100 W and 3 s at 300 W = 1000 J.
    with carbontracker_logger(tmp_path) as logger:
        log_components(logger, {"gpu": ["NVIDIA A100"], "cpu": ["cpu:0"]})
        log_epoch(logger, 1, 1.0, {"gpu": [60.0], "cpu": [40.0]})
        log_epoch(logger, 2, 3.0, {"gpu": [200.0], "cpu": [100.0]})
        # The wording carbontracker's report reads (2.4.7's own wording it cannot: see the next test).
        logger.info("Average carbon intensity during training was 143.30 gCO2eq/kWh at detected location: Copenhagen, DK")
        kwh = 1000.0 * PUE / J_PER_KWH
        output_energy(logger, "Actual consumption for 2 epoch(s):", time_seconds=4.0, energy_kwh=kwh,
                      co2eq_grams=kwh * 143.3, conversions=[(kwh * 143.3 / 106.8, "km travelled by car")],
                      decimal_precision=12)
        logger.output("Finished monitoring.")  # as carbontracker ends a run
    (std,) = [p for p in tmp_path.iterdir() if p.name.endswith("_carbontracker.log")]
    report = read_run_report(std)
    theirs_actual = ct_parser.parse_all_logs(str(tmp_path))[0]["actual"]
    assert report.energy_kwh == theirs_actual["energy (kWh)"] == pytest.approx(kwh, abs=1e-12)
    assert report.co2eq_grams == theirs_actual["co2eq (g)"]
    assert report.it_joules == pytest.approx(1000.0)
    assert report.component_watts("gpu") == pytest.approx((60.0 * 1 + 200.0 * 3) / 4)
    assert report.location == "Copenhagen, DK" and report.energy_source == "measured or simulated: the log does not say"
    generate_report_from_log(std, tmp_path / "ours.pdf")
    assert _pages(tmp_path / "ours.pdf") == 1
    # carbontracker 2.4.7's report: average power x total duration, without PUE -> 800 J, not 1000 J x 1.58.
    theirs = CarbontrackerReportParser(std.read_text())
    metrics = theirs.calculate_energy_metrics()
    assert metrics["energy_kwh"] == pytest.approx(800.0 / J_PER_KWH)
    assert report.energy_kwh == pytest.approx(1000.0 * PUE / J_PER_KWH)


def test_carbontrackers_report_cannot_read_its_own_intensity_line(tmp_path: Path) -> None:
    # The lines carbontracker 2.4.7 writes ("... at detected location: Unknown: [445.0]", "... was 445.00 gCO2eq/kWh. ")
    # match neither of its report's patterns; ours reads them.
    with carbontracker_logger(tmp_path) as logger:
        log_components(logger, {"cpu": ["cpu:0"]})
        log_epoch(logger, 1, 2.0, {"cpu": [50.0]})
        logger.info("Carbon intensities (gCO2eq/kWh) fetched every 900 s at detected location: Unknown: [445.0]")
        logger.info("Average carbon intensity during training was 445.00 gCO2eq/kWh. ")
    (std,) = [p for p in tmp_path.iterdir() if p.name.endswith("_carbontracker.log")]
    with pytest.raises(ValueError, match="No carbon intensity data found"):
        CarbontrackerReportParser(std.read_text()).calculate_energy_metrics()
    report = read_run_report(std)  # no output block written: computed from the epochs
    assert not report.from_consumption_block
    assert report.pue == PUE  # carbontracker's logger writes its PUE line itself
    assert report.energy_kwh == pytest.approx(100.0 * PUE / J_PER_KWH)
    assert report.co2eq_grams == pytest.approx(100.0 * PUE / J_PER_KWH * 445.0)
    assert report.location == "Unknown"


def test_unfinished_or_missing_logs_say_why(tmp_path: Path) -> None:
    with pytest.raises(LogFilesNotFoundError, match="does not exist"):
        generate_report_from_log(tmp_path / "nope_carbontracker.log", tmp_path / "r.pdf")
    started = tmp_path / "1.1_2026-01-01T000000Z_carbontracker.log"
    started.write_text("2026-01-01 00:00:00 - The following components were found: CPU with device(s) cpu:0.\n")
    with pytest.raises(LogFormatError, match="no complete epoch"):
        generate_report_from_log(started, tmp_path / "r.pdf")
    started.write_text(started.read_text() + "2026-01-01 00:00:01 - Epoch 1:\n2026-01-01 00:00:01 - Duration: 0:00:01.00\n")
    with pytest.raises(LogFormatError, match="names no carbon intensity"):
        generate_report_from_log(started, tmp_path / "r.pdf")
    assert not (tmp_path / "r.pdf").exists()


def _logged_run(folder: Path) -> Path:
    from otel_joules.carbontracker.logs import CarbonTrackerLogWriter

    writer = CarbonTrackerLogWriter(folder, clock=lambda: 1_700_000_000.0, run_id=7)
    writer.write_header({"cpu": ["cpu:0"]})
    writer.write_epoch(1, duration_seconds=2.0, power_watts={"cpu": 150.0})
    writer.write_consumption("actual", epochs=1, duration_seconds=2.0, co2eq_grams=0.5, energy_joules=300.0)
    return writer.std_log_path


def test_pdf_is_not_written_through_a_link(tmp_path: Path) -> None:
    # Issue 24, item 6: matplotlib opened the path itself and overwrote the link's target.
    from otel_joules.exporters.safe_open import SymlinkRefusedError

    std = _logged_run(tmp_path / "logs")
    target = tmp_path / "bashrc"
    target.write_bytes(b"# never touched\n")
    link = tmp_path / "report.pdf"
    link.symlink_to(target)
    with pytest.raises(SymlinkRefusedError, match="is a symbolic link"):
        generate_report_from_log(std, link)
    assert target.read_bytes() == b"# never touched\n"
    generate_report_from_log(std, tmp_path / "real.pdf")  # the same run, to a plain path
    assert _pages(tmp_path / "real.pdf") == 1
