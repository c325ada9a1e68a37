"""Every report a test here builds on DuckDB is also added up the other way, and both must agree exactly.

A report lists its first runs from Python (every label) and adds up the others in SQL
(:meth:`otel_joules.report.sql.SpanStore.tail`). Whatever a test asks for, its inputs are also totalled with every
trace in Python and with every trace in SQL: the totals (as floats, bit for bit), the counts of runs per basis and
source (in the order first seen), and the runs left out must be the same.
"""

from __future__ import annotations

from typing import Any

import pytest

from otel_joules.report import aggregate


def _figures(totals: Any) -> dict[str, Any]:
    tally = totals.tally
    return {
        "sums": {(kind, name): (s.value, s.count) for kind, sums in totals._sums_by_kind.items() for name, s in sums.items()},
        "runs": tally.runs,
        "by_basis": list(tally.by_basis.items()),
        "by_source": list(tally.by_source.items()),
        "below": tally.below_resolution,
        "default_pue": tally.default_pue,
        "with_host": tally.with_host,
        "skipped": [(item.path, item.reason) for item in totals.skipped],
    }


@pytest.fixture(autouse=True)
def _sql_totals_agree_with_python(monkeypatch: pytest.MonkeyPatch) -> None:
    original = aggregate._add_traces

    def checked(totals: Any, store: Any, intensities: Any) -> None:
        in_python, in_sql = aggregate.RunTotals(None), aggregate.RunTotals(0)
        original(in_python, store, intensities)
        original(in_sql, store, intensities)
        assert _figures(in_sql) == _figures(in_python)
        original(totals, store, intensities)

    monkeypatch.setattr(aggregate, "_add_traces", checked)
