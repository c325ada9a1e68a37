"""A tiny MongoDB server on 127.0.0.1 speaking the real wire protocol, for exporter tests.

No mongod can be installed on these machines, and mongomock cannot go down and come
back. This server answers the handshake (``hello``/``isMaster`` over OP_QUERY and
OP_MSG), ``ping``, ``endSessions`` and ``insert`` (storing documents in memory, with
MongoDB's duplicate-key error 11000 on a repeated ``_id`` and, on request, its
validation error 121 or a whole-insert error as FerretDB's for a NaN), which is all a real
``pymongo.MongoClient`` needs to insert documents. It reports a standalone server
without sessions, so the driver sends plain acknowledged inserts.
"""

from __future__ import annotations

import datetime
import socket
import socketserver
import struct
import threading
import time
from typing import Any

import bson

OP_REPLY = 1
OP_QUERY = 2004
OP_MSG = 2013
_HEADER = struct.Struct("<iiii")
_CHECKSUM_PRESENT = 1
_MORE_TO_COME = 2


def _cstring(data: bytes, offset: int) -> tuple[str, int]:
    end = data.index(b"\x00", offset)
    return data[offset:end].decode(), end + 1


def _bson_at(data: bytes, offset: int) -> tuple[dict[str, Any], int]:
    (length,) = struct.unpack_from("<i", data, offset)
    return bson.decode(data[offset : offset + length]), offset + length


class FakeMongoServer:
    """Start with :meth:`start`, stop with :meth:`stop`; documents land in :attr:`inserted`."""

    def __init__(self, port: int = 0) -> None:
        self._requested_port = port
        self._lock = threading.Lock()
        #: ``"db.collection"`` -> documents in insertion order.
        self.inserted: dict[str, list[dict[str, Any]]] = {}
        #: Names of the commands received, in order.
        self.commands: list[str] = []
        #: Documents whose ``name`` is in here are refused as a collection with a schema
        #: validator refuses them (error 121), one by one, while the others are stored.
        self.reject_names: set[str] = set()
        #: A document whose ``name`` is in here fails the whole insert with an InternalError
        #: (code 1) after the documents before it are stored, as FerretDB 1.24 on SQLite
        #: answers a document holding a NaN (its JSON encoding fails for that document).
        self.fail_insert_names: set[str] = set()
        #: Commands handled (inserts are stored) but never answered: a server that has gone
        #: silent after the handshake, or whose replies are lost.
        self.mute: set[str] = set()
        #: Seconds to wait before each reply: a slow server.
        self.reply_delay_s = 0.0
        self._server: socketserver.ThreadingTCPServer | None = None
        self._connections: set[socket.socket] = set()

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.server_address[1]

    def documents(self, namespace: str) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.inserted.get(namespace, []))

    def start(self) -> "FakeMongoServer":
        owner = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                with owner._lock:
                    owner._connections.add(self.request)
                try:
                    owner._serve(self.request)
                finally:
                    with owner._lock:
                        owner._connections.discard(self.request)

        class Server(socketserver.ThreadingTCPServer):
            allow_reuse_address = True
            daemon_threads = True

        self._server = Server(("127.0.0.1", self._requested_port), Handler)
        threading.Thread(target=self._server.serve_forever, name="fake-mongod", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            for connection in list(self._connections):
                try:
                    connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        self._server = None

    # Protocol ----------------------------------------------------------------------------

    def _serve(self, sock: socket.socket) -> None:
        try:
            self._serve_requests(sock)
        except OSError:
            # The driver closed the connection, or stop() shut it down mid-reply.
            return

    def _serve_requests(self, sock: socket.socket) -> None:
        while True:
            header = self._read(sock, _HEADER.size)
            if header is None:
                return
            length, request_id, _, opcode = _HEADER.unpack(header)
            body = self._read(sock, length - _HEADER.size)
            if body is None:
                return
            if opcode == OP_QUERY:
                _, offset = struct.unpack_from("<i", body, 0)[0], 4
                _, offset = _cstring(body, offset)
                offset += 8  # numberToSkip, numberToReturn
                command, _ = _bson_at(body, offset)
                reply = bson.encode(self._command(command, []))
                payload = struct.pack("<iqii", 0, 0, 0, 1) + reply
                sock.sendall(_HEADER.pack(_HEADER.size + len(payload), request_id + 1, request_id, OP_REPLY) + payload)
            elif opcode == OP_MSG:
                (flags,) = struct.unpack_from("<I", body, 0)
                end = len(body) - (4 if flags & _CHECKSUM_PRESENT else 0)
                offset = 4
                command: dict[str, Any] = {}
                sequence: list[dict[str, Any]] = []
                while offset < end:
                    kind = body[offset]
                    offset += 1
                    if kind == 0:
                        command, offset = _bson_at(body, offset)
                    else:
                        (size,) = struct.unpack_from("<i", body, offset)
                        section_end = offset + size
                        _, cursor = _cstring(body, offset + 4)
                        while cursor < section_end:
                            document, cursor = _bson_at(body, cursor)
                            sequence.append(document)
                        offset = section_end
                response = self._command(command, sequence)
                if flags & _MORE_TO_COME or next(iter(command), "") in self.mute:
                    continue
                if self.reply_delay_s:
                    time.sleep(self.reply_delay_s)
                payload = struct.pack("<I", 0) + b"\x00" + bson.encode(response)
                sock.sendall(_HEADER.pack(_HEADER.size + len(payload), request_id + 1, request_id, OP_MSG) + payload)
            else:
                return

    @staticmethod
    def _read(sock: socket.socket, count: int) -> bytes | None:
        chunks = bytearray()
        while len(chunks) < count:
            try:
                chunk = sock.recv(count - len(chunks))
            except OSError:
                return None
            if not chunk:
                return None
            chunks.extend(chunk)
        return bytes(chunks)

    def _command(self, command: dict[str, Any], sequence: list[dict[str, Any]]) -> dict[str, Any]:
        name = next(iter(command), "")
        with self._lock:
            self.commands.append(name)
        if name in ("hello", "isMaster", "ismaster"):
            return {
                "helloOk": True,
                "ismaster": True,
                "isWritablePrimary": True,
                "maxBsonObjectSize": 16 * 1024 * 1024,
                "maxMessageSizeBytes": 48_000_000,
                "maxWriteBatchSize": 100_000,
                "localTime": datetime.datetime.now(datetime.timezone.utc),
                "minWireVersion": 0,
                "maxWireVersion": 21,
                "connectionId": 1,
                "ok": 1.0,
            }
        if name in ("ping", "endSessions", "buildInfo", "buildinfo"):
            return {"ok": 1.0}
        if name == "insert":
            namespace = f"{command.get('$db', 'test')}.{command['insert']}"
            documents = list(command.get("documents", [])) + sequence
            write_errors = []
            inserted = 0
            with self._lock:
                stored = self.inserted.setdefault(namespace, [])
                seen = {document.get("_id") for document in stored}
                for index, document in enumerate(documents):
                    if document.get("name") in self.fail_insert_names:
                        return {"ok": 0.0, "errmsg": "json: unsupported value: NaN", "code": 1, "codeName": "InternalError"}
                    if document.get("name") in self.reject_names:
                        write_errors.append({"index": index, "code": 121, "errmsg": "Document failed validation"})
                        continue
                    if document.get("_id") in seen:
                        write_errors.append(
                            {"index": index, "code": 11000, "errmsg": f"E11000 duplicate key error _id: {document.get('_id')}"}
                        )
                        continue
                    seen.add(document.get("_id"))
                    stored.append(document)
                    inserted += 1
            response: dict[str, Any] = {"n": inserted, "ok": 1.0}
            if write_errors:
                response["writeErrors"] = write_errors
            return response
        return {"ok": 0.0, "errmsg": f"no such command: {name!r}", "code": 59, "codeName": "CommandNotFound"}

