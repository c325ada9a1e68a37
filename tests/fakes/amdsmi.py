"""Test helper: the stand-in ``libamd_smi.so`` (tests/fakes/amdsmi_stub/) and how to run code against it.

The real ``amdsmi`` package loads its library when it is imported, first from ``$ROCM_PATH/lib/libamd_smi.so``
(``ROCM_HOME`` wins where set), so code that must see the stand-in runs in a child process whose ``ROCM_PATH``
names the folder built here: nothing of the host's ROCm is touched. The library is compiled with ``gcc`` once per
source version (and amdsmi version) into the temp folder; the stubs for the functions the stand-in leaves
unsupported are generated from the installed package's bindings by ``gen_stubs.py``.

:class:`FakeAmdGpu` also computes the truth the tests compare against: the exact energy of its power profile.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from tests.fakes.nvml import RunResult, card_lines, run_child, sine_energy_joules

STUB_DIR = Path(__file__).resolve().parent / "amdsmi_stub"
SOURCE = STUB_DIR / "fake_amdsmi.c"
GENERATOR = STUB_DIR / "gen_stubs.py"
LIBRARY_NAME = "libamd_smi.so"


@dataclass
class FakeAmdGpu:
    """One GPU of the stand-in; field names follow the C config keys (see fake_amdsmi.c)."""

    name: str = "AMD Instinct MI300X"
    uuid: str | None = None
    bdf: str | None = None
    watts: float = 100.0
    watts_amplitude: float = 0.0
    watts_period_s: float = 1.0
    energy: bool = True
    power: bool = True
    power_field: str = "current"
    resolution_uj: float = 15.3
    energy_start_counts: int = 0
    pids: Sequence[int | str] = ()
    pids_file: str | None = None
    gfx_percent: Sequence[str] = ()
    compute_partition: str | None = None
    memory_partition: str | None = None

    def energy_joules(self, t0_s: float, t1_s: float) -> float:
        """Exact energy between two times (seconds since the stand-in's epoch)."""
        return sine_energy_joules(self.watts, self.watts_amplitude, self.watts_period_s, t0_s, t1_s)

    def lines(self) -> list[str]:
        """The GPU's section of the config file."""
        return card_lines(vars(self))


@dataclass
class FakeAmdSmi:
    """The whole stand-in machine: its GPUs and global behaviour."""

    gpus: list[FakeAmdGpu] = field(default_factory=list)
    update_ms: float = 1.0
    #: CLOCK_MONOTONIC seconds at which counters start (``time.monotonic()`` reads that clock).
    epoch_monotonic_s: float | None = None
    init_error: int | None = None

    def write(self, path: Path) -> Path:
        """Write the config file the stand-in reads at ``amdsmi_init``."""
        lines = [f"update_ms={self.update_ms}"]
        if self.epoch_monotonic_s is not None:
            lines.append(f"epoch_monotonic_s={self.epoch_monotonic_s!r}")
        if self.init_error is not None:
            lines.append(f"init_error={self.init_error}")
        for gpu in self.gpus:
            lines += gpu.lines()
        path.write_text("\n".join(lines) + "\n")
        return path


def wrapper_path() -> Path:
    """The installed ``amdsmi`` package's ctypes bindings (found without importing it: that needs the library)."""
    spec = importlib.util.find_spec("amdsmi")
    if spec is None or spec.origin is None:
        raise RuntimeError("the amdsmi package is not installed: pip install -e '.[dev]'")
    return Path(spec.origin).parent / "amdsmi_wrapper.py"


def build_library() -> Path:
    """Compile the stand-in with its generated stubs (once per version) and return the ROCm-like folder holding ``lib/``."""
    wrapper = wrapper_path()
    digest = hashlib.sha256(SOURCE.read_bytes() + GENERATOR.read_bytes() + wrapper.read_bytes()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"otel-joules-fake-amdsmi-{digest}"
    target = folder / "lib" / LIBRARY_NAME
    if target.exists():
        return folder
    target.parent.mkdir(parents=True, exist_ok=True)
    stubs = folder / f"stubs.{os.getpid()}.c"
    subprocess.run([sys.executable, str(GENERATOR), str(wrapper), str(SOURCE), str(stubs)], check=True, capture_output=True)
    partial = target.parent / f".{LIBRARY_NAME}.{os.getpid()}.tmp"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden",
         "-o", str(partial), str(SOURCE), str(stubs), "-lm"],
        check=True,
        capture_output=True,
    )
    os.replace(partial, target)
    stubs.unlink()
    return folder


def run_python(
    code: str,
    fake: FakeAmdSmi | None,
    tmp_path: Path,
    *,
    env: Mapping[str, str | None] | None = None,
    args: Sequence[str] = (),
    timeout_s: float = 60.0,
) -> RunResult:
    """Run ``code`` (or a script when ``args`` names one) in a child whose ``amdsmi`` loads the stand-in.

    The child sees no NVML library (its loader path is an empty folder) and no visibility variables but those
    in ``env``. It must print one JSON document as its last stdout line (unless it prints nothing).
    """
    config = fake.write(tmp_path / "fake_amdsmi.conf") if fake is not None else None
    empty = tmp_path / "no-nvml"
    empty.mkdir(exist_ok=True)
    extra: dict[str, str | None] = {
        "ROCM_PATH": str(build_library()),
        "ROCM_HOME": None,
        "ROCR_VISIBLE_DEVICES": None,
        "HIP_VISIBLE_DEVICES": None,
        "FAKE_AMDSMI_CONFIG": str(config) if config is not None else None,
    }
    extra.update(env or {})
    return run_child(code, None, empty, tmp_path, extra, args, timeout_s)


def uuid_for(n: int) -> str:
    """A distinct, amdsmi-looking UUID for GPU ``n``."""
    return f"{n:08x}-0000-1000-80fe-{0xa0000 + n:012x}"
