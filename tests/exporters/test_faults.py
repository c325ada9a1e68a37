"""Fault matrix, exporter side (issue 13): down, silent and slow MongoDB; full disk, read-only and
deleted files; a fork while the batch thread holds the exporter's lock; SIGKILL of a writer.

Every cell checks the same four things: the user's code ran and returned, there is at most
one clear message per fault, no record already taken is lost without being counted in a
message, and nothing is delivered twice or invented. Faults that would hang or kill the
test process (fork, exit, file-size limits, another uid, SIGKILL) run in a child process
with a timeout. MongoDB is the wire-protocol fake of ``tests.fakes.mongo_wire``, driven by the
real pymongo.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import pymongo
import pytest
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_joules.exporters import JsonLinesSpanExporter, MongoSpanExporter

from tests.fakes.mongo_wire import FakeMongoServer
from tests.helpers.processes import closed_port
from tests.helpers.known_spans import emit_plain, make_provider, plain_spans
from tests.helpers.processes import REPO

LOGGER = "otel_joules.exporters"
_LOST = re.compile(r"(\d+) span (?:document|record)\(s\) could not be (?:stored|written) [^\n]* are lost")


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))


def _run(script: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, env=_env(), timeout=timeout
    )


def _within(seconds: float, call: Callable[[], object]) -> list[object]:
    """``[call()]`` if it returns within ``seconds``, else ``[]`` (a hang fails the test, not the suite)."""
    results: list[object] = []
    worker = threading.Thread(target=lambda: results.append(call()), daemon=True)
    worker.start()
    worker.join(seconds)
    return results


def _until(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


# ------------------------------------------------------------------------- fork (item 2)

FORK_SCRIPT = r"""
import os, sys, time
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from otel_joules.exporters import MongoSpanExporter

exporter = MongoSpanExporter(uri=sys.argv[1], server_selection_timeout_ms=1000)
provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=10))
tracer = provider.get_tracer("fork")
with tracer.start_as_current_span("before-fork"):
    pass
deadline = time.monotonic() + 10
while not exporter._lock.locked():  # the batch thread is inside export(), holding the lock
    if time.monotonic() > deadline:
        sys.exit("the batch thread never started exporting")
    time.sleep(0.001)
pid = os.fork()
if pid == 0:  # a DataLoader-style worker: does its work and ends normally (exit hooks run)
    with tracer.start_as_current_span("in-child"):
        result = 6 * 7
    print("child returned", result, flush=True)
    sys.exit(0)
started = time.monotonic()
while True:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    if time.monotonic() - started > 20:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        print("child hung", flush=True)
        sys.exit(3)
    time.sleep(0.02)
print("child exited", os.waitstatus_to_exitcode(status), round(time.monotonic() - started, 2), flush=True)
"""


def test_fork_while_the_batch_thread_holds_the_exporter_lock_child_exits_promptly() -> None:
    result = _run(FORK_SCRIPT, f"mongodb://127.0.0.1:{closed_port()}")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert "child returned 42" in lines
    (exited,) = [line for line in lines if line.startswith("child exited")]
    _, _, code, seconds = exited.split()
    assert code == "0"
    # The child's own span is tried once (1 s timeout) and reported lost, once.
    assert float(seconds) < 8.0
    assert result.stderr.count("could not be stored at shutdown and are lost") == 2  # child's span, parent's span


FORK_EVERY_LOCK_SCRIPT = r"""
import os, sys, threading, time
from otel_joules.carbontracker.logs import CarbonTrackerLogWriter
from otel_joules.exporters import CsvSpanExporter, DataFrameSpanExporter, JsonLinesSpanExporter
from otel_joules.pyjoules.handler.csv_handler import CSVHandler

folder = sys.argv[1]
objects = {
    "csv": CsvSpanExporter(os.path.join(folder, "spans.csv")),
    "jsonl": JsonLinesSpanExporter(os.path.join(folder, "spans.jsonl")),
    "dataframe": DataFrameSpanExporter(),
    "pyjoules_csv": CSVHandler(os.path.join(folder, "pyjoules.csv")),
    "carbontracker_log": CarbonTrackerLogWriter(folder, run_id=1),
}
held, release = threading.Event(), threading.Event()

def hold_every_lock():  # as a writer thread in the middle of its I/O
    for thing in objects.values():
        thing._lock.acquire()
    held.set()
    release.wait()
    for thing in objects.values():
        thing._lock.release()

threading.Thread(target=hold_every_lock, daemon=True).start()
held.wait()
pid = os.fork()
if pid == 0:
    stuck = []
    for name, thing in objects.items():
        if thing._lock.acquire(timeout=2):
            thing._lock.release()
        else:
            stuck.append(name)
    print("stuck:", ",".join(stuck) or "none", flush=True)
    sys.exit(0)  # exit hooks run (the file exporters flush at exit)
started = time.monotonic()
while not os.waitpid(pid, os.WNOHANG)[0]:
    if time.monotonic() - started > 20:
        os.kill(pid, 9)
        print("child hung at exit", flush=True)
        break
    time.sleep(0.02)
release.set()
"""


def test_fork_with_every_exporter_and_handler_lock_held(tmp_path: Path) -> None:
    result = _run(FORK_EVERY_LOCK_SCRIPT, str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["stuck: none"], result.stdout + result.stderr


# --------------------------------------------------------------- MongoDB down, at exit

EXIT_SCRIPT = r"""
import sys, time
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from tests.helpers.known_spans import emit_plain, make_provider
from otel_joules.exporters import MongoSpanExporter

import atexit
holder = []
if sys.argv[4] == "provider-made-first":  # its exit hook then runs after the exporter's
    atexit.register(lambda: holder[0].shutdown())  # what shutdown_on_exit=True does
exporter = MongoSpanExporter(uri=sys.argv[1], server_selection_timeout_ms=int(sys.argv[2]))
provider = make_provider(BatchSpanProcessor(exporter, max_queue_size=4096))
holder.append(provider)
if sys.argv[4] == "exporter-made-first":
    atexit.register(provider.shutdown)
started = time.monotonic()
for index in range(int(sys.argv[3])):
    emit_plain(provider, f"s{index}", offset_s=index, joules=1.0)
print("user code returned at", time.time(), flush=True)
"""


@pytest.mark.parametrize("order", ["provider-made-first", "exporter-made-first"])
def test_mongodb_down_delays_exit_by_one_timeout_not_one_per_batch(order: str) -> None:
    timeout_ms, spans = 1500, 2000  # 4 batches of 512: one timeout each used to add up
    result = _run(EXIT_SCRIPT, f"mongodb://127.0.0.1:{closed_port()}", str(timeout_ms), str(spans), order)
    ended = time.time()
    assert result.returncode == 0, result.stderr
    (returned,) = [line for line in result.stdout.splitlines() if line.startswith("user code returned at")]
    exit_delay_s = ended - float(returned.split()[-1])
    # The batch in flight (one timeout) and at most one last try; before the fix, 5 timeouts.
    assert exit_delay_s < 2 * timeout_ms / 1000 + 1.0, (exit_delay_s, result.stderr)
    assert result.stderr.count("cannot store") == 1  # the fault, once
    assert [int(count) for count in _LOST.findall(result.stderr)] == [spans]  # counted once, all of them


# ------------------------------------------------------------- silent and slow servers


@pytest.fixture
def fake_mongo() -> Iterator[FakeMongoServer]:
    server = FakeMongoServer().start()
    yield server
    server.stop()


def test_silent_after_handshake_bounded_then_stored_exactly_once(
    fake_mongo: FakeMongoServer, caplog: pytest.LogCaptureFixture
) -> None:
    fake_mongo.mute.add("insert")  # stores what it gets, never answers: replies lost
    exporter = MongoSpanExporter(uri=f"mongodb://127.0.0.1:{fake_mongo.port}", database="d", collection="c",
                                 server_selection_timeout_ms=700)
    spans = plain_spans(3)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        results = _within(10.0, lambda: exporter.export(spans))  # bounded by the timeout, not forever
        assert results == [SpanExportResult.FAILURE]
        assert exporter.pending_spans == 3
        fake_mongo.mute.clear()
        # The retry meets duplicate keys: already stored. (The driver may take a heartbeat
        # to see the server again after the timed-out connection.)
        assert _until(exporter.force_flush)
        exporter.shutdown()
    assert sorted(doc["name"] for doc in fake_mongo.documents("d.c")) == ["s0", "s1", "s2"]
    assert [r.levelno for r in caplog.records].count(logging.ERROR) == 1


def test_silent_tcp_endpoint_user_code_never_waits() -> None:
    with socket.socket() as listener:  # accepts connections (the kernel's backlog), never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        exporter = MongoSpanExporter(uri=f"mongodb://127.0.0.1:{listener.getsockname()[1]}",
                                     server_selection_timeout_ms=500)
        provider = make_provider(BatchSpanProcessor(exporter, schedule_delay_millis=10))
        started = time.monotonic()
        for index in range(50):
            emit_plain(provider, f"s{index}", offset_s=index, joules=1.0)
        user_s = time.monotonic() - started
        assert _within(3.0, provider.shutdown) == [None]
    assert user_s < 1.0
    assert exporter.pending_spans == 0  # reported lost at shutdown, not kept forever


def test_slow_server_everything_stored_once_user_code_unaffected(fake_mongo: FakeMongoServer) -> None:
    fake_mongo.reply_delay_s = 0.5  # 5 batches: waiting on them in the user's thread would take 2.5 s
    client: pymongo.MongoClient = pymongo.MongoClient(f"mongodb://127.0.0.1:{fake_mongo.port}", serverSelectionTimeoutMS=3000)
    try:
        exporter = MongoSpanExporter(client=client, database="d", collection="c")
        provider = make_provider(BatchSpanProcessor(exporter, schedule_delay_millis=10, max_export_batch_size=20))
        started = time.monotonic()
        for index in range(100):
            emit_plain(provider, f"s{index}", offset_s=index, joules=1.0)
        user_s = time.monotonic() - started
        provider.shutdown()
    finally:
        client.close()
    assert user_s < 1.5
    names = [doc["name"] for doc in fake_mongo.documents("d.c")]
    assert sorted(names) == sorted(f"s{i}" for i in range(100))


# ------------------------------------------------------------------------- full disk

FULL_DISK_SCRIPT = r"""
import json, logging, os, resource, signal, sys
from tests.helpers.known_spans import emit_plain, make_provider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otel_joules.exporters import JsonLinesSpanExporter

logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(message)s")
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
path = sys.argv[1]
exporter = JsonLinesSpanExporter(path)
memory = InMemorySpanExporter()
provider = make_provider(SimpleSpanProcessor(memory))
for index in range(10):
    emit_plain(provider, f"s{index}", offset_s=index, joules=1.0)
spans = memory.get_finished_spans()
line = len(open(path, "rb").read()) if os.path.getsize(path) else None
_, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
exporter.export(spans[:1])
one = os.path.getsize(path)
# Room for 3.5 more records: a backlog of 9 must not be all or nothing.
resource.setrlimit(resource.RLIMIT_FSIZE, (one + int(3.5 * one), hard))
report = {"first": exporter.export(spans[1:]).name, "pending": exporter.pending_spans,
          "lines_while_full": open(path, "rb").read().count(b"\n"),
          "ends_whole": open(path, "rb").read().endswith(b"\n")}
resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
report["flushed"] = exporter.force_flush()
exporter.shutdown()
print(json.dumps(report))
"""


def test_full_disk_writes_what_fits_keeps_the_rest_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    result = _run(FULL_DISK_SCRIPT, str(path))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report == {"first": "FAILURE", "pending": 6, "lines_while_full": 4, "ends_whole": True, "flushed": True}
    names = [json.loads(line)["name"] for line in path.read_text().splitlines()]
    assert names == [f"s{i}" for i in range(10)]  # nothing lost, nothing twice, in order
    errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1 and "cannot write 6 of 9 span record(s)" in errors[0]
    assert "the 3 whole record(s) that fitted are written" in errors[0]


# ------------------------------------------------- deleted, rotated and read-only files


def _names(path: Path) -> list[str]:
    return [json.loads(line)["name"] for line in path.read_text().splitlines()]


def test_file_deleted_while_running_is_noticed_and_reopened(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "spans.jsonl"
    exporter = JsonLinesSpanExporter(path)
    a, b, c = plain_spans(3)
    assert exporter.export([a]) is SpanExportResult.SUCCESS
    path.unlink()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert exporter.export([b]) is SpanExportResult.SUCCESS
        assert exporter.export([c]) is SpanExportResult.SUCCESS
    exporter.shutdown()
    assert _names(path) == ["s1", "s2"]
    assert caplog.text.count("was deleted or moved away") == 1


def test_log_rotation_by_rename_keeps_every_record_once(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    exporter = JsonLinesSpanExporter(path)
    spans = plain_spans(4)
    exporter.export(spans[:2])
    path.rename(tmp_path / "spans.jsonl.1")  # what logrotate does, without copytruncate
    exporter.export(spans[2:])
    exporter.shutdown()
    assert _names(tmp_path / "spans.jsonl.1") == ["s0", "s1"]
    assert _names(path) == ["s2", "s3"]


READ_ONLY_SCRIPT = r"""
import json, logging, os, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(message)s")
from tests.helpers.known_spans import emit_plain, make_provider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otel_joules.exporters import JsonLinesSpanExporter
from otel_joules.exporters.errors import ExporterPathError
os.setgid(65534); os.setuid(65534)  # imports first: the interpreter lives under /root

folder = sys.argv[1]
report = {}
os.chmod(folder, 0o555)
try:
    JsonLinesSpanExporter(os.path.join(folder, "new.jsonl"))
except ExporterPathError as exc:
    report["construct"] = str(exc)
os.chmod(folder, 0o755)
path = os.path.join(folder, "spans.jsonl")
exporter = JsonLinesSpanExporter(path)
memory = InMemorySpanExporter()
provider = make_provider(SimpleSpanProcessor(memory))
for index in range(3):
    emit_plain(provider, f"s{index}", offset_s=index, joules=1.0)
a, b, c = memory.get_finished_spans()
report["a"] = exporter.export([a]).name
os.unlink(path)
os.chmod(folder, 0o555)  # deleted, and cannot be created again
report["b"] = exporter.export([b]).name
report["pending"] = exporter.pending_spans
os.chmod(folder, 0o755)
report["c"] = exporter.export([c]).name
exporter.shutdown()
report["lines"] = [json.loads(line)["name"] for line in open(path)]
print(json.dumps(report))
"""


def test_read_only_folder_as_an_unprivileged_user() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to an unprivileged user")
    # pytest's tmp dirs are private to root; the unprivileged writer needs its own folder.
    world = Path(tempfile.mkdtemp(prefix="otel-joules-faults-"))
    try:
        os.chmod(world, 0o755)
        folder = world / "out"
        folder.mkdir()
        os.chown(folder, 65534, 65534)
        result = _run(READ_ONLY_SCRIPT, str(folder))
    finally:
        shutil.rmtree(world)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert "Permission denied" in report["construct"]
    assert (report["a"], report["b"], report["pending"], report["c"]) == ("SUCCESS", "FAILURE", 1, "SUCCESS")
    assert report["lines"] == ["s1", "s2"]  # s0 went with the deleted file; s1 was kept, not lost
    errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1 and "cannot be created again" in errors[0]


# ------------------------------------------------------ SIGKILL of a writer, recovery

WRITER_SCRIPT = r"""
import sys
from tests.helpers.known_spans import emit_plain, make_provider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from otel_joules.exporters import JsonLinesSpanExporter

exporter = JsonLinesSpanExporter(sys.argv[1])
provider = make_provider(SimpleSpanProcessor(exporter), trace_id=sys.argv[2])
first = int(sys.argv[3])
for index in range(first, first + 100_000):
    # A long name makes each write big enough that a kill can land inside it.
    emit_plain(provider, f"w{index}-" + "x" * 3000, offset_s=index, joules=1.0)
    print(index, flush=True)  # acknowledged: export() has returned
"""


def test_sigkill_at_random_points_every_acknowledged_record_is_readable(tmp_path: Path) -> None:
    from otel_joules.report import build_report, read_inputs

    path = tmp_path / "spans.jsonl"
    rng = random.Random(13)
    acknowledged: set[int] = set()
    first = 0
    for round_number in range(4):
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER_SCRIPT, str(path), f"{round_number + 1:032x}", str(first)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
        )
        assert writer.stdout is not None
        # Wait until it writes, then kill it at a random moment.
        acknowledged.add(int(writer.stdout.readline()))
        time.sleep(rng.uniform(0.01, 0.3))
        writer.send_signal(signal.SIGKILL)
        # Through the same reader: readline() may have buffered more acknowledgements.
        acknowledged.update(int(line) for line in writer.stdout.read().split())
        writer.wait(timeout=30)
        writer.stderr.close()
        first += 100_000
        if round_number == 1:
            # What a writer without our discipline leaves when killed mid-line: half a record.
            with open(path, "ab") as handle:
                handle.write(b'{"name":"half-written","trace_id":"00')
    report = build_report([path])
    names = [span.name for span in read_inputs([path]).spans]
    read = {int(name[1:].split("-")[0]) for name in names}
    assert len(names) == len(read)  # nothing twice
    assert acknowledged <= read  # every acknowledged record is readable
    assert len(read - acknowledged) <= 4  # at most the one in flight per kill (written, not yet acknowledged)
    assert report.total_joules == float(len(read))  # no energy invented
    # The foreign half line is skipped, with a reason, and the next writer started on a new line, so
    # nothing after it was lost. A kill can also land inside one of our write() calls: the kernel stops a
    # write to a file between pages for a fatal signal, so that record (never acknowledged, so not counted
    # above) is torn; each such line is skipped the same way, at most one per kill.
    assert 1 <= len(report.skipped) <= 1 + 4, report.skipped
    for damaged in report.skipped:
        assert damaged.path.startswith(f"{path}:") and "not valid JSON" in damaged.reason


def test_rotated_file_replaced_by_another_layout_keeps_records_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from otel_joules.exporters import CsvSpanExporter

    path = tmp_path / "spans.csv"
    exporter = CsvSpanExporter(path)
    a, b = plain_spans(2)
    exporter.export([a])
    path.unlink()
    path.write_text("some,other,header\n")  # another program took the path meanwhile
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert exporter.export([b]) is SpanExportResult.FAILURE  # no exception into the batch thread
    assert exporter.pending_spans == 1
    assert path.read_text() == "some,other,header\n"  # left untouched
    (error,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert "already starts with the header" in error
    path.unlink()
    assert exporter.force_flush() is True
    exporter.shutdown()
    assert [line.split(",")[0] for line in path.read_text().splitlines()] == ["name", "s1"]
