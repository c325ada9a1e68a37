"""A broken or malicious agent never breaks the application: a real socket server plays the agent.

The "agent" here is a socket server in the test process, on a socket under tmp_path; the
application is the instrumented child (tests/agent/span_child.py) run as a group member, so it cannot
read the fake tree's root-only counters itself and reads through whatever answers on the socket.
Each answer is one the adversarial review of issue 34 sent: a deeply nested answer, a huge wrap
range, a nested frame later, a server that dribbles bytes, an absurd power bound (and readings that
stop changing). ``instrument()`` must not raise, the child must exit 0, spans must fall back to
labelled estimates, said once, and where the agent answers well again the client reconnects (so
quickly here that no span need fall wholly in the gap).
"""

from __future__ import annotations

import os
import shutil
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Callable

import pytest

from otel_joules.sensors.agent_protocol import encode
from tests.agent._support import (
    GROUP_GID,
    MEMBER_UID,
    OUTSIDER_GID,
    as_uid,
    root_only_tree,
    span_child,
    spans,
    stop,
    wait_for,
    walkable,
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")

WATTS = 25.0
WRAP_UJ = 262_143_328_850
INTERVAL_S = 0.01


def _zone(**overrides: object) -> dict:
    zone = {"id": "package_0", "hw_type": "cpu", "hw_name": "RAPL package-0", "hw_id": "intel-rapl:0",
            "hw_parent": None, "in_total": True, "wrap_uj": WRAP_UJ, "max_power_watts": 125.0}
    zone.update(overrides)
    return zone


def _answer(**overrides: object) -> bytes:
    return encode({"ok": True, "version": 1, "interval_ms": INTERVAL_S * 1e3, "zones": [_zone(**overrides)]})


def _nested(depth: int) -> bytes:
    return struct.pack(">I", depth) + b"[" * depth


class FakeAgent:
    """A socket server that answers each subscription with ``script(connection_number, conn, reading)``."""

    def __init__(self, path: Path, script: Callable[[int, socket.socket, Callable[[], bytes]], None]) -> None:
        self.path = path
        self.script = script
        self.connections = 0
        self.started_s = time.monotonic()
        self._stop = threading.Event()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(path))
        os.chmod(path, 0o666)  # a test socket under tmp_path, for the member uid
        self._listener.listen(16)
        self._listener.settimeout(0.1)
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def reading(self) -> bytes:
        """A good reading: the counter at WATTS since the server started (its truth)."""
        uj = round((time.monotonic() - self.started_s) * WATTS * 1e6) % WRAP_UJ
        return encode({"uj": [uj]})

    def stopped(self) -> bool:
        return self._stop.is_set()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except socket.timeout:
                continue
            self.connections += 1
            threading.Thread(target=self._serve, args=(self.connections, conn), daemon=True).start()

    def _serve(self, number: int, conn: socket.socket) -> None:
        try:
            conn.settimeout(5)
            conn.recv(1024)  # the subscribe request
            self.script(number, conn, self)
        except OSError:
            pass
        finally:
            conn.close()

    def good_readings(self, conn: socket.socket, seconds: float = 1e9) -> None:
        end = time.monotonic() + seconds
        while not self._stop.is_set() and time.monotonic() < end:
            conn.sendall(self.reading())
            time.sleep(INTERVAL_S)

    def hold(self) -> None:
        while not self._stop.is_set():
            time.sleep(0.05)

    def __enter__(self) -> "FakeAgent":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self._listener.close()


def _setup(tmp_path: Path):  # type: ignore[no-untyped-def]
    tree = root_only_tree(tmp_path)
    walkable(tmp_path)
    run = tmp_path / "run"
    run.mkdir(mode=0o755)
    return tree, run / "agent.sock"


def _member() -> list[str]:
    return as_uid(MEMBER_UID, OUTSIDER_GID, [GROUP_GID])


def _finish(child, timeout_s: float = 60) -> str:  # type: ignore[no-untyped-def]
    try:
        _, err = child.communicate(timeout=timeout_s)
    except Exception:
        stop(child)
        raise
    assert child.returncode == 0, err  # instrument() never raised into the application
    assert "Traceback" not in err, err
    return err


# -- answers at connect: the agent is not used, spans are labelled estimates, said once --------------


CONNECT_ANSWERS = {
    "nested": lambda agent, conn: conn.sendall(_nested(50_000)),
    "huge_wrap": lambda agent, conn: conn.sendall(_answer(wrap_uj=10**400) + agent.reading()),
    "absurd_power": lambda agent, conn: conn.sendall(_answer(max_power_watts=1e15) + agent.reading()),
}


@pytest.mark.parametrize("answer", sorted(CONNECT_ANSWERS))
def test_a_bad_answer_at_connect_gives_labelled_estimates_said_once(tmp_path: Path, answer: str) -> None:
    tree, sock = _setup(tmp_path)

    def script(number: int, conn: socket.socket, agent: FakeAgent) -> None:
        CONNECT_ANSWERS[answer](agent, conn)
        agent.hold()

    out = tmp_path / "spans.jsonl"
    with FakeAgent(sock, script):
        child = span_child(tmp_path, out, sock, tree, _member(), "--spans", "2", "--span-s", "0.3")
        err = _finish(child)
    got = spans(out)
    assert [s["source"] for s in got] == ["estimate", "estimate"], (got, err)
    assert all(s["agent_domains"] == [] for s in got)
    # An absurd bound lets nothing through as measured: no span claims more than a busy host could spend.
    assert all(s["joules"] < 1000 for s in got), got
    lines = [line for line in err.splitlines() if line]
    assert len(lines) == 1 and "ESTIMATES" in lines[0] and str(sock) in lines[0], err
    if answer == "absurd_power":
        assert "power bound" in lines[0], err
    if answer == "huge_wrap":
        assert "wrap range" in lines[0], err


# -- answers later: the link is lost (said once), spans are estimates, and it reconnects -------------


def _nested_later(number: int, conn: socket.socket, agent: FakeAgent) -> None:
    conn.sendall(_answer() + agent.reading())
    if number == 1:
        agent.good_readings(conn, 1.5)
        conn.sendall(_nested(50_000))
        agent.hold()  # keeps the connection open: only the client can notice
    else:
        agent.good_readings(conn)


def _dribbling(number: int, conn: socket.socket, agent: FakeAgent) -> None:
    conn.sendall(_answer() + agent.reading())
    if number == 1:
        agent.good_readings(conn, 1.5)
        conn.sendall(struct.pack(">I", 200))  # a frame that never completes, one byte at a time
        while not agent.stopped():
            conn.sendall(b" ")
            time.sleep(0.2)
    else:
        agent.good_readings(conn)


def _frozen(number: int, conn: socket.socket, agent: FakeAgent) -> None:
    conn.sendall(_answer() + agent.reading())
    if number == 1:
        agent.good_readings(conn, 1.5)
        same = agent.reading()
        while not agent.stopped():
            conn.sendall(same)  # on time, well formed, and never changing
            time.sleep(INTERVAL_S)
    else:
        agent.good_readings(conn)


LATER_ANSWERS = {"nested_later": _nested_later, "dribbling": _dribbling, "frozen": _frozen}


@pytest.mark.parametrize("answer", sorted(LATER_ANSWERS))
def test_a_bad_reading_later_loses_the_agent_once_gives_estimates_and_reconnects(tmp_path: Path, answer: str) -> None:
    tree, sock = _setup(tmp_path)
    out = tmp_path / "spans.jsonl"
    until = tmp_path / "stop-now"
    with FakeAgent(sock, LATER_ANSWERS[answer]) as agent:
        child = span_child(tmp_path, out, sock, tree, _member(), "--spans", "1000", "--span-s", "0.1", "--until", str(until))
        try:
            wait_for(lambda: any(s["source"] == "measured" for s in spans(out)), 30, "measured spans")
            wait_for(lambda: agent.connections >= 2, 30, "a reconnect once the agent is lost")
            back = len(spans(out))
            wait_for(lambda: sum(s["source"] == "measured" for s in spans(out)[back:]) >= 3, 30, "measured spans again")
            until.touch()
            err = _finish(child)
        finally:
            until.touch()
            stop(child)
    got = spans(out)
    # No frozen 0 J labelled measured for long: a reading older than STALE_MIN_S (0.5 s) is not used, so at most
    # the spans of that window (and the one across its end) lose energy; after the reconnect every one is whole.
    measured = [s for s in got if s["source"] == "measured" and s["duration_s"] >= 0.1]
    short = [s for s in measured if s["joules"] < 0.5 * WATTS * s["duration_s"]]
    assert len(short) <= 7, short
    assert all(s["joules"] > 0.5 * WATTS * s["duration_s"] for s in got[back:] if s["source"] == "measured"), got[back:]
    # Besides the first use of the agent (said once when it answered): one line says it was lost.
    lines = [line for line in err.splitlines() if line and " through the otel-joules agent at " not in line]
    assert len(lines) == 1 and lines[0].startswith(f"otel-joules: lost the otel-joules agent at {sock}"), err
