"""Per trace in SQL: duplicates, nesting, roots and figures, for DuckDB and for Spark.

A span exported twice counts once (the copy with the most kept attributes, the first on a tie); the
topmost spans carrying ``energy.attributed.joules`` (per ``training.rank``: nearest self-or-ancestor
rank) and ``energy.joules`` are found by walking each span's ancestors in a recursive query (a parent
loop ends the walk, as in Python); first start, last end, the root's name and service, clock steps and
the longest measured span duration are aggregated. What a span's row reads, the walks, what a span
counts as and a trace's figures are written once (:func:`span_figures`, :func:`walks`,
:func:`span_flags`, :func:`trace_figures`) and rendered per engine by its
:class:`~otel_joules.report.sql.dialect.Dialect`: the walks differ only in how they are bounded
round a parent loop (DuckDB: by their depth and a trace's size, so its tables hold numbers and
spill; Spark: by the ancestors met, in an array) and in how a table is made.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from otel_joules.report.model import SpanRow
from otel_joules.report.record_checks import checked_attributes
from otel_joules.report.sql.dialect import DUCKDB, SPARK, Dialect, literal
from otel_joules.semconv import (
    ENERGY_ATTRIBUTED_JOULES,
    ENERGY_ATTRIBUTED_SELF_JOULES,
    ENERGY_CLOCK_STEP_S,
    ENERGY_JOULES,
    SPAN_EPOCH,
    TRAINING_RANK,
)


@dataclass(frozen=True)
class TraceSpans:
    """One trace as the SQL aggregation hands it back: what a run is made of, in the order its spans were first read.

    Attributes:
        trace_id: 32 lowercase hex digits.
        sources: The files its spans came from, in the order first read.
        attributed: The topmost spans carrying ``energy.attributed.joules`` (per ``training.rank``).
        attributed_self: Every span carrying ``energy.attributed.self.joules``, in a trace without ``attributed``
            spans (only then are they summed).
        interval: The topmost spans carrying ``energy.joules``.
        epochs: The ``epoch`` spans carrying ``energy.joules``.
        root_name: The first root span's name (by start, then span id); None when no span is a root (a parent loop).
        service_name: The first root's ``service.name`` with one, else the first span's with one.
        start_unix_nano: The earliest start (None when no span has one).
        end_unix_nano: The latest end.
        stepped: How many spans carry ``energy.clock_step_s``.
        longest_duration_s: The longest measured span duration (end - start - clock step, never negative).
    """

    trace_id: str
    sources: tuple[str, ...]
    attributed: tuple[SpanRow, ...]
    attributed_self: tuple[SpanRow, ...]
    interval: tuple[SpanRow, ...]
    epochs: tuple[SpanRow, ...]
    root_name: str | None
    service_name: str | None
    start_unix_nano: int | None
    end_unix_nano: int | None
    stepped: int
    longest_duration_s: float | None


def span_figures(d: Dialect) -> str:
    """SQL: what the walks read of a span (its energies, clock step and own ``training.rank``), in either engine's
    first aggregation table."""
    n = d.walk_number
    return (
        f"{n(ENERGY_JOULES)} AS ej, {n(ENERGY_ATTRIBUTED_JOULES)} AS eaj, {n(ENERGY_ATTRIBUTED_SELF_JOULES)} AS easj, "
        f"{n(ENERGY_CLOCK_STEP_S)} AS clock_step, {d.walk_text(TRAINING_RANK)} AS own_rank"
    )


def span_flags(nested_attributed: str, nested_interval: str, parent: str) -> str:
    """SQL: what a span counts as in its run (the columns of ``flagged``), from the joins that found it nested under
    a share (``nested_attributed``), under interval energy (``nested_interval``) and its ``parent`` (NULL: none)."""
    return f"""d.eaj IS NOT NULL AND {nested_attributed} IS NULL AS top_attributed,
           d.easj IS NOT NULL AS has_self,
           d.ej IS NOT NULL AND {nested_interval} IS NULL AS top_interval,
           d.name = {literal(SPAN_EPOCH)} AND d.ej IS NOT NULL AS is_epoch,
           {parent} IS NULL AS is_root"""


def trace_figures(d: Dialect, f: str = "") -> str:
    """SQL: the aggregates of a trace's figures over ``flagged`` (columns prefixed ``f``): its first root's name and
    service (by start, then span id), its first service, first start, last end, clock steps, longest measured duration."""
    first_root = d.struct([("s", f"coalesce({f}start_ns, 0)"), ("i", f"{f}span_id")])
    zero = d.double("0")
    return f"""{d.min_by}({f}name, {first_root}) FILTER (WHERE {f}is_root) AS root_name,
       {d.min_by}({f}service_name, {first_root}) FILTER (WHERE {f}is_root AND {f}service_name IS NOT NULL) AS root_service,
       {d.min_by}({f}service_name, {f}first_ord) FILTER (WHERE {f}service_name IS NOT NULL) AS first_service,
       min({f}start_ns) AS first_start, max({f}end_ns) AS last_end,
       count(*) FILTER (WHERE {f}clock_step IS NOT NULL) AS stepped,
       max(greatest({zero}, CAST({f}end_ns - {f}start_ns AS DOUBLE) / {d.double("1e9")} - coalesce({f}clock_step, {zero})))
           FILTER (WHERE {f}start_ns IS NOT NULL AND {f}end_ns IS NOT NULL) AS longest"""


def walks(d: Dialect) -> list[str]:
    """The statements that find, from ``d`` (one row per span, keyed ``k``), which spans are nested under a share or
    under interval energy: the walks up each span's parents, written once and rendered per engine (``d``'s
    ``walk_*`` entries bound a walk round a parent loop; ``table`` makes each table)."""
    return [
        # Each span's parent where it is among the spans (a root, or a span whose parent was not exported, has none):
        # the walks step along these.
        d.table("link", """
SELECT c.k, p.k AS pk FROM d c JOIN d p ON p.trace_id = c.trace_id AND p.span_id = c.parent_span_id
"""),
        # Traces with a training.rank, and their span counts (DuckDB's walk_bound): a walk up a trace's parents that
        # is longer than its spans has met a parent loop (each span it meets again says what it said the first time).
        d.table("trace_sizes", """
SELECT trace_id, count(*) AS n, bool_or(own_rank IS NOT NULL) AS ranked FROM d GROUP BY trace_id
"""),
        # The training.rank of each span carrying a share, or of its nearest ancestor with one (none in a trace
        # without any rank: no walk there).
        d.table("ranks", f"""
WITH RECURSIVE walk(k, cur, rank, {d.walk_bound}) AS (
    SELECT d.k, l.pk, d.own_rank, {d.walk_start(("d.k",))}
    FROM d JOIN trace_sizes t ON t.trace_id = d.trace_id AND t.ranked LEFT JOIN link l ON l.k = d.k
    WHERE d.eaj IS NOT NULL AND d.own_rank IS NULL
    UNION ALL
    SELECT w.k, l.pk, p.own_rank, {d.walk_step}
    FROM walk w JOIN d p ON p.k = w.cur LEFT JOIN link l ON l.k = p.k
    WHERE w.rank IS NULL AND {d.walk_go_on}
)
SELECT k, max(rank) AS rank FROM walk GROUP BY k
UNION ALL
SELECT k, own_rank FROM d WHERE eaj IS NOT NULL AND own_rank IS NOT NULL
"""),
        # Spans with an ancestor (never the span itself, met again round a parent loop) carrying the same share
        # (same rank) or the same interval energy: nested, not counted.
        *_nested(
            d, "nested_attributed",
            first="""
WITH shares AS (SELECT d.k, d.trace_id, r.rank FROM d LEFT JOIN ranks r ON r.k = d.k WHERE d.eaj IS NOT NULL)
SELECT s.k, l.pk, s.trace_id, s.rank, p.k IS NOT NULL AND l.pk <> s.k AS nested
FROM shares s JOIN link l ON l.k = s.k LEFT JOIN shares p ON p.k = l.pk AND p.rank IS NOT DISTINCT FROM s.rank
""",
            carried=("rank",),
            reaches="LEFT JOIN ranks pr ON pr.k = p.k",
            nests="p.eaj IS NOT NULL AND pr.rank IS NOT DISTINCT FROM w.rank",
        ),
        *_nested(
            d, "nested_interval",
            first="""
SELECT c.k, l.pk, c.trace_id, p.ej IS NOT NULL AND l.pk <> c.k AS nested
FROM d c JOIN link l ON l.k = c.k JOIN d p ON p.k = l.pk WHERE c.ej IS NOT NULL
""",
            carried=(),
            reaches="",
            nests="p.ej IS NOT NULL",
        ),
    ]


def _nested(d: Dialect, name: str, first: str, carried: Sequence[str], reaches: str, nests: str) -> list[str]:
    """The two statements of one nesting: ``first_<what>`` (``first``: each span with its parent's verdict, which
    decides most spans) and ``name``, the spans nested (the others walk on; the walk's row ``w`` carries ``carried``
    from ``first``, and is nested where the parent ``p`` it reaches, with the joins ``reaches``, ``nests``)."""
    first_table = "first_" + name.removeprefix("nested_")
    columns = "".join(f"{c}, " for c in carried)
    start = "".join(f"f.{c}, " for c in carried)
    step = "".join(f"w.{c}, " for c in carried)
    return [
        d.table(first_table, first),
        # (The parent's verdict is a table of its own: a recursive query's parts are held in memory, a table spills.)
        d.table(name, f"""
WITH RECURSIVE walk(k, cur, {columns}nested, {d.walk_bound}) AS (
    SELECT f.k, l.pk, {start}false, {d.walk_start(("f.k", "f.pk"))}
    FROM {first_table} f JOIN link l ON l.k = f.pk JOIN trace_sizes t ON t.trace_id = f.trace_id
    WHERE NOT f.nested
    UNION ALL
    SELECT w.k, l.pk, {step}p.k <> w.k AND {nests}, {d.walk_step}
    FROM walk w JOIN d p ON p.k = w.cur {reaches + " " if reaches else ""}LEFT JOIN link l ON l.k = p.k
    WHERE NOT w.nested AND {d.walk_go_on}
)
SELECT k FROM {first_table} WHERE nested
UNION ALL
SELECT k FROM walk WHERE nested
"""),
    ]


#: What a span counts as in its run, over the walks' tables (DuckDB's ``flagged`` table, Spark's view of it).
FLAGGED = f"""
SELECT d.*,
       {span_flags("na.k", "ni.k", "l.k")}
FROM d
LEFT JOIN nested_attributed na ON na.k = d.k
LEFT JOIN nested_interval ni ON ni.k = d.k
LEFT JOIN link l ON l.k = d.k
"""

# What the walks read of each span's attributes, by json_transform's names.
_WALK_KEYS = json.dumps(dict.fromkeys(
    (ENERGY_JOULES, ENERGY_ATTRIBUTED_JOULES, ENERGY_ATTRIBUTED_SELF_JOULES, ENERGY_CLOCK_STEP_S, TRAINING_RANK), "JSON"
))


def spans_once(d: Dialect) -> str:
    """The table ``d``: one row per span, keyed ``k`` for the walks, with what they read of it (:func:`span_figures`).

    One copy of each span: the one with the most kept attributes, the first read on a tie. Its place in the order
    Python would have read it (``first_ord``) is where it was first read. The copy is found by its row and joined
    back, so the choice sorts row identities, never the spans' attributes.
    """
    order = d.struct([("n", "-n_attrs"), ("o", "ord")])
    return d.table("d", f"""
SELECT trace_id, span_id, parent_span_id, name, start_ns, end_ns, service_name, file_idx, first_ord, {d.span_kept},
       {span_figures(d)}, {d.span_key} AS k
FROM (
    SELECT s.trace_id, s.span_id, s.parent_span_id, s.name, s.start_ns, s.end_ns, s.service_name, s.attrs, p.file_idx,
           p.first_ord, p.rid, {d.walk_attributes("s.attrs", _WALK_KEYS)}
    FROM (
        SELECT {d.min_by}(rid, {order}) AS rid, {d.min_by}(file_idx, {order}) AS file_idx, min(ord) AS first_ord
        FROM (SELECT s.trace_id, s.span_id, s.n_attrs, {d.row_id} AS rid, file_idx, {d.read_order} AS ord
              FROM {d.spans_with_files})
        GROUP BY trace_id, span_id
    ) p JOIN spans s ON {d.row_id} = p.rid
)
""")


def sources(d: Dialect) -> str:
    """The table ``sources``: each trace's files in the order first read, which is their index order (files are
    numbered as they are found and read in that order)."""
    return d.table(
        "sources", f"SELECT s.trace_id, {d.sorted_set('file_idx')} AS sources FROM {d.spans_with_files} GROUP BY s.trace_id"
    )


#: The DuckDB statements that resolve every trace, in order (SpanStore._aggregate).
AGGREGATE = [
    spans_once(DUCKDB),
    *walks(DUCKDB),
    sources(DUCKDB),
]

#: Then the flags of each span and the figures of each trace.
FIGURES = [
    DUCKDB.table("flagged", FLAGGED),
    f"""
CREATE TEMP TABLE figures AS
SELECT trace_id,
       {trace_figures(DUCKDB)},
       bool_or(top_attributed) AS any_attributed,
       CASE WHEN bool_or(top_attributed) THEN 1 WHEN bool_or(has_self) THEN 2 WHEN bool_or(top_interval) THEN 3 END
           AS basis_kind
FROM flagged
GROUP BY trace_id
""",
]

#: ``figures.basis_kind``: a trace's basis (trace_runs' ``_basis``): topmost inclusive shares, every span's
#: self share, topmost interval energy. NULL: none (a trace without energy).
BASIS_KIND_ATTRIBUTED, BASIS_KIND_SELF, BASIS_KIND_INTERVAL = 1, 2, 3


# One row per span a run is made of, of the first $limit traces with energy after ($start, $trace) in report order,
# each trace's rows together and in read order: streamed (an external sort where it must), never a trace's spans gathered in one value.
TRACES = """
SELECT t.trace_id, s.sources, t.root_name, t.root_service, t.first_service, t.first_start, t.last_end, t.stepped,
       t.longest, f.span_id, f.parent_span_id, f.name, f.start_ns, f.end_ns, f.service_name, CAST(sp.attrs AS VARCHAR),
       f.file_idx, f.top_attributed, f.has_self, f.top_interval, f.is_epoch
FROM (
    SELECT * FROM figures
    WHERE basis_kind IS NOT NULL
      AND (coalesce(first_start, 0) > $start OR (coalesce(first_start, 0) = $start AND trace_id > $trace))
    ORDER BY coalesce(first_start, 0), trace_id LIMIT $limit
) t JOIN sources s USING (trace_id)
JOIN flagged f ON f.trace_id = t.trace_id
    -- Self shares are summed only in a trace without an inclusive share (trace_runs' basis).
    AND (f.top_attributed OR (f.has_self AND NOT t.any_attributed) OR f.top_interval OR f.is_epoch)
JOIN spans sp ON sp.rowid = f.rid
ORDER BY coalesce(t.first_start, 0), t.trace_id, f.first_ord
"""

# The traces (of those asked) a run is made of: with a span of a basis (trace_runs' basis is not None).
WITH_ENERGY = """
SELECT DISTINCT trace_id FROM flagged
WHERE trace_id IN (SELECT unnest(?)) AND (top_attributed OR has_self OR top_interval)
"""


#: The Spark statements that resolve every trace, in order (spark_engine.SparkSpanStore.traces): the same, rendered
#: for Spark (cached tables, a (file, row) struct for a row's identity, a span keyed by its ids).
SPARK_AGGREGATE = [
    spans_once(SPARK),
    *walks(SPARK),
    sources(SPARK),
]

#: Spark: every trace's figures and the spans a run is made of (in one array per trace, in read order).
SPARK_TRACES = f"""
WITH flagged AS ({FLAGGED})
SELECT f.trace_id, first(s.sources),
       {trace_figures(SPARK, "f.")},
       transform(array_sort(collect_list(named_struct(
           'o', f.first_ord, 'span_id', f.span_id, 'parent', f.parent_span_id, 'name', f.name, 'start', f.start_ns,
           'end', f.end_ns, 'service', f.service_name, 'attrs', f.attrs, 'file', f.file_idx,
           'flags', array(f.top_attributed, f.has_self, f.top_interval, f.is_epoch)))
           FILTER (WHERE f.top_attributed OR f.has_self OR f.top_interval OR f.is_epoch)), x -> x)
FROM flagged f JOIN sources s ON s.trace_id = f.trace_id
GROUP BY f.trace_id
"""


def trace_spans(files: Sequence[str], figures: Sequence[Any], spans: Iterable[Sequence[Any]]) -> TraceSpans:
    """One trace's :class:`TraceSpans` from its figures (id, sources, root name and service, first service,
    start, end, clock steps, longest duration) and its counted spans (id, parent, name, start, end, service,
    attributes as JSON, file index, then a flag per group), as either engine's trace query returns them."""
    (trace_id, sources, root_name, root_service, first_service, start, end, stepped, longest) = figures
    groups: tuple[list[SpanRow], ...] = ([], [], [], [])
    for span_id, parent, name, span_start, span_end, service, attrs, file_idx, *flags in spans:
        span = SpanRow(
            trace_id=trace_id,
            span_id=span_id,
            parent_span_id=parent,
            name=name,
            start_unix_nano=span_start,
            end_unix_nano=span_end,
            service_name=service,
            attributes=checked_attributes(json.loads(attrs)),
            source=files[file_idx],
        )
        for group, flag in zip(groups, flags):
            if flag:
                group.append(span)
    return TraceSpans(
        trace_id=trace_id,
        sources=tuple(files[i] for i in sources),
        attributed=tuple(groups[0]),
        attributed_self=tuple(groups[1]),
        interval=tuple(groups[2]),
        epochs=tuple(groups[3]),
        root_name=root_name,
        service_name=root_service if root_service is not None else first_service,
        start_unix_nano=start,
        end_unix_nano=end,
        stepped=int(stepped),
        longest_duration_s=longest,
    )
