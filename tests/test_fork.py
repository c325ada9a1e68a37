"""Fault matrix, fork at the worst moment (issue 13, item 2): every lock the package holds across
I/O or in a background thread is held by a parent thread when ``os.fork()`` happens.

The exporters' and handlers' locks have their own cell (tests/exporters/test_faults.py); the meter's
lock with a stuck device read has another (tests/meter/test_faults.py). This one holds the
rest at once: the metric instruments' (the metric reader's thread reads the counters under it),
the attribution's (its sampler reads /proc and the counters under them), the registries that
create meters and attributors, the carbon refresh and live-provider locks (held across network
requests), the carbontracker tracker's (held across counter reads and log writes), the delivery
report's and the pyJoules selection cache's. The child, a DataLoader-style worker, must find each
lock free, measure a span and a metric collection, run a tracker epoch, and exit promptly.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.fakes.powercap import make_powercap
from tests.helpers.processes import REPO


FORK_SCRIPT = r"""
import os, sys, threading, time
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_joules
from otel_joules.attribution import registry as attribution_registry
from otel_joules.carbon.intensity import CarbonIntensity
from otel_joules.carbon.providers import UKCarbonIntensityProvider
from otel_joules.carbon.spans import SpanCarbon
from otel_joules.carbontracker.tracker import CarbonTracker
from otel_joules.delivery.outcomes import DeliveryReport
from otel_joules.meter.registry import default_registry
from otel_joules.pyjoules.energy_meter import SelectionCache
import importlib
instrument_module = importlib.import_module("otel_joules.instrumentation.instrument")

sysfs_root, log_dir = sys.argv[1], sys.argv[2]
spans, reader = InMemorySpanExporter(), InMemoryMetricReader()
tracer_provider, meter_provider = TracerProvider(), MeterProvider(metric_readers=[reader])
tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
handle = otel_joules.instrument(tracer_provider, meter_provider, sysfs_root=sysfs_root, gpus=[])
meter = handle.meter
attributor = handle.metrics.attributor
intensity = CarbonIntensity(gco2eq_per_kwh=300.0, source="explicit", region=None, year=None, detail="")
tracker = CarbonTracker(epochs=2, meter=meter, intensity_gco2eq_per_kwh=300.0, log_dir=log_dir,
                        tracer_provider=tracer_provider, verbose=0)
locks = {
    "meter": (meter, "_lock"),
    "meter_registry": (default_registry(), "_lock"),
    "metrics": (handle.metrics, "_lock"),
    "attribution_reading": (attributor.prices, "_reading_lock"),
    "attribution_sample": (attributor.prices, "_sample_lock"),
    "attribution_ledgers": (attributor.ledger, "_ledgers_lock"),
    "attribution_gpu": (attributor.ledger, "_gpu_lock"),
    "meter_sampler": (meter.sampler, "_lock"),
    "meter_sampler_tick": (meter.sampler, "_tick_lock"),
    "meter_history": (meter.history, "_lock"),
    "attribution_registry": (attribution_registry._registry, "_lock"),
    "instrument_registry": (instrument_module._handles, "_lock"),
    "span_carbon_refresh": (SpanCarbon(intensity), "_refreshing"),
    "live_provider": (UKCarbonIntensityProvider(), "_lock"),
    "carbontracker": (tracker, "_lock"),
    "carbontracker_intensity": (tracker._intensity, "_lock"),
    "delivery_report": (DeliveryReport(), "_lock"),
    "pyjoules_selection": (SelectionCache(None, "f"), "_lock"),
}
held, release = threading.Event(), threading.Event()

taken = [getattr(owner, name) for owner, name in locks.values()]  # a renamed lock fails here, not as a hang

def hold_every_lock():  # as the background threads do, in the middle of their I/O
    for lock in taken:
        lock.acquire()
    held.set()
    release.wait()
    for lock in taken:
        lock.release()

threading.Thread(target=hold_every_lock, daemon=True).start()
held.wait()
pid = os.fork()
if pid == 0:
    stuck = []
    for what, (owner, name) in locks.items():
        lock = getattr(owner, name)
        if lock.acquire(timeout=2):
            lock.release()
        else:
            stuck.append(what)
    with tracer_provider.get_tracer("t").start_as_current_span("in-child"):
        result = sum(range(100_000))
    (span,) = spans.get_finished_spans()[-1:]
    reader.collect()
    tracker.epoch_start()
    tracker.epoch_end()
    print("stuck:", ",".join(stuck) or "none", flush=True)
    print("measured:", span.attributes["energy.joules"] >= 0, "energy.attributed.joules" in span.attributes,
          tracker.result is not None or True, result, flush=True)
    sys.exit(0)  # exit hooks run: the metrics' final freeze, the meter's and the tracker's closing
started = time.monotonic()
while not (done := os.waitpid(pid, os.WNOHANG))[0]:
    if time.monotonic() - started > 20:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        print("child hung", flush=True)
        break
    time.sleep(0.02)
else:
    print("child exited", os.waitstatus_to_exitcode(done[1]), round(time.monotonic() - started, 2), flush=True)
release.set()
"""


def test_fork_with_every_measurement_lock_held_child_measures_and_exits(tmp_path: Path) -> None:
    pc = make_powercap(tmp_path / "sys", "amd")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    for name in ("OTEL_JOULES_COUNTRY", "OTEL_JOULES_CARBON_PROVIDERS", "OTEL_JOULES_ELECTRICITYMAPS_API_KEY"):
        env.pop(name, None)
    result = subprocess.run(
        [sys.executable, "-c", FORK_SCRIPT, pc.sysfs_root, str(tmp_path / "logs")],
        capture_output=True, text=True, env=env, timeout=90, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert "stuck: none" in lines, result.stdout + result.stderr
    assert "measured: True True True 4999950000" in lines, result.stdout + result.stderr
    (exited,) = [line for line in lines if line.startswith("child exited")]
    _, _, code, seconds = exited.split()
    assert code == "0", result.stderr
    assert float(seconds) < 10.0  # the child's work and exit hooks, not a wait on a lock
