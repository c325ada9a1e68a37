"""The agent's set-up: its runtime directory and socket, its counters, and giving up its privileges.

Set-up refuses, with one line saying what to do: a runtime directory (the socket's parent) that is
a symlink, not owned by the agent's user or writable by others; a directory above it that someone
else could swap; anything already at the socket path except a dead agent's socket (a socket owned by
the agent's user that nobody accepts on, in that checked directory: removed and replaced, and said);
a group or user that does not exist; a host with no readable RAPL counter (GPUs alone are not served).

Nothing is checked or changed by path: each directory is opened ``O_NOFOLLOW`` relative to the one
above and checked on its descriptor, the socket is bound, checked and removed relative to the runtime
directory's descriptor, and what the agent creates gets its mode (by umask) and group (by the
effective gid) as it is made, so no ``chmod`` follows and a ``chown`` only where a set-group-ID
directory overrode the group (``fchownat`` with ``AT_SYMLINK_NOFOLLOW``). A directory swapped after
its check cannot redirect any of it."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import grp
import logging
import os
import pwd
import socket
import stat
import threading
from typing import Iterator

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


def open_runtime_dir(path: str, gid: int) -> int:
    """The socket's directory, opened (or created) and checked; a descriptor every later step works relative to.

    Walks from ``/`` one component at a time, each opened ``O_NOFOLLOW`` relative to the one above and
    checked on that descriptor (``fstat``), never by path: every directory above must be a real
    directory owned by root or the agent's user that others may not write (a sticky one, such as
    ``/tmp``, is fine: no one may rename or remove another's entry in it), and the runtime directory
    itself a real directory owned by the agent's user that group and others may not write. A created
    one gets mode :data:`RUNTIME_DIR_MODE` and group ``gid`` as it is made. A directory swapped for a
    symlink after its check cannot redirect anything: the socket is bound, checked and removed through
    the descriptor, which stays on the directory that was checked.
    """
    components = [part for part in os.path.normpath(path).split("/") if part]
    if not components:
        raise AgentSetupError("--socket cannot be directly in /: give it a directory of its own, such as /run/otel-joules")
    current = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    shown = "/"
    try:
        _check_ancestor(current, shown)
        for part in components[:-1]:
            below = _open_below(current, part, shown, os.O_PATH)
            os.close(current)
            current, shown = below, os.path.join(shown, part)
            _check_ancestor(current, shown)
        return _open_runtime(current, components[-1], os.path.join(shown, components[-1]), gid)
    finally:
        os.close(current)


def _open_below(parent_fd: int, name: str, parent_shown: str, flags: int) -> int:
    shown = os.path.join(parent_shown, name)
    try:
        return os.open(name, flags | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_symlink(parent_fd, name):
            raise AgentSetupError(f"{shown}, above the socket, is a symlink: give --socket by its real path") from None
        raise AgentSetupError(f"cannot check {shown}, above the socket: {exc.strerror}") from None


def _is_symlink(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _check_ancestor(fd: int, shown: str) -> None:
    info = os.fstat(fd)
    if info.st_uid not in (0, os.geteuid()):
        raise AgentSetupError(
            f"{shown}, above the socket, belongs to uid {info.st_uid}: its owner could swap the directories "
            "below it and serve a fake agent; give --socket under directories owned by root (such as /run)"
        )
    if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
        raise AgentSetupError(
            f"{shown}, above the socket, is writable by group or others (mode {stat.S_IMODE(info.st_mode):04o}) "
            f"without the sticky bit: `chmod go-w {shown}` or give --socket elsewhere"
        )


def _open_runtime(parent_fd: int, name: str, path: str, gid: int) -> int:
    # O_PATH: enough to bind, stat and unlink relative to it, and nothing to list or read by (the agent keeps it).
    flags = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=parent_fd)
    except FileNotFoundError:
        try:
            with _created_as(gid, RUNTIME_DIR_MODE):
                os.mkdir(name, RUNTIME_DIR_MODE, dir_fd=parent_fd)
            fd = os.open(name, flags, dir_fd=parent_fd)
            if os.fstat(fd).st_gid != gid:  # a set-group-ID parent gives its own group to what is created in it
                os.chown(name, -1, gid, dir_fd=parent_fd, follow_symlinks=False)
        except OSError as exc:
            raise AgentSetupError(f"cannot create the runtime directory {path}: {exc.strerror}") from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_symlink(parent_fd, name):
            raise AgentSetupError(f"the runtime directory {path} is a symlink: remove it, or give --socket in a real directory") from None
        if exc.errno == errno.ENOTDIR:
            raise AgentSetupError(f"{path} is not a directory: remove it, or give --socket elsewhere") from None
        raise AgentSetupError(f"cannot open the runtime directory {path}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
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
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def _created_as(gid: int, mode: int) -> Iterator[None]:
    """What this thread creates meanwhile gets ``mode`` (by umask) and group ``gid`` (by the effective gid) as it
    is made: nothing to chown or chmod afterwards, so nothing a later swap could redirect."""
    old_umask = os.umask(0o777 & ~mode)
    old_egid = os.getegid()
    try:
        if old_egid != gid:
            os.setegid(gid)
        yield
    finally:
        if os.getegid() != old_egid:
            os.setegid(old_egid)
        os.umask(old_umask)


def at(dir_fd: int, name: str) -> str:
    """A path to ``name`` in the directory ``dir_fd`` is open on, for calls that take no descriptor (``bind``,
    ``connect``): ``/proc/self/fd/N`` names that very directory, wherever it has been moved or swapped since."""
    return f"/proc/self/fd/{dir_fd}/{name}"


def prepare_socket_path(dir_fd: int, name: str, path: str) -> None:
    """Refuse anything at ``name`` in the runtime directory, except a dead agent's socket of ours (removed, and said)."""
    if not os.path.isdir(f"/proc/self/fd/{dir_fd}"):
        raise AgentSetupError("/proc is not mounted here: the agent binds its socket through /proc/self/fd")
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
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
        probe.connect(at(dir_fd, name))
    except ConnectionRefusedError:
        os.unlink(name, dir_fd=dir_fd)
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
    if user is None:
        holding = threads_holding_capabilities()
        if holding:
            # capset() changes the calling thread only (a uid switch reaches every thread: glibc applies it to all).
            _log.warning(
                "otel-joules agent: %d thread(s) started before the privilege drop keep root's capabilities (%s): "
                "run with --user (the printed systemd unit does), which drops them in every thread",
                len(holding),
                ", ".join(holding),
            )


def threads_holding_capabilities() -> list[str]:
    """The names of this process's threads whose effective capabilities are not empty (from /proc/self/task)."""
    names = {thread.native_id: thread.name for thread in threading.enumerate()}
    holding = []
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return holding
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/status") as status:
                fields = dict(line.rstrip("\n").split(":\t", 1) for line in status if ":\t" in line)
        except OSError:
            continue  # the thread ended meanwhile
        if int(fields.get("CapEff", "0"), 16):
            holding.append(names.get(int(tid), fields.get("Name", tid)))
    return holding



def bind_socket(dir_fd: int, name: str, gid: int, path: str) -> socket.socket:
    """A listening socket ``name`` in the runtime directory ``dir_fd``, created mode 0660 and group ``gid``: never
    accessible to anyone else, not even for an instant, and never changed by path afterwards."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | getattr(socket, "SOCK_CLOEXEC", 0))
    try:
        with _created_as(gid, SOCKET_MODE):
            listener.bind(at(dir_fd, name))
    except OSError as exc:
        listener.close()
        raise AgentSetupError(f"cannot create the socket {path} with group {gid}: {exc.strerror} (run the agent as root)") from None
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_IMODE(info.st_mode) != SOCKET_MODE:
            raise AgentSetupError(
                f"the socket {path} was created mode {stat.S_IMODE(info.st_mode):04o}, not {SOCKET_MODE:04o} "
                f"(a default ACL on its directory?): remove the ACL (`setfacl -k {os.path.dirname(path)}`)"
            )
        if info.st_gid != gid:  # a set-group-ID directory gives its own group to what is created in it
            os.chown(name, -1, gid, dir_fd=dir_fd, follow_symlinks=False)
    except BaseException as exc:
        listener.close()
        os.unlink(name, dir_fd=dir_fd)
        if isinstance(exc, OSError):
            raise AgentSetupError(f"cannot give the socket {path} to gid {gid}: {exc.strerror} (run the agent as root)") from None
        raise
    listener.listen(LISTEN_BACKLOG)
    return listener
