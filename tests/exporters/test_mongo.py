"""MongoSpanExporter: documents (mongomock), a server that is down then back (real pymongo
against a closed port, then a wire-protocol server on it), lifecycle, a real server (FerretDB,
or the MongoDB that ``OTEL_JOULES_TEST_MONGO_URI`` names)."""

from __future__ import annotations

import datetime
import logging
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import mongomock
import pymongo
import pytest
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_joules.errors import ConfigurationError
from otel_joules.exporters import MissingExtraError, MongoSpanExporter
from otel_joules.exporters.mongo_exporter import LEAF_KEY, nest_attributes

from tests.fakes.mongo_wire import FakeMongoServer
from tests.helpers.processes import closed_port
from tests.helpers.ferretdb import start_ferretdb
from tests.helpers.known_spans import (
    CHILD_NAME,
    CHILD_SPAN_ID,
    ROOT_SPAN_ID,
    TRACE_ID,
    emit_plain,
    emit_run,
    emit_train_and_epoch,
    make_provider,
)
from tests.helpers.processes import REPO

LOGGER = "otel_joules.exporters"

ROOT_DOCUMENT = {
    "_id": f"{TRACE_ID}-{ROOT_SPAN_ID}",
    "name": "train",
    "trace_id": TRACE_ID,
    "span_id": ROOT_SPAN_ID,
    "parent_span_id": None,
    "start_time": datetime.datetime(2023, 11, 14, 22, 13, 20),
    "end_time": datetime.datetime(2023, 11, 14, 22, 13, 21, 500000),
    "start_time_unix_nano": 1_700_000_000_000_000_000,
    "end_time_unix_nano": 1_700_000_001_500_000_000,
    "duration_s": 1.5,
    "service_name": "svc",
    "attributes": {
        "energy": {
            "co2eq": {"grams": 0.0015451388888888889},
            "core_0": {"joules": 7.25},
            "dram_0": {"joules": 2.5},
            "joules": 12.5,
            "package_0": {"joules": 10.0},
            "source": "measured",
            "watts": 8.333333333333334,
        }
    },
    # The resource's identities nested as the attributes are; its command line is not kept.
    "resource": {"host": {"name": "node-7"}, "slurm": {"job": {"id": "4242"}}},
}
CHILD_DOCUMENT = {
    "_id": f"{TRACE_ID}-{CHILD_SPAN_ID}",
    "name": CHILD_NAME,
    "trace_id": TRACE_ID,
    "span_id": CHILD_SPAN_ID,
    "parent_span_id": ROOT_SPAN_ID,
    "start_time": datetime.datetime(2023, 11, 14, 22, 13, 20, 250000),
    "end_time": datetime.datetime(2023, 11, 14, 22, 13, 20, 260000),
    "start_time_unix_nano": 1_700_000_000_250_000_000,
    "end_time_unix_nano": 1_700_000_000_260_000_000,
    "duration_s": 0.01,
    "service_name": "svc",
    "attributes": {
        "energy": {
            "below_resolution": True,
            "domains": ["nvidia_gpu_0"],
            "joules": 0.125,
            "nvidia_gpu_0": {"joules": 0.125},
            "samples": 3,
            "source": "estimate",
        }
    },
    "resource": {"host": {"name": "node-7"}, "slurm": {"job": {"id": "4242"}}},
}


def _spans(count: int = 0) -> list[Any]:
    """Ended SDK spans: the train/epoch pair, or ``count`` plain spans named s0, s1, ...

    Each call gets a trace id of its own, so documents of two calls never share an ``_id``.
    """
    memory = InMemorySpanExporter()
    provider = make_provider(SimpleSpanProcessor(memory), trace_id=TRACE_ID if not count else uuid.uuid4().hex)
    if count:
        for index in range(count):
            emit_plain(provider, f"s{index}", offset_s=index, joules=float(index))
    else:
        emit_train_and_epoch(provider)
    provider.shutdown()
    return list(memory.get_finished_spans())


# Documents -------------------------------------------------------------------------------


def test_documents_in_mongomock_behind_a_batch_processor() -> None:
    client = mongomock.MongoClient()
    exporter = MongoSpanExporter(client=client, database="energy", collection="runs")
    provider = make_provider(BatchSpanProcessor(exporter))
    emit_train_and_epoch(provider)
    provider.shutdown()
    stored = list(client["energy"]["runs"].find())
    assert stored == [CHILD_DOCUMENT, ROOT_DOCUMENT]
    # The attribute name is the query path under "attributes".
    hot = client["energy"]["runs"].find({"attributes.energy.joules": {"$gt": 1}})
    assert [document["name"] for document in hot] == ["train"]
    by_domain = client["energy"]["runs"].find({"attributes.energy.nvidia_gpu_0.joules": {"$exists": True}})
    assert [document["span_id"] for document in by_domain] == [CHILD_SPAN_ID]


def test_default_database_and_collection() -> None:
    client = mongomock.MongoClient()
    exporter = MongoSpanExporter(client=client)
    assert exporter.export(_spans(1)) is SpanExportResult.SUCCESS
    assert client["otel_joules"]["spans"].count_documents({}) == 1


def test_exporting_the_same_span_twice_stores_it_once() -> None:
    client = mongomock.MongoClient()
    exporter = MongoSpanExporter(client=client)
    spans = _spans()
    assert exporter.export(spans) is SpanExportResult.SUCCESS
    # As after a reply lost on the network: the duplicate key means "already stored".
    assert exporter.export(spans) is SpanExportResult.SUCCESS
    assert client["otel_joules"]["spans"].count_documents({}) == 2
    assert exporter.pending_spans == 0


def test_nesting_keeps_a_value_that_is_also_a_prefix() -> None:
    assert nest_attributes({"energy.gpu": 5.0, "energy.gpu.joules": 3.0, "energy.x": (1, 2)}) == {
        "energy": {"gpu": {LEAF_KEY: 5.0, "joules": 3.0}, "x": [1, 2]}
    }
    assert nest_attributes({"energy.gpu.joules": 3.0, "energy.gpu": 5.0}) == {
        "energy": {"gpu": {"joules": 3.0, LEAF_KEY: 5.0}}
    }


def test_text_bson_cannot_hold_is_replaced_not_fatal() -> None:
    client = mongomock.MongoClient()
    exporter = MongoSpanExporter(client=client)
    provider = make_provider(SimpleSpanProcessor(exporter))
    span = provider.get_tracer("t").start_span("bad\ud800name", start_time=1, attributes={"energy.source": "x\udfff"})
    span.end(end_time=2)
    provider.shutdown()
    (document,) = client["otel_joules"]["spans"].find()
    assert document["name"] == "bad\ufffdname"
    assert document["attributes"] == {"energy": {"source": "x\ufffd"}}


# Server down, then back --------------------------------------------------------------------


@pytest.fixture
def down_port() -> int:
    return closed_port()


@pytest.fixture
def real_client(down_port: int) -> Iterator[pymongo.MongoClient]:
    """A real driver aimed at a port nothing listens on (yet), failing fast."""
    client: pymongo.MongoClient = pymongo.MongoClient(
        f"mongodb://127.0.0.1:{down_port}",
        serverSelectionTimeoutMS=100,
        heartbeatFrequencyMS=500,
        connectTimeoutMS=200,
    )
    yield client
    client.close()


@pytest.fixture
def server_later(down_port: int) -> Iterator[list[FakeMongoServer]]:
    started: list[FakeMongoServer] = []
    yield started
    for server in started:
        server.stop()


def _until(condition: Any, timeout_s: float = 10.0) -> bool:
    """Call ``condition`` until it returns True (the driver re-checks a server at most every 0.5 s)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
    return False


def test_server_down_keeps_documents_and_logs_one_clear_error(
    real_client: pymongo.MongoClient, caplog: pytest.LogCaptureFixture
) -> None:
    exporter = MongoSpanExporter(client=real_client, database="d", collection="c")
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        assert exporter.export(_spans()) is SpanExportResult.FAILURE
        assert exporter.pending_spans == 2
        assert exporter.export(_spans(3)) is SpanExportResult.FAILURE
        assert exporter.pending_spans == 5
        assert exporter.force_flush() is False
    errors = [record for record in caplog.records if record.levelno == logging.ERROR]
    assert len(errors) == 1
    message = errors[0].getMessage()
    assert message.startswith("cannot store 2 span document(s) in MongoDB d.c: ServerSelectionTimeoutError")
    assert "kept in memory (at most 10000)" in message and "check that the server runs" in message


def test_pending_documents_are_bounded(real_client: pymongo.MongoClient, caplog: pytest.LogCaptureFixture) -> None:
    exporter = MongoSpanExporter(client=real_client, max_pending_spans=3)
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        assert exporter.export(_spans(2)) is SpanExportResult.FAILURE
        assert exporter.export(_spans(2)) is SpanExportResult.FAILURE
    assert exporter.pending_spans == 3
    assert "dropped the 1 oldest unsent span document(s)" in caplog.text


def test_documents_kept_while_down_are_sent_by_the_next_export(
    real_client: pymongo.MongoClient, down_port: int, server_later: list[FakeMongoServer], caplog: pytest.LogCaptureFixture
) -> None:
    exporter = MongoSpanExporter(client=real_client, database="d", collection="c")
    assert exporter.export(_spans()) is SpanExportResult.FAILURE
    server = FakeMongoServer(down_port).start()
    server_later.append(server)
    s0, s1 = _spans(2)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        if exporter.export([s0]) is SpanExportResult.FAILURE:
            # The driver re-checks a server at most every 0.5 s: this export may still have
            # met the old state. Then it kept its own span behind the earlier two.
            assert exporter.pending_spans == 3
            assert _until(exporter.force_flush)
        assert exporter.export([s1]) is SpanExportResult.SUCCESS
    assert exporter.pending_spans == 0
    stored = server.documents("d.c")
    assert [document["name"] for document in stored] == [CHILD_NAME, "train", "s0", "s1"]
    assert stored[1]["attributes"] == ROOT_DOCUMENT["attributes"]
    assert stored[1]["start_time_unix_nano"] == 1_700_000_000_000_000_000
    assert "MongoDB d.c is reachable again: stored" in caplog.text


def test_force_flush_sends_what_was_kept(
    real_client: pymongo.MongoClient, down_port: int, server_later: list[FakeMongoServer]
) -> None:
    exporter = MongoSpanExporter(client=real_client, database="d", collection="c")
    assert exporter.export(_spans(3)) is SpanExportResult.FAILURE
    server = FakeMongoServer(down_port).start()
    server_later.append(server)
    assert _until(exporter.force_flush)
    assert [document["name"] for document in server.documents("d.c")] == ["s0", "s1", "s2"]
    assert [document["attributes"]["energy"]["joules"] for document in server.documents("d.c")] == [0.0, 1.0, 2.0]
    exporter.shutdown()
    # The caller's client is the caller's: still open after the exporter's shutdown.
    real_client["d"]["other"].insert_one({"_id": 1})
    assert server.documents("d.other") == [{"_id": 1}]


def test_documents_the_server_refuses_are_dropped_not_retried_forever(caplog: pytest.LogCaptureFixture) -> None:
    server = FakeMongoServer().start()
    server.reject_names.add("s1")  # as a collection validator would
    client: pymongo.MongoClient = pymongo.MongoClient(f"mongodb://127.0.0.1:{server.port}", serverSelectionTimeoutMS=5000)
    try:
        exporter = MongoSpanExporter(client=client, database="d", collection="c")
        with caplog.at_level(logging.ERROR, logger=LOGGER):
            assert exporter.export(_spans(3)) is SpanExportResult.FAILURE
        assert exporter.pending_spans == 0
        assert exporter.force_flush() is True
        assert (
            "MongoDB d.c rejected 1 span document(s), which are dropped (retrying cannot help): "
            "Document failed validation" in caplog.text
        )
        assert [document["name"] for document in server.documents("d.c")] == ["s0", "s2"]
    finally:
        client.close()
        server.stop()


def test_a_document_that_fails_the_whole_insert_is_found_and_dropped_alone(caplog: pytest.LogCaptureFixture) -> None:
    server = FakeMongoServer().start()
    server.fail_insert_names.add("s1")  # as FerretDB answers a NaN
    client: pymongo.MongoClient = pymongo.MongoClient(f"mongodb://127.0.0.1:{server.port}", serverSelectionTimeoutMS=5000)
    try:
        exporter = MongoSpanExporter(client=client, database="d", collection="c")
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            assert exporter.export(_spans(4)) is SpanExportResult.FAILURE
            assert exporter.pending_spans == 0
            # Nothing is held back behind it: the next export goes through at once.
            assert exporter.export(_spans(1)) is SpanExportResult.SUCCESS
        assert [document["name"] for document in server.documents("d.c")] == ["s0", "s2", "s3", "s0"]
        (message,) = [record.getMessage() for record in caplog.records]
        assert message.startswith(
            "MongoDB d.c rejected 1 span document(s), which are dropped (retrying cannot help): "
            "OperationFailure: json: unsupported value: NaN"
        )
        assert "(_id '" in message
    finally:
        client.close()
        server.stop()


def test_a_server_that_refuses_every_document_keeps_them_all_for_retry(caplog: pytest.LogCaptureFixture) -> None:
    server = FakeMongoServer().start()
    server.fail_insert_names.update({"s0", "s1", "s2"})  # a server-side fault, not the documents'
    client: pymongo.MongoClient = pymongo.MongoClient(f"mongodb://127.0.0.1:{server.port}", serverSelectionTimeoutMS=5000)
    try:
        exporter = MongoSpanExporter(client=client, database="d", collection="c")
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            assert exporter.export(_spans(3)) is SpanExportResult.FAILURE
            assert exporter.pending_spans == 3
            server.fail_insert_names.clear()
            assert exporter.force_flush() is True
        assert [document["name"] for document in server.documents("d.c")] == ["s0", "s1", "s2"]
        messages = [record.getMessage() for record in caplog.records]
        assert len(messages) == 2, messages
        assert messages[0].startswith("cannot store 3 span document(s) in MongoDB d.c: OperationFailure: json: unsupported")
        assert messages[1] == "MongoDB d.c is reachable again: stored 3 span document(s) kept since the failure"
    finally:
        client.close()
        server.stop()


def test_drops_are_logged_once_per_outage_and_counted_when_it_ends(
    real_client: pymongo.MongoClient, down_port: int, server_later: list[FakeMongoServer], caplog: pytest.LogCaptureFixture
) -> None:
    exporter = MongoSpanExporter(client=real_client, database="d", collection="c", max_pending_spans=3)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for _ in range(3):
            assert exporter.export(_spans(2)) is SpanExportResult.FAILURE
        assert exporter.pending_spans == 3
        server = FakeMongoServer(down_port).start()
        server_later.append(server)
        assert _until(exporter.force_flush)
    assert [document["name"] for document in server.documents("d.c")] == ["s1", "s0", "s1"]
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 3, messages
    assert messages[0].startswith("cannot store 2 span document(s) in MongoDB d.c")
    assert messages[1] == (
        "MongoDB d.c: dropped the 1 oldest unsent span document(s): more than max_pending_spans=3 are waiting while "
        "the server cannot be reached; further drops are counted and reported when it ends"
    )
    assert messages[2] == (
        "MongoDB d.c is reachable again: stored 3 span document(s) kept since the failure; "
        "3 older span document(s) were dropped during the failure (max_pending_spans=3)"
    )


def test_shutdown_while_down_reports_the_loss_and_closes_its_own_client(
    down_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    exporter = MongoSpanExporter(uri=f"mongodb://127.0.0.1:{down_port}", server_selection_timeout_ms=100)
    assert exporter.export(_spans()) is SpanExportResult.FAILURE
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        exporter.shutdown()
        exporter.shutdown()
    assert caplog.text.count("2 span document(s) could not be stored at shutdown and are lost") == 1
    assert exporter.pending_spans == 0
    assert exporter.export(_spans(1)) is SpanExportResult.FAILURE
    with pytest.raises(pymongo.errors.InvalidOperation):  # the client it made is closed
        exporter._client["d"]["c"].insert_one({})


AT_EXIT_SCRIPT = r"""
import sys
import pymongo
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from tests.helpers.known_spans import emit_plain, make_provider
from otel_joules.exporters import MongoSpanExporter

client = pymongo.MongoClient(sys.argv[1], serverSelectionTimeoutMS=2000, heartbeatFrequencyMS=500)
exporter = MongoSpanExporter(client=client, database="d", collection="c")
provider = make_provider(SimpleSpanProcessor(exporter))
emit_plain(provider, "kept-at-exit", offset_s=0, joules=42.0)
print("pending", exporter.pending_spans, flush=True)
sys.stdin.readline()  # the test starts the server, then lets this process end
# No shutdown(): the exporter's exit hook must send what it kept.
"""


def test_documents_kept_are_sent_at_interpreter_exit(down_port: int, server_later: list[FakeMongoServer]) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    child = subprocess.Popen(
        [sys.executable, "-c", AT_EXIT_SCRIPT, f"mongodb://127.0.0.1:{down_port}"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline() == "pending 1\n"
        server = FakeMongoServer(down_port).start()
        server_later.append(server)
        stdout, stderr = child.communicate("go\n", timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, stderr
    assert [(d["name"], d["attributes"]) for d in server.documents("d.c")] == [
        ("kept-at-exit", {"energy": {"joules": 42.0}})
    ]
    assert "lost" not in stderr


# Construction ---------------------------------------------------------------------------


def test_missing_pymongo_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pymongo", None)  # what `import pymongo` meets when absent
    with pytest.raises(MissingExtraError, match=r"pip install 'otel-joules\[mongo\]'"):
        MongoSpanExporter(uri="mongodb://127.0.0.1:27017")
    assert isinstance(MissingExtraError("x"), ImportError)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({}, "exactly one of uri"),
        ({"uri": "mongodb://127.0.0.1:1", "client": mongomock.MongoClient()}, "exactly one of uri"),
        ({"uri": "http://127.0.0.1:1"}, "uri cannot be used"),
        ({"uri": ""}, "must be a MongoDB URI"),
        ({"client": mongomock.MongoClient(), "database": ""}, "database=''"),
        ({"client": mongomock.MongoClient(), "collection": None}, "collection=None"),
        ({"client": mongomock.MongoClient(), "server_selection_timeout_ms": 0}, "server_selection_timeout_ms=0"),
        ({"client": mongomock.MongoClient(), "max_pending_spans": -1}, "max_pending_spans=-1"),
    ],
)
def test_bad_arguments_are_refused_clearly(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        MongoSpanExporter(**kwargs)


def test_uri_password_is_not_echoed_in_errors() -> None:
    with pytest.raises(ConfigurationError) as error:
        MongoSpanExporter(uri="mongodb://user:s3cret@127.0.0.1:notaport")
    assert "s3cret" not in str(error.value) and "Port contains non-digit" in str(error.value)


# A real server ------------------------------------------------------------------------------

#: A MongoDB of the user's to test against instead of FerretDB (it needs a database it may write).
MONGO_URI_ENV = "OTEL_JOULES_TEST_MONGO_URI"


@pytest.fixture
def real_server_uri(tmp_path: Path) -> Iterator[str]:
    """``$OTEL_JOULES_TEST_MONGO_URI`` when set, else a FerretDB started for the test (tests.helpers.ferretdb)."""
    uri = os.environ.get(MONGO_URI_ENV)
    if uri:
        yield uri
        return
    server = start_ferretdb(tmp_path)
    try:
        yield server.uri
    finally:
        server.stop()


def test_against_a_real_server(real_server_uri: str) -> None:
    collection = f"spans_{uuid.uuid4().hex}"
    exporter = MongoSpanExporter(uri=real_server_uri, database="otel_joules_test", collection=collection)
    check: pymongo.MongoClient = pymongo.MongoClient(real_server_uri, serverSelectionTimeoutMS=10_000)
    try:
        provider = make_provider(BatchSpanProcessor(exporter))
        emit_train_and_epoch(provider)
        provider.shutdown()
        stored = list(check["otel_joules_test"][collection].find().sort("start_time_unix_nano", 1))
        assert stored == [ROOT_DOCUMENT, CHILD_DOCUMENT]
        # The documented query paths, answered by the server itself.
        hot = check["otel_joules_test"][collection].find({"attributes.energy.joules": {"$gt": 1}})
        assert [document["name"] for document in hot] == ["train"]
    finally:
        check["otel_joules_test"].drop_collection(collection)
        check.close()


def test_carbon_attributes_are_nested_and_queryable() -> None:
    client = mongomock.MongoClient()
    provider = make_provider(SimpleSpanProcessor(MongoSpanExporter(client=client, database="energy", collection="runs")))
    emit_run(provider)
    emit_plain(provider, "no-carbon", offset_s=10, joules=1.0)
    provider.shutdown()
    run = client["energy"]["runs"].find_one({"_id": f"{TRACE_ID}-{ROOT_SPAN_ID}"})
    assert run["name"] == "python3"
    assert run["attributes"] == {
        "carbon": {"intensity": {"gco2eq_per_kwh": 300.0, "source": "explicit"}, "pue": 1.2},
        "energy": {
            "co2eq": {"grams": 0.00035},
            "core_0": {"joules": 0.25},
            "dram_0": {"joules": 0.5},
            "joules": 3.5,
            "package_0": {"joules": 3.0},
            "source": "measured",
            "watts": 1.75,
        },
    }
    found = client["energy"]["runs"].find({"attributes.carbon.pue": {"$gt": 1.0}})
    assert [document["name"] for document in found] == ["python3"]
