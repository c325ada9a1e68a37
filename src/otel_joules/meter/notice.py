"""The one message a process gets when its front door falls back to estimates.

``instrument()``, zero-code, ``otel-joules run`` and the pyJoules and carbontracker layers call
:func:`announce_estimates` with their meter. The first time a meter gives spans estimates instead of
measurements, it says once per process what is estimated and which remedy applies: on the
``otel_joules`` logger, or on stderr when nothing handles that logger (a library user who configured
no logging would otherwise see nothing, and only ``energy.source`` would tell).
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import TYPE_CHECKING

from otel_joules.sensors import agent, rapl

if TYPE_CHECKING:
    from otel_joules.meter.meter import EnergyMeter

_log = logging.getLogger("otel_joules")
_lock = threading.Lock()
_said = False


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
    return (
        f"otel-joules: spans and metrics carry ESTIMATES, not measurements, for {', '.join(estimated)} "
        f"(energy.source = estimate: CPU time x TDP, memory size x W/GB), because {why}. "
        f"To measure: {remedy or 'run on hardware with RAPL or an NVIDIA GPU'} "
        "(`otel-joules devices` lists what is found and why)."
    )


def announce_estimates(meter: EnergyMeter) -> None:
    """Say once per process that ``meter`` falls back to estimates (what, and the remedy); nothing otherwise."""
    global _said
    if _said:
        return
    message = fallback_message(meter)
    if message is None:
        return
    with _lock:
        if _said:
            return
        _said = True
    if _log.hasHandlers():
        _log.warning("%s", message)
    else:
        # Nothing would show it (Python's last-resort handler is bypassed by library NullHandlers and
        # by levels): the user asked for energy and must learn it is modelled.
        sys.stderr.write(message + "\n")


def forget_announcement() -> None:
    """Announce again from now on (tests start each case afresh)."""
    global _said
    with _lock:
        _said = False
