"""benchmarks/report_scale.py: its archive holds what it claims, and a tiny run measures both sides and checks totals.

Timing and memory figures are the benchmark's to judge (the machines are noisy): these tests
check what was generated and measured, never how fast.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import report_scale


def test_the_archive_is_json_lines_per_service_and_host_and_one_otlp_file_of_known_sums(tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.json.common")
    sums = report_scale.write_archive(tmp_path, 0.5, otlp_share=0.3)

    jsonl = sorted(tmp_path.glob("jsonl/*/*.jsonl"))
    assert len(jsonl) == sums.files - 1 and {p.parent.name for p in jsonl} <= set(report_scale.HOSTS)
    roots = host = attributed = selves = 0.0
    spans = 0
    for path in jsonl:
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            assert set(record["resource"]) == {"host.name", "process.owner", "slurm.job.id"}
            spans += 1
            selves += record["attributes"]["energy.attributed.self.joules"]
            if record["parent_span_id"] is None:
                roots += 1
                host += record["attributes"]["energy.joules"]
                attributed += record["attributes"]["energy.attributed.joules"]
    for line in (tmp_path / "otlp" / "traces.otlp.jsonl").read_text(encoding="utf-8").splitlines():
        (resource_spans,) = json.loads(line)["resourceSpans"]
        resource = {a["key"]: a["value"]["stringValue"] for a in resource_spans["resource"]["attributes"]}
        assert set(resource) == {"service.name", "host.name", "process.owner", "slurm.job.id"}
        for span in resource_spans["scopeSpans"][0]["spans"]:
            spans += 1
            values = {a["key"]: a["value"] for a in span["attributes"]}
            selves += values["energy.attributed.self.joules"]["doubleValue"]
            if not span.get("parentSpanId"):
                roots += 1
                host += values["energy.joules"]["doubleValue"]
                attributed += values["energy.attributed.joules"]["doubleValue"]
    assert spans == sums.spans and roots == sums.traces
    # The roots' inclusive shares are every span's self share added up: the groups' total.
    assert attributed == selves == sums.attributed_joules
    assert host == sums.host_interval_joules
    assert sum(sums.group_joules("service").values()) == sums.attributed_joules
    assert None not in sums.group_joules("host")  # JSON lines keep the resource's host, as OTLP/JSON does
    assert sums.group_source("host", "node-00") == "measured"


def test_a_tiny_run_measures_the_report_its_groups_and_duckdb_and_finds_the_known_totals(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pytest.importorskip("duckdb")
    pytest.importorskip("opentelemetry.exporter.otlp.json.common")
    assert report_scale.main(["--size-mb", "0.3", "--dir", str(tmp_path), "--by", "service,host", "--json"]) == 0

    result = json.loads(capsys.readouterr().out)
    assert result["totals_right"] and result["duckdb_totals_right"]
    assert result["report_attributed_joules"] == result["expected_attributed_joules"] > 0
    assert result["report_seconds"] > 0 and result["duckdb_seconds"] > 0 and result["report_peak_mib"] > 0
    assert result["ratio"] == pytest.approx(result["report_seconds"] / result["duckdb_seconds"], rel=0.05)
    assert result["by_rc"] == 0 and result["groups_right"] and result["by_seconds"] > 0
    assert list(tmp_path.iterdir()) == []  # the archive is deleted after the run
