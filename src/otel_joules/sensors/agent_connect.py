"""Connecting to ``otel-joules agent``: subscribing, checking its answer, and taking its shared memory.

Everything the agent sends is checked here before the library uses it (:func:`zone_limits`,
:func:`values_of`); nothing it sends raises anything but :class:`AgentUnavailable`.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import socket
import time
from typing import Any

from otel_joules.sensors.agent_protocol import (
    GPUS,
    PLATFORM_POWER,
    MAX_AGENT_POWER_WATTS,
    MAX_REPLY_BYTES,
    MAX_WRAP_UJ,
    OP_SUBSCRIBE,
    PROTOCOL_VERSION,
    SHARED_MEMORY,
    ProtocolError,
    decode_frames,
    encode,
)
from otel_joules.sensors.agent_shm import SegmentRefused, SharedReadings

_log = logging.getLogger("otel_joules")

#: How long discovery waits for the agent's answer and first reading (it pushes every interval_ms).
CONNECT_TIMEOUT_S = 2.0
#: Silence from the agent for this many of its intervals (at least :data:`SILENCE_MIN_S`) means it hangs.
SILENT_INTERVALS = 50
SILENCE_MIN_S = 2.0


class AgentUnavailable(Exception):
    """The agent cannot be used: ``reason`` says why, ``remedy`` what to do."""

    def __init__(self, reason: str, remedy: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.remedy = remedy


def group_of(path: str) -> str | None:
    """The name (or gid) of the group owning ``path``, if this process may stat it."""
    try:
        gid = os.stat(path).st_gid
    except OSError:
        return None
    try:
        import grp

        return grp.getgrgid(gid).gr_name
    except (ImportError, KeyError):
        return str(gid)


def join_group_remedy(group: str | None) -> str:
    """How a user gets access to the agent: join its group."""
    who = group or "the agent's group (otel-joules agent --group)"
    return (
        f"ask an administrator to add you to {who} (`sudo usermod -aG {group or 'GROUP'} $USER`), then log in again "
        "(or run `newgrp`); the counters themselves stay root-only"
    )


def subscribe(path: str, timeout_s: float = CONNECT_TIMEOUT_S) -> tuple[socket.socket, dict[str, Any], list[dict[str, Any]]]:
    """Connect to the agent at ``path`` and subscribe (to the GPUs too, where it reads any): the socket, the agent's
    answer and any readings already sent.

    Raises:
        AgentUnavailable: no agent there, access refused (by the socket's mode or by the agent), or a broken answer.
    """
    sock, answer, readings, _ = _subscribe(path, timeout_s, shared_memory=False)
    return sock, answer, readings


def _subscribe(
    path: str, timeout_s: float, shared_memory: bool
) -> tuple[socket.socket, dict[str, Any], list[dict[str, Any]], int | None]:
    """:func:`subscribe`, asking for the readings in shared memory with ``shared_memory``: then also the
    descriptor the agent attached to its answer (None if it attached none)."""
    deadline = time.monotonic() + timeout_s
    fds: list[int] = []
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | getattr(socket, "SOCK_CLOEXEC", 0))
    try:
        sock.settimeout(timeout_s)
        try:
            sock.connect(path)
        except FileNotFoundError:
            raise AgentUnavailable(f"no agent socket at {path}") from None
        except PermissionError:
            group = group_of(path)
            raise AgentUnavailable(
                f"the agent's socket {path} refuses uid {os.getuid()}: only members of "
                f"{'group ' + group if group else 'its group'} may connect",
                join_group_remedy(group),
            ) from None
        except ConnectionRefusedError:
            raise AgentUnavailable(f"nothing listens on the agent socket {path} (the agent is not running)") from None
        except OSError as exc:
            raise AgentUnavailable(f"cannot connect to the agent socket {path}: {exc.strerror or exc}") from None
        try:
            # The GPUs too: this library takes the GPUs it sees from the agent (sensors.agent.served_gpus) instead
            # of reading their energy itself. And the BMC's platform reading, which only the agent reads: the meter
            # shares what the components do not cover (attribution.uncovered). An agent without them ignores the keys.
            request: dict[str, Any] = {"op": OP_SUBSCRIBE, "version": PROTOCOL_VERSION, GPUS: True, PLATFORM_POWER: True}
            if shared_memory:
                request[SHARED_MEMORY] = True
            sock.sendall(encode(request))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the agent refused at once and closed: its answer, saying why, is still there to read
        buffer = bytearray()
        messages: list[dict[str, Any]] = []
        while not messages or (
            messages[0].get("ok") is True and len(messages) < 2 and SHARED_MEMORY not in messages[0]
        ):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AgentUnavailable(f"the agent at {path} did not answer within {timeout_s:g} s")
            sock.settimeout(remaining)
            if shared_memory:
                chunk, received, _flags, _address = socket.recv_fds(sock, MAX_REPLY_BYTES, 1)
                fds += received
            else:
                chunk = sock.recv(MAX_REPLY_BYTES)
            if not chunk:
                if messages:
                    break
                raise AgentUnavailable(f"the agent at {path} closed the connection without answering")
            buffer += chunk
            messages += decode_frames(buffer, MAX_REPLY_BYTES)
        answer, readings = messages[0], messages[1:]
        if answer.get("ok") is not True:
            error = str(answer.get("error") or "no reason given")[:300]
            group = group_of(path)
            raise AgentUnavailable(f"the agent at {path} refused this process: {error}", join_group_remedy(group))
        if (
            answer.get("version") != PROTOCOL_VERSION
            or not isinstance(answer.get("zones"), list)
            or not (readings or SHARED_MEMORY in answer)
        ):
            raise AgentUnavailable(f"the agent at {path} speaks another protocol version ({answer.get('version')!r})")
        for zone in answer["zones"]:
            try:
                zone_limits(zone)
            except ValueError as exc:
                raise AgentUnavailable(f"the agent at {path} described its zones badly: {exc}") from None
        sock.setblocking(True)
        sock.settimeout(None)
        fd = fds.pop(0) if fds else None
        return sock, answer, readings, fd
    except socket.timeout:
        sock.close()
        raise AgentUnavailable(f"the agent at {path} did not answer within {timeout_s:g} s") from None
    except (ProtocolError, OSError) as exc:
        sock.close()
        if isinstance(exc, OSError) and exc.errno == errno.ECONNRESET:
            raise AgentUnavailable(f"the agent at {path} closed the connection without answering") from None
        raise AgentUnavailable(f"the agent at {path} sent a broken answer: {exc}") from None
    except AgentUnavailable:
        sock.close()
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the agent sends, the application must not see it raise
        sock.close()
        raise AgentUnavailable(f"the agent at {path} sent a broken answer: {type(exc).__name__}") from None
    finally:
        for fd in fds:
            os.close(fd)


def connect(path: str) -> tuple[dict[str, Any], socket.socket | None, list[dict[str, Any]], SharedReadings | None]:
    """Subscribe to the agent at ``path``: its answer, and either its readings in shared memory or a socket
    pushing them (where the agent shares no memory, or hands over a segment this process refuses, said once).

    Raises:
        AgentUnavailable: the agent cannot be used (why, and what to do).
    """
    sock, answer, readings, fd = _subscribe(path, CONNECT_TIMEOUT_S, shared_memory=True)
    if SHARED_MEMORY not in answer:
        if fd is not None:
            os.close(fd)
        return answer, sock, readings, None
    sock.close()  # the agent ends the connection once the segment is handed over
    try:
        if fd is None:
            raise SegmentRefused("the agent attached no descriptor")
        shared = SharedReadings(fd, wraps_of(answer["zones"]), max(SILENCE_MIN_S, SILENT_INTERVALS * interval_s_of(answer)))
    except (SegmentRefused, OSError, ValueError) as exc:
        if path not in _said_refused:
            _said_refused.add(path)
            _log.warning(
                "otel-joules: the otel-joules agent at %s handed over shared memory this process does not map (%s): "
                "reading its readings on the socket instead.",
                path,
                exc,
            )
        sock, answer, readings, _ = _subscribe(path, CONNECT_TIMEOUT_S, shared_memory=False)
        return answer, sock, readings, None
    return answer, None, [], shared


#: Sockets whose agent's shared memory this process refused, said once each.
_said_refused: set[str] = set()


def zone_limits(zone: Any) -> tuple[int, float]:
    """A zone's (wrap range in uJ, power bound in W), checked.

    Raises:
        ValueError: not an object, or a range or bound that is not a number, not finite, not positive,
            a range above :data:`MAX_WRAP_UJ` or a bound above :data:`MAX_AGENT_POWER_WATTS`.
    """
    if not isinstance(zone, dict) or not isinstance(zone.get("id"), str):
        raise ValueError("a zone is not an object with an id")
    wrap_uj, max_power_watts = zone.get("wrap_uj"), zone.get("max_power_watts")
    if not isinstance(wrap_uj, int) or isinstance(wrap_uj, bool) or not 0 < wrap_uj <= MAX_WRAP_UJ:
        raise ValueError(f"zone {zone['id']!r} has a wrap range that is not an integer in 1..2**64 uJ")
    if (
        not isinstance(max_power_watts, (int, float))
        or isinstance(max_power_watts, bool)
        or not math.isfinite(max_power_watts)
        or not 0 < max_power_watts <= MAX_AGENT_POWER_WATTS
    ):
        raise ValueError(
            f"zone {zone['id']!r} claims a power bound outside 0..{MAX_AGENT_POWER_WATTS:g} W ({max_power_watts!r})"
        )
    return wrap_uj, float(max_power_watts)


def interval_s_of(answer: dict[str, Any]) -> float:
    """The agent's interval in seconds (1 ms if it sent none that makes sense)."""
    interval_ms = answer.get("interval_ms")
    if (
        isinstance(interval_ms, (int, float))
        and not isinstance(interval_ms, bool)
        and math.isfinite(interval_ms)
        and 1 <= interval_ms <= 60_000
    ):
        return interval_ms / 1e3
    return 0.001


def values_of(reading: dict[str, Any], wraps_uj: tuple[int, ...]) -> tuple[int | None, ...] | None:
    """The reading's values, each within its zone's range or None (a failed read); None for a broken reading."""
    values = reading.get("uj")
    if not isinstance(values, list) or len(values) != len(wraps_uj):
        return None
    checked: list[int | None] = []
    for value, wrap_uj in zip(values, wraps_uj):
        if value is None:
            checked.append(None)
        elif isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= wrap_uj:
            checked.append(value)
        else:
            return None
    return tuple(checked)


def wraps_of(zones: list[Any]) -> tuple[int, ...]:
    """Each zone's wrap range (the zones checked by :func:`zone_limits`)."""
    return tuple(zone_limits(zone)[0] for zone in zones)
