"""The MongoDB span exporter and the pyJoules ``MongoHandler`` against a real server: FerretDB on SQLite.

FerretDB (``tests.helpers.ferretdb``) speaks MongoDB's wire protocol for real: the driver's
handshake, bulk inserts with per-document errors, BSON types as stored, queries on nested
fields. The spans are real: a ``TracerProvider`` with ``EnergySpanProcessor`` on a fake
powercap tree, exported by ``MongoSpanExporter`` behind a ``BatchSpanProcessor``; the
pyJoules traces come from ``measure_energy`` and ``EnergyContext`` on the same tree. What is
checked is what a user reads back with pymongo.

The outage tests stop FerretDB while spans keep being exported, start it again on the same
port with the same data, and check the documented bound (``max_pending_spans``), the log
lines and a bounded exit in a child process (its stderr is the log).
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import os
import select
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Iterator

import pymongo
import pytest
from bson import Int64, ObjectId
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_joules
from otel_joules import EnergyMeter, EnergySpanProcessor
from otel_joules.exporters import MongoSpanExporter
from otel_joules.pyjoules.energy_meter import EnergyContext, measure_energy
from otel_joules.pyjoules.handler.mongo_handler import MongoHandler, MongoSaveError

from tests.fakes.powercap import FakePowercap, make_powercap
from tests.helpers.ferretdb import FerretDB, ferretdb  # noqa: F401 - ferretdb: the fixture
from tests.helpers.processes import clean_env

LOGGER = "otel_joules.exporters"
DATABASE = "otel_joules_e2e"
COLLECTION = "spans"
#: Joules each test span draws, per domain (core is inside the package, so not in the total).
SPAN_JOULES = {"package_0": 10.0, "core_0": 7.0, "dram_0": 2.0}
#: How long a test waits for something that a working system does at once, on a loaded 2-core box.
PATIENCE_S = 60.0


@pytest.fixture
def spans_collection(ferretdb: FerretDB) -> Iterator[pymongo.collection.Collection[dict[str, Any]]]:
    """The collection the exporter writes, read through a client of the test's own."""
    client = ferretdb.client()
    try:
        yield client[DATABASE][COLLECTION]
    finally:
        client.close()


def _draw(powercap: FakePowercap, scale: float = 1.0) -> None:
    for domain, joules in SPAN_JOULES.items():
        powercap.zones[domain].advance_joules(joules * scale)


def _energy_provider(powercap: FakePowercap, *processors: Any) -> tuple[TracerProvider, EnergyMeter]:
    """A real provider: the energy processor on ``powercap``, then ``processors`` (the exporters')."""
    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False)
    resource = Resource({"service.name": "e2e-train", "host.name": "node-e2e", "slurm.job.id": "77",
                         "process.command_line": "train.py --password=hunter2"})
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    provider.add_span_processor(EnergySpanProcessor(meter, attribution=False))
    for processor in processors:
        provider.add_span_processor(processor)
    return provider, meter


def _utc_ms(unix_nano: int) -> datetime.datetime:
    """A span time as a BSON date reads back through pymongo: naive UTC, millisecond precision."""
    return datetime.datetime(1970, 1, 1) + datetime.timedelta(milliseconds=unix_nano // 1_000_000)


def _expected_document(span: ReadableSpan) -> dict[str, Any]:
    """The document the exporter's docstring promises for ``span``, built from the span itself."""
    context = span.get_span_context()
    trace_id, span_id = f"{context.trace_id:032x}", f"{context.span_id:016x}"
    assert span.start_time is not None and span.end_time is not None
    attributes = span.attributes or {}
    watts = attributes["energy.watts"]
    return {
        "_id": f"{trace_id}-{span_id}",
        "name": span.name,
        "trace_id": trace_id,
        "span_id": span_id,
        "parent_span_id": f"{span.parent.span_id:016x}" if span.parent is not None else None,
        "start_time": _utc_ms(span.start_time),
        "end_time": _utc_ms(span.end_time),
        "start_time_unix_nano": span.start_time,
        "end_time_unix_nano": span.end_time,
        "duration_s": (span.end_time - span.start_time) / 1e9,
        "service_name": "e2e-train",
        "attributes": {
            "energy": {
                "joules": attributes["energy.joules"],
                "watts": watts,
                "source": "measured",
                "domain_kinds": ["package_0:cpu", "dram_0:memory"],
                "package_0": {"joules": attributes["energy.package_0.joules"]},
                "core_0": {"joules": attributes["energy.core_0.joules"]},
                "uncore_0": {"joules": 0.0},
                "dram_0": {"joules": attributes["energy.dram_0.joules"]},
                **({"below_resolution": True} if attributes.get("energy.below_resolution") else {}),
            }
        },
        # The resource's identities, nested; never its command line.
        "resource": {"host": {"name": "node-e2e"}, "slurm": {"job": {"id": "77"}}},
    }


# The span exporter -----------------------------------------------------------------------


def test_real_energy_spans_are_stored_with_their_documented_fields(
    ferretdb: FerretDB, spans_collection: pymongo.collection.Collection[dict[str, Any]], tmp_path: Path
) -> None:
    powercap = make_powercap(tmp_path / "sys", "one_socket")
    exporter = MongoSpanExporter(uri=ferretdb.uri, database=DATABASE, collection=COLLECTION)
    memory = InMemorySpanExporter()
    provider, meter = _energy_provider(powercap, BatchSpanProcessor(exporter), SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("e2e")
    with tracer.start_as_current_span("train", attributes={"http.route": "/not-exported"}):
        for epoch in range(3):
            with tracer.start_as_current_span(f"epoch {epoch}"):
                _draw(powercap, scale=epoch + 1)
    provider.shutdown()
    meter.close()

    spans = {span.name: span for span in memory.get_finished_spans()}
    assert set(spans) == {"train", "epoch 0", "epoch 1", "epoch 2"}
    stored = {document["name"]: document for document in spans_collection.find()}
    for name, span in spans.items():
        assert stored[name] == _expected_document(span), name
    # The energy is the fake tree's, exactly: the epochs drew 1x, 2x, 3x SPAN_JOULES, the root all of it.
    assert [stored[f"epoch {n}"]["attributes"]["energy"]["package_0"]["joules"] for n in range(3)] == [10.0, 20.0, 30.0]
    assert stored["train"]["attributes"]["energy"]["joules"] == 6 * (10.0 + 2.0)
    assert stored["train"]["parent_span_id"] is None
    assert {stored[f"epoch {n}"]["parent_span_id"] for n in range(3)} == {stored["train"]["span_id"]}
    assert "http" not in stored["train"]["attributes"]

    # BSON types as the server holds them, asked of the server itself.
    def names(query: dict[str, Any]) -> set[str]:
        return {document["name"] for document in spans_collection.find(query, {"name": 1})}

    everything = set(spans)
    assert names({"attributes.energy.joules": {"$type": "double"}}) == everything
    assert names({"attributes.energy.package_0.joules": {"$type": "double"}}) == everything
    assert names({"attributes.energy.watts": {"$type": "double"}}) == everything
    assert names({"start_time_unix_nano": {"$type": "long"}, "end_time_unix_nano": {"$type": "long"}}) == everything
    assert names({"start_time": {"$type": "date"}, "end_time": {"$type": "date"}}) == everything
    # The documented query paths work on the server.
    assert names({"attributes.energy.joules": {"$gt": 60.0}}) == {"train"}
    assert names({"attributes.energy.package_0.joules": {"$gte": 20.0, "$lt": 30.0}}) == {"epoch 1"}
    assert names({"attributes.energy.source": "measured", "parent_span_id": None}) == {"train"}
    assert names({"resource.host.name": "node-e2e", "resource.slurm.job.id": "77"}) == everything
    ordered = [d["name"] for d in spans_collection.find({"parent_span_id": {"$ne": None}}).sort("start_time", 1)]
    assert ordered == ["epoch 0", "epoch 1", "epoch 2"]
    # int64 nanoseconds come back exact (not through a double): the driver's Int64 is an int.
    for name, span in spans.items():
        assert isinstance(stored[name]["start_time_unix_nano"], Int64)
        assert stored[name]["start_time_unix_nano"] == span.start_time


def test_a_span_exported_twice_is_stored_once(ferretdb: FerretDB, spans_collection: Any, tmp_path: Path) -> None:
    powercap = make_powercap(tmp_path / "sys", "one_socket")
    memory = InMemorySpanExporter()
    provider, meter = _energy_provider(powercap, SimpleSpanProcessor(memory))
    for index in range(3):
        with provider.get_tracer("e2e").start_as_current_span(f"s{index}"):
            _draw(powercap)
    provider.shutdown()
    meter.close()
    spans = list(memory.get_finished_spans())
    exporter = MongoSpanExporter(uri=ferretdb.uri, database=DATABASE, collection=COLLECTION)
    try:
        assert exporter.export(spans[:2]) is SpanExportResult.SUCCESS
        # As after a reply lost on the network: the server's duplicate-key answers mean "already stored".
        assert exporter.export(spans) is SpanExportResult.SUCCESS
        assert exporter.pending_spans == 0
    finally:
        exporter.shutdown()
    assert sorted(d["name"] for d in spans_collection.find()) == ["s0", "s1", "s2"]


def test_values_the_server_cannot_store_are_dropped_alone_and_said(
    ferretdb: FerretDB, spans_collection: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """FerretDB cannot hold NaN or infinities, which MongoDB stores; it refuses each its own way.

    A NaN: it closes the connection (the whole insert). An infinity: an error for that
    document. An infinity inside an array: an error for the whole insert. The exporter
    sends them as BSON doubles all the same (what MongoDB gets is not weakened); here
    those spans alone are dropped, in one error line, the spans around them are stored,
    and nothing is kept to be retried forever.
    """
    memory = InMemorySpanExporter()
    resource = Resource({"service.name": "e2e-train", "host.name": "node-e2e", "slurm.job.id": "77",
                         "process.command_line": "train.py --password=hunter2"})
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("e2e")
    values: dict[str, dict[str, Any]] = {
        "before": {"energy.joules": 1.0},
        "nan": {"energy.joules": math.nan},
        "middle": {"energy.joules": 2.0},
        "inf": {"energy.joules": math.inf},
        "inf-in-array": {"energy.joules": 3.0, "energy.samples_j": (1.0, math.inf)},
        "after": {"energy.joules": 4.0},
    }
    for name, attributes in {**values, "next": {"energy.joules": 5.0}}.items():
        tracer.start_span(name, attributes=attributes).end()
    provider.shutdown()
    *spans, next_span = memory.get_finished_spans()
    exporter = MongoSpanExporter(uri=ferretdb.uri, database=DATABASE, collection=COLLECTION)
    try:
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            assert exporter.export(spans) is SpanExportResult.FAILURE
            assert exporter.pending_spans == 0  # nothing left to retry forever
            assert exporter.export([next_span]) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    stored = {d["name"]: d["attributes"]["energy"]["joules"] for d in spans_collection.find()}
    assert stored == {"before": 1.0, "middle": 2.0, "after": 4.0, "next": 5.0}
    problems = [record.getMessage() for record in caplog.records]
    assert len(problems) == 1, problems
    assert problems[0].startswith(
        f"MongoDB {DATABASE}.{COLLECTION} rejected 3 span document(s), which are dropped (retrying cannot help): "
        "the server closed the connection on it (AutoReconnect: "
    )
    assert f"(_id '{spans[1].context.trace_id:032x}-{spans[1].context.span_id:016x}')" in problems[0]  # the NaN span


# The pyJoules handler ---------------------------------------------------------------------


def test_pyjoules_handler_stores_pyjoules_documents(ferretdb: FerretDB, powercap: FakePowercap) -> None:
    otel_joules.get_energy_meter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False)
    handler = MongoHandler(ferretdb.uri, "pyjoules", "traces", connected_timeout=10_000)

    @measure_energy(handler=handler)
    def foo() -> None:
        powercap.zones["package_0"].advance_joules(2.0)
        powercap.zones["dram_0"].advance_uj(3)

    before_s = time.time()
    foo()
    foo()
    with EnergyContext(handler=handler, start_tag="load") as context:
        powercap.zones["package_0"].advance_uj(500)
        context.record(tag="fit")
        powercap.zones["core_0"].advance_uj(40)
    handler.save_data()
    after_s = time.time()

    client = ferretdb.client()
    try:
        documents = list(client["pyjoules"]["traces"].find().sort("name", 1))
    finally:
        client.close()
    for document in documents:
        assert isinstance(document.pop("_id"), ObjectId)  # pyJoules lets the driver make the _id
    shapes = [(d["name"], [(s["tag"], s["energy"]) for s in d["trace"]]) for d in documents]
    assert shapes == [
        ("trace_0", [("foo", {"package_0": 2000000.0, "dram_0": 3.0, "core_0": 0.0, "uncore_0": 0.0})]),
        ("trace_1", [("foo", {"package_0": 2000000.0, "dram_0": 3.0, "core_0": 0.0, "uncore_0": 0.0})]),
        (
            "trace_2",
            [
                ("load", {"package_0": 500.0, "dram_0": 0.0, "core_0": 0.0, "uncore_0": 0.0}),
                ("fit", {"package_0": 0.0, "dram_0": 0.0, "core_0": 40.0, "uncore_0": 0.0}),
            ],
        ),
    ]
    for document in documents:
        assert set(document) == {"name", "trace"}
        for sample in document["trace"]:
            assert set(sample) == {"timestamp", "tag", "duration", "energy"}
            assert before_s <= sample["timestamp"] <= after_s and isinstance(sample["timestamp"], float)
            assert 0 < sample["duration"] < after_s - before_s + 1
            # pyJoules' domain order survives the server (a CSV written from these would match).
            assert list(sample["energy"]) == ["package_0", "dram_0", "core_0", "uncore_0"]
            assert all(type(value) is float for value in sample["energy"].values())


def test_pyjoules_handler_keeps_its_traces_through_an_outage(ferretdb: FerretDB, powercap: FakePowercap) -> None:
    otel_joules.get_energy_meter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False)
    handler = MongoHandler(ferretdb.uri, "pyjoules", "traces", connected_timeout=1_000)

    @measure_energy(handler=handler)
    def step() -> None:
        powercap.zones["package_0"].advance_uj(7)

    step()
    ferretdb.stop()
    with pytest.raises(MongoSaveError, match=r"cannot store 1 trace\(s\) in MongoDB pyjoules.traces: .*they are kept"):
        handler.save_data()
    step()
    ferretdb.start()
    deadline = time.monotonic() + PATIENCE_S
    while True:
        try:
            handler.save_data()
            break
        except MongoSaveError:
            # The driver finds the server back within a heartbeat (0.5 s after a failure).
            assert time.monotonic() < deadline, "the handler never reached the restarted server"
    assert handler.traces == []
    client = ferretdb.client()
    try:
        documents = list(client["pyjoules"]["traces"].find().sort("name", 1))
    finally:
        client.close()
    assert [(d["name"], d["trace"][0]["energy"]["package_0"]) for d in documents] == [("trace_0", 7.0), ("trace_1", 7.0)]


# Outages ------------------------------------------------------------------------------------

#: Run as ``python -c OUTAGE_CHILD URI FOLDER MAX_PENDING TIMEOUT_MS DATABASE COLLECTION``: a program that makes
#: energy spans and exports them to MongoDB when told, then just ends (no shutdown() of its
#: own: the provider's exit hook closes the exporter, as in most programs). Commands on
#: stdin, one a line: ``emit N`` (N spans, then a flush of the batch processor, i.e. one
#: export), ``flush`` (the exporter's force_flush) and ``exit``; after each but ``exit`` it
#: prints ``{"emitted": ..., "pending": ...}``. Its log goes to stderr.
OUTAGE_CHILD = textwrap.dedent(
    r"""
    import json, logging, sys
    from pathlib import Path
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from otel_joules import EnergyMeter, EnergySpanProcessor
    from otel_joules.exporters import MongoSpanExporter
    from tests.fakes.powercap import make_powercap

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s")
    uri, folder, max_pending, timeout_ms = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    powercap = make_powercap(folder / "sys", "one_socket")
    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False)
    exporter = MongoSpanExporter(
        uri=uri, database=sys.argv[5], collection=sys.argv[6],
        server_selection_timeout_ms=timeout_ms, max_pending_spans=max_pending,
    )
    provider = TracerProvider(resource=Resource({"service.name": "e2e-outage"}))
    provider.add_span_processor(EnergySpanProcessor(meter, attribution=False))
    # Exports happen when the test says so (emit's flush), never on the batch thread's timer.
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=3_600_000))
    tracer = provider.get_tracer("e2e")
    emitted = 0
    while True:
        command, _, argument = sys.stdin.readline().strip().partition(" ")
        if command == "emit":
            for _ in range(int(argument)):
                with tracer.start_as_current_span(f"span-{emitted:04d}"):
                    powercap.zones["package_0"].advance_joules(1.0)
                emitted += 1
            provider.force_flush()
        elif command == "flush":
            exporter.force_flush()
        else:
            break
        print(json.dumps({"emitted": emitted, "pending": exporter.pending_spans}), flush=True)
    """
)


class OutageChild:
    """The :data:`OUTAGE_CHILD` program, driven line by line; its stderr goes to a file."""

    def __init__(self, tmp_path: Path, uri: str, *, max_pending: int, timeout_ms: int) -> None:
        self.stderr_path = tmp_path / "child.stderr"
        folder = tmp_path / "child"
        folder.mkdir()
        env = clean_env(tmp_path)  # its PYTHONPATH has the repository: tests.fakes imports
        with open(self.stderr_path, "wb") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-c", OUTAGE_CHILD, uri, str(folder), str(max_pending), str(timeout_ms), DATABASE, COLLECTION],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env, bufsize=0,
            )
        self._buffer = b""

    def send(self, command: str) -> dict[str, int]:
        """Send one command; its answer (within :data:`PATIENCE_S`)."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(command.encode() + b"\n")
        deadline = time.monotonic() + PATIENCE_S
        while b"\n" not in self._buffer:
            remaining_s = deadline - time.monotonic()
            ready, _, _ = select.select([self.process.stdout], [], [], max(remaining_s, 0))
            if not ready:
                raise AssertionError(f"no answer to {command!r} within {PATIENCE_S} s:\n{self.stderr()}")
            chunk = os.read(self.process.stdout.fileno(), 4096)
            if not chunk:
                raise AssertionError(f"the child ended on {command!r} ({self.process.wait()}):\n{self.stderr()}")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        answer: dict[str, int] = json.loads(line)
        return answer

    def exit(self) -> float:
        """Tell the program to end; how long it took to exit (it must, within :data:`PATIENCE_S`)."""
        assert self.process.stdin is not None
        started = time.monotonic()
        self.process.stdin.write(b"exit\n")
        self.process.stdin.close()
        try:
            returncode = self.process.wait(PATIENCE_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the child hung at exit:\n{self.stderr()}") from None
        elapsed_s = time.monotonic() - started
        assert returncode == 0, self.stderr()
        return elapsed_s

    def stderr(self) -> str:
        """Everything the program has logged so far."""
        return self.stderr_path.read_text(errors="replace")

    def problems(self) -> list[str]:
        """The log lines at WARNING or above (the child logs nothing below)."""
        return [line for line in self.stderr().splitlines() if line.startswith(("WARNING ", "ERROR ", "CRITICAL "))]

    def kill(self) -> None:
        """End the program if it still runs (a failed test's cleanup)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def child_factory(tmp_path: Path) -> Iterator[Any]:
    """Start :class:`OutageChild` programs; any still running at the test's end are killed."""
    children: list[OutageChild] = []

    def make(uri: str, **kwargs: int) -> OutageChild:
        child = OutageChild(tmp_path, uri, **kwargs)
        children.append(child)
        return child

    yield make
    for child in children:
        child.kill()


def _names(collection: Any) -> list[str]:
    return sorted(document["name"] for document in collection.find({}, {"name": 1}))


def _span_names(indexes: Any) -> list[str]:
    return [f"span-{index:04d}" for index in indexes]


#: One attempt's bound in the outage tests (the retry interval too).
OUTAGE_TIMEOUT_MS = 1000
#: How long exit may take: the documented bound (about one timeout) plus the interpreter's
#: own teardown on a loaded box.
EXIT_BOUND_S = OUTAGE_TIMEOUT_MS / 1000 + 10.0


def test_an_outage_shorter_than_the_buffer_loses_nothing_and_is_logged_once(
    ferretdb: FerretDB, spans_collection: Any, child_factory: Any
) -> None:
    child = child_factory(ferretdb.uri, max_pending=10_000, timeout_ms=OUTAGE_TIMEOUT_MS)
    assert child.send("emit 5") == {"emitted": 5, "pending": 0}
    assert _names(spans_collection) == _span_names(range(5))

    ferretdb.stop()
    # Spans keep coming while the server is down: each export keeps its spans.
    assert child.send("emit 5") == {"emitted": 10, "pending": 5}
    assert child.send("emit 5") == {"emitted": 15, "pending": 10}
    assert child.send("emit 5") == {"emitted": 20, "pending": 15}

    ferretdb.start()  # same port, same data
    deadline = time.monotonic() + PATIENCE_S
    while (answer := child.send("emit 1"))["pending"]:
        # The exporter retries once its retry interval has passed since the last failure.
        assert time.monotonic() < deadline, f"the exporter never reached the restarted server: {answer}"
        time.sleep(0.2)
    emitted = answer["emitted"]
    elapsed_s = child.exit()

    assert elapsed_s < EXIT_BOUND_S
    assert _names(spans_collection) == _span_names(range(emitted))  # every span, once
    for document in spans_collection.find():
        assert document["attributes"]["energy"]["package_0"] == {"joules": 1.0}
        assert document["attributes"]["energy"]["joules"] == 1.0
    problems = child.problems()
    assert len(problems) == 2, problems
    assert problems[0].startswith(f"ERROR {LOGGER} cannot store 5 span document(s) in MongoDB {DATABASE}.{COLLECTION}: ")
    assert "they are kept in memory (at most 10000)" in problems[0]
    assert problems[1] == (
        f"WARNING {LOGGER} MongoDB {DATABASE}.{COLLECTION} is reachable again: "
        f"stored {emitted - 5} span document(s) kept since the failure"
    )


def test_an_outage_longer_than_the_buffer_drops_exactly_the_oldest_excess(
    ferretdb: FerretDB, spans_collection: Any, child_factory: Any
) -> None:
    max_pending = 8
    child = child_factory(ferretdb.uri, max_pending=max_pending, timeout_ms=OUTAGE_TIMEOUT_MS)
    assert child.send("emit 5") == {"emitted": 5, "pending": 0}
    ferretdb.stop()
    assert child.send("emit 5") == {"emitted": 10, "pending": 5}
    assert child.send("emit 5") == {"emitted": 15, "pending": 8}
    assert child.send("emit 5") == {"emitted": 20, "pending": 8}
    ferretdb.start()
    deadline = time.monotonic() + PATIENCE_S
    while (answer := child.send("flush"))["pending"]:
        assert time.monotonic() < deadline, f"the exporter never reached the restarted server: {answer}"
    elapsed_s = child.exit()

    assert elapsed_s < EXIT_BOUND_S
    # The 15 spans of the outage met a bound of 8: the 7 oldest went, the 8 newest were kept.
    assert _names(spans_collection) == _span_names([*range(5), *range(12, 20)])
    problems = child.problems()
    assert len(problems) == 3, problems
    assert problems[0].startswith(f"ERROR {LOGGER} cannot store 5 span document(s) in MongoDB {DATABASE}.{COLLECTION}: ")
    assert problems[1] == (
        f"ERROR {LOGGER} MongoDB {DATABASE}.{COLLECTION}: dropped the 2 oldest unsent span document(s): more than "
        f"max_pending_spans=8 are waiting while the server cannot be reached; further drops are counted and "
        f"reported when it ends"
    )
    assert problems[2] == (
        f"WARNING {LOGGER} MongoDB {DATABASE}.{COLLECTION} is reachable again: stored 8 span document(s) kept since "
        f"the failure; 7 older span document(s) were dropped during the failure (max_pending_spans=8)"
    )


def test_a_server_still_down_at_exit_delays_exit_by_about_one_timeout_and_counts_the_loss(
    ferretdb: FerretDB, spans_collection: Any, child_factory: Any
) -> None:
    child = child_factory(ferretdb.uri, max_pending=10_000, timeout_ms=OUTAGE_TIMEOUT_MS)
    assert child.send("emit 3") == {"emitted": 3, "pending": 0}
    ferretdb.stop()
    assert child.send("emit 4") == {"emitted": 7, "pending": 4}
    elapsed_s = child.exit()

    assert elapsed_s < EXIT_BOUND_S
    problems = child.problems()
    assert len(problems) == 2, problems
    assert problems[0].startswith(f"ERROR {LOGGER} cannot store 4 span document(s) in MongoDB {DATABASE}.{COLLECTION}: ")
    assert problems[1] == (
        f"ERROR {LOGGER} MongoDB {DATABASE}.{COLLECTION}: 4 span document(s) could not be stored at shutdown "
        f"and are lost (last error logged above)"
    )
    ferretdb.start()
    assert _names(spans_collection) == _span_names(range(3))
