"""GPU discovery with a deadline: a stalled device library never holds up the program for long.

A GPU that fell off the bus makes every call of its library (NVML, amdsmi) take seconds. The meter
therefore discovers GPUs through :func:`discover_within`, which runs the library's initialisation, the GPU
listing, the probes and each channel's first read in a helper thread and waits at most a deadline; past it
the meter measures none of that library's GPUs, says so once, and the discovery finishes unused in the
background.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Callable

from otel_joules.sensors.base import Discovery, Unavailable

_log = logging.getLogger("otel_joules")


@dataclass
class TimedDiscovery:
    """What :func:`discover_within` found: the discovery and each channel's first reading.

    Attributes:
        discovery: Channels and unavailable GPUs, as the sensor's ``discover`` returns them.
        first_reads_uj: Each channel's first ``read_uj()`` by domain id: microjoules, or the
            exception the read raised (the meter's failure policy decides what it means).
        timed_out: The library did not answer within the deadline: none of its GPUs is measured.
    """

    discovery: Discovery
    first_reads_uj: dict[str, int | Exception] = field(default_factory=dict)
    timed_out: bool = False


@dataclass(frozen=True)
class Stall:
    """What to say when a library's discovery misses its deadline.

    Attributes:
        what: The ``Unavailable`` entry's subject (``nvidia_gpu``, ``amd_gpu``).
        reason: Why nothing is measured, in words; ``{deadline_s}`` in it becomes the deadline in seconds.
        remedy: What to do.
        thread_name: The helper thread's name.
    """

    what: str
    reason: str
    remedy: str
    thread_name: str


def discover_within(discover: Callable[[], Discovery], deadline_s: float, stall: Stall) -> TimedDiscovery:
    """``discover()`` and each channel's first read in a helper thread, waiting at most ``deadline_s``.

    Past the deadline no GPU of that library is measured: one warning says so, and the discovery goes on in
    a daemon thread whose result is dropped.

    Raises:
        Whatever ``discover`` raises (a ConfigurationError for a bad explicit selection), when it finishes in time.
    """
    outcome: list[TimedDiscovery | BaseException] = []

    def run() -> None:
        try:
            found = discover()
            first: dict[str, int | Exception] = {}
            for channel in found.channels:
                try:
                    first[channel.domain.id] = channel.read_uj()
                except Exception as exc:  # noqa: BLE001 - handed to the meter's failure policy
                    first[channel.domain.id] = exc
            outcome.append(TimedDiscovery(found, first))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            outcome.append(exc)

    worker = threading.Thread(target=run, name=stall.thread_name, daemon=True)
    worker.start()
    worker.join(deadline_s)
    if outcome:
        result = outcome[0]
        if isinstance(result, BaseException):
            raise result
        return result
    reason = stall.reason.format(deadline_s=f"{deadline_s:g}")
    _log.warning("otel-joules: %s; measuring none of these GPUs in this process (%s)", reason, stall.remedy)
    return TimedDiscovery(Discovery(unavailable=[Unavailable(stall.what, reason, stall.remedy)]), timed_out=True)
