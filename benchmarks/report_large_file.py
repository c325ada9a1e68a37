"""Rate and peak memory of ``otel-joules report`` on a large JSON-lines span export.

Generates a file of ``--megabytes`` MB in a temp dir (traces of one root span with
energy and ``--children`` nested spans with energy, as the JSON-lines exporter writes
them; ``--padding`` extra bytes of non-energy text per span, as OTLP files or long span
names carry), then builds the report in a fresh child process and reads its peak
resident memory (``ru_maxrss``) and wall time.

    python benchmarks/report_large_file.py [--megabytes 200] [--children 4] [--padding 0] [--json]

Issue 13 measured 3.75 GB and 82 s for a 200 MB file before the reader streamed its
input. Now the file is read line by line, so memory does not grow with its size in
bytes; what remains grows with the number of spans (each kept compactly: ids, times
and its energy.*/carbon.* attributes), since a span's parent may come later in the
file or from another file and nested energy must not be counted twice.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_CHILD = r"""
import json, resource, sys, time
from otel_joules.report import build_report
start = time.perf_counter()
report = build_report([sys.argv[1]])
elapsed = time.perf_counter() - start
peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": elapsed, "peak_rss_mib": peak_kib / 1024, "runs": len(report.runs),
                  "total_joules": report.total_joules, "skipped": len(report.skipped)}))
"""

_BASELINE = "import resource, otel_joules.report; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)"


def write_spans(path: Path, megabytes: float, children: int, padding: int) -> dict[str, float]:
    """Write traces until the file reaches ``megabytes``; returns what it holds (spans, joules)."""
    target = int(megabytes * 1_000_000)
    written = spans = traces = 0
    root_joules = 10.0
    pad = "x" * padding
    with open(path, "w", encoding="utf-8") as handle:
        while written < target:
            traces += 1
            trace_id = f"{traces:032x}"
            root_id = f"{traces * (children + 1):016x}"
            start = 1_700_000_000_000_000_000 + traces * 10_000_000_000
            lines = [
                json.dumps({
                    "name": "train" + pad, "trace_id": trace_id, "span_id": root_id, "parent_span_id": None,
                    "start_time_unix_nano": start, "end_time_unix_nano": start + 5_000_000_000, "duration_s": 5.0,
                    "service_name": "bench", "attributes": {"energy.joules": root_joules, "energy.source": "measured"},
                }, separators=(",", ":"))
            ]
            for child in range(children):
                lines.append(json.dumps({
                    "name": "epoch", "trace_id": trace_id, "span_id": f"{traces * (children + 1) + child + 1:016x}",
                    "parent_span_id": root_id, "start_time_unix_nano": start + child,
                    "end_time_unix_nano": start + child + 1_000_000_000, "duration_s": 1.0, "service_name": "bench",
                    "attributes": {"energy.joules": 2.0, "energy.source": "measured"},
                }, separators=(",", ":")))
            chunk = "\n".join(lines) + "\n"
            handle.write(chunk)
            written += len(chunk.encode())
            spans += len(lines)
    return {"bytes": written, "spans": spans, "traces": traces, "expected_joules": traces * root_joules}


def measure(path: Path) -> dict[str, float]:
    """Run the report on ``path`` in a fresh interpreter: seconds, peak RSS (MiB), totals."""
    out = subprocess.run([sys.executable, "-c", _CHILD, str(path)], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def baseline_rss_mib() -> float:
    """Peak RSS of an interpreter that only imported the report package."""
    out = subprocess.run([sys.executable, "-c", _BASELINE], check=True, capture_output=True, text=True)
    return float(out.stdout.strip())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=200.0)
    parser.add_argument("--children", type=int, default=4)
    parser.add_argument("--padding", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="otel-joules-report-bench-") as tmp:
        path = Path(tmp) / "spans.jsonl"
        made = write_spans(path, args.megabytes, args.children, args.padding)
        result = measure(path)
        base = baseline_rss_mib()
    mb = made["bytes"] / 1e6
    summary = {
        "file_mb": round(mb, 1),
        "spans": made["spans"],
        "seconds": round(result["seconds"], 2),
        "mb_per_second": round(mb / result["seconds"], 1),
        "spans_per_second": round(made["spans"] / result["seconds"]),
        "peak_rss_mib": round(result["peak_rss_mib"], 1),
        "peak_over_import_mib": round(result["peak_rss_mib"] - base, 1),
        "bytes_per_span_kept": round((result["peak_rss_mib"] - base) * 1048576 / made["spans"]),
        "totals_right": result["total_joules"] == made["expected_joules"] and result["skipped"] == 0,
    }
    if args.json:
        print(json.dumps(summary))
    else:
        for key, value in summary.items():
            print(f"{key:>22}: {value}")
    return 0 if summary["totals_right"] else 1


if __name__ == "__main__":
    sys.exit(main())
