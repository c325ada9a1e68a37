"""The wire protocol between ``otel-joules agent`` and the library, on a Unix stream socket.

Every message is one *frame*: a 4-byte big-endian unsigned length N, then N bytes of one UTF-8
JSON object. A client sends exactly one frame, at most :data:`MAX_REQUEST_BYTES` long::

    {"op": "subscribe", "version": 1}

The agent answers with one frame, either a refusal (and closes the connection)::

    {"ok": false, "error": "uid 1001 is not in group otel-joules (gid 990)"}

or the zones it reads, in the order of every later reading::

    {"ok": true, "version": 1, "interval_ms": 10, "zones": [
        {"id": "package_0", "hw_type": "cpu", "hw_name": "RAPL package-0", "hw_id": "intel-rapl:0",
         "hw_parent": null, "in_total": true, "covers": "...", "wrap_uj": 262143328850, "max_power_watts": 125.0}, ...]}

and from then on pushes one frame per reading, every ``interval_ms`` at instants it chooses::

    {"uj": [123456789, 98765432, null]}

each value a zone's raw ``energy_uj`` (wrapping at its ``wrap_uj``; null while a read fails). The
client sends nothing more: any further byte, a frame that is not such an object, or a length above
:data:`MAX_REQUEST_BYTES` closes that connection. Agent frames are at most :data:`MAX_REPLY_BYTES`.
"""

from __future__ import annotations

import json
import struct
from typing import Any

#: The protocol's version, in the request and the answer.
PROTOCOL_VERSION = 1
#: The one request a client makes.
OP_SUBSCRIBE = "subscribe"
#: Longest client frame body; the subscribe request is ~40 bytes.
MAX_REQUEST_BYTES = 1024
#: Longest agent frame body (the zone list of a large multi-socket host fits many times over).
MAX_REPLY_BYTES = 65536
#: The frame header: the body's length.
HEADER = struct.Struct(">I")


class ProtocolError(ValueError):
    """A frame that breaks the protocol (too long, not a JSON object)."""


def encode(message: dict[str, Any]) -> bytes:
    """One frame holding ``message``."""
    body = json.dumps(message, separators=(",", ":")).encode()
    return HEADER.pack(len(body)) + body


def decode_frames(buffer: bytearray, max_body: int) -> list[dict[str, Any]]:
    """Take every complete frame off the front of ``buffer`` (in place) and return their objects.

    Raises:
        ProtocolError: a frame announces more than ``max_body`` bytes, or its body is not a JSON object.
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
        try:
            message = json.loads(body)
        except (UnicodeDecodeError, ValueError):
            raise ProtocolError("a frame is not JSON") from None
        if not isinstance(message, dict):
            raise ProtocolError("a frame is not a JSON object")
        messages.append(message)
    return messages
