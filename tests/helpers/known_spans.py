"""Spans with known ids, times and energy attributes for the exporter tests.

The ids come from a sequential ``IdGenerator`` handed to a real ``TracerProvider`` (an
SDK extension point), and the times are passed to ``start_span``/``end``, so every
exporter's output is known byte for byte.
"""

from __future__ import annotations

from typing import Iterator

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
ROOT_SPAN_ID = "00f067aa0ba902b7"
CHILD_SPAN_ID = "00f067aa0ba902b8"
T0_NS = 1_700_000_000_000_000_000  # 2023-11-14T22:13:20Z

#: Attributes of the root span ("train"), as the core processor would set them.
ROOT_ATTRIBUTES = {
    "energy.joules": 12.5,
    "energy.package_0.joules": 10.0,
    "energy.dram_0.joules": 2.5,
    "energy.core_0.joules": 7.25,
    "energy.watts": 8.333333333333334,
    "energy.source": "measured",
    "energy.co2eq.grams": 0.0015451388888888889,
    "http.route": "/not-exported",  # not energy.*: must not appear anywhere
}
#: Attributes of the child span: other domains, a bool, a tuple, an integer.
CHILD_ATTRIBUTES = {
    "energy.joules": 0.125,
    "energy.nvidia_gpu_0.joules": 0.125,
    "energy.source": "estimate",
    "energy.below_resolution": True,
    "energy.samples": 3,
    "energy.domains": ("nvidia_gpu_0",),
}
#: The child's name needs CSV quoting and is not ASCII.
CHILD_NAME = 'époque, "1"'

#: Attributes of a root span as ``otel-joules run --carbon-intensity 300 --pue 1.2`` leaves
#: it (cli/run.py): energy.*, the carbon.* it adds (exported too), process.* (not exported).
#: 3.5 J x PUE 1.2 = 4.2 J = 4.2 / 3.6e6 kWh, x 300 g/kWh = 0.00035 g.
RUN_ATTRIBUTES = {
    "energy.joules": 3.5,
    "energy.package_0.joules": 3.0,
    "energy.dram_0.joules": 0.5,
    "energy.core_0.joules": 0.25,
    "energy.watts": 1.75,
    "energy.source": "measured",
    "energy.co2eq.grams": 0.00035,
    "carbon.intensity.gco2eq_per_kwh": 300.0,
    "carbon.intensity.source": "explicit",
    "carbon.pue": 1.2,
    "process.command_line": "python3 -c pass",
    "process.executable.name": "python3",
    "process.pid": 4242,
    "process.exit.code": 0,
}
#: The name ``otel-joules run`` gives its root span: the command's base name.
RUN_NAME = "python3"
#: The known spans' resource beside ``service.name``: two identities the file exporters keep (``resource``),
#: and a command line they must not (it can hold secrets).
RESOURCE_ATTRIBUTES = {"host.name": "node-7", "slurm.job.id": "4242", "process.command_line": "train.py --token=s3cret"}
#: What the exporters keep of it.
EXPORTED_RESOURCE = {"host.name": "node-7", "slurm.job.id": "4242"}


class SequentialIdGenerator(IdGenerator):
    """Trace id ``trace_id`` (default :data:`TRACE_ID`), span ids counting up from :data:`ROOT_SPAN_ID`."""

    def __init__(self, trace_id: str = TRACE_ID) -> None:
        self._trace_id = int(trace_id, 16)
        self._span_ids: Iterator[int] = iter(range(int(ROOT_SPAN_ID, 16), 1 << 64))

    def generate_span_id(self) -> int:
        return next(self._span_ids)

    def generate_trace_id(self) -> int:
        return self._trace_id


def make_provider(
    *processors: SpanProcessor, service_name: str | None = "svc", trace_id: str = TRACE_ID
) -> TracerProvider:
    """A real SDK provider with deterministic ids and a fixed resource (no environment merge).

    Two providers with the same ``trace_id`` make spans with the same ids; pass another
    ``trace_id`` where spans of two providers must be told apart (e.g. MongoDB ``_id``).
    """
    resource = Resource({**RESOURCE_ATTRIBUTES, **({"service.name": service_name} if service_name is not None else {})})
    provider = TracerProvider(
        resource=resource, id_generator=SequentialIdGenerator(trace_id), shutdown_on_exit=False
    )
    for processor in processors:
        provider.add_span_processor(processor)
    return provider


def emit_train_and_epoch(provider: TracerProvider) -> None:
    """Root ``train`` (1.5 s) with a child (10 ms); the child ends, and is exported, first."""
    tracer = provider.get_tracer("otel-joules-tests")
    root = tracer.start_span("train", start_time=T0_NS, attributes=ROOT_ATTRIBUTES)
    child = tracer.start_span(
        CHILD_NAME,
        context=trace.set_span_in_context(root),
        start_time=T0_NS + 250_000_000,
        attributes=CHILD_ATTRIBUTES,
    )
    child.end(end_time=T0_NS + 260_000_000)
    root.end(end_time=T0_NS + 1_500_000_000)


def emit_run(provider: TracerProvider) -> None:
    """One root span :data:`RUN_NAME` (2 s) with :data:`RUN_ATTRIBUTES`, like ``otel-joules run``'s."""
    span = provider.get_tracer("otel-joules-tests").start_span(RUN_NAME, start_time=T0_NS, attributes=RUN_ATTRIBUTES)
    span.end(end_time=T0_NS + 2_000_000_000)


def emit_plain(provider: TracerProvider, name: str, offset_s: int, joules: float) -> None:
    """One root span ``name`` starting ``offset_s`` seconds after T0, lasting 2 s."""
    tracer = provider.get_tracer("otel-joules-tests")
    span = tracer.start_span(name, start_time=T0_NS + offset_s * 1_000_000_000, attributes={"energy.joules": joules})
    span.end(end_time=T0_NS + (offset_s + 2) * 1_000_000_000)


def plain_spans(count: int) -> list[ReadableSpan]:
    """``count`` ended root spans s0, s1, ... (:func:`emit_plain`, 1 J each, a second apart)."""
    memory = InMemorySpanExporter()
    provider = make_provider(SimpleSpanProcessor(memory))
    for index in range(count):
        emit_plain(provider, f"s{index}", offset_s=index, joules=1.0)
    return list(memory.get_finished_spans())



#: Run as ``python -c FAILING_DISK_SCRIPT PATH KIND SCENARIO MAX_PENDING`` in a child
#: process: it makes writes past a point fail for real (RLIMIT_FSIZE, which would also
#: hit pytest's own files if set in the test process) and prints a JSON report.
FAILING_DISK_SCRIPT = r"""
import json, logging, os, resource, signal, sys
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests.helpers.known_spans import emit_plain, make_provider
from otel_joules.exporters import CsvSpanExporter, JsonLinesSpanExporter

logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s")
# Past the limit the kernel sends SIGXFSZ (fatal by default); ignored, write() fails with EFBIG.
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
path, kind, scenario, max_pending = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
exporter = {"csv": CsvSpanExporter, "jsonl": JsonLinesSpanExporter}[kind](path, max_pending_spans=max_pending)
memory = InMemorySpanExporter()
provider = make_provider(SimpleSpanProcessor(memory))
for index, name in enumerate("abcd"):
    emit_plain(provider, name, offset_s=10 * index, joules=float(index + 1))
a, b, c, d = memory.get_finished_spans()
report = {}
report["a"] = exporter.export([a]).name
size_a = os.path.getsize(path)
_, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
# Room for part of the next record only: the write is cut short, then refused.
resource.setrlimit(resource.RLIMIT_FSIZE, (size_a + 40, hard))
report["b"] = exporter.export([b]).name
report["size_after_b_equals_size_a"] = os.path.getsize(path) == size_a
report["c"] = exporter.export([c]).name
report["pending_while_failing"] = exporter.pending_spans
report["flush_while_failing"] = exporter.force_flush()
if scenario != "lost":
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
if scenario == "export":
    report["d"] = exporter.export([d]).name
    report["pending_after"] = exporter.pending_spans
elif scenario == "lost":
    exporter.shutdown()
    report["pending_after"] = exporter.pending_spans
# scenario "exit": end without shutdown(); the exporter's atexit hook must write b and c.
print(json.dumps(report))
"""
