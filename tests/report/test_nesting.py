"""Nesting in the SQL engine: parent loops, a span's own parent, grandparents, ranks inherited from ancestors.

Each trace below is written as JSON lines by hand (the hardware boundary is not involved); the expected run figures
follow from the rules of :mod:`otel_joules.report` (a span is nested when an ancestor other than itself carries the
same share, of the same ``training.rank``; a parent loop ends the walk).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from otel_joules.report import build_report
from otel_joules.report.model import BASIS_ATTRIBUTED, BASIS_INTERVAL

T0 = 1_700_000_000_000_000_000


def _span(trace: int, span: int, parent: int | None, attributes: dict[str, Any]) -> dict[str, Any]:
    start = T0 + trace * 10**9
    return {
        "name": "s", "trace_id": f"{trace:032x}", "span_id": f"{span:016x}",
        "parent_span_id": None if parent is None else f"{parent:016x}",
        "start_time_unix_nano": start, "end_time_unix_nano": start + 10**8, "service_name": "svc",
        "attributes": attributes,
    }


EAJ, SELF, EJ, RANK = "energy.attributed.joules", "energy.attributed.self.joules", "energy.joules", "training.rank"
SPANS = [
    # 1: its own parent: not nested under itself.
    _span(1, 1, 1, {EAJ: 1.0, EJ: 2.0}),
    # 2: a parent loop of two: each nested under the other, so their self shares are summed.
    _span(2, 1, 2, {EAJ: 1.0, SELF: 0.5, EJ: 3.0}),
    _span(2, 2, 1, {EAJ: 2.0, SELF: 0.25, EJ: 3.0}),
    # 3: nested under its grandparent, past a parent without energy.
    _span(3, 1, None, {EAJ: 8.0, EJ: 9.0}),
    _span(3, 2, 1, {}),
    _span(3, 3, 2, {EAJ: 3.0, EJ: 4.0}),
    # 4: the same with interval energy only (an older export).
    _span(4, 1, None, {EJ: 5.0}),
    _span(4, 2, 1, {}),
    _span(4, 3, 2, {EJ: 2.0}),
    # 5: rank 1 under rank 0 counts beside it; a span without a rank takes its parent's (1) and is nested there.
    _span(5, 1, None, {EAJ: 10.0, RANK: 0, EJ: 20.0}),
    _span(5, 2, 1, {EAJ: 4.0, RANK: 1, EJ: 20.0}),
    _span(5, 3, 2, {EAJ: 1.0, EJ: 20.0}),
    # 6: a loop in a trace with a rank elsewhere: the loop's spans are nested in each other.
    _span(6, 1, 2, {EAJ: 1.5}),
    _span(6, 2, 1, {EAJ: 2.5}),
    _span(6, 3, None, {EAJ: 7.0, RANK: 0}),
    # 7: a rank inherited from a grandparent past a span without energy.
    _span(7, 1, None, {EAJ: 6.0, RANK: 0}),
    _span(7, 2, 1, {}),
    _span(7, 3, 2, {EAJ: 2.0}),
]
# trace -> (joules, host interval joules, basis, spans counted)
EXPECTED = {
    1: (1.0, 2.0, BASIS_ATTRIBUTED, 1),
    2: (0.75, 0, BASIS_ATTRIBUTED, 2),
    3: (8.0, 9.0, BASIS_ATTRIBUTED, 1),
    4: (5.0, None, BASIS_INTERVAL, 1),
    5: (14.0, 20.0, BASIS_ATTRIBUTED, 2),
    6: (7.0, 0, BASIS_ATTRIBUTED, 1),
    7: (6.0, 0, BASIS_ATTRIBUTED, 1),
}


@pytest.mark.parametrize("max_runs", [None, 0])
def test_nesting_rules_hold_in_sql(tmp_path: Path, max_runs: int | None) -> None:
    path = tmp_path / "nest.jsonl"
    path.write_text("".join(json.dumps(span) + "\n" for span in SPANS), encoding="utf-8")
    report = build_report([path], max_runs=max_runs)
    assert report.skipped == ()
    assert report.run_count == len(EXPECTED)
    assert report.total_joules == sum(joules for joules, *_ in EXPECTED.values())
    assert report.host_interval_joules == 2.0 + 9.0 + 20.0
    if max_runs is None:
        found = {
            int(run.run_id, 16): (run.joules, run.host_interval_joules, run.energy_basis, run.spans_counted)
            for run in report.runs
        }
        assert found == EXPECTED
    else:
        assert report.runs == () and report.runs_not_listed == len(EXPECTED)
