"""ParquetSpanExporter: the schema, rotation, complete files while writing goes on, crashes, permissions."""

from __future__ import annotations

import csv
import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

from otel_joules.exporters import CsvSpanExporter, ExporterPathError, ParquetSpanExporter
from otel_joules.exporters.parquet_exporter import INPROGRESS_SUFFIX, SCHEMA_VERSION

from tests.helpers.known_spans import (
    CHILD_NAME,
    CHILD_SPAN_ID,
    ROOT_SPAN_ID,
    T0_NS,
    TRACE_ID,
    emit_train_and_epoch,
    make_provider,
    plain_spans,
)
from tests.helpers.processes import REPO

pa = pytest.importorskip("pyarrow", reason="the Parquet exporter needs pyarrow (pip install -e '.[parquet]')")
import pyarrow.parquet as pq  # noqa: E402


def _parquet_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.endswith(".parquet"))


def _journals(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.endswith(INPROGRESS_SUFFIX))


def test_rows_are_the_records_with_the_csv_attributes_cell(tmp_path: Path) -> None:
    parquet = ParquetSpanExporter(tmp_path / "spans.parquet")
    csv_path = tmp_path / "spans.csv"
    provider = make_provider(SimpleSpanProcessor(parquet), SimpleSpanProcessor(CsvSpanExporter(csv_path)))
    emit_train_and_epoch(provider)
    provider.shutdown()

    [file] = _parquet_files(tmp_path)
    assert file.name.startswith("spans-") and f"-{os.getpid()}-1.parquet" in file.name
    table = pq.read_table(file)
    assert table.schema.metadata[b"otel_joules.schema"] == SCHEMA_VERSION.encode()
    assert table.schema.field("start_time").type == pa.timestamp("us", tz="UTC")
    child, root = table.to_pylist()
    assert (child["name"], child["trace_id"], child["span_id"], child["parent_span_id"]) == (
        CHILD_NAME,
        TRACE_ID,
        CHILD_SPAN_ID,
        ROOT_SPAN_ID,
    )
    assert root["parent_span_id"] is None and root["service_name"] == "svc"
    assert root["start_time_unix_nano"] == T0_NS and root["end_time_unix_nano"] == T0_NS + 1_500_000_000
    assert root["start_time"].timestamp() == T0_NS / 1e9 and root["duration_s"] == 1.5
    assert (root["energy.joules"], root["energy.watts"], root["energy.source"]) == (12.5, 8.333333333333334, "measured")
    assert root["energy.co2eq.grams"] == 0.0015451388888888889
    assert child["energy.watts"] is None and child["energy.co2eq.grams"] is None  # absent: null, not 0
    # Every exported attribute, typed, exactly as the CSV export's attributes cell.
    with csv_path.open(newline="", encoding="utf-8") as handle:
        cells = [row["attributes"] for row in csv.DictReader(handle)]
    assert [child["attributes"], root["attributes"]] == cells
    assert json.loads(child["attributes"])["energy.domains"] == ["nvidia_gpu_0"]
    assert "http.route" not in root["attributes"]
    assert not _journals(tmp_path)  # shutdown wrote the open file out


def test_a_lone_surrogate_and_non_finite_values_do_not_lose_the_batch(tmp_path: Path) -> None:
    exporter = ParquetSpanExporter(tmp_path)
    provider = make_provider(SimpleSpanProcessor(exporter))
    span = provider.get_tracer("t").start_span("bad \udc80 name", attributes={"energy.joules": float("nan")})
    span.end()
    provider.shutdown()
    [file] = _parquet_files(tmp_path)
    assert file.name.startswith("spans-")  # a folder as the path: spans-*.parquet inside it
    [row] = pq.read_table(file).to_pylist()
    assert row["name"] == "bad \ufffd name"
    assert row["energy.joules"] != row["energy.joules"]  # NaN stays NaN in the typed column
    assert json.loads(row["attributes"]) == {"energy.joules": "NaN"}


def test_rotation_by_size_every_span_once_in_order(tmp_path: Path) -> None:
    spans = plain_spans(30)
    exporter = ParquetSpanExporter(tmp_path / "spans.parquet", max_bytes=2000, max_age_s=0)
    for index in range(0, 30, 3):
        exporter.export(spans[index : index + 3])
    exporter.shutdown()
    files = _parquet_files(tmp_path)
    assert len(files) >= 5  # ~400 bytes a record as JSON: a file per 5-6 records
    names = [name for file in files for name in pq.read_table(file, columns=["name"]).column("name").to_pylist()]
    assert names == [f"s{index}" for index in range(30)]
    assert not _journals(tmp_path)


def test_rotation_by_time_at_the_next_export(tmp_path: Path) -> None:
    spans = plain_spans(3)
    exporter = ParquetSpanExporter(tmp_path / "spans.parquet", max_bytes=0, max_age_s=0.2)
    exporter.export(spans[:1])
    assert not _parquet_files(tmp_path)
    time.sleep(0.4)
    exporter.export(spans[1:2])  # the open file is older than max_age_s: closed first
    [first] = _parquet_files(tmp_path)
    assert pq.read_table(first).column("name").to_pylist() == ["s0"]
    exporter.shutdown()
    second = [f for f in _parquet_files(tmp_path) if f != first]
    assert [pq.read_table(f).column("name").to_pylist() for f in second] == [["s1"]]


def test_environment_sets_the_bounds_and_a_bad_value_keeps_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OTEL_JOULES_PARQUET_MAX_BYTES", "1")
    monkeypatch.setenv("OTEL_JOULES_PARQUET_MAX_AGE_S", "soon")
    exporter = ParquetSpanExporter(tmp_path / "spans.parquet")
    assert (exporter._max_bytes, exporter._max_age_s) == (1, 3600.0)
    assert "OTEL_JOULES_PARQUET_MAX_AGE_S='soon' is not a number; using the default 3600 instead" in caplog.text
    spans = plain_spans(2)
    exporter.export(spans[:1])
    exporter.export(spans[1:])
    assert len(_parquet_files(tmp_path)) == 2  # one byte: every export closes its file
    exporter.shutdown()
    with pytest.raises(Exception, match=r"max_age_s=-1 must be a number >= 0"):
        ParquetSpanExporter(tmp_path / "x.parquet", max_age_s=-1)


def test_a_reader_reads_every_closed_file_while_the_exporter_keeps_writing(tmp_path: Path) -> None:
    exporter = ParquetSpanExporter(tmp_path / "spans.parquet", max_bytes=4000, max_age_s=0)
    provider = make_provider(BatchSpanProcessor(exporter, schedule_delay_millis=5, max_export_batch_size=4))
    tracer = provider.get_tracer("t")
    written = 600
    done = threading.Event()

    def write() -> None:
        for index in range(written):
            tracer.start_span(f"s{index}", attributes={"energy.joules": 1.0}).end()
            if index % 8 == 0:
                time.sleep(0.001)
        done.set()

    writer = threading.Thread(target=write)
    writer.start()
    reads = 0
    rows_seen_while_writing = 0
    while not done.is_set() or reads == 0:
        for file in _parquet_files(tmp_path):
            table = pq.read_table(file)  # a complete footer: never a partial file
            assert table.num_rows > 0
            reads += 1
            if not done.is_set():
                rows_seen_while_writing = max(rows_seen_while_writing, table.num_rows)
        time.sleep(0.01)
    writer.join()
    provider.shutdown()
    assert rows_seen_while_writing > 0  # files were read while spans were still being written
    names = [n for f in _parquet_files(tmp_path) for n in pq.read_table(f, columns=["name"]).column("name").to_pylist()]
    assert sorted(names) == sorted(f"s{i}" for i in range(written))
    assert len(_parquet_files(tmp_path)) > 3


_KILLED_WRITER = r"""
import os, sys
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from otel_joules.exporters import ParquetSpanExporter
from tests.helpers.known_spans import emit_plain, make_provider
exporter = ParquetSpanExporter(sys.argv[1])
provider = make_provider(SimpleSpanProcessor(exporter))
for index in range(5):
    emit_plain(provider, f"k{index}", offset_s=index, joules=2.0)
os._exit(0)  # as a kill: no shutdown(), no exit hooks
"""


def test_a_killed_writers_open_file_is_written_by_the_next_exporter(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "spans.parquet"
    subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(path)], cwd=REPO, check=True, timeout=60)
    [journal] = _journals(tmp_path)
    assert not _parquet_files(tmp_path)
    live = ParquetSpanExporter(path)  # recovers the dead process's journal
    [recovered] = _parquet_files(tmp_path)
    assert recovered.name == journal.name[1 : -len(INPROGRESS_SUFFIX)]
    assert pq.read_table(recovered).column("name").to_pylist() == [f"k{i}" for i in range(5)]
    assert "ended without shutdown(): wrote its 5 span record(s)" in caplog.text
    # A live exporter's journal is held: a second exporter on the same path leaves it alone.
    live.export(plain_spans(1))
    other = ParquetSpanExporter(path)
    assert Path(live.journal_path).exists() and live.closed_files == []
    other.shutdown()
    live.shutdown()
    assert len(_parquet_files(tmp_path)) == 2


def test_files_are_never_world_writable_and_a_missing_folder_fails_at_construction(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        exporter = ParquetSpanExporter(tmp_path / "spans.parquet")
        assert not os.stat(exporter.journal_path).st_mode & stat.S_IWOTH
        exporter.export(plain_spans(1))
        final = exporter.rotate()
    finally:
        os.umask(old)
    exporter.shutdown()
    assert final is not None and not os.stat(final).st_mode & stat.S_IWOTH
    with pytest.raises(ExporterPathError, match="does not exist; create it first"):
        ParquetSpanExporter(tmp_path / "missing" / "spans.parquet")


def test_a_link_planted_at_the_next_files_name_is_replaced_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "victim"
    target.write_text("keep me")
    exporter = ParquetSpanExporter(tmp_path / "spans.parquet")
    exporter.export(plain_spans(1))
    final = Path(exporter.journal_path).name[1 : -len(INPROGRESS_SUFFIX)]
    (tmp_path / final).symlink_to(target)  # planted where the file will be renamed to
    exporter.shutdown()
    assert target.read_text() == "keep me"


_FULL_DISK = r"""
import logging, os, resource, signal, sys
from otel_joules.exporters import ParquetSpanExporter
from tests.helpers.known_spans import plain_spans
logging.basicConfig(level=logging.ERROR, stream=sys.stderr, format="%(levelname)s %(message)s")
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
exporter = ParquetSpanExporter(sys.argv[1], max_bytes=0, max_age_s=0)
spans = plain_spans(40)
exporter.export(spans[:20])
journal = exporter.journal_path
_, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (512, hard))  # below any Parquet file, and below the journal
print("rotate", exporter.rotate())  # the Parquet file cannot be written: the journal stays
print("export", exporter.export(spans[20:30]).name)
resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
exporter.export(spans[30:])
exporter.shutdown()
"""


def test_a_parquet_file_that_cannot_be_written_loses_no_record(tmp_path: Path) -> None:
    # A file-size limit (a full disk for this process) fails the Parquet file and the journal's appends.
    run = subprocess.run(
        [sys.executable, "-c", _FULL_DISK, str(tmp_path / "spans.parquet")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert "rotate None" in run.stdout and "export FAILURE" in run.stdout
    assert "its records stay in" in run.stderr
    names = [n for f in _parquet_files(tmp_path) for n in pq.read_table(f, columns=["name"]).column("name").to_pylist()]
    assert sorted(names) == sorted(f"s{i}" for i in range(40))
    assert not list(tmp_path.glob(".*.tmp")) and not _journals(tmp_path)
