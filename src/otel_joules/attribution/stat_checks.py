"""``/proc/stat``'s reads judged: a read that fails or counts implausibly is a fault, said once each.

Tick counts that go backwards, or more busy or idle time than the CPUs online can count in the time
between two reads, are implausible (:data:`~.sampling.STAT_TICKS_TOLERANCE`,
:data:`~.sampling.STAT_SLACK_TICKS_PER_CPU`). :class:`~.history.PriceHistory` asks :class:`StatChecks`
about every sample's read; while :attr:`StatChecks.fault` is set, spans that end get no share.
"""

from __future__ import annotations

import logging
import os

from otel_joules.attribution.procfs import CLOCK_TICKS_PER_S, HostCpuTimes
from otel_joules.attribution.sampling import STAT_SLACK_TICKS_PER_CPU, STAT_TICKS_TOLERANCE, HistorySample
from otel_joules.semconv import ENERGY_ATTRIBUTED_NAMESPACE, ENERGY_JOULES

_log = logging.getLogger("otel_joules")


class StatChecks:
    """The judgement of one history's ``/proc/stat`` reads, and its two messages (each said once).

    Args:
        procfs_root: Where procfs is mounted (named in the message).

    Attributes:
        fault: True while the latest read failed or was implausible.
    """

    __slots__ = ("procfs_root", "fault", "_read_ns", "_cpus", "_unreadable_said", "_implausible_said")

    def __init__(self, procfs_root: str) -> None:
        self.procfs_root = procfs_root
        self.fault = False
        #: When the latest read that became a sample started, and how many CPUs it listed.
        self._read_ns = 0
        self._cpus = 0
        self._unreadable_said = False
        self._implausible_said = False

    def unreadable(self, exc: BaseException) -> None:
        """A read failed: a fault, said once."""
        self.fault = True
        if not self._unreadable_said:
            self._unreadable_said = True
            _log.warning(
                "otel-joules: cannot attribute energy to this process and its spans (%s): spans that end while "
                "/proc/stat cannot be read keep %s but carry no %s*; shares resume, the gap priced, once it reads "
                "again. Set OTEL_JOULES_PROCFS_ROOT to where procfs is mounted.",
                exc,
                ENERGY_JOULES,
                ENERGY_ATTRIBUTED_NAMESPACE,
            )

    def problem(self, previous: HistorySample | None, host: HostCpuTimes, read_end_ns: int) -> str | None:
        """What is wrong with a read (ended at ``read_end_ns``) against the previous sample's, or None when it is
        plausible (or there is none to compare with)."""
        if previous is None:
            return None
        return stat_problem(previous, host, read_end_ns, self._read_ns, self._cpus)

    def settle(self, read_ns: int, cpus: int, problem: str | None) -> None:
        """The read that started at ``read_ns`` became a sample: the base of the next check; a problem is a fault."""
        self._read_ns, self._cpus = read_ns, cpus
        self.fault = problem is not None
        if problem is not None and not self._implausible_said:
            self._implausible_said = True
            _log.warning(
                "otel-joules: %s is implausible: %s. Not used: the sampler period ending there prices no CPU time "
                "(its energy is nobody's) and counting goes on from the new counts; spans that end while /proc/stat "
                "reads implausibly keep %s but carry no %s* (said once).",
                os.path.join(self.procfs_root, "stat"),
                problem,
                ENERGY_JOULES,
                ENERGY_ATTRIBUTED_NAMESPACE,
            )


def stat_problem(
    previous: HistorySample, host: HostCpuTimes, read_end_ns: int, previous_read_ns: int, previous_cpus: int
) -> str | None:
    """What is wrong with ``/proc/stat``'s counts against the previous sample's, or None when they are plausible.

    ``read_end_ns``: when this read ended; ``previous_read_ns`` and ``previous_cpus``: when the previous
    read started and how many CPUs it listed.
    """
    # The most time that can have passed between the two reads: from the start of the last to
    # the end of this one (a read delayed by the scheduler only widens it).
    elapsed_s = max(0, read_end_ns - previous_read_ns) / 1e9
    cpus = max(host.cpus, previous_cpus)  # a CPU taken offline meanwhile counted until then
    slack_s = cpus * STAT_SLACK_TICKS_PER_CPU / CLOCK_TICKS_PER_S
    d_busy_s, d_idle_s = host.busy_s - previous.busy_s, host.idle_s - previous.idle_s
    if d_busy_s < -slack_s or d_idle_s < -slack_s:
        return (
            f"its CPU times went backwards (busy {previous.busy_s:.2f} s -> {host.busy_s:.2f} s, "
            f"idle {previous.idle_s:.2f} s -> {host.idle_s:.2f} s)"
        )
    limit_s = cpus * elapsed_s * STAT_TICKS_TOLERANCE + slack_s
    if cpus and (d_busy_s > limit_s or d_idle_s > limit_s):
        return (
            f"it counts {d_busy_s:.2f} busy and {d_idle_s:.2f} idle CPU seconds in {elapsed_s:.3f} s, where its "
            f"{cpus} CPUs can count at most {limit_s:.2f} s of each"
        )
    return None
