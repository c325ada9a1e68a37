"""Real processes for the agent's tests: a root-only fake powercap tree, the agent, clients as other uids.

Clients drop to numeric uids and gids with ``setpriv`` (no user is added to the host's files); every
process is stopped by its pid, each wait bounded. Everything lives under the test's tmp_path, made
walkable (search permission only) for the unprivileged uids.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from otel_joules.config import OTEL_JOULES_AGENT_SOCKET, OTEL_JOULES_SYSFS_ROOT

from tests.fakes.powercap import FakePowercap, make_powercap
from tests.helpers.processes import stop_by_pid

REPO = Path(__file__).resolve().parents[2]
SPAN_CHILD = Path(__file__).with_name("span_child.py")
#: The agent's group and the uids of the tests (numeric: none is in /etc/passwd or /etc/group).
GROUP_GID = 23000
MEMBER_UID = 23001
OUTSIDER_UID = 23002
FLOODER_UID = 23003
OUTSIDER_GID = 23009
#: Watts the fake package and dram draw (core and uncore sit inside the package: not in the total).
PACKAGE_WATTS = 20.0
DRAM_WATTS = 5.0
TOTAL_WATTS = PACKAGE_WATTS + DRAM_WATTS


def walkable(path: Path) -> None:
    """Let every uid pass through ``path`` and its ancestors (search only: nothing becomes listable or readable)."""
    for directory in [path, *path.parents]:
        mode = directory.stat().st_mode
        if not mode & stat.S_IXOTH:
            os.chmod(directory, stat.S_IMODE(mode) | stat.S_IXOTH | stat.S_IXGRP)


def agent_socket(tmp_path: Path) -> Path:
    """Where a test's agent listens: ``run/agent.sock`` under ``tmp_path`` (the agent makes ``run``), walkable."""
    walkable(tmp_path)
    return tmp_path / "run" / "agent.sock"


def root_only_tree(tmp_path: Path) -> FakePowercap:
    """A one-socket tree whose energy_uj files are 0400 root, as since CVE-2020-8694; directories walkable."""
    tree = make_powercap(tmp_path / "sys", "one_socket", mode=0o400)
    for dirpath, _, _ in os.walk(tree.root):
        os.chmod(dirpath, 0o755)
    walkable(tree.root)
    return tree


def child_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A small environment for a child: no inherited OTEL_* settings, no bytecode writes."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    os.chmod(home, 0o777)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "PYTHONDONTWRITEBYTECODE": "1",
        # The checkout's own sources first: an installed copy elsewhere must not stand in for the code under test.
        "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}",
        "OTEL_SDK_DISABLED": "false",
        "OTEL_TRACES_EXPORTER": "none",
        "OTEL_METRICS_EXPORTER": "none",
    }
    for name in (OTEL_JOULES_SYSFS_ROOT, OTEL_JOULES_AGENT_SOCKET):
        if name in os.environ:
            env[name] = os.environ[name]  # the test's isolation from the host (tests/conftest.py), unless extra says
    if "OTEL_JOULES_FAST_PATH" in os.environ:
        env["OTEL_JOULES_FAST_PATH"] = os.environ["OTEL_JOULES_FAST_PATH"]  # the span path under test, in children too
    env.update(extra)
    return env


def start_agent(
    tmp_path: Path,
    tree: FakePowercap,
    socket_path: Path,
    *args: str,
    group: int | str = GROUP_GID,
    wait: bool = True,
    stderr_name: str = "agent.err",
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """``otel-joules agent`` as root on ``tree`` (``env`` on top of :func:`child_env`'s); with ``wait``, returns once
    its socket exists."""
    err = open(tmp_path / stderr_name, "ab")
    cwd = tmp_path / "agent-cwd"
    cwd.mkdir(exist_ok=True)
    process = subprocess.Popen(
        [sys.executable, "-m", "otel_joules.cli.main", "agent", "--socket", str(socket_path), "--group", str(group), *args],
        env=child_env(tmp_path, OTEL_JOULES_SYSFS_ROOT=tree.sysfs_root, **(env or {})),
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=err,
    )
    err.close()
    if wait:
        deadline = time.monotonic() + 30
        # Its start-up line, not the socket: a dead agent's socket may still be there.
        while b"otel-joules agent: serving" not in (tmp_path / stderr_name).read_bytes():
            if process.poll() is not None:
                raise AssertionError(f"the agent exited ({process.returncode}): {(tmp_path / stderr_name).read_text()}")
            if time.monotonic() > deadline:
                stop(process)
                raise AssertionError("the agent did not create its socket within 30 s")
            time.sleep(0.02)
    return process


def stop(process: subprocess.Popen[Any], timeout_s: float = 10.0) -> None:
    """Stop one process by its pid: SIGTERM, then SIGKILL after ``timeout_s``."""
    stop_by_pid(process, timeout_s)


def as_uid(uid: int, gid: int, groups: Sequence[int] = ()) -> list[str]:
    """The ``setpriv`` prefix that runs a command as ``uid``/``gid`` with exactly ``groups`` as supplementary groups."""
    prefix = ["setpriv", "--reuid", str(uid), "--regid", str(gid)]
    prefix += [f"--groups={','.join(map(str, groups))}"] if groups else ["--clear-groups"]
    return prefix


def span_child(
    tmp_path: Path, out: Path, socket_path: Path, tree: FakePowercap, prefix: Sequence[str], *args: str
) -> subprocess.Popen[str]:
    """The instrumented program (tests/agent/span_child.py) under ``prefix`` (a uid switch, a namespace)."""
    out.touch()
    os.chmod(out, 0o666)
    return subprocess.Popen(
        [*prefix, sys.executable, str(SPAN_CHILD), str(out), *args],
        env=child_env(tmp_path, OTEL_JOULES_SYSFS_ROOT=tree.sysfs_root, OTEL_JOULES_AGENT_SOCKET=str(socket_path)),
        cwd=tmp_path / "home",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def spans(out: Path) -> list[dict[str, Any]]:
    """The spans the child wrote so far."""
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


def wait_for(predicate: Any, timeout_s: float, what: str) -> Any:
    """Poll ``predicate`` until it returns something true, at most ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.05)
