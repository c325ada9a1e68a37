"""The agent's set-up (runtime directory, socket, counters, privileges) and its one-thread event loop.

Set-up refuses, with one line saying what to do: a runtime directory (the socket's parent) that is
a symlink, not owned by the agent's user or writable by others; anything already at the socket
path except a dead agent's socket (a socket owned by the agent's user that nobody accepts on, in
that checked directory: removed and replaced, and said); a group that does not exist; a host
with no readable RAPL counter.

The loop serves every client from one thread with bounded work per turn: at most
:data:`ACCEPTS_PER_TURN` connections accepted, one bounded ``recv`` per readable client, pushes
that never block (connections over a uid's limits are closed at once, unanswered; a client that stops reading is dropped once :data:`MAX_PENDING_OUT_BYTES`
pile up). Each uid may open :data:`CONNECTS_PER_S` connections a second (burst
:data:`CONNECT_BURST`) and hold :data:`MAX_CLIENTS_PER_UID` at once; a client has
:data:`SUBSCRIBE_DEADLINE_S` to subscribe and makes exactly one request. So a client that floods
costs the agent a bounded amount per turn and the others keep their readings on time.
"""

from __future__ import annotations

import ctypes
import grp
import logging
import os
import pwd
import random
import selectors
import signal
import socket
import stat
import struct
import sys
import time
from dataclasses import dataclass, field
from typing import Sequence

from otel_joules.config import DEFAULT_AGENT_SOCKET, Settings
from otel_joules.errors import SensorReadError
from otel_joules.sensors import rapl
from otel_joules.sensors.agent_protocol import (
    MAX_AGENT_POWER_WATTS,
    MAX_REQUEST_BYTES,
    MAX_REQUEST_DEPTH,
    OP_SUBSCRIBE,
    PROTOCOL_VERSION,
    ProtocolError,
    decode_frames,
    encode,
)
from otel_joules.sensors.base import Channel

_log = logging.getLogger("otel_joules")

#: The default coarsening (README, "Measured energy without root"): 10x RAPL's ~1 ms update.
DEFAULT_MIN_INTERVAL_MS = 10
#: Finer than this is refused: 10x RAPL's ~1 ms update. An interval near 1 ms hands a member RAPL's
#: own resolution, which is what power side channels (PLATYPUS, CVE-2020-8694) read secrets through;
#: ten updates per reading blur a pattern in 1 ms slots into one sum (docs/measuring.md).
MIN_INTERVAL_FLOOR_MS = 10
#: ... and at most a minute (the library's sampler needs a reading well within a wrap period).
MIN_INTERVAL_CEILING_MS = 60_000
SOCKET_MODE = 0o660
#: A runtime directory the agent creates: the group may reach the socket, others may not.
RUNTIME_DIR_MODE = 0o750
ACCEPTS_PER_TURN = 256
#: Pending connections the kernel holds; a flood beyond what a turn drains waits here, not in the agent.
LISTEN_BACKLOG = 512
MAX_CLIENTS = 256
MAX_CLIENTS_PER_UID = 16
CONNECTS_PER_S = 10.0
CONNECT_BURST = 20.0
SUBSCRIBE_DEADLINE_S = 2.0
MAX_PENDING_OUT_BYTES = 65536
_SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)
_PR_SET_NO_NEW_PRIVS = 38
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


class AgentSetupError(Exception):
    """The agent cannot start safely; the message says why and what to do."""


@dataclass
class AgentClient:
    """One connected client of the agent: its socket, its peer uid, and the bytes waiting each way."""

    sock: socket.socket
    uid: int
    accepted_s: float
    inbox: bytearray = field(default_factory=bytearray)
    outbox: bytearray = field(default_factory=bytearray)
    subscribed: bool = False


@dataclass
class TokenBucket:
    """One uid's token bucket of connections: how many more it may open now, refilled at CONNECTS_PER_S."""

    tokens: float
    updated_s: float


def resolve_group(group: str) -> tuple[int, str]:
    """``group`` (a name or a gid) as (gid, name)."""
    if group.isdigit():
        gid = int(group)
        try:
            return gid, grp.getgrgid(gid).gr_name
        except KeyError:
            return gid, str(gid)
    try:
        return grp.getgrnam(group).gr_gid, group
    except KeyError:
        raise AgentSetupError(
            f"group {group!r} does not exist: create it (`sudo groupadd --system {group}`) or give a gid"
        ) from None


def resolve_user(user: str) -> tuple[int, int]:
    """``user`` (a name or a uid) as (uid, primary gid)."""
    if user.isdigit():
        uid = int(user)
        try:
            return uid, pwd.getpwuid(uid).pw_gid
        except KeyError:
            return uid, uid
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise AgentSetupError(
            f"user {user!r} does not exist: create it (`sudo useradd --system --no-create-home {user}`) or give a uid"
        ) from None
    return entry.pw_uid, entry.pw_gid


def prepare_runtime_dir(path: str, gid: int) -> None:
    """Check (or create) the socket's directory: a real directory owned by this user that others cannot write."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        try:
            os.mkdir(path, RUNTIME_DIR_MODE)
            os.chown(path, os.geteuid(), gid)
            os.chmod(path, RUNTIME_DIR_MODE)
        except OSError as exc:
            raise AgentSetupError(f"cannot create the runtime directory {path}: {exc.strerror}") from None
        return
    if stat.S_ISLNK(info.st_mode):
        raise AgentSetupError(f"the runtime directory {path} is a symlink: remove it, or give --socket in a real directory")
    if not stat.S_ISDIR(info.st_mode):
        raise AgentSetupError(f"{path} is not a directory: remove it, or give --socket elsewhere")
    if info.st_uid != os.geteuid():
        raise AgentSetupError(
            f"the runtime directory {path} belongs to uid {info.st_uid}, not to the agent's uid {os.geteuid()}: "
            "anyone owning it could replace the socket; remove it (the agent creates it) or give --socket elsewhere"
        )
    if info.st_mode & 0o022:
        raise AgentSetupError(
            f"the runtime directory {path} is writable by group or others (mode {stat.S_IMODE(info.st_mode):04o}): "
            f"`chmod go-w {path}` or give --socket elsewhere"
        )


def check_ancestors(runtime_dir: str) -> None:
    """Refuse a runtime directory below one that someone else could swap: every directory above it, up to
    ``/``, must be a real directory owned by root or the agent's user that others may not write (a sticky
    one, such as ``/tmp``, is fine: no one may rename or remove another's entry in it)."""
    ancestor = os.path.dirname(runtime_dir.rstrip("/")) or "/"
    while True:
        try:
            info = os.lstat(ancestor)
        except OSError as exc:
            raise AgentSetupError(f"cannot check {ancestor}, above the socket: {exc.strerror}") from None
        if stat.S_ISLNK(info.st_mode):
            raise AgentSetupError(f"{ancestor}, above the socket, is a symlink: give --socket by its real path")
        if info.st_uid not in (0, os.geteuid()):
            raise AgentSetupError(
                f"{ancestor}, above the socket, belongs to uid {info.st_uid}: its owner could swap the directories "
                "below it and serve a fake agent; give --socket under directories owned by root (such as /run)"
            )
        if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
            raise AgentSetupError(
                f"{ancestor}, above the socket, is writable by group or others (mode {stat.S_IMODE(info.st_mode):04o}) "
                f"without the sticky bit: `chmod go-w {ancestor}` or give --socket elsewhere"
            )
        if ancestor == "/":
            return
        ancestor = os.path.dirname(ancestor)


def prepare_socket_path(path: str) -> None:
    """Refuse anything at ``path``, except a dead agent's socket of ours (removed, and said)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode):
        raise AgentSetupError(f"{path} is a symlink: the agent never follows one to its socket; remove it")
    if not stat.S_ISSOCK(info.st_mode):
        raise AgentSetupError(f"{path} already exists and is not a socket: remove it, or give --socket elsewhere")
    if info.st_uid != os.geteuid():
        raise AgentSetupError(f"{path} is a socket of uid {info.st_uid}, not the agent's: remove it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
    except ConnectionRefusedError:
        os.unlink(path)
        _log.warning("otel-joules agent: removed the socket a stopped agent left at %s", path)
        return
    except OSError as exc:
        raise AgentSetupError(f"{path} is a socket that cannot be probed ({exc.strerror}): remove it") from None
    finally:
        probe.close()
    raise AgentSetupError(f"another agent already serves {path}: stop it first, or give --socket elsewhere")


def open_counters(settings: Settings) -> list[Channel]:
    """Every readable RAPL zone (the agent's first and only use of its privileges to read)."""
    found = rapl.discover(settings)
    if not found.channels:
        reasons = "; ".join(f"{u.what}: {u.reason}" for u in found.unavailable) or "no RAPL zone"
        raise AgentSetupError(f"no RAPL counter can be read here ({reasons})")
    return list(found.channels)


def _zone_description(channel: Channel) -> dict[str, object]:
    domain = channel.domain
    return {
        "id": domain.id,
        "hw_type": domain.hw_type.value,
        "hw_name": domain.hw_name,
        "hw_id": domain.hw_id,
        "hw_parent": domain.hw_parent,
        "in_total": domain.in_total,
        "covers": domain.covers,
        "wrap_uj": channel.wrap_uj,
        # A zone claiming more (a firmware's placeholder) is served at the protocol's ceiling, which clients accept.
        "max_power_watts": min(channel.max_power_watts, MAX_AGENT_POWER_WATTS),
    }


def drop_privileges(user: tuple[int, int] | None) -> None:
    """Give up what the agent no longer needs once its counters and socket are open.

    With ``user``: switch to that uid and gid for good (no supplementary groups). Either way: no new
    privileges through exec, and, while still root, no capabilities at all (the open descriptors
    go on working; nothing new can be opened with root's powers).
    """
    if user is not None:
        uid, gid = user
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        if os.geteuid() == 0 or user is None:
            header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
            data = (ctypes.c_uint32 * 6)()
            libc.capset(header, data)
    except (OSError, AttributeError):
        pass  # not Linux's libc: the user switch above is what counts


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
    """

    def __init__(
        self, listener: socket.socket, channels: Sequence[Channel], gid: int, group_name: str, min_interval_s: float
    ) -> None:
        self._listener = listener
        listener.setblocking(False)
        self._channels = list(channels)
        self._gid = gid
        self._group_name = group_name
        self._interval_s = min_interval_s
        self._selector = selectors.DefaultSelector()
        self._selector.register(listener, selectors.EVENT_READ, None)
        self._clients: dict[int, AgentClient] = {}
        self._buckets: dict[int, TokenBucket] = {}
        self._refused_uids: set[int] = set()
        self._said_client_error = False
        #: Unpredictable to clients: the read and publication instants must not be guessable.
        self._random = random.SystemRandom()
        self._stopping = False
        self._answer = encode(
            {
                "ok": True,
                "version": PROTOCOL_VERSION,
                "interval_ms": round(min_interval_s * 1e3, 3),
                "zones": [_zone_description(c) for c in self._channels],
            }
        )
        self._latest = self._reading()

    def stop(self) -> None:
        """End :meth:`run` at its next turn (safe from a signal handler)."""
        self._stopping = True

    def run(self) -> None:
        """Serve until :meth:`stop`.

        One reading per interval, read at a random instant within it and published after a random
        fraction of an interval more (in order): clients get the same rate, but neither the instant a
        value was read nor a fixed grid to align an attack on (docs/measuring.md).
        """
        interval_s = self._interval_s
        interval_start_s = time.monotonic()
        next_read_s = interval_start_s + self._random.random() * interval_s
        pending: list[tuple[float, bytes]] = []  # (publish at, frame), in order
        while not self._stopping:
            now_s = time.monotonic()
            if now_s >= next_read_s:
                publish_at_s = max(now_s + self._random.random() * interval_s, pending[-1][0] if pending else 0.0)
                pending.append((publish_at_s, self._reading()))
                interval_start_s += interval_s
                if interval_start_s + interval_s <= now_s:  # fell behind (suspend, a stall): no burst of catch-up readings
                    interval_start_s = now_s
                next_read_s = interval_start_s + self._random.random() * interval_s
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

    def _reading(self) -> bytes:
        values: list[int | None] = []
        for channel in self._channels:
            try:
                values.append(channel.read_uj())
            except SensorReadError:
                values.append(None)
        return encode({"uj": values})

    def _publish(self, frame: bytes) -> None:
        self._latest = frame
        for client in list(self._clients.values()):
            if client.subscribed:
                client.outbox += frame
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
        client.subscribed = True
        client.outbox += self._answer + self._latest
        self._flush(client)

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


def bind_socket(path: str, gid: int) -> socket.socket:
    """A listening socket at ``path``, mode 0660, group ``gid``: never world-accessible, not even for an instant."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | getattr(socket, "SOCK_CLOEXEC", 0))
    old_umask = os.umask(0o177)  # bind() creates it 0600: no one else can connect before the chown/chmod
    try:
        listener.bind(path)
    except OSError as exc:
        listener.close()
        raise AgentSetupError(f"cannot create the socket {path}: {exc.strerror}") from None
    finally:
        os.umask(old_umask)
    try:
        os.chown(path, os.geteuid(), gid)
        os.chmod(path, SOCKET_MODE)
    except OSError as exc:
        listener.close()
        os.unlink(path)
        raise AgentSetupError(f"cannot give the socket {path} to gid {gid}: {exc.strerror} (run the agent as root)") from None
    listener.listen(LISTEN_BACKLOG)
    return listener


def serve(
    socket_path: str = DEFAULT_AGENT_SOCKET,
    group: str = "otel-joules",
    min_interval_ms: float = DEFAULT_MIN_INTERVAL_MS,
    user: str | None = None,
    settings: Settings | None = None,
) -> int:
    """Set up and run the agent until SIGTERM or SIGINT; the exit code.

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
    runtime_dir = os.path.dirname(socket_path)
    check_ancestors(runtime_dir)
    prepare_runtime_dir(runtime_dir, gid)
    prepare_socket_path(socket_path)
    channels = open_counters(settings)
    listener = bind_socket(socket_path, gid)
    server = AgentServer(listener, channels, gid, group_name, min_interval_ms / 1e3)
    drop_privileges(switch_to)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: server.stop())
    _log.warning(
        "otel-joules agent: serving %d RAPL zones (%s) on %s to group %s (gid %d), a reading every %g ms",
        len(channels),
        ", ".join(c.domain.id for c in channels),
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
            os.unlink(socket_path)
        except OSError:
            pass  # after a switch to --user the root-owned directory is not ours to change: the next start replaces it
        for channel in channels:
            channel.close()
    return 0


#: The dedicated user the printed systemd unit switches to once the counters and the socket are open.
DEFAULT_AGENT_USER = "otel-joules-agent"


def systemd_unit(
    group: str,
    socket_path: str = DEFAULT_AGENT_SOCKET,
    min_interval_ms: float = DEFAULT_MIN_INTERVAL_MS,
    executable: str = "otel-joules",
    protect_home: str = "yes",
    user: str = DEFAULT_AGENT_USER,
    bmc_config: str | None = None,
) -> str:
    """A systemd unit running the agent with only what it needs: root only to open the counters, then ``user``.

    ``executable`` is ExecStart's command (an absolute path: systemd does not search a venv's bin), already
    quoted for systemd; ``protect_home`` is ``read-only`` where that command lives under /home, /root or
    /run/user, which ``yes`` would hide from the service. ``bmc_config``: the BMC file (already quoted), read by
    the agent; the service then reaches the network (the BMC is on it), over IPv4 and IPv6 only.
    """
    runtime = os.path.dirname(socket_path)
    runtime_directory = runtime[len("/run/") :] if runtime.startswith("/run/") else None
    lines = [
        "# /etc/systemd/system/otel-joules-agent.service",
        "# Enable: sudo systemctl daemon-reload && sudo systemctl enable --now otel-joules-agent",
        f"# Users: sudo groupadd --system {group}; sudo usermod -aG {group} USER (then log in again)",
        f"# Agent: sudo useradd --system --no-create-home --shell /usr/sbin/nologin {user}",
        "[Unit]",
        "Description=otel-joules agent: RAPL energy counters for the group " + group,
        "After=systemd-udevd.service",
        "",
        "[Service]",
        "Type=simple",
        f"ExecStart={executable} agent --socket {socket_path} --group {group} --min-interval-ms {min_interval_ms:g} --user {user}"
        + (f" --bmc-config {bmc_config}" if bmc_config else ""),
        "Environment=PYTHONDONTWRITEBYTECODE=1",
        # Opening root-only counters, giving the socket to the group, switching to --user; none is kept once set up.
        "CapabilityBoundingSet=CAP_DAC_READ_SEARCH CAP_CHOWN CAP_FOWNER CAP_SETUID CAP_SETGID",
        "AmbientCapabilities=",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        f"ProtectHome={protect_home}",
        "PrivateTmp=yes",
        # The BMC is reached over the network; without one the agent needs none.
        "PrivateNetwork=no" if bmc_config else "PrivateNetwork=yes",
        "ProtectKernelTunables=yes",
        "ProtectKernelModules=yes",
        "ProtectControlGroups=yes",
        "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6" if bmc_config else "RestrictAddressFamilies=AF_UNIX",
        "RestrictNamespaces=yes",
        "LockPersonality=yes",
        "SystemCallArchitectures=native",
        "Restart=on-failure",
    ]
    if runtime_directory:
        # Preserved across restarts: a container that mounts the directory (never the socket file) sees the new socket.
        lines += [f"RuntimeDirectory={runtime_directory}", "RuntimeDirectoryMode=0755", "RuntimeDirectoryPreserve=yes"]
    else:
        lines += [f"ReadWritePaths={runtime}"]
    lines += ["", "[Install]", "WantedBy=multi-user.target", ""]
    return "\n".join(lines)
