"""Spans and carbontracker runs -> runs with joules, kWh and CO2eq -> one report.

:func:`build_report` reads the inputs (:mod:`otel_joules.report.readers`) into the SQL
engine (:mod:`otel_joules.report.sql`), which resolves each trace, makes traces runs
(:mod:`otel_joules.report.trace_runs`), summarises log pairs
(:mod:`otel_joules.report.carbontracker_runs`), counts a training exported both ways once,
and adds up the totals. A run whose figures are not finite, or whose figures would make a
total overflow to infinity, is left out with its reason (the totals stay numbers and every
other run is kept); totals are exactly rounded sums (``math.fsum``).
"""

from __future__ import annotations

import math
import os
from typing import Any, Iterable

from otel_joules.carbon.equivalents import equivalents
from otel_joules.carbon.units import validate_pue
from otel_joules.errors import ConfigurationError
from otel_joules.report.carbontracker_runs import carbontracker_summary
from otel_joules.report.model import Report, RunSummary, Skipped
from otel_joules.report.readers import read_inputs
from otel_joules.report.run_carbon import CarbonOptions, Intensities
from otel_joules.report.sql import SpanStore
from otel_joules.report.trace_runs import runs_from_traces


def build_report(
    paths: Iterable[str | os.PathLike[str]],
    *,
    intensity_gco2eq_per_kwh: float | None = None,
    country: str | None = None,
    pue: float | None = None,
    engine: str = "duckdb",
    spark_session: Any = None,
) -> Report:
    """Read every path and aggregate it into one :class:`Report` (see :mod:`otel_joules.report`).

    ``engine``: ``duckdb`` (embedded, the default) or ``spark`` (:mod:`otel_joules.report.spark_engine`;
    ``spark_session`` to use a running session; paths may then be Hadoop URIs).

    Raises:
        ConfigurationError: ``intensity_gco2eq_per_kwh``, ``country``, ``pue`` or ``engine`` is invalid.
        ReportError: the engine's library is not installed (the message names the extra).
    """
    if pue is not None:
        pue = validate_pue(pue)
    if intensity_gco2eq_per_kwh is not None and country is not None:
        raise ConfigurationError("give either an explicit intensity or a country, not both")
    intensities = Intensities(CarbonOptions(intensity_gco2eq_per_kwh, country, pue))
    if engine == "spark":
        from otel_joules.report.spark_engine import SparkSpanStore, is_uri

        paths = [os.fspath(p) for p in paths]
        uris = [p for p in paths if is_uri(p)]
        local = [p for p in paths if not is_uri(p)]
        with SparkSpanStore(spark_session) as spark_store:
            inputs = read_inputs(local, spark_store)  # type: ignore[arg-type]
            for uri in uris:
                read, uri_skipped = spark_store.load_uri(uri)
                inputs.files_read.extend(read)
                inputs.skipped.extend(Skipped(path, why) for path, why in uri_skipped)
            skipped = list(inputs.skipped)
            span_runs = runs_from_traces(spark_store.traces(), intensities, skipped)
    elif engine == "duckdb":
        with SpanStore() as store:
            inputs = read_inputs(paths, store)
            skipped = list(inputs.skipped)
            span_runs = runs_from_traces(store.traces(), intensities, skipped)
    else:
        raise ConfigurationError(f"unknown report engine {engine!r}: use duckdb or spark")
    traced = {run.run_id for run in span_runs}
    runs = []
    for log in inputs.carbontracker_runs:
        if log.trace_id is not None and log.trace_id in traced:
            # The same training, exported as spans too: count it once, from the spans
            # (exact durations rather than the log's centiseconds).
            skipped.append(
                Skipped(log.std_log, f"same training as trace {log.trace_id}, whose spans are counted instead")
            )
            continue
        runs.append(carbontracker_summary(log, intensities))
    runs = _within_totals(runs + span_runs, skipped)
    total_joules = math.fsum(r.joules for r in runs)
    total_kwh = math.fsum(r.energy_kwh for r in runs)
    total_co2 = math.fsum(r.co2eq_grams for r in runs)
    return Report(
        runs=tuple(runs),
        skipped=tuple(skipped),
        total_joules=total_joules,
        total_kwh=total_kwh,
        total_co2eq_grams=total_co2,
        equivalents=equivalents(max(total_co2, 0.0)),
        files_read=tuple(dict.fromkeys(inputs.files_read)),
        host_interval_joules=(
            math.fsum(r.host_interval_joules for r in runs if r.host_interval_joules is not None)
            if any(r.host_interval_joules is not None for r in runs)
            else None
        ),
    )


# The figures of a run that enter a report total, with how a skip reason names them.
_TOTALLED = (
    ("joules", "J"),
    ("energy_kwh", "kWh"),
    ("co2eq_grams", "g CO2eq"),
    ("host_interval_joules", "J of host interval energy"),
)


def _within_totals(runs: list[RunSummary], skipped: list[Skipped]) -> list[RunSummary]:
    """The runs whose figures are finite and keep every total finite; each other one skipped with its reason.

    Every figure is checked on its own when read, but products (kWh x an intensity) and sums
    of finite values can still overflow; the run that would make a total infinite is left
    out, not the report.
    """
    kept: list[RunSummary] = []
    totals = dict.fromkeys((name for name, _ in _TOTALLED), 0.0)
    for run in runs:
        problem = None
        after = dict(totals)
        for name, unit in _TOTALLED:
            value = getattr(run, name)
            if value is None:
                continue
            if not math.isfinite(value):
                problem = f"its {value!r} {unit} is not a finite number"
                break
            after[name] = totals[name] + value
            if not math.isfinite(after[name]):
                problem = f"its {value!r} {unit} would make the report's total overflow to infinity"
                break
        if problem is not None:
            what = "trace" if run.kind == "trace" else "carbontracker run"
            skipped.append(
                Skipped(run.sources[0] if run.sources else run.run_id, f"{what} {run.run_id} left out: {problem}")
            )
            continue
        totals = after
        kept.append(run)
    return kept
