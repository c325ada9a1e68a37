"""What an idle instrumented process costs the host: CPU and wake-ups, against a plain-SDK process in the same run.

Starts N instrumented processes and N plain ones (the anchor) side by side, for N = 1, 8 and 32
(``--counts``). Both kinds set up the same SDK (a ``TracerProvider`` with a batch span processor,
a ``MeterProvider`` with a periodic reader, exporters that drop everything), end one span and then
wait on stdin, doing nothing; the instrumented kind also calls ``otel_joules.instrument()``. Over a
window (``--window-s``, 10 s by default) the parent reads, for each process:

* CPU: ``utime + stime`` of ``/proc/<pid>/stat`` (clock ticks, 10 ms: one tick in a 10 s window
  is 0.1% of a core, so a single process's figure is that coarse), and the tasks'
  ``/proc/<pid>/task/*/schedstat`` run time (nanoseconds), which resolves what ticks cannot;
* wake-ups: ``voluntary_ctxt_switches + nonvoluntary_ctxt_switches`` summed over
  ``/proc/<pid>/task/*/status`` (a task that starts inside the window counts from zero).

The hardware is the fake powercap tree of the tests (``tests.fakes.powercap``) with a realistic
power bound (``--max-power-w``, 250 W: the meter reads each counter at least four times per wrap
at that power); ``gpu`` adds one GPU of the stand-in ``libnvidia-ml.so.1`` (``tests.fakes.nvml``,
compiled with gcc; its counter steps every 100 ms, as NVML's), running no process, and counts the
NVML energy reads every instrumented process makes (the stand-in's shared read counter: reads a
second per process); ``estimate`` has no counter (the CPU-time estimator, as on a box without
readable RAPL). Each hardware in ``--hardware`` (default: ``rapl gpu``) runs every count.

    python -m benchmarks.idle_cost [--counts 1 8 32] [--window-s 10] [--hardware rapl gpu estimate] [--json]

Target (issue 38): an idle instrumented process uses at most 0.1% of a core, wakes at most 5 times
a second, and makes no NVML energy read.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from otel_joules.config import OTEL_JOULES_SYSFS_ROOT
from tests.fakes.nvml import energy_reads
from tests.fakes.powercap import make_powercap

#: Issue 38's bounds for one idle instrumented process.
TARGET_CPU_PERCENT = 0.1
TARGET_WAKEUPS_PER_S = 5.0
TARGET_NVML_READS_PER_S = 0.0
#: The shortest window that judges a process (one 10 ms tick is then 0.1% of a core).
MIN_WINDOW_S = 10.0
REPO = Path(__file__).resolve().parent.parent
_CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")

_CHILD = r"""
import sys, threading
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, PeriodicExportingMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult


class DropSpans(SpanExporter):
    def export(self, spans):
        return SpanExportResult.SUCCESS


class DropMetrics(MetricExporter):
    def export(self, metrics_data, timeout_millis=10_000, **kwargs):
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis=10_000):
        return True

    def shutdown(self, timeout_millis=30_000, **kwargs):
        pass


provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(DropSpans()))
trace.set_tracer_provider(provider)
metrics.set_meter_provider(MeterProvider(metric_readers=[PeriodicExportingMetricReader(DropMetrics())]))
if sys.argv[1] == "instrumented":
    import otel_joules

    otel_joules.instrument()
with trace.get_tracer("idle").start_as_current_span("warm-up"):
    pass
names = {t.native_id: t.name for t in threading.enumerate()}
print(repr(names), flush=True)
sys.stdin.read()
"""


def _task_counters(pid: int) -> dict[int, tuple[int, int]]:
    """Per task of ``pid``: (context switches, schedstat run time in ns)."""
    out: dict[int, tuple[int, int]] = {}
    base = f"/proc/{pid}/task"
    for tid in os.listdir(base):
        try:
            with open(f"{base}/{tid}/status") as f:
                switches = sum(int(line.split()[1]) for line in f if "ctxt_switches:" in line)
            try:
                with open(f"{base}/{tid}/schedstat") as f:
                    run_ns = int(f.read().split()[0])
            except OSError:
                run_ns = 0
        except OSError:
            continue  # the task exited
        out[int(tid)] = (switches, run_ns)
    return out


def _process_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        after = f.read().rsplit(b")", 1)[1].split()
    return int(after[11]) + int(after[12])


def _read(pid: int) -> tuple[int, dict[int, tuple[int, int]]]:
    return _process_ticks(pid), _task_counters(pid)


def _costs(before: tuple[int, dict], after: tuple[int, dict], window_s: float, names: dict[int, str]) -> dict[str, Any]:
    ticks0, tasks0 = before
    ticks1, tasks1 = after
    switches = run_ns = 0
    by_thread: dict[str, float] = {}
    for tid, (s1, r1) in tasks1.items():
        s0, r0 = tasks0.get(tid, (0, 0))
        switches += s1 - s0
        run_ns += r1 - r0
        name = names.get(tid, f"task {tid}")
        by_thread[name] = by_thread.get(name, 0.0) + (s1 - s0) / window_s
    return {
        "cpu_percent_stat": (ticks1 - ticks0) / _CLOCK_TICKS_PER_S / window_s * 100,
        "cpu_percent_schedstat": run_ns / 1e9 / window_s * 100,
        "wakeups_per_s": switches / window_s,
        "wakeups_per_s_by_thread": {k: round(v, 2) for k, v in sorted(by_thread.items()) if v},
    }


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("cpu_percent_stat", "cpu_percent_schedstat", "wakeups_per_s")
    out: dict[str, Any] = {}
    for key in keys:
        values = [r[key] for r in rows]
        out[key] = {"mean": statistics.fmean(values), "max": max(values), "sum": sum(values)}
    out["wakeups_per_s_by_thread"] = rows[0]["wakeups_per_s_by_thread"] if rows else {}
    return out


def measure(
    count: int, window_s: float, env: dict[str, str], settle_s: float = 5.0, reads_path: Path | None = None
) -> dict[str, Any]:
    """Start ``count`` instrumented and ``count`` plain idle processes, measure them over ``window_s``.

    ``reads_path``: the stand-in NVML's read counter, read around the window (NVML reads per second
    per instrumented process); None without a GPU.
    """
    procs: list[tuple[str, subprocess.Popen[str]]] = []
    try:
        for _ in range(count):
            for kind in ("instrumented", "plain"):
                proc = subprocess.Popen(
                    [sys.executable, "-c", _CHILD, kind],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                    env=env,
                    cwd=REPO,
                )
                procs.append((kind, proc))
        names: dict[int, dict[int, str]] = {}
        for _, proc in procs:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            if not line:
                raise RuntimeError(f"a child exited before it was ready (exit status {proc.wait()})")
            names[proc.pid] = eval(line, {})  # noqa: S307 - our own child's repr of {int: str}
        # Start-up work (lazy imports, the first exports) out of the window, and the attribution sampler's
        # back-off at its bound (1 s idle, then 0.2 + 0.4 + 0.8 + 1.6 s): the window measures an idle process.
        time.sleep(settle_s)
        reads_before = None if reads_path is None else energy_reads(reads_path)
        before = {proc.pid: _read(proc.pid) for _, proc in procs}
        start = time.monotonic()
        time.sleep(window_s)
        after = {proc.pid: _read(proc.pid) for _, proc in procs}
        elapsed_s = time.monotonic() - start
        reads_after = None if reads_path is None else energy_reads(reads_path)
        rows: dict[str, list[dict[str, Any]]] = {"instrumented": [], "plain": []}
        for kind, proc in procs:
            rows[kind].append(_costs(before[proc.pid], after[proc.pid], elapsed_s, names[proc.pid]))
        result = {"processes": count, "window_s": elapsed_s, **{kind: _summary(r) for kind, r in rows.items()}}
        if reads_before is not None and reads_after is not None:
            result["instrumented"]["nvml_reads_per_s"] = (reads_after - reads_before) / elapsed_s / count
        return result
    finally:
        for _, proc in procs:
            try:
                proc.stdin.close()  # type: ignore[union-attr]
            except OSError:
                pass
        for _, proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; exit status 1 when an instrumented process exceeds a target."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--window-s", type=float, default=10.0)
    parser.add_argument("--hardware", choices=("rapl", "gpu", "estimate"), nargs="+", default=["rapl", "gpu"])
    parser.add_argument("--max-power-w", type=float, default=250.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.window_s < MIN_WINDOW_S:
        parser.error(f"--window-s must be at least {MIN_WINDOW_S:g} s: a shorter window cannot resolve 0.1% of a core")
    results = [result for hardware in args.hardware for result in _run(hardware, args)]
    failed = False
    for result in results:
        inst, plain = result["instrumented"], result["plain"]
        reads_per_s = inst.get("nvml_reads_per_s")
        over = (
            inst["cpu_percent_schedstat"]["max"] > TARGET_CPU_PERCENT
            or inst["wakeups_per_s"]["max"] > TARGET_WAKEUPS_PER_S
            or (reads_per_s is not None and reads_per_s > TARGET_NVML_READS_PER_S)
        )
        failed |= over
        if not args.json:
            reads = "" if reads_per_s is None else f", {reads_per_s:.2f} NVML energy reads/s each"
            print(
                f"[{result['hardware']}] {result['processes']:>3} idle processes, {result['window_s']:.1f} s:"
                f" instrumented CPU {inst['cpu_percent_schedstat']['mean']:.3f}% of a core each"
                f" (max {inst['cpu_percent_schedstat']['max']:.3f}%; /proc/stat ticks: mean"
                f" {inst['cpu_percent_stat']['mean']:.3f}%), {inst['cpu_percent_schedstat']['sum']:.2f}% in all,"
                f" {inst['wakeups_per_s']['mean']:.1f} wake-ups/s each (max {inst['wakeups_per_s']['max']:.1f}){reads};"
                f" plain SDK CPU {plain['cpu_percent_schedstat']['mean']:.3f}%"
                f" (ticks {plain['cpu_percent_stat']['mean']:.3f}%), {plain['wakeups_per_s']['mean']:.1f} wake-ups/s"
                f"{'  OVER TARGET' if over else ''}"
            )
            print(f"    instrumented wake-ups/s by thread (first process): {inst['wakeups_per_s_by_thread']}")
    if args.json:
        print(json.dumps({"results": results}, indent=2))
    return 1 if failed else 0


def _run(hardware: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every count of ``--counts`` on one kind of hardware, each result tagged with it."""
    with tempfile.TemporaryDirectory(prefix="otel-joules-idle-") as tmp:
        sysfs = Path(tmp) / "sys"
        reads_path = None
        if hardware == "estimate":
            sysfs.mkdir()
        else:
            make_powercap(sysfs, "one_socket", max_power_uw=round(args.max_power_w * 1e6))
        if hardware == "gpu":
            from tests.fakes.nvml import FakeCard, FakeNvml, build_library, subprocess_env

            reads_path = Path(tmp) / "nvml-reads"
            config = FakeNvml(cards=[FakeCard()], reads_path=str(reads_path)).write(Path(tmp) / "fake_nvml.conf")
            env = subprocess_env(config, build_library(), {OTEL_JOULES_SYSFS_ROOT: str(sysfs)})
        else:
            env = {**os.environ, OTEL_JOULES_SYSFS_ROOT: str(sysfs)}
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
        return [{"hardware": hardware, **measure(n, args.window_s, env, reads_path=reads_path)} for n in args.counts]


if __name__ == "__main__":
    sys.exit(main())
