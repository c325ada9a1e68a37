"""Which process of a host reports the host-level domains (CPU packages, DRAM, estimates).

RAPL counters and the CPU estimator measure the whole host, not one process. When
several processes of one job run on a host (torchrun workers, Slurm tasks), each of them
reading those counters would report the same joules again, and ``hw.energy`` summed over
processes would count the host's CPU and memory once per process. So exactly one process
per host *owns* the host-level domains; every process still reports its own GPUs
(``EnergyMeter(host=False)`` in the others).

:func:`host_owner` decides, by ``mode`` or ``OTEL_JOULES_HOST_DOMAINS``:

``always``  this process owns them (a single process, or you decide yourself);
``never``   it does not (it reports its GPUs only);
``auto``    (default) elect one:

  1. launcher ranks, when present: the process owns them when every one of
     ``LOCAL_RANK`` (torchrun, accelerate, DeepSpeed) and ``SLURM_LOCALID`` (srun) that
     is set is ``0``. Both are per-host ranks, so this elects exactly one process per
     host and per job, whatever the start order, and also under ``srun torchrun``
     (``SLURM_LOCALID=0`` for the one task per node, ``LOCAL_RANK`` for its workers);
  2. otherwise a per-host lock: the first process to take an exclusive ``flock`` on
     ``OTEL_JOULES_HOST_LOCK`` (default ``/tmp/otel-joules-host-domains.lock``) owns them
     for as long as it runs. The decision is made once: when the owner exits first, the
     others do not take over, so prefer ranks for jobs whose processes come and go.
     ``/tmp`` is per container and sometimes per Slurm job (``job_container/tmpfs``):
     the lock then elects one owner per container or job, which is what that
     container or job should report.

When the lock file cannot be opened at all, the process owns the host domains (a lone
process must not lose its CPU energy) and says so once in a warning.

Wrappers such as ``otel-joules run`` measure a whole command, and the command may be
instrumented itself: that is a second layer, which overlaps the first the way nested
spans do. :func:`command_environment` makes each layer count the host once: a wrapper
that owns the host gives its command a lock file of its own
(``OTEL_JOULES_HOST_LOCK=<lock>.run-<pid>``), so one process inside it counts the host
again, for its own spans; a wrapper that does not own the host passes
``OTEL_JOULES_HOST_DOMAINS=never``. An explicit ``always`` or ``never`` is inherited as is.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import threading
from dataclasses import dataclass
from typing import Mapping

from otel_joules.config import HOST_DOMAINS_MODES, OTEL_JOULES_HOST_DOMAINS, OTEL_JOULES_HOST_LOCK, Settings
from otel_joules.errors import ConfigurationError

_log = logging.getLogger("otel_joules")

#: Environment variable choosing the mode (defined in :mod:`otel_joules.config`; this public
#: name is kept for existing imports).
HOST_DOMAINS_ENV = OTEL_JOULES_HOST_DOMAINS
#: Environment variable overriding the path of the per-host lock file (likewise).
HOST_LOCK_ENV = OTEL_JOULES_HOST_LOCK
#: The lock file used when no launcher rank is set. ``/tmp`` rather than ``$TMPDIR`` or
#: ``$XDG_RUNTIME_DIR``: both are often per job or per user, and the host's counters are not.
DEFAULT_HOST_LOCK_PATH = "/tmp/otel-joules-host-domains.lock"

MODE_AUTO = "auto"
MODE_ALWAYS = "always"
MODE_NEVER = "never"
MODES = HOST_DOMAINS_MODES

#: Per-host ranks, in the order they are reported; all that are set must be 0 to own.
RANK_VARIABLES = ("LOCAL_RANK", "SLURM_LOCALID")


@dataclass(frozen=True)
class HostOwnership:
    """Whether this process reports the host-level domains, and why.

    Attributes:
        owner: True when this process measures RAPL/estimator domains.
        mode: The mode that decided (``auto``, ``always``, ``never``).
        reason: One human-readable line, e.g. ``LOCAL_RANK=0`` or
            ``another process holds /tmp/otel-joules-host-domains.lock``.
        lock_path: The lock file the election used or would have used (None when ranks
            or an explicit mode decided).
    """

    owner: bool
    mode: str
    reason: str
    lock_path: str | None = None

    def __bool__(self) -> bool:
        return self.owner

    def meter_options(self) -> dict[str, bool]:
        """:class:`~otel_joules.EnergyMeter` keywords for this decision (``{"host": False}`` or ``{}``).

        Empty for an owner, so the shared meter keeps its default options and a later
        plain ``otel_joules.instrument()`` gets the same meter.
        """
        return {} if self.owner else {"host": False}


def resolve_mode(mode: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """``mode``, else ``OTEL_JOULES_HOST_DOMAINS``, else ``auto``; validated and lower-cased.

    A bad ``mode`` is a :class:`ConfigurationError`; a bad variable is reported once and
    ``auto`` used (:class:`otel_joules.config.Settings`).
    """
    if mode is None:
        return Settings.from_env(env).host_domains
    value = mode.strip().lower() or MODE_AUTO
    if value not in MODES:
        raise ConfigurationError(
            f"host_domains={mode!r} is not one of {', '.join(MODES)}: 'auto' elects one process per host, "
            "'always' counts the host's CPU and memory in this process, 'never' only its GPUs"
        )
    return value


def rank_decision(env: Mapping[str, str]) -> HostOwnership | None:
    """The decision launcher ranks make, or None when no valid per-host rank is set."""
    ranks: list[tuple[str, int]] = []
    for name in RANK_VARIABLES:
        raw = env.get(name)
        if raw is None or raw.strip() == "":
            continue
        try:
            ranks.append((name, int(raw.strip())))
        except ValueError:
            _log.warning("otel-joules: ignoring %s=%r, which is not an integer rank", name, raw)
    if not ranks:
        return None
    shown = ", ".join(f"{name}={value}" for name, value in ranks)
    if all(value == 0 for _, value in ranks):
        return HostOwnership(True, MODE_AUTO, f"{shown}: this process reports the host's CPU and memory")
    return HostOwnership(False, MODE_AUTO, f"{shown}: local rank 0 reports the host's CPU and memory, this process its GPUs")


class HostElection:
    """Decides once per process whether it owns the host-level domains.

    Holds the lock file descriptor while this process owns the host by lock: the
    kernel releases the ``flock`` when the process exits, however it exits. One
    instance per process is enough (:func:`default_election`); tests make their own.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._decision: HostOwnership | None = None
        self._key: tuple[str, str] | None = None
        self._fd: int | None = None

    def decide(
        self,
        mode: str | None = None,
        *,
        env: Mapping[str, str] | None = None,
        lock_path: str | None = None,
    ) -> HostOwnership:
        """Return this process's decision, electing on first use (see the module docstring).

        Args:
            mode: ``auto``, ``always`` or ``never``; default ``OTEL_JOULES_HOST_DOMAINS`` or ``auto``.
            env: Environment with the ranks (default ``os.environ``).
            lock_path: Lock file (default ``OTEL_JOULES_HOST_LOCK`` or :data:`DEFAULT_HOST_LOCK_PATH`).

        The same question asked again returns the same answer without re-electing; a
        different mode or lock path decides anew (releasing a lock no longer wanted).

        Raises:
            ConfigurationError: ``mode`` or ``OTEL_JOULES_HOST_DOMAINS`` is not a known mode.
        """
        env = os.environ if env is None else env
        resolved = resolve_mode(mode, env)
        path = lock_path or env.get(HOST_LOCK_ENV) or DEFAULT_HOST_LOCK_PATH
        key = (resolved, path)
        with self._lock:
            if self._decision is not None and self._key == key:
                return self._decision
            self._release_locked()
            decision = self._elect(resolved, env, path)
            self._decision, self._key = decision, key
        _log.info("otel-joules: host-level energy domains %s (%s)", "reported here" if decision.owner else "not reported here", decision.reason)
        return decision

    def _elect(self, mode: str, env: Mapping[str, str], path: str) -> HostOwnership:
        if mode == MODE_ALWAYS:
            return HostOwnership(True, mode, f"{HOST_DOMAINS_ENV}=always")
        if mode == MODE_NEVER:
            return HostOwnership(False, mode, f"{HOST_DOMAINS_ENV}=never")
        by_rank = rank_decision(env)
        if by_rank is not None:
            return by_rank
        return self._elect_by_lock(path)

    def _elect_by_lock(self, path: str) -> HostOwnership:
        try:
            fd = _open_lock_file(path)
        except OSError as exc:
            _log.warning(
                "otel-joules: cannot open the host lock %s (%s), so this process counts the host's CPU and memory "
                "without checking for others; set %s=always or never, or %s to a writable path",
                path,
                exc.strerror or exc,
                HOST_DOMAINS_ENV,
                HOST_LOCK_ENV,
            )
            return HostOwnership(True, MODE_AUTO, f"lock {path} unavailable ({exc.strerror or exc})", path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return HostOwnership(False, MODE_AUTO, f"another process on this host holds {path}", path)
            _log.warning("otel-joules: cannot lock %s (%s); this process counts the host's CPU and memory", path, exc)
            return HostOwnership(True, MODE_AUTO, f"lock {path} unusable ({exc.strerror or exc})", path)
        self._fd = fd
        return HostOwnership(True, MODE_AUTO, f"holds {path}", path)

    def release(self) -> None:
        """Forget the decision and release the lock (another process may then take it)."""
        with self._lock:
            self._release_locked()
            self._decision = None
            self._key = None

    def _release_locked(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.close(fd)  # closing the last descriptor releases the flock
            except OSError:
                pass

    @property
    def decision(self) -> HostOwnership | None:
        """The current decision, None before the first :meth:`decide`."""
        return self._decision


def _open_lock_file(path: str) -> int:
    """Open (creating if needed) the lock file without following a symlink planted there.

    flock needs only read access, so an existing file (perhaps another user's, mode
    0644) is opened read-only and never written: a process running as root must not
    write into whatever a shared ``/tmp`` path points at.
    """
    flags = os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | flags, 0o644)
    except FileExistsError:
        return os.open(path, os.O_RDONLY | flags)


_default_election = HostElection()


def default_election() -> HostElection:
    """The process-wide :class:`HostElection` behind :func:`host_owner`."""
    return _default_election


def host_owner(
    mode: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    lock_path: str | None = None,
) -> HostOwnership:
    """Whether this process reports the host's CPU and memory energy (see the module docstring).

    Use the answer for the meter::

        ownership = host_owner()
        otel_joules.instrument(**ownership.meter_options())   # host=False unless the owner

    Raises:
        ConfigurationError: ``mode`` or ``OTEL_JOULES_HOST_DOMAINS`` is not ``auto``, ``always`` or ``never``.
    """
    return _default_election.decide(mode, env=env, lock_path=lock_path)


def command_environment(ownership: HostOwnership, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Variables to add to the environment of a command a wrapper measures (module docstring).

    Returns ``{}`` when ``OTEL_JOULES_HOST_DOMAINS`` is explicitly ``always`` or ``never``
    (the command inherits it), ``{"OTEL_JOULES_HOST_DOMAINS": "never"}`` for a wrapper that
    does not own the host, and for an owner ``{"OTEL_JOULES_HOST_LOCK": "<lock>.run-<pid>"}``,
    a lock for the command's processes only (remove it with :func:`remove_command_lock`).
    """
    env = os.environ if env is None else env
    if Settings.from_env(env).host_domains in (MODE_ALWAYS, MODE_NEVER):
        return {}
    if not ownership.owner:
        return {HOST_DOMAINS_ENV: MODE_NEVER}
    base = ownership.lock_path or env.get(HOST_LOCK_ENV) or DEFAULT_HOST_LOCK_PATH
    return {HOST_LOCK_ENV: f"{base}.run-{os.getpid()}"}


def remove_command_lock(added: Mapping[str, str]) -> None:
    """Delete the command's lock file that :func:`command_environment` named, if any was created."""
    path = added.get(HOST_LOCK_ENV)
    if path:
        try:
            os.unlink(path)
        except OSError:
            pass
