"""One process of the conservation test (test_conservation.py): requests with nested spans on a written host.

Run as ``python -m tests.attribution.conservation_worker PROCFS SYSFS OUT START_AT DURATION_S`` with the
policy in ``OTEL_JOULES_ATTRIBUTION_POLICY``. Its CPU time is written with ``spend_ticks`` (its files and the
host's ``stat`` at once), its spans go to ``OUT`` as JSON lines of their attributes, once it is done, and its
attributor's process share (``process.energy`` per kind) to ``OUT.process.json``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_joules import EnergyMeter, EnergySpanProcessor
from otel_joules.attribution import Attributor
from tests.fakes.procfs import spend_ticks


def main(procfs: str, sysfs: str, out: str, start_at: float, duration_s: float) -> None:
    pid, tid = os.getpid(), threading.get_native_id()
    spend_ticks(procfs, pid, tid, 0.0)
    meter = EnergyMeter(sysfs_root=sysfs, procfs_root=procfs, gpus=[])
    attributor = Attributor(meter)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.add_span_processor(EnergySpanProcessor(meter, attribution=attributor))
    tracer = provider.get_tracer("worker")
    time.sleep(max(0.0, start_at - time.monotonic()))
    while time.monotonic() < start_at + duration_s:
        # About 0.8 of a core per worker: three keep the 4-CPU host some 20 busy ticks a period, so one tick
        # more or less in a period (the processes read /proc/stat moments apart) moves its price little.
        with tracer.start_as_current_span("request"):
            spend_ticks(procfs, pid, tid, 0.01)
            time.sleep(0.0075)
            with tracer.start_as_current_span("query"):
                spend_ticks(procfs, pid, tid, 0.01)
                time.sleep(0.0075)
        time.sleep(0.002)
    # The process's own share (process.energy) through a sample taken now, which prices its last period.
    attributor.sample()
    with open(out + ".process.json", "w") as f:
        json.dump(attributor.process_joules(), f)
    with open(out, "w") as f:
        for span in exporter.get_finished_spans():
            f.write(json.dumps({"name": span.name, "attributes": dict(span.attributes)}) + "\n")
    provider.shutdown()
    attributor.close()
    meter.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5]))
