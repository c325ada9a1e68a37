"""CsvSpanExporter: exact bytes, header policy, unwritable paths, failures and lifecycle."""

from __future__ import annotations

import gc
import csv
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_joules.errors import ConfigurationError
from otel_joules.exporters import CsvHeaderMismatchError, CsvSpanExporter, ExporterPathError, csv_header

from tests.helpers.known_spans import (
    CHILD_SPAN_ID,
    FAILING_DISK_SCRIPT,
    ROOT_SPAN_ID,
    TRACE_ID,
    emit_plain,
    emit_run,
    emit_train_and_epoch,
    make_provider,
)
from tests.helpers.processes import REPO


#: The known spans' exported resource (host, job) in the last cell; their command line is not kept.
RESOURCE_CELL = '"{""host.name"":""node-7"",""slurm.job.id"":""4242""}"\n'
HEADER = (
    "name,trace_id,span_id,parent_span_id,start_time,end_time,start_time_unix_nano,end_time_unix_nano,"
    "duration_s,service_name,energy.joules,energy.watts,energy.source,energy.co2eq.grams,energy.below_resolution,attributes,resource\n"
)
CHILD_ROW = (
    f'"époque, ""1""",{TRACE_ID},{CHILD_SPAN_ID},{ROOT_SPAN_ID},'
    "2023-11-14T22:13:20.250000000Z,2023-11-14T22:13:20.260000000Z,1700000000250000000,1700000000260000000,"
    "0.01,svc,0.125,,estimate,,true,"
    '"{""energy.below_resolution"":true,""energy.domains"":[""nvidia_gpu_0""],""energy.joules"":0.125,'
    '""energy.nvidia_gpu_0.joules"":0.125,""energy.samples"":3,""energy.source"":""estimate""}",'
    + RESOURCE_CELL
)
ROOT_ROW = (
    f"train,{TRACE_ID},{ROOT_SPAN_ID},,"
    "2023-11-14T22:13:20.000000000Z,2023-11-14T22:13:21.500000000Z,1700000000000000000,1700000001500000000,"
    "1.5,svc,12.5,8.333333333333334,measured,0.0015451388888888889,false,"
    '"{""energy.co2eq.grams"":0.0015451388888888889,""energy.core_0.joules"":7.25,""energy.dram_0.joules"":2.5,'
    '""energy.joules"":12.5,""energy.package_0.joules"":10.0,""energy.source"":""measured"",'
    '""energy.watts"":8.333333333333334}",'
    + RESOURCE_CELL
)


def test_rows_byte_for_byte_behind_simple_span_processor(tmp_path: Path) -> None:
    path = tmp_path / "spans.csv"
    exporter = CsvSpanExporter(path)
    provider = make_provider(SimpleSpanProcessor(exporter))
    emit_train_and_epoch(provider)
    provider.shutdown()
    assert path.read_bytes() == (HEADER + CHILD_ROW + ROOT_ROW).encode("utf-8")


def test_same_bytes_behind_batch_span_processor(tmp_path: Path) -> None:
    path = tmp_path / "spans.csv"
    provider = make_provider(BatchSpanProcessor(CsvSpanExporter(path), schedule_delay_millis=60_000))
    emit_train_and_epoch(provider)
    # The batch is still in the processor: only the header is on disk.
    assert path.read_bytes() == HEADER.encode()
    assert provider.force_flush()
    assert path.read_bytes() == (HEADER + CHILD_ROW + ROOT_ROW).encode("utf-8")
    provider.shutdown()


def test_the_csv_module_reads_back_every_field(tmp_path: Path) -> None:
    path = tmp_path / "spans.csv"
    provider = make_provider(SimpleSpanProcessor(CsvSpanExporter(path)))
    emit_train_and_epoch(provider)
    provider.shutdown()
    with open(path, newline="", encoding="utf-8") as handle:
        child, root = list(csv.DictReader(handle))
    assert child["name"] == 'époque, "1"'
    assert child["parent_span_id"] == root["span_id"] == ROOT_SPAN_ID
    assert root["parent_span_id"] == ""
    assert float(root["duration_s"]) == 1.5
    assert int(root["end_time_unix_nano"]) - int(root["start_time_unix_nano"]) == 1_500_000_000
    attributes = json.loads(root["attributes"])
    assert attributes["energy.package_0.joules"] == 10.0 and isinstance(attributes["energy.package_0.joules"], float)
    assert "http.route" not in root["attributes"]
    assert json.loads(child["attributes"])["energy.samples"] == 3


def test_header_constant_matches_docstring_and_custom_columns(tmp_path: Path) -> None:
    assert ",".join(csv_header()) + "\n" == HEADER
    path = tmp_path / "custom.csv"
    exporter = CsvSpanExporter(path, energy_columns=("energy.below_resolution", "energy.domains", "energy.samples"))
    provider = make_provider(SimpleSpanProcessor(exporter))
    emit_train_and_epoch(provider)
    provider.shutdown()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == (
        "name,trace_id,span_id,parent_span_id,start_time,end_time,start_time_unix_nano,end_time_unix_nano,"
        "duration_s,service_name,energy.below_resolution,energy.domains,energy.samples,attributes,resource"
    )
    # bool, tuple and int cells; the root span has none of the three: empty cells.
    assert ',0.01,svc,true,"[""nvidia_gpu_0""]",3,"{' in lines[1]
    assert ",1.5,svc,false,,,\"{" in lines[2]  # a span with energy: false, never empty


@pytest.mark.parametrize(
    "columns",
    [("joules",), ("energy.joules", "energy.joules"), "energy.joules", (3,), ("carbon",), ("process.pid",)],
)
def test_bad_energy_columns_are_refused(tmp_path: Path, columns: object) -> None:
    with pytest.raises(ConfigurationError):
        CsvSpanExporter(tmp_path / "x.csv", energy_columns=columns)  # type: ignore[arg-type]
    assert not (tmp_path / "x.csv").exists()


def test_appending_to_a_file_with_the_same_header_adds_rows_only(tmp_path: Path) -> None:
    path = tmp_path / "spans.csv"
    for run in range(2):
        provider = make_provider(SimpleSpanProcessor(CsvSpanExporter(path)))
        emit_plain(provider, f"run{run}", offset_s=10 * run, joules=1.0 + run)
        provider.shutdown()
    assert path.read_text() == (
        HEADER
        + f"run0,{TRACE_ID},{ROOT_SPAN_ID},,2023-11-14T22:13:20.000000000Z,2023-11-14T22:13:22.000000000Z,"
        + '1700000000000000000,1700000002000000000,2.0,svc,1.0,,,,false,"{""energy.joules"":1.0}",' + RESOURCE_CELL
        + f"run1,{TRACE_ID},{ROOT_SPAN_ID},,2023-11-14T22:13:30.000000000Z,2023-11-14T22:13:32.000000000Z,"
        + '1700000010000000000,1700000012000000000,2.0,svc,2.0,,,,false,"{""energy.joules"":2.0}",' + RESOURCE_CELL
    )


def test_a_file_without_the_flag_column_is_appended_to_in_its_layout_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "older.csv"
    older_header = HEADER.replace("energy.below_resolution,", "")
    path.write_text(older_header)
    with caplog.at_level(logging.WARNING, logger="otel_joules"):
        provider = make_provider(SimpleSpanProcessor(CsvSpanExporter(path)))
        emit_plain(provider, "run0", offset_s=0, joules=1.0)
        provider.shutdown()
    rows = list(csv.reader(path.read_text().splitlines()))
    assert ",".join(rows[0]) + "\n" == older_header and len(rows[1]) == len(rows[0])
    warnings = [r.getMessage() for r in caplog.records if "energy.below_resolution" in r.getMessage()]
    assert len(warnings) == 1 and str(path) in warnings[0]


def test_a_file_without_the_resource_column_is_appended_to_in_its_layout_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "older.csv"
    older_header = HEADER.replace(",resource\n", "\n").replace("energy.below_resolution,", "")
    path.write_text(older_header)
    with caplog.at_level(logging.WARNING, logger="otel_joules"):
        provider = make_provider(SimpleSpanProcessor(CsvSpanExporter(path)))
        emit_plain(provider, "run0", offset_s=0, joules=1.0)
        emit_plain(provider, "run1", offset_s=10, joules=2.0)
        provider.shutdown()
    rows = path.read_text().splitlines()
    assert rows[0] + "\n" == older_header
    # Every row in the file's own layout: as many cells as its header, the last the attributes.
    parsed = list(csv.reader(rows))
    assert [len(row) for row in parsed] == [len(parsed[0])] * 3
    assert [json.loads(row[-1]) for row in parsed[1:]] == [{"energy.joules": 1.0}, {"energy.joules": 2.0}]
    warnings = [r.getMessage() for r in caplog.records if "resource" in r.getMessage()]
    assert len(warnings) == 1 and "host, user or job" in warnings[0] and str(path) in warnings[0]


def test_other_header_is_refused_before_writing_anything(tmp_path: Path) -> None:
    path = tmp_path / "pyjoules.csv"
    original = b"timestamp;tag;duration;package_0\n1700000000.0;foo;1.0;1000000\n"
    path.write_bytes(original)
    with pytest.raises(CsvHeaderMismatchError) as error:
        CsvSpanExporter(path)
    assert path.read_bytes() == original
    message = str(error.value)
    assert "timestamp;tag;duration;package_0" in message and "new file" in message


def test_header_of_other_energy_columns_names_the_matching_option(tmp_path: Path) -> None:
    path = tmp_path / "spans.csv"
    CsvSpanExporter(path, energy_columns=("energy.joules", "energy.package_0.joules")).shutdown()
    before = path.read_bytes()
    with pytest.raises(CsvHeaderMismatchError, match=r"energy_columns=\('energy.joules', 'energy.package_0.joules'\)"):
        CsvSpanExporter(path)
    assert path.read_bytes() == before
    # Following the hint works, and appends without a second header.
    CsvSpanExporter(path, energy_columns=("energy.joules", "energy.package_0.joules")).shutdown()
    assert path.read_bytes() == before


def test_empty_existing_file_gets_the_header(tmp_path: Path) -> None:
    path = tmp_path / "spans.csv"
    path.touch()
    CsvSpanExporter(path).shutdown()
    assert path.read_text() == HEADER


def test_file_cut_mid_line_gets_a_newline_and_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "spans.csv"
    path.write_text(HEADER + "half,a,row")
    exporter = CsvSpanExporter(path)
    provider = make_provider(SimpleSpanProcessor(exporter))
    with caplog.at_level(logging.WARNING, logger="otel_joules.exporters"):
        emit_train_and_epoch(provider)
    provider.shutdown()
    assert path.read_text(encoding="utf-8") == HEADER + "half,a,row\n" + CHILD_ROW + ROOT_ROW
    assert "does not end with a newline" in caplog.text


@pytest.mark.parametrize("where", ["missing folder", "a folder", "under a file"])
def test_unwritable_path_fails_at_construction(tmp_path: Path, where: str) -> None:
    (tmp_path / "file.txt").write_text("x")
    path = {
        "missing folder": tmp_path / "no" / "such" / "spans.csv",
        "a folder": tmp_path,
        "under a file": tmp_path / "file.txt" / "spans.csv",
    }[where]
    with pytest.raises(ExporterPathError) as error:
        CsvSpanExporter(path)
    assert str(path) in str(error.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt"]


def test_not_a_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="must be a file path"):
        CsvSpanExporter(42)  # type: ignore[arg-type]


def test_shutdown_closes_and_refuses_later_exports(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "spans.csv"
    memory = InMemorySpanExporter()
    provider = make_provider(SimpleSpanProcessor(memory))
    emit_train_and_epoch(provider)
    spans = memory.get_finished_spans()
    exporter = CsvSpanExporter(path)
    assert exporter.export(spans) is SpanExportResult.SUCCESS
    assert exporter.force_flush() is True
    exporter.shutdown()
    exporter.shutdown()  # idempotent
    with caplog.at_level(logging.WARNING, logger="otel_joules.exporters"):
        assert exporter.export(spans) is SpanExportResult.FAILURE
    assert "after shutdown" in caplog.text
    assert path.read_bytes() == (HEADER + CHILD_ROW + ROOT_ROW).encode("utf-8")


EXIT_HOOK_SCRIPT = r"""
import sys
from otel_joules.exporters import CsvSpanExporter
closed = CsvSpanExporter(sys.argv[1] + "/closed.csv")
open_ = CsvSpanExporter(sys.argv[1] + "/open.csv")
# Instance attributes shadow the method the exit hook looks up, so each hook announces itself.
closed._flush_at_exit = lambda: print("hook of closed ran")
open_._flush_at_exit = lambda: print("hook of open ran")
closed.shutdown()
"""


def test_shutdown_removes_only_its_own_exit_hook(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", EXIT_HOOK_SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "hook of open ran\n"


def test_the_exit_hook_does_not_keep_an_exporter_alive(tmp_path: Path) -> None:
    import weakref

    exporter = CsvSpanExporter(tmp_path / "spans.csv")
    fd = exporter._fd
    os.fstat(fd)
    ref = weakref.ref(exporter)
    del exporter
    gc.collect()
    assert ref() is None
    with pytest.raises(OSError):  # and its file was closed with it
        os.fstat(fd)


def _run_failing_disk(tmp_path: Path, scenario: str, max_pending: int, kind: str = "csv") -> tuple[dict, str, Path]:
    path = tmp_path / f"spans.{kind}"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, "-c", FAILING_DISK_SCRIPT, str(path), kind, scenario, str(max_pending)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr, path


def _names(path: Path) -> list[str]:
    with open(path, newline="", encoding="utf-8") as handle:
        return [row["name"] for row in csv.DictReader(handle)]


def test_failed_write_is_rolled_back_kept_and_written_by_the_next_export(tmp_path: Path) -> None:
    report, stderr, path = _run_failing_disk(tmp_path, "export", max_pending=10)
    assert report == {
        "a": "SUCCESS",
        "b": "FAILURE",
        "size_after_b_equals_size_a": True,  # the cut-short write was truncated away
        "c": "FAILURE",
        "pending_while_failing": 2,
        "flush_while_failing": False,
        "d": "SUCCESS",
        "pending_after": 0,
    }
    assert _names(path) == ["a", "b", "c", "d"]
    assert stderr.count("ERROR otel_joules.exporters cannot write 1 of 1 span record(s)") == 1  # one error, not one per try
    assert "File too large" in stderr and "writable again: wrote 3 record(s)" in stderr


def test_pending_spans_are_bounded_oldest_dropped(tmp_path: Path) -> None:
    report, stderr, path = _run_failing_disk(tmp_path, "export", max_pending=1)
    assert report["pending_while_failing"] == 1
    assert _names(path) == ["a", "c", "d"]
    assert "dropped the 1 oldest unwritten span record(s)" in stderr


def test_pending_spans_are_written_at_interpreter_exit(tmp_path: Path) -> None:
    report, stderr, path = _run_failing_disk(tmp_path, "exit", max_pending=10)
    assert report["pending_while_failing"] == 2
    assert _names(path) == ["a", "b", "c"]
    assert "lost" not in stderr


def test_spans_still_unwritable_at_shutdown_are_reported_lost(tmp_path: Path) -> None:
    report, stderr, path = _run_failing_disk(tmp_path, "lost", max_pending=10)
    assert report["pending_after"] == 0
    assert _names(path) == ["a"]
    assert "2 span record(s) could not be written at shutdown and are lost" in stderr


def test_text_utf8_cannot_carry_is_replaced_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "spans.csv"
    provider = make_provider(SimpleSpanProcessor(CsvSpanExporter(path)))
    span = provider.get_tracer("t").start_span("bad\ud800name", start_time=1, attributes={"energy.joules": 1.0})
    span.end(end_time=2)
    provider.shutdown()
    rows = path.read_bytes().decode("utf-8").splitlines()  # still valid UTF-8
    assert rows[1].startswith("bad\ufffdname,")


RUN_ATTRIBUTES_JSON = (
    '"{""carbon.intensity.gco2eq_per_kwh"":300.0,""carbon.intensity.source"":""explicit"",""carbon.pue"":1.2,'
    '""energy.co2eq.grams"":0.00035,""energy.core_0.joules"":0.25,""energy.dram_0.joules"":0.5,'
    '""energy.joules"":3.5,""energy.package_0.joules"":3.0,""energy.source"":""measured"",""energy.watts"":1.75}"'
)
RUN_CORE_CELLS = (
    f"python3,{TRACE_ID},{ROOT_SPAN_ID},,2023-11-14T22:13:20.000000000Z,2023-11-14T22:13:22.000000000Z,"
    "1700000000000000000,1700000002000000000,2.0,svc,"
)


def test_carbon_attributes_are_in_the_attributes_cell_byte_for_byte(tmp_path: Path) -> None:
    path = tmp_path / "run.csv"
    provider = make_provider(SimpleSpanProcessor(CsvSpanExporter(path)))
    emit_run(provider)
    provider.shutdown()
    # Same header as ever (the default columns name no carbon.* attribute); process.* left out.
    assert path.read_bytes() == (
        HEADER + RUN_CORE_CELLS + "3.5,1.75,measured,0.00035,false," + RUN_ATTRIBUTES_JSON + "," + RESOURCE_CELL
    ).encode("utf-8")


def test_energy_columns_may_name_carbon_attributes(tmp_path: Path) -> None:
    path = tmp_path / "run.csv"
    columns = ("energy.joules", "carbon.pue", "carbon.intensity.gco2eq_per_kwh", "carbon.intensity.source")
    provider = make_provider(SimpleSpanProcessor(CsvSpanExporter(path, energy_columns=columns)))
    emit_run(provider)
    emit_plain(provider, "no-carbon", offset_s=10, joules=1.0)
    provider.shutdown()
    assert path.read_bytes() == (
        "name,trace_id,span_id,parent_span_id,start_time,end_time,start_time_unix_nano,end_time_unix_nano,"
        "duration_s,service_name,energy.joules,carbon.pue,carbon.intensity.gco2eq_per_kwh,carbon.intensity.source,"
        "energy.below_resolution,attributes,resource\n"
        + RUN_CORE_CELLS + "3.5,1.2,300.0,explicit,false," + RUN_ATTRIBUTES_JSON + "," + RESOURCE_CELL
        + f"no-carbon,{TRACE_ID},00f067aa0ba902b8,,2023-11-14T22:13:30.000000000Z,2023-11-14T22:13:32.000000000Z,"
        + '1700000010000000000,1700000012000000000,2.0,svc,1.0,,,,false,"{""energy.joules"":1.0}",' + RESOURCE_CELL
    ).encode("utf-8")
    # Appending needs the same columns; the hint names them, carbon.* included.
    with pytest.raises(CsvHeaderMismatchError, match=re.escape(f"energy_columns={columns!r}")):
        CsvSpanExporter(path)
