"""The agent's one-thread event loop, and :func:`serve`, which sets it up and runs it.

The loop serves every client from one thread with bounded work per turn: at most
:data:`ACCEPTS_PER_TURN` connections accepted, one bounded ``recv`` per readable client, pushes
that never block (connections over a uid's limits are closed at once, unanswered; a client that stops reading is dropped once :data:`MAX_PENDING_OUT_BYTES`
pile up). Each uid may open :data:`CONNECTS_PER_S` connections a second (burst
:data:`CONNECT_BURST`) and hold :data:`MAX_CLIENTS_PER_UID` at once; a client has
:data:`SUBSCRIBE_DEADLINE_S` to subscribe and makes exactly one request. So a client that floods
costs the agent a bounded amount per turn and the others keep their readings on time. The GPUs, whose
library may stall for seconds, are read off this thread (:mod:`otel_joules.agent.devices`): a reading
takes their newest values. So is the BMC (:mod:`otel_joules.sensors.bmc`, polled in threads of its own
with timeouts): a reading takes its poller's latest value, null once that is older than a few polls.
"""

from __future__ import annotations

import logging
import os
import random
import selectors
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from otel_joules.agent.devices import GPU_READ_PERIOD_S, DeviceReader, ServedGpu, open_gpus
from otel_joules.agent.setup import (
    DEFAULT_MIN_INTERVAL_MS,
    MIN_INTERVAL_CEILING_MS,
    MIN_INTERVAL_FLOOR_MS,
    AgentSetupError,
    bind_socket,
    drop_privileges,
    open_counters,
    open_runtime_dir,
    prepare_socket_path,
    resolve_group,
    resolve_user,
)
from otel_joules.config import DEFAULT_AGENT_SOCKET, Settings
from otel_joules.errors import SensorReadError
from otel_joules.sensors.agent_protocol import (
    GPUS,
    MAX_AGENT_POWER_WATTS,
    MAX_REQUEST_BYTES,
    MAX_REQUEST_DEPTH,
    MAX_WRAP_UJ,
    OP_SUBSCRIBE,
    PLATFORM_POWER,
    PROTOCOL_VERSION,
    SHARED_MEMORY,
    ProtocolError,
    decode_frames,
    encode,
)
from otel_joules.sensors.agent_shm import LAYOUT_VERSION, SegmentWriter
from otel_joules.sensors.base import Channel
from otel_joules.sensors.bmc import REDFISH_DOMAIN

_log = logging.getLogger("otel_joules")

ACCEPTS_PER_TURN = 256
MAX_CLIENTS = 256
MAX_CLIENTS_PER_UID = 16
CONNECTS_PER_S = 10.0
CONNECT_BURST = 20.0
SUBSCRIBE_DEADLINE_S = 2.0
MAX_PENDING_OUT_BYTES = 65536
#: Readings are floored to a multiple of this many uJ (docs/measuring.md, the side channel): a zone's
#: value then says nothing finer, while a span of a second at a few watts is off by a hundredth of a percent.
READING_RESOLUTION_UJ = 1000
_SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)


@dataclass
class AgentClient:
    """One connected client of the agent: its socket, its peer uid, and the bytes waiting each way."""

    sock: socket.socket
    uid: int
    accepted_s: float
    inbox: bytearray = field(default_factory=bytearray)
    outbox: bytearray = field(default_factory=bytearray)
    subscribed: bool = False
    #: What it asked for beyond the RAPL zones and this agent serves: (the GPUs, the BMC's platform reading);
    #: its readings carry them after the RAPL zones, in that order.
    view: tuple[bool, bool] = (False, False)


@dataclass
class TokenBucket:
    """One uid's token bucket of connections: how many more it may open now, refilled at CONNECTS_PER_S."""

    tokens: float
    updated_s: float


def _zone_description(channel: Channel) -> dict[str, object]:
    return _describe(channel, channel.wrap_uj, channel.max_power_watts)


def _gpu_description(gpu: ServedGpu) -> dict[str, object]:
    """A GPU as a zone: ``hw_type`` gpu and its UUID as ``hw_id``, by which a client finds the GPUs it sees."""
    return _describe(gpu.channel, ServedGpu.WRAP_UJ, gpu.max_power_watts)


def _platform_description(channel: Channel) -> dict[str, object]:
    """The BMC's reading as a zone: kind platform (``hw_type`` enclosure), not in the total (the components
    count; the client's meter shares what they do not cover), its joules (the BMC's counter, else its power
    integrated since the agent started: they never wrap, so the protocol's largest range), at most the protocol's
    power bound. Its name says the protocol only:
    the BMC's address, like its credentials, stays in the agent."""
    domain = channel.domain
    protocol = "Redfish" if domain.id == REDFISH_DOMAIN else "IPMI DCMI"
    return {
        **_describe(channel, MAX_WRAP_UJ, MAX_AGENT_POWER_WATTS),
        "hw_name": f"BMC ({protocol}) through otel-joules agent",
        "hw_id": domain.id,
        "hw_parent": None,
        "in_total": False,
        "update_period_s": domain.update_period_s,
    }


def _describe(channel: Channel, wrap_uj: int | None, max_power_watts: float) -> dict[str, object]:
    domain = channel.domain
    return {
        "id": domain.id,
        "hw_type": domain.hw_type.value,
        "hw_name": domain.hw_name,
        "hw_id": domain.hw_id,
        "hw_parent": domain.hw_parent,
        "in_total": domain.in_total,
        "covers": domain.covers,
        # A platform reading's breadth (sensors.base.Breadth), which clients rank it by.
        "breadth": int(domain.breadth),
        "wrap_uj": wrap_uj,
        # A zone claiming more (a firmware's placeholder) is served at the protocol's ceiling, which clients accept.
        "max_power_watts": min(max_power_watts, MAX_AGENT_POWER_WATTS),
    }



def _peer(sock: socket.socket) -> tuple[int, int, int, tuple[int, ...]]:
    """The peer's (pid, uid, gid, supplementary gids) as the kernel saw them at connect()."""
    pid, uid, gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    groups: tuple[int, ...] = ()
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, _SO_PEERGROUPS, 4 * 1024)
        groups = struct.unpack(f"{len(raw) // 4}I", raw[: len(raw) // 4 * 4])
    except OSError:
        groups = _proc_groups(pid)
    return pid, uid, gid, groups


def _proc_groups(pid: int) -> tuple[int, ...]:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("Groups:"):
                    return tuple(int(g) for g in line.split()[1:])
    except (OSError, ValueError):
        pass
    return ()


class AgentServer:
    """The agent's socket and loop over counters already opened.

    Args:
        listener: The bound, listening socket.
        channels: The RAPL zones read at every tick.
        gid: Members of this group may subscribe (and root).
        group_name: The group's name, for refusals.
        min_interval_s: Time between readings: clients get nothing finer.
        resolution_uj: Readings are floored to a multiple of this (:data:`READING_RESOLUTION_UJ`).
        gpus: The host's GPUs, served after the RAPL zones to clients that ask (``"gpus": true``), read by
            ``gpu_reader`` off the loop.
        gpu_reader: The thread that reads ``gpus`` (in their order); its newest values go into each reading.
        platform: The BMC's platform readings (:class:`~otel_joules.sensors.bmc.BmcChannel`, read from their
            pollers' latest values: never waiting for the BMC), served after the GPUs to clients that ask
            (``"platform_power": true``).
        chance: Where the read instant within each interval and the publication delay come from, as fractions
            of an interval in [0, 1) (unpredictable by default). Only for measuring the side channel
            (benchmarks/side_channel.py gives ``lambda: 0.0``: the fixed grid the agent once had); the command
            line offers no way to set it.
    """

    def __init__(
        self,
        listener: socket.socket,
        channels: Sequence[Channel],
        gid: int,
        group_name: str,
        min_interval_s: float,
        resolution_uj: int | None = None,
        gpus: Sequence[ServedGpu] = (),
        gpu_reader: DeviceReader | None = None,
        chance: Callable[[], float] | None = None,
        platform: Sequence[Channel] = (),
    ) -> None:
        self._listener = listener
        listener.setblocking(False)
        self._channels = list(channels)
        self._gpu_reader = gpu_reader if gpus else None
        self._platform = list(platform)
        self._gid = gid
        self._group_name = group_name
        self._interval_s = min_interval_s
        self._resolution_uj = READING_RESOLUTION_UJ if resolution_uj is None else resolution_uj
        self._selector = selectors.DefaultSelector()
        self._selector.register(listener, selectors.EVENT_READ, None)
        self._clients: dict[int, AgentClient] = {}
        self._buckets: dict[int, TokenBucket] = {}
        self._refused_uids: set[int] = set()
        self._said_client_error = False
        #: Unpredictable to clients: the read and publication instants must not be guessable.
        self._chance = random.SystemRandom().random if chance is None else chance
        self._stopping = False
        zones = [_zone_description(c) for c in self._channels]
        gpu_zones = [_gpu_description(g) for g in gpus] if self._gpu_reader is not None else []
        platform_zones = [_platform_description(c) for c in self._platform]
        #: The views served, by what the client asked for: (the GPUs, the platform). A client that did not ask
        #: for the GPUs gets none (it reads its GPUs itself, and would count them twice); one that did not ask
        #: for the platform (an older library) gets no zone it does not know what to do with.
        views = [(g, p) for g in (False, True) if not g or gpu_zones for p in (False, True) if not p or platform_zones]
        #: Each view's positions in a reading (RAPL, then GPUs, then the platform).
        self._positions: dict[tuple[bool, bool], list[int]] = {}
        all_zones: dict[tuple[bool, bool], list[dict[str, object]]] = {}
        gpus_at = range(len(zones), len(zones) + len(gpu_zones))
        platform_at = range(gpus_at.stop, gpus_at.stop + len(platform_zones))
        for view in views:
            self._positions[view] = [*range(len(zones)), *(gpus_at if view[0] else ()), *(platform_at if view[1] else ())]
            every = zones + gpu_zones + platform_zones
            all_zones[view] = [every[i] for i in self._positions[view]]
        answers = {
            view: {"ok": True, "version": PROTOCOL_VERSION, "interval_ms": round(min_interval_s * 1e3, 3), "zones": all_zones[view]}
            for view in views
        }
        self._answers = {view: encode(answer) for view, answer in answers.items()}
        reading = self._reading()
        self._latest = {view: encode({"uj": self._view_of(reading, view)}) for view in views}
        #: The readings in sealed shared memory, one segment per view, for clients that ask (none where the kernel
        #: offers no sealed memfd).
        self._segments: dict[tuple[bool, bool], SegmentWriter] = {}
        self._shm_answers: dict[tuple[bool, bool], bytes] = {}
        for view, positions in self._positions.items():
            segment = self._shared_segment(len(positions))
            if segment is None:
                for made in self._segments.values():
                    made.close()
                self._segments.clear()
                break
            segment.publish(self._view_of(reading, view))
            self._segments[view] = segment
            self._shm_answers[view] = encode(
                {**answers[view], SHARED_MEMORY: {"layout": LAYOUT_VERSION, "bytes": segment.size}}
            )

    def _view_of(self, values: list[int | None], view: tuple[bool, bool]) -> list[int | None]:
        """The values of one reading that ``view``'s clients get, in their zones' order."""
        return [values[i] for i in self._positions[view]]

    def _shared_segment(self, zones: int) -> SegmentWriter | None:
        try:
            return SegmentWriter(zones)
        except (OSError, AttributeError) as exc:
            _log.warning(
                "otel-joules agent: no sealed shared memory here (%s): clients get readings on the socket",
                getattr(exc, "strerror", None) or exc,
            )
            return None

    def stop(self) -> None:
        """End :meth:`run` at its next turn (safe from a signal handler)."""
        self._stopping = True

    def run(self) -> None:
        """Serve until :meth:`stop`.

        One reading per interval, read at a random instant within it and published after a random
        fraction of an interval more (in order): clients get the same rate, but neither the instant a
        value was read nor a fixed grid to align an attack on (docs/measuring.md).
        """
        if self._gpu_reader is not None:
            self._gpu_reader.start()
        interval_s = self._interval_s
        interval_start_s = time.monotonic()
        next_read_s = interval_start_s + self._chance() * interval_s
        pending: list[tuple[float, list[int | None]]] = []  # (publish at, values), in order
        while not self._stopping:
            now_s = time.monotonic()
            if now_s >= next_read_s:
                publish_at_s = max(now_s + self._chance() * interval_s, pending[-1][0] if pending else 0.0)
                pending.append((publish_at_s, self._reading()))
                interval_start_s += interval_s
                if interval_start_s + interval_s <= now_s:  # fell behind (suspend, a stall): no burst of catch-up readings
                    interval_start_s = now_s
                next_read_s = interval_start_s + self._chance() * interval_s
            while pending and pending[0][0] <= now_s:
                self._publish(pending.pop(0)[1])
            wake_s = min(next_read_s, pending[0][0]) if pending else next_read_s
            for key, mask in self._selector.select(max(0.0, wake_s - time.monotonic())):
                if key.data is None:
                    self._accept_some()
                    continue
                self._serve(key.data, mask)
            self._expire(time.monotonic())
        for client in list(self._clients.values()):
            self._close(client)
        if self._gpu_reader is not None:
            self._gpu_reader.stop()
        for segment in self._segments.values():
            segment.mark_stopped()
            segment.close()

    def _serve(self, client: AgentClient, mask: int) -> None:
        """One client's turn; whatever goes wrong in it ends that connection only, never the agent."""
        try:
            if mask & selectors.EVENT_READ:
                self._receive(client)
            if mask & selectors.EVENT_WRITE and client.sock.fileno() in self._clients:
                self._flush(client)
        except Exception as exc:  # noqa: BLE001 - one client's frame must not stop the others' readings
            if not self._said_client_error:
                self._said_client_error = True
                _log.warning(
                    "otel-joules agent: closed a connection of uid %d after an error in serving it (%s: %s); "
                    "the agent goes on (later ones are not said)",
                    client.uid,
                    type(exc).__name__,
                    exc,
                )
            self._close(client)

    # -- readings ---------------------------------------------------------------------------------

    def _reading(self) -> list[int | None]:
        """One reading: the RAPL zones read now, then the GPUs' newest values (read off this thread), then the BMC's
        (its poller's latest, null while it has none recent enough)."""
        values: list[int | None] = []
        resolution_uj = self._resolution_uj
        for channel in self._channels:
            try:
                values.append(channel.read_uj() // resolution_uj * resolution_uj)
            except SensorReadError:
                values.append(None)
        if self._gpu_reader is not None:
            for value in self._gpu_reader.latest(time.monotonic()):
                values.append(None if value is None else value // resolution_uj * resolution_uj)
        for channel in self._platform:
            try:
                platform_uj = channel.read_uj()
            except Exception:  # noqa: BLE001 - a BMC's odd state is one unread value, never the loop's end
                platform_uj = None
            values.append(None if platform_uj is None else platform_uj // resolution_uj * resolution_uj)
        return values

    def _publish(self, values: list[int | None]) -> None:
        for view, segment in self._segments.items():
            segment.publish(self._view_of(values, view))
        frames = self._latest = {view: encode({"uj": self._view_of(values, view)}) for view in self._positions}
        for client in list(self._clients.values()):
            if client.subscribed:
                client.outbox += frames[client.view]
                self._flush(client)

    def _flush(self, client: AgentClient) -> None:
        try:
            sent = client.sock.send(client.outbox)
        except BlockingIOError:
            sent = 0
        except OSError:
            self._close(client)
            return
        del client.outbox[:sent]
        if len(client.outbox) > MAX_PENDING_OUT_BYTES:
            self._close(client)  # it stopped reading: it must not make the agent keep its readings
            return
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if client.outbox else 0)
        self._selector.modify(client.sock, events, client)

    # -- connections ------------------------------------------------------------------------------

    def _accept_some(self) -> None:
        for _ in range(ACCEPTS_PER_TURN):
            try:
                sock, _address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                _log.warning("otel-joules agent: accept failed: %s", exc.strerror)
                return
            sock.setblocking(False)
            self._admit(sock)

    def _admit(self, sock: socket.socket) -> None:
        try:
            _pid, uid, gid, groups = _peer(sock)
        except OSError:
            sock.close()
            return
        if not (uid == 0 or gid == self._gid or self._gid in groups):
            self._refuse(sock, uid, f"uid {uid} is not in group {self._group_name} (gid {self._gid})")
            return
        now_s = time.monotonic()
        bucket = self._buckets.get(uid)
        if bucket is None:
            bucket = self._buckets[uid] = TokenBucket(CONNECT_BURST, now_s)
        bucket.tokens = min(CONNECT_BURST, bucket.tokens + (now_s - bucket.updated_s) * CONNECTS_PER_S)
        bucket.updated_s = now_s
        per_uid = sum(1 for c in self._clients.values() if c.uid == uid)
        if bucket.tokens < 1 or per_uid >= MAX_CLIENTS_PER_UID or len(self._clients) >= MAX_CLIENTS:
            sock.close()  # flooding: not worth an answer
            return
        bucket.tokens -= 1
        client = AgentClient(sock, uid, now_s)
        self._clients[sock.fileno()] = client
        self._selector.register(sock, selectors.EVENT_READ, client)

    def _refuse(self, sock: socket.socket, uid: int, why: str) -> None:
        try:
            sock.send(encode({"ok": False, "error": why}))
        except OSError:
            pass
        sock.close()
        if uid not in self._refused_uids and len(self._refused_uids) < 1024:
            self._refused_uids.add(uid)
            _log.warning("otel-joules agent: refused a client: %s", why)

    def _receive(self, client: AgentClient) -> None:
        try:
            chunk = client.sock.recv(MAX_REQUEST_BYTES + 4 - len(client.inbox))
        except BlockingIOError:
            return
        except OSError:
            self._close(client)
            return
        if not chunk or client.subscribed:
            self._close(client)  # gone, or a second request: the protocol has one
            return
        client.inbox += chunk
        try:
            messages = decode_frames(client.inbox, MAX_REQUEST_BYTES, MAX_REQUEST_DEPTH)
        except ProtocolError:
            self._close(client)
            return
        if not messages:
            if len(client.inbox) >= MAX_REQUEST_BYTES + 4:
                self._close(client)
            return
        request = messages[0]
        if len(messages) > 1 or client.inbox or request.get("op") != OP_SUBSCRIBE:
            self._close(client)
            return
        if request.get("version") != PROTOCOL_VERSION:
            self._refuse_client(client, f"protocol version {request.get('version')!r} unknown; this agent speaks {PROTOCOL_VERSION}")
            return
        client.view = (
            request.get(GPUS) is True and (True, False) in self._positions,
            request.get(PLATFORM_POWER) is True and (False, True) in self._positions,
        )
        if request.get(SHARED_MEMORY) is True and self._segments:
            self._hand_segment(client)
            return
        client.subscribed = True
        client.outbox += self._answers[client.view] + self._latest[client.view]
        self._flush(client)

    def _hand_segment(self, client: AgentClient) -> None:
        """The answer with the read-only segment attached; the connection then ends (the segment is the feed)."""
        try:
            socket.send_fds(client.sock, [self._shm_answers[client.view]], [self._segments[client.view].client_fd])
        except OSError:
            pass  # gone already, or its buffer full at its first byte: it reconnects
        self._close(client)

    def _refuse_client(self, client: AgentClient, why: str) -> None:
        self._forget(client)
        self._refuse(client.sock, client.uid, why)

    def _expire(self, now_s: float) -> None:
        for client in [c for c in self._clients.values() if not c.subscribed and now_s - c.accepted_s > SUBSCRIBE_DEADLINE_S]:
            self._close(client)

    def _forget(self, client: AgentClient) -> None:
        if self._clients.pop(client.sock.fileno(), None) is not None:
            try:
                self._selector.unregister(client.sock)
            except (KeyError, ValueError):
                pass

    def _close(self, client: AgentClient) -> None:
        self._forget(client)
        try:
            client.sock.close()
        except OSError:
            pass


def serve(
    socket_path: str = DEFAULT_AGENT_SOCKET,
    group: str = "otel-joules",
    min_interval_ms: float = DEFAULT_MIN_INTERVAL_MS,
    user: str | None = None,
    settings: Settings | None = None,
    platform: Sequence[Channel] = (),
) -> int:
    """Set up and run the agent until SIGTERM or SIGINT; the exit code.

    ``platform``: the BMC's readings, opened by the caller as root from the BMC file
    (:func:`otel_joules.sensors.bmc.discover`), served to clients that ask; closed here on the way out.

    Raises:
        AgentSetupError: it cannot start safely (the message says why and what to do).
    """
    # Not even bytecode caches: the agent writes nothing outside its runtime directory.
    sys.dont_write_bytecode = True
    if not MIN_INTERVAL_FLOOR_MS <= min_interval_ms <= MIN_INTERVAL_CEILING_MS:
        raise AgentSetupError(
            f"--min-interval-ms {min_interval_ms:g} is outside {MIN_INTERVAL_FLOOR_MS}..{MIN_INTERVAL_CEILING_MS}: "
            f"give at least {MIN_INTERVAL_FLOOR_MS} (10x RAPL's 1 ms update; finer readings serve power side channels)"
        )
    if not os.path.isabs(socket_path):
        raise AgentSetupError(f"--socket {socket_path!r} is not an absolute path")
    gid, group_name = resolve_group(group)
    switch_to = resolve_user(user) if user is not None else None
    settings = settings or Settings.from_env()
    runtime_dir, name = os.path.split(socket_path)
    if name in ("", ".", ".."):
        raise AgentSetupError(f"--socket {socket_path!r} names a directory: give the socket's file path, such as {DEFAULT_AGENT_SOCKET}")
    # Everything from here on works relative to this descriptor: a directory swapped after its check changes nothing.
    dir_fd = open_runtime_dir(runtime_dir, gid)
    try:
        prepare_socket_path(dir_fd, name, socket_path)
        channels = open_counters(settings)
        # The GPUs too, opened now as root like RAPL; read in a thread that starts after the privilege drop.
        gpus, first_uj = open_gpus(settings)
        gpu_reader = DeviceReader(
            [g.channel for g in gpus], max(GPU_READ_PERIOD_S, min_interval_ms / 1e3), first_uj
        ) if gpus else None
        listener = bind_socket(dir_fd, name, gid, socket_path)
        server = AgentServer(
            listener, channels, gid, group_name, min_interval_ms / 1e3, gpus=gpus, gpu_reader=gpu_reader, platform=platform
        )
        drop_privileges(switch_to)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: server.stop())
        _log.warning(
            "otel-joules agent: serving %d RAPL zones (%s)%s%s on %s to group %s (gid %d), a reading every %g ms",
            len(channels),
            ", ".join(c.domain.id for c in channels),
            f" and {len(gpus)} GPUs ({', '.join(g.channel.domain.id for g in gpus)}, read every "
            f"{gpu_reader.period_s * 1e3:g} ms)" if gpu_reader is not None else "",
            f" and the platform's reading ({', '.join(c.domain.id for c in platform)}, to clients that ask)" if platform else "",
            socket_path,
            group_name,
            gid,
            min_interval_ms,
        )
        try:
            server.run()
        finally:
            listener.close()
            try:
                os.unlink(name, dir_fd=dir_fd)
            except OSError:
                pass  # after a switch to --user the root-owned directory is not ours to change: the next start replaces it
            for channel in [*channels, *(g.channel for g in gpus), *platform]:
                channel.close()
    finally:
        os.close(dir_fd)
    return 0
