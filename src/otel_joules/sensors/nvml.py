"""NVIDIA GPUs through NVML (the ``pynvml`` module of ``nvidia-ml-py``).

Units: NVML reports energy in **millijoules** (``nvmlDeviceGetTotalEnergyConsumption``,
since the driver loaded, Volta and newer) and power in **milliwatts**
(``nvmlDeviceGetPowerUsage``). Both are converted to the channel contract's microjoules
here and nowhere else; every local name carries its unit.

Per GPU, in order of preference:

* :class:`NvmlEnergyChannel` (:attr:`Method.COUNTER`): the energy counter. It refreshes
  about every 100 ms, hence ``update_period_s = 0.1``.
* :class:`NvmlPowerChannel` (:attr:`Method.POWER_INTEGRATION`) for GPUs that answer
  NOT_SUPPORTED for the counter (pre-Volta, some consumer cards): the power reading
  integrated with the trapezoid rule at every read; the meter's sampler reads at least
  every :data:`POWER_SAMPLE_PERIOD_S`. On Ampere and newer (except GA100) the power
  reading is itself a 1 s average, so integrated energy lags the load by about half a second.
* Neither: the GPU is reported unavailable (or, if the user named it, a
  :class:`~otel_joules.errors.ConfigurationError` is raised at configuration time).

Which GPUs: see :mod:`otel_joules.sensors.gpu_selection`.

Lifecycle (:mod:`otel_joules.sensors.nvml_session`): one :class:`NvmlSession` per process
initialises NVML on first use and shuts it down at interpreter exit. NVML state is not valid
after ``fork()``: the session notices it runs in a new process and initialises again, and
channels re-acquire their handles by UUID before the child's first read.

Nothing here raises when there is no NVIDIA driver, library or GPU: :func:`discover`
returns a :class:`Discovery` whose ``unavailable`` entries say which and why.

Discovery never holds up the program for long: the meter discovers GPUs through
:func:`discover_within`, which runs NVML's initialisation, the GPU listing, the probes and the
first reads in a helper thread and waits at most :data:`DISCOVERY_DEADLINE_S`. A GPU that fell
off the bus makes every NVML call take seconds (tens of seconds for a whole discovery); past the
deadline the meter measures no GPU, says so once, and the discovery finishes unused in the
background. The bound is generous because a healthy driver that is not kept loaded
(``nvidia-smi -pm 1``) may take seconds to initialise.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable, Collection, Mapping, Sequence

from otel_joules.config import Settings
from otel_joules.errors import ConfigurationError, DeviceLostError, SensorReadError
from otel_joules.sensors.base import Channel, Discovery, Domain, Method, Unavailable
from otel_joules.sensors.deadline import Stall, TimedDiscovery  # noqa: F401 - TimedDiscovery: importable from here too
from otel_joules.sensors.deadline import discover_within as _discover_within
from otel_joules.sensors.gpu_selection import GpuInfo, GpuSelection, select_gpus
from otel_joules.sensors.integration import POWER_SAMPLE_PERIOD_S, PowerIntegral
from otel_joules.sensors.nvml_session import (  # noqa: F401 - the session's public names, also importable from here
    _LOST_CODES,
    _NVML_ERROR_NOT_FOUND,
    _NVML_ERROR_NOT_SUPPORTED,
    NvmlSession,
    NvmlUnavailableError,
    _describe_nvml_error,
    _error_code,
    default_session,
)
from otel_joules.semconv import KIND_GPU, VENDOR_NVIDIA

_log = logging.getLogger("otel_joules")

#: Microjoules per millijoule: NVML's energy unit to the channel contract's.
UJ_PER_MJ = 1000
#: Longest a meter waits for GPU discovery (NVML init, listing, probes, first reads), in seconds.
DISCOVERY_DEADLINE_S = 5.0
#: How often NVML's energy counter changes (about 100 ms on Volta and newer).
ENERGY_COUNTER_UPDATE_PERIOD_S = 0.1
#: Milliwatts per watt: NVML's power unit to the integrator's.
MW_PER_W = 1000.0


class NvmlChannel(Channel):
    """Common part of the NVML channels: the handle, re-acquired by UUID when stale."""

    def __init__(self, domain: Domain, gpu: GpuInfo, session: NvmlSession, handle: Any = None) -> None:
        super().__init__(domain)
        self.gpu = gpu
        self._session = session
        self._handle = handle
        self._handle_generation = session.generation if handle is not None else -1
        self._lost_message: str | None = None

    @property
    def may_block(self) -> bool:
        """True: an NVML call can take seconds (a GPU falling off the bus), so the meter reads it off the span path."""
        return True

    @property
    def uuid(self) -> str:
        """The GPU's UUID (``hw.id``)."""
        return self.gpu.uuid

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.domain.id}, {self.gpu.name!r}, {self.gpu.uuid})"

    def _device(self) -> tuple[ModuleType, Any]:
        if self._lost_message is not None:
            raise DeviceLostError(self._lost_message)
        try:
            nvml = self._session.acquire()
        except NvmlUnavailableError as exc:
            raise SensorReadError(f"{self.domain.id}: NVML is no longer usable: {exc}") from None
        if self._handle is None or self._handle_generation != self._session.generation:
            # A forked child (or a re-initialised NVML) must not use the old handle.
            self._handle = self._call("its handle", nvml.nvmlDeviceGetHandleByUUID, self.gpu.uuid)
            self._handle_generation = self._session.generation
        return nvml, self._handle

    def _call(self, what: str, function: Callable[..., Any], *args: Any) -> Any:
        try:
            return function(*args)
        except Exception as exc:
            code = _error_code(exc)
            if code in _LOST_CODES or (code == _NVML_ERROR_NOT_FOUND and what == "its handle"):
                self._lost_message = (
                    f"{self.gpu.describe()} is lost ({_describe_nvml_error(exc)}); it is no longer measured. "
                    "Check it with nvidia-smi; a GPU reset or reboot may be needed"
                )
                raise DeviceLostError(self._lost_message) from None
            raise SensorReadError(f"{self.domain.id}: reading {what} failed: {_describe_nvml_error(exc)}") from None

    def reset_after_fork(self) -> None:
        """Forget the handle: the child re-acquires it by UUID before its first read."""
        self._handle = None
        self._handle_generation = -1

    def close(self) -> None:
        """Drop the handle; NVML itself stays initialised until exit (other channels may use it)."""
        self._handle = None
        self._handle_generation = -1


class NvmlEnergyChannel(NvmlChannel):
    """A GPU's total energy counter (mJ since driver load) as microjoules."""

    def power_limit_watts(self) -> float | None:
        """The highest power limit the board may be set to (``nvmlDeviceGetPowerManagementLimitConstraints``),
        or None where the GPU, driver or binding does not say."""
        try:
            nvml, handle = self._device()
        except (SensorReadError, DeviceLostError):
            return None
        limits = _optional(getattr(nvml, "nvmlDeviceGetPowerManagementLimitConstraints", None), handle)
        try:
            max_limit_mw = float(limits[1])
        except (TypeError, ValueError, IndexError):
            return None
        return max_limit_mw / MW_PER_W if max_limit_mw > 0 else None

    def read_uj(self) -> int:
        """The counter in microjoules."""
        nvml, handle = self._device()
        energy_mj = self._call("the energy counter", nvml.nvmlDeviceGetTotalEnergyConsumption, handle)
        return int(energy_mj) * UJ_PER_MJ


class NvmlPowerChannel(NvmlChannel):
    """A GPU's power reading (mW) integrated over time with the trapezoid rule
    (:class:`~otel_joules.sensors.integration.PowerIntegral`), as microjoules.

    Accuracy depends on reads being frequent (:attr:`max_read_interval_s`), which the meter's
    sampler guarantees.
    """

    def __init__(
        self,
        domain: Domain,
        gpu: GpuInfo,
        session: NvmlSession,
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
    def last_power_watts(self) -> float | None:
        """The latest power reading, or None before the first read."""
        return self._integral.last_power_watts

    def energy_uj_now(self) -> int | None:
        """The integral through now, the latest power held since its reading (None before the first read)."""
        return self._integral.energy_uj_at(self._clock())

    def read_uj(self) -> int:
        """Integrated energy so far, in microjoules."""
        nvml, handle = self._device()
        power_mw = int(self._call("the power reading", nvml.nvmlDeviceGetPowerUsage, handle))
        return self._integral.add(power_mw / MW_PER_W, self._clock())


@dataclass
class GpuInventory:
    """The GPUs NVML lists, their handles, and the ones that could not be queried."""

    gpus: list[GpuInfo] = field(default_factory=list)
    handles: dict[int, Any] = field(default_factory=dict)
    problems: dict[int, str] = field(default_factory=dict)


def _optional(function: Callable[..., Any] | None, *args: Any) -> Any:
    """A value that only helps ordering: None when the GPU, driver or binding lacks it."""
    if function is None:
        return None
    try:
        return function(*args)
    except Exception:
        return None


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _mig_uuids(nvml: ModuleType, handle: Any) -> tuple[str, ...]:
    mode = _optional(getattr(nvml, "nvmlDeviceGetMigMode", None), handle)
    if not mode or not mode[0]:
        return ()
    uuids = []
    for slot in range(_optional(nvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0):
        mig_handle = _optional(nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot)
        if mig_handle is None:
            continue  # empty slot: fewer instances than the maximum
        uuid = _optional(nvml.nvmlDeviceGetUUID, mig_handle)
        if uuid:
            uuids.append(_text(uuid))
    return tuple(uuids)


def _inventory(nvml: ModuleType) -> GpuInventory:
    found = GpuInventory()
    count = int(nvml.nvmlDeviceGetCount())
    for index in range(count):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            name = _text(nvml.nvmlDeviceGetName(handle))
            pci = nvml.nvmlDeviceGetPciInfo(handle)
        except Exception as exc:
            found.problems[index] = _describe_nvml_error(exc)
            continue
        capability = _optional(getattr(nvml, "nvmlDeviceGetCudaComputeCapability", None), handle)
        found.gpus.append(
            GpuInfo(
                index=index,
                uuid=uuid,
                name=name,
                pci_bus_id=_text(pci.busId),
                compute_capability=tuple(capability) if capability else None,  # type: ignore[arg-type]
                cores=_optional(getattr(nvml, "nvmlDeviceGetNumGpuCores", None), handle),
                max_sm_clock_mhz=_optional(getattr(nvml, "nvmlDeviceGetMaxClockInfo", None), handle, nvml.NVML_CLOCK_SM),
                mig_uuids=_mig_uuids(nvml, handle),
            )
        )
        found.handles[index] = handle
    return found


def _running_pids(nvml: ModuleType, handles: Mapping[int, Any]) -> dict[int, Collection[int] | str]:
    """PIDs NVML lists per GPU (compute and graphics), or the error text."""
    pids: dict[int, Collection[int] | str] = {}
    for index, handle in handles.items():
        try:
            processes = list(nvml.nvmlDeviceGetComputeRunningProcesses(handle))
            processes += list(nvml.nvmlDeviceGetGraphicsRunningProcesses(handle))
        except Exception as exc:
            pids[index] = _describe_nvml_error(exc)
            continue
        pids[index] = {int(process.pid) for process in processes}
    return pids


def gpu_domain(gpu: GpuInfo, method: Method) -> Domain:
    """The energy domain of ``gpu`` read by ``method`` (its id by NVML index, its UUID as ``hw.id``)."""
    return Domain(
        id=gpu.domain_id,
        kind=KIND_GPU,
        hw_name=gpu.name,
        hw_id=gpu.uuid,
        method=method,
        in_total=True,
        # The counter refreshes every ~100 ms; integrated power has the sampling step as resolution.
        update_period_s=ENERGY_COUNTER_UPDATE_PERIOD_S if method is Method.COUNTER else POWER_SAMPLE_PERIOD_S,
        source="NVML" if method is Method.COUNTER else "NVML power reading",
        covers="the whole GPU board (NVML's reading for the device)",
        vendor=VENDOR_NVIDIA,
    )


def _probe(nvml: ModuleType, gpu: GpuInfo, handle: Any, session: NvmlSession) -> Channel | Unavailable:
    """The best channel this GPU supports, or why it has none."""
    try:
        nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        return NvmlEnergyChannel(gpu_domain(gpu, Method.COUNTER), gpu, session, handle)
    except Exception as exc:
        if _error_code(exc) != _NVML_ERROR_NOT_SUPPORTED:
            return Unavailable(gpu.describe(), f"its energy counter cannot be read: {_describe_nvml_error(exc)}", "check it with nvidia-smi")
    try:
        nvml.nvmlDeviceGetPowerUsage(handle)
        return NvmlPowerChannel(gpu_domain(gpu, Method.POWER_INTEGRATION), gpu, session, handle)
    except Exception as exc:
        if _error_code(exc) == _NVML_ERROR_NOT_SUPPORTED:
            return Unavailable(
                gpu.describe(),
                "NVML supports neither its energy counter nor its power reading",
                "nothing to configure: this GPU (or its virtual GPU profile) reports no power telemetry, so its energy "
                "is left out; `nvidia-smi -q -d POWER` shows what it exposes",
            )
        return Unavailable(gpu.describe(), f"its power reading cannot be read: {_describe_nvml_error(exc)}", "check it with nvidia-smi")


def discover(
    settings: Settings | None = None,
    gpus: Sequence[int | str] | str | None = None,
    devices_by_pid: bool = False,
    *,
    env: Mapping[str, str] | None = None,
    session: NvmlSession | None = None,
    served: Mapping[str, Callable[[GpuInfo], Channel]] | None = None,
) -> Discovery:
    """Find the GPUs to measure and one channel for each.

    Args:
        settings: Shared settings (accepted for the common sensor signature; NVML needs none).
        gpus: Explicit selection: NVML indices and/or full or abbreviated ``GPU-``/``MIG-``
            UUIDs, as a sequence or a comma-separated string. Overrides ``devices_by_pid``
            and ``CUDA_VISIBLE_DEVICES``. ``[]`` selects no GPU.
        devices_by_pid: Only GPUs running a process of this process tree.
        env: Environment to read ``CUDA_VISIBLE_DEVICES``/``CUDA_DEVICE_ORDER`` from
            (default ``os.environ``).
        session: NVML session (default: the process-wide one).
        served: GPUs whose energy another reader serves (``otel-joules agent``), by UUID: a selected GPU
            found here gets the channel this makes from its :class:`GpuInfo`, and NVML's energy counter
            is not read in this process (not even probed).

    Returns:
        Channels ordered by NVML index; ``unavailable`` says which GPUs (or NVML itself)
        cannot be measured or were left out, and why.

    Raises:
        ConfigurationError: only for an explicit ``gpus`` selection naming a GPU that does not
            exist or cannot be measured at all (including when NVML is unavailable).
    """
    del settings  # NVML has no tunables; the parameter keeps every sensor's signature alike.
    session = default_session() if session is None else session
    explicit = gpus is not None
    try:
        nvml = session.acquire()
    except NvmlUnavailableError as exc:
        if explicit and _wants_any(gpus):
            raise ConfigurationError(f"gpus={gpus!r}: no GPU can be measured: {exc}") from None
        return Discovery(unavailable=[Unavailable("nvidia_gpu", exc.reason, exc.remedy)])
    try:
        inventory = _inventory(nvml)
    except Exception as exc:
        if explicit and _wants_any(gpus):
            raise ConfigurationError(f"gpus={gpus!r}: NVML cannot list GPUs: {_describe_nvml_error(exc)}") from None
        return Discovery(unavailable=[Unavailable("nvidia_gpu", f"NVML cannot list GPUs: {_describe_nvml_error(exc)}", "check nvidia-smi")])

    unavailable = [
        Unavailable(f"nvidia_gpu_{index}", f"NVML cannot query it: {problem}", "check it with nvidia-smi")
        for index, problem in sorted(inventory.problems.items())
    ]
    if not inventory.gpus and not inventory.problems:
        if explicit and _wants_any(gpus):
            raise ConfigurationError(f"gpus={gpus!r}: NVML found no GPU on this machine")
        return Discovery(unavailable=[Unavailable("nvidia_gpu", "NVML found no GPU on this machine")])

    try:
        selection = select_gpus(
            inventory.gpus,
            requested=gpus,
            devices_by_pid=devices_by_pid,
            env=env,
            gpu_pids=lambda: _running_pids(nvml, inventory.handles),
        )
    except ConfigurationError as exc:
        if inventory.problems:
            broken = "; ".join(f"nvidia_gpu_{i}: {p}" for i, p in sorted(inventory.problems.items()))
            raise ConfigurationError(f"{exc}; NVML cannot query: {broken}") from None
        raise
    unavailable += [Unavailable(note.what, note.reason, note.remedy) for note in selection.notes]

    by_index = {gpu.index: gpu for gpu in inventory.gpus}
    channels: list[Channel] = []
    for index in sorted(selection.indices):
        gpu = by_index[index]
        if served and gpu.uuid in served:
            channels.append(served[gpu.uuid](gpu))
            continue
        found = _probe(nvml, gpu, inventory.handles[index], session)
        if isinstance(found, Unavailable):
            if selection.explicit:
                raise ConfigurationError(f"gpus={gpus!r}: {found.what} cannot be measured: {found.reason}")
            unavailable.append(found)
        else:
            channels.append(found)
    return Discovery(channels=channels, unavailable=unavailable)


def discover_within(
    settings: Settings | None = None,
    gpus: Sequence[int | str] | str | None = None,
    devices_by_pid: bool = False,
    *,
    deadline_s: float | None = None,
    env: Mapping[str, str] | None = None,
    served: Mapping[str, Callable[[GpuInfo], Channel]] | None = None,
) -> TimedDiscovery:
    """:func:`discover` (with ``env`` and ``served``) and each channel's first read, waiting at most ``deadline_s``
    (default :data:`DISCOVERY_DEADLINE_S`).

    Past the deadline (a stalled NVML) no GPU is measured: one warning says so, and the
    discovery goes on in a daemon thread whose result is dropped
    (:func:`otel_joules.sensors.deadline.discover_within`).

    Raises:
        ConfigurationError: as :func:`discover`, when discovery finishes in time.
    """
    what = "the GPUs" if gpus is None else f"gpus={gpus!r}"
    stall = Stall(
        what="nvidia_gpu",
        reason="NVML did not answer within {deadline_s} s while discovering " + what.replace("{", "{{").replace("}", "}}"),
        remedy=(
            "check the GPUs with nvidia-smi (a GPU that fell off the bus stalls every NVML call); "
            "`nvidia-smi -pm 1` keeps a healthy driver loaded so it starts fast"
        ),
        thread_name="otel-joules-gpu-discovery",
    )
    return _discover_within(
        lambda: discover(settings, gpus=gpus, devices_by_pid=devices_by_pid, env=env, served=served),
        DISCOVERY_DEADLINE_S if deadline_s is None else deadline_s,
        stall,
    )


def _wants_any(gpus: Sequence[int | str] | str | None) -> bool:
    if gpus is None:
        return False
    if isinstance(gpus, str):
        return bool(gpus.strip(" ,"))
    return len(gpus) > 0
