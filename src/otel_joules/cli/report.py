"""``otel-joules report PATH...``: one aggregate over carbontracker logs, CSV, JSON-lines and OTLP JSON files.

What is summed and how kWh and CO2eq are computed: :mod:`otel_joules.report`.
Exit status: 0 when at least one run was reported; 1 when nothing could be read (the
reasons go to stderr and nothing to stdout: no table of zeros); 2 for invalid options (as
every otel-joules command). Skipped inputs are listed on stderr, so
``--json`` output on stdout stays machine-readable.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from otel_joules.errors import ConfigurationError
from otel_joules.report import build_report, format_report, format_skipped, plot_report, report_dict
from otel_joules.report.aggregate import DEFAULT_LISTED_RUNS
from otel_joules.report.spark_engine import ENGINES
from otel_joules.report.groups import (
    GROUP_KEYS,
    build_group_report,
    format_groups,
    groups_dict,
    parse_group_keys,
    write_groups_csv,
    write_groups_parquet,
)


def _number(kind: str, minimum: float) -> Any:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or value < minimum:
            raise argparse.ArgumentTypeError(f"{kind} must be a finite number >= {minimum:g}, got {text!r}")
        return value

    return parse


def _runs(text: str) -> int | None:
    if text == "all":
        return None
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"--runs takes a whole number >= 0 or 'all', got {text!r}")
    return value


def register(subparsers: Any) -> None:
    """Add the ``report`` subcommand."""
    parser = subparsers.add_parser(
        "report",
        help="aggregate energy and CO2eq over carbontracker logs, CSV/JSON-lines exports and OTLP JSON files",
        description=(
            "One aggregate over everything exported: carbontracker log directories, otel-joules CSV and JSON-lines "
            "span exports, and OTLP JSON trace files (Collector file exporter, opentelemetry-exporter-otlp-json-file). "
            "Per trace the spans' attributed share is summed (topmost energy.attributed.joules), with the host's "
            "interval energy shown beside it; exports without attribution fall back to the topmost spans' "
            "energy.joules, labelled 'interval'. Every run says whether it was measured or estimated."
        ),
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="files or directories (searched recursively)")
    parser.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    parser.add_argument(
        "--runs",
        type=_runs,
        default=DEFAULT_LISTED_RUNS,
        metavar="N|all",
        help=f"list at most N runs (default {DEFAULT_LISTED_RUNS}: carbontracker runs, then traces by start); the "
        "totals are of every run and the report says how many are not listed. 'all' lists every one (it keeps "
        "every run in memory)",
    )
    parser.add_argument("--plot", metavar="FILE.png", help="write a PNG of energy and power per run by CPU/memory/GPU (estimates hatched) and per epoch (needs matplotlib)")
    carbon = parser.add_mutually_exclusive_group()
    carbon.add_argument(
        "--intensity",
        type=_number("--intensity", 0.0),
        metavar="G_PER_KWH",
        help="carbon intensity in gCO2eq/kWh for every run (default: what each run recorded)",
    )
    carbon.add_argument(
        "--country",
        metavar="CODE",
        help="ISO 3166 code: the offline yearly average for every run (default: what each run recorded, "
        "else $OTEL_JOULES_COUNTRY, else the world average)",
    )
    parser.add_argument(
        "--pue",
        type=_number("--pue", 1.0),
        help="power usage effectiveness for every run (default: what each run recorded, else 1.0)",
    )
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default="duckdb",
        help="where the aggregation runs: duckdb (embedded, the default) or spark (a Spark session: spark-submit's, "
        "else local[2]; PATHs may then be hdfs://, s3a://... URIs; needs otel-joules[spark] and Java 17+). "
        "--by always runs on DuckDB",
    )
    groups = parser.add_argument_group(
        "totals per group",
        "--by KEYS gives one row per group instead of one per run: the sum of its spans' attributed self shares "
        "(energy.attributed.self.joules), so the groups add up to the report's total. Keys: "
        + "; ".join(f"{key} = {meaning}" for key, meaning in GROUP_KEYS.items())
        + "; any other name is a span or resource attribute (e.g. slurm.job.name). CSV, JSON-lines and Parquet "
        "exports keep only the resource's host, user and job identities; OTLP/JSON every resource attribute. "
        "Each group says measured or estimate. See docs/report-groups.md.",
    )
    groups.add_argument("--by", metavar="KEYS", help="comma-separated keys, e.g. --by service,host,day")
    groups.add_argument("--csv", metavar="FILE.csv", help="with --by: also write the groups as CSV")
    groups.add_argument("--parquet", metavar="FILE.parquet", help="with --by: also write the groups as Parquet")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Build the report, print it (text or JSON), list skipped inputs on stderr, plot if asked."""
    if args.by is not None or args.csv or args.parquet:
        return _run_groups(args)
    report = build_report(
        args.paths, intensity_gco2eq_per_kwh=args.intensity, country=args.country, pue=args.pue, engine=args.engine,
        max_runs=args.runs,
    )
    for line in format_skipped(report):
        print(line, file=sys.stderr)
    if not report.run_count:
        # The reasons are the skipped lines above; a table of zeros would only look like a result.
        why = (
            f"{len(report.skipped)} input(s) skipped, each with its reason above"
            if report.skipped
            else "no file found in " + ", ".join(repr(p) for p in args.paths)
        )
        print(
            f"otel-joules report: nothing to report: no readable run in the paths given ({why}). Give carbontracker "
            "log directories, otel-joules CSV or JSON-lines span exports, or OTLP JSON trace files, e.g. "
            "`otel-joules run --exporter jsonl:runs.jsonl -- CMD` then `otel-joules report runs.jsonl`.",
            file=sys.stderr,
        )
        return 1
    if args.json:
        print(json.dumps(report_dict(report), indent=2, allow_nan=False))
    else:
        print(format_report(report))
    if args.plot:
        plot_report(report, args.plot)
        print(f"plot written to {args.plot}", file=sys.stderr)
    return 0


def _run_groups(args: argparse.Namespace) -> int:
    """``--by``: the groups as a table or JSON on stdout, and as CSV or Parquet files if asked."""
    if args.by is None:
        raise ConfigurationError("--csv and --parquet write the groups of --by: add --by KEYS, e.g. --by service,host")
    extras = [name for name, given in (("--plot", args.plot), ("--intensity", args.intensity is not None),
                                       ("--country", args.country), ("--pue", args.pue is not None)) if given]
    if extras:
        raise ConfigurationError(
            f"--by gives joules per group, without PUE or CO2eq: {', '.join(extras)} apply to the per-run report "
            "(run it without --by)"
        )
    report = build_group_report(args.paths, parse_group_keys(args.by))
    for item in report.skipped:
        print(f"skipped {item.path}: {item.reason}", file=sys.stderr)
    if not report.groups:
        print(
            f"otel-joules report: nothing to group: no span with energy.attributed.self.joules in the paths given "
            f"({len(report.files_read)} span file(s) read, {report.spans_without_share} span(s) without a self "
            "share). Run the report without --by for exports written before attribution and for carbontracker logs.",
            file=sys.stderr,
        )
        return 1
    if args.json:
        print(json.dumps(groups_dict(report), indent=2, allow_nan=False))
    else:
        print(format_groups(report))
    if args.csv:
        write_groups_csv(report, args.csv)
        print(f"groups written to {args.csv}", file=sys.stderr)
    if args.parquet:
        write_groups_parquet(report, args.parquet)
        print(f"groups written to {args.parquet}", file=sys.stderr)
    return 0
