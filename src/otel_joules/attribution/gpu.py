"""This process's fraction of each measured GPU, from NVML's view of who runs on it.

Per GPU, at every sample of the attribution sampler (never on the span path):

* NVML lists no running process: the GPU is idle, its energy is nobody's (fraction 0);
* it lists only processes of ours: the GPU is ours (1);
* it lists others too: ``nvmlDeviceGetProcessUtilization`` splits it by SM utilisation
  over the last sample period (ours / everyone's); where the driver does not give per-process
  utilisation, or every process shows 0 %, the GPU is split equally among the processes on it;
* NVML cannot list processes at all (an old driver, no permission): ours (1), because this
  process measures only the GPUs it was given (``CUDA_VISIBLE_DEVICES``).

NVML reports host PIDs: in a container with its own PID namespace our PIDs are not in its
lists, so the GPU counts as another's (fraction 0) there; run such containers with the
host's PID namespace or accept GPU shares of 0 on spans.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Collection, Sequence

_log = logging.getLogger("otel_joules")

#: NVML_ERROR_NOT_FOUND: no utilisation sample newer than the time stamp given.
_NVML_ERROR_NOT_FOUND = 6


def fraction_of(ours: Collection[int], running: Sequence[int], sm_util_by_pid: dict[int, int] | None) -> float:
    """Our fraction of one GPU from its running processes and their SM utilisation (module docstring).

    Args:
        ours: The PIDs counted as ours.
        running: PIDs NVML lists as running on the GPU (compute and graphics, duplicates allowed).
        sm_util_by_pid: SM utilisation per PID over the last period, or None where unavailable.
    """
    pids = set(running)
    if not pids:
        return 0.0
    mine = pids & set(ours)
    if not mine:
        return 0.0
    if mine == pids:
        return 1.0
    if sm_util_by_pid:
        total = sum(sm_util_by_pid.get(pid, 0) for pid in pids)
        if total > 0:
            return sum(sm_util_by_pid.get(pid, 0) for pid in mine) / total
    return len(mine) / len(pids)


class NvmlProcessShares:
    """Reads, per GPU (by UUID), which processes run on it and how busy each keeps it.

    Args:
        uuids: The measured GPUs' UUIDs (``hw.id`` of their domains).
        our_pids: Returns the PIDs counted as this job's (default: this process).
    """

    def __init__(self, uuids: Sequence[str], our_pids: Callable[[], Collection[int]] | None = None) -> None:
        self.uuids = tuple(uuids)
        self._our_pids = our_pids or (lambda: (os.getpid(),))
        self._last_seen_us: dict[str, int] = {}
        self._last_utilisation: dict[str, dict[int, int]] = {}
        self._failure_reported = False

    def fractions(self) -> list[float]:
        """Our fraction of each GPU, in the order of :attr:`uuids` (1.0 where NVML cannot say)."""
        try:
            from otel_joules.sensors.nvml import default_session

            nvml = default_session().acquire()
        except Exception as exc:  # noqa: BLE001 - attribution must never break measurement
            self._report(exc)
            return [1.0] * len(self.uuids)
        ours = set(self._our_pids())
        return [self._fraction(nvml, uuid, ours) for uuid in self.uuids]

    def _fraction(self, nvml: Any, uuid: str, ours: set[int]) -> float:
        try:
            handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
            running = [p.pid for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)]
            running += [p.pid for p in _optional(getattr(nvml, "nvmlDeviceGetGraphicsRunningProcesses", None), handle)]
        except Exception as exc:  # noqa: BLE001
            self._report(exc)
            return 1.0
        pids = set(running)
        if not pids or not (pids & ours) or pids <= ours:
            return fraction_of(ours, running, None)
        return fraction_of(ours, running, self._utilisation(nvml, uuid, handle))

    def _utilisation(self, nvml: Any, uuid: str, handle: Any) -> dict[int, int] | None:
        function = getattr(nvml, "nvmlDeviceGetProcessUtilization", None)
        if function is None:
            return None
        try:
            samples = function(handle, self._last_seen_us.get(uuid, 0))
        except Exception as exc:  # noqa: BLE001 - NOT_SUPPORTED, or no sample since the last call
            # NOT_FOUND: nothing newer than the last call; the last split still holds.
            return self._last_utilisation.get(uuid) if _error_value(exc) == _NVML_ERROR_NOT_FOUND else None
        by_pid: dict[int, int] = {}
        newest = self._last_seen_us.get(uuid, 0)
        for sample in samples:
            by_pid[sample.pid] = by_pid.get(sample.pid, 0) + int(sample.smUtil)
            newest = max(newest, int(sample.timeStamp))
        self._last_seen_us[uuid] = newest
        self._last_utilisation[uuid] = by_pid
        return by_pid

    def _report(self, exc: BaseException) -> None:
        if not self._failure_reported:
            self._failure_reported = True
            _log.info(
                "otel-joules: NVML cannot say which processes use the GPUs (%s); each measured GPU counts as "
                "this process's",
                exc,
            )


def _error_value(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def _optional(function: Callable[..., Any] | None, *args: Any) -> list[Any]:
    if function is None:
        return []
    try:
        return list(function(*args))
    except Exception:  # noqa: BLE001 - graphics processes are optional information
        return []
