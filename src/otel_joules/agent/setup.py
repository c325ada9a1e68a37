"""The agent's set-up: its runtime directory and socket, its counters, and giving up its privileges.

Set-up refuses, with one line saying what to do: a runtime directory (the socket's parent) that is
a symlink, not owned by the agent's user or writable by others; a directory above it that someone
else could swap; anything already at the socket path except a dead agent's socket (a socket owned by
the agent's user that nobody accepts on, in that checked directory: removed and replaced, and said);
a group or user that does not exist; a host with no readable RAPL counter (GPUs alone are not served).
"""

from __future__ import annotations

import ctypes
import grp
import logging
import os
import pwd
import socket
import stat

from otel_joules.config import Settings
from otel_joules.sensors import rapl
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
#: Pending connections the kernel holds; a flood beyond what a turn drains waits here, not in the agent.
LISTEN_BACKLOG = 512
_PR_SET_NO_NEW_PRIVS = 38
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


class AgentSetupError(Exception):
    """The agent cannot start safely; the message says why and what to do."""



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
    """Every readable RAPL zone (with :func:`otel_joules.agent.devices.open_gpus`, the agent's only use of its
    privileges to read)."""
    found = rapl.discover(settings)
    if not found.channels:
        reasons = "; ".join(f"{u.what}: {u.reason}" for u in found.unavailable) or "no RAPL zone"
        raise AgentSetupError(f"no RAPL counter can be read here ({reasons})")
    return list(found.channels)



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

