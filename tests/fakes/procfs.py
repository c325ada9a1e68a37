"""Test helper: a procfs tree written in a temp dir (``OTEL_JOULES_PROCFS_ROOT`` / ``procfs_root=``).

Holds exactly the files the attribution model reads, in the kernel's format and clock ticks:
``stat`` (the host's aggregate ``cpu`` line, then one line per CPU), ``<pid>/stat`` and
``<pid>/task/<tid>/stat``. Each file is replaced whole, as the kernel's are read whole: a
sampler thread reading meanwhile never sees half a file.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
#: CPUs the fake host has by default. Tests add seconds of CPU time between two samples taken
#: microseconds apart, which the attributor accepts only from a host with the CPUs to spend them
#: (elapsed time x CPUs, plus two ticks per CPU): 1024 CPUs cover ~20 CPU seconds at once. A
#: realistic host (``cpus=4``) rightly rejects such counts as implausible.
DEFAULT_CPUS = 1024


def _replace(path: Path, text: str) -> None:
    """Write ``path`` whole, in one rename (a reader sees the old file or the new one)."""
    partial = path.with_name(path.name + ".new")
    partial.write_text(text)
    os.replace(partial, path)


def task_stat_line(pid: int, utime_ticks: int, stime_ticks: int = 0) -> str:
    """A ``/proc/<pid>/stat`` line; the command name has a space and a ')' as real ones may."""
    return f"{pid} (py thon) R 1 1 1 0 -1 4194560 0 0 0 0 {utime_ticks} {stime_ticks} 0 0 20 0 1 0 100 0 0\n"


@dataclass
class FakeProcfs:
    """A written procfs; every setter writes the file at once (ticks since boot)."""

    root: Path
    busy_ticks: int = 1000
    idle_ticks: int = 5000
    process_ticks: dict[int, int] = field(default_factory=dict)
    cpus: int = DEFAULT_CPUS

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.write_host()

    @property
    def procfs_root(self) -> str:
        """The path to give as ``procfs_root``."""
        return str(self.root)

    def write_host(self) -> None:
        # user nice system idle iowait irq softirq steal guest guest_nice: busy split over user and system,
        # and over the CPUs (the first takes the remainders), so the per-CPU busy and idle ticks add up.
        def line(name: str, busy: int, idle: int) -> str:
            return f"{name} {busy - busy // 4} 0 {busy // 4} {idle} 0 0 0 0 0 0\n"

        busy, idle, n = self.busy_ticks, self.idle_ticks, self.cpus
        lines = [line("cpu ", busy, idle), line("cpu0", busy - busy // n * (n - 1), idle - idle // n * (n - 1))]
        lines += [line(f"cpu{i}", busy // n, idle // n) for i in range(1, n)]
        _replace(self.root / "stat", "".join(lines) + "intr 0\nctxt 0\nbtime 0\n")

    def set_host_ticks(self, busy_ticks: int, idle_ticks: int) -> None:
        """Make ``stat`` say these totals, whatever they were (a faulty or reset /proc/stat)."""
        self.busy_ticks, self.idle_ticks = busy_ticks, idle_ticks
        self.write_host()

    def add_host(self, busy_s: float, idle_s: float = 0.0) -> None:
        """The host spent ``busy_s`` more busy CPU seconds and ``idle_s`` more idle ones."""
        self.busy_ticks += round(busy_s * TICKS_PER_S)
        self.idle_ticks += round(idle_s * TICKS_PER_S)
        self.write_host()

    def add_process(self, pid: int, cpu_s: float) -> None:
        """Process ``pid`` used ``cpu_s`` more CPU seconds."""
        self.process_ticks[pid] = self.process_ticks.get(pid, 0) + round(cpu_s * TICKS_PER_S)
        folder = self.root / str(pid)
        folder.mkdir(exist_ok=True)
        _replace(folder / "stat", task_stat_line(pid, self.process_ticks[pid]))

    def add_thread(self, pid: int, tid: int, cpu_s: float) -> None:
        """Thread ``tid`` of ``pid`` used ``cpu_s`` more CPU seconds (the process's total moves with it)."""
        folder = self.root / str(pid) / "task" / str(tid)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "stat"
        ticks = round(cpu_s * TICKS_PER_S)
        if path.exists():
            ticks += int(path.read_text().rsplit(")", 1)[1].split()[11])
        _replace(path, task_stat_line(tid, ticks))
        self.add_process(pid, cpu_s)


class TickingProcfs:
    """A written procfs whose ``stat`` runs with the wall clock, in a thread: ``cpus`` CPUs' worth of ticks per
    second; busy is what :meth:`spend` and :func:`spend_ticks` (from any process) and a CPU hog while
    :attr:`hog_cores` is set add, the rest idle. Every change to ``stat`` is a read-modify-write under an
    ``flock`` on ``<root>/.lock``, so processes that spend CPU time write their own files and the host's at
    once, as the kernel's tick counts them together.

    For tests that need a host's load under their control on a box whose real ``/proc/stat`` is anything
    but idle: the samplers, the fake power (:class:`~tests.fakes.powercap.LoadPower` with this root) and the
    processes all read these counts.
    """

    def __init__(self, proc: FakeProcfs, period_s: float = 0.01) -> None:
        self.proc = proc
        self.hog_cores = 0.0
        self._hog_ticks = 0.0
        self._period_s = period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fake-procfs-ticks", daemon=True)

    def spend(self, pid: int, tid: int, cpu_s: float) -> None:
        """Thread ``tid`` of ``pid`` used ``cpu_s`` more: its files and ``stat`` at once (a process's time ahead
        of the host's would price a period's energy over CPU time whose energy is not in it yet)."""
        spend_ticks(self.proc.root, pid, tid, cpu_s)
        self.proc.process_ticks[pid] = self.proc.process_ticks.get(pid, 0) + round(cpu_s * TICKS_PER_S)

    def __enter__(self) -> "TickingProcfs":
        busy, idle = read_stat_ticks(self.proc.root)
        self._capacity0 = busy + idle
        self._last = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), -15)  # ticks on time on a loaded box (root)
        except (OSError, AttributeError):
            pass
        elapsed = 0.0
        while not self._stop.wait(self._period_s):
            now = time.monotonic()
            # A thread starved on a loaded box must not add more than a period of ticks at once: a sampler reading
            # just before and after a write sees the time since the write before, which may lie before its own
            # interval; a period of it stays within the slack the library allows (more made it call the counts
            # implausible and leave those periods unpriced). This clock then runs slow instead.
            step = min(now - self._last, self._period_s)
            self._last = now
            elapsed += step
            self._hog_ticks += self.hog_cores * step * TICKS_PER_S
            hog, self._hog_ticks = int(self._hog_ticks), self._hog_ticks - int(self._hog_ticks)
            capacity = self._capacity0 + int(elapsed * self.proc.cpus * TICKS_PER_S)
            with _locked(self.proc.root):
                busy, idle = read_stat_ticks(self.proc.root)
                busy += hog
                write_stat(self.proc.root, busy, max(idle, capacity - busy), self.proc.cpus)


def read_stat_ticks(root: Path) -> tuple[int, int]:
    """(busy, idle) ticks of a written ``stat``'s ``cpu`` line (user + nice + system, idle)."""
    fields = (root / "stat").read_text().split("\n", 1)[0].split()
    return int(fields[1]) + int(fields[2]) + int(fields[3]), int(fields[4])


def write_stat(root: Path, busy: int, idle: int, cpus: int) -> None:
    """Write ``stat`` for ``busy`` and ``idle`` ticks over ``cpus`` CPUs (FakeProcfs's layout)."""

    def line(name: str, b: int, i: int) -> str:
        return f"{name} {b - b // 4} 0 {b // 4} {i} 0 0 0 0 0 0\n"

    n = cpus
    lines = [line("cpu ", busy, idle), line("cpu0", busy - busy // n * (n - 1), idle - idle // n * (n - 1))]
    lines += [line(f"cpu{i}", busy // n, idle // n) for i in range(1, n)]
    _replace(root / "stat", "".join(lines) + "intr 0\nctxt 0\nbtime 0\n")


class _locked:
    """``flock`` on ``<root>/.lock`` (across processes) while the block runs."""

    def __init__(self, root: Path) -> None:
        self._path = root / ".lock"

    def __enter__(self) -> None:
        self._fd = os.open(self._path, os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def __exit__(self, *exc_info: object) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)


def spend_ticks(root: Path | str, pid: int, tid: int, cpu_s: float) -> None:
    """Thread ``tid`` of process ``pid`` used ``cpu_s`` more: ``<pid>/task/<tid>/stat``, ``<pid>/stat`` and the
    host's busy ticks in ``stat`` move together (any process may call it on a :class:`TickingProcfs` root)."""
    root = Path(root)
    ticks = round(cpu_s * TICKS_PER_S)
    with _locked(root):
        for path, ident in ((root / str(pid) / "task" / str(tid) / "stat", tid), (root / str(pid) / "stat", pid)):
            path.parent.mkdir(parents=True, exist_ok=True)
            before = int(path.read_text().rsplit(")", 1)[1].split()[11]) if path.exists() else 0
            _replace(path, task_stat_line(ident, before + ticks))
        busy, idle = read_stat_ticks(root)
        cpus = (root / "stat").read_text().count("\ncpu")
        write_stat(root, busy + ticks, idle, cpus)
