"""The wire protocol between ``otel-joules agent`` and the library, on a Unix stream socket.

Every message is one *frame*: a 4-byte big-endian unsigned length N, then N bytes of one UTF-8
JSON object. A client sends exactly one frame, at most :data:`MAX_REQUEST_BYTES` long::

    {"op": "subscribe", "version": 1, "shm": true, "gpus": true, "platform_power": true}

(``"shm": true`` is optional: it asks for the readings in shared memory, :mod:`otel_joules.sensors.agent_shm`.
``"gpus": true`` is optional too: it asks for the host's GPUs as well, after the RAPL zones, each with
``"hw_type": "gpu"`` and the GPU's UUID as ``hw_id``. A client that does not ask, or an agent that
reads no GPU, has RAPL zones only: a client that reads its GPUs itself never gets them twice.
``"platform_power": true`` asks for the BMC's whole-platform reading as well, after the GPUs: one zone with
``"hw_type": "enclosure"``, ``"in_total": false`` and ``"update_period_s"`` (the BMC's poll interval), its
value the platform's joules (the BMC's counter, else its power integrated by the agent), null while the BMC
has no recent reading. Only joules: never the BMC's address or credentials. A client that does not ask, or an agent with no BMC, has no such zone.)

The agent answers with one frame, either a refusal (and closes the connection)::

    {"ok": false, "error": "uid 1001 is not in group otel-joules (gid 990)"}

or the zones it reads, in the order of every later reading::

    {"ok": true, "version": 1, "interval_ms": 10, "zones": [
        {"id": "package_0", "hw_type": "cpu", "hw_name": "RAPL package-0", "hw_id": "intel-rapl:0",
         "hw_parent": null, "in_total": true, "covers": "...", "wrap_uj": 262143328850, "max_power_watts": 125.0}, ...]}

To a request with ``"shm": true`` an agent that can share memory answers the same, with
``"shm": {"layout": 1, "bytes": N}`` added and the segment's descriptor attached (``SCM_RIGHTS``),
and closes the connection: the segment carries the readings from then on. Otherwise it
pushes one frame per reading, every ``interval_ms`` at instants it chooses::

    {"uj": [123456789, 98765432, null]}

each value a zone's raw ``energy_uj`` (wrapping at its ``wrap_uj``; null while a read fails). The
client sends nothing more: any further byte, a frame that is not such an object, or a length above
:data:`MAX_REQUEST_BYTES` closes that connection. Agent frames are at most :data:`MAX_REPLY_BYTES`.

Neither side trusts the other's frames: a body nested deeper than the protocol ever nests
(:data:`MAX_REQUEST_DEPTH`, :data:`MAX_REPLY_DEPTH`) is refused before it is parsed (a deeply nested
body would exhaust Python's recursion), and so are ``NaN`` and ``Infinity``, which JSON does not have.
"""

from __future__ import annotations

import json
import struct
from typing import Any

#: The protocol's version, in the request and the answer.
PROTOCOL_VERSION = 1
#: The one request a client makes.
OP_SUBSCRIBE = "subscribe"
#: The request's and the answer's key for readings in shared memory.
SHARED_MEMORY = "shm"
#: The request's key for the host's GPUs as zones too (after the RAPL zones).
GPUS = "gpus"
#: The request's key for the BMC's whole-platform reading as a zone too (after the GPUs).
PLATFORM_POWER = "platform_power"
#: Longest client frame body; the subscribe request is ~40 bytes.
MAX_REQUEST_BYTES = 1024
#: Longest agent frame body (the zone list of a large multi-socket host fits many times over).
MAX_REPLY_BYTES = 65536
#: Deepest nesting of a client frame: the subscribe request is one flat object.
MAX_REQUEST_DEPTH = 1
#: Deepest nesting of an agent frame: the answer's zones are objects in a list in an object.
MAX_REPLY_DEPTH = 3
#: The largest power bound a zone may claim; the agent sends no more and the client accepts no more.
#: The meter trusts a counter's move only up to the zone's bound (more is a jump, not energy): a bound
#: far above any real CPU package or DRAM zone (the largest are rated well under 1 kW) would let a
#: broken or hostile agent pass any energy off as measured.
MAX_AGENT_POWER_WATTS = 5000.0
#: The largest wrap range a zone may claim: RAPL's counters are at most 64 bits wide.
MAX_WRAP_UJ = 2**64
#: The frame header: the body's length.
HEADER = struct.Struct(">I")


class ProtocolError(ValueError):
    """A frame that breaks the protocol (too long, not a JSON object)."""


def encode(message: dict[str, Any]) -> bytes:
    """One frame holding ``message``."""
    body = json.dumps(message, separators=(",", ":")).encode()
    return HEADER.pack(len(body)) + body


def _reject_constant(name: str) -> Any:
    raise ProtocolError(f"a frame holds {name}, which is not a JSON number")


def nesting_depth(body: bytes) -> int:
    """How deeply ``body`` (JSON text) nests arrays and objects, brackets inside strings not counted."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in body:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
    return deepest


def decode_frames(buffer: bytearray, max_body: int, max_depth: int = MAX_REPLY_DEPTH) -> list[dict[str, Any]]:
    """Take every complete frame off the front of ``buffer`` (in place) and return their objects.

    Raises:
        ProtocolError: a frame announces more than ``max_body`` bytes, nests deeper than ``max_depth``,
            holds ``NaN`` or ``Infinity``, or its body is not a JSON object.
    """
    messages: list[dict[str, Any]] = []
    while len(buffer) >= HEADER.size:
        (length,) = HEADER.unpack_from(buffer)
        if length > max_body:
            raise ProtocolError(f"a frame of {length} bytes is over the limit of {max_body}")
        if len(buffer) < HEADER.size + length:
            break
        body = bytes(buffer[HEADER.size : HEADER.size + length])
        del buffer[: HEADER.size + length]
        # Counting brackets bounds the depth from above: only a body with many is scanned.
        if body.count(b"[") + body.count(b"{") > max_depth and (depth := nesting_depth(body)) > max_depth:
            raise ProtocolError(f"a frame nests {depth} deep, deeper than the protocol's {max_depth}")
        try:
            message = json.loads(body, parse_constant=_reject_constant)
        except ProtocolError:
            raise
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise ProtocolError("a frame is not JSON") from None
        if not isinstance(message, dict):
            raise ProtocolError("a frame is not a JSON object")
        messages.append(message)
    return messages
