"""``otel-joules report`` at archive scale against DuckDB's own time and memory for the same two totals.

Generates, in a temp dir, a mixed archive of known sums: JSON-lines exports of 6 services on
40 hosts (one file per service and host, written with the JSON-lines exporter's record
functions) and one OTLP/JSON file (one ``ExportTraceServiceRequest`` per line, each a batch of
one service on one host, written with the OTLP/JSON file exporter's encoder, resource
attributes ``service.name``, ``host.name``, ``process.owner`` and ``slurm.job.id`` included).
Every trace is a root with children and one grandchild in two: every span carries
``energy.joules`` (the host's interval energy), ``energy.attributed.joules`` (its share,
inclusive of its children) and ``energy.attributed.self.joules``; hosts 30-39 have no RAPL
(``energy.source`` = ``estimate``). Every joule figure is a multiple of 1/8 J, so every sum is
exact in any order and the totals are known exactly.

Then it measures, each in a fresh process whose peak resident memory (``ru_maxrss`` of the
process and its children) and wall time are read:

(a) ``otel-joules report --json ARCHIVE``;
(b) DuckDB alone: one plain SQL query per format over ``read_json`` of the same files for the
    same two totals, the roots' host energy and their inclusive shares (the anchor);

and prints the ratio (target: the report at most 2x DuckDB), the peak memory (target: at most
400 MB for 600 MB of input, flat as the input grows) and whether the report's totals equal the
known sums (to 1e-9 relative).

    python -m benchmarks.report_scale [--size-mb 600] [--otlp-share 0.15] [--by service,host] [--json]
    python -m benchmarks.report_scale --scale [100,600,1000,5000]

``--scale`` runs each size in turn (generate, measure, delete: 5 GB needs that much free disk
in the temp dir) and prints seconds and peak memory per size, to show how cost grows. ``--by``
also times ``otel-joules report --by KEYS --json`` on the same archive. Exit status 1 when a
total is wrong.
"""

from __future__ import annotations

import argparse
import calendar
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence, TextIO

from otel_joules.exporters.jsonl_exporter import record_json_line
from otel_joules.exporters.records import SpanRecord, exported_resource
from otel_joules.semconv import (
    ENERGY_ATTRIBUTED_JOULES,
    ENERGY_ATTRIBUTED_SELF_JOULES,
    ENERGY_JOULES,
    ENERGY_SOURCE,
    SOURCE_ESTIMATE,
    SOURCE_MEASURED,
)

SERVICES = ("api", "worker", "trainer", "ingest", "scheduler", "search")
HOSTS = tuple(f"node-{i:02d}" for i in range(40))
#: Hosts from this index on have no RAPL: their spans are estimates.
FIRST_ESTIMATE_HOST = 30
USERS = ("alice", "bob", "carol")
#: Traces start on one of these UTC days (2026-12-01 and the two after).
FIRST_DAY_UNIX_S = calendar.timegm((2026, 12, 1, 0, 0, 0))
DAYS = 3
#: Spans per OTLP/JSON line: a BatchSpanProcessor's default batch size.
OTLP_BATCH_SPANS = 512
#: Every joule figure is a whole number of these (1/8 J): sums of them are exact in floating point.
EIGHTH = 0.125
#: Issue 20's targets.
TARGET_RATIO = 2.0
TARGET_PEAK_MB_AT_600_MB = 400.0
SCALE_SIZES_MB = (100.0, 600.0, 1000.0, 5000.0)


def _eighths(value: int) -> float:
    return value * EIGHTH


@dataclass
class KnownSums:
    """What an archive holds, in eighths of a joule (exact integers) and counts.

    ``groups[key][value]``: the attributed self shares of the spans whose ``key`` is ``value``,
    as the report can see it: JSON-lines records keep the resource's identities (``resource``), as
    OTLP/JSON does, so every span has its host, user and job.
    """

    spans: int = 0
    traces: int = 0
    jsonl_bytes: int = 0
    otlp_bytes: int = 0
    files: int = 0
    attributed_eighths: int = 0
    host_interval_eighths: int = 0
    groups: dict[str, dict[Any, int]] = field(default_factory=dict)
    group_sources: dict[str, dict[Any, set[str]]] = field(default_factory=dict)

    @property
    def attributed_joules(self) -> float:
        """The roots' inclusive shares, which are every span's self share added up."""
        return _eighths(self.attributed_eighths)

    @property
    def host_interval_joules(self) -> float:
        """The roots' host interval energy."""
        return _eighths(self.host_interval_eighths)

    def group_joules(self, key: str) -> dict[Any, float]:
        """Self shares per value of ``key`` (``service``, ``span``, ``host``, ``user``, ``job``, ``day``)."""
        return {value: _eighths(eighths) for value, eighths in self.groups.get(key, {}).items()}

    def group_source(self, key: str, value: Any) -> str:
        """``measured``, ``estimate`` or ``mixed``: the ``energy.source`` of the group's spans."""
        sources = self.group_sources[key][value]
        return sources.copy().pop() if len(sources) == 1 else "mixed"

    def _add_group(self, keys: dict[str, Any], self_eighths: int, source: str) -> None:
        for key, value in keys.items():
            per_key = self.groups.setdefault(key, {})
            per_key[value] = per_key.get(value, 0) + self_eighths
            self.group_sources.setdefault(key, {}).setdefault(value, set()).add(source)


@dataclass(frozen=True)
class _Span:
    name: str
    span_id: int
    parent_id: int | None
    start_ns: int
    end_ns: int
    attributes: dict[str, object]
    self_eighths: int


def _trace_spans(number: int, host_index: int) -> tuple[list[_Span], int, int]:
    """The spans of trace ``number``: (spans, root's inclusive share, root's host energy), in eighths.

    A root with 1-3 children, the first of which has a child of its own in every other trace.
    """
    children = 1 + number % 3
    grandchild = number % 2 == 0
    day = number % DAYS
    start_ns = (FIRST_DAY_UNIX_S + day * 86_400 + (number // DAYS) % 86_000) * 1_000_000_000
    source = SOURCE_ESTIMATE if host_index >= FIRST_ESTIMATE_HOST else SOURCE_MEASURED
    base_id = number << 4

    def self_of(j: int) -> int:
        return 1 + (number * 5 + j * 11) % 40

    # (name, index, parent index): index 0 is the root, 1.. its children, then the grandchild.
    layout = [("handle", 0, None)] + [(("db.query", "compute", "render")[c], c + 1, 0) for c in range(children)]
    if grandchild:
        layout.append(("io.read", children + 1, 1))
    inclusive = {index: self_of(index) for _, index, _ in layout}
    for _, index, parent in reversed(layout):
        if parent is not None:
            inclusive[parent] += inclusive[index]
    spans = []
    for name, index, parent in layout:
        host = inclusive[index] + (1 + number % 16) * 4
        begin = start_ns + index * 100_000_000
        spans.append(
            _Span(
                name=name,
                span_id=base_id + index + 1,
                parent_id=None if parent is None else base_id + parent + 1,
                start_ns=begin,
                end_ns=begin + (1_000_000_000 if index == 0 else 50_000_000),
                attributes={
                    ENERGY_ATTRIBUTED_JOULES: _eighths(inclusive[index]),
                    ENERGY_ATTRIBUTED_SELF_JOULES: _eighths(self_of(index)),
                    ENERGY_JOULES: _eighths(host),
                    ENERGY_SOURCE: source,
                },
                self_eighths=self_of(index),
            )
        )
    return spans, inclusive[0], inclusive[0] + (1 + number % 16) * 4


def _day_of(start_ns: int) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(start_ns // 1_000_000_000))


def _pairs() -> Iterator[tuple[int, int]]:
    """(service index, host index), round robin for ever."""
    while True:
        for host_index in range(len(HOSTS)):
            for service_index in range(len(SERVICES)):
                yield service_index, host_index


def _resource_attributes(service_index: int, host_index: int) -> dict[str, str]:
    return {
        "service.name": SERVICES[service_index],
        "host.name": HOSTS[host_index],
        "process.owner": USERS[service_index % len(USERS)],
        "slurm.job.id": str(1000 + host_index % 8),
    }


def write_archive(
    root: Path, size_mb: float, otlp_share: float = 0.15, otlp_batch_spans: int = OTLP_BATCH_SPANS
) -> KnownSums:
    """Write the archive into ``root`` (``jsonl/<host>/<service>.jsonl`` and ``otlp/traces.otlp.jsonl``).

    ``otlp_batch_spans``: spans per OTLP line, at least (whole traces): a BatchSpanProcessor's 512 by default; a
    SimpleSpanProcessor writes one span per line.
    """
    sums = KnownSums()
    target = int(size_mb * 1_000_000)
    jsonl_target = int(target * (1.0 - otlp_share))
    files: dict[tuple[int, int], TextIO] = {}
    pairs = _pairs()
    try:
        while sums.jsonl_bytes < jsonl_target:
            service_index, host_index = next(pairs)
            handle = files.get((service_index, host_index))
            if handle is None:
                folder = root / "jsonl" / HOSTS[host_index]
                folder.mkdir(parents=True, exist_ok=True)
                handle = files[(service_index, host_index)] = open(
                    folder / f"{SERVICES[service_index]}.jsonl", "w", encoding="utf-8"
                )
            lines = []
            resource = exported_resource(_resource_attributes(service_index, host_index))
            for span, keys in _one_trace(sums, service_index, host_index):
                lines.append(record_json_line(SpanRecord(
                    name=span.name,
                    trace_id=f"{sums.traces:032x}",
                    span_id=f"{span.span_id:016x}",
                    parent_span_id=None if span.parent_id is None else f"{span.parent_id:016x}",
                    start_time_unix_nano=span.start_ns,
                    end_time_unix_nano=span.end_ns,
                    service_name=SERVICES[service_index],
                    attributes=dict(sorted(span.attributes.items())),
                    resource=resource,
                )))
            chunk = "".join(lines)
            handle.write(chunk)
            sums.jsonl_bytes += len(chunk)
    finally:
        for handle in files.values():
            handle.close()
    sums.files = len(files)
    if otlp_share > 0:
        _write_otlp(root / "otlp" / "traces.otlp.jsonl", sums, target - sums.jsonl_bytes, otlp_batch_spans)
        sums.files += 1
    return sums


def _one_trace(sums: KnownSums, service_index: int, host_index: int) -> Iterator[tuple[_Span, dict[str, Any]]]:
    sums.traces += 1
    spans, inclusive, host = _trace_spans(sums.traces, host_index)
    sums.attributed_eighths += inclusive
    sums.host_interval_eighths += host
    resource = _resource_attributes(service_index, host_index)
    for span in spans:
        sums.spans += 1
        keys = {
            "service": SERVICES[service_index],
            "span": span.name,
            "host": resource["host.name"],
            "user": resource["process.owner"],
            "job": resource["slurm.job.id"],
            "day": _day_of(span.start_ns),
        }
        sums._add_group(keys, span.self_eighths, str(span.attributes[ENERGY_SOURCE]))
        yield span, keys


def _write_otlp(path: Path, sums: KnownSums, target_bytes: int, batch_spans: int) -> None:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import SpanContext, TraceFlags

    from otel_joules.exporters.otlp_file_exporter import otlp_json_line

    path.parent.mkdir(parents=True, exist_ok=True)
    resources: dict[tuple[int, int], Resource] = {}
    pairs = _pairs()
    written = 0
    with open(path, "w", encoding="utf-8") as handle:
        while written < target_bytes:
            service_index, host_index = next(pairs)
            resource = resources.get((service_index, host_index))
            if resource is None:
                resource = resources[(service_index, host_index)] = Resource(
                    _resource_attributes(service_index, host_index)
                )
            batch: list[ReadableSpan] = []
            while len(batch) < batch_spans:
                trace_id = sums.traces + 1
                for span, _ in _one_trace(sums, service_index, host_index):
                    batch.append(ReadableSpan(
                        name=span.name,
                        context=SpanContext(trace_id, span.span_id, False, TraceFlags(TraceFlags.SAMPLED)),
                        parent=None if span.parent_id is None else SpanContext(trace_id, span.parent_id, False),
                        resource=resource,
                        attributes=span.attributes,
                        start_time=span.start_ns,
                        end_time=span.end_ns,
                    ))
            line = otlp_json_line(batch)
            handle.write(line)
            written += len(line.encode("utf-8"))
    sums.otlp_bytes = written


# --- Measuring -----------------------------------------------------------------------------------

#: Runs argv[3:] with stdout to argv[1] (and stderr to argv[2]) and prints its wall time and the peak
#: RSS of it and its children (RUSAGE_CHILDREN: this wrapper waits only for that one command).
_MEASURE = r"""
import json, resource, subprocess, sys, time
with open(sys.argv[1], "wb") as out, open(sys.argv[2], "wb") as err:
    start = time.perf_counter()
    rc = subprocess.call(sys.argv[3:], stdout=out, stderr=err)
    seconds = time.perf_counter() - start
print(json.dumps({"rc": rc, "seconds": seconds,
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""

#: DuckDB alone: the roots' host energy and inclusive shares of the JSON-lines files and of the
#: OTLP/JSON file, each with one plain query over read_json, DuckDB's defaults otherwise.
_ANCHOR = r"""
import json, sys, time
start = time.perf_counter()
import duckdb
jsonl_glob, otlp = sys.argv[1], sys.argv[2]
con = duckdb.connect()
# A query past 2 s draws a progress bar on stdout, where the figures go.
con.execute('SET enable_progress_bar = false')
query_start = time.perf_counter()
jsonl = con.execute(f'''
    SELECT count(*), sum(attributes."energy.joules"), sum(attributes."energy.attributed.joules")
    FROM read_json('{jsonl_glob}', format='newline_delimited', columns={{
        'parent_span_id': 'VARCHAR',
        'attributes': 'STRUCT("energy.joules" DOUBLE, "energy.attributed.joules" DOUBLE)'}})
    WHERE parent_span_id IS NULL''').fetchone()
rows = [jsonl]
if otlp:
    rows.append(con.execute(f'''
        WITH requests AS (
            SELECT unnest(resourceSpans) AS rs FROM read_json('{otlp}', format='newline_delimited',
                maximum_object_size=1073741824, columns={{'resourceSpans':
                'STRUCT(scopeSpans STRUCT(spans STRUCT(parentSpanId VARCHAR,
                 attributes STRUCT("key" VARCHAR, "value" STRUCT(doubleValue DOUBLE))[])[])[])[]'}})),
        scopes AS (SELECT unnest(rs.scopeSpans) AS ss FROM requests),
        spans AS (SELECT unnest(ss.spans) AS span FROM scopes)
        SELECT count(*),
               sum(list_filter(span.attributes, lambda a: a.key = 'energy.joules')[1].value.doubleValue),
               sum(list_filter(span.attributes, lambda a: a.key = 'energy.attributed.joules')[1].value.doubleValue)
        FROM spans WHERE coalesce(span.parentSpanId, '') = '' ''').fetchone())
query_s = time.perf_counter() - query_start
print(json.dumps({"roots": sum(r[0] for r in rows), "host_interval_joules": sum(r[1] or 0.0 for r in rows),
                  "attributed_joules": sum(r[2] or 0.0 for r in rows), "query_seconds": query_s,
                  "process_seconds": time.perf_counter() - start}))
"""


def measured(command: Sequence[str], out: Path) -> dict[str, Any]:
    """Run ``command`` (stdout to ``out``) in a fresh wrapper process: rc, seconds, peak_rss_mib, stderr."""
    err = out.with_suffix(".stderr")
    result = subprocess.run([sys.executable, "-c", _MEASURE, str(out), str(err), *command], check=True,
                            capture_output=True, text=True)
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    figures["stderr_tail"] = err.read_text(encoding="utf-8", errors="replace")[-2000:]
    return figures


def _last_json_line(path: Path) -> dict[str, Any]:
    """The last line of ``path`` that is a JSON object (the anchor's figures), or {}."""
    for line in reversed(path.read_text(encoding="utf-8", errors="replace").splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {}


def report_totals(path: Path) -> dict[str, Any]:
    """The ``totals`` object of a ``--json`` report, read line by line (the runs before it may be GBs)."""
    captured: list[str] = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if captured:
                captured.append(line)
                if line.startswith("  }"):
                    break
            elif line.startswith('  "totals": {'):
                captured.append("{")
    if not captured:
        return {}
    return json.loads("".join(captured).rstrip().rstrip(","))


def _close(value: float | None, expected: float) -> bool:
    return value is not None and math.isclose(value, expected, rel_tol=1e-9, abs_tol=1e-12)


def run_size(size_mb: float, otlp_share: float, by: str | None, workdir: Path | None = None) -> dict[str, Any]:
    """Generate an archive of ``size_mb``, measure the report and the anchor on it, delete it."""
    tmp = Path(tempfile.mkdtemp(prefix="otel-joules-report-scale-", dir=workdir))
    try:
        archive = tmp / "archive"
        sums = write_archive(archive, size_mb, otlp_share)
        otlp = archive / "otlp" / "traces.otlp.jsonl"
        cli = [sys.executable, "-m", "otel_joules.cli.main", "report"]
        # The box may be shared: its load beside the figures says how far to trust the seconds.
        load_before = os.getloadavg()[0]
        report = measured([*cli, "--json", str(archive)], tmp / "report.json")
        totals = report_totals(tmp / "report.json")
        anchor = measured(
            [sys.executable, "-c", _ANCHOR, str(archive / "jsonl" / "*" / "*.jsonl"), str(otlp) if otlp.exists() else ""],
            tmp / "anchor.json",
        )
        anchor_totals = _last_json_line(tmp / "anchor.json") if anchor["rc"] == 0 else {}
        grouped = None
        if by:
            grouped = measured([*cli, "--by", by, "--json", str(archive)], tmp / "groups.json")
            grouped["groups_right"] = _groups_right(tmp / "groups.json", by, sums) if grouped["rc"] == 0 else False
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    mb = (sums.jsonl_bytes + sums.otlp_bytes) / 1e6
    result: dict[str, Any] = {
        "archive_mb": round(mb, 1),
        "otlp_mb": round(sums.otlp_bytes / 1e6, 1),
        "files": sums.files,
        "spans": sums.spans,
        "traces": sums.traces,
        "report_rc": report["rc"],
        "report_seconds": round(report["seconds"], 2),
        "report_peak_mib": round(report["peak_rss_mib"], 1),
        "duckdb_seconds": round(anchor["seconds"], 2),
        "duckdb_query_seconds": round(anchor_totals.get("query_seconds", float("nan")), 2),
        "duckdb_peak_mib": round(anchor["peak_rss_mib"], 1),
        "ratio": round(report["seconds"] / anchor["seconds"], 2),
        "load_average_1m": round(load_before, 2),
        "cpus": os.cpu_count(),
        "target_ratio": TARGET_RATIO,
        "report_mb_per_second": round(mb / report["seconds"], 1),
        "expected_attributed_joules": sums.attributed_joules,
        "expected_host_interval_joules": sums.host_interval_joules,
        "report_attributed_joules": totals.get("energy_joules"),
        "report_host_interval_joules": totals.get("host_interval_joules"),
        "totals_right": (
            report["rc"] == 0
            and _close(totals.get("energy_joules"), sums.attributed_joules)
            and _close(totals.get("host_interval_joules"), sums.host_interval_joules)
        ),
        "duckdb_totals_right": (
            _close(anchor_totals.get("attributed_joules"), sums.attributed_joules)
            and _close(anchor_totals.get("host_interval_joules"), sums.host_interval_joules)
        ),
    }
    if report["rc"] != 0:
        result["report_stderr_tail"] = report["stderr_tail"]
    if grouped is not None:
        result.update({
            "by": by,
            "by_rc": grouped["rc"],
            "by_seconds": round(grouped["seconds"], 2),
            "by_peak_mib": round(grouped["peak_rss_mib"], 1),
            "groups_right": grouped["groups_right"],
        })
        if grouped["rc"] != 0:
            result["by_stderr_tail"] = grouped["stderr_tail"]
    return result


def _groups_right(path: Path, by: str, sums: KnownSums) -> bool:
    """Whether a ``--by`` report's groups have the known self shares, key by key (single keys only)."""
    keys = [key.strip() for key in by.split(",")]
    data = json.loads(path.read_text(encoding="utf-8"))
    groups = data.get("groups", [])
    for key in keys:
        expected = sums.group_joules(key)
        seen: dict[Any, float] = {}
        for group in groups:
            value = group["keys"].get(key)
            seen[value] = seen.get(value, 0.0) + group["energy_joules"]
        if set(seen) != set(expected) or not all(_close(seen[v], expected[v]) for v in expected):
            return False
    return True


def _print(result: dict[str, Any]) -> None:
    for key, value in result.items():
        print(f"{key:>30}: {value}")


def main(argv: Sequence[str] | None = None, *, out: Callable[[str], None] = print) -> int:
    """Run one size (``--size-mb``) or several (``--scale``); 1 when a total is wrong."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=600.0)
    parser.add_argument("--otlp-share", type=float, default=0.15, help="part of the archive's bytes in the OTLP file")
    parser.add_argument("--scale", nargs="?", const=",".join(f"{s:g}" for s in SCALE_SIZES_MB), metavar="MB,MB,...",
                        help=f"run each size in turn (default {','.join(f'{s:g}' for s in SCALE_SIZES_MB)})")
    parser.add_argument("--by", metavar="KEYS", help="also time `report --by KEYS --json` and check its groups")
    parser.add_argument("--dir", type=Path, help="where the temp archive goes (default: the system's temp dir)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    sizes = [float(s) for s in args.scale.split(",")] if args.scale else [args.size_mb]
    results = []
    for size in sizes:
        result = run_size(size, args.otlp_share, args.by, args.dir)
        results.append(result)
        if not args.json:
            _print(result)
            out("")
    if args.json:
        out(json.dumps(results if args.scale else results[0]))
    elif len(results) > 1:
        out(f"{'MB':>8} {'spans':>10} {'report s':>9} {'peak MiB':>9} {'duckdb s':>9} {'duckdb MiB':>10} {'ratio':>6} totals")
        for r in results:
            out(f"{r['archive_mb']:>8} {r['spans']:>10} {r['report_seconds']:>9} {r['report_peak_mib']:>9} "
                f"{r['duckdb_seconds']:>9} {r['duckdb_peak_mib']:>10} {r['ratio']:>6} {r['totals_right']}")
    right = all(r["totals_right"] and r["duckdb_totals_right"] and r.get("groups_right", True) for r in results)
    return 0 if right else 1


if __name__ == "__main__":
    sys.exit(main())
