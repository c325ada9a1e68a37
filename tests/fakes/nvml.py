"""Test helper: the stand-in ``libnvidia-ml.so.1`` (tests/fakes/nvml_stub/fake_nvml.c) and how to run code against it.

The real ``pynvml`` opens ``libnvidia-ml.so.1`` with ``CDLL`` at ``nvmlInit``; the dynamic
loader reads ``LD_LIBRARY_PATH`` only when a process starts, so code that must see the
stand-in runs in a subprocess started by :func:`run_python`. The library is compiled with
``gcc`` once per source version into the temp folder (the file name carries a hash of the
source, and the rename into place is atomic, so parallel test runs share it safely).

:class:`FakeCard` also computes the truth the tests compare against: the exact energy of its
power profile over any interval.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from tests.helpers.processes import REPO

SOURCE = Path(__file__).resolve().parent / "nvml_stub" / "fake_nvml.c"
LIBRARY_NAME = "libnvidia-ml.so.1"


@dataclass
class FakeCard:
    """One GPU of the stand-in; field names follow the C config keys (see fake_nvml.c)."""

    name: str = "NVIDIA A100-SXM4-40GB"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    pci: str = "00000000:07:00.0"
    watts: float = 100.0
    watts_amplitude: float = 0.0
    watts_period_s: float = 1.0
    energy: bool = True
    power: bool = True
    energy_start_mj: int = 0
    lost_after_s: float | None = None
    #: NVML energy/power reads and process lists take this long (a GPU falling off the bus) from ``slow_after_s`` on.
    read_delay_ms: float | None = None
    slow_after_s: float | None = None
    #: A file holding the read delay in ms, read at every read (tests stall and unstall the GPU).
    read_delay_file: str | None = None
    compute_pids: Sequence[int | str] = ()
    graphics_pids: Sequence[int | str] = ()
    compute_pids_file: str | None = None
    #: ``nvmlDeviceGetProcessUtilization``: SM % by pid (``"self"`` for the calling process); None: NOT_SUPPORTED.
    process_utilization: Sequence[str] = ()
    process_utilization_file: str | None = None
    cc: str = "8.0"
    cores: int = 6912
    sm_clock_mhz: int = 1410
    mig_uuids: Sequence[str] = ()

    def energy_joules(self, t0_s: float, t1_s: float) -> float:
        """Exact energy between two times (seconds since the stand-in's epoch)."""
        return sine_energy_joules(self.watts, self.watts_amplitude, self.watts_period_s, t0_s, t1_s)

    def lines(self) -> list[str]:
        """The card's section of the config file."""
        return card_lines(vars(self))


def sine_energy_joules(watts: float, amplitude_watts: float, period_s: float, t0_s: float, t1_s: float) -> float:
    """The exact energy of P(t) = watts + amplitude x sin(2 pi t / period) between two times: the stand-ins' truth."""
    omega = 2 * math.pi / period_s

    def integral(t_s: float) -> float:
        return watts * t_s + amplitude_watts * (1 - math.cos(omega * t_s)) / omega

    return integral(t1_s) - integral(t0_s)


def card_lines(fields: Mapping[str, Any]) -> list[str]:
    """A stand-in card's ``[card]`` section: one ``key=value`` per set field (lists comma-separated, bools 0/1)."""
    out = ["[card]"]
    for key, value in fields.items():
        if value is None or (isinstance(value, (list, tuple)) and not value):
            continue
        if isinstance(value, bool):
            value = int(value)
        elif isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        out.append(f"{key}={value}")
    return out


@dataclass
class FakeNvml:
    """The whole stand-in machine: its cards and global behaviour."""

    cards: list[FakeCard] = field(default_factory=list)
    update_ms: float = 100.0
    #: CLOCK_MONOTONIC seconds at which counters start (``time.monotonic()`` reads that clock).
    epoch_monotonic_s: float | None = None
    init_error: int | None = None
    stats_path: str | None = None
    #: A file the stand-in counts its energy reads in (all processes using this config): :func:`energy_reads`.
    reads_path: str | None = None
    driver_version: str = "550.54.15"

    def write(self, path: Path) -> Path:
        """Write the config file the stand-in reads at ``nvmlInit``."""
        lines = [f"update_ms={self.update_ms}", f"driver_version={self.driver_version}"]
        if self.epoch_monotonic_s is not None:
            lines.append(f"epoch_monotonic_s={self.epoch_monotonic_s!r}")
        if self.init_error is not None:
            lines.append(f"init_error={self.init_error}")
        if self.stats_path is not None:
            lines.append(f"stats_path={self.stats_path}")
        if self.reads_path is not None:
            lines.append(f"reads_path={self.reads_path}")
        for card in self.cards:
            lines += card.lines()
        path.write_text("\n".join(lines) + "\n")
        return path


def energy_reads(reads_path: str | Path) -> int:
    """How many ``nvmlDeviceGetTotalEnergyConsumption`` calls the stand-in has counted in ``reads_path`` (0: none yet)."""
    try:
        raw = Path(reads_path).read_bytes()
    except FileNotFoundError:
        return 0
    return int.from_bytes(raw[:8], sys.byteorder) if len(raw) >= 8 else 0


def build_library() -> Path:
    """Compile the stand-in (once per source version) and return the folder holding it."""
    source = SOURCE.read_bytes()
    digest = hashlib.sha256(source).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"otel-joules-fake-nvml-{digest}"
    target = folder / LIBRARY_NAME
    if target.exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{LIBRARY_NAME}.{os.getpid()}.tmp"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden", "-pthread",
         "-o", str(partial), str(SOURCE), "-lm"],
        check=True,
        capture_output=True,
    )
    os.replace(partial, target)
    return folder


@dataclass
class RunResult:
    """What a subprocess printed: the JSON of its last stdout line, plus the raw streams."""

    data: Any
    stdout: str
    stderr: str


def subprocess_env(
    config: Path | None, library_dir: Path | None, extra: Mapping[str, str | None] | None = None
) -> dict[str, str]:
    """Environment for a child that loads ``library_dir``'s libnvidia-ml.so.1 with ``config``."""
    env = dict(os.environ)
    # The parent's GPU selection must not leak into a test that sets its own.
    for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "FAKE_NVML_CONFIG"):
        env.pop(name, None)
    env["LD_LIBRARY_PATH"] = str(library_dir) if library_dir is not None else ""
    if config is not None:
        env["FAKE_NVML_CONFIG"] = str(config)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    for key, value in (extra or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def run_python(
    code: str,
    fake: FakeNvml | None,
    tmp_path: Path,
    *,
    env: Mapping[str, str | None] | None = None,
    library_dir: Path | None = None,
    no_library: bool = False,
    args: Sequence[str] = (),
    timeout_s: float = 60.0,
) -> RunResult:
    """Run ``code`` (or a script when ``args`` names one) in a child process that sees the stand-in.

    ``no_library``: LD_LIBRARY_PATH points to an empty folder, as on a machine without a driver.
    The child must print one JSON document as its last stdout line (unless it prints nothing).
    """
    config = fake.write(tmp_path / "fake_nvml.conf") if fake is not None else None
    if no_library:
        library_dir = tmp_path / "empty-lib"
        library_dir.mkdir(exist_ok=True)
    elif library_dir is None:
        library_dir = build_library()
    return run_child(code, config, library_dir, tmp_path, env, args, timeout_s)


def run_child(
    code: str,
    config: Path | None,
    library_dir: Path | None,
    tmp_path: Path,
    env: Mapping[str, str | None] | None,
    args: Sequence[str],
    timeout_s: float,
) -> RunResult:
    """Run ``code`` (or ``args``) in a child with :func:`subprocess_env`; its last stdout line is JSON (or nothing)."""
    command = [sys.executable, *args] if args else [sys.executable, "-c", textwrap.dedent(code)]
    proc = subprocess.run(
        command,
        env=subprocess_env(config, library_dir, env),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=tmp_path,
    )
    if proc.returncode != 0:
        raise AssertionError(f"child failed with {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    data = json.loads(lines[-1]) if lines else None
    return RunResult(data=data, stdout=proc.stdout, stderr=proc.stderr)


def read_stats(path: Path) -> list[tuple[str, int, int]]:
    """The stand-in's init/shutdown log: (event, pid, reference count after it)."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        event, pid, refcount = line.split()
        rows.append((event, int(pid), int(refcount)))
    return rows


def uuid_for(n: int) -> str:
    """A distinct, realistic-looking GPU UUID for card ``n``."""
    return f"GPU-{n:08x}-aaaa-bbbb-cccc-{n:012x}"
