"""The report's DuckDB engine (``report/sql.py``): totals of known sums from every span format, read by DuckDB itself.

Spans with known energy are written by the real exporters (JSON lines, CSV, OTLP/JSON, Parquet), nested, a trace
exported twice, two ranks of one job under one training span; the report's totals must be exactly the sums, and
every file must have been loaded by DuckDB's readers (not the Python line reader, which only reads damaged files).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_joules import config
from otel_joules.exporters.csv_exporter import CsvSpanExporter
from otel_joules.exporters.jsonl_exporter import JsonLinesSpanExporter
from otel_joules.exporters.otlp_file_exporter import OtlpFileSpanExporter
from otel_joules.exporters.records import CORE_FIELDS
from otel_joules.report import build_report
from otel_joules.report.readers import read_inputs
from otel_joules.report.sql import FORMAT_CSV, FORMAT_JSONL, FORMAT_OTLP, FORMAT_PARQUET, SpanStore

T0 = 1_700_000_000_000_000_000
# Binary fractions: every partial sum is exact, so the totals must be equal, not close.
ROOT_SHARE, CHILD_SHARE, HOST = 10.5, 2.25, 40.125


@pytest.fixture(autouse=True)
def _no_country(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_JOULES_COUNTRY", raising=False)


class _Ids(IdGenerator):
    """Trace ``n`` has trace id ``n + 1`` and span ids from ``(n + 1) << 8``: the same spans from two providers."""

    def __init__(self, first_trace: int) -> None:
        self._trace = first_trace
        self._span = 0

    def generate_trace_id(self) -> int:
        self._trace += 1
        self._span = self._trace << 8
        return self._trace

    def generate_span_id(self) -> int:
        self._span += 1
        return self._span


def _emit(exporter: object, first_trace: int, traces: int) -> None:
    """``traces`` traces: a root with an inclusive share and the host's energy, two nested children with theirs."""
    provider = TracerProvider(id_generator=_Ids(first_trace))
    provider.add_span_processor(SimpleSpanProcessor(exporter))  # type: ignore[arg-type]
    tracer = provider.get_tracer("engine")
    for number in range(first_trace, first_trace + traces):
        start = T0 + number * 10_000_000_000
        root = tracer.start_span(f"job{number}", context=trace.set_span_in_context(trace.INVALID_SPAN),
                                 start_time=start, attributes={
                                     "energy.joules": HOST, "energy.attributed.joules": ROOT_SHARE,
                                     "energy.source": "measured"})
        inside = trace.set_span_in_context(root)
        for child in range(2):
            span = tracer.start_span(f"step{child}", context=inside, start_time=start + 1 + child, attributes={
                "energy.joules": HOST / 4, "energy.attributed.joules": CHILD_SHARE, "energy.source": "measured"})
            span.end(end_time=start + 1_000_000 + child)
        root.end(end_time=start + 2_000_000)
    provider.shutdown()


def _archive(folder: Path) -> tuple[dict[str, Path], int]:
    """One file per format, and a copy of the JSON-lines traces in OTLP; the number of distinct traces."""
    folder.mkdir()
    files = {
        FORMAT_JSONL: folder / "spans.jsonl",
        FORMAT_CSV: folder / "spans.csv",
        FORMAT_OTLP: folder / "spans.otlp.jsonl",
        "copy": folder / "copy.otlp.jsonl",
    }
    _emit(JsonLinesSpanExporter(files[FORMAT_JSONL]), 0, 20)
    _emit(CsvSpanExporter(files[FORMAT_CSV]), 100, 15)
    _emit(OtlpFileSpanExporter(files[FORMAT_OTLP]), 200, 10)
    _emit(OtlpFileSpanExporter(files["copy"]), 0, 20)  # the same spans as the JSON lines: counted once
    traces = 45
    pytest.importorskip("pyarrow")
    from otel_joules.exporters.parquet_exporter import ParquetSpanExporter

    parquet_folder = folder / "parquet"
    parquet_folder.mkdir()
    exporter = ParquetSpanExporter(parquet_folder / "spans.parquet")
    _emit(exporter, 300, 5)
    (files[FORMAT_PARQUET],) = sorted(parquet_folder.glob("*.parquet"))
    return files, traces + 5


def test_every_format_is_read_by_duckdb_and_the_totals_are_the_known_sums(tmp_path: Path) -> None:
    files, traces = _archive(tmp_path / "archive")
    with SpanStore() as store:
        for fmt, spans in ((FORMAT_JSONL, 60), (FORMAT_OTLP, 30), (FORMAT_PARQUET, 15)):
            index = store.register(str(files[fmt]))
            assert store.load(fmt, [(index, str(files[fmt]))]) == {index: spans}
        header = files[FORMAT_CSV].read_text().splitlines()[0].split(",")
        index = store.register(str(files[FORMAT_CSV]))
        assert store.load(FORMAT_CSV, [(index, str(files[FORMAT_CSV]))], header, CORE_FIELDS) == {index: 45}
    report = build_report([tmp_path / "archive"])
    assert not report.skipped
    assert len(report.runs) == traces
    # Per trace the root's inclusive share (its children are inside it) and the root's host energy.
    assert report.total_joules == ROOT_SHARE * traces
    assert report.host_interval_joules == HOST * traces
    assert all(run.spans_counted == 1 and run.energy_source == "measured" for run in report.runs)
    copied = [run for run in report.runs if run.name == "job0"]
    assert len(copied) == 1 and sorted(Path(s).name for s in copied[0].sources) == ["copy.otlp.jsonl", "spans.jsonl"]


def test_ranks_nested_under_another_ranks_span_count_beside_it(tmp_path: Path) -> None:
    # Rank 1's epoch under rank 0's training span: a share is its own process's, so both count; the host's interval
    # energy, the same for every rank, counts once (rank 0's topmost span).
    path = tmp_path / "ranks.jsonl"
    records = [
        ("0" * 15 + "1", None, "training", {"training.rank": 0, "energy.attributed.joules": 8.0, "energy.joules": 20.0}),
        ("0" * 15 + "2", "0" * 15 + "1", "epoch",
         {"training.rank": 0, "training.epoch": 1, "energy.attributed.joules": 4.0, "energy.joules": 10.0}),
        ("0" * 15 + "3", "0" * 15 + "1", "epoch",
         {"training.rank": 1, "training.epoch": 1, "energy.attributed.joules": 3.5, "energy.joules": 10.0}),
    ]
    path.write_text("".join(json.dumps({
        "name": name, "trace_id": "a" * 32, "span_id": span_id, "parent_span_id": parent,
        "start_time_unix_nano": T0 + i, "end_time_unix_nano": T0 + 10**9 + i, "service_name": "train",
        "attributes": attributes}) + "\n" for i, (span_id, parent, name, attributes) in enumerate(records)))
    (run,) = build_report([path]).runs
    assert run.joules == 8.0 + 3.5 and run.spans_counted == 2
    assert run.host_interval_joules == 20.0
    assert [(epoch.epoch, epoch.joules) for epoch in run.epochs] == [(1, 4.0 + 3.5)]


def test_a_damaged_file_is_read_by_the_python_reader_with_each_line_reason(tmp_path: Path) -> None:
    good = tmp_path / "good.jsonl"
    _emit(JsonLinesSpanExporter(good), 0, 2)
    damaged = tmp_path / "damaged.jsonl"
    lines = good.read_text().splitlines()
    record = json.loads(lines[0])
    record["attributes"]["energy.attributed.joules"] = -1.0  # fails a check: never enters a total
    damaged.write_text("\n".join([json.dumps(record), '{"name": "half', *lines[1:]]) + "\n")
    with SpanStore() as store:
        first, second = store.register(str(good)), store.register(str(damaged))
        assert store.load(FORMAT_JSONL, [(first, str(good)), (second, str(damaged))]) == {first: 6, second: None}
    report = build_report([damaged])
    assert [s.path for s in report.skipped] == [f"{damaged}:1", f"{damaged}:2"]
    assert report.skipped[0].reason.startswith("energy.attributed.joules = -1.0 is negative")
    assert "not valid JSON" in report.skipped[1].reason
    # The bad record was a child (the exporter writes a span when it ends): the roots' shares are the total.
    assert report.total_joules == 2 * ROOT_SHARE and len(report.runs) == 2


def test_an_exporters_hidden_file_in_progress_is_skipped(tmp_path: Path) -> None:
    _emit(JsonLinesSpanExporter(tmp_path / "spans.jsonl"), 0, 1)
    _emit(JsonLinesSpanExporter(tmp_path / ".spans-1.parquet.inprogress"), 0, 1)
    report = build_report([tmp_path])
    assert report.total_joules == ROOT_SHARE
    (skipped,) = report.skipped
    assert skipped.path.endswith(".spans-1.parquet.inprogress") and "still writing" in skipped.reason


def test_spill_folder_is_private_and_removed(tmp_path: Path) -> None:
    store = SpanStore()
    spill = Path(store._spill)
    assert stat.S_IMODE(spill.stat().st_mode) == 0o700
    store.close()
    assert not spill.exists()


def test_memory_limit_from_the_environment_and_a_bad_value_falls_back(caplog: pytest.LogCaptureFixture) -> None:
    assert config.report_memory_limit({}) == config.DEFAULT_REPORT_MEMORY_LIMIT
    assert config.report_memory_limit({config.OTEL_JOULES_REPORT_MEMORY_LIMIT: "2GB"}) == "2000000000B"
    assert config.report_memory_limit({config.OTEL_JOULES_REPORT_MEMORY_LIMIT: "512 MiB"}) == f"{512 << 20}B"
    config.forget_reported_values()
    with caplog.at_level("WARNING"):
        for _ in range(2):
            assert config.report_memory_limit({config.OTEL_JOULES_REPORT_MEMORY_LIMIT: "lots"}) == "250MB"
        assert config.report_memory_limit({config.OTEL_JOULES_REPORT_MEMORY_LIMIT: "1MB"}) == "250MB"
    messages = [r.getMessage() for r in caplog.records if "OTEL_JOULES_REPORT_MEMORY_LIMIT" in r.getMessage()]
    assert len(messages) == 2 and "'lots'" in messages[0] and "'1MB'" in messages[1]


def test_without_duckdb_the_report_says_which_extra_to_install(tmp_path: Path) -> None:
    (tmp_path / "spans.jsonl").write_text("")
    blocker = tmp_path / "site"
    blocker.mkdir()
    # DuckDB not installed: an import of it fails, as it does without the [report] extra.
    (blocker / "sitecustomize.py").write_text("import sys\nsys.modules['duckdb'] = None\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(blocker), *sys.path]))
    done = subprocess.run([sys.executable, "-m", "otel_joules.cli.main", "report", str(tmp_path / "spans.jsonl")],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == ["otel-joules: otel-joules report needs DuckDB: pip install 'otel-joules[report]'"]


def test_the_python_reader_alone_still_reads_every_span(tmp_path: Path) -> None:
    # read_inputs without a store: what tests and tools use to look at the spans of a file.
    _emit(JsonLinesSpanExporter(tmp_path / "spans.jsonl"), 0, 2)
    assert sorted(span.name for span in read_inputs([tmp_path]).spans) == ["job0", "job1", "step0", "step0", "step1", "step1"]
