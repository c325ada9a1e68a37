"""RAPL counters (and GPUs) read through ``otel-joules agent``, for users who may not read ``energy_uj`` themselves.

Since Linux 5.10 ``energy_uj`` is root-only (CVE-2020-8694). The agent, run as root, serves the
counters on a Unix socket to members of one group (:mod:`otel_joules.agent`). Here, the library side:
one :class:`AgentLink` per process and socket subscribes once (:mod:`otel_joules.sensors.agent_connect`)
and gets the agent's readings in a sealed shared-memory segment (:mod:`otel_joules.sensors.agent_shm`),
which a span's snapshot reads with no system call and no thread; from an agent that shares no memory,
or hands over a segment this process refuses, a daemon thread keeps the latest reading it pushes on the
socket (every ``interval_ms``). An :class:`AgentChannel` returns that reading: no span ever makes a
socket round trip.

The agent reads the host's GPUs too (NVML's energy counter, once per period for every client). A
process that reads RAPL through the agent takes the GPUs it sees from there as well
(:func:`served_gpus`, matched by UUID to the GPUs NVML lists for this process, so
``CUDA_VISIBLE_DEVICES`` selects as always): it makes no NVML energy read of its own, and runs no
GPU reader thread. Where the agent serves no GPU (an older agent, no NVML there), the process reads
its GPUs itself, as without an agent.

Only the agent reads the BMC (its credentials stay there): where it has one, it serves the platform's joules as
one more zone (kind platform, left out of the total), which a process here takes as a domain beside its
components: the meter then shares the energy the components do not cover (:mod:`otel_joules.attribution.uncovered`)
as it does a platform reading of its own.

If the agent goes away (a segment whose readings stop coming, or that the agent marks stopped; a socket
that closes or stays silent), the link says so once and :meth:`AgentChannel.read_uj` returns None: the meter
then gives spans its standby estimates, labelled ``energy.source = estimate``, and no read fails or
waits. A thread reconnects every :data:`RECONNECT_S`; once the agent answers again with the same
zones, spans are measured again in the same process (the counters are cumulative, so a span across
the outage still gets its whole energy).

The agent is trusted with readings, not with this process: every number it sends is checked
(finite, a wrap range of at most 2**64 uJ, a power bound of at most a few kW, readings within the
range, in the segment as on the socket), and nothing it sends raises into the
application or ends the reader thread. An agent that answers badly at connect is not used (spans
are estimates, said once); one that later sends a broken frame, dribbles bytes without completing a
reading within :data:`SILENCE_MIN_S`, or sends the same reading for :data:`FROZEN_INTERVALS` of its
intervals (at least :data:`FROZEN_MIN_S`: a live package counter always moves) is lost: spans are
estimates until a reconnect gets good readings again.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
import time
from typing import Any, Callable

from otel_joules.config import Settings
from otel_joules.errors import SensorReadError
from otel_joules.sensors.agent_connect import (
    SILENCE_MIN_S,
    SILENT_INTERVALS,
    AgentUnavailable,
    connect,
    interval_s_of,
    values_of,
    wraps_of,
    zone_limits,
)
from otel_joules.sensors.agent_protocol import MAX_REPLY_BYTES, ProtocolError, decode_frames
from otel_joules.sensors.agent_shm import SharedReadings
from otel_joules.sensors.base import HW_TYPES, Breadth, Channel, Discovery, Domain, HardwareType, Method, Unavailable
from otel_joules.sensors.gpu_selection import GpuInfo
from otel_joules.sensors.nvml import ENERGY_COUNTER_UPDATE_PERIOD_S, gpu_domain
from otel_joules.sensors.rapl import RAPL_UPDATE_PERIOD_S
from otel_joules.semconv import KIND_CPU, KIND_PLATFORM

_log = logging.getLogger("otel_joules")

#: How often a lost agent is tried again.
RECONNECT_S = 0.5
#: A reading older than this many intervals (at least STALE_MIN_S) is not used: a span then gets the
#: standby estimates instead of a frozen value (0 J labelled measured) while the link finds out why.
STALE_INTERVALS = 10
STALE_MIN_S = 0.5
#: The same reading (every zone's value unchanged) for this many intervals, at least FROZEN_MIN_S, means
#: the agent is lost: a live package counter moves at every RAPL update (~1 ms).
FROZEN_INTERVALS = 20
FROZEN_MIN_S = 1.0
#: Read a counter at least this many times per wrap period (as the direct RAPL reader does).
_READS_PER_WRAP = 4
#: What the unavailable entries and messages call this sensor.
WHAT = "RAPL through the otel-joules agent"
#: The longest update period a platform zone may claim (a BMC polled every minute at most: sensors.bmc).
MAX_PLATFORM_UPDATE_PERIOD_S = 60.0


class AgentLink:
    """This process's subscription to the agent at one socket: its readings in shared memory, read on the
    span path (no thread), or, where the agent shares none, pushed on the socket to a thread that keeps
    :attr:`values` current. A thread runs too while a lost agent is tried again.

    Args:
        path: The agent's socket.
        sock: A subscribed socket (from :func:`subscribe`, whose zones are checked); None with ``shared``.
        answer: The agent's answer (its zones).
        readings: Readings received with the answer (the newest is the current value).
        shared: The agent's segment, mapped.
    """

    def __init__(
        self,
        path: str,
        sock: socket.socket | None,
        answer: dict[str, Any],
        readings: list[dict[str, Any]],
        shared: SharedReadings | None = None,
    ) -> None:
        self.path = path
        self.zones: list[dict[str, Any]] = list(answer["zones"])
        self.zone_ids = [str(z.get("id")) if isinstance(z, dict) else None for z in self.zones]
        self._wraps_uj = wraps_of(self.zones)
        self.interval_s = interval_s_of(answer)
        #: The newest raw counter values by zone, or None while the agent is away.
        self.values: tuple[int | None, ...] | None = None
        for reading in readings:
            self.values = values_of(reading, self._wraps_uj) or self.values
        self._shared = shared
        if shared is not None:
            self.values = shared.latest[2]
        #: When :attr:`values` arrived (monotonic seconds), and how old they may be before they are not used.
        self.values_at_s = time.monotonic()
        self.stale_s = self._stale_s()
        self._sock: socket.socket | None = sock
        self._lock = threading.Lock()
        self._closed = False
        self._users = 0
        self._said_other_zones = False
        self._said_lost = False
        self._pid = os.getpid()
        self._thread: threading.Thread | None = None
        if shared is None:
            self._thread = self._start_thread()

    def _start_thread(self) -> threading.Thread:
        thread = threading.Thread(target=self._run, name="otel-joules-agent", daemon=True)
        thread.start()
        return thread

    def current(self) -> tuple[int | None, ...] | None:
        """The newest raw values by zone; None while the agent is away or its newest reading is too old to stand for now."""
        shared = self._shared
        if shared is None:
            values = self.values
            if values is None or time.monotonic() - self.values_at_s > self.stale_s:
                return None
            return values
        latest = shared.latest
        now_s = time.monotonic()
        if shared.sequence() != latest[0]:
            refreshed = shared.refresh(now_s, self._frozen_s())
            if isinstance(refreshed, str):
                self._lose_shared(shared, refreshed)
                return None
            latest = refreshed
            self.values = latest[2]
        age_s = now_s - latest[1]
        if age_s > self.stale_s:
            if age_s > self._silence_s():
                self._lose_shared(shared, f"no new reading for {age_s:.1f} s")
            return None
        return latest[2]

    def _lose_shared(self, shared: SharedReadings, reason: str) -> None:
        """The agent behind ``shared`` is lost: say so once, and try again in a thread (one at a time)."""
        with self._lock:
            if self._shared is not shared:
                return  # another thread of this process found it first
            self._shared = None
            self.values = None
            self._say_lost(reason)
            if self._thread is None and not self._closed:
                self._thread = self._start_thread()

    def acquire(self) -> None:
        """One more channel uses this link."""
        with self._lock:
            self._users += 1

    def release(self) -> None:
        """A channel is done with this link; the last one closes it."""
        with self._lock:
            self._users -= 1
            last = self._users <= 0
        if last:
            self.close()

    def _run(self) -> None:
        while not self._closed:
            with self._lock:
                if self._shared is not None:
                    self._thread = None  # back in shared memory: no thread (a later loss starts one)
                    return
            sock = self._sock
            try:
                if sock is None:
                    if not self._reconnect():
                        time.sleep(RECONNECT_S)
                    continue
                reason = self._receive(sock)
            except Exception as exc:  # noqa: BLE001 - whatever the agent sends, this thread goes on
                reason = f"{type(exc).__name__} while reading it"
                if sock is None:
                    time.sleep(RECONNECT_S)
                    continue
            if self._closed:
                return
            self._lost(sock, reason)

    def _frozen_s(self) -> float:
        return max(FROZEN_MIN_S, FROZEN_INTERVALS * self.interval_s)

    def _stale_s(self) -> float:
        return max(STALE_MIN_S, STALE_INTERVALS * self.interval_s)

    def _silence_s(self) -> float:
        """How long without a complete reading means the agent hangs (or dribbles)."""
        return max(SILENCE_MIN_S, SILENT_INTERVALS * self.interval_s)

    def _receive(self, sock: socket.socket) -> str:
        """Keep :attr:`values` current from ``sock`` until it fails; why it did.

        A reading must be complete within the silence deadline (bytes trickling in do not count), and
        the readings must change: the same one for :data:`FROZEN_INTERVALS` intervals means the agent is lost.
        """
        buffer = bytearray()
        silence_s = self._silence_s()
        frozen_s = self._frozen_s()
        last_reading_s = changed_s = time.monotonic()
        while not self._closed:
            now_s = time.monotonic()
            remaining_s = last_reading_s + silence_s - now_s
            if remaining_s <= 0:
                return f"no complete reading for {silence_s:g} s"
            sock.settimeout(remaining_s)
            try:
                chunk = sock.recv(MAX_REPLY_BYTES)
            except socket.timeout:
                return f"no complete reading for {silence_s:g} s"
            except OSError as exc:
                return exc.strerror or str(exc)
            if not chunk:
                return "it closed the connection"
            buffer += chunk
            try:
                messages = decode_frames(buffer, MAX_REPLY_BYTES)
            except ProtocolError as exc:
                return f"broken reading: {exc}"
            for message in messages:
                values = values_of(message, self._wraps_uj)
                if values is None:
                    return "broken reading"
                now_s = last_reading_s = time.monotonic()
                if values != self.values:
                    changed_s = now_s
                    # Only a change makes a reading fresh: a repeated one stands for no later instant.
                    self.values_at_s = now_s
                elif now_s - changed_s >= frozen_s:
                    return f"its readings have not changed for {now_s - changed_s:.1f} s"
                self.values = values
        return "closed"

    def _lost(self, sock: socket.socket, reason: str) -> None:
        self.values = None
        self._sock = None
        try:
            sock.close()
        except OSError:
            pass
        self._say_lost(reason)

    def _say_lost(self, reason: str) -> None:
        # Said once per process: a flapping or hostile agent must not flood the application's log.
        log = _log.info if self._said_lost else _log.warning
        self._said_lost = True
        log(
            "otel-joules: lost the otel-joules agent at %s (%s): spans and metrics carry ESTIMATES "
            "(energy.source = estimate: CPU time x per-CPU watts, memory size x W/GB) until it is back; trying again every %g s.",
            self.path,
            reason,
            RECONNECT_S,
        )

    def _reconnect(self) -> bool:
        try:
            answer, sock, readings, shared = connect(self.path)
        except AgentUnavailable:
            return False
        zone_ids = [str(z.get("id")) if isinstance(z, dict) else None for z in answer["zones"]]
        if not self._same_positions(answer["zones"]):
            if sock is not None:
                sock.close()
            if not self._said_other_zones:
                self._said_other_zones = True
                _log.warning(
                    "otel-joules: the otel-joules agent at %s is back but serves other zones (%s, was %s): spans stay "
                    "estimates in this process.",
                    self.path,
                    zone_ids,
                    self.zone_ids,
                )
            return False
        if self._closed:
            if sock is not None:
                sock.close()
            return True
        # The GPUs may differ (added by an upgraded agent, or not read by this one): what follows checks against these.
        self.zones, self.zone_ids, self._wraps_uj = list(answer["zones"]), zone_ids, wraps_of(answer["zones"])
        self.interval_s = interval_s_of(answer)
        self.stale_s = self._stale_s()
        if shared is not None:
            self.values = shared.latest[2]
            with self._lock:
                self._shared = shared
        else:
            assert sock is not None
            values = None
            for reading in readings:
                values = values_of(reading, self._wraps_uj) or values
            if values is None:
                sock.close()
                return False
            self._sock = sock
            self.values = values
            self.values_at_s = time.monotonic()
        _log.info("otel-joules: the otel-joules agent at %s is back: spans are measured again.", self.path)
        return True

    def _same_positions(self, zones: list[Any]) -> bool:
        """Whether an agent that came back with ``zones`` keeps every channel's position: the same zones (id, device
        and wrap range), except GPUs or a platform reading added or gone at the end (they come after the RAPL zones).
        A channel of a zone gone then reads as failed; a zone added is not read by this process's meter."""
        common = min(len(zones), len(self.zones))
        if [_zone_key(z) for z in zones[:common]] != [_zone_key(z) for z in self.zones[:common]]:
            return False
        return all(_is_gpu(z) or _is_platform(z) for z in [*zones[common:], *self.zones[common:]])

    def close(self) -> None:
        """Stop the thread and close the connection."""
        self._closed = True
        self.values = None
        self._shared = None
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        if _links.get(self.path) is self:
            del _links[self.path]

    def after_fork_in_child(self) -> None:
        """The parent's thread does not exist here and its socket is shared: subscribe afresh (once per fork)."""
        if self._pid == os.getpid():
            return
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._thread = None
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()  # the child's copy only: the parent's connection goes on
        # A shared segment stays mapped in the child: it reads on with no thread.
        if not self._closed and self._shared is None:
            # The last values stand (a reading at most one interval old) until the new subscription's first.
            self._thread = self._start_thread()


#: The link per socket path of this process, shared by every meter's channels.
_links: dict[str, AgentLink] = {}
_links_lock = threading.Lock()


def link_to(path: str) -> AgentLink:
    """This process's link to the agent at ``path``, subscribing if there is none yet.

    Raises:
        AgentUnavailable: the agent cannot be used (why, and what to do).
    """
    with _links_lock:
        link = _links.get(path)
        if link is not None and not link._closed and link.values is not None:
            return link
        answer, sock, readings, shared = connect(path)
        link = _links[path] = AgentLink(path, sock, answer, readings, shared)
        if link.values is None:
            link.close()
            raise AgentUnavailable(f"the agent at {path} sent no usable reading")
        return link


class AgentChannel(Channel):
    """One RAPL zone's ``energy_uj`` as the agent last pushed it; None while the agent is away."""

    def __init__(self, domain: Domain, link: AgentLink, index: int, wrap_uj: int, max_power_watts: float) -> None:
        super().__init__(domain)
        self._link = link
        self._index = index
        self._wrap_uj = wrap_uj
        self._max_power_watts = max_power_watts
        self._max_read_interval_s = (wrap_uj / 1e6) / max_power_watts / _READS_PER_WRAP
        link.acquire()
        self._released = False

    @property
    def wrap_uj(self) -> int:
        """The zone's ``max_energy_range_uj``, as the agent reported it."""
        return self._wrap_uj

    @property
    def max_power_watts(self) -> float:
        """The zone's power bound, as the agent reported it."""
        return self._max_power_watts

    @property
    def max_readinterval_s_of(self) -> float:
        """A quarter of the time the counter needs to wrap at the zone's power bound."""
        return self._max_read_interval_s

    @property
    def may_be_away(self) -> bool:
        """The agent may go away: :meth:`read_uj` then returns None and standby estimates stand in."""
        return True

    @property
    def shared_reading(self) -> tuple[AgentLink, int]:
        """The link's reading (:meth:`AgentLink.current`), this zone's position in it: a snapshot reads the link once
        for all of the agent's zones."""
        return self._link, self._index

    def read_uj(self) -> int | None:  # type: ignore[override]
        """The zone's counter in the agent's newest reading; None while the agent is away or its reading is stale.

        Raises:
            SensorReadError: the agent could not read this zone, or sent a value outside its range.
        """
        values = self._link.current()
        if values is None:
            return None  # away, or its newest reading is too old to stand for now
        # Past the end: a GPU the agent no longer serves since it came back (its channel reads as failed).
        value = values[self._index] if self._index < len(values) else None
        if value is None or value < 0 or value > self._wrap_uj:
            raise SensorReadError(f"the otel-joules agent could not read {self.domain.hw_id} ({value!r})")
        return value

    def reset_after_fork(self) -> None:
        """Subscribe afresh in a forked child."""
        self._link.after_fork_in_child()

    def close(self) -> None:
        """Release the link (the last channel closes it)."""
        if not self._released:
            self._released = True
            self._link.release()


#: The kind of each ``hw_type`` the agent sends (its wire format carries hw.type), from the one table.
_KINDS_BY_HW_TYPE = {hw_type.value: kind for kind, hw_type in HW_TYPES.items()}


def discover(settings: Settings) -> Discovery:
    """The agent's zones as channels, or an :class:`Unavailable` saying why the agent cannot be used.

    Never raises. With no socket at ``settings.agent_socket`` the discovery is empty (nothing to say:
    the caller decides whether an agent would have helped).
    """
    found = Discovery()
    path = settings.agent_socket
    if not os.path.lexists(path) and not _parent_hidden(path):
        return found
    try:
        link = link_to(path)
    except AgentUnavailable as exc:
        if exc.reason.startswith("no agent socket"):
            return found
        found.unavailable.append(Unavailable(WHAT, exc.reason, exc.remedy))
        return found
    except Exception as exc:  # noqa: BLE001 - an agent's answer must not break the application
        found.unavailable.append(Unavailable(WHAT, f"the agent at {path} could not be used: {type(exc).__name__}: {exc}"))
        return found
    try:
        for index, zone in enumerate(link.zones):
            if _is_gpu(zone):
                continue  # the GPUs go to the GPU discovery, which knows which ones this process sees (served_gpus)
            parent = zone.get("hw_parent")
            platform = _is_platform(zone)
            breadth = _platform_breadth(zone) if platform else Breadth.NONE
            domain = Domain(
                id=str(zone["id"]),
                kind=_KINDS_BY_HW_TYPE.get(str(zone.get("hw_type")), KIND_CPU),
                hw_name=str(zone.get("hw_name", zone["id"])),
                hw_id=str(zone.get("hw_id", zone["id"])),
                method=Method.COUNTER,
                # A platform reading is never in the total, whatever an agent says: the components count.
                in_total=bool(zone.get("in_total", True)) and not platform,
                # The agent reports only every interval (a span shorter than that is quantised); a BMC's reading
                # moves once per poll.
                update_period_s=max(RAPL_UPDATE_PERIOD_S, link.interval_s, _platform_period_s(zone) if platform else 0.0),
                hw_parent=str(parent) if parent and not platform else None,
                via_agent=True,
                source=f"{'BMC' if breadth is Breadth.BMC else 'RAPL (powercap)'} through otel-joules agent",
                covers=str(zone.get("covers", "")),
                breadth=breadth,
            )
            wrap_uj, max_power_watts = zone_limits(zone)
            found.channels.append(AgentChannel(domain, link, index, wrap_uj, max_power_watts))
    except Exception as exc:  # noqa: BLE001 - an agent's odd description must not break the application
        for channel in found.channels:
            channel.close()
        link.close()
        found.channels = []
        found.unavailable.append(Unavailable(WHAT, f"the agent at {path} described its zones badly: {exc}", ""))
    return found


def _zone_key(zone: dict[str, Any]) -> tuple[object, object, int]:
    """What must stay the same for a zone at a position across the agent's restarts: its id, device and wrap range."""
    return zone.get("id"), zone.get("hw_id"), zone_limits(zone)[0]


def _is_gpu(zone: dict[str, Any]) -> bool:
    return zone.get("hw_type") == HardwareType.GPU.value


def _is_platform(zone: dict[str, Any]) -> bool:
    """The agent's BMC reading: the whole platform (``hw_type`` enclosure)."""
    return _KINDS_BY_HW_TYPE.get(str(zone.get("hw_type"))) == KIND_PLATFORM


def _platform_breadth(zone: dict[str, Any]) -> Breadth:
    """A platform zone's breadth as the agent says it; a BMC's where it says none usable (the platform reading an
    agent reads beyond RAPL's)."""
    value = zone.get("breadth")
    if isinstance(value, int) and not isinstance(value, bool) and value in tuple(Breadth) and value != Breadth.NONE:
        return Breadth(value)
    return Breadth.BMC


def _platform_period_s(zone: dict[str, Any]) -> float:
    """A platform zone's update period (its BMC's poll interval), checked: 0 where it gives none usable."""
    period_s = zone.get("update_period_s")
    if isinstance(period_s, bool) or not isinstance(period_s, (int, float)) or not 0 < period_s <= MAX_PLATFORM_UPDATE_PERIOD_S:
        return 0.0
    return float(period_s)


def served_gpus(settings: Settings) -> dict[str, Callable[[GpuInfo], Channel]]:
    """The GPUs the agent at ``settings.agent_socket`` serves, by UUID: each makes the channel that reads a GPU
    (described as NVML describes it to this process, ``energy.agent.domains`` naming it) from the agent's
    readings. Empty where this process has no link to that agent (it reads RAPL itself, or no agent is used)
    or the agent serves no GPU. Makes no connection: the link :func:`discover` made is used."""
    with _links_lock:
        link = _links.get(settings.agent_socket)
    if link is None or link._closed:
        return {}
    served: dict[str, Callable[[GpuInfo], Channel]] = {}
    for index, zone in enumerate(link.zones):
        if not _is_gpu(zone) or not isinstance(zone.get("hw_id"), str):
            continue
        wrap_uj, max_power_watts = zone_limits(zone)

        def make(gpu: GpuInfo, index: int = index, wrap_uj: int = wrap_uj, max_power_watts: float = max_power_watts) -> Channel:
            domain = dataclasses.replace(
                gpu_domain(gpu, Method.COUNTER),
                # The agent reads every period (at least NVML's own) and publishes every interval.
                update_period_s=max(ENERGY_COUNTER_UPDATE_PERIOD_S, link.interval_s),
                via_agent=True,
                source="NVML through otel-joules agent",
            )
            return AgentChannel(domain, link, index, wrap_uj, max_power_watts)

        served[str(zone["hw_id"])] = make
    return served


def _parent_hidden(path: str) -> bool:
    """True when the socket's directory exists but this user may not look inside (a 0750 runtime directory)."""
    parent = os.path.dirname(path) or "."
    return os.path.isdir(parent) and not os.access(parent, os.X_OK)

