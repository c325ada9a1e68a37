"""AMD GPUs through amdsmi (the ``amdsmi`` package of ROCm, a ctypes binding of ``libamd_smi.so``).

Units: ``amdsmi_get_energy_count`` returns an accumulator and its resolution: accumulator x resolution is
**microjoules** since the driver loaded; ``amdsmi_get_power_info`` reports **watts**. Both are turned into the
channel contract's microjoules here and nowhere else.

Per GPU, in order of preference (as for NVIDIA, :mod:`otel_joules.sensors.nvml`):

* :class:`AmdSmiEnergyChannel` (:attr:`Method.COUNTER`): the energy accumulator. It is a 64-bit count of
  resolution steps; :attr:`~AmdSmiEnergyChannel.wrap_uj` tells the meter where it wraps, and the meter
  corrects a wrap as for any counter.
* :class:`AmdSmiPowerChannel` (:attr:`Method.POWER_INTEGRATION`) for GPUs whose accumulator answers NOT_SUPPORTED
  (virtual machine guests, older parts): the power reading (``current_socket_power`` on MI300 and newer,
  ``average_socket_power`` on older parts, else ``socket_power``) integrated by
  :class:`~otel_joules.sensors.integration.PowerIntegral`.
* Neither: the GPU is reported unavailable.

Which GPUs, as a HIP program sees them (amdsmi lists GPUs by PCI address, the order ROCm numbers them):

1. an explicit ``gpus=`` selection: amdsmi indices, or UUIDs (full or a prefix, with or without ``GPU-``);
2. ``devices_by_pid``: the GPUs amdsmi lists a process of this process tree on;
3. ``ROCR_VISIBLE_DEVICES`` (indices or UUIDs) leaves a subset, then ``HIP_VISIBLE_DEVICES`` (or, where it is
   unset, ``CUDA_VISIBLE_DEVICES``, which HIP also reads) picks from that subset by position or UUID. Unset
   means every GPU, an empty value none, and the first invalid entry ends its list.

Partitions: where amdsmi reports a GPU's compute partition (SPX, DPX, TPX, QPX, CPX) or memory partition
(NPS1..NPS8) they are named in the domain (``hw.name`` and what it covers); the energy reading is amdsmi's
for the device it lists.

Lifecycle: one :class:`~otel_joules.sensors.amdsmi_session.AmdSmiSession` per process imports ``amdsmi`` on
first use, initialises it, shuts it down at exit and again after ``fork()``
(:mod:`otel_joules.sensors.amdsmi_session`).

Nothing here raises when there is no AMD GPU, library or package: :func:`discover` returns a
:class:`Discovery` whose ``unavailable`` entries say which and why. Where the ``amdsmi`` package or its library
is missing, that is said only when sysfs shows an AMD GPU (PCI vendor 0x1002 under ``/sys/class/drm``), so a
machine without one hears nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Collection, Mapping, Sequence

from otel_joules.config import CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES, Settings
from otel_joules.errors import ConfigurationError, DeviceLostError, SensorReadError
from otel_joules.sensors.amdsmi_session import (
    STATUS_NOT_SUPPORTED,
    AmdSmiSession,
    AmdSmiUnavailableError,
    default_session,
    describe_error,
    error_code,
)
from otel_joules.sensors.base import Channel, Discovery, Domain, Method, Unavailable
from otel_joules.sensors.deadline import Stall, TimedDiscovery
from otel_joules.sensors.deadline import discover_within as _discover_within
from otel_joules.sensors.gpu_selection import (
    SOURCE_ALL,
    SOURCE_EXPLICIT,
    GpuSelection,
    SelectionNote,
    process_tree_pids,
    read_visible_list,
    select_by_pids,
    split_requested,
)
from otel_joules.sensors.integration import POWER_SAMPLE_PERIOD_S, PowerIntegral
from otel_joules.semconv import KIND_GPU, VENDOR_AMD

_log = logging.getLogger("otel_joules")

#: The ``Unavailable`` subject for amdsmi as a whole, and the prefix of every AMD GPU's domain id.
WHAT = "amd_gpu"
#: Longest a meter waits for AMD GPU discovery (import, init, listing, probes, first reads), in seconds.
DISCOVERY_DEADLINE_S = 5.0
#: The accumulator's refresh period assumed for the below-resolution flag (amdsmi documents none; the
#: driver's firmware accumulates about every millisecond).
ENERGY_COUNTER_UPDATE_PERIOD_S = 0.001
#: How often a reader thread reads an AMD GPU again while spans keep asking (each read is a driver call).
DEVICE_REREAD_S = 0.05
#: The accumulator's width: it wraps after 2**64 resolution steps.
ACCUMULATOR_BITS = 64
#: The power fields of ``amdsmi_get_power_info``, in order of preference (all watts).
POWER_FIELDS = ("current_socket_power", "average_socket_power", "socket_power")
#: Why devices_by_pid may miss AMD GPUs, and what to do.
AMDSMI_PIDS_REMEDY = (
    "amdsmi reports host PIDs: in a container without --pid=host they never match; a process is listed only once "
    "it has opened the GPU. Select GPUs explicitly in either case"
)
#: PCI vendor id of AMD (ATI), as sysfs writes it.
AMD_PCI_VENDOR = "0x1002"

_said: set[str] = set()
_said_lock = threading.Lock()


def _say_once(message: str) -> None:
    """Warn once per process: every meter rediscovers the GPUs, and a missing package is news only once."""
    with _said_lock:
        if message in _said:
            return
        _said.add(message)
    _log.warning("otel-joules: %s", message)


def amd_gpus_in_sysfs(sysfs_root: str) -> int:
    """How many AMD GPUs sysfs shows (``class/drm/card<N>/device/vendor`` = 0x1002), without amdsmi."""
    count = 0
    for card in sorted(Path(sysfs_root, "class", "drm").glob("card*")):
        if not re.fullmatch(r"card\d+", card.name):
            continue  # connectors (card0-DP-1) belong to a card already counted
        with contextlib.suppress(OSError):
            if (card / "device" / "vendor").read_text().strip().lower() == AMD_PCI_VENDOR:
                count += 1
    return count


@dataclass(frozen=True)
class AmdGpu:
    """What amdsmi says about one AMD GPU.

    Attributes:
        index: amdsmi's index (its listing order, by PCI address); domain ids use it.
        uuid: amdsmi's UUID of the device.
        name: Market name.
        bdf: PCI address, ``DDDD:BB:DD.F``.
        compute_partition: SPX/DPX/TPX/QPX/CPX where amdsmi reports it, else empty.
        memory_partition: NPS1..NPS8 where amdsmi reports it, else empty.
    """

    index: int
    uuid: str
    name: str
    bdf: str
    compute_partition: str = ""
    memory_partition: str = ""

    @property
    def domain_id(self) -> str:
        """``amd_gpu_<amdsmi index>``."""
        return f"{WHAT}_{self.index}"

    @property
    def partitions(self) -> str:
        """``CPX, NPS4``: the partitions amdsmi reports, or empty."""
        return ", ".join(p for p in (self.compute_partition, self.memory_partition) if p)

    def describe(self) -> str:
        """``amd_gpu_0 (AMD Instinct MI300X, <uuid>)`` for messages."""
        return f"{self.domain_id} ({self.name}, {self.uuid})"


class AmdSmiChannel(Channel):
    """Common part of the amdsmi channels: the handle, found again by UUID when stale (after a fork)."""

    def __init__(self, domain: Domain, gpu: AmdGpu, session: AmdSmiSession, handle: Any = None) -> None:
        super().__init__(domain)
        self.gpu = gpu
        self._session = session
        self._handle = handle
        self._handle_generation = session.generation if handle is not None else -1

    @property
    def may_block(self) -> bool:
        """True: an amdsmi call goes to the driver and can stall, so the meter reads it off the span path."""
        return True

    @property
    def device_reread_s(self) -> float | None:
        """:data:`DEVICE_REREAD_S`: the accumulator moves every millisecond, but each read is a driver call."""
        return DEVICE_REREAD_S

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.domain.id}, {self.gpu.name!r}, {self.gpu.uuid})"

    def _device(self) -> tuple[ModuleType, Any]:
        try:
            amdsmi = self._session.acquire()
        except AmdSmiUnavailableError as exc:
            raise SensorReadError(f"{self.domain.id}: amdsmi is no longer usable: {exc}") from None
        if self._handle is None or self._handle_generation != self._session.generation:
            handle = self._session.handle_by_uuid(self.gpu.uuid)
            if handle is None:
                raise DeviceLostError(f"{self.gpu.describe()} is no longer listed by amdsmi; it is no longer measured")
            self._handle, self._handle_generation = handle, self._session.generation
        return amdsmi, self._handle

    def _call(self, what: str, function: Callable[..., Any], *args: Any) -> Any:
        try:
            return function(*args)
        except Exception as exc:  # noqa: BLE001 - every failure of the library becomes a read error
            raise SensorReadError(f"{self.domain.id}: reading {what} failed: {describe_error(exc)}") from None

    def reset_after_fork(self) -> None:
        """Forget the handle: the child finds it again by UUID before its first read."""
        self._handle = None
        self._handle_generation = -1

    def close(self) -> None:
        """Drop the handle; amdsmi stays initialised until exit (other channels may use it)."""
        self.reset_after_fork()


class AmdSmiEnergyChannel(AmdSmiChannel):
    """A GPU's energy accumulator x its resolution, as microjoules; wraps after 2**64 steps."""

    def __init__(self, domain: Domain, gpu: AmdGpu, session: AmdSmiSession, resolution_uj: float, handle: Any = None) -> None:
        super().__init__(domain, gpu, session, handle)
        self.resolution_uj = resolution_uj

    @property
    def wrap_uj(self) -> int | None:
        """The accumulator's range in microjoules: 2**64 steps of :attr:`resolution_uj`."""
        return int((1 << ACCUMULATOR_BITS) * self.resolution_uj)

    def read_uj(self) -> int:
        """The accumulator in microjoules."""
        amdsmi, handle = self._device()
        reading = self._call("the energy accumulator", amdsmi.amdsmi_get_energy_count, handle)
        return _energy_uj(reading, self.resolution_uj)


def _energy_uj(reading: Mapping[str, Any], resolution_uj: float) -> int:
    # amdsmi before 6.2.1 named the accumulator "power".
    counts = reading.get("energy_accumulator", reading.get("power"))
    if not isinstance(counts, int) or counts < 0:
        raise SensorReadError(f"amdsmi returned no energy accumulator: {dict(reading)!r}")
    return int(counts * resolution_uj)


class AmdSmiPowerChannel(AmdSmiChannel):
    """A GPU's power reading (W) integrated over time with the trapezoid rule, as microjoules.

    Accuracy depends on reads being frequent (:attr:`max_read_interval_s`), which the meter's sampler
    guarantees; amdsmi reports whole watts.
    """

    def __init__(
        self,
        domain: Domain,
        gpu: AmdGpu,
        session: AmdSmiSession,
        handle: Any = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(domain, gpu, session, handle)
        self._clock = clock
        self._integral = PowerIntegral()

    @property
    def max_read_interval_s(self) -> float | None:
        """The integration step: :data:`POWER_SAMPLE_PERIOD_S`."""
        return POWER_SAMPLE_PERIOD_S

    @property
    def device_reread_s(self) -> float | None:
        """The integration step: the reader must sample the power at least this often."""
        return POWER_SAMPLE_PERIOD_S

    @property
    def last_power_watts(self) -> float | None:
        """The latest power reading, or None before the first read."""
        return self._integral.last_power_watts

    def energy_uj_now(self) -> int | None:
        """The integral through now, the latest power held since its reading (None before the first read)."""
        return self._integral.energy_uj_at(self._clock())

    def read_uj(self) -> int:
        """Integrated energy so far, in microjoules."""
        amdsmi, handle = self._device()
        info = self._call("the power reading", amdsmi.amdsmi_get_power_info, handle)
        watts = power_watts(info)
        if watts is None:
            raise SensorReadError(f"{self.domain.id}: amdsmi reports no power reading ({dict(info)!r})")
        return self._integral.add(watts, self._clock())


def power_watts(info: Mapping[str, Any]) -> float | None:
    """The first of :data:`POWER_FIELDS` that holds a reading (amdsmi writes "N/A" for none), in watts."""
    for name in POWER_FIELDS:
        value = info.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def _optional(function: Callable[..., Any] | None, *args: Any) -> Any:
    if function is None:
        return None
    try:
        return function(*args)
    except Exception:  # noqa: BLE001 - optional information: NOT_SUPPORTED on most parts
        return None


def _inventory(amdsmi: ModuleType, session: AmdSmiSession) -> tuple[list[AmdGpu], dict[int, Any], dict[int, str]]:
    gpus: list[AmdGpu] = []
    handles: dict[int, Any] = {}
    problems: dict[int, str] = {}
    for index, handle in enumerate(session.handles()):
        try:
            uuid = str(amdsmi.amdsmi_get_gpu_device_uuid(handle))
            bdf = str(amdsmi.amdsmi_get_gpu_device_bdf(handle))
        except Exception as exc:  # noqa: BLE001
            problems[index] = describe_error(exc)
            continue
        asic = _optional(amdsmi.amdsmi_get_gpu_asic_info, handle) or {}
        name = asic.get("market_name") if asic.get("market_name") not in (None, "", "N/A") else "AMD GPU"
        gpus.append(
            AmdGpu(
                index=index,
                uuid=uuid,
                name=str(name),
                bdf=bdf,
                compute_partition=str(_optional(getattr(amdsmi, "amdsmi_get_gpu_compute_partition", None), handle) or ""),
                memory_partition=str(_optional(getattr(amdsmi, "amdsmi_get_gpu_memory_partition", None), handle) or ""),
            )
        )
        handles[index] = handle
    return gpus, handles, problems


def running_pids(amdsmi: ModuleType, handle: Any) -> list[int]:
    """The PIDs amdsmi lists on a GPU (``amdsmi_get_gpu_process_list``)."""
    return [int(process["pid"]) for process in amdsmi.amdsmi_get_gpu_process_list(handle)]


def _gpu_domain(gpu: AmdGpu, method: Method) -> Domain:
    partitions = f" ({gpu.partitions})" if gpu.partitions else ""
    return Domain(
        id=gpu.domain_id,
        kind=KIND_GPU,
        hw_name=f"{gpu.name}{partitions}",
        hw_id=gpu.uuid,
        method=method,
        in_total=True,
        update_period_s=ENERGY_COUNTER_UPDATE_PERIOD_S if method is Method.COUNTER else POWER_SAMPLE_PERIOD_S,
        source="amdsmi energy accumulator" if method is Method.COUNTER else "amdsmi power reading",
        covers=f"the whole GPU at {gpu.bdf}"
        + (f", in partition mode {gpu.partitions}" if gpu.partitions else "")
        + " (amdsmi's socket reading)",
        vendor=VENDOR_AMD,
    )


def _probe(amdsmi: ModuleType, gpu: AmdGpu, handle: Any, session: AmdSmiSession) -> Channel | Unavailable:
    """The best channel this GPU supports, or why it has none."""
    try:
        reading = amdsmi.amdsmi_get_energy_count(handle)
        resolution_uj = float(reading["counter_resolution"])
        if resolution_uj > 0:
            return AmdSmiEnergyChannel(_gpu_domain(gpu, Method.COUNTER), gpu, session, resolution_uj, handle)
    except Exception as exc:  # noqa: BLE001
        if error_code(exc) != STATUS_NOT_SUPPORTED:
            return Unavailable(gpu.describe(), f"its energy accumulator cannot be read: {describe_error(exc)}", "check it with `amd-smi metric -p`")
    try:
        if power_watts(amdsmi.amdsmi_get_power_info(handle)) is not None:
            return AmdSmiPowerChannel(_gpu_domain(gpu, Method.POWER_INTEGRATION), gpu, session, handle)
    except Exception as exc:  # noqa: BLE001
        if error_code(exc) != STATUS_NOT_SUPPORTED:
            return Unavailable(gpu.describe(), f"its power reading cannot be read: {describe_error(exc)}", "check it with `amd-smi metric -p`")
    return Unavailable(
        gpu.describe(),
        "amdsmi supports neither its energy accumulator nor its power reading",
        "nothing to configure: this GPU (or its virtual function) reports no power telemetry, so its energy is left out",
    )


def _match(entry: str, gpus: Sequence[AmdGpu]) -> tuple[AmdGpu | None, str]:
    """A UUID entry, full or a prefix, with or without ``GPU-``, case-insensitively."""
    wanted = entry.strip().lower()
    if wanted.startswith("gpu-"):
        wanted = wanted[len("gpu-") :]
    if not wanted:
        return None, "names no UUID"
    found = [gpu for gpu in gpus if gpu.uuid.lower().removeprefix("gpu-").startswith(wanted)]
    if len(found) == 1:
        return found[0], ""
    if not found:
        return None, "matches no AMD GPU's UUID"
    return None, "is ambiguous: it abbreviates " + ", ".join(gpu.uuid for gpu in found)


def _visible(value: str, gpus: Sequence[AmdGpu], variable: str, notes: list[SelectionNote]) -> list[AmdGpu]:
    """The GPUs a ROCm list keeps, by position in ``gpus`` or by UUID; the first bad entry ends it."""

    def resolve(entry: str) -> tuple[AmdGpu | None, str]:
        if re.fullmatch(r"\d+", entry):
            number = int(entry)
            found = gpus[number] if number < len(gpus) else None
            return found, f"is index {number}, but only {len(gpus)} AMD GPUs are visible at that point"
        return _match(entry, gpus)

    named, ended = read_visible_list(value, resolve, variable, "ROCm")
    notes += [ended] if ended is not None else []
    return list(dict.fromkeys(gpu for _, gpu in named))


def select_amd_gpus(
    gpus: Sequence[AmdGpu],
    *,
    requested: Sequence[int | str] | str | None = None,
    devices_by_pid: bool = False,
    env: Mapping[str, str] | None = None,
    gpu_pids: Callable[[], Mapping[int, Collection[int] | str]] | None = None,
    tree_pids: Collection[int] | None = None,
) -> GpuSelection:
    """The AMD GPUs to measure, by the rules of this module's docstring (indices are amdsmi indices).

    Raises:
        ConfigurationError: an explicit entry matches no GPU, or several.
    """
    ordered = sorted(gpus, key=lambda gpu: gpu.index)
    notes: list[SelectionNote] = []
    if requested is not None:
        selected: list[int] = []
        available = "; ".join(f"{g.index} = {g.name} {g.uuid}" for g in ordered) or "amdsmi lists no GPU"
        for item in split_requested(requested):
            text = str(item).strip()
            gpu = next((g for g in ordered if g.index == int(text)), None) if re.fullmatch(r"\d+", text) else _match(text, ordered)[0]
            if gpu is None:
                raise ConfigurationError(f"gpus: {item!r} matches no AMD GPU; available: {available}")
            if gpu.index not in selected:
                selected.append(gpu.index)
        notes += [SelectionNote(g.describe(), f"not selected: gpus={requested!r}", "add it to gpus= to measure it") for g in ordered if g.index not in selected]
        return GpuSelection(tuple(selected), SOURCE_EXPLICIT, tuple(notes))
    if devices_by_pid:
        if gpu_pids is None:
            raise ValueError("devices_by_pid needs gpu_pids")
        tree = process_tree_pids() if tree_pids is None else tree_pids
        return select_by_pids(ordered, gpu_pids(), tree, "amdsmi", AMDSMI_PIDS_REMEDY)
    env = os.environ if env is None else env
    visible = list(ordered)
    used = []
    hip_variable = HIP_VISIBLE_DEVICES if env.get(HIP_VISIBLE_DEVICES) is not None else CUDA_VISIBLE_DEVICES
    for variable in (ROCR_VISIBLE_DEVICES, hip_variable):
        value = env.get(variable)
        if value is None:
            continue
        used.append(f"{variable}={value!r}")
        visible = _visible(value, visible, variable, notes) if value.strip() else []
    if not used:
        return GpuSelection(tuple(g.index for g in ordered), SOURCE_ALL)
    chosen_indices = tuple(g.index for g in visible)
    why = "not visible to this process: " + ", ".join(used)
    notes += [SelectionNote(g.describe(), why, "unset these variables or list this GPU in them") for g in ordered if g.index not in chosen_indices]
    return GpuSelection(chosen_indices, " then ".join(u.split("=")[0] for u in used), tuple(notes))


def discover(
    settings: Settings | None = None,
    gpus: Sequence[int | str] | str | None = None,
    devices_by_pid: bool = False,
    *,
    env: Mapping[str, str] | None = None,
    session: AmdSmiSession | None = None,
) -> Discovery:
    """Find the AMD GPUs to measure and one channel for each.

    Args:
        settings: Shared settings: its sysfs root tells whether an AMD GPU is present when amdsmi is missing.
        gpus: Explicit selection: amdsmi indices and/or UUIDs (full or prefixes), as a sequence or a
            comma-separated string. Overrides ``devices_by_pid`` and the visibility variables.
        devices_by_pid: Only GPUs running a process of this process tree.
        env: Environment to read the visibility variables from (default ``os.environ``).
        session: amdsmi session (default: the process-wide one).

    Returns:
        Channels ordered by amdsmi index; ``unavailable`` says which GPUs (or amdsmi itself) cannot be
        measured or were left out, and why.

    Raises:
        ConfigurationError: only for an explicit ``gpus`` selection naming a GPU that does not exist or cannot
            be measured.
    """
    settings = settings or Settings()
    session = default_session() if session is None else session
    explicit = gpus is not None and bool(split_requested(gpus))
    try:
        amdsmi = session.acquire()
    except AmdSmiUnavailableError as exc:
        if explicit:
            raise ConfigurationError(f"gpus={gpus!r}: no AMD GPU can be measured: {exc}") from None
        present = amd_gpus_in_sysfs(settings.sysfs_root)
        if exc.missing and not present:
            return Discovery()  # no AMD GPU, no amdsmi: nothing to say
        seen = f"{present} AMD GPU{'s' if present != 1 else ''} in sysfs, but " if present else ""
        if present:
            _say_once(f"{seen}{exc.reason}: their energy is in no span or metric ({exc.remedy})")
        return Discovery(unavailable=[Unavailable(WHAT, seen + exc.reason, exc.remedy)])
    try:
        found, handles, problems = _inventory(amdsmi, session)
    except Exception as exc:  # noqa: BLE001
        if explicit:
            raise ConfigurationError(f"gpus={gpus!r}: amdsmi cannot list GPUs: {describe_error(exc)}") from None
        return Discovery(unavailable=[Unavailable(WHAT, f"amdsmi cannot list GPUs: {describe_error(exc)}", "check `amd-smi list`")])
    unavailable = [Unavailable(f"{WHAT}_{i}", f"amdsmi cannot query it: {p}", "check `amd-smi list`") for i, p in sorted(problems.items())]
    if not found and not problems:
        if explicit:
            raise ConfigurationError(f"gpus={gpus!r}: amdsmi found no AMD GPU on this machine")
        return Discovery(unavailable=[Unavailable(WHAT, "amdsmi found no AMD GPU on this machine")])

    def pids_by_index() -> dict[int, Collection[int] | str]:
        listed: dict[int, Collection[int] | str] = {}
        for index, handle in handles.items():
            try:
                listed[index] = set(running_pids(amdsmi, handle))
            except Exception as exc:  # noqa: BLE001
                listed[index] = describe_error(exc)
        return listed

    selection = select_amd_gpus(found, requested=gpus, devices_by_pid=devices_by_pid, env=env, gpu_pids=pids_by_index)
    unavailable += [Unavailable(note.what, note.reason, note.remedy) for note in selection.notes]
    by_index = {gpu.index: gpu for gpu in found}
    channels: list[Channel] = []
    for index in sorted(selection.indices):
        probed = _probe(amdsmi, by_index[index], handles[index], session)
        if isinstance(probed, Unavailable):
            if selection.explicit:
                raise ConfigurationError(f"gpus={gpus!r}: {probed.what} cannot be measured: {probed.reason}")
            unavailable.append(probed)
        else:
            channels.append(probed)
    return Discovery(channels=channels, unavailable=unavailable)


def discover_within(
    settings: Settings | None = None,
    gpus: Sequence[int | str] | str | None = None,
    devices_by_pid: bool = False,
    *,
    deadline_s: float | None = None,
) -> TimedDiscovery:
    """:func:`discover` and each channel's first read, waiting at most ``deadline_s`` (default
    :data:`DISCOVERY_DEADLINE_S`); past it no AMD GPU is measured and one warning says so.

    Raises:
        ConfigurationError: as :func:`discover`, when discovery finishes in time.
    """
    stall = Stall(
        what=WHAT,
        reason="amdsmi did not answer within {deadline_s} s while discovering the AMD GPUs",
        remedy="check the GPUs with `amd-smi list` (a GPU that fell off the bus stalls every amdsmi call)",
        thread_name="otel-joules-amd-gpu-discovery",
    )
    return _discover_within(
        lambda: discover(settings, gpus=gpus, devices_by_pid=devices_by_pid),
        DISCOVERY_DEADLINE_S if deadline_s is None else deadline_s,
        stall,
    )
