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
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Collection, Sequence

from otel_joules.attribution.procfs import process_tree
from otel_joules.attribution.sampling import HISTORY_PERIOD_S
from otel_joules.attribution.shares import ATTRIBUTION_KIND
from otel_joules.meter.energy import energy_between
from otel_joules.semconv import KIND_GPU, VENDOR_AMD

if TYPE_CHECKING:
    from otel_joules.meter.meter import EnergyMeter, EnergySnapshot
    from otel_joules.sensors.base import Domain

_log = logging.getLogger("otel_joules")

#: NVML_ERROR_NOT_FOUND: no utilisation sample newer than the time stamp given.
_NVML_ERROR_NOT_FOUND = 6

#: Why a GPU's fraction is what it is (:meth:`NvmlProcessShares.observations`).
IDLE = "idle"
OTHERS = "others"
OURS = "ours"
SHARED = "shared"
UNLISTED = "unlisted"


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


def plain_share(pids: set[int], ours: Collection[int]) -> tuple[float, str] | None:
    """Our fraction of a GPU and why where no split is needed: nobody on it (:data:`IDLE`), only others
    (:data:`OTHERS`), only ours (:data:`OURS`); None where ours and others' share it."""
    if not pids:
        return 0.0, IDLE
    if not (pids & set(ours)):
        return 0.0, OTHERS
    if pids <= set(ours):
        return 1.0, OURS
    return None


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
        return [fraction for fraction, _ in self.observations()]

    def observations(self) -> list[tuple[float, str]]:
        """Our fraction of each GPU and why, in the order of :attr:`uuids`.

        The why is one of :data:`IDLE` (no process on it), :data:`OTHERS` (only others'),
        :data:`OURS` (only ours), :data:`SHARED` (ours and others') or :data:`UNLISTED`
        (NVML cannot list its processes: counted as ours).
        """
        try:
            from otel_joules.sensors.nvml import default_session

            nvml = default_session().acquire()
        except Exception as exc:  # noqa: BLE001 - attribution must never break measurement
            self._report(exc)
            return [(1.0, UNLISTED)] * len(self.uuids)
        ours = set(self._our_pids())
        return [self._observe(nvml, uuid, ours) for uuid in self.uuids]

    def _observe(self, nvml: Any, uuid: str, ours: set[int]) -> tuple[float, str]:
        try:
            handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
            running = [p.pid for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)]
            running += [p.pid for p in _optional(getattr(nvml, "nvmlDeviceGetGraphicsRunningProcesses", None), handle)]
        except Exception as exc:  # noqa: BLE001
            self._report(exc)
            return 1.0, UNLISTED
        plain = plain_share(set(running), ours)
        if plain is not None:
            return plain
        return fraction_of(ours, running, self._utilisation(nvml, uuid, handle)), SHARED

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


class AmdSmiProcessShares:
    """Reads, per AMD GPU (by UUID), which processes amdsmi lists on it and how much graphics-engine time each used.

    The same rules as :class:`NvmlProcessShares`: no process listed: idle (0); only ours: 1; others only: 0;
    ours and others': split by each process's graphics-engine time since the last sample (amdsmi's
    ``engine_usage.gfx``, ns), or equally where none moved; amdsmi cannot list processes: ours (1).
    amdsmi, like NVML, lists host PIDs.

    Args:
        uuids: The measured AMD GPUs' UUIDs (``hw.id`` of their domains).
        our_pids: Returns the PIDs counted as this job's (default: this process).
    """

    def __init__(self, uuids: Sequence[str], our_pids: Callable[[], Collection[int]] | None = None) -> None:
        self.uuids = tuple(uuids)
        self._our_pids = our_pids or (lambda: (os.getpid(),))
        self._last_gfx_ns: dict[str, dict[int, int]] = {}
        self._failure_reported = False

    def fractions(self) -> list[float]:
        """Our fraction of each GPU, in the order of :attr:`uuids` (1.0 where amdsmi cannot say)."""
        return [fraction for fraction, _ in self.observations()]

    def observations(self) -> list[tuple[float, str]]:
        """Our fraction of each GPU and why (:meth:`NvmlProcessShares.observations`' words)."""
        try:
            from otel_joules.sensors.amdsmi import default_session

            session = default_session()
            amdsmi = session.acquire()
        except Exception as exc:  # noqa: BLE001 - attribution must never break measurement
            self._report(exc)
            return [(1.0, UNLISTED)] * len(self.uuids)
        ours = set(self._our_pids())
        return [self._observe(amdsmi, session, uuid, ours) for uuid in self.uuids]

    def _observe(self, amdsmi: Any, session: Any, uuid: str, ours: set[int]) -> tuple[float, str]:
        try:
            handle = session.handle_by_uuid(uuid)
            if handle is None:
                raise LookupError(f"amdsmi no longer lists the GPU {uuid}")
            processes = list(amdsmi.amdsmi_get_gpu_process_list(handle))
        except Exception as exc:  # noqa: BLE001
            self._report(exc)
            return 1.0, UNLISTED
        gfx_ns = {int(p["pid"]): _gfx_ns(p) for p in processes}
        before = self._last_gfx_ns.get(uuid, {})
        self._last_gfx_ns[uuid] = gfx_ns
        plain = plain_share(set(gfx_ns), ours)
        if plain is not None:
            return plain
        used = {pid: max(ns - before.get(pid, ns), 0) for pid, ns in gfx_ns.items()}
        return fraction_of(ours, list(gfx_ns), used), SHARED

    def _report(self, exc: BaseException) -> None:
        if not self._failure_reported:
            self._failure_reported = True
            _log.info(
                "otel-joules: amdsmi cannot say which processes use the AMD GPUs (%s); each measured AMD GPU counts as "
                "this process's",
                exc,
            )


def _gfx_ns(process: Any) -> int:
    usage = process.get("engine_usage") if isinstance(process, dict) else None
    value = usage.get("gfx") if isinstance(usage, dict) else None
    return value if isinstance(value, int) else 0


class GpuProcessShares:
    """This process's fraction of each measured GPU, each asked of its vendor's library.

    AMD GPUs (``hw.vendor`` AMD) go to :class:`AmdSmiProcessShares`, the others to :class:`NvmlProcessShares`
    (where NVML does not know a GPU, an Intel one, it counts as ours, as before).

    Args:
        gpus: ``(hw.id, hw.vendor)`` of the measured GPU domains, in the meter's order.
        our_pids: Returns the PIDs counted as this job's (default: this process).
    """

    def __init__(self, gpus: Sequence[tuple[str, str]], our_pids: Callable[[], Collection[int]] | None = None) -> None:
        self.uuids = tuple(uuid for uuid, _ in gpus)
        self._is_amd = [vendor == VENDOR_AMD for _, vendor in gpus]
        amd = [uuid for uuid, vendor in gpus if vendor == VENDOR_AMD]
        other = [uuid for uuid, vendor in gpus if vendor != VENDOR_AMD]
        self._amd = AmdSmiProcessShares(amd, our_pids) if amd else None
        self._nvml = NvmlProcessShares(other, our_pids) if other else None

    def fractions(self) -> list[float]:
        """Our fraction of each GPU, in the order of :attr:`uuids`."""
        return [fraction for fraction, _ in self.observations()]

    def observations(self) -> list[tuple[float, str]]:
        """Our fraction of each GPU and why, in the order of :attr:`uuids`."""
        amd = iter(self._amd.observations() if self._amd is not None else [])
        other = iter(self._nvml.observations() if self._nvml is not None else [])
        return [next(amd) if is_amd else next(other) for is_amd in self._is_amd]


def gpu_process_shares(domains: Sequence["Domain"], our_pids: Callable[[], Collection[int]] | None = None) -> GpuProcessShares:
    """:class:`GpuProcessShares` over the given GPU domains."""
    return GpuProcessShares([(d.hw_id, d.vendor) for d in domains], our_pids)


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


@dataclass(frozen=True)
class GpuCharge:
    """One GPU's energy during a command (``otel-joules run``) and the part charged to the command.

    Attributes:
        domain_id: The GPU's domain (``nvidia_gpu_0``).
        measured_joules: Its whole energy during the command.
        charged_joules: The command's part: each period's energy times the command's fraction
            of the GPU at that period's end (:func:`fraction_of`, as for spans).
        reason: Why, in words, for the run's summary.
        dynamic_joules: The charged part above the GPU's idle baseline (its dynamic energy).
    """

    domain_id: str
    measured_joules: float
    charged_joules: float
    reason: str
    dynamic_joules: float = 0.0


class CommandGpuShares:
    """The GPU energy a command's own processes used, sampled while it runs.

    ``otel-joules run`` counts a GPU as the command's only for the command's processes on it:
    every :data:`~otel_joules.attribution.sampling.HISTORY_PERIOD_S` a thread reads NVML's
    process lists (:class:`NvmlProcessShares`) against the command's process tree (the child
    and its living descendants, :func:`~otel_joules.attribution.procfs.process_tree` on
    ``/proc``, where the child's pid is) and charges the period's GPU energy by the fraction
    found, as the attribution sampler does for spans. The period after the last read (the
    command has ended, its processes are gone from the lists) is charged at the last fraction.

    Args:
        meter: The run's meter; its GPU domains that add to the total are followed.
        start: The run's first snapshot: the charged periods start there.
        shares: The GPU libraries' view (default: :class:`GpuProcessShares` over the command's tree).
        period_s: How often NVML's lists are read.
        static_watts: Each domain's idle baseline by the meter's domain index, asked every period
            (:class:`~otel_joules.attribution.command.CommandBaselines`); None or a None entry: the
            whole energy counts as static (no dynamic part is claimed without a baseline).
    """

    def __init__(
        self,
        meter: "EnergyMeter",
        start: "EnergySnapshot",
        shares: "GpuProcessShares | NvmlProcessShares | None" = None,
        period_s: float | None = None,
        static_watts: "Callable[[], Sequence[float | None]] | None" = None,
    ) -> None:
        self._meter = meter
        self._static_watts = static_watts
        self._dynamic_j = [0.0] * sum(1 for d in meter.domains if d.in_total and ATTRIBUTION_KIND[d.kind] == KIND_GPU)
        self._start = self._previous = start
        self._indices = [i for i, d in enumerate(meter.domains) if d.in_total and ATTRIBUTION_KIND[d.kind] == KIND_GPU]
        self._pid: int | None = None
        if shares is None and self._indices:
            shares = gpu_process_shares([meter.domains[i] for i in self._indices], our_pids=self._tree)
        self._shares = shares
        self._period_s = HISTORY_PERIOD_S if period_s is None else period_s
        self._charged_j = [0.0] * len(self._indices)
        self._joules_by_why: list[dict[str, float]] = [{} for _ in self._indices]
        self._last: list[tuple[float, str] | None] = [None] * len(self._indices)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, pid: int) -> None:
        """Follow the command whose child process is ``pid`` (a thread samples until :meth:`finish`)."""
        self._pid = pid
        if self._indices and self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="otel-joules-run-gpu", daemon=True)
            self._thread.start()

    def finish(self, end: "EnergySnapshot") -> list[GpuCharge]:
        """Stop sampling; charge the periods up to ``end`` and say, per GPU, what was charged and why."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)  # a stalled NVML read is left behind, its result dropped
        with self._lock:
            self._account(end, [last if last is not None else (0.0, _UNSEEN) for last in self._last])
            charges = []
            spent = energy_between(self._meter.plan, self._start, end).joules
            for k, i in enumerate(self._indices):
                measured = max(spent[i] or 0.0, 0.0)
                charged = min(max(self._charged_j[k], 0.0), measured)
                dynamic = min(max(self._dynamic_j[k], 0.0), charged)
                charges.append(
                    GpuCharge(self._meter.domains[i].id, measured, charged, _why(self._joules_by_why[k], charged), dynamic)
                )
            return charges

    def _tree(self) -> set[int]:
        return process_tree(self._pid) if self._pid is not None else set()

    def _loop(self) -> None:
        while not self._stop.wait(self._period_s):
            try:
                snapshot = self._meter.snapshot()
                observed = self._shares.observations() if self._shares is not None else []
            except Exception:  # noqa: BLE001 - the meter closed under us: finish() charges the rest
                return
            with self._lock:
                if self._stop.is_set():
                    return  # finish() has charged up to the end: this late read would count twice
                self._account(snapshot, observed)
                self._last = list(observed)

    def _account(self, snapshot: "EnergySnapshot", observed: Sequence[tuple[float, str]]) -> None:
        """Charge the period from the previous snapshot to ``snapshot`` by ``observed`` (lock held)."""
        watts = self._static_watts() if self._static_watts is not None else None
        period = energy_between(self._meter.plan, self._previous, snapshot)
        for k, (i, (fraction, why)) in enumerate(zip(self._indices, observed)):
            spent = period.joules[i]
            if spent is None:
                continue
            self._charged_j[k] += spent * fraction
            static_w = None if watts is None else watts[i]
            if static_w is not None:
                self._dynamic_j[k] += max(0.0, spent - min(static_w * period.duration_s, max(spent, 0.0))) * fraction
            self._joules_by_why[k][why] = self._joules_by_why[k].get(why, 0.0) + max(spent, 0.0)
        self._previous = snapshot


#: The command ended before NVML's lists were read once: nothing shows its processes on the GPU.
_UNSEEN = "unseen"

_WHY_WORDS = {
    OURS: "used by the command's processes alone",
    SHARED: "shared with other processes, as spans share a GPU",
    UNLISTED: "NVML could not list its processes, so it counts as the command's",
    OTHERS: "used only by other processes",
    IDLE: "idle",
    _UNSEEN: "the command ended before NVML's process lists were read",
}


def _why(joules_by_why: dict[str, float], charged_joules: float) -> str:
    """The summary's words for one GPU, from its periods' energy by why (with each part's share when mixed)."""
    seen = [why for why in _WHY_WORDS if why in joules_by_why]
    if charged_joules <= 0 and not ({OURS, SHARED, UNLISTED} & set(seen)):
        rest = [_WHY_WORDS[w] for w in seen if w in (OTHERS, _UNSEEN)]
        return "; ".join(["no process of the command used it", *rest])
    total = sum(joules_by_why.values())
    if len(seen) == 1 or total <= 0:
        return "; ".join(_WHY_WORDS[w] for w in seen)
    return "; ".join(f"{_WHY_WORDS[w]} for {joules_by_why[w] / total:.0%} of its energy" for w in seen)
