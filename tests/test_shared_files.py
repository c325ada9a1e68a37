"""Fault matrix, item 7 (issue 13): no file of the package can be planted by another local user.

The host-lock election (``/tmp/otel-joules-host-domains.lock``, ``OTEL_JOULES_HOST_LOCK``) is
gone (issue 9): every process measures the host and spans carry their share. What is left to
guard is that nothing else took its place. A child process records, through Python's audit
hooks, every file it opens or creates while it instruments spans and metrics, measures with
threads, and runs ``otel-joules run`` in-process, with a FIFO planted at the old lock's name in
its temp dir (and named by the old variable) and a symlink to ``/dev/zero`` at the same name in
its runtime dir. The package must open neither, and create or write no file at all: only the
paths a user names (exporters, handlers, carbontracker logs) are ever written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.fakes.powercap import make_powercap
from tests.helpers.processes import REPO

OLD_LOCK_NAME = "otel-joules-host-domains.lock"

SCRIPT = r"""
import json, os, sys, threading, time

touched, writes = [], []
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT
_CREATING = {"os.mkdir", "os.symlink", "os.link", "os.rename", "os.truncate"}  # os.replace raises os.rename

def audit(event, args):
    if event == "open":
        path, mode, flags = args
        if isinstance(path, int):
            return
        path = os.fsdecode(path)
        touched.append(path)
        if (isinstance(mode, str) and any(c in mode for c in "wax+")) or (isinstance(flags, int) and flags & _WRITE_FLAGS):
            writes.append(path)
    elif event in _CREATING:
        writes.append(f"{event} {args[0]!r}")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import otel_joules
from otel_joules.cli.main import main

sys.addaudithook(audit)  # after the imports: reading our own modules is not the point
started = time.monotonic()
spans, reader = InMemorySpanExporter(), InMemoryMetricReader()
tracer_provider, meter_provider = TracerProvider(), MeterProvider(metric_readers=[reader])
tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
handle = otel_joules.instrument(tracer_provider, meter_provider, gpus=[])
tracer = tracer_provider.get_tracer("t")

def work():
    for _ in range(200):
        with tracer.start_as_current_span("step"):
            sum(range(1000))

threads = [threading.Thread(target=work) for _ in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
reader.collect()
handle.uninstrument()
code = main(["run", "--exporter", "none", "--quiet", "--", sys.executable, "-c", "pass"])
print(json.dumps({"code": code, "spans": len(spans.get_finished_spans()), "seconds": time.monotonic() - started,
                  "touched": touched, "writes": writes}))
"""


def test_planted_fifo_and_symlink_at_the_old_lock_change_nothing_and_no_file_is_created(tmp_path: Path) -> None:
    pc = make_powercap(tmp_path / "sys", "amd")
    tmp, runtime = tmp_path / "tmp", tmp_path / "run"
    tmp.mkdir()
    runtime.mkdir(mode=0o700)
    fifo, link = tmp / OLD_LOCK_NAME, runtime / OLD_LOCK_NAME
    os.mkfifo(fifo)
    os.symlink("/dev/zero", link)
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        PYTHONDONTWRITEBYTECODE="1",  # the interpreter's own .pyc files are not the package's
        OTEL_JOULES_SYSFS_ROOT=pc.sysfs_root,
        TMPDIR=str(tmp),
        XDG_RUNTIME_DIR=str(runtime),
        OTEL_JOULES_HOST_LOCK=str(fifo),  # the old variable: must mean nothing now
        OTEL_JOULES_HOST_DOMAINS="auto",
    )
    for name in ("OTEL_JOULES_COUNTRY", "OTEL_JOULES_CARBON_PROVIDERS", "OTEL_JOULES_ELECTRICITYMAPS_API_KEY",
                 "OTEL_EXPORTER_OTLP_ENDPOINT"):
        env.pop(name, None)
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=60,
                            cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout.splitlines()[-1])
    assert data["code"] == 0 and data["spans"] == 800, result.stderr
    assert data["seconds"] < 30  # a FIFO opened for the lock used to block here for ever
    assert data["writes"] == [], data["writes"]
    assert not [path for path in data["touched"] if OLD_LOCK_NAME in path or path.startswith(str(tmp))]
    assert not [path for path in data["touched"] if path.startswith(str(runtime))]
    assert data["touched"]  # the hook saw the counters being read: it was listening
