"""A wall clock that steps, for a real child process: the preload shim in tests/fakes/wall_clock_stub/.

``date -s``, an NTP or chrony step and a VM resume move ``CLOCK_REALTIME`` and nothing else:
``CLOCK_MONOTONIC`` runs on. The shim (``LD_PRELOAD``) gives a child exactly that: its
``clock_gettime(CLOCK_REALTIME)``, ``gettimeofday()`` and ``time()`` read the real clock plus an
offset held in a file, mapped shared, so a step written by anyone (the child itself, mid-span,
or the test) is seen at the child's next read. Debian's libfaketime could fake only the wall
clock too, but 0.9.10 breaks ``time.sleep`` on Python 3.11+ when it does.

The shim is compiled with ``gcc`` into a folder the test gives (its ``tmp_path``).
"""

from __future__ import annotations

import os
import struct
import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("wall_clock_stub") / "stepped_wall_clock.c"
#: The variable naming the offset file, read by the shim when the child starts.
OFFSET_FILE_ENV = "STEPPED_WALL_CLOCK_FILE"
_OFFSET = struct.Struct("=q")


def build_shim(folder: Path) -> Path:
    """Compile the shim into ``folder`` and return the library's path."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "stepped_wall_clock.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden", "-pthread",
         "-o", str(target), str(SOURCE), "-ldl"],
        check=True,
        capture_output=True,
    )
    return target


class SteppedWallClock:
    """The offset file of one child's wall clock: :meth:`step` moves it, as ``date -s`` would.

    Args:
        path: The offset file (created holding 0 when it does not exist).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        if not self.path.exists():
            # Not world-writable: only the test and its child may step the clock.
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, _OFFSET.pack(0))
            finally:
                os.close(fd)

    @classmethod
    def from_env(cls) -> "SteppedWallClock":
        """The clock of this process (a child started with :meth:`env`)."""
        return cls(Path(os.environ[OFFSET_FILE_ENV]))

    @property
    def offset_ns(self) -> int:
        """How far the wall clock is off the real one, in nanoseconds."""
        return int(_OFFSET.unpack(self.path.read_bytes()[: _OFFSET.size])[0])

    def step(self, by_s: float) -> None:
        """Step the wall clock by ``by_s`` seconds (negative: backwards), in one 8-byte write the shim sees at once."""
        offset_ns = self.offset_ns + round(by_s * 1e9)
        fd = os.open(self.path, os.O_WRONLY)
        try:
            os.pwrite(fd, _OFFSET.pack(offset_ns), 0)
        finally:
            os.close(fd)

    def env(self, shim: Path) -> dict[str, str]:
        """The variables that start a child on this clock."""
        return {"LD_PRELOAD": str(shim), OFFSET_FILE_ENV: str(self.path)}
