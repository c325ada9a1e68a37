"""CPU times the attribution model needs: the host's busy time, this process's, one thread's.

Read from procfs under a configurable root (``OTEL_JOULES_PROCFS_ROOT`` / ``procfs_root=``),
so tests can write every file themselves and assert shares exactly:

``<root>/stat``                       first line ``cpu  user nice system idle iowait irq softirq steal guest guest_nice``,
                                      then one ``cpuN`` line per CPU online
``<root>/<pid>/stat``                 ``utime`` and ``stime`` (fields 14 and 15) of a process
``<root>/<pid>/task/<tid>/stat``      the same for one thread (``tid`` = ``threading.get_native_id()``)

All in clock ticks (``SC_CLK_TCK``, 100 per second on Linux). On the real ``/proc`` the
process and thread times come from the kernel's CPU clocks instead
(``CLOCK_PROCESS_CPUTIME_ID``, ``pthread_getcpuclockid``): nanosecond resolution and no
file to parse, which is what lets spans read their thread's CPU time at every start and end.
The host's busy time is only in ``<root>/stat``: the sampler reads it, spans never do.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from functools import partial
from typing import Callable

from otel_joules.config import DEFAULT_PROCFS_ROOT

#: Clock ticks per second of the times in procfs.
CLOCK_TICKS_PER_S = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0


class ProcfsReadError(OSError):
    """A procfs file is missing or not in the format the kernel writes."""


@dataclass(frozen=True, slots=True)
class HostCpuTimes:
    """The host's CPU seconds since boot, summed over its CPUs.

    Attributes:
        busy_s: Seconds not idle: user + nice + system + irq + softirq + steal (guest time is
            already inside user and nice, so it is not added again).
        idle_s: Seconds idle or waiting for I/O (idle + iowait): nobody's work.
        cpus: CPUs online (the file's ``cpuN`` lines): how much CPU time can pass per second;
            0 when the file lists none.
    """

    busy_s: float
    idle_s: float
    cpus: int = 0


def read_host_cpu_times(procfs_root: str = DEFAULT_PROCFS_ROOT) -> HostCpuTimes:
    """Parse the aggregate ``cpu`` line of ``<procfs_root>/stat`` and count its per-CPU lines.

    Raises:
        ProcfsReadError: the file is missing or its first line is not the ``cpu`` line.
    """
    path = os.path.join(procfs_root, "stat")
    try:
        with open(path, "rb") as f:
            # Whole: the kernel writes the file in one go when it is opened, and the per-CPU lines
            # after the first say how many CPUs' time it counts.
            data = f.read()
    except OSError as exc:
        raise ProcfsReadError(f"cannot read {path}: {exc.strerror or exc}") from None
    line = data.split(b"\n", 1)[0]
    fields = line.split()
    if len(fields) < 5 or fields[0] != b"cpu":
        raise ProcfsReadError(f"{path} does not start with the aggregate 'cpu' line")
    try:
        ticks = [int(v) for v in fields[1:]] + [0] * 10
    except ValueError:
        raise ProcfsReadError(f"{path}: the 'cpu' line holds something other than tick counts") from None
    user, nice, system, idle, iowait, irq, softirq, steal = ticks[:8]
    return HostCpuTimes(
        busy_s=(user + nice + system + irq + softirq + steal) / CLOCK_TICKS_PER_S,
        idle_s=(idle + iowait) / CLOCK_TICKS_PER_S,
        cpus=data.count(b"\ncpu"),
    )


def read_task_cpu_seconds(path: str) -> float:
    """``utime + stime`` of a ``<pid>/stat`` or ``<pid>/task/<tid>/stat`` file, in seconds.

    Raises:
        ProcfsReadError: the file is missing (the task exited) or malformed.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ProcfsReadError(f"cannot read {path}: {exc.strerror or exc}") from None
    # The command name (field 2) is in parentheses and may itself hold spaces or ')'.
    after = data[data.rfind(b")") + 1 :].split()
    try:
        return (int(after[11]) + int(after[12])) / CLOCK_TICKS_PER_S
    except (IndexError, ValueError):
        raise ProcfsReadError(f"{path} is not a procfs stat file") from None


class CpuClocks:
    """Where the attribution model reads CPU time: procfs under ``procfs_root``, or the kernel's clocks.

    Args:
        procfs_root: The procfs mount. For the default ``/proc`` the process and thread CPU
            times come from the kernel's CPU clocks (exact, cheap); any other root is read as
            files, so a test's written procfs decides every number.
        pid: Read this process's times from procfs (default: the calling process, with the
            kernel's clocks on the real ``/proc``).
    """

    def __init__(self, procfs_root: str = DEFAULT_PROCFS_ROOT, pid: int | None = None) -> None:
        self.procfs_root = procfs_root
        self.pid = pid
        self.native = os.path.normpath(procfs_root) == DEFAULT_PROCFS_ROOT and pid is None

    def host(self) -> HostCpuTimes:
        """The host's busy and idle CPU seconds (reads ``<root>/stat``: sampler only, not per span)."""
        return read_host_cpu_times(self.procfs_root)

    def process_cpu_s(self) -> float:
        """CPU seconds this process has used (all its threads)."""
        if self.native:
            return time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID)
        return read_task_cpu_seconds(os.path.join(self.procfs_root, str(self.pid or os.getpid()), "stat"))

    def thread_clock(self) -> Callable[[], float]:
        """A function returning the calling thread's CPU seconds, callable later from any thread.

        Spans may end on another thread than the one they started on, so the clock is bound
        to this thread now (``pthread_getcpuclockid``) rather than read as "the current thread".
        """
        if self.native:
            return partial(time.clock_gettime, time.pthread_getcpuclockid(threading.get_ident()))
        path = os.path.join(self.procfs_root, str(self.pid or os.getpid()), "task", str(threading.get_native_id()), "stat")
        return partial(read_task_cpu_seconds, path)


def process_tree(pid: int, procfs_root: str = DEFAULT_PROCFS_ROOT) -> set[int]:
    """``pid`` and its living descendants, from the ``children`` files of every thread in the tree.

    ``<root>/<pid>/task/<tid>/children`` (the kernel's list of a thread's children) lets the
    tree be walked from ``pid`` without reading every process's ``stat``; where the kernel
    has no such files, each ``<root>/<pid>/stat``'s parent (field 4) is read instead. A
    descendant whose parent exited is re-parented away from the tree and is no longer in it.
    """
    tree = {pid}
    pending = [pid]
    walked = False
    while pending:
        current = pending.pop()
        task_dir = os.path.join(procfs_root, str(current), "task")
        try:
            tids = os.listdir(task_dir)
        except OSError:
            continue  # it exited
        for tid in tids:
            try:
                with open(os.path.join(task_dir, tid, "children"), "rb") as f:
                    children = [int(v) for v in f.read().split()]
            except (OSError, ValueError):
                continue
            walked = True
            for child in children:
                if child not in tree:
                    tree.add(child)
                    pending.append(child)
    if walked:
        return tree
    return _process_tree_from_parents(pid, procfs_root)


def _process_tree_from_parents(pid: int, procfs_root: str) -> set[int]:
    """:func:`process_tree` by every process's parent, for kernels without ``children`` files."""
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir(procfs_root)
    except OSError:
        return {pid}
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(procfs_root, name, "stat"), "rb") as f:
                data = f.read()
            parent = int(data[data.rfind(b")") + 1 :].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(name))
    tree = {pid}
    pending = [pid]
    while pending:
        for child in children.get(pending.pop(), ()):
            if child not in tree:
                tree.add(child)
                pending.append(child)
    return tree
