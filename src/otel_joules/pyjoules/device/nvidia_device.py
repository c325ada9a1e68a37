"""NVIDIA GPU domains and device (``pyJoules.device.nvidia_device``), read through the core meter.

Importing this module needs neither a GPU, nor a driver, nor ``pynvml``: NVML is loaded
by the core meter, and only when a meter measures GPUs.

``NvidiaGPUDomain(i)`` is **NVML index i** -- the numbering of ``nvidia-smi`` and of
pyJoules, and the ``i`` of the core meter's ``nvidia_gpu_i`` -- not the CUDA device
number, which ``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER`` renumber. By default
the meter measures the GPUs this process may use (``CUDA_VISIBLE_DEVICES``), named by
their NVML index: with ``CUDA_VISIBLE_DEVICES=1`` the default domain is
``nvidia_gpu_1`` (CUDA's ``cuda:0``), and ``NvidiaGPUDomain(0)`` is not measured (a
warning says so and how to measure it: ``otel_joules.get_energy_meter(gpus=[0, 1])``
before the first measurement).

Energy is in microjoules like every other domain: NVML counts millijoules and the core
meter converts them (pyJoules printed the raw millijoules next to RAPL's microjoules).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

from otel_joules.pyjoules.device.device import Device
from otel_joules.pyjoules.device.domain import Domain
from otel_joules.pyjoules.exception import DomainTypeError, NoSuchDeviceError, PyJoulesException  # noqa: F401 - pyJoules' names


#: pyJoules' GPU domain names (and the core meter's NVML domain ids): this, then the NVML index.
_ID_PREFIX = "nvidia_gpu_"


@dataclass(frozen=True, eq=False, repr=False)
class NvidiaGPUDomain(Domain):
    """One NVIDIA GPU, by NVML index (see the module docstring).

    Attributes:
        device_id: NVML index of the GPU, as ``nvidia-smi`` numbers it.
    """

    device_id: int

    def __post_init__(self) -> None:
        try:
            device_id = operator.index(self.device_id)
        except TypeError:
            raise DomainTypeError(
                f"NvidiaGPUDomain({self.device_id!r}): the argument is the GPU's NVML index (as in nvidia-smi), a whole number"
            ) from None
        if isinstance(self.device_id, bool):
            raise DomainTypeError(
                f"NvidiaGPUDomain({self.device_id!r}): the argument is the GPU's NVML index (as in nvidia-smi), a whole number"
            )
        # A negative index is accepted here, as pyJoules accepts it; looking it up fails.
        object.__setattr__(self, "device_id", device_id)

    @property
    def domain_id(self) -> str:
        """``nvidia_gpu_<NVML index>``."""
        return f"{_ID_PREFIX}{self.device_id}"

    @classmethod
    def named(cls, domain_id: str) -> "NvidiaGPUDomain | None":
        """The domain of a core meter GPU domain whose id is its pyJoules name (``nvidia_gpu_1``), else None.

        Only asked for a domain the sensor says is a GPU (``Domain.kind``); the name (:attr:`domain_id`'s
        format, inverted) says which NVML index.
        """
        index = domain_id[len(_ID_PREFIX):] if domain_id.startswith(_ID_PREFIX) else ""
        return cls(int(index)) if index.isdigit() else None

    def get_device_type(self) -> "type[NvidiaGPUDevice]":
        """:class:`NvidiaGPUDevice`."""
        return NvidiaGPUDevice

    def __lt__(self, other: Any) -> bool:
        if isinstance(other, NvidiaGPUDomain):
            return self.device_id < other.device_id
        raise ValueError(f"cannot order {self!r} and {other!r}: only GPU domains order among themselves")

    def __gt__(self, other: Any) -> bool:
        if isinstance(other, NvidiaGPUDomain):
            return self.device_id > other.device_id
        raise ValueError(f"cannot order {self!r} and {other!r}: only GPU domains order among themselves")

    __hash__ = Domain.__hash__


class GPUDoesNotSupportEnergyMonitoringError(PyJoulesException):
    """Kept for imports from pyJoules: GPUs without an energy counter are measured by integrating their power instead."""


class NvidiaGPUDevice(Device):
    """The GPUs the core meter measures.

    Raises:
        NoSuchDeviceError: no GPU can be measured (no driver, no GPU, none visible to this process).
    """

    domain_types = (NvidiaGPUDomain,)
