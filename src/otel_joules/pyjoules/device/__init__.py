"""Devices and domains (``pyJoules.device``): RAPL sockets, NVIDIA GPUs, and the core meter's other domains.

Every device reads through the core :class:`otel_joules.EnergyMeter`; see
:mod:`.rapl_device`, :mod:`.nvidia_device` (what ``NvidiaGPUDomain(i)``'s index means)
and :mod:`.meter_device`.
"""

from otel_joules.pyjoules.device.domain import Domain
from otel_joules.pyjoules.device.device import Device, NotConfiguredDeviceException
from otel_joules.pyjoules.device.device_factory import DeviceFactory

__all__ = ["Device", "DeviceFactory", "Domain", "NotConfiguredDeviceException"]
