"""``otel-joules report --by KEYS``: totals per group, from the files the real exporters write.

The spans are made by a real TracerProvider whose resource carries the attributes the
keys read (host.name, process.owner, slurm.job.id) and exported by each file exporter.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter

from otel_joules.cli.main import main
from otel_joules.exporters import CsvSpanExporter, JsonLinesSpanExporter

pytest.importorskip("duckdb")

RESOURCE = {"service.name": "svc", "host.name": "node-7", "process.owner": "alice", "slurm.job.id": "4242"}


def _exporter(kind: str, folder: Path) -> SpanExporter:
    if kind == "jsonl":
        return JsonLinesSpanExporter(folder / "spans.jsonl")
    if kind == "csv":
        return CsvSpanExporter(folder / "spans.csv")
    if kind == "otlp":
        pytest.importorskip("opentelemetry.exporter.otlp.json.common")
        from otel_joules.exporters.otlp_file_exporter import OtlpFileSpanExporter

        return OtlpFileSpanExporter(folder / "spans.otlp.jsonl")
    pytest.importorskip("pyarrow")
    from otel_joules.exporters import ParquetSpanExporter

    return ParquetSpanExporter(folder)


def _export(kind: str, folder: Path, resource: dict[str, str] = RESOURCE, *, source: str = "measured") -> Path:
    """A trace of a root (self 1.5 J, inclusive 2.0 J) and a child (0.5 J), exported by ``kind``'s exporter."""
    folder.mkdir(parents=True, exist_ok=True)
    provider = TracerProvider(resource=Resource(resource))
    provider.add_span_processor(SimpleSpanProcessor(_exporter(kind, folder)))
    tracer = provider.get_tracer("t")
    start_ns = 1_796_083_200_000_000_000  # 2026-12-01T00:00:00Z
    root = tracer.start_span("request", start_time=start_ns)
    child = tracer.start_span("query", context=trace.set_span_in_context(root), start_time=start_ns + 10**8)
    child.set_attributes({"energy.attributed.self.joules": 0.5, "energy.attributed.joules": 0.5,
                          "energy.joules": 1.0, "energy.source": source})
    child.end(end_time=start_ns + 2 * 10**8)
    root.set_attributes({"energy.attributed.self.joules": 1.5, "energy.attributed.joules": 2.0,
                         "energy.joules": 5.0, "energy.source": source})
    root.end(end_time=start_ns + 10**9)
    provider.shutdown()
    return folder


def _groups(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["report", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("kind", ["otlp", "jsonl", "csv", "parquet"])
def test_every_format_keeps_service_span_day_host_user_and_job(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _export(kind, tmp_path / kind, {**RESOURCE, "k8s.pod.name": "pod-1"})

    result = _groups(capsys, "--by", "service,host,user,job,day,k8s.pod.name", str(folder))
    (group,) = result["groups"]
    assert group["keys"] == {
        "service": "svc",
        "host": "node-7",
        "user": "alice",
        "job": "4242",
        "day": "2026-12-01",
        # Only OTLP/JSON holds every resource attribute; the other formats keep the identities only.
        "k8s.pod.name": "pod-1" if kind == "otlp" else None,
    }
    assert group["energy_joules"] == 2.0 and group["spans"] == 2 and group["traces"] == 1
    assert group["energy_source"] == "measured"

    by_span = _groups(capsys, "--by", "span", str(folder))["groups"]
    assert [(g["keys"]["span"], g["energy_joules"]) for g in by_span] == [("request", 1.5), ("query", 0.5)]


@pytest.mark.parametrize("kind", ["jsonl", "csv"])
def test_a_damaged_file_still_groups_by_host(kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file DuckDB refuses (a torn line in the middle) is read a line at a time, its resource too."""
    folder = _export(kind, tmp_path / kind)
    (path,) = folder.iterdir()
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join([*lines[:-1], b'{"torn": \n' if kind == "jsonl" else b'"torn,\n', lines[-1]]))

    result = _groups(capsys, "--by", "host,job", str(folder))
    (group,) = result["groups"]
    assert group["keys"] == {"host": "node-7", "job": "4242"} and group["energy_joules"] == 2.0


def test_the_group_table_says_how_many_inputs_were_skipped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _export("jsonl", tmp_path / "jsonl")
    (path,) = folder.iterdir()
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join([*lines[:-1], b'{"torn": \n', lines[-1]]))
    assert main(["report", "--by", "host", str(folder)]) == 0
    captured = capsys.readouterr()
    assert "skipped" in captured.err
    assert "1 input(s) skipped, not in the figures below" in captured.out.splitlines()[1]


def test_a_csv_file_from_before_the_resource_column_groups_with_host_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _export("csv", tmp_path / "csv")
    (path,) = folder.iterdir()
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    assert rows[0][-2:] == ["attributes", "resource"]
    with open(path, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle, lineterminator="\n").writerows(row[:-1] for row in rows)  # the layout before the column

    (group,) = _groups(capsys, "--by", "service,host", str(folder))["groups"]
    assert group["keys"] == {"service": "svc", "host": None} and group["energy_joules"] == 2.0


def test_any_resource_attribute_is_a_key_and_a_span_attribute_comes_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.json.common")
    _export("otlp", tmp_path / "a", {**RESOURCE, "slurm.job.name": "train-a", "energy.source": "from-resource"})
    _export("otlp", tmp_path / "b", {**RESOURCE, "slurm.job.name": "train-b"}, source="estimate")

    groups = _groups(capsys, "--by", "slurm.job.name,energy.source", str(tmp_path))["groups"]
    assert [(g["keys"], g["energy_joules"], g["energy_source"]) for g in groups] == [
        ({"slurm.job.name": "train-a", "energy.source": "measured"}, 2.0, "measured"),
        ({"slurm.job.name": "train-b", "energy.source": "estimate"}, 2.0, "estimate"),
    ]


def test_groups_of_measured_and_estimated_spans_say_mixed_and_partial_wins(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _export("jsonl", tmp_path / "a")
    _export("jsonl", tmp_path / "b", source="estimate")
    _export("jsonl", tmp_path / "c", {**RESOURCE, "service.name": "other"}, source="partial")

    groups = _groups(capsys, "--by", "service", str(tmp_path))["groups"]
    assert [(g["keys"]["service"], g["energy_joules"], g["energy_source"]) for g in groups] == [
        ("svc", 4.0, "mixed"),
        ("other", 2.0, "partial"),
    ]


def test_spans_without_a_self_share_are_left_out_and_counted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _export("jsonl", tmp_path)
    older = {"name": "old", "trace_id": "ab" * 16, "span_id": "cd" * 8, "parent_span_id": None,
             "start_time_unix_nano": 1_796_083_200_000_000_000, "end_time_unix_nano": 1_796_083_201_000_000_000,
             "service_name": "svc", "attributes": {"energy.joules": 9.0, "energy.source": "measured"}}
    (tmp_path / "older.jsonl").write_text(json.dumps(older) + "\n", encoding="utf-8")

    result = _groups(capsys, "--by", "service", str(tmp_path))
    assert [(g["keys"]["service"], g["energy_joules"]) for g in result["groups"]] == [("svc", 2.0)]
    assert result["totals"]["spans_without_share"] == 1

    assert main(["report", "--by", "service", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "1 span(s) without energy.attributed.self.joules left out" in text
    assert "Total: 2.000 J" in text


def test_the_table_csv_and_parquet_hold_the_same_groups(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _export("jsonl", tmp_path / "in")
    # The batch service's resource has no host.name: its group's host is none ("-", empty, null).
    without_host = {k: v for k, v in RESOURCE.items() if k != "host.name"}
    _export("jsonl", tmp_path / "in" / "b", {**without_host, "service.name": "batch"}, source="estimate")
    out_csv, out_parquet = tmp_path / "groups.csv", tmp_path / "groups.parquet"

    assert main(["report", "--by", "service,host", "--csv", str(out_csv), "--parquet", str(out_parquet),
                 str(tmp_path / "in")]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0] == "otel-joules report by service, host: 2 group(s) from 2 file(s)"
    assert table[2].split() == ["service", "host", "joules", "kWh", "source", "spans", "traces"]
    # Largest first, then by the keys.
    assert table[4].split()[:5] == ["batch", "-", "2.000", "0.000000556", "estimate"]
    assert table[5].split()[:5] == ["svc", "node-7", "2.000", "0.000000556", "measured"]

    with open(out_csv, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["service", "host", "energy_joules", "energy_kwh", "energy_source", "below_resolution", "spans",
                       "traces"]
    assert [row[:3] + row[4:] for row in rows[1:]] == [
        ["batch", "", "2.0", "estimate", "false", "2", "1"],
        ["svc", "node-7", "2.0", "measured", "false", "2", "1"],
    ]
    import duckdb

    parquet = duckdb.sql(f"SELECT * FROM read_parquet('{out_parquet}')").fetchall()
    assert parquet == [("batch", None, 2.0, 2.0 / 3.6e6, "estimate", False, 2, 1),
                       ("svc", "node-7", 2.0, 2.0 / 3.6e6, "measured", False, 2, 1)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--by", ""], "give comma-separated keys"),
        (["--by", "host,,day"], "give comma-separated keys"),
        (["--by", "host,host"], "host given more than once"),
        (["--by", "x'); DROP TABLE t; --"], "is neither a key"),
        (["--csv", "out.csv"], "add --by KEYS"),
        (["--by", "host", "--pue", "1.5"], "--pue apply to the per-run report"),
    ],
)
def test_bad_group_options_are_one_line_and_exit_2(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _export("jsonl", tmp_path)
    assert main(["report", *args, str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_link_at_the_csv_path_is_refused_and_its_target_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _export("jsonl", tmp_path / "in")
    target = tmp_path / "precious"
    target.write_text("keep\n")
    (tmp_path / "out.csv").symlink_to(target)

    assert main(["report", "--by", "service", "--csv", str(tmp_path / "out.csv"), str(tmp_path / "in")]) == 2
    assert "symbolic link" in capsys.readouterr().err
    assert target.read_text() == "keep\n"


def test_nothing_to_group_exits_1_with_the_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "older.jsonl").write_text(json.dumps({
        "name": "old", "trace_id": "ab" * 16, "span_id": "cd" * 8, "parent_span_id": None,
        "start_time_unix_nano": 1, "end_time_unix_nano": 2, "service_name": "s",
        "attributes": {"energy.joules": 9.0}}) + "\n", encoding="utf-8")

    assert main(["report", "--by", "service", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "nothing to group" in captured.err and "1 span(s) without a self share" in captured.err
