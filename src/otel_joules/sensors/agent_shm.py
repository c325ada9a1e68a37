"""The agent's readings in shared memory: one sealed ``memfd`` segment the agent writes and clients map read-only.

A client that asks for it (``"shm": true`` in its subscribe request) gets, after the agent's
``SO_PEERCRED`` and group check, the agent's answer with a file descriptor attached (``SCM_RIGHTS``):
the segment, opened read-only. A span's snapshot is then a memory read: no socket round trip, no
system call for the counters, no reader thread.

The agent creates the segment with ``memfd_create``, gives it mode 0400 (a memfd is created 0777,
and anyone holding its descriptor could reopen it for writing through ``/proc``), maps it
read-write, then seals it: ``F_SEAL_SHRINK | F_SEAL_GROW`` (nobody can resize it: a shrunk segment
would fault its readers), ``F_SEAL_FUTURE_WRITE`` (no new writable mapping or ``write()`` by
anyone, the agent's own mapping made before it excepted; ``F_SEAL_WRITE`` would stop the agent
too) and ``F_SEAL_SEAL``. A client checks every seal before it maps a byte: a segment its agent
could shrink or anyone could write is refused, and the client reads the socket protocol instead.

Layout, little-endian, ``8 * (4 + zones)`` bytes plus 8::

    0   magic "OTJSHM\\0\\1"         8 bytes
    8   layout version (1)         u32
    12  zone count N               u32
    16  sequence                   u64   odd while the agent writes
    24  published at               u64   CLOCK_MONOTONIC ns when the record was published; 0: the agent stopped
    32  counter values             N x u64   raw energy_uj per zone (2**64-1: that zone's read failed)
    32+8N  CRC-32 of bytes 16..32+8N   u32 (then 4 bytes of padding)

A sequence lock keeps a reader from taking a torn record: the agent makes the sequence odd, writes
the record, then makes it even; a reader copies the record, reads the sequence again and retries
when it was odd or moved. Python has no memory fences, and weakly ordered CPUs (aarch64: Grace)
may make the stores visible out of order, so the record also carries a CRC over the sequence, the
time and the values, written last: a copy mixing two records fails it and is retried.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import stat
import struct
import time
import zlib
from typing import Sequence

#: The segment's first bytes.
MAGIC = b"OTJSHM\x00\x01"
#: The layout above; a client refuses any other.
LAYOUT_VERSION = 1
#: Not in Python 3.11's fcntl: Linux >= 5.1 (include/uapi/linux/fcntl.h).
F_SEAL_FUTURE_WRITE = getattr(fcntl, "F_SEAL_FUTURE_WRITE", 0x0010)
#: The seals a client requires before it maps the segment.
REQUIRED_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | F_SEAL_FUTURE_WRITE | fcntl.F_SEAL_SEAL
#: The segment's mode: nobody but its owner may reopen it, and the owner only to read.
SEGMENT_MODE = 0o400
#: A zone's value while the agent cannot read it.
MISSING_UJ = 2**64 - 1
#: How often a reader retries a record the agent is writing (a write takes microseconds).
READ_TRIES = 64
_HEADER = struct.Struct("<8sII")
_SEQ = struct.Struct("<Q")
_STAMP = struct.Struct("<QQ")
_CRC = struct.Struct("<I")
_VALUES_AT = 32


class SegmentRefused(Exception):
    """A segment the client will not map: why."""


def segment_bytes(zones: int) -> int:
    """The size of a segment holding ``zones`` counters."""
    return _VALUES_AT + 8 * zones + 8


class SegmentWriter:
    """The agent's side: creates, maps and seals the segment, and publishes each reading into it.

    Raises:
        OSError: the kernel offers no sealed memfd (``memfd_create`` or ``F_SEAL_FUTURE_WRITE`` missing).
    """

    def __init__(self, zones: int) -> None:
        self.zones = zones
        self.size = segment_bytes(zones)
        self._values = struct.Struct(f"<{zones}Q")
        self._seq = 0
        fd = os.memfd_create("otel-joules-agent", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, self.size)
            os.fchmod(fd, SEGMENT_MODE)
            self._map = mmap.mmap(fd, self.size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
            _HEADER.pack_into(self._map, 0, MAGIC, LAYOUT_VERSION, zones)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, REQUIRED_SEALS)
            #: What clients get: a read-only descriptor where /proc allows reopening one, else the sealed original.
            self.client_fd = _reopen_read_only(fd)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def publish(self, values: Sequence[int | None], published_ns: int | None = None) -> None:
        """Write one reading (None for a zone that failed to read), under the sequence lock."""
        record = self._values.pack(*(MISSING_UJ if v is None else v for v in values))
        self._write(record, time.monotonic_ns() if published_ns is None else published_ns)

    def mark_stopped(self) -> None:
        """Tell mapped clients the agent stopped (published at 0), so they reconnect without waiting."""
        self._write(bytes(self._map[_VALUES_AT : _VALUES_AT + self._values.size]), 0)

    def _write(self, record: bytes, published_ns: int) -> None:
        mapped = self._map
        self._seq += 1
        _SEQ.pack_into(mapped, 16, self._seq)  # odd: readers retry
        self._seq += 1
        body = _STAMP.pack(self._seq, published_ns) + record
        mapped[_VALUES_AT : _VALUES_AT + len(record)] = record
        _SEQ.pack_into(mapped, 24, published_ns)
        _CRC.pack_into(mapped, _VALUES_AT + len(record), zlib.crc32(body))
        _SEQ.pack_into(mapped, 16, self._seq)  # even: the record is whole

    def close(self) -> None:
        """Unmap and close (clients keep their mappings)."""
        self._map.close()
        for fd in {self._fd, self.client_fd}:
            os.close(fd)


def _reopen_read_only(fd: int) -> int:
    try:
        return os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return fd


class SegmentReader:
    """A client's read-only mapping of the agent's segment, checked before it is mapped.

    Args:
        fd: The descriptor the agent handed over (closed here either way: the mapping needs none).
        wraps_uj: Each zone's wrap range from the agent's answer; the segment must hold exactly these zones.

    Raises:
        SegmentRefused: not a sealed memfd of the expected size and layout (why).
    """

    def __init__(self, fd: int, wraps_uj: Sequence[int]) -> None:
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise SegmentRefused("it is not a memory file")
            if info.st_mode & 0o022:
                raise SegmentRefused(f"others may write it (mode {stat.S_IMODE(info.st_mode):04o})")
            try:
                seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
            except OSError:
                raise SegmentRefused("it is not a sealable memfd") from None
            if seals & REQUIRED_SEALS != REQUIRED_SEALS:
                raise SegmentRefused(f"it is not sealed against resizing and writing (seals {seals:#x})")
            size = segment_bytes(len(wraps_uj))
            if info.st_size != size:
                raise SegmentRefused(f"it holds {info.st_size} bytes, not {size}")
            self._map = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        magic, layout, zones = _HEADER.unpack_from(self._map, 0)
        if magic != MAGIC or layout != LAYOUT_VERSION or zones != len(wraps_uj):
            self._map.close()
            raise SegmentRefused(f"its header (layout {layout}, {zones} zones) does not match the agent's answer")
        self._wraps_uj = tuple(wraps_uj)
        self._record = struct.Struct(f"<QQ{zones}QI")
        self._end = 16 + self._record.size

    def sequence(self) -> int:
        """The sequence now (a cheap check whether a new record is there)."""
        return _SEQ.unpack_from(self._map, 16)[0]

    def read(self) -> tuple[int, int, tuple[int | None, ...]] | None:
        """The newest whole record: (sequence, published at ns, values), each value within its zone's range
        or None (a failed read); None when no whole record could be taken in :data:`READ_TRIES` tries.

        Raises:
            ValueError: a whole record holds a value outside its zone's range (a broken agent).
        """
        mapped = self._map
        for _ in range(READ_TRIES):
            copy = mapped[16 : self._end]
            seq, published_ns, *rest = self._record.unpack(copy)
            if seq & 1 or _SEQ.unpack_from(mapped, 16)[0] != seq or zlib.crc32(copy[:-4]) != rest[-1]:
                continue
            values: list[int | None] = []
            for value, wrap_uj in zip(rest[:-1], self._wraps_uj):
                if value == MISSING_UJ:
                    values.append(None)
                elif value > wrap_uj:
                    raise ValueError(f"a counter value {value} above its zone's wrap range {wrap_uj}")
                else:
                    values.append(value)
            return seq, published_ns, tuple(values)
        return None

    def close(self) -> None:
        """Unmap."""
        self._map.close()


#: A record as a client keeps it: (sequence, published at in monotonic s, values, when the values last changed in monotonic s).
Latest = tuple[int, float, tuple[int | None, ...], float]


class SharedReadings:
    """A client's segment and the newest record it took from it: what a span's snapshot reads.

    Args:
        fd: The descriptor the agent handed over (closed here either way).
        wraps_uj: Each zone's wrap range from the agent's answer.
        silence_s: How old the first record may be (the agent publishes every interval).

    Raises:
        SegmentRefused: a segment :class:`SegmentReader` refuses, or whose first record is not whole, says
            the agent stopped, or was published at a time this process's clock cannot have seen (another
            time namespace: its age could not be judged).
    """

    def __init__(self, fd: int, wraps_uj: Sequence[int], silence_s: float) -> None:
        self._reader = SegmentReader(fd, wraps_uj)
        try:
            record = self._reader.read()
        except ValueError as exc:
            self._reader.close()
            raise SegmentRefused(str(exc)) from None
        if record is None or record[1] == 0:
            self._reader.close()
            raise SegmentRefused("it holds no whole reading" if record is None else "the agent has stopped")
        seq, published_ns, values = record
        age_s = (time.monotonic_ns() - published_ns) / 1e9
        if not -0.05 <= age_s <= silence_s:
            self._reader.close()
            raise SegmentRefused(f"its reading is {age_s:.3f} s old by this process's clock (another time namespace?)")
        #: The newest record taken (swapped whole: threads of one process may read it at once).
        self.latest: Latest = (seq, published_ns / 1e9, values, time.monotonic())

    def sequence(self) -> int:
        """The segment's sequence now: a new record is there when it differs from :attr:`latest`'s."""
        return self._reader.sequence()

    def refresh(self, now_s: float, frozen_s: float) -> Latest | str:
        """Take the newest record into :attr:`latest` and return it; or why the agent is lost: a broken
        record, the agent stopped, or the same values for ``frozen_s`` (a live package counter always moves).
        A record the agent is writing through every try keeps the previous one (its age then tells)."""
        try:
            record = self._reader.read()
        except ValueError as exc:
            return f"broken reading: {exc}"
        latest = self.latest
        if record is None:
            return latest
        seq, published_ns, values = record
        if published_ns == 0:
            return "it stopped"
        changed_s = latest[3]
        if values != latest[2]:
            changed_s = now_s
        elif now_s - changed_s >= frozen_s:
            return f"its readings have not changed for {now_s - changed_s:.1f} s"
        self.latest = latest = (seq, published_ns / 1e9, values, changed_s)
        return latest
