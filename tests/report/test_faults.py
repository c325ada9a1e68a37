"""Fault matrix, report side (issue 13): ``otel-joules report`` on hostile and damaged inputs.

Each hostile input sits in its own file next to good ones, so each cell can check: the
report ran and returned (exit 0, within a timeout: a FIFO or a link to /dev/zero used to
block it forever or exhaust memory), exactly one clear message for that fault, every good
record still reported, and the total exactly the sum of the good records (no bad value,
non-finite, negative or absurd, ever enters a total). The command is run as users run it,
in a child process, so a regression that hangs fails the test instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_joules.carbontracker.logs import CarbonTrackerLogWriter
from otel_joules.exporters.csv_exporter import CsvSpanExporter
from otel_joules.exporters.jsonl_exporter import JsonLinesSpanExporter
from otel_joules.report import build_report, read_inputs

T0 = 1_700_000_000_000_000_000


@pytest.fixture(autouse=True)
def _no_country(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_JOULES_COUNTRY", raising=False)


def _record(index: int, joules: object, **fields: object) -> str:
    """One line of our JSON-lines format: a root span of its own trace."""
    record: dict[str, object] = {
        "name": f"r{index}",
        "trace_id": f"{index + 1:032x}",
        "span_id": f"{index + 1:016x}",
        "parent_span_id": None,
        "start_time_unix_nano": T0 + index,
        "end_time_unix_nano": T0 + index + 1_000_000_000,
        "attributes": {"energy.joules": joules},
    }
    record.update(fields)
    return json.dumps(record)


def _write_exported(path: Path, exporter_type: type, first: int, count: int) -> float:
    """``count`` root spans of 1.5 J written by our real exporter; returns their joules."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter_type(path)))
    tracer = provider.get_tracer("faults")
    for index in range(first, first + count):
        span = tracer.start_span(f"good{index}", context=trace.set_span_in_context(trace.INVALID_SPAN),
                                 start_time=T0 + index, attributes={"energy.joules": 1.5})
        span.end(end_time=T0 + index + 10)
    provider.shutdown()
    return 1.5 * count


def _report(*paths: Path, json_output: bool = True, timeout: float = 60) -> tuple[dict | str, list[str]]:
    args = [sys.executable, "-m", "otel_joules.cli.main", "report", *map(str, paths)]
    if json_output:
        args.append("--json")
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr
    skipped = [line for line in done.stderr.splitlines() if line.startswith("skipped ")]
    return (json.loads(done.stdout) if json_output else done.stdout), skipped


def _messages_about(skipped: list[str], path: Path) -> list[str]:
    return [line for line in skipped if line.startswith((f"skipped {path}:", f"skipped {path} "))]


def test_hostile_folder_every_fault_one_message_good_records_exact(tmp_path: Path) -> None:
    folder = tmp_path / "exports"
    folder.mkdir()
    good = _write_exported(folder / "good.jsonl", JsonLinesSpanExporter, 0, 3)
    good += _write_exported(folder / "good.csv", CsvSpanExporter, 10, 3)
    hostile: dict[str, str] = {}

    def bad(name: str, lines: list[str], expected: str, good_index: int) -> None:
        nonlocal good
        # Each hostile file also holds a good record after the bad one: it must be kept.
        (folder / name).write_text("\n".join([*lines, _record(good_index, 2.0)]) + "\n")
        good += 2.0
        hostile[name] = expected

    os.mkfifo(folder / "fifo.jsonl")
    hostile["fifo.jsonl"] = "FIFO"
    os.symlink("/dev/zero", folder / "zero.jsonl")
    hostile["zero.jsonl"] = "character device"
    os.symlink("loop-b.jsonl", folder / "loop-a.jsonl")
    os.symlink("loop-a.jsonl", folder / "loop-b.jsonl")
    hostile["loop-a.jsonl"] = hostile["loop-b.jsonl"] = "symbolic link loop"
    bad("deep.jsonl", ["[" * 100_000 + "]" * 100_000], "nested too deeply", 100)
    bad("deep-attributes.jsonl", [_record(101, 1.0).replace('"attributes": {', '"attributes": {"x": ' + "[" * 100_000 + "]" * 100_000 + ", ")],
        "nested too deeply", 102)
    bad("huge-joules.jsonl", [_record(103, 1.0).replace('"energy.joules": 1.0', '"energy.joules": 1e400')], "not a finite number", 104)
    bad("future.jsonl", [_record(105, 1.0, start_time_unix_nano=1e30)], "outside the 64-bit nanosecond range", 106)
    bad("overflow.jsonl", [_record(107, 1e308)], "beyond any plausible measurement", 108)
    bad("negative.jsonl", [_record(109, -991.0)], "is negative", 110)
    bad("ends-first.jsonl", [_record(111, 1.0, end_time_unix_nano=T0)], "is before", 112)
    # A NUL region (power lost while appending) between two good lines.
    nul = folder / "nul.jsonl"
    nul.write_bytes(
        (_record(113, 2.0) + "\n").encode() + b'{"name":"half' + b"\x00" * 4096 + (_record(114, 2.0) + "\n").encode()
    )
    good += 4.0
    hostile["nul.jsonl"] = "NUL bytes"
    (folder / "garbage.bin").write_bytes(bytes(range(256)) * 64)
    hostile["garbage.bin"] = "binary"
    bad("ten-mb-line.jsonl", ["{" + "x" * 10_000_000], "not valid JSON", 115)
    # A CSV cell over the csv module's 128 KiB field limit: that row only is lost.
    csv_path = folder / "big-cell.csv"
    _write_exported(csv_path, CsvSpanExporter, 20, 1)
    lines = csv_path.read_text().splitlines()
    row = lines[1].split(",")
    row[0] = "y" * 200_000
    lines.insert(1, ",".join(row))
    csv_path.write_text("\n".join(lines) + "\n")
    good += 1.5
    hostile["big-cell.csv"] = "field larger than field limit"

    report, skipped = _report(folder)

    for name, expected in hostile.items():
        messages = _messages_about(skipped, folder / name)
        assert len(messages) == 1, (name, messages)
        assert expected in messages[0], (name, messages)
    assert report["totals"]["energy_joules"] == pytest.approx(good, rel=1e-12)
    assert len(skipped) == len(hostile)  # nothing else complained about


def test_two_huge_values_whose_sum_overflows_enter_no_total(tmp_path: Path) -> None:
    # The reproduction as filed: two 1e308 values summed to inf and raised ValueError, losing
    # the whole report. Each is skipped with its reason; the good record is the total.
    path = tmp_path / "two.jsonl"
    path.write_text("\n".join([_record(0, 1e308), _record(1, 1e308), _record(2, 2.5)]) + "\n")
    report, skipped = _report(path)
    assert report["totals"]["energy_joules"] == 2.5
    assert [line.split(": ", 1)[0] for line in skipped] == [f"skipped {path}:1", f"skipped {path}:2"]
    assert all("beyond any plausible measurement" in line for line in skipped)


def test_the_text_report_itself_says_how_many_inputs_were_skipped_and_where_why(tmp_path: Path) -> None:
    path = tmp_path / "two.jsonl"
    path.write_text("\n".join([_record(0, 1e308), _record(1, 1e308), _record(2, 2.5)]) + "\n")
    text, skipped = _report(path, json_output=False)
    assert len(skipped) == 2
    (line,) = [line for line in text.splitlines() if "skipped" in line]
    assert line.startswith("2 input(s) skipped, not in the figures below") and "on stderr" in line


def test_half_written_carbontracker_logs_keep_complete_epochs(tmp_path: Path) -> None:
    writer = CarbonTrackerLogWriter(tmp_path, clock=lambda: 1_700_000_000.0, run_id=7)
    writer.write_header({"cpu": ["cpu:0"]})
    writer.write_epoch(1, duration_seconds=2.0, power_watts={"cpu": 150.0})
    writer.write_epoch(2, duration_seconds=3.0, power_watts={"cpu": 100.0})
    (std,) = tmp_path.glob("*_carbontracker.log")
    std.write_bytes(std.read_bytes()[:-10])  # killed while writing epoch 2's power line
    report, skipped = _report(tmp_path)
    (run,) = report["runs"]
    assert run["energy_joules"] == 300.0  # epoch 1 only: 2 s x 150 W
    (message,) = skipped
    assert "epoch 2 skipped" in message and "half-written" in message


def test_unreadable_file_as_an_unprivileged_user(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to an unprivileged user")
    world = Path(tempfile.mkdtemp(prefix="otel-joules-report-faults-"))
    try:
        os.chmod(world, 0o755)
        good = _write_exported(world / "good.jsonl", JsonLinesSpanExporter, 0, 2)
        secret = world / "secret.jsonl"
        secret.write_text(_record(50, 99.0) + "\n")
        os.chmod(secret, 0o600)
        os.chmod(world / "good.jsonl", 0o644)
        private = world / "private"
        private.mkdir(mode=0o700)
        (private / "more.jsonl").write_text(_record(51, 99.0) + "\n")
        script = (
            "import os, sys\n"
            "from otel_joules.cli.main import build_parser\n"
            "args = build_parser().parse_args(['report', '--json', sys.argv[1]])\n"
            "os.setgid(65534); os.setuid(65534)  # imports first: the interpreter lives under /root\n"
            "sys.exit(args.handler(args))\n"
        )
        done = subprocess.run([sys.executable, "-c", script, str(world)], capture_output=True, text=True, timeout=60)
    finally:
        shutil.rmtree(world)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["totals"]["energy_joules"] == good
    messages = sorted(line for line in done.stderr.splitlines() if line.startswith("skipped"))
    assert len(messages) == 2, messages
    assert messages[0].startswith(f"skipped {world}/private: folder cannot be read: Permission denied")
    assert messages[1].startswith(f"skipped {world}/secret.jsonl: cannot be read: Permission denied")


def test_line_over_the_bound_is_skipped_and_the_rest_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from otel_joules.report import filestream

    monkeypatch.setattr(filestream, "MAX_LINE_BYTES", 1 << 20)
    path = tmp_path / "spans.jsonl"
    path.write_text(_record(0, 1.0) + "\n" + "{" + "z" * 3_000_000 + "\n" + _record(1, 2.0) + "\n")
    report = build_report([path])
    assert report.total_joules == 3.0
    (skipped,) = report.skipped
    assert skipped.path == f"{path}:2" and "over the 1048576-byte limit" in skipped.reason


def _peak_bytes_reading(path: Path) -> int:
    tracemalloc.start()
    try:
        inputs = read_inputs([path])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not inputs.skipped
    return peak


def test_memory_does_not_grow_with_file_size(tmp_path: Path) -> None:
    """Same spans, 10x the bytes (what OTLP files' other attributes or long lines add): same memory."""
    spans = 2_000
    small, large = tmp_path / "small.jsonl", tmp_path / "large.jsonl"
    small.write_text("".join(_record(i, 1.0) + "\n" for i in range(spans)))
    padding = "p" * 5_000
    large.write_text("".join(_record(i, 1.0, padding=padding) + "\n" for i in range(spans)))
    assert large.stat().st_size > 10 * small.stat().st_size
    small_peak, large_peak = _peak_bytes_reading(small), _peak_bytes_reading(large)
    # Reading the whole file at once (as before) needed more than the file's size again.
    assert large_peak < small_peak + 1_000_000, (small_peak, large_peak, large.stat().st_size)


def test_moderately_large_file_totals_exact(tmp_path: Path) -> None:
    """A 20 MB export (the 200 MB case is benchmarks/report_large_file.py): streamed, exact."""
    from benchmarks.report_large_file import write_spans

    path = tmp_path / "spans.jsonl"
    made = write_spans(path, 20, children=4, padding=0)
    report = build_report([path])
    assert report.total_joules == made["expected_joules"]
    assert len(report.runs) == made["traces"] and not report.skipped


def _csv_with(path: Path, rows: list[tuple[str, object]]) -> list[str]:
    """A CSV export written by our real exporter, one root span per ``(name, joules)``; its lines."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(CsvSpanExporter(path)))
    tracer = provider.get_tracer("faults")
    for index, (name, joules) in enumerate(rows):
        span = tracer.start_span(name, context=trace.set_span_in_context(trace.INVALID_SPAN), start_time=T0 + index,
                                 attributes={"energy.joules": joules})
        span.end(end_time=T0 + index + 10)
    provider.shutdown()
    return path.read_text().splitlines(keepends=True)


def test_runs_whose_co2eq_sum_overflows_keep_the_report(tmp_path: Path) -> None:
    # Two finite values (1e308 g each: 1 kWh at 1e308 g/kWh) summed to inf, and the report
    # exited with an error, losing every run. The run that would overflow is left out with its
    # reason; the others are reported and the totals stay numbers.
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join([_record(0, 3.6e6), _record(1, 3.6e6), _record(2, 2.5)]) + "\n")
    args = [sys.executable, "-m", "otel_joules.cli.main", "report", str(path), "--json", "--intensity", "1e308"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [run["name"] for run in report["runs"]] == ["r0", "r2"]
    assert report["totals"]["energy_joules"] == 3.6e6 + 2.5
    (message,) = [line for line in done.stderr.splitlines() if line.startswith("skipped ")]
    assert message.startswith(f"skipped {path}: trace {2:032x} left out: ")
    assert "would make the report's total overflow to infinity" in message


def test_logged_co2eq_beyond_plausible_is_ignored_and_every_run_kept(tmp_path: Path) -> None:
    # Two carbontracker logs each stating a finite 1e308 g: their sum was inf and the report
    # exited with an error. Each logged figure is ignored with its reason, the run kept.
    for run_id, grams in ((1, 1e308), (2, 1e308), (3, 5.0)):
        writer = CarbonTrackerLogWriter(tmp_path, clock=lambda: 1_700_000_000.0, run_id=run_id)
        writer.write_header({"cpu": ["cpu:0"]})
        writer.write_epoch(1, duration_seconds=2.0, power_watts={"cpu": 150.0})
        writer.write_consumption("actual", epochs=1, duration_seconds=2.0, co2eq_grams=grams, energy_joules=300.0)
    report, skipped = _report(tmp_path)
    # Each run's energy is its logged kWh (the same for all three), its CO2eq recomputed from it.
    joules = [run["energy_joules"] for run in report["runs"]]
    assert len(joules) == 3 and joules[0] > 0 and joules == [joules[0]] * 3
    assert report["totals"]["co2eq_grams"] < 1e6
    assert len(skipped) == 2
    assert all("logged actual CO2eq 1e+308 g ignored" in line and "beyond any plausible" in line for line in skipped)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -4.0])
def test_bad_csv_row_costs_only_itself(tmp_path: Path, bad: float) -> None:
    path = tmp_path / "spans.csv"
    _csv_with(path, [("s0", 1.0), ("s1", 2.0), ("bad", bad), ("s3", 8.0), ("s4", 16.0)])
    report, skipped = _report(path)
    assert sorted(run["name"] for run in report["runs"]) == ["s0", "s1", "s3", "s4"]
    assert report["totals"]["energy_joules"] == 27.0
    (message,) = skipped
    assert message.startswith(f"skipped {path}:4: energy.joules = ")


def test_ten_megabyte_cell_over_many_lines_costs_its_row_and_one_message(tmp_path: Path) -> None:
    # A 10 MB span name with line breaks, as our exporter writes it (quoted): the csv module
    # gave up at its field limit mid-cell and every later line of the cell was read as a row,
    # each a message (and a line of the name that looked like a row would have been counted).
    path = tmp_path / "spans.csv"
    _csv_with(path, [("s0", 1.0), ("s1", 2.0), (("y" * 999 + "\n") * 10_000, 4.0), ("s3", 8.0), ("s4", 16.0)])
    report, skipped = _report(path)
    assert sorted(run["name"] for run in report["runs"]) == ["s0", "s1", "s3", "s4"]
    assert report["totals"]["energy_joules"] == 27.0
    assert skipped == [f"skipped {path}:4: CSV error: field larger than field limit (131072); row skipped"]


@pytest.mark.parametrize("cut", [-40, 1, 2, 5, 16, 20])
def test_torn_csv_row_costs_only_itself(tmp_path: Path, cut: int) -> None:
    # A row cut off (a writer stopped mid-row), mostly inside its quoted attributes cell: the
    # csv module read the next row as the rest of that cell, and that good record was lost.
    path = tmp_path / "spans.csv"
    lines = _csv_with(path, [("s0", 1.0), ("s1", 2.0), ("torn", 4.0), ("s3", 8.0), ("s4", 16.0)])
    torn = lines[3][: lines[3].index('"{') + cut]
    assert len(torn) < len(lines[3]) - 2
    path.write_text("".join(lines[:3]) + torn + "\n" + "".join(lines[4:]))
    report, skipped = _report(path)
    assert sorted(run["name"] for run in report["runs"]) == ["s0", "s1", "s3", "s4"]
    assert report["totals"]["energy_joules"] == 27.0
    (message,) = skipped
    assert message.startswith(f"skipped {path}:4: ")


def test_csv_span_names_with_line_breaks_are_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "spans.csv"
    _csv_with(path, [("a\nb", 1.0), ('two\n"lines", quoted', 2.0), ("s2", 4.0)])
    report, skipped = _report(path)
    assert sorted(run["name"] for run in report["runs"]) == ["a\nb", "s2", 'two\n"lines", quoted']
    assert report["totals"]["energy_joules"] == 7.0 and not skipped
