"""The runs a report does not list, added up in DuckDB: :meth:`~otel_joules.report.sql.store.SpanStore.tail`'s SQL.

Per trace with energy after a place in report order, what :mod:`otel_joules.report.trace_runs` adds
up, computed the same way (sums in read order from 0.0, the same products and quotient), then the
carbon figures as :mod:`otel_joules.report.run_carbon` computes them, and each figure's exact sum.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

from otel_joules.report.sql.dialect import attribute_number, json_path, literal
from otel_joules.semconv import (
    CARBON_INTENSITY_GCO2EQ_PER_KWH,
    CARBON_PUE,
    ENERGY_ATTRIBUTED_CO2EQ_GRAMS,
    ENERGY_ATTRIBUTED_SELF_CO2EQ_GRAMS,
    ENERGY_BELOW_RESOLUTION,
    ENERGY_CO2EQ_GRAMS,
    ENERGY_SOURCE,
    SOURCE_MIXED,
    SOURCE_PARTIAL,
)


def _sequential_sum(values: str, order: str, condition: str) -> str:
    """SQL: ``values`` added one by one in ``order`` from 0.0, as Python's ``sum`` adds a list (the same float)."""
    return (
        f"list_reduce(coalesce(list({values} ORDER BY {order}) FILTER (WHERE {condition}), []), "
        "lambda a, b: a + b, CAST(0 AS DOUBLE))"
    )


def _source_text(attrs: str) -> str:
    """SQL: the span's ``energy.source`` if it is non-empty text (energy_parts.span_source), else NULL."""
    return (
        f"CASE WHEN json_type({attrs}, {json_path(ENERGY_SOURCE)}) = 'VARCHAR' "
        f"THEN nullif(json_extract_string({attrs}, {json_path(ENERGY_SOURCE)}), '') END"
    )


def _run_number(key: str) -> str:
    return attribute_number(key, "sp.attrs")


# Per trace with energy, after a place in report order ($start, $trace) (start, then trace id): what trace_runs' ``_trace_run`` adds up,
# computed the same way (sums in read order from 0.0, the same products and quotient), for the runs a report does not
# list: its joules, the host's interval joules, the PUE it recorded (one value over its counted spans, else NULL), the
# intensity it recorded (the one value, else energy-weighted; NULL unless every counted span has one), the grams it recorded (NULL unless
# every counted span has them), its merged energy.source and whether a span was below resolution.
TAIL_SPANS = f"""
CREATE OR REPLACE TEMP TABLE tail_spans AS
SELECT t.trace_id, t.basis_kind AS kind, coalesce(t.first_start, 0) AS start_key, f.first_ord,
       (t.basis_kind = 1 AND f.top_attributed) OR (t.basis_kind = 2 AND f.has_self)
           OR (t.basis_kind = 3 AND f.top_interval) AS counted,
       f.top_interval AS interval,
       coalesce(CASE t.basis_kind WHEN 1 THEN f.eaj WHEN 2 THEN f.easj ELSE f.ej END, 0.0) + 0.0 AS j,
       coalesce(f.ej, 0.0) + 0.0 AS ej,
       {_run_number(CARBON_PUE)} AS pue,
       {_run_number(CARBON_INTENSITY_GCO2EQ_PER_KWH)} AS intensity,
       CASE t.basis_kind WHEN 1 THEN {_run_number(ENERGY_ATTRIBUTED_CO2EQ_GRAMS)}
           WHEN 2 THEN {_run_number(ENERGY_ATTRIBUTED_SELF_CO2EQ_GRAMS)} ELSE {_run_number(ENERGY_CO2EQ_GRAMS)} END AS grams,
       {_source_text('sp.attrs')} AS source,
       coalesce(json_type(sp.attrs, {json_path(ENERGY_BELOW_RESOLUTION)}) = 'BOOLEAN'
           AND json_extract_string(sp.attrs, {json_path(ENERGY_BELOW_RESOLUTION)}) = 'true', false) AS below
FROM figures t JOIN flagged f ON f.trace_id = t.trace_id JOIN spans sp ON sp.rowid = f.rid
WHERE t.basis_kind IS NOT NULL AND (coalesce(t.first_start, 0) > $start OR (coalesce(t.first_start, 0) = $start AND t.trace_id > $trace))
  AND ((t.basis_kind = 1 AND f.top_attributed) OR (t.basis_kind = 2 AND f.has_self) OR f.top_interval)
"""
# Aggregates over every trace held their groups in memory (2 GB of input ran out of the limit), so a trace with one
# counted span and at most one interval span, the most, is a join of those two rows (joins spill): the same
# operations on one value (0.0 + x; one intensity is itself). Only the others are grouped, gathering values in read order.
TAIL_SHAPES = """
CREATE OR REPLACE TEMP TABLE tail_shapes AS
SELECT trace_id, count(*) FILTER (WHERE counted) <= 1 AND count(*) FILTER (WHERE interval) <= 1 AS single
FROM tail_spans GROUP BY trace_id
"""
_ZERO = "CAST(0 AS DOUBLE)"
TAIL_SINGLE = f"""
SELECT c.trace_id, c.kind, c.start_key, {_ZERO} + c.j AS joules,
       CASE WHEN c.kind <> 3 THEN {_ZERO} + coalesce(i.ej, {_ZERO}) END AS host,
       c.pue AS recorded_pue,
       c.intensity AS recorded_intensity,
       {_ZERO} + c.grams AS recorded_grams, c.source, c.below OR coalesce(i.below, false) AS below
FROM tail_spans c JOIN tail_shapes h ON h.trace_id = c.trace_id AND h.single
LEFT JOIN tail_spans i ON i.trace_id = c.trace_id AND i.interval
WHERE c.counted
"""
TAIL_MANY = f"""
SELECT trace_id, first(kind) AS kind, first(start_key) AS start_key,
       {_sequential_sum('j', 'first_ord', 'counted')} AS joules,
       CASE WHEN first(kind) <> 3 THEN {_sequential_sum('ej', 'first_ord', 'interval')} END AS host,
       CASE WHEN count(*) FILTER (WHERE counted AND pue IS NOT NULL) = 0 THEN NULL
            WHEN count(*) FILTER (WHERE counted AND pue IS NULL) = 0 AND count(DISTINCT pue) FILTER (WHERE counted) = 1
            THEN min(pue) FILTER (WHERE counted) END AS recorded_pue,
       CASE WHEN count(*) FILTER (WHERE counted AND intensity IS NULL) = 0 THEN
            CASE WHEN count(DISTINCT intensity) FILTER (WHERE counted) = 1 THEN min(intensity) FILTER (WHERE counted)
                 WHEN {_sequential_sum('j', 'first_ord', 'counted')} > 0
                 THEN {_sequential_sum('j * intensity', 'first_ord', 'counted')} / {_sequential_sum('j', 'first_ord', 'counted')}
                 ELSE arg_min(intensity, first_ord) FILTER (WHERE counted) END END AS recorded_intensity,
       CASE WHEN count(*) FILTER (WHERE counted AND grams IS NULL) = 0 THEN {_sequential_sum('grams', 'first_ord', 'counted')} END
           AS recorded_grams,
       CASE WHEN count(source) FILTER (WHERE counted) = 0 THEN NULL
            WHEN bool_or(source = {literal(SOURCE_PARTIAL)}) FILTER (WHERE counted) THEN {literal(SOURCE_PARTIAL)}
            WHEN count(DISTINCT source) FILTER (WHERE counted) = 1 THEN min(source) FILTER (WHERE counted)
            ELSE {literal(SOURCE_MIXED)} END AS source,
       bool_or(below) FILTER (WHERE counted OR interval) AS below
FROM tail_spans JOIN tail_shapes USING (trace_id) WHERE NOT single GROUP BY trace_id
"""
TAIL_RUNS = f"CREATE OR REPLACE TEMP TABLE tail_runs AS {TAIL_SINGLE} UNION ALL {TAIL_MANY}"

# The tail's carbon figures as run_carbon computes them ($pue: --pue or NULL; $override: the intensity of --intensity or
# --country, or NULL; $fallback: the fallback intensity, NULL when no run needs it), numbered in report order.
TAIL_CARBON = """
CREATE OR REPLACE TEMP TABLE tail_carbon AS
SELECT *, CASE WHEN $override IS NOT NULL THEN kwh * $override
               WHEN recorded_intensity IS NOT NULL THEN kwh * recorded_intensity
               WHEN recorded_grams IS NOT NULL AND $pue IS NULL THEN recorded_grams
               ELSE kwh * $fallback END AS grams
FROM (
    SELECT *, joules * pue_used / $joules_per_kwh AS kwh
    FROM (
        SELECT *, coalesce($pue, CASE WHEN isfinite(recorded_pue) AND recorded_pue >= 1.0 THEN recorded_pue END, 1.0)
                  AS pue_used,
               $pue IS NULL AND NOT coalesce(isfinite(recorded_pue) AND recorded_pue >= 1.0, false) AS pue_default,
               row_number() OVER (ORDER BY start_key, trace_id) AS pos
        FROM tail_runs
    )
)
"""
TAIL_NEEDS_FALLBACK = """
SELECT count(*) FROM tail_runs
WHERE $override IS NULL AND recorded_intensity IS NULL AND (recorded_grams IS NULL OR $pue IS NOT NULL)
"""
#: The figures of a run that enter a total, as tail_carbon's columns (aggregate._TOTALLED's order).
TAIL_FIGURES = ("joules", "kwh", "grams", "host")
TAIL_CHECK = (
    "SELECT count(*), "
    "count(*) FILTER (WHERE NOT (" + " AND ".join(f"coalesce(isfinite({c}) AND {c} >= 0, {'true' if c == 'host' else 'false'})" for c in TAIL_FIGURES) + ")), "
    + ", ".join(f"coalesce(max({c}), 0.0), count({c})" for c in TAIL_FIGURES) + " FROM tail_carbon"
)
# Each figure's exact sum: every value x > 0 is m * 2^e with whole m < 2^55 (e a little below x's exponent; scaled in
# two steps, each exact), the m of one e added as HUGEINT; Python adds the groups as fractions, exactly.
EXACT_PARTS = """
SELECT e, sum(CAST(m AS HUGEINT)), count(*) FILTER (WHERE m <> floor(m))
FROM (
    SELECT e, (x * pow(2.0, CAST(least(-e, 600) AS DOUBLE))) * pow(2.0, CAST(-e - least(-e, 600) AS DOUBLE)) AS m
    FROM (SELECT x, greatest(CAST(floor(log2(x)) AS BIGINT) - 53, -1074) AS e FROM (SELECT {column} AS x FROM tail_carbon)
          WHERE x > 0)
)
GROUP BY e
"""
TAIL_TALLY = """
SELECT kind, source, count(*), min(pos), count(*) FILTER (WHERE below), bool_or(pue_default), bool_or(host IS NOT NULL)
FROM tail_carbon GROUP BY kind, source
"""
TAIL_ROWS = """
SELECT t.trace_id, s.sources[1], t.kind, t.source, coalesce(t.below, false), t.pue_default, t.joules, t.kwh, t.grams, t.host
FROM tail_carbon t JOIN sources s USING (trace_id) ORDER BY t.pos
"""


@dataclass
class TailTotals:
    """What the runs after the listed ones add up to (:meth:`SpanStore.tail`), when no figure of theirs needs a check
    run by run (none is infinite, negative or so large that a total could overflow).

    Attributes:
        runs: How many.
        exact: Per figure (:data:`TAIL_FIGURES`), ``(e, m)`` pairs: its exact sum is the sum of ``m * 2**e``.
        counts: Per figure, how many values it has (host: the attributed runs).
        tally: ``(basis kind, source, runs, first position, below resolution, default PUE, with host)`` groups.
        rows: Instead of the above, when a figure needs checking run by run: the runs in report order (trace id, its
            first file's number, basis kind, source, below resolution, default PUE, then :data:`TAIL_FIGURES`).
    """

    runs: int
    exact: dict[str, list[tuple[int, int]]]
    counts: dict[str, int]
    tally: list[tuple[Any, ...]]
    rows: Iterator[tuple[Any, ...]] | None = None
