"""A real MongoDB wire-protocol server for tests: FerretDB 1.24 on its SQLite backend.

``collector/build.sh`` builds the ``ferretdb`` binary from Go modules into
``collector/_build`` (or ``$OTEL_JOULES_STACK_DIR``); a missing binary skips the test with
what to run, and fails it in CI, where ``.ci/run`` builds it first.

It is started as a plain child process on 127.0.0.1, on a port free at the time, with
everything it writes in the test's temp dir: the SQLite databases (``--sqlite-url``), its
state file (``--state-dir``), its log (stderr, to a file) and its working directory. The
debug HTTP listener (metrics, pprof; by default on the fixed port 127.0.0.1:8088, shared
host state) is switched off, and so are telemetry and OTLP tracing; ``FERRETDB_*``
variables of the runner's environment (FerretDB reads every flag from one) are not passed
on. It is stopped by pid; :meth:`FerretDB.stop` and :meth:`FerretDB.start` again bring
the same server back on the same port with the same data (an outage, for a test).
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pymongo
import pymongo.errors
import pytest

from tests.helpers.processes import stop_by_pid
from tests.helpers.stack import free_port, stack_binary

#: How long FerretDB may take to answer a ping after starting, on a loaded 2-core box.
READY_TIMEOUT_S = 60.0
#: How long a SIGTERM may take before the server is killed.
STOP_TIMEOUT_S = 10.0
# FerretDB takes every flag from a FERRETDB_* variable too: the runner's must not reach it.
_FLAG_ENV_PREFIX = "FERRETDB_"
# Each ping while waiting for the server gives up this fast, so the wait notices an early exit.
_PING_TIMEOUT_MS = 500
# Ports tried when another process takes the free one before FerretDB binds it.
_PORT_ATTEMPTS = 3


@dataclass
class FerretDB:
    """One FerretDB server: its binary, its folder (data, state, log) and its port; started and stopped by pid."""

    binary: Path
    folder: Path
    port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def uri(self) -> str:
        """The server's ``mongodb://`` URI."""
        return f"mongodb://127.0.0.1:{self.port}/"

    @property
    def data_dir(self) -> Path:
        """Where the SQLite databases live (one file per MongoDB database); kept across restarts."""
        return self.folder / "data"

    @property
    def log_path(self) -> Path:
        """FerretDB's log (its stdout and stderr), appended to by every start."""
        return self.folder / "ferretdb.log"

    def argv(self) -> list[str]:
        """The command line: SQLite backend, loopback port, nothing written or listened to elsewhere."""
        # An absolute file: URL naming a directory (FerretDB wants the trailing slash).
        sqlite_url = "file:" + urllib.parse.quote(str(self.data_dir)) + "/"
        return [
            str(self.binary),
            "--handler=sqlite",
            f"--sqlite-url={sqlite_url}",
            f"--listen-addr=127.0.0.1:{self.port}",
            f"--state-dir={self.folder}",
            "--debug-addr=-",
            "--telemetry=disable",
            "--otel-traces-url=",
            "--log-level=info",
        ]

    def running(self) -> bool:
        """True while the server process is alive."""
        return self.process is not None and self.process.poll() is None

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> "FerretDB":
        """Start the server and wait until it answers a ping; AssertionError (with its log) otherwise."""
        assert not self.running(), "FerretDB is already running"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(_FLAG_ENV_PREFIX)}
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.argv(), cwd=self.folder, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process.poll() is not None:
                raise AssertionError(f"ferretdb exited with {self.process.returncode}:\n{self.log_text()}")
            if self.ping():
                return self
            if time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"ferretdb did not answer a ping within {timeout_s} s:\n{self.log_text()}")
            time.sleep(0.1)

    def ping(self) -> bool:
        """True when the server answers ``ping`` now."""
        client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(
            self.uri, serverSelectionTimeoutMS=_PING_TIMEOUT_MS, connectTimeoutMS=_PING_TIMEOUT_MS
        )
        try:
            client.admin.command("ping")
            return True
        except pymongo.errors.PyMongoError:
            return False
        finally:
            client.close()

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and wait for it; its port and data stay for :meth:`start`."""
        process = self.process
        if process is None:
            return
        stop_by_pid(process, STOP_TIMEOUT_S)
        self.process = None

    def restart(self, timeout_s: float = READY_TIMEOUT_S) -> "FerretDB":
        """Stop the server if it runs, then start it again on the same port with the same data."""
        self.stop()
        return self.start(timeout_s)

    def client(self, **options: Any) -> pymongo.MongoClient[dict[str, Any]]:
        """A new pymongo client for this server (the caller closes it)."""
        options.setdefault("serverSelectionTimeoutMS", 10_000)
        return pymongo.MongoClient(self.uri, **options)

    def log_text(self) -> str:
        """What the server has logged so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


def start_ferretdb(tmp_path: Path, timeout_s: float = READY_TIMEOUT_S) -> FerretDB:
    """Start FerretDB with its data, state and log under ``tmp_path / "ferretdb"``; the caller stops it.

    The port is free when chosen but may be taken before the server binds it; then the
    start is tried again on another port (a few times).
    """
    binary = stack_binary("ferretdb")
    folder = tmp_path / "ferretdb"
    folder.mkdir(exist_ok=True)
    for _ in range(_PORT_ATTEMPTS - 1):
        try:
            return FerretDB(binary, folder, free_port()).start(timeout_s)
        except AssertionError as exc:
            if "address already in use" not in str(exc):
                raise
    return FerretDB(binary, folder, free_port()).start(timeout_s)


@pytest.fixture
def ferretdb(tmp_path: Path) -> Iterator[FerretDB]:
    """A running FerretDB for one test (see :func:`start_ferretdb`), stopped at its end."""
    server = start_ferretdb(tmp_path)
    try:
        yield server
    finally:
        server.stop()
