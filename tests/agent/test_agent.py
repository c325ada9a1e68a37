"""``otel-joules agent`` and the library reading through it, with real processes only.

The agent runs as root on a fake powercap tree whose ``energy_uj`` files are root-only (0400, as
since CVE-2020-8694); clients run as numeric uids through ``setpriv``. The tree, the socket and
every file live under tmp_path (made walkable); the container case runs its client in a private
mount namespace that sees the socket and nothing else of the host's.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from otel_joules.sensors.agent_protocol import MAX_REPLY_BYTES, decode_frames, encode
from tests.agent._support import (
    agent_socket,
    FLOODER_UID,
    GROUP_GID,
    MEMBER_UID,
    OUTSIDER_GID,
    OUTSIDER_UID,
    TOTAL_WATTS,
    DRAM_WATTS,
    PACKAGE_WATTS,
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


def _finish(child: subprocess.Popen[str], timeout_s: float = 60) -> str:
    try:
        _, err = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        child.kill()
        _, err = child.communicate(timeout=10)
        raise AssertionError(f"the instrumented child did not finish: {err}")
    assert child.returncode == 0, err
    return err


def _within(span: dict, tolerance: float) -> bool:
    truth_j = TOTAL_WATTS * span["duration_s"]
    return abs(span["joules"] - truth_j) <= tolerance * truth_j


def test_a_group_member_gets_measured_spans_within_3_percent_through_the_agent(tmp_path: Path) -> None:
    tree = root_only_tree(tmp_path)
    sock = agent_socket(tmp_path)
    with ConstantPower(tree, {"package_0": PACKAGE_WATTS, "dram_0": DRAM_WATTS}):
        agent = start_agent(tmp_path, tree, sock)
        try:
            info = os.lstat(sock)
            assert stat.S_ISSOCK(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o660 and info.st_gid == GROUP_GID
            status = Path(f"/proc/{agent.pid}/status").read_text()
            assert "CapEff:\t0000000000000000" in status  # no capability left once set up
            out = tmp_path / "spans.jsonl"
            child = span_child(tmp_path, out, sock, tree, as_uid(MEMBER_UID, OUTSIDER_GID, [GROUP_GID]),
                               "--spans", "3", "--span-s", "1.5")
            err = _finish(child)
        finally:
            stop(agent)
    got = spans(out)
    assert len(got) == 3
    for span in got:
        assert span["source"] == "measured", span
        assert span["agent_domains"] == ["core_0", "dram_0", "package_0", "uncore_0"]
        assert "energy.cpu_estimate.joules" not in span["domains"]
        assert _within(span, 0.03), (span, TOTAL_WATTS * span["duration_s"])
    # Measured: the one line says through which agent, once, with its socket.
    assert err.splitlines() == [
        f"otel-joules: measuring core_0, dram_0, package_0, uncore_0 through the otel-joules agent at {sock} "
        "(the host's one reader of its counters; energy.source = measured, energy.agent.domains on each span)."
    ], err
    assert not sock.exists()  # removed at SIGTERM


def test_the_agent_user_may_read_with_only_its_primary_group_too(tmp_path: Path) -> None:
    tree = root_only_tree(tmp_path)
    sock = agent_socket(tmp_path)
    with ConstantPower(tree, {"package_0": PACKAGE_WATTS}):  # moving counters: a frozen reading is not used
        agent = start_agent(tmp_path, tree, sock)
        try:
            out = tmp_path / "spans.jsonl"
            child = span_child(tmp_path, out, sock, tree, as_uid(MEMBER_UID, GROUP_GID), "--spans", "1", "--span-s", "0.1")
            _finish(child)
        finally:
            stop(agent)
    assert [s["source"] for s in spans(out)] == ["measured"]


@pytest.mark.parametrize("opened_socket", [False, True], ids=["socket_mode", "peer_credentials"])
def test_a_uid_outside_the_group_is_refused_gets_labelled_estimates_and_is_told_why(tmp_path: Path, opened_socket: bool) -> None:
    tree = root_only_tree(tmp_path)
    sock = agent_socket(tmp_path)
    agent = start_agent(tmp_path, tree, sock)
    try:
        if opened_socket:
            # Someone loosened the socket (and its directory): the agent's own SO_PEERCRED check still refuses.
            os.chmod(sock.parent, 0o755)
            os.chmod(sock, 0o666)
        out = tmp_path / "spans.jsonl"
        child = span_child(tmp_path, out, sock, tree, as_uid(OUTSIDER_UID, OUTSIDER_GID), "--spans", "2", "--span-s", "0.2")
        err = _finish(child)
    finally:
        stop(agent)
    assert [s["source"] for s in spans(out)] == ["estimate", "estimate"]
    assert all(s["agent_domains"] == [] for s in spans(out))
    lines = [line for line in err.splitlines() if line]
    assert len(lines) == 1, err  # one message, no traceback
    (message,) = lines
    assert message.startswith("otel-joules: spans and metrics carry ESTIMATES")
    assert "cpu_estimate, memory_estimate" in message
    why = f"uid {OUTSIDER_UID} is not in group" if opened_socket else f"refuses uid {OUTSIDER_UID}"
    assert why in message and "usermod -aG" in message, message
    if opened_socket:
        assert f"refused a client: uid {OUTSIDER_UID} is not in group" in (tmp_path / "agent.err").read_text()


def test_an_agent_restart_mid_run_gives_labelled_estimates_once_then_measured_again(tmp_path: Path) -> None:
    tree = root_only_tree(tmp_path)
    sock = agent_socket(tmp_path)
    out = tmp_path / "spans.jsonl"
    until = tmp_path / "stop-now"
    with ConstantPower(tree, {"package_0": PACKAGE_WATTS, "dram_0": DRAM_WATTS}):
        agent = start_agent(tmp_path, tree, sock)
        child = span_child(tmp_path, out, sock, tree, as_uid(MEMBER_UID, OUTSIDER_GID, [GROUP_GID]),
                           "--spans", "1000", "--span-s", "0.1", "--until", str(until))
        try:
            wait_for(lambda: sum(s["source"] == "measured" for s in spans(out)) >= 3, 30, "measured spans")
            stop(agent)
            gone = len(spans(out))
            wait_for(lambda: sum(s["source"] == "estimate" for s in spans(out)[gone:]) >= 3, 30, "estimates")
            agent = start_agent(tmp_path, tree, sock, stderr_name="agent2.err")
            back = len(spans(out))
            wait_for(lambda: sum(s["source"] == "measured" for s in spans(out)[back:]) >= 3, 30, "measured spans again")
            until.touch()
            err = _finish(child)
        finally:
            until.touch()
            stop(child)
            stop(agent)
    got = spans(out)
    sources = [s["source"] for s in got]
    # measured, then estimates while the agent is away, then measured again; a span open across the loss or
    # the return is measured for the part the agent was there and estimated for the rest: partial, never empty.
    assert set(sources) <= {"measured", "estimate", "partial"}, sources
    first_estimate = sources.index("estimate")
    last_estimate = len(sources) - 1 - sources[::-1].index("estimate")
    assert all(s == "measured" for s in sources[:first_estimate] if s != "partial")
    assert all(s == "estimate" for s in sources[first_estimate:last_estimate + 1])
    assert all(s == "measured" for s in sources[last_estimate + 1:] if s != "partial")
    assert sources.count("partial") <= 2, sources
    for span in got:
        assert span["joules"] > 0, span
        if span["source"] == "partial":
            assert 0 < span["estimated_s"] <= span["duration_s"] + 0.01, span
        else:
            assert span["estimated_s"] is None, span
    assert all(s["agent_domains"] == ["core_0", "dram_0", "package_0", "uncore_0"] for s in got if s["source"] == "measured")
    # No stall: every span lasted its 0.1 s plus scheduling, never a wait on the socket.
    assert max(s["duration_s"] for s in got) < 1.0
    lines = [line for line in err.splitlines() if line]
    assert "Traceback" not in err
    # Its first use said once, then its loss once (the reconnection is not a second first use).
    assert len(lines) == 2 and lines[0].startswith(f"otel-joules: measuring core_0, dram_0, package_0, uncore_0 "
                                                   f"through the otel-joules agent at {sock} "), err
    assert lines[1].startswith("otel-joules: lost the otel-joules agent at "), err
    assert "ESTIMATES" in lines[1]


def test_a_process_in_another_mount_namespace_that_sees_only_the_socket_is_measured(tmp_path: Path) -> None:
    tree = root_only_tree(tmp_path)
    sock = agent_socket(tmp_path)
    container = tmp_path / "container"
    container.mkdir()
    walkable(container)
    mounted = container / "agent.sock"
    out = tmp_path / "spans.jsonl"
    # The "container": its own mount namespace, where only the socket is bind-mounted in (as
    # `docker run -v /run/otel-joules/agent.sock:...`), then the host's runtime directory and sysfs
    # tree are covered by empty tmpfs: the child sees the socket and nothing else of them.
    script = (
        f"mount -t tmpfs -o mode=0755 none {container} && touch {mounted} && mount --bind {sock} {mounted} "
        f"&& mount -t tmpfs -o mode=0755 none {sock.parent} && mount -t tmpfs -o mode=0755 none {tree.root} "
        f"&& test -z \"$(ls -A {tree.root})\" && test -z \"$(ls -A {sock.parent})\" && exec \"$@\""
    )
    with ConstantPower(tree, {"package_0": PACKAGE_WATTS, "dram_0": DRAM_WATTS}):
        agent = start_agent(tmp_path, tree, sock)
        try:
            prefix = ["unshare", "--mount", "--propagation", "private", "--fork", "sh", "-c", script, "sh",
                      *as_uid(MEMBER_UID, OUTSIDER_GID, [GROUP_GID])]
            child = span_child(tmp_path, out, mounted, tree, prefix, "--spans", "2", "--span-s", "1.5")
            err = _finish(child)
        finally:
            stop(agent)
    got = spans(out)
    assert len(got) == 2, err
    for span in got:
        assert span["source"] == "measured" and span["agent_domains"] == ["core_0", "dram_0", "package_0", "uncore_0"]
        assert _within(span, 0.03), span
    (line,) = err.splitlines()  # the socket the container was given, said once
    assert line.startswith(f"otel-joules: measuring core_0, dram_0, package_0, uncore_0 through the otel-joules agent at {mounted} ")


# -- the socket path ----------------------------------------------------------------------------------


def _refused_start(tmp_path: Path, tree, sock: Path) -> str:
    agent = start_agent(tmp_path, tree, sock, wait=False)
    try:
        agent.wait(30)
    finally:
        stop(agent)
    err = (tmp_path / "agent.err").read_text()
    assert agent.returncode == 2, err
    # One line says why (besides the children's OTEL_METRICS_EXPORTER=none, said at start).
    said = [line for line in err.splitlines() if "OTEL_METRICS_EXPORTER is none" not in line]
    assert "Traceback" not in err and len(said) == 1, err
    return err


def test_a_regular_file_at_the_socket_path_is_refused_and_left_alone(tmp_path: Path) -> None:
    tree = root_only_tree(tmp_path)
    sock = agent_socket(tmp_path)
    sock.parent.mkdir(mode=0o755)
    sock.write_text("precious")
    err = _refused_start(tmp_path, tree, sock)
    assert f"{sock} already exists and is not a socket" in err
    assert sock.read_text() == "precious"


def test_a_symlink_at_the_socket_path_is_refused_and_never_followed(tmp_path: Path) -> None:
    tree = root_only_tree(tmp_path)
    sock = agent_socket(tmp_path)
    sock.parent.mkdir(mode=0o755)
    target = tmp_path / "elsewhere.sock"
    sock.symlink_to(target)
    err = _refused_start(tmp_path, tree, sock)
    assert f"{sock} is a symlink" in err
    assert not target.exists() and sock.is_symlink()


def test_a_runtime_directory_owned_by_someone_else_is_refused(tmp_path: Path) -> None:
    tree = root_only_tree(tmp_path)
    sock = agent_socket(tmp_path)
    sock.parent.mkdir(mode=0o755)
    os.chown(sock.parent, MEMBER_UID, GROUP_GID)
    err = _refused_start(tmp_path, tree, sock)
    assert f"the runtime directory {sock.parent} belongs to uid {MEMBER_UID}" in err
    assert list(sock.parent.iterdir()) == []


def test_a_runtime_directory_others_may_write_is_refused(tmp_path: Path) -> None:
    tree = root_only_tree(tmp_path)
    sock = agent_socket(tmp_path)
    sock.parent.mkdir()
    os.chmod(sock.parent, 0o777)
    err = _refused_start(tmp_path, tree, sock)
    assert "is writable by group or others (mode 0777)" in err


def test_a_symlinked_runtime_directory_is_refused(tmp_path: Path) -> None:
    tree = root_only_tree(tmp_path)
    sock = agent_socket(tmp_path)
    real = tmp_path / "real-run"
    real.mkdir(mode=0o755)
    sock.parent.symlink_to(real)
    err = _refused_start(tmp_path, tree, sock)
    assert f"the runtime directory {sock.parent} is a symlink" in err
    assert list(real.iterdir()) == []


#: The agent's set-up, stopped between checking its runtime directory and using it, so a test can swap it there.
SWAP_DRIVER = r"""
import os, sys
from otel_joules.agent.setup import bind_socket, open_runtime_dir, prepare_socket_path
path, gid = sys.argv[1], int(sys.argv[2])
runtime, name = os.path.split(path)
fd = open_runtime_dir(runtime, gid)
print("checked", flush=True)
sys.stdin.readline()
prepare_socket_path(fd, name, path)
listener = bind_socket(fd, name, gid, path)
print("bound", flush=True)
sys.stdin.readline()
"""


def test_a_runtime_directory_swapped_for_a_symlink_after_its_check_redirects_nothing(tmp_path: Path) -> None:
    walkable(tmp_path)
    sock = tmp_path / "run" / "agent.sock"
    driver = tmp_path / "swap_driver.py"
    driver.write_text(SWAP_DRIVER)
    setup = subprocess.Popen([sys.executable, str(driver), str(sock), str(GROUP_GID)], env=child_env(tmp_path),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert setup.stdout.readline() == "checked\n", setup.stderr.read()
        # Swapped after the check: the checked directory moved away, a symlink in its place to a directory holding
        # a root-only file under the socket's name (what a path-based chown/chmod would have given to the group).
        checked = tmp_path / "run.checked"
        sock.parent.rename(checked)
        decoy = tmp_path / "decoy"
        decoy.mkdir(mode=0o700)
        secret = decoy / "agent.sock"
        secret.write_text("root's secret")
        os.chmod(secret, 0o600)
        sock.parent.symlink_to(decoy)
        setup.stdin.write("\n")
        setup.stdin.flush()
        assert setup.stdout.readline() == "bound\n", setup.stderr.read()
        info = secret.stat()
        assert (stat.S_ISREG(info.st_mode), stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid) == (True, 0o600, 0, 0)
        assert secret.read_text() == "root's secret" and stat.S_IMODE(decoy.stat().st_mode) == 0o700
        assert sorted(p.name for p in decoy.iterdir()) == ["agent.sock"]
        # The socket is where the check was made, created 0660 root:group, its directory 0750 root:group.
        made = os.lstat(checked / "agent.sock")
        assert (stat.S_ISSOCK(made.st_mode), stat.S_IMODE(made.st_mode), made.st_uid, made.st_gid) == (True, 0o660, 0, GROUP_GID)
        directory = os.lstat(checked)
        assert (stat.S_IMODE(directory.st_mode), directory.st_uid, directory.st_gid) == (0o750, 0, GROUP_GID)
        setup.stdin.write("\n")
        setup.stdin.flush()
        assert setup.wait(10) == 0, setup.stderr.read()
    finally:
        stop(setup)


def test_the_runtime_directory_and_socket_get_the_group_even_under_a_set_group_id_directory(tmp_path: Path) -> None:
    tree = root_only_tree(tmp_path)
    walkable(tmp_path)
    parent = tmp_path / "sgid"
    parent.mkdir()
    os.chown(parent, 0, OUTSIDER_GID)
    os.chmod(parent, 0o2755)  # what is created in it gets OUTSIDER_GID, unless the agent sees to it
    sock = parent / "run" / "agent.sock"
    agent = start_agent(tmp_path, tree, sock)
    try:
        directory, made = os.lstat(sock.parent), os.lstat(sock)
        assert (directory.st_uid, directory.st_gid, stat.S_IMODE(directory.st_mode) & 0o777) == (0, GROUP_GID, 0o750)
        assert (stat.S_ISSOCK(made.st_mode), made.st_uid, made.st_gid, stat.S_IMODE(made.st_mode)) == (True, 0, GROUP_GID, 0o660)
        client = _subscribe(sock)
        answer, *_ = _readings(client, 1)
        assert answer["ok"] is True
        client.close()
    finally:
        stop(agent)
    assert agent.returncode == 0


def test_a_directory_a_member_owns_anywhere_above_the_socket_is_refused(tmp_path: Path) -> None:
    tree = root_only_tree(tmp_path)
    walkable(tmp_path)
    owned = tmp_path / "members"
    owned.mkdir(mode=0o755)
    os.chown(owned, MEMBER_UID, GROUP_GID)  # its owner could swap the directories below it
    sock = owned / "deep" / "run" / "agent.sock"
    sock.parent.parent.mkdir(mode=0o755)
    err = _refused_start(tmp_path, tree, sock)
    assert f"{owned}, above the socket, belongs to uid {MEMBER_UID}" in err
    assert not sock.parent.exists()


def test_a_directory_others_may_write_above_the_socket_is_refused_unless_sticky(tmp_path: Path) -> None:
    tree = root_only_tree(tmp_path)
    walkable(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    err = _refused_start(tmp_path, tree, shared / "run" / "agent.sock")
    assert f"{shared}, above the socket, is writable by group or others (mode 0777) without the sticky bit" in err
    os.chmod(shared, 0o1777)  # as /tmp: no one may rename another's entry
    agent = start_agent(tmp_path, tree, shared / "run" / "agent.sock", stderr_name="sticky.err")
    stop(agent)
    assert agent.returncode == 0


def test_a_live_agent_is_not_displaced_and_a_dead_ones_socket_is_replaced(tmp_path: Path) -> None:
    tree = root_only_tree(tmp_path)
    sock = agent_socket(tmp_path)
    first = start_agent(tmp_path, tree, sock, stderr_name="first.err")
    try:
        err = _refused_start(tmp_path, tree, sock)
        assert f"another agent already serves {sock}" in err
        first.kill()  # no clean-up: its socket stays
        first.wait(10)
        assert sock.exists()
        second = start_agent(tmp_path, tree, sock, stderr_name="second.err")
        stop(second)
        assert f"removed the socket a stopped agent left at {sock}" in (tmp_path / "second.err").read_text()
    finally:
        stop(first)


def test_the_agent_writes_nothing_outside_its_runtime_directory(tmp_path: Path) -> None:
    tree = root_only_tree(tmp_path)
    sock = agent_socket(tmp_path)
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
    agent = start_agent(tmp_path, tree, sock)
    try:
        client = _subscribe(sock)
        _readings(client, 3)
        client.close()
    finally:
        stop(agent)
    after = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
    # New: the runtime directory (its socket is gone again), the agent's stderr file and the empty cwd the test gave it.
    assert set(after) - set(before) == {sock.parent, tmp_path / "agent.err", tmp_path / "agent-cwd", tmp_path / "home"}
    assert list((tmp_path / "agent-cwd").iterdir()) == [] and list(sock.parent.iterdir()) == []
    assert all(after[p] == before[p] for p in before if p in after and p.is_file())


# -- requests -----------------------------------------------------------------------------------------


def _subscribe(path: Path) -> socket.socket:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(5)
    client.connect(str(path))
    client.sendall(encode({"op": "subscribe", "version": 1}))
    return client


def _readings(client: socket.socket, count: int, buffer: bytearray | None = None) -> list[dict]:
    buffer = bytearray() if buffer is None else buffer
    messages: list[dict] = []
    while len(messages) < count:
        chunk = client.recv(MAX_REPLY_BYTES)
        assert chunk, "the agent closed a good client's connection"
        buffer += chunk
        messages += decode_frames(buffer, MAX_REPLY_BYTES)
    return messages


def _closed_by_agent(client: socket.socket, timeout_s: float = 5.0) -> bool:
    client.settimeout(timeout_s)
    try:
        while True:
            chunk = client.recv(65536)
            if not chunk:
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


BAD_REQUESTS = {
    "not_json": struct.pack(">I", 5) + b"hello",
    "json_array": struct.pack(">I", 6) + b"[1, 2]",
    "unknown_op": encode({"op": "read_now"}),
    "oversized_announced": struct.pack(">I", 2**31) + b"x" * 100,
    "oversized_sent": struct.pack(">I", 4000) + b"{" + b" " * 3998 + b"}",
    "second_request": encode({"op": "subscribe", "version": 1}) * 2,
    "bad_utf8": struct.pack(">I", 4) + b"\xff\xfe\xfd\xfc",
}


def test_malformed_and_oversized_requests_close_only_that_connection(tmp_path: Path) -> None:
    tree = root_only_tree(tmp_path)
    sock = agent_socket(tmp_path)
    agent = start_agent(tmp_path, tree, sock, "--min-interval-ms", "20")
    try:
        good = _subscribe(sock)
        buffer = bytearray()
        answer, *_ = _readings(good, 2, buffer)
        assert answer["ok"] is True and [z["id"] for z in answer["zones"]] == ["package_0", "core_0", "uncore_0", "dram_0"]
        for name, request in BAD_REQUESTS.items():
            bad = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            bad.connect(str(sock))
            bad.sendall(request)
            assert _closed_by_agent(bad), name
            bad.close()
        late = _subscribe(sock)
        late.sendall(b"more")  # anything after the one request
        assert _closed_by_agent(late)
        silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        silent.connect(str(sock))  # never subscribes: dropped after the deadline
        assert _closed_by_agent(silent, timeout_s=10)
        assert len(_readings(good, 20, buffer)) >= 20  # the good client kept its readings throughout
        assert agent.poll() is None
        for client in (good, late, silent):
            client.close()
    finally:
        stop(agent)
    assert agent.returncode == 0


def test_readings_are_published_at_the_interval_rate_but_not_on_a_fixed_grid(tmp_path: Path) -> None:
    tree = root_only_tree(tmp_path)
    sock = agent_socket(tmp_path)
    interval_s = 0.05
    with ConstantPower(tree, {"package_0": PACKAGE_WATTS}):
        agent = start_agent(tmp_path, tree, sock, "--min-interval-ms", str(interval_s * 1e3))
        try:
            client = _subscribe(sock)
            buffer = bytearray()
            _readings(client, 2, buffer)
            arrivals, values = [], []
            while len(arrivals) < 80:
                for reading in _readings(client, 1, buffer):
                    arrivals.append(time.monotonic())
                    values.append(reading["uj"][0])
            client.close()
        finally:
            stop(agent)
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    mean_s = sum(gaps) / len(gaps)
    spread_s = (sum((g - mean_s) ** 2 for g in gaps) / len(gaps)) ** 0.5
    print(f"publication gaps: mean {mean_s * 1e3:.1f} ms, standard deviation {spread_s * 1e3:.1f} ms")
    # The rate is the interval's (one reading each) ...
    assert 0.8 * interval_s < mean_s < 1.3 * interval_s, mean_s
    # ... but the instants are not on a grid: a random read instant and a random delay, each up to an interval,
    # spread the gaps by ~0.58 interval (a fixed grid's jitter on a loaded box stays a few ms).
    assert spread_s > 0.3 * interval_s, spread_s
    assert values == sorted(values)  # published in the order they were read


NESTED_FRAME = r"""
import socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(5)
s.connect(sys.argv[1])
s.sendall(struct.pack(">I", 1000) + b"[" * 1000)
try:
    closed = s.recv(65536) == b""
except ConnectionResetError:
    closed = True
print("closed" if closed else "answered")
"""


def test_a_deeply_nested_frame_from_a_member_closes_only_that_connection(tmp_path: Path) -> None:
    tree = root_only_tree(tmp_path)
    sock = agent_socket(tmp_path)
    agent = start_agent(tmp_path, tree, sock, "--min-interval-ms", "20")
    try:
        script = tmp_path / "nested.py"
        script.write_text(NESTED_FRAME)
        os.chmod(script, 0o644)
        for _ in range(5):  # five in a row: under systemd's default start limit that would have left it down for good
            member = subprocess.run(
                [*as_uid(MEMBER_UID, OUTSIDER_GID, [GROUP_GID]), sys.executable, str(script), str(sock)],
                env=child_env(tmp_path), cwd=tmp_path / "home", capture_output=True, text=True, timeout=60,
            )
            assert member.returncode == 0 and member.stdout.strip() == "closed", member.stderr
        assert agent.poll() is None, (tmp_path / "agent.err").read_text()
        client = _subscribe(sock)
        answer, *readings = _readings(client, 3)
        assert answer["ok"] is True and all(len(r["uj"]) == 4 for r in readings)
        client.close()
    finally:
        stop(agent)
    assert agent.returncode == 0
    assert "Traceback" not in (tmp_path / "agent.err").read_text()


FLOOD = r"""
import socket, struct, sys, time
path, seconds, count_path = sys.argv[1], float(sys.argv[2]), sys.argv[3]
end = time.monotonic() + seconds
held, attempts = [], 0
while time.monotonic() < end:
    attempts += 1
    if attempts % 200 == 0 or attempts == 1:
        with open(count_path, "r+") as f:  # overwritten in place, never emptied: the count only grows
            f.write(str(attempts))
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setblocking(False)
    try:
        s.connect(path)
        s.send(struct.pack(">I", 40) + b"x" * 40 if attempts % 2 else b"\x00\x00\x00\x10{\"op\":\"subscribe\"")
        if len(held) < 200:
            held.append(s)  # half-sent or garbage, never read
        else:
            s.close()
    except OSError:
        s.close()
"""


def flood_connections(tmp_path: Path) -> int:
    return int((tmp_path / "flood.count").read_text() or 0)


def test_a_flooding_client_does_not_slow_the_others(tmp_path: Path) -> None:
    tree = root_only_tree(tmp_path)
    sock = agent_socket(tmp_path)
    interval_s = 0.02
    agent = start_agent(tmp_path, tree, sock, "--min-interval-ms", str(interval_s * 1e3))

    def subscribe_retrying(deadline_s: float) -> socket.socket:
        # A connect may find the listen queue full while a flood is on: a client retries, as the library does.
        end = time.monotonic() + deadline_s
        while True:
            try:
                return _subscribe(sock)
            except (BlockingIOError, ConnectionRefusedError):
                if time.monotonic() > end:
                    raise
                time.sleep(0.05)

    def gaps(client: socket.socket, buffer: bytearray, seconds: float) -> list[float]:
        times = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            _readings(client, 1, buffer)
            times.append(time.monotonic())
        return [b - a for a, b in zip(times, times[1:])]

    try:
        client = _subscribe(sock)
        buffer = bytearray()
        _readings(client, 2, buffer)
        calm = gaps(client, buffer, 2.0)
        flood_script = tmp_path / "flood.py"
        flood_script.write_text(FLOOD)
        os.chmod(flood_script, 0o644)
        count = tmp_path / "flood.count"
        count.write_text("0")
        os.chown(count, FLOODER_UID, -1)  # the flooder's own file: written by it, by nobody else
        # Niced: on two cores a flooder at equal priority takes the agent's CPU time, which is the scheduler's
        # doing; what is tested is that the agent's own loop keeps serving the others however hard it is pushed.
        # It floods until stopped (at most 120 s): a niced interpreter on a loaded box may take seconds to start.
        flooders = [
            subprocess.Popen(["nice", "-n", "19", *as_uid(FLOODER_UID, GROUP_GID), sys.executable, str(flood_script),
                              str(sock), "120", str(count)], env=child_env(tmp_path), stderr=subprocess.PIPE)
        ]
        try:
            started = time.monotonic()
            while flood_connections(tmp_path) < 200:
                assert flooders[0].poll() is None, flooders[0].communicate()[1]
                assert time.monotonic() - started < 60, "the flooder did not start flooding within 60 s"
                _readings(client, 1, buffer)  # the client keeps reading meanwhile: its buffer never fills
            flooded = gaps(client, buffer, 2.5)
            # A newcomer still gets in and is served during the flood.
            newcomer = subscribe_retrying(10)
            # One recv may carry more frames than asked for: the hello, then readings.
            hello, *readings = _readings(newcomer, 3)
            assert hello["ok"] and len(readings) >= 2 and all("uj" in reading for reading in readings), readings
            newcomer.close()
            attempts = flood_connections(tmp_path)
        finally:
            for flooder in flooders:
                stop(flooder)
        client.close()
        assert agent.poll() is None
    finally:
        stop(agent)
    calm.sort()
    flooded.sort()
    # Readings keep arriving: the median gap stays under two intervals, and no reading is held back long.
    # Two cores are shared with four flooders, the test and a whole suite's leftovers: full test runs
    # here saw medians of 20-32 ms at a 20 ms interval, so one interval of slack, not a tighter bound.
    assert flooded[len(flooded) // 2] < 2 * interval_s, (calm[len(calm) // 2], flooded[len(flooded) // 2])
    assert len(flooded) >= 0.6 * 2.5 / interval_s, len(flooded)
    assert attempts > 1000  # it did flood
    print(f"flood: {attempts} connection attempts; median gap calm {calm[len(calm) // 2] * 1e3:.1f} ms, "
          f"flooded {flooded[len(flooded) // 2] * 1e3:.1f} ms, p99 {flooded[int(len(flooded) * 0.99)] * 1e3:.1f} ms")
    assert flooded[int(len(flooded) * 0.99)] < 0.25, flooded[-5:]


def test_devices_says_which_domains_are_read_through_the_agent(tmp_path: Path) -> None:
    tree = root_only_tree(tmp_path)
    sock = agent_socket(tmp_path)
    agent = start_agent(tmp_path, tree, sock)
    try:
        result = subprocess.run(
            [*as_uid(MEMBER_UID, OUTSIDER_GID, [GROUP_GID]), sys.executable, "-m", "otel_joules.cli.main", "devices", "--json"],
            env=child_env(tmp_path, OTEL_JOULES_SYSFS_ROOT=tree.sysfs_root, OTEL_JOULES_AGENT_SOCKET=str(sock), LD_LIBRARY_PATH=""),
            cwd=tmp_path / "home", capture_output=True, text=True, timeout=60,
        )
    finally:
        stop(agent)
    assert result.returncode == 0, result.stderr
    import json

    report = json.loads(result.stdout)
    rows = [(d["id"], d["source"], d["via_agent"]) for d in report["domains"]]
    assert rows[:4] == [("package_0", "measured", True), ("core_0", "measured", True), ("uncore_0", "measured", True),
                        ("dram_0", "measured", True)]
    # The standby estimates are listed (they stand in while the agent is away); the permission entries are not news.
    assert [r[0] for r in rows[4:]] == ["cpu_estimate", "memory_estimate"]
    assert not any("not readable by this user" in u["reason"] for u in report["unavailable"])


def test_with_user_the_agent_switches_to_it_after_opening_the_counters_and_still_serves(tmp_path: Path) -> None:
    tree = root_only_tree(tmp_path)
    sock = agent_socket(tmp_path)
    agent = start_agent(tmp_path, tree, sock, "--user", "23005")
    try:
        status = Path(f"/proc/{agent.pid}/status").read_text().splitlines()
        uids = next(line for line in status if line.startswith("Uid:")).split()[1:]
        groups = next(line for line in status if line.startswith("Groups:")).split()[1:]
        assert uids == ["23005"] * 4 and groups == []
        client = _subscribe(sock)
        answer, reading, *_ = _readings(client, 2)
        assert answer["ok"] is True and len(reading["uj"]) == 4 and all(isinstance(v, int) for v in reading["uj"])
        client.close()
    finally:
        stop(agent)
    # It may not remove its socket from root's directory any more; the next agent replaces it, and says so.
    again = start_agent(tmp_path, tree, sock, stderr_name="again.err")
    stop(again)
    assert "removed the socket a stopped agent left" in (tmp_path / "again.err").read_text()


FORKING = r"""
import json, os, sys, time
from otel_joules import EnergyMeter
meter = EnergyMeter()
meter.snapshot()
pid = os.fork()
# Each process its own subscription: the parent's connection is not shared with the child.
time.sleep(0.3)
a = meter.snapshot(); time.sleep(1.0); b = meter.snapshot()
m = meter.measure(a, b)
print(json.dumps({"who": "child" if pid == 0 else "parent", "source": m.source, "joules": m.total_joules,
                  "duration_s": m.duration_s, "agent": list(m.agent_domains)}), flush=True)
if pid:
    os.waitpid(pid, 0)
else:
    os._exit(0)
"""


def test_a_forked_child_reads_through_the_agent_too(tmp_path: Path) -> None:
    tree = root_only_tree(tmp_path)
    sock = agent_socket(tmp_path)
    script = tmp_path / "forking.py"
    script.write_text(FORKING)
    os.chmod(script, 0o644)
    with ConstantPower(tree, {"package_0": PACKAGE_WATTS, "dram_0": DRAM_WATTS}):
        agent = start_agent(tmp_path, tree, sock)
        try:
            result = subprocess.run(
                [*as_uid(MEMBER_UID, OUTSIDER_GID, [GROUP_GID]), sys.executable, str(script)],
                env=child_env(tmp_path, OTEL_JOULES_SYSFS_ROOT=tree.sysfs_root, OTEL_JOULES_AGENT_SOCKET=str(sock),
                              LD_LIBRARY_PATH=""),
                cwd=tmp_path / "home", capture_output=True, text=True, timeout=60,
            )
        finally:
            stop(agent)
    assert result.returncode == 0, result.stderr
    rows = {row["who"]: row for row in map(json.loads, result.stdout.splitlines())}
    assert set(rows) == {"parent", "child"}, result.stdout
    for row in rows.values():
        assert row["source"] == "measured" and row["agent"] == ["core_0", "dram_0", "package_0", "uncore_0"], row
        assert abs(row["joules"] - TOTAL_WATTS * row["duration_s"]) <= 0.05 * TOTAL_WATTS * row["duration_s"], row
    assert result.stderr == ""


ROOT_READER = r"""
import json
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from otel_joules import EnergyMeter
from otel_joules.metrics import EnergyMetrics
meter = EnergyMeter()
metrics = EnergyMetrics(meter, meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]))
print(json.dumps({"agent": list(meter.agent_domain_ids), "publishes_host": metrics.publishes_host}), flush=True)
"""


def test_a_process_that_could_read_the_counters_itself_reads_through_an_agent_that_answers(tmp_path: Path) -> None:
    """One reader per host: root reads the tree without the agent, but where an agent answers it is the host's one
    reader and publisher of its devices, so an instrumented root process reads through it and publishes no hw.*;
    with no agent there, the same process reads the counters itself."""
    tree = root_only_tree(tmp_path)
    sock = agent_socket(tmp_path)
    script = tmp_path / "root_reader.py"
    script.write_text(ROOT_READER)
    env = child_env(tmp_path, OTEL_JOULES_SYSFS_ROOT=tree.sysfs_root, OTEL_JOULES_AGENT_SOCKET=str(sock), LD_LIBRARY_PATH="")

    def run_as_root() -> dict:
        result = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path / "home",
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return dict(json.loads(result.stdout))

    assert os.geteuid() == 0 and os.access(tree.zones["package_0"].path / "energy_uj", os.R_OK)
    alone = run_as_root()
    assert alone == {"agent": [], "publishes_host": True}, alone
    agent = start_agent(tmp_path, tree, sock)
    try:
        beside = run_as_root()
    finally:
        stop(agent)
    assert beside == {"agent": ["core_0", "dram_0", "package_0", "uncore_0"], "publishes_host": False}, beside


EARLY_THREAD = r"""
import logging, sys, threading
from otel_joules.agent.setup import drop_privileges, threads_holding_capabilities
logging.basicConfig(format="%(message)s")
stop = threading.Event()
if sys.argv[1] == "early":
    threading.Thread(target=stop.wait, name="early-poller", daemon=True).start()
drop_privileges(None)
print(threads_holding_capabilities(), flush=True)
stop.set()
"""


@pytest.mark.parametrize("early", [True, False])
def test_a_thread_started_before_the_drop_that_keeps_roots_capabilities_is_named(tmp_path: Path, early: bool) -> None:
    """capset() drops the calling thread's capabilities only: without --user, a thread started before the drop
    (a BMC poller, the metrics exporter) keeps them, and the agent says so, naming it and the remedy."""
    script = tmp_path / "early.py"
    script.write_text(EARLY_THREAD)
    result = subprocess.run([sys.executable, str(script), "early" if early else "alone"], env=child_env(tmp_path),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    if early:
        assert result.stdout.strip() == "['early-poller']", result.stdout
        assert "1 thread(s) started before the privilege drop keep root's capabilities (early-poller): run with --user" in result.stderr
    else:
        assert result.stdout.strip() == "[]" and result.stderr == "", result
