"""The first spans after start-up are priced like any other (before the sampler's second sample).

The sampler's periods start at its first sample, in ``instrument()``; until the second one there is
no forecast price. A request moments after start-up used to get 0 J of self share; now its CPU time
is priced over the time since the first sample. The counters advance in another process, as a
host's do: a fake in a thread of this process would lag behind the spans' busy loops (the GIL).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_joules
from tests.fakes.powercap import make_powercap
from tests.helpers.processes import stop_by_pid

#: Writes each zone's counter as watts x elapsed seconds every millisecond: (path, start uJ, range uJ, watts)...
_WRITER = """
import os, sys, time
zones = [(a, int(b), int(c), float(d)) for a, b, c, d in zip(*[iter(sys.argv[1:])] * 4)]
fds = [os.open(path, os.O_WRONLY) for path, *_ in zones]
started = time.monotonic()
print("ready", flush=True)
while True:
    elapsed_s = time.monotonic() - started
    for fd, (_, start_uj, range_uj, watts) in zip(fds, zones):
        os.pwrite(fd, f"{(start_uj + round(watts * elapsed_s * 1e6)) % range_uj}\\n".ljust(24).encode(), 0)
    time.sleep(0.001)
"""


def _burn(cpu_s: float) -> None:
    end = time.thread_time() + cpu_s
    while time.thread_time() < end:
        pass


@pytest.mark.parametrize("policy", ["capacity", "busy"])
def test_the_first_request_after_start_up_is_priced_like_the_later_ones(tmp_path: Path, policy: str) -> None:
    powercap = make_powercap(tmp_path)
    watts = {"package_0": 20.0, "dram_0": 3.0}
    args = []
    for name, w in watts.items():
        zone = powercap.zones[name]
        args += [str(zone.path / "energy_uj"), str(zone.total_uj), str(zone.range_uj), str(w)]
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, *args], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
        provider = TracerProvider()
        exporter = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        handle = otel_joules.instrument(
            provider, metrics_enabled=False, sysfs_root=powercap.sysfs_root, gpus=[], attribution_policy=policy
        )
        tracer = provider.get_tracer("t")
        try:
            time.sleep(0.001)  # the first request, a millisecond after start-up
            for i in range(12):
                with tracer.start_as_current_span(f"request-{i}"):
                    _burn(0.02)
                time.sleep(0.03)
        finally:
            handle.uninstrument()
    finally:
        stop_by_pid(writer)
    shares = {s.name: s.attributes["energy.attributed.self.joules"] for s in exporter.get_finished_spans()}
    later = statistics.median(shares[f"request-{i}"] for i in range(6, 12))
    assert later > 0
    # Same work, same power: the first request (no forecast yet) and the second (before the sampler's
    # second sample, on the slower boxes) are priced like the rest, within the ticks' noise.
    assert 0.5 * later < shares["request-0"] < 1.6 * later, shares
