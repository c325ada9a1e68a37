"""An archive of known sums, as the exporters write it: the report's totals and every grouping's totals are exact.

The archive is the benchmark's (benchmarks/report_scale.py), small: JSON-lines files of 6
services on 40 hosts and an OTLP/JSON file, nested spans whose every joule figure is a whole
number of eighths, so each sum is exact in any order and known in advance.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmarks.report_scale import KnownSums, write_archive
from otel_joules.cli.main import main
from otel_joules.report import build_report

pytest.importorskip("opentelemetry.exporter.otlp.json.common")


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, KnownSums]:
    root = tmp_path_factory.mktemp("archive")
    # A few traces per OTLP line, so the small file still holds many services and hosts.
    return root, write_archive(root, 0.8, otlp_share=0.5, otlp_batch_spans=8)


def test_the_totals_are_the_known_sums_exactly(archive: tuple[Path, KnownSums]) -> None:
    root, sums = archive
    report = build_report([root])

    assert report.skipped == ()
    assert len(report.runs) == sums.traces
    assert report.total_joules == sums.attributed_joules
    assert report.host_interval_joules == sums.host_interval_joules
    assert sum(run.spans_counted for run in report.runs) == sums.traces  # one root per trace: nesting resolved
    assert {run.energy_source for run in report.runs} == {"measured", "estimate"}


def test_a_file_given_twice_and_copied_counts_once(archive: tuple[Path, KnownSums], tmp_path: Path) -> None:
    root, sums = archive
    copy = tmp_path / "copy.jsonl"
    shutil.copy(next(root.glob("jsonl/*/*.jsonl")), copy)

    report = build_report([root, root / "otlp", copy])

    assert report.total_joules == sums.attributed_joules
    assert report.host_interval_joules == sums.host_interval_joules


KEYS = ("service", "span", "host", "user", "job", "day")


def test_each_key_has_the_known_sum_and_label_per_group_and_the_groups_add_up_to_the_total(
    archive: tuple[Path, KnownSums], capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("duckdb")
    root, sums = archive
    assert main(["report", "--by", ",".join(KEYS), "--json", str(root)]) == 0

    result = json.loads(capsys.readouterr().out)
    assert result["totals"]["energy_joules"] == sums.attributed_joules
    assert result["totals"]["spans_without_share"] == 0
    assert sum(group["spans"] for group in result["groups"]) == sums.spans
    for key in KEYS:
        # The groups of all six keys, added up over the other five: each key's own groups.
        joules: dict[object, float] = {}
        sources: dict[object, set[str]] = {}
        for group in result["groups"]:
            value = group["keys"][key]
            joules[value] = joules.get(value, 0.0) + group["energy_joules"]
            sources.setdefault(value, set()).add(group["energy_source"])
            assert group["below_resolution"] is False
        assert joules == sums.group_joules(key), key
        for value, seen in sources.items():
            merged = seen.pop() if len(seen) == 1 else "mixed"
            assert merged == sums.group_source(key, value), (key, value)


def test_two_keys_split_each_group_of_one_and_a_copy_counts_once(
    archive: tuple[Path, KnownSums], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("duckdb")
    root, sums = archive
    shutil.copytree(root / "otlp", tmp_path / "again")  # the OTLP file exported twice

    assert main(["report", "--by", "host,day", "--json", str(root), str(tmp_path / "again")]) == 0

    groups = json.loads(capsys.readouterr().out)["groups"]
    per_host: dict[object, float] = {}
    for group in groups:
        per_host[group["keys"]["host"]] = per_host.get(group["keys"]["host"], 0.0) + group["energy_joules"]
    assert per_host == sums.group_joules("host")
    assert {group["keys"]["day"] for group in groups} == set(sums.group_joules("day"))
    # Largest first.
    energies = [group["energy_joules"] for group in groups]
    assert energies == sorted(energies, reverse=True)
