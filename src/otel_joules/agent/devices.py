"""The agent's GPUs: opened as root with its other counters, read in a thread of their own.

One NVML read per period for every client of the host: a client that reads through the agent takes
its GPUs' energy from the agent's readings and makes no NVML energy read itself. An NVML call can
take seconds (a GPU falling off the bus), and the agent serves every client from one thread: so the
GPUs are read here, in a :class:`DeviceReader` thread, and the loop only takes the newest values
(:meth:`DeviceReader.latest`), which never blocks. A value older than the reader's ``stale_s`` is
served as a failed read (null), never as a frozen one that would pass for 0 W.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Sequence

from otel_joules.config import Settings
from otel_joules.sensors import nvml
from otel_joules.sensors.agent_protocol import MAX_AGENT_POWER_WATTS
from otel_joules.sensors.base import Channel

_log = logging.getLogger("otel_joules")

#: NVML's energy counter moves about every 100 ms: read at twice that rate, never faster (a read costs
#: about 0.4 ms on real boards), whatever the agent's interval.
GPU_READ_PERIOD_S = nvml.ENERGY_COUNTER_UPDATE_PERIOD_S / 2
#: A GPU's newest value older than this many read periods (at least STALE_MIN_S) is served as a failed read.
STALE_PERIODS = 4
STALE_MIN_S = 1.0
#: How far above the board's highest power limit its energy may be trusted to move (boards overshoot
#: their limit for short spells); a move beyond is a jump, not energy, in the clients' meters.
POWER_LIMIT_HEADROOM = 2.0


class ServedGpu:
    """One GPU's energy counter as the agent serves it: the channel, its wrap range and power bound.

    Args:
        channel: The GPU's NVML energy counter (microjoules, since the driver loaded).
    """

    #: NVML's counter is an unsigned 64-bit count of millijoules: it never wraps in a board's life. The
    #: protocol's largest range stands for that.
    WRAP_UJ = 2**64

    def __init__(self, channel: nvml.NvmlEnergyChannel) -> None:
        self.channel = channel
        limit_watts = channel.power_limit_watts()
        #: The board's highest power limit with headroom, else the protocol's ceiling (never above it).
        self.max_power_watts = min(
            MAX_AGENT_POWER_WATTS, limit_watts * POWER_LIMIT_HEADROOM if limit_watts else MAX_AGENT_POWER_WATTS
        )


def open_gpus(settings: Settings) -> tuple[list[ServedGpu], dict[str, int]]:
    """Every GPU of the host whose energy counter NVML reads, opened now (as root, before the agent drops its
    privileges), and each one's first reading in uJ by domain id. Every GPU, whatever this process's
    ``CUDA_VISIBLE_DEVICES``: each client picks the ones it sees. None where NVML is missing or does not
    answer within its discovery deadline (said once); a GPU with a power reading only is left to the
    clients, which integrate it themselves."""
    found = nvml.discover_within(settings, env={})
    served: list[ServedGpu] = []
    first_uj: dict[str, int] = {}
    for channel in found.discovery.channels:
        first = found.first_reads_uj.get(channel.domain.id)
        if isinstance(channel, nvml.NvmlEnergyChannel) and isinstance(first, int):
            served.append(ServedGpu(channel))
            first_uj[channel.domain.id] = first
        else:
            channel.close()
    return served, first_uj


class DeviceReader:
    """Reads the GPUs every ``period_s`` in a daemon thread; the agent's loop takes their newest values.

    Args:
        channels: The channels to read (in the order of :meth:`latest`).
        period_s: Time between two reads of every channel.
        first_uj: Values already read (at discovery), by domain id: served until the thread's first read.
    """

    def __init__(self, channels: Sequence[Channel], period_s: float, first_uj: dict[str, int] | None = None) -> None:
        self._channels = list(channels)
        self.period_s = period_s
        self.stale_s = max(STALE_MIN_S, STALE_PERIODS * period_s)
        now_s = time.monotonic()
        first_uj = first_uj or {}
        #: Each channel's newest (value in uJ, monotonic s read at); None after a failed read. Swapped whole.
        self._values: list[tuple[int, float] | None] = [
            (first_uj[c.domain.id], now_s) if c.domain.id in first_uj else None for c in self._channels
        ]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._said_failure: set[str] = set()

    def __len__(self) -> int:
        return len(self._channels)

    def start(self) -> None:
        """Start reading (after the privilege drop: a thread keeps the capabilities it started with)."""
        if self._thread is None and self._channels:
            self._thread = threading.Thread(target=self._run, name="otel-joules-agent-gpus", daemon=True)
            self._thread.start()

    def latest(self, now_s: float) -> list[int | None]:
        """Each channel's newest value in uJ; None where its read failed or its value is older than ``stale_s``
        (a stalled device). Never blocks."""
        oldest_s = now_s - self.stale_s
        return [None if v is None or v[1] < oldest_s else v[0] for v in self._values]

    def _run(self) -> None:
        next_s = time.monotonic()
        while not self._stop.is_set():
            for i, channel in enumerate(self._channels):
                try:
                    self._values[i] = (channel.read_uj(), time.monotonic())
                except Exception as exc:  # noqa: BLE001 - a failing GPU must not end the others' readings
                    self._values[i] = None
                    if channel.domain.id not in self._said_failure:
                        self._said_failure.add(channel.domain.id)
                        _log.warning(
                            "otel-joules agent: reading %s failed (%s): served as unread until it reads again "
                            "(later failures are not said)",
                            channel.domain.id,
                            exc,
                        )
            next_s += self.period_s
            now_s = time.monotonic()
            if next_s < now_s:  # a stall: read again one period from now, no burst of catch-up reads
                next_s = now_s + self.period_s
            self._stop.wait(next_s - now_s)

    def stop(self) -> None:
        """Stop the thread (waits at most a second: a read stalled in NVML finishes unused)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(1.0)
