"""BMC servers for tests, each a child process on 127.0.0.1 started by the test and stopped by its pid.

* :func:`sushy_static`: sushy-tools' static Redfish emulator (``sushy-static``) serving a mockup of ours
  (``tests/fakes/redfish_mockups/<name>``).
* :func:`redfish_fake`: :mod:`tests.fakes.redfish_http`, readings that change (an energy counter), or a BMC
  that is slow or answers garbage.
* :func:`dcmi_bmc`: pyghmi's BMC server answering DCMI Get Power Reading (:mod:`tests.fakes.dcmi_bmc`).

:func:`bmc_file` writes the agent's BMC file (mode 0600) for them.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from tests.helpers.processes import REPO, closed_port, free_port, stop_by_pid

MOCKUPS = Path(__file__).parent / "redfish_mockups"


def _child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHON"))}
    env["PYTHONPATH"] = str(REPO)
    return env


def _wait_tcp(port: int, process: subprocess.Popen[Any], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the server exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port} after {timeout_s} s")


def sushy_static_command() -> list[str]:
    """sushy-tools' ``sushy-static`` console script beside this interpreter, else its module."""
    script = Path(sys.executable).with_name("sushy-static")
    return [str(script)] if script.exists() else [sys.executable, "-m", "sushy_tools.static.main"]


@contextmanager
def sushy_static(mockup: str) -> Iterator[str]:
    """``sushy-static`` serving ``redfish_mockups/<mockup>``; yields the base URL."""
    port = closed_port()
    process = subprocess.Popen(
        [*sushy_static_command(), "-i", "127.0.0.1", "-p", str(port), "-m", str(MOCKUPS / mockup)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=_child_env(),
    )
    try:
        _wait_tcp(port, process)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_by_pid(process)


def _spawn(module: str, spec: dict[str, Any]) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", module],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=_child_env(),
        cwd=REPO,
    )
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(json.dumps(spec) + "\n")
    process.stdin.flush()
    line = process.stdout.readline()
    if not line.startswith("ready"):
        stop_by_pid(process)
        raise AssertionError(f"{module} did not start: {line!r}")
    return process, line


@contextmanager
def redfish_fake(
    watts: float, mode: str = "energy", user: str | None = None, password: str | None = None, watts_file: str | None = None
) -> Iterator[str]:
    """:mod:`tests.fakes.redfish_http`; yields the base URL."""
    process, line = _spawn(
        "tests.fakes.redfish_http", {"watts": watts, "mode": mode, "user": user, "password": password, "watts_file": watts_file}
    )
    try:
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        stop_by_pid(process)


def free_udp_port() -> int:
    """A loopback UDP port nothing is bound to."""
    return free_port(socket.SOCK_DGRAM)


@contextmanager
def dcmi_bmc(watts: int, user: str, password: str, mode: str = "watts") -> Iterator[int]:
    """pyghmi's BMC answering DCMI Get Power Reading; yields its UDP port."""
    port = free_udp_port()
    process, _ = _spawn("tests.fakes.dcmi_bmc", {"port": port, "user": user, "password": password, "watts": watts, "mode": mode})
    try:
        yield port
    finally:
        stop_by_pid(process)


def bmc_file(path: Path, text: str, mode: int = 0o600) -> str:
    """Write the agent's BMC file at ``path`` with ``mode``; its path."""
    path.write_text(text)
    os.chmod(path, mode)
    return str(path)
