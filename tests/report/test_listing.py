"""A report lists at most ``--runs N`` runs and adds up every one; its memory does not grow with the runs it adds.

The first runs are made in Python (every label, as listed); the others are added up in SQL (tests/report/conftest.py
checks every report of this folder both ways, bit for bit). Totals are exact sums (``math.fsum`` of every figure)
however they are kept; a file the Python reader reads goes to DuckDB in batches, with the same result.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from otel_joules.cli.main import main
from otel_joules.report import aggregate, build_report, inputs
from otel_joules.report.aggregate import DEFAULT_LISTED_RUNS, ExactSum

T0 = 1_700_000_000_000_000_000


def _write_traces(path: Path, count: int, *, broken_line: bool = False) -> float:
    """``count`` traces of a root with a share and the host's energy and one nested child; returns the shares' sum."""
    lines, total = [], 0.0
    for number in range(1, count + 1):
        share = number * 0.375
        total += share
        start = T0 + number * 10**9
        common = {"trace_id": f"{number:032x}", "start_time_unix_nano": start, "end_time_unix_nano": start + 10**8,
                  "service_name": "svc"}
        lines.append({**common, "name": "root", "span_id": f"{number:016x}", "parent_span_id": None,
                      "attributes": {"energy.attributed.joules": share, "energy.joules": 2 * share,
                                     "energy.source": "measured" if number % 3 else "estimate", "carbon.pue": 1.25}})
        lines.append({**common, "name": "child", "span_id": f"{number + 1 << 32:016x}", "parent_span_id": f"{number:016x}",
                      "attributes": {"energy.attributed.joules": share / 2, "energy.joules": share}})
    text = "".join(json.dumps(line) + "\n" for line in lines)
    if broken_line:
        text += '{"name": "cut", "trace_id": "ab'  # a writer killed mid-line: the Python reader reads this file
    path.write_text(text, encoding="utf-8")
    return total


@pytest.fixture(autouse=True)
def _no_country(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_JOULES_COUNTRY", raising=False)


def test_the_default_listing_is_large_enough_for_every_fixture() -> None:
    assert DEFAULT_LISTED_RUNS == 1000


def test_runs_n_lists_the_first_n_and_totals_every_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    total = _write_traces(tmp_path / "spans.jsonl", 7)
    assert main(["report", "--json", "--runs", "all", str(tmp_path)]) == 0
    every = json.loads(capsys.readouterr().out)
    assert main(["report", "--json", "--runs", "2", str(tmp_path)]) == 0
    two = json.loads(capsys.readouterr().out)
    assert "runs_not_listed" not in every and len(every["runs"]) == 7
    assert every["totals"]["energy_joules"] == total
    assert two["totals"] == every["totals"] and two["equivalents"] == every["equivalents"]
    assert two["runs"] == every["runs"][:2]
    assert two["runs_not_listed"] == 5 and "--runs all lists every one" in two["runs_listing"]

    assert main(["report", "--runs", "0", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("otel-joules report: 7 run(s) from 1 file(s)")
    assert "7 more run(s) in the totals are not listed (listed: the first 0;" in text
    assert f"Total: {total:.3f} J" in text
    assert "of which: 7 run(s) attributed; 5 measured, 2 estimate; host interval energy" in text


@pytest.mark.parametrize("bad", ["-1", "many", "1.5"])
def test_a_bad_runs_value_says_what_to_give(tmp_path: Path, bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["report", "--runs", bad, str(tmp_path)])
    assert exit_info.value.code == 2
    assert "--runs takes a whole number >= 0 or 'all'" in capsys.readouterr().err


def test_the_listing_does_not_change_what_the_library_returns(tmp_path: Path) -> None:
    _write_traces(tmp_path / "spans.jsonl", 5)
    every = build_report([tmp_path])
    three = build_report([tmp_path], max_runs=3)
    assert three.runs == every.runs[:3] and three.runs_not_listed == 2 and three.run_count == every.run_count == 5
    for name in ("total_joules", "total_kwh", "total_co2eq_grams", "host_interval_joules"):
        assert getattr(three, name) == getattr(every, name)
    with pytest.raises(Exception, match="max_runs must be a whole number"):
        build_report([tmp_path], max_runs=-1)


def test_exact_sum_is_fsum_of_every_value() -> None:
    rng = random.Random(20)
    values = [rng.choice((1.0, -1.0)) * rng.random() * 10.0 ** rng.randint(-300, 300) for _ in range(20000)]
    values += [1e16, 1.0, -1e16, 2.0**-1074, 0.1] * 3
    exact = ExactSum()
    for value in values:
        exact.add(value)
    assert exact.value == math.fsum(values) and exact.count == len(values)
    scaled = ExactSum()
    scaled.add(0.5)
    scaled.add_scaled([(-3, 5), (2, 3), (-1074, 1)], 3)  # 5/8 + 12 + the smallest double
    assert scaled.value == math.fsum([0.5, 0.625, 12.0, 2.0**-1074]) and scaled.count == 4


def test_the_python_reader_hands_spans_on_in_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    total = _write_traces(tmp_path / "spans.jsonl", 9, broken_line=True)
    whole = build_report([tmp_path])
    monkeypatch.setattr(inputs, "SPANS_PER_FLUSH", 4)
    batched = build_report([tmp_path])
    assert batched.total_joules == whole.total_joules == total
    assert batched.runs == whole.runs and batched.skipped == whole.skipped
    assert any("not valid JSON" in item.reason for item in batched.skipped)


def test_a_run_past_the_listing_that_would_overflow_a_total_is_left_out(tmp_path: Path) -> None:
    # 3.6e6 J is 1 kWh: at 1e308 g/kWh each of the first two runs is a finite 1e308 g, and the second would make the
    # total infinite; the third is kept. Past a listing of one, the SQL sums check such runs one by one.
    lines = []
    for number, joules in ((1, 3.6e6), (2, 3.6e6), (3, 2.5)):
        start = T0 + number * 10**9
        lines.append({"trace_id": f"{number:032x}", "span_id": f"{number:016x}", "parent_span_id": None, "name": "r",
                      "start_time_unix_nano": start, "end_time_unix_nano": start + 1,
                      "attributes": {"energy.attributed.joules": joules, "energy.joules": joules}})
    (tmp_path / "spans.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    every = build_report([tmp_path], intensity_gco2eq_per_kwh=1e308)
    one = build_report([tmp_path], intensity_gco2eq_per_kwh=1e308, max_runs=1)
    assert every.total_joules == one.total_joules == 3.6e6 + 2.5 and one.run_count == every.run_count == 2
    assert one.total_co2eq_grams == every.total_co2eq_grams and math.isfinite(one.total_co2eq_grams)
    (skip,) = one.skipped
    assert skip == every.skipped[0] and f"trace {2:032x} left out" in skip.reason and "overflow to infinity" in skip.reason


def test_totals_keep_no_run_past_the_listing() -> None:
    totals = aggregate.RunTotals(2)
    assert totals.room() == 2 and aggregate.RunTotals(None).room() == -1
