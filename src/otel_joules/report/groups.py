"""Totals per group of spans: ``otel-joules report --by service,span,host,user,job,day``.

A group is the spans sharing the values of the keys given; its energy is the sum of its
spans' attributed self shares (``energy.attributed.self.joules``: each span's share without
its children's), so the groups of any grouping add up to the report's total without
counting a nested span twice, and never the host's interval energy (``energy.joules``, the
same machine-wide joules for every span that ran at the same time). A span exported twice
(a CSV and an OTLP file of one run) counts once, the copy with the most attributes kept.

Keys (any other name is a span or resource attribute, the span's own value first):

==========  ===========================================================================
``service`` the ``service.name`` resource attribute (every export format keeps it)
``span``    the span's name
``host``    ``host.name`` (the SDK's and otel-joules' resource detectors)
``user``    ``process.owner`` (the SDK's process resource detector), else ``user.name``
``job``     ``slurm.job.id``, else ``torchrun.run_id`` (otel-joules' resource detector,
            :mod:`otel_joules.delivery.resource`)
``day``     the UTC day the span started, ``YYYY-MM-DD``
==========  ===========================================================================

Which exports hold what: OTLP/JSON files keep every span and resource attribute. The CSV,
JSON-lines and Parquet exports keep the span's ``energy.*``, ``carbon.*`` and ``training.*``
attributes and the resource's identities: host, user, job and service instance
(:data:`~otel_joules.semconv.EXPORTED_RESOURCE_ATTRIBUTES`, :mod:`otel_joules.exporters.records`).
A span without a key's value falls in the group whose value is none (shown ``-``).

Every group says whether its energy was measured (``energy_source``: ``measured``,
``estimate``, ``mixed`` when its spans differ, ``partial`` when one left out a domain that
could not be read, so the joules are low) and whether a span was below a counter's
resolution. Spans without a self share (exports written before attribution) are left out
of the groups and counted in :attr:`GroupReport.spans_without_share`: their interval energy
cannot be split without counting it twice. Carbontracker logs have no spans to group.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Sequence

from otel_joules.errors import ConfigurationError
from otel_joules.exporters.safe_open import open_replace
from otel_joules.report.model import ReportError, Skipped, skipped_line
from otel_joules.semconv import HOST_NAME, SERVICE_NAME

#: The short keys of ``--by``, and what each stands for (the module docstring's table).
GROUP_KEYS: dict[str, str] = {
    "service": SERVICE_NAME,
    "span": "the span's name",
    "host": HOST_NAME,
    "user": "process.owner, else user.name",
    "job": "slurm.job.id, else torchrun.run_id",
    "day": "the UTC day the span started (YYYY-MM-DD)",
}
#: The attributes each short key reads, in order (the first one a span has).
KEY_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "host": (HOST_NAME,),
    "user": ("process.owner", "user.name"),
    "job": ("slurm.job.id", "torchrun.run_id"),
}
# The keys that read a span's own fields, not an attribute.
_BUILT_IN = ("service", "span", "day")
# An attribute name as OpenTelemetry writes them; anything else is refused before it reaches SQL.
_ATTRIBUTE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:/@-]{0,255}$")


def parse_group_keys(text: str) -> tuple[str, ...]:
    """``service,host`` -> ``("service", "host")``.

    Raises:
        ConfigurationError: an empty list, a repeated key, or a name that is no attribute name.
    """
    keys = tuple(part.strip() for part in text.split(","))
    if not text.strip() or any(not key for key in keys):
        raise ConfigurationError(
            f"--by {text!r}: give comma-separated keys, e.g. --by service,host ({', '.join(GROUP_KEYS)} "
            "or any span or resource attribute name)"
        )
    for key in keys:
        if key not in GROUP_KEYS and not _ATTRIBUTE_NAME.match(key):
            raise ConfigurationError(
                f"--by: {key[:80]!r} is neither a key ({', '.join(GROUP_KEYS)}) nor an attribute name "
                "(letters, digits and _ . : / @ -)"
            )
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise ConfigurationError(f"--by: {', '.join(repeated)} given more than once")
    return keys


@dataclass(frozen=True)
class Group:
    """The spans sharing one value per key, and their energy.

    Attributes:
        values: One value per key of :attr:`GroupReport.by`, as text; None where the spans have none.
        energy_joules: The sum of the spans' ``energy.attributed.self.joules``.
        energy_source: ``measured``, ``estimate``, ``mixed`` or ``partial``; None when no span says.
        below_resolution: A span was shorter than a counter's update period (its figure is quantised).
        spans: Spans counted.
        traces: Traces those spans belong to.
    """

    values: tuple[str | None, ...]
    energy_joules: float
    energy_source: str | None
    below_resolution: bool
    spans: int
    traces: int


@dataclass(frozen=True)
class GroupReport:
    """``otel-joules report --by``: the groups, largest first, and what was left out.

    Attributes:
        by: The keys, in the order given.
        groups: One per distinct combination of values, by energy (largest first), then values.
        total_joules: The groups' joules added up.
        spans_without_share: Spans read that have no ``energy.attributed.self.joules`` (left out).
        skipped: Inputs and records left out, each with its reason.
        files_read: The span files read.
    """

    by: tuple[str, ...]
    groups: tuple[Group, ...]
    total_joules: float
    spans_without_share: int = 0
    skipped: tuple[Skipped, ...] = ()
    files_read: tuple[str, ...] = ()


def group_report(
    by: Sequence[str],
    rows: Sequence[tuple[Any, ...]],
    *,
    spans_without_share: int = 0,
    skipped: Sequence[Skipped] = (),
    files_read: Sequence[str] = (),
) -> GroupReport:
    """A :class:`GroupReport` from the grouping query's rows (:func:`otel_joules.report.sql.group_rows`).

    Each row is the key values, then joules, source, below-resolution flag, spans and traces.
    """
    width = len(by)
    groups = []
    for row in rows:
        values = tuple(None if value is None else str(value) for value in row[:width])
        joules, source, below, spans, traces = row[width:]
        groups.append(Group(values, float(joules or 0.0), source, bool(below), int(spans), int(traces)))
    groups.sort(key=lambda g: (-g.energy_joules, tuple((v is None, v or "") for v in g.values)))
    return GroupReport(
        by=tuple(by),
        groups=tuple(groups),
        total_joules=math.fsum(group.energy_joules for group in groups),
        spans_without_share=spans_without_share,
        skipped=tuple(skipped),
        files_read=tuple(files_read),
    )


def group_source_label(group: Group) -> str:
    """``measured``, ``estimate``, ``mixed``, ``partial`` or ``not stated``; ``(below resolution)`` when quantised."""
    label = group.energy_source or "not stated"
    return f"{label} (below resolution)" if group.below_resolution else label


#: Printed under every group table: what was summed.
GROUP_NOTE = (
    "Each group sums its spans' attributed self shares (energy.attributed.self.joules: a span's share without its "
    "children's), so the groups add up to the report's total; never the host's interval energy. '-': the spans "
    "have no such value (CSV, JSON-lines and Parquet exports keep only the resource's host, user and job "
    "identities)."
)


def format_groups(report: GroupReport) -> str:
    """The groups as a text table, then their total and what was left out."""
    headers = [*report.by, "joules", "kWh", "source", "spans", "traces"]
    rows = [
        (
            *(value if value is not None else "-" for value in group.values),
            f"{group.energy_joules:.3f}",
            f"{group.energy_joules / 3.6e6:.9f}",
            group_source_label(group),
            str(group.spans),
            str(group.traces),
        )
        for group in report.groups
    ]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    numeric = {len(report.by), len(report.by) + 1, len(report.by) + 3, len(report.by) + 4}

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    out = [
        f"otel-joules report by {', '.join(report.by)}: {len(report.groups)} group(s) from "
        f"{len(report.files_read)} file(s)",
    ]
    if report.skipped:
        out.append(skipped_line(len(report.skipped)))
    out.append("")
    if rows:
        out.append(line(headers))
        out.append(line(["-" * w for w in widths]))
        out.extend(line(row) for row in rows)
        out.append("")
    out.append(f"Total: {report.total_joules:.3f} J ({report.total_joules / 3.6e6:.9f} kWh IT energy, no PUE)")
    if report.spans_without_share:
        out.append(
            f"  {report.spans_without_share} span(s) without energy.attributed.self.joules left out (exports "
            "written before attribution): run the report without --by to count them"
        )
    out.append("")
    out.append(GROUP_NOTE)
    return "\n".join(out)


def groups_dict(report: GroupReport) -> dict[str, Any]:
    """The groups as plain JSON-ready data (``otel-joules report --by KEYS --json``)."""
    return {
        "by": list(report.by),
        "groups": [
            {
                "keys": dict(zip(report.by, group.values)),
                "energy_joules": group.energy_joules,
                "energy_kwh": group.energy_joules / 3.6e6,
                "energy_source": group.energy_source,
                "below_resolution": group.below_resolution,
                "spans": group.spans,
                "traces": group.traces,
            }
            for group in report.groups
        ],
        "totals": {
            "groups": len(report.groups),
            "energy_joules": report.total_joules,
            "energy_kwh": report.total_joules / 3.6e6,
            "spans_without_share": report.spans_without_share,
        },
        "skipped": [{"path": item.path, "reason": item.reason} for item in report.skipped],
        "files_read": list(report.files_read),
    }


#: The columns of ``--csv`` and ``--parquet`` files after the keys.
TABLE_COLUMNS = ("energy_joules", "energy_kwh", "energy_source", "below_resolution", "spans", "traces")


def _table_rows(report: GroupReport) -> list[tuple[Any, ...]]:
    return [
        (*group.values, group.energy_joules, group.energy_joules / 3.6e6, group.energy_source,
         group.below_resolution, group.spans, group.traces)
        for group in report.groups
    ]


def write_groups_csv(report: GroupReport, path: str | os.PathLike[str]) -> None:
    """``--csv FILE``: a header (the keys, then :data:`TABLE_COLUMNS`), one row per group; empty cell: no value.

    Raises:
        ReportError: the file cannot be written (a symbolic link at the path included).
    """
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow([*report.by, *TABLE_COLUMNS])
    for row in _table_rows(report):
        writer.writerow(["" if cell is None else ("true" if cell is True else "false" if cell is False else
                                                  repr(cell) if isinstance(cell, float) else cell) for cell in row])
    _write_bytes(path, text.getvalue().encode("utf-8", "backslashreplace"), "CSV")


def write_groups_parquet(report: GroupReport, path: str | os.PathLike[str]) -> None:
    """``--parquet FILE``: the same columns as ``--csv``, typed (keys as strings), written by DuckDB.

    Raises:
        ReportError: the file cannot be written, or DuckDB is missing (``pip install 'otel-joules[report]'``).
    """
    from otel_joules.report.sql import groups_parquet_bytes

    _write_bytes(path, groups_parquet_bytes(report.by, TABLE_COLUMNS, _table_rows(report)), "Parquet")


def _write_bytes(path: str | os.PathLike[str], data: bytes, what: str) -> None:
    try:
        # Opened here: a link planted at the path is refused, not written through.
        with os.fdopen(open_replace(path), "wb") as handle:
            handle.write(data)
    except OSError as exc:
        raise ReportError(f"cannot write the {what} file {os.fspath(path)!r}: {exc.strerror or exc}") from exc


def build_group_report(paths: Sequence[str | os.PathLike[str]], by: Sequence[str]) -> GroupReport:
    """Read the span files among ``paths`` and group their spans by ``by`` (keys: :func:`parse_group_keys`).

    Raises:
        ReportError: DuckDB is missing (``pip install 'otel-joules[report]'``).
    """
    from otel_joules.report.readers import read_inputs
    from otel_joules.report.sql import SpanStore, group_rows

    attributes = [() if key in _BUILT_IN else KEY_ATTRIBUTES.get(key, (key,)) for key in by]
    with SpanStore() as store:
        inputs = read_inputs(paths, store)
        rows, missing, problems = group_rows(store, by, attributes)
    skipped = list(inputs.skipped) + [Skipped(path, reason) for path, reason in problems]
    if inputs.carbontracker_runs:
        skipped.append(Skipped(
            "(carbontracker logs)",
            f"{len(inputs.carbontracker_runs)} log pair(s) not grouped: they have no spans (run the report without --by)",
        ))
    return group_report(by, rows, spans_without_share=missing, skipped=skipped, files_read=inputs.files_read)
