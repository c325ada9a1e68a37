"""The agent's readings in shared memory (issue 34), with real processes, uids and kernel seals.

The agent runs as root on the fake powercap tree; clients run as numeric uids through ``setpriv``.
Fake agents (a socket server in the test process) hand over segments the client must refuse; the
torn-read test hammers a real segment from this process while reader processes check every record.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from otel_joules.sensors.agent_protocol import encode
from otel_joules.sensors.agent_shm import SegmentWriter
from tests.agent._support import (
    agent_socket,
    DRAM_WATTS,
    GROUP_GID,
    MEMBER_UID,
    OUTSIDER_GID,
    PACKAGE_WATTS,
    TOTAL_WATTS,
    as_uid,
    child_env,
    root_only_tree,
    span_child,
    spans,
    start_agent,
    stop,
    wait_for,
    walkable,
)
from tests.fakes.powercap import ConstantPower

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")

SEGMENT_NAME = "memfd:otel-joules-agent"


def _member() -> list[str]:
    return as_uid(MEMBER_UID, OUTSIDER_GID, [GROUP_GID])


def _finish(child: subprocess.Popen[str], timeout_s: float = 60) -> str:
    try:
        _, err = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stop(child)
        raise
    assert child.returncode == 0, err
    assert "Traceback" not in err, err
    return err


def _mapped(pid: int) -> bool:
    return SEGMENT_NAME in Path(f"/proc/{pid}/maps").read_text()


def _threads(pid: int) -> list[str]:
    return [(task / "comm").read_text().strip() for task in Path(f"/proc/{pid}/task").iterdir()]


def test_a_member_reads_the_readings_from_shared_memory_with_no_reader_thread_within_3_percent(tmp_path: Path) -> None:
    tree = root_only_tree(tmp_path)
    sock = agent_socket(tmp_path)
    out = tmp_path / "spans.jsonl"
    until = tmp_path / "stop-now"
    with ConstantPower(tree, {"package_0": PACKAGE_WATTS, "dram_0": DRAM_WATTS}):
        agent = start_agent(tmp_path, tree, sock)
        child = span_child(tmp_path, out, sock, tree, _member(), "--spans", "1000", "--span-s", "1.0", "--until", str(until))
        try:
            wait_for(lambda: len(spans(out)) >= 3, 30, "three spans")
            # setpriv execs python: the child's pid is the instrumented program's.
            assert _mapped(child.pid), Path(f"/proc/{child.pid}/maps").read_text()
            assert "otel-joules-ag" not in _threads(child.pid)  # no reader thread (comm is cut at 15 bytes)
            until.touch()
            err = _finish(child)
        finally:
            until.touch()
            stop(child)
            stop(agent)
    got = spans(out)
    assert len(got) >= 3
    for span in got:
        truth_j = TOTAL_WATTS * span["duration_s"]
        assert span["source"] == "measured", span
        assert abs(span["joules"] - truth_j) <= 0.03 * truth_j, (span, truth_j)
    assert "shared memory" not in err and len(err.splitlines()) == 1, err  # only the first use, said once


ATTACK = r"""
import fcntl, json, mmap, os, socket, struct, sys
path, agent_pid = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(5)
s.connect(path)
body = json.dumps({"op": "subscribe", "version": 1, "shm": True}).encode()
try:
    s.sendall(struct.pack(">I", len(body)) + body)
    data, fds, _, _ = socket.recv_fds(s, 65536, 4)
except (BrokenPipeError, ConnectionResetError):
    fds = []  # refused by closing, before or while the request went out: no segment either way
result = {"fds": len(fds), "uid": os.getuid()}
def attempt(name, action):
    try:
        action()
        result[name] = "done"
    except (OSError, ValueError, TypeError) as exc:
        result[name] = type(exc).__name__ + ":" + str(getattr(exc, "errno", ""))
if fds:
    fd = fds[0]
    size = os.fstat(fd).st_size
    result["mode"] = oct(os.fstat(fd).st_mode & 0o777)
    result["seals"] = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    attempt("map_writable", lambda: mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE))
    attempt("write", lambda: os.pwrite(fd, b"x", 20))
    attempt("grow", lambda: os.ftruncate(fd, size * 2))
    attempt("shrink", lambda: os.ftruncate(fd, 8))
    attempt("unseal", lambda: fcntl.fcntl(fd, fcntl.F_ADD_SEALS, 0))
    def reopen_and_write():
        again = os.open(f"/proc/self/fd/{fd}", os.O_RDWR)
        try:
            os.pwrite(again, b"x", 20)
        finally:
            os.close(again)
    attempt("reopen_writable", reopen_and_write)
    def reopen_and_map():
        again = os.open(f"/proc/self/fd/{fd}", os.O_RDWR)
        try:
            mmap.mmap(again, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(again)
    attempt("reopen_map_writable", reopen_and_map)
    readonly = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    attempt("write_mapping", lambda: readonly.__setitem__(20, 1))
def agent_fds():
    for name in os.listdir(f"/proc/{agent_pid}/fd"):
        os.open(f"/proc/{agent_pid}/fd/{name}", os.O_RDWR)
attempt("agent_fd", agent_fds)
print(json.dumps(result))
"""


@pytest.mark.parametrize("uid", [MEMBER_UID, 0], ids=["member", "root"])
def test_a_client_cannot_write_resize_or_reopen_the_segment_for_writing(tmp_path: Path, uid: int) -> None:
    tree = root_only_tree(tmp_path)
    sock = agent_socket(tmp_path)
    script = tmp_path / "attack.py"
    script.write_text(ATTACK)
    os.chmod(script, 0o644)
    with ConstantPower(tree, {"package_0": PACKAGE_WATTS}):
        agent = start_agent(tmp_path, tree, sock, "--user", "23050")  # a dedicated agent user, as the unit runs it
        try:
            prefix = _member() if uid else []
            done = subprocess.run([*prefix, sys.executable, str(script), str(sock), str(agent.pid)],
                                  env=child_env(tmp_path), capture_output=True, text=True, timeout=60)
            assert agent.poll() is None
        finally:
            stop(agent)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["fds"] == 1 and result["mode"] == "0o400" and result["seals"] & 0x1F == 0x17, result
    # The seals refuse everyone: shrink, grow, a writable mapping, write() (F_SEAL_FUTURE_WRITE), new seals.
    assert result["map_writable"].startswith("PermissionError"), result
    assert result["write"].startswith("OSError:9") or result["write"].startswith("PermissionError"), result
    for name in ("grow", "shrink", "unseal", "write_mapping"):
        assert result[name] != "done", (name, result)
    # Reopening through /proc: the mode (0400, root's) refuses a member; root gets past the mode, not the seal.
    assert result["reopen_writable"].startswith("PermissionError"), result
    assert result["reopen_map_writable"].startswith("PermissionError"), result
    if uid:
        assert result["agent_fd"].startswith("PermissionError"), result  # another uid's /proc/<pid>/fd


def test_a_uid_outside_the_group_gets_no_segment_even_through_a_loosened_socket(tmp_path: Path) -> None:
    tree = root_only_tree(tmp_path)
    sock = agent_socket(tmp_path)
    script = tmp_path / "attack.py"
    script.write_text(ATTACK)
    os.chmod(script, 0o644)
    agent = start_agent(tmp_path, tree, sock)
    try:
        os.chmod(sock.parent, 0o755)
        os.chmod(sock, 0o666)  # someone loosened the socket: SO_PEERCRED still decides
        done = subprocess.run([*as_uid(23002, OUTSIDER_GID), sys.executable, str(script), str(sock), str(agent.pid)],
                              env=child_env(tmp_path), capture_output=True, text=True, timeout=60)
    finally:
        stop(agent)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["fds"] == 0, done.stdout


READER = r"""
import os, sys, time
from otel_joules.sensors.agent_shm import SegmentReader
fd, zones, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
reader = SegmentReader(fd, [2**63] * zones)
records = odd = 0
last = -1
end = time.monotonic() + seconds
while time.monotonic() < end:
    if reader.sequence() & 1:
        odd += 1  # caught the writer mid-record: the lock was exercised
    record = reader.read()
    if record is None:
        continue
    seq, published_ns, values = record
    # Every zone holds the same k and published_ns is 1000 k: any mix of two records breaks one of these.
    if len(set(values)) != 1 or published_ns != values[0] * 1000 or values[0] < last:
        print("TORN", seq, published_ns, values[:4], flush=True)
        sys.exit(1)
    last = values[0]
    records += 1
print(records, odd)
"""


def test_readers_never_take_a_torn_record_while_a_writer_hammers_the_segment(tmp_path: Path) -> None:
    zones = 64  # a 512-byte record: a copy spans cache lines, so tearing has room
    writer = SegmentWriter(zones)
    script = tmp_path / "reader.py"
    script.write_text(READER)
    stop_event = threading.Event()

    def hammer() -> None:
        k = 1
        while not stop_event.is_set():
            writer.publish([k] * zones, published_ns=1000 * k)
            k += 1

    thread = threading.Thread(target=hammer, daemon=True)
    readers = []
    try:
        writer.publish([0] * zones, published_ns=0)
        thread.start()
        for _ in range(2):
            fd = os.dup(writer.client_fd)
            readers.append(subprocess.Popen([sys.executable, str(script), str(fd), str(zones), "3"], pass_fds=(fd,),
                                            env=child_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                            text=True))
            os.close(fd)
        results = [r.communicate(timeout=60) for r in readers]
    finally:
        stop_event.set()
        thread.join(5)
        for reader in readers:
            stop(reader)
        writer.close()
    for (out, err), reader in zip(results, readers):
        assert reader.returncode == 0, (out, err)
        records, odd = map(int, out.split())
        assert records > 1000, out  # each reader took many whole records ...
        assert odd > 0, out  # ... while it also caught the writer mid-record


# -- fallback: a segment the client refuses, or none, and the socket protocol takes over -------------

WRAP_UJ = 262_143_328_850
WATTS = 25.0


class SharingAgent:
    """A socket server playing an agent: the first connection is answered with ``hand(conn)`` (a segment
    of some kind), every later one with the socket protocol's good readings (WATTS since it started)."""

    def __init__(self, path: Path, hand) -> None:  # type: ignore[no-untyped-def]
        self.hand = hand
        self.connections = 0
        self.started_s = time.monotonic()
        self._stop = threading.Event()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(path))
        os.chmod(path, 0o666)
        self._listener.listen(16)
        self._listener.settimeout(0.1)
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def answer(self, **extra: object) -> bytes:
        zone = {"id": "package_0", "hw_type": "cpu", "hw_name": "RAPL package-0", "hw_id": "intel-rapl:0",
                "hw_parent": None, "in_total": True, "wrap_uj": WRAP_UJ, "max_power_watts": 125.0}
        return encode({"ok": True, "version": 1, "interval_ms": 10, "zones": [zone], **extra})

    def uj(self) -> int:
        return round((time.monotonic() - self.started_s) * WATTS * 1e6) % WRAP_UJ

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
            request = json.loads(conn.recv(1024)[4:])
            if number == 1:
                assert request.get("shm") is True
                self.hand(self, conn)
                return
            conn.sendall(self.answer())
            while not self._stop.is_set():
                conn.sendall(encode({"uj": [self.uj()]}))
                time.sleep(0.01)
        except (OSError, AssertionError):
            pass
        finally:
            conn.close()

    def __enter__(self) -> "SharingAgent":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self._listener.close()


def _unsealed(agent: SharingAgent, conn: socket.socket) -> None:
    fd = os.memfd_create("otel-joules-agent", os.MFD_CLOEXEC)  # writable by anyone holding it, resizable
    os.ftruncate(fd, 48)
    socket.send_fds(conn, [agent.answer(shm={"layout": 1, "bytes": 48})], [fd])
    os.close(fd)


def _regular_file(agent: SharingAgent, conn: socket.socket) -> None:
    fd = os.open("/etc/hostname" if os.path.exists("/etc/hostname") else "/etc/passwd", os.O_RDONLY)
    socket.send_fds(conn, [agent.answer(shm={"layout": 1, "bytes": 48})], [fd])
    os.close(fd)


def _no_descriptor(agent: SharingAgent, conn: socket.socket) -> None:
    conn.sendall(agent.answer(shm={"layout": 1, "bytes": 48}))


def _wrong_size(agent: SharingAgent, conn: socket.socket) -> None:
    writer = SegmentWriter(3)  # sealed, but three zones where the answer describes one
    writer.publish([1, 2, 3])
    socket.send_fds(conn, [agent.answer(shm={"layout": 1, "bytes": writer.size})], [writer.client_fd])
    writer.close()


REFUSED = {"unsealed": _unsealed, "regular_file": _regular_file, "no_descriptor": _no_descriptor,
           "wrong_size": _wrong_size}


@pytest.mark.parametrize("segment", sorted(REFUSED))
def test_a_segment_the_client_refuses_means_socket_readings_measured_said_once(tmp_path: Path, segment: str) -> None:
    tree = root_only_tree(tmp_path)
    walkable(tmp_path)
    run = tmp_path / "run"
    run.mkdir(mode=0o755)
    sock = run / "agent.sock"
    out = tmp_path / "spans.jsonl"
    with SharingAgent(sock, REFUSED[segment]) as agent:
        child = span_child(tmp_path, out, sock, tree, _member(), "--spans", "3", "--span-s", "0.5")
        err = _finish(child)
        assert agent.connections == 2  # the refused segment, then one socket subscription
    got = spans(out)
    assert [s["source"] for s in got] == ["measured"] * 3, (got, err)
    for span in got:
        truth_j = WATTS * span["duration_s"]
        assert abs(span["joules"] - truth_j) <= 0.1 * truth_j, (span, truth_j)
    refused = [line for line in err.splitlines() if "shared memory this process does not map" in line]
    assert len(refused) == 1 and str(sock) in refused[0], err


def _broken_later(agent: SharingAgent, conn: socket.socket) -> None:
    writer = SegmentWriter(1)
    writer.publish([agent.uj()])
    socket.send_fds(conn, [agent.answer(shm={"layout": 1, "bytes": writer.size})], [writer.client_fd])
    conn.close()
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        writer.publish([agent.uj()])
        time.sleep(0.01)
    writer.publish([WRAP_UJ + 1])  # a value no zone of that range can hold
    time.sleep(30)


def test_a_broken_reading_in_shared_memory_loses_the_agent_once_and_reconnects(tmp_path: Path) -> None:
    tree = root_only_tree(tmp_path)
    walkable(tmp_path)
    run = tmp_path / "run"
    run.mkdir(mode=0o755)
    sock = run / "agent.sock"
    out = tmp_path / "spans.jsonl"
    until = tmp_path / "stop-now"
    with SharingAgent(sock, _broken_later) as agent:
        child = span_child(tmp_path, out, sock, tree, _member(), "--spans", "1000", "--span-s", "0.1", "--until", str(until))
        try:
            wait_for(lambda: agent.connections >= 2, 30, "a reconnect once the agent is lost")
            back = len(spans(out))
            wait_for(lambda: sum(s["source"] == "measured" for s in spans(out)[back:]) >= 3, 30, "measured spans again")
            until.touch()
            err = _finish(child)
        finally:
            until.touch()
            stop(child)
    lost = [line for line in err.splitlines() if "lost the otel-joules agent" in line]
    assert len(lost) == 1 and "broken reading" in lost[0], err
    assert all(s["joules"] < 2 * WATTS * s["duration_s"] for s in spans(out)), spans(out)  # nothing absurd let through
