"""Sensors: where every value is born.

Each module here knows one kind of hardware and turns it into :class:`Channel`
objects reporting microjoules: :mod:`.rapl` (Linux powercap), :mod:`.nvml`
(NVIDIA GPUs) and :mod:`.estimator` (a CPU-time model where no counter exists, whose per-thread figures
:mod:`.cpu_power` chooses from the CPU and whether the machine is a VM).
"""

from otel_joules.sensors.base import Breadth, Channel, Discovery, Domain, HardwareType, Method, Unavailable

__all__ = ["Breadth", "Channel", "Discovery", "Domain", "HardwareType", "Method", "Unavailable"]
