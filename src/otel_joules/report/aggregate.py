"""Spans and carbontracker runs -> runs with joules, kWh and CO2eq -> one report.

:func:`build_report` reads the inputs (:mod:`otel_joules.report.readers`) into the SQL
engine (:mod:`otel_joules.report.sql`), which resolves each trace, makes traces runs
(:mod:`otel_joules.report.trace_runs`), summarises log pairs
(:mod:`otel_joules.report.carbontracker_runs`), counts a training exported both ways once,
and adds up the totals. A run whose figures are not finite, or whose figures would make a
total overflow to infinity, is left out with its reason (the totals stay numbers and every
other run is kept); totals are exactly rounded sums (``math.fsum``), kept as runs stream past: a
report keeps at most ``max_runs`` runs, whatever the number it adds up.
"""

from __future__ import annotations

import math
import os
from fractions import Fraction
from typing import Any, Iterable

from otel_joules.carbon.equivalents import equivalents
from otel_joules.carbon.units import validate_pue
from otel_joules.errors import ConfigurationError
from otel_joules.report.carbontracker_runs import carbontracker_summary
from otel_joules.report.model import (
    BASIS_ATTRIBUTED,
    BASIS_INTERVAL,
    RUN_KIND_TRACE,
    RUN_KINDS,
    CarbonTrackerRun,
    KindTotals,
    Report,
    RunSummary,
    RunTally,
    Skipped,
)
from otel_joules.report.inputs import Inputs
from otel_joules.report.readers import read_inputs
from otel_joules.report.run_carbon import CarbonOptions, Intensities
from otel_joules.report.sql import (
    BASIS_KIND_ATTRIBUTED,
    BASIS_KIND_INTERVAL,
    BASIS_KIND_SELF,
    TAIL_FIGURES,
    SpanStore,
    TailTotals,
)
from otel_joules.report.trace_runs import runs_from_traces, runs_in_order, without_energy_skip


#: How many runs ``otel-joules report`` lists by default (``--runs``); the totals are of every run.
DEFAULT_LISTED_RUNS = 1000


def build_report(
    paths: Iterable[str | os.PathLike[str]],
    *,
    intensity_gco2eq_per_kwh: float | None = None,
    country: str | None = None,
    pue: float | None = None,
    engine: str = "duckdb",
    spark_session: Any = None,
    max_runs: int | None = None,
) -> Report:
    """Read every path and aggregate it into one :class:`Report` (see :mod:`otel_joules.report`).

    ``engine``: ``duckdb`` (embedded, the default) or ``spark`` (:mod:`otel_joules.report.spark_engine`;
    ``spark_session`` to use a running session; paths may then be Hadoop URIs).

    ``max_runs``: keep at most this many runs in :attr:`Report.runs` (the first, in report order); the
    others are counted in the totals and :attr:`Report.runs_not_listed` without being kept, so memory
    stays flat however many runs there are. None keeps every run.

    Raises:
        ConfigurationError: ``intensity_gco2eq_per_kwh``, ``country``, ``pue``, ``engine`` or ``max_runs`` is invalid.
        ReportError: the engine's library is not installed (the message names the extra).
    """
    if pue is not None:
        pue = validate_pue(pue)
    if intensity_gco2eq_per_kwh is not None and country is not None:
        raise ConfigurationError("give either an explicit intensity or a country, not both")
    if max_runs is not None and (isinstance(max_runs, bool) or not isinstance(max_runs, int) or max_runs < 0):
        raise ConfigurationError(f"max_runs must be a whole number >= 0 or None (every run), got {max_runs!r}")
    intensities = Intensities(CarbonOptions(intensity_gco2eq_per_kwh, country, pue))
    totals = RunTotals(max_runs)
    if engine == "spark":
        inputs, skipped = _on_spark(paths, spark_session, totals, intensities)
    elif engine == "duckdb":
        inputs, skipped = _on_duckdb(paths, totals, intensities)
    else:
        raise ConfigurationError(f"unknown report engine {engine!r}: use duckdb or spark")
    return totals.report([*inputs.skipped, *skipped, *totals.skipped], tuple(dict.fromkeys(inputs.files_read)))


def _on_duckdb(
    paths: Iterable[str | os.PathLike[str]], totals: RunTotals, intensities: Intensities
) -> tuple[Inputs, list[Skipped]]:
    """Every run added to ``totals`` on DuckDB; the inputs read, and the traces and logs left out (in that order)."""
    with SpanStore() as store:
        inputs = read_inputs(paths, store)
        named = {log.trace_id for log in inputs.carbontracker_runs if log.trace_id is not None}
        duplicates = _add_logs(totals, inputs.carbontracker_runs, store.traces_with_energy(named), intensities)
        _add_traces(totals, store, intensities)
        without_energy = store.traces_without_energy()
    return inputs, [*([without_energy_skip(without_energy)] if without_energy else []), *duplicates]


def _on_spark(
    paths: Iterable[str | os.PathLike[str]], session: Any, totals: RunTotals, intensities: Intensities
) -> tuple[Inputs, list[Skipped]]:
    """Every run added to ``totals`` on Spark (paths may be Hadoop URIs); as :func:`_on_duckdb`."""
    from otel_joules.report.spark_engine import SparkSpanStore, is_uri

    paths = [os.fspath(p) for p in paths]
    with SparkSpanStore(session) as spark_store:
        inputs = read_inputs([p for p in paths if not is_uri(p)], spark_store)  # type: ignore[arg-type]
        for uri in (p for p in paths if is_uri(p)):
            read, uri_skipped = spark_store.load_uri(uri)
            inputs.files_read.extend(read)
            inputs.skipped.extend(Skipped(path, why) for path, why in uri_skipped)
        traces_skipped: list[Skipped] = []
        span_runs = runs_from_traces(spark_store.traces(), intensities, traces_skipped)
        duplicates = _add_logs(totals, inputs.carbontracker_runs, {run.run_id for run in span_runs}, intensities)
        for run in span_runs:
            totals.add(run)
    return inputs, [*traces_skipped, *duplicates]


def _add_traces(totals: RunTotals, store: SpanStore, intensities: Intensities) -> None:
    """The traces' runs: the listed ones made in Python (every label), the others added up in SQL."""
    if totals.listed is None:
        for run in runs_in_order(store.traces(), intensities, []):
            totals.add(run)
        return
    after = None
    while wanted := totals.room():
        batch = list(store.traces(after, limit=wanted))
        for run in runs_in_order(batch, intensities, []):
            totals.add(run)
        if len(batch) < wanted:
            return
        after = (batch[-1].start_unix_nano or 0, batch[-1].trace_id)
    override = intensities.override
    tail = store.tail(
        after,
        pue=intensities.options.pue,
        override=override.gco2eq_per_kwh if override is not None else None,
        fallback=lambda: intensities.fallback.gco2eq_per_kwh,
    )
    totals.add_tail(tail)


def _add_logs(
    totals: RunTotals, logs: Iterable[CarbonTrackerRun], traced: set[str], intensities: Intensities
) -> list[Skipped]:
    """The log pairs' runs added; each one whose trace is among the spans' (``traced``) is not (counted once, from
    the spans) and returned as skipped."""
    duplicates = []
    for log in logs:
        if log.trace_id is not None and log.trace_id in traced:
            # The same training, exported as spans too: count it once, from the spans
            # (exact durations rather than the log's centiseconds).
            duplicates.append(
                Skipped(log.std_log, f"same training as trace {log.trace_id}, whose spans are counted instead")
            )
            continue
        totals.add(carbontracker_summary(log, intensities))
    return duplicates


# The figures of a run that enter a report total, with how a skip reason names them.
_TOTALLED = (
    ("joules", "J"),
    ("energy_kwh", "kWh"),
    ("co2eq_grams", "g CO2eq"),
    ("host_interval_joules", "J of host interval energy"),
)
# sql.BASIS_KIND_* as RunSummary.energy_basis.
_BASES = {BASIS_KIND_ATTRIBUTED: BASIS_ATTRIBUTED, BASIS_KIND_SELF: BASIS_ATTRIBUTED, BASIS_KIND_INTERVAL: BASIS_INTERVAL}
# Values held before they are folded into a total's exact partial sums.
_PENDING = 4096


class ExactSum:
    """A sum of floats kept exact as they stream past, in little memory: :attr:`value` is ``math.fsum`` of them all.

    Values are held in batches; each batch is folded into a few floats whose exact sum is the exact sum so far
    (``fsum`` of everything, then of everything less that, until nothing is left), so the result is the
    correctly rounded sum of every value, in any order, as ``math.fsum`` of one list of them would be.
    """

    def __init__(self) -> None:
        self._parts: list[float] = []
        self._pending: list[float] = []
        self._exact = Fraction(0)
        self.count = 0

    def add(self, value: float) -> None:
        """Add one finite value."""
        self._pending.append(value)
        self.count += 1
        if len(self._pending) >= _PENDING:
            self._fold()

    def _fold(self) -> None:
        values = self._parts + self._pending
        parts: list[float] = []
        while True:
            rest = math.fsum(values + [-p for p in parts])
            if rest == 0.0:
                break
            parts.append(rest)
        self._parts, self._pending = parts, []

    def add_scaled(self, pairs: Iterable[tuple[int, int]], count: int) -> None:
        """Add ``count`` values whose exact sum is that of ``m * 2**e`` over ``pairs`` (whole ``m`` and ``e``)."""
        for e, m in pairs:
            self._exact += m * (Fraction(2) ** e)
        self.count += count

    @property
    def value(self) -> float:
        """The correctly rounded sum of every value added (0.0 for none)."""
        if not self._exact:
            return math.fsum(self._parts + self._pending)
        # int / int is correctly rounded: so is a Fraction's float.
        return float(sum(map(Fraction, self._parts + self._pending), self._exact))


class RunTotals:
    """Every run's figures added as runs stream past, the first ``listed`` runs kept (all of them for None).

    A run whose figures are not finite, or whose figures would make a total overflow to infinity, is left out
    with its reason: every figure is checked on its own when read, but products (kWh x an intensity) and sums
    of finite values can still overflow; the run that would make a total infinite is left out, not the report.
    """

    def __init__(self, listed: int | None) -> None:
        self.listed = listed
        self.runs: list[RunSummary] = []
        self.not_listed = 0
        self.skipped: list[Skipped] = []
        self.tally = RunTally()
        self._running = dict.fromkeys((name for name, _ in _TOTALLED), 0.0)
        # Per kind of run: a trace's share and a carbontracker log's host energy are never added together.
        self._sums_by_kind = {kind: {name: ExactSum() for name, _ in _TOTALLED} for kind in RUN_KINDS}

    def room(self) -> int:
        """How many more runs would be listed (0 once the listing is full; no limit: -1)."""
        return -1 if self.listed is None else max(self.listed - len(self.runs), 0)

    def add(self, run: RunSummary) -> None:
        """Add ``run`` to the totals (or skip it with its reason) and keep it if it is among the listed."""
        if not self._admitted(run.kind, run.run_id, run.sources[0] if run.sources else run.run_id,
                              [getattr(run, name) for name, _ in _TOTALLED]):
            return
        self.tally.add(run)
        if self.listed is None or len(self.runs) < self.listed:
            self.runs.append(run)
        else:
            self.not_listed += 1

    def add_tail(self, tail: TailTotals) -> None:
        """Add the runs after the listed ones, summed in SQL (none of them is listed)."""
        if tail.rows is not None:
            for trace_id, path, kind, source, below, pue_default, *figures in tail.rows:
                if self._admitted(RUN_KIND_TRACE, trace_id, path, figures):
                    self.tally.count(_BASES[kind], source, below, pue_default, figures[3] is not None)
                    self.not_listed += 1
            return
        for (name, _), column in zip(_TOTALLED, TAIL_FIGURES):
            self._sums_by_kind[RUN_KIND_TRACE][name].add_scaled(tail.exact[column], tail.counts[column])
        # New bases and sources in the order the tail first has them, after those already seen.
        by_place = sorted(tail.tally, key=lambda group: group[3])
        for kind, source, runs, _, below, pue_default, with_host in by_place:
            self.tally.count(_BASES[kind], source, False, bool(pue_default), bool(with_host), runs=runs)
            self.tally.below_resolution += below
        self.not_listed += tail.runs

    def _admitted(self, kind: str, run_id: str, source: str, values: list[float | None]) -> bool:
        """Whether a run with these figures (:data:`_TOTALLED`'s) is added: if so, they are; if not, it is skipped."""
        problem = None
        after = dict(self._running)
        for (name, unit), value in zip(_TOTALLED, values):
            if value is None:
                continue
            if not math.isfinite(value):
                problem = f"its {value!r} {unit} is not a finite number"
                break
            after[name] = self._running[name] + value
            if not math.isfinite(after[name]):
                problem = f"its {value!r} {unit} would make the report's total overflow to infinity"
                break
        if problem is not None:
            what = "trace" if kind == RUN_KIND_TRACE else "carbontracker run"
            self.skipped.append(Skipped(source, f"{what} {run_id} left out: {problem}"))
            return False
        self._running = after
        sums = self._sums_by_kind[kind]
        for (name, _), value in zip(_TOTALLED, values):
            if value is not None:
                sums[name].add(value)
        return True

    def report(self, skipped: list[Skipped], files_read: tuple[str, ...]) -> Report:
        """The report of every run added."""
        return Report(
            runs=tuple(self.runs),
            skipped=tuple(skipped),
            totals=tuple(self.kind_totals(kind) for kind in RUN_KINDS if self._sums_by_kind[kind]["joules"].count),
            files_read=files_read,
            runs_not_listed=self.not_listed,
            tally=self.tally,
        )

    def kind_totals(self, kind: str) -> KindTotals:
        """The totals of the runs of ``kind`` added so far."""
        sums = self._sums_by_kind[kind]
        co2 = sums["co2eq_grams"].value
        host = sums["host_interval_joules"]
        return KindTotals(
            kind=kind,
            runs=sums["joules"].count,
            joules=sums["joules"].value,
            kwh=sums["energy_kwh"].value,
            co2eq_grams=co2,
            host_interval_joules=host.value if host.count else None,
            equivalents=tuple(equivalents(max(co2, 0.0))),
        )
