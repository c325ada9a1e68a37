"""Helpers for the delivery, instrumentor and ``otel-joules run`` tests: subprocess environments, entry points, ports."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Mapping

from otel_joules.config import OTEL_JOULES_AGENT_SOCKET, OTEL_JOULES_SYSFS_ROOT

#: The repository root. On a child's PYTHONPATH it lets the child import ``tests.fakes.*`` and
#: ``tests.helpers.*`` exactly as the tests do.
REPO = Path(__file__).resolve().parents[2]

#: The entry points pyproject.toml declares for zero-code use.
ENTRY_POINTS = {
    "opentelemetry_instrumentor": ("otel_joules", "otel_joules.instrumentation.zero_code:EnergyInstrumentor"),
    "opentelemetry_resource_detector": ("otel_joules", "otel_joules.delivery.resource:JobResourceDetector"),
}

# Variables of the test runner's environment that would change what a child measures or where it sends.
_SCRUBBED_PREFIXES = ("OTEL_", "SLURM_")
# ... except the test's own isolation from the host's counters and agent (tests/conftest.py), which children keep.
_KEPT = (OTEL_JOULES_SYSFS_ROOT, OTEL_JOULES_AGENT_SOCKET)
_SCRUBBED = {"TRACEPARENT", "TRACESTATE", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "TORCHELASTIC_RUN_ID"}


def installed_entry_point(group: str, name: str) -> str | None:
    """The value of an installed entry point, or None."""
    for entry_point in entry_points(group=group):
        if entry_point.name == name:
            return entry_point.value
    return None


def entry_point_path(tmp_path: Path) -> str | None:
    """A folder to put on PYTHONPATH that declares our entry points, when the installed package lacks them.

    Until pyproject.toml declares them (and the package is reinstalled), zero-code tests
    still run the real ``opentelemetry-instrument`` machinery through a minimal
    distribution that declares the same entry points; None once they are installed.
    """
    missing = {group: ep for group, ep in ENTRY_POINTS.items() if installed_entry_point(group, ep[0]) is None}
    if not missing:
        return None
    folder = tmp_path / "entry-points"
    dist_info = folder / "otel_joules_entry_points-0.0.dist-info"
    dist_info.mkdir(parents=True, exist_ok=True)
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: otel-joules-entry-points\nVersion: 0.0\n")
    text = "".join(f"[{group}]\n{name} = {value}\n\n" for group, (name, value) in missing.items())
    (dist_info / "entry_points.txt").write_text(text)
    return str(folder)


def clean_env(tmp_path: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a child: no inherited OTEL_/Slurm/rank variables but the test's isolated sysfs root and
    agent socket, no GPU library."""
    env = {
        k: v for k, v in os.environ.items() if k in _KEPT or (not k.startswith(_SCRUBBED_PREFIXES) and k not in _SCRUBBED)
    }
    env["PYTHONUNBUFFERED"] = "1"
    # Keep children's metric exports to the final one unless a test asks for more.
    env["OTEL_METRIC_EXPORT_INTERVAL"] = "600000"
    extra_path = entry_point_path(tmp_path)
    paths = [p for p in (extra_path, str(REPO)) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    if extra:
        env.update(extra)
    return env


def otel_joules_command(*args: str) -> list[str]:
    """``otel-joules ARGS`` run with this interpreter."""
    return [sys.executable, "-m", "otel_joules.cli.main", *args]


def opentelemetry_instrument() -> str:
    """Path of the ``opentelemetry-instrument`` launcher next to this interpreter."""
    return str(Path(sys.executable).with_name("opentelemetry-instrument"))


#: The lowest port :func:`free_port` hands out: above the well-known and most registered services.
_LOWEST_TEST_PORT = 20000
#: Ports already handed out in this process, never handed out twice.
_HANDED_OUT: set[int] = set()


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's range for the local ports of outgoing connections."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port(kind: socket.SocketKind = socket.SOCK_STREAM) -> int:
    """A loopback port (TCP, or ``kind``) free at the time of the call, for a server a test starts.

    It lies below the kernel's ephemeral range. A port from ``bind(0)`` lies inside that range.
    Between the test picking it and the server binding it, any outgoing connection on the box can
    take it as its local port; the Collector's own exporters dial out while it starts. Such a
    clash failed CI with "address already in use".
    """
    low, _ = _ephemeral_range()
    candidates = [port for port in range(_LOWEST_TEST_PORT, low) if port not in _HANDED_OUT]
    random.shuffle(candidates)
    for port in candidates:
        with socket.socket(socket.AF_INET, kind) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError(f"no free loopback port between {_LOWEST_TEST_PORT} and {low}")


def closed_port() -> int:
    """A loopback port nothing listens on, for a test that needs a refused connection."""
    return free_port()


#: A child that adds fixed energy to fake powercap zones: ``python -c ADVANCE ZONE_FILE MICROJOULES ...``.
#: It writes the counter the way the kernel shows it (in place, same inode), like tests/fakes/powercap.py.
ADVANCE = """
import sys
args = sys.argv[1:]
for path, uj in zip(args[::2], args[1::2]):
    with open(path, "r+") as f:
        value = int(f.read() or 0)
        f.seek(0)
        f.truncate()
        f.write(f"{value + int(uj)}\\n")
"""

#: ADVANCE after keeping a core busy for 0.3 s: a command whose share is tested must show /proc/stat the two
#: busy ticks a share needs (attribution's MIN_BUSY_S); a 10 ms one sometimes shows one and is rightly nobody's.
BUSY_THEN_ADVANCE = "import time\nend = time.monotonic() + 0.3\nwhile time.monotonic() < end: pass\n" + ADVANCE


def stop_by_pid(process: subprocess.Popen[Any], timeout_s: float = 10.0, kill_timeout_s: float | None = None) -> None:
    """Stop a test's process by its pid: SIGTERM, SIGKILL after ``timeout_s``, then wait (``kill_timeout_s``,
    default ``timeout_s``) for it. Nothing if it has already exited."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout_s if kill_timeout_s is None else kill_timeout_s)
