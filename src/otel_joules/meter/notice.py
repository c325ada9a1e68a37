"""The one message a process gets when its front door falls back to estimates.

``instrument()``, zero-code, ``otel-joules run`` and the pyJoules and carbontracker layers call
:func:`announce_estimates` with their meter. The first time a meter gives spans estimates instead of
measurements, it says once per process what is estimated and which remedy applies: on the
``otel_joules`` logger, or on stderr when nothing handles that logger (a library user who configured
no logging would otherwise see nothing, and only ``energy.source`` would tell).

A sysfs or procfs root set away from its default (``OTEL_JOULES_SYSFS_ROOT`` /
``OTEL_JOULES_PROCFS_ROOT``, ``sysfs_root=`` / ``procfs_root=``, ``--sysfs-root`` /
``--procfs-root``) that is missing or lacks its layout (``class/powercap``; a readable ``stat``)
is said the same way, once per process and root, by :func:`announce_root_problems` (which
:func:`announce_estimates` calls): without it RAPL is silently not found, or every
``energy.attributed.*`` share silently missing.

A meter that reads its counters through ``otel-joules agent`` says so once per process and socket too
(:func:`announce_agent_use`, which :func:`announce_estimates` calls): which domains, and which socket, so a
user knows where their measured energy comes from and which agent a container is trusting.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import TYPE_CHECKING

from otel_joules.config import (
    DEFAULT_PROCFS_ROOT,
    DEFAULT_SYSFS_ROOT,
    OTEL_JOULES_PROCFS_ROOT,
    OTEL_JOULES_SYSFS_ROOT,
    Settings,
)
from otel_joules.sensors import agent, rapl

if TYPE_CHECKING:
    from otel_joules.meter.meter import EnergyMeter

_log = logging.getLogger("otel_joules")
_lock = threading.Lock()
_said = False
_roots_said: set[str] = set()
_agents_said: set[str] = set()


def fallback_message(meter: EnergyMeter) -> str | None:
    """What the meter estimates and what to do, or None when it estimates nothing that adds to the totals."""
    standby = set(meter.standby_domain_ids)
    estimated = [d.id for d in meter.domains if d.in_total and not d.method.is_measurement and d.id not in standby]
    if not estimated:
        return None
    rapl_problems = [u for u in meter.unavailable if u.what == "RAPL" or u.remedy == rapl.PERMISSION_REMEDY]
    agent_problems = [u for u in meter.unavailable if u.what == agent.WHAT]
    reasons: list[str] = []
    remedy = ""
    if agent_problems:
        reasons.append(agent_problems[0].reason)
        remedy = agent_problems[0].remedy
    if any(u.remedy == rapl.PERMISSION_REMEDY for u in rapl_problems):
        reasons.append("the RAPL counters (energy_uj) are readable only by root")
        remedy = remedy or rapl.PERMISSION_REMEDY
    elif rapl_problems:
        reasons.append(rapl_problems[0].reason)
        remedy = remedy or rapl_problems[0].remedy
    why = "; ".join(reasons) or "this machine exposes no energy counter otel-joules can read"
    models = "; ".join(
        f"{d.id}: {d.covers.split(': ', 1)[-1]}" for d in meter.domains if d.id in estimated and d.estimate_source
    )
    return (
        f"otel-joules: spans and metrics carry ESTIMATES, not measurements, for {', '.join(estimated)} "
        f"(energy.source = estimate, with a band in energy.estimate.low/high.joules; {models or 'modelled'}), because {why}. "
        f"To measure: {remedy or 'run on hardware with RAPL or an NVIDIA GPU'} "
        "(`otel-joules devices` lists what is found and why)."
    )


def sysfs_root_problem(sysfs_root: str) -> str | None:
    """Why a sysfs root set away from ``/sys`` holds no powercap layout, or None (also for the default)."""
    if os.path.normpath(sysfs_root) == DEFAULT_SYSFS_ROOT:
        return None  # the host's own: a machine without RAPL is the estimate notice's to explain
    if not os.path.isdir(sysfs_root):
        return "is not a directory"
    if not os.path.isdir(os.path.join(sysfs_root, "class", "powercap")):
        return "has no class/powercap (the RAPL counters' layout)"
    return None


def procfs_root_problem(procfs_root: str) -> str | None:
    """Why a procfs root set away from ``/proc`` has no usable ``stat``, or None (also for the default)."""
    if os.path.normpath(procfs_root) == DEFAULT_PROCFS_ROOT:
        return None
    if not os.path.isdir(procfs_root):
        return "is not a directory"
    try:
        with open(os.path.join(procfs_root, "stat"), "rb") as f:
            first = f.readline()
    except OSError as exc:
        return f"has no readable stat file ({exc.strerror or exc})"
    if not first.startswith(b"cpu "):
        return "has a stat file that does not start with the host's 'cpu' line"
    return None


def root_problem_messages(settings: Settings, *, sysfs_needed: bool = True) -> list[str]:
    """One line per root in ``settings`` that is set but unusable: which, why, what it costs, what to do.

    ``sysfs_needed`` False leaves the sysfs root out: the counters come through ``otel-joules agent``, so a
    root without powercap costs nothing (a container sees the agent's socket and no sysfs at all).
    """
    messages = []
    problem = sysfs_root_problem(settings.sysfs_root) if sysfs_needed else None
    if problem is not None:
        messages.append(
            f"otel-joules: {_named(OTEL_JOULES_SYSFS_ROOT, 'sysfs_root', settings.sysfs_root)} {problem}, so no RAPL "
            f"counter is read there (CPU and memory energy are estimated or missing); point it at sysfs "
            f"(default {DEFAULT_SYSFS_ROOT})."
        )
    problem = procfs_root_problem(settings.procfs_root)
    if problem is not None:
        messages.append(
            f"otel-joules: {_named(OTEL_JOULES_PROCFS_ROOT, 'procfs_root', settings.procfs_root)} {problem}, so spans "
            f"and `otel-joules run` get no energy.attributed.* shares; point it at procfs (default {DEFAULT_PROCFS_ROOT})."
        )
    return messages


def _named(variable: str, keyword: str, root: str) -> str:
    """``VAR='/x'`` when the environment set it, else ``keyword '/x'`` (given in code or on the command line)."""
    if os.environ.get(variable) == root:
        return f"{variable}={root!r}"
    return f"{keyword} {root!r}"


def announce_root_problems(settings: Settings, *, sysfs_needed: bool = True) -> None:
    """Say once per process and root that a set sysfs or procfs root is unusable (:func:`root_problem_messages`)."""
    for message in root_problem_messages(settings, sysfs_needed=sysfs_needed):
        with _lock:
            if message in _roots_said:
                continue
            _roots_said.add(message)
        _say(message)


def _say(message: str) -> None:
    if _log.hasHandlers():
        _log.warning("%s", message)
    else:
        # Nothing would show it (Python's last-resort handler is bypassed by library NullHandlers and
        # by levels): the user asked for energy and must learn it is modelled or missing.
        sys.stderr.write(message + "\n")


def announce_estimates(meter: EnergyMeter) -> None:
    """Say once per process that ``meter`` falls back to estimates (what, and the remedy); nothing otherwise.

    A set but unusable sysfs or procfs root is said first (:func:`announce_root_problems`).
    """
    global _said
    announce_root_problems(meter.settings, sysfs_needed=not meter.agent_domain_ids)
    announce_agent_use(meter)
    if _said:
        return
    message = fallback_message(meter)
    if message is None:
        return
    with _lock:
        if _said:
            return
        _said = True
    _say(message)


def agent_use_message(meter: EnergyMeter) -> str | None:
    """Which domains ``meter`` reads through ``otel-joules agent``, and at which socket; None when it reads none."""
    if not meter.agent_domain_ids:
        return None
    return (
        f"otel-joules: measuring {', '.join(meter.agent_domain_ids)} through the otel-joules agent at "
        f"{meter.settings.agent_socket} (the host's one reader of its counters; "
        "energy.source = measured, energy.agent.domains on each span)."
    )


def announce_agent_use(meter: EnergyMeter) -> None:
    """Say once per process and socket that ``meter`` reads counters through the agent (:func:`agent_use_message`).

    Said on the ``otel_joules`` logger at INFO when something handles it, else on stderr: an agent used
    without a word leaves a user (or a test suite) unaware that a root daemon's readings are in their spans.
    """
    message = agent_use_message(meter)
    if message is None:
        return
    with _lock:
        if meter.settings.agent_socket in _agents_said:
            return
        _agents_said.add(meter.settings.agent_socket)
    if _log.hasHandlers():
        _log.info("%s", message)
    else:
        sys.stderr.write(message + "\n")


def forget_announcement() -> None:
    """Announce again from now on (tests start each case afresh)."""
    global _said
    with _lock:
        _said = False
        _roots_said.clear()
        _agents_said.clear()
