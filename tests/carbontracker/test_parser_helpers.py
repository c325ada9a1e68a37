"""carbontracker.parser's five helper functions and parse_logs on empty logs, against carbontracker 2.4.7's own.

Same names, arguments and return shapes as carbontracker 2.4.7; where its result is
right ours equals it, where it is wrong the test shows both values.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
from carbontracker import parser as ct_parser

from otel_joules.carbontracker import parser
from otel_joules.carbontracker.logs import CarbonTrackerLogWriter, LogFilesNotFoundError
from otel_joules.carbontracker.parser import SkippedLogWarning

from tests.helpers.carbontracker_oracle import carbontracker_logger, log_components, log_epoch, output_energy

NEW_YEAR_UTC = 1767225600.0


def _carbontracker_run(log_dir: Path, logger_id: str, epochs: list[tuple[float, dict]], components: dict) -> tuple[Path, Path]:
    """The one run in ``log_dir``, logged by carbontracker 2.4.7's own logging code; returns (std_log, output_log)."""
    with carbontracker_logger(log_dir, logger_id=logger_id) as logger:
        log_components(logger, components)
        for number, (seconds, samples) in enumerate(epochs, start=1):
            log_epoch(logger, number, seconds, samples)
        output_energy(logger, "Actual consumption for 1 epoch(s):", time_seconds=1.0, energy_kwh=0.5, co2eq_grams=2.0,
                      conversions=None, decimal_precision=3)
    (std,) = [p for p in log_dir.iterdir() if p.name.endswith("_carbontracker.log")]  # the directory's only run
    return std, Path(str(std)[: -len("_carbontracker.log")] + "_carbontracker_output.log")


def _ours_writer(log_dir: Path, run_id: int) -> CarbonTrackerLogWriter:
    return CarbonTrackerLogWriter(log_dir, "", pid=1000, run_id=run_id, clock=lambda: NEW_YEAR_UTC)


# ----------------------------------------------------------- text helpers on one log


STD_TEXT = (
    "2026-01-01 00:00:00 - carbontracker version 2.4.7\n"
    "2026-01-01 00:00:00 - The following components were found: GPU with device(s) NVIDIA A100.1, Tesla T4. "
    "CPU with device(s) cpu:0, dram:0.\n"
    "2026-01-01 00:00:01 - Epoch 1:\n"
    "2026-01-01 00:00:01 - Duration: 0:00:01.25\n"
    "2026-01-01 00:00:01 - Average power usage (W) for gpu: 250.5\n"
    "2026-01-01 00:00:01 - Average power usage (W) for cpu: 1.2e-05\n"
    "2026-01-01 00:00:02 - Epoch 2:\n"
    "2026-01-01 00:00:02 - Duration: 1:02:03.50\n"
    "2026-01-01 00:00:02 - Average power usage (W) for gpu: None\n"
    "2026-01-01 00:00:02 - Average power usage (W) for cpu: 75.0\n"
)


def test_get_devices_keeps_dots_and_drops_spaces() -> None:
    ours = parser.get_devices(STD_TEXT)
    assert ours == {"gpu": ["NVIDIA A100.1", "Tesla T4"], "cpu": ["cpu:0", "dram:0"]}
    # carbontracker cuts "NVIDIA A100.1" at its dot, and keeps the space after each comma.
    # so the rest of the line becomes a component named "tesla t4. cpu".
    assert ct_parser.get_devices(STD_TEXT) == {"gpu": ["NVIDIA A100"], "tesla t4. cpu": ["cpu:0", " dram:0"]}
    assert parser.get_devices("no components here\n") == ct_parser.get_devices("no components here\n") == {}


def test_get_epoch_durations_equals_carbontrackers() -> None:
    assert parser.get_epoch_durations(STD_TEXT) == ct_parser.get_epoch_durations(STD_TEXT) == [1.25, 3723.5]
    # More decimals than carbontracker writes: it keeps two of them.
    text = "2026-01-01 00:00:01 - Epoch 1:\n2026-01-01 00:00:01 - Duration: 0:00:01.123456\n"
    assert parser.get_epoch_durations(text) == [1.123456]
    assert ct_parser.get_epoch_durations(text) == [1.12]


def test_get_avg_power_usages_reads_exponents_and_none() -> None:
    ours = parser.get_avg_power_usages(STD_TEXT)
    theirs = ct_parser.get_avg_power_usages(STD_TEXT)
    assert list(ours) == ["gpu", "cpu"] and set(theirs) == {"gpu", "cpu"}
    assert ours["cpu"] == [[1.2e-05], [75.0]]
    assert theirs["cpu"] == [[1.2], [75.0]]  # carbontracker reads 1.2e-05 W as 1.2 W
    assert ours["gpu"][0] == [250.5] and math.isnan(ours["gpu"][1][0])
    assert theirs["gpu"] == [[250.5], [0.0]]  # carbontracker: nothing measured is 0 W


def test_helpers_agree_with_carbontracker_on_its_own_logs(tmp_path: Path) -> None:
    std, _ = _carbontracker_run(
        tmp_path, "7", [(2.0, {"gpu": [100.0, 300.0], "cpu": [40.0, 60.0]}), (3.0, {"gpu": [200.0], "cpu": [50.0]})],
        {"gpu": ["Tesla T4"], "cpu": ["cpu:0"]},
    )
    text = std.read_text()
    assert parser.get_epoch_durations(text) == ct_parser.get_epoch_durations(text) == [2.0, 3.0]
    ours, theirs = parser.get_avg_power_usages(text), ct_parser.get_avg_power_usages(text)
    assert ours == {key: theirs[key] for key in ours} == {"gpu": [[200.0], [200.0]], "cpu": [[50.0], [50.0]]}
    assert parser.get_devices(text) == ct_parser.get_devices(text) == {"gpu": ["Tesla T4"], "cpu": ["cpu:0"]}


def test_get_devices_reads_the_output_logs_components_line_as_carbontracker(tmp_path: Path) -> None:
    # carbontracker writes the components line to the output log too, after "CarbonTracker: ".
    _, output = _carbontracker_run(tmp_path, "8", [(1.0, {"cpu": [40.0]})], {"gpu": ["Tesla T4"], "cpu": ["cpu:0"]})
    text = output.read_text()
    assert "CarbonTracker: The following components were found: GPU with device(s) Tesla T4." in text
    assert parser.get_devices(text) == ct_parser.get_devices(text) == {"gpu": ["Tesla T4"], "cpu": ["cpu:0"]}


def test_get_devices_reads_our_trackers_output_log(tmp_path: Path) -> None:
    out = _ours_writer(tmp_path, 1)
    out.write_header({"gpu": ["NVIDIA A100.1"], "cpu": ["cpu:0"]}, version="0.1.0")
    text = out.output_log_path.read_text()
    assert parser.get_devices(text) == {"gpu": ["NVIDIA A100.1"], "cpu": ["cpu:0"]}
    # carbontracker reads the same line, cutting the dotted name as in its standard log.
    assert ct_parser.get_devices(text) == {"gpu": ["NVIDIA A100"], "cpu": ["cpu:0"]}


# ------------------------------------------------------------------- file helpers


def test_get_all_logs_same_shape_and_pairs(tmp_path: Path) -> None:
    runs = []
    for run_id in (1, 2):
        out = _ours_writer(tmp_path, run_id)
        out.write_header({"cpu": ["cpu:0"]}, version="0.1.0")
        out.write_epoch(1, duration_seconds=1.0, power_watts={"cpu": 10.0 * run_id})
        out.write_consumption("actual", epochs=1, duration_seconds=1.0, energy_kwh=0.1, co2eq_grams=1.0)
        runs.append(out)
    ours = parser.get_all_logs(tmp_path)
    theirs = ct_parser.get_all_logs(str(tmp_path))
    assert ours == theirs == (
        [str(r.output_log_path) for r in runs],
        [str(r.std_log_path) for r in runs],
    )
    # Run 1 loses its output log, run 2 its standard log: carbontracker pairs run 1's standard
    # log with run 2's output log; ours has no complete run and says why for each file.
    runs[0].output_log_path.unlink()
    runs[1].std_log_path.unlink()
    assert ct_parser.get_all_logs(str(tmp_path)) == ([str(runs[1].output_log_path)], [str(runs[0].std_log_path)])
    with pytest.warns(SkippedLogWarning, match="counterpart"):
        assert parser.get_all_logs(tmp_path) == ([], [])


def test_get_most_recent_logs_returns_one_runs_files(tmp_path: Path) -> None:
    old, new = _ours_writer(tmp_path, 1), _ours_writer(tmp_path, 2)
    for writer_ in (old, new):
        writer_.write_header({"cpu": ["cpu:0"]}, version="0.1.0")
    os.utime(old.std_log_path, (NEW_YEAR_UTC, NEW_YEAR_UTC))
    os.utime(new.std_log_path, (NEW_YEAR_UTC + 60, NEW_YEAR_UTC + 60))
    os.utime(new.output_log_path, (NEW_YEAR_UTC, NEW_YEAR_UTC))
    os.utime(old.output_log_path, (NEW_YEAR_UTC + 60, NEW_YEAR_UTC + 60))
    assert parser.get_most_recent_logs(tmp_path) == (str(new.std_log_path), str(new.output_log_path))
    # carbontracker sorts the two kinds separately: the newest standard log with another run's output log.
    assert ct_parser.get_most_recent_logs(str(tmp_path)) == (str(new.std_log_path), str(old.output_log_path))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(LogFilesNotFoundError, match="no \\*_carbontracker.log file"):
        parser.get_most_recent_logs(empty)
    with pytest.raises(IndexError):  # carbontracker's error for the same directory
        ct_parser.get_most_recent_logs(str(empty))


def test_parse_logs_on_logs_still_empty_is_empty(tmp_path: Path) -> None:
    started = _ours_writer(tmp_path, 1)  # the run has created its files and written nothing yet
    assert started.std_log_path.stat().st_size == 0
    assert ct_parser.parse_logs(str(tmp_path)) == {}
    assert parser.parse_logs(tmp_path) == {}
    assert parser.parse_logs(tmp_path, str(started.std_log_path)) == {}
