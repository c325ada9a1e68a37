"""The agent's outages as a meter sees them: standby estimates only while it is away, and no joule twice.

A meter reading RAPL through ``otel-joules agent`` keeps standby estimates (CPU time x per-CPU watts, memory
size x W/GB) for the agent's domains. :class:`Outages` decides, at each snapshot:

* While the agent is away, the agent's domains hold their last measured joules (frozen) and the
  standby estimates grow, from the last snapshot that saw it on (re-originated at each loss, never from
  the meter's start) up to the snapshot that finds it back (read there once more, then frozen).
* When it comes back, its counters bridge the gap if they cannot have wrapped unseen meanwhile (the
  gap is shorter than a wrap at the zone's power bound): the gap is then measured, and the standby
  estimate of it is left out of the host's total. While an outage may still be bridged its estimate
  is held back from that total too (:meth:`Outages.withheld_estimate_joules`), so ``hw.host.energy``
  never counts it and then takes it back. A gap too long to bridge is not measured: its estimate
  stands (and enters the host's total), said once.
* Every snapshot carries an :class:`Outage`, so a span across a loss or a return keeps its measured
  part and estimates the rest (``energy.source = partial``, ``energy.estimated_s``;
  :func:`~otel_joules.meter.energy.energy_between`).
"""

from __future__ import annotations

import logging
import time
from typing import NamedTuple, Sequence

from otel_joules.meter._channels import _ChannelState

_log = logging.getLogger("otel_joules")


class Outage(NamedTuple):
    """Where a meter reading through ``otel-joules agent`` stands with it, at one snapshot.

    Attributes:
        away: The agent is away: the agent's domains hold their last measured joules (frozen) and the
            standby estimates grow.
        away_s: Seconds the agent has been away since the meter started, this outage included.
        returned: The agent's domains' joules at its latest return, by position (None elsewhere, or
            before any return): a span that starts while it is away is measured from there on.
    """

    away: bool
    away_s: float
    returned: tuple[float | None, ...]



class Outages:
    """The agent's comings and goings for one meter; used under the meter's lock.

    Args:
        primary: The meter's states read at every snapshot (the agent's among them).
        standby: The standby estimates' states, read only while the agent is away.
        agent_path: The agent's socket, for messages.
    """

    def __init__(self, primary: Sequence[_ChannelState], standby: Sequence[_ChannelState], agent_path: str) -> None:
        self._primary = tuple(primary)
        self._standby = tuple(standby)
        self._agent = tuple(i for i, s in enumerate(self._primary) if s.channel.domain.via_agent)
        self._count = len(self._primary) + len(self._standby)
        self._path = agent_path
        #: Whether the agent was away at the latest snapshot.
        self.away = False
        self._since_ns = 0
        #: monotonic_ns of the latest snapshot that found the agent there.
        self.last_present_ns = time.monotonic_ns()
        self._away_ns = 0
        self._standby_at_loss_uj: tuple[int, ...] = ()
        #: Standby estimates (of domains in the host's total) of outages the counters bridged.
        self.bridged_estimate_joules = 0.0
        self._said_unbridged = False
        #: The :class:`Outage` of every snapshot that finds the agent there (renewed at each return).
        self.present = Outage(False, 0.0, (None,) * self._count)

    def withheld_estimate_joules(self, now_ns: int) -> float:
        """Standby estimates (of domains in the host's total) that the agent's counters bridged, or may still
        bridge: those of past bridged outages, and of the current one while it is shorter than a wrap."""
        withheld = self.bridged_estimate_joules
        if self.away and (now_ns - self.last_present_ns) / 1e9 < self._wrap_s():
            withheld += self._estimate_since_loss_joules()
        return withheld

    def _wrap_s(self) -> float:
        """The shortest time any of the agent's counters takes to wrap at its power bound."""
        return min(
            (s.wrap_uj / 1e6 / s.max_power_watts for s in (self._primary[i] for i in self._agent) if s.wrap_uj and s.max_power_watts),
            default=float("inf"),
        )

    def _estimate_since_loss_joules(self) -> float:
        return sum(
            (state.total_uj - at_loss_uj) / 1e6
            for state, at_loss_uj in zip(self._standby, self._standby_at_loss_uj)
            if state.channel.domain.in_total
        )

    def agent_totals_uj(self) -> tuple[int, ...]:
        """The agent's domains' totals now (before a read that may bridge an outage)."""
        return tuple(self._primary[i].total_uj for i in self._agent)

    def update(
        self, values: list[float | None], failing: bool, away: bool, now_ns: int, before_uj: tuple[int, ...] | None
    ) -> tuple[bool, Outage]:
        """Complete a snapshot's ``values`` (the primary states' joules, extended in place by the standby ones)
        after its read; (whether a domain is failing, the snapshot's :class:`Outage`)."""
        if away:
            if not self.away:
                self._lose(now_ns)
            for state in self._standby:
                value = state.read_joules(now_ns)
                values.append(value)
                if value is None:
                    failing = True
            for i in self._agent:
                if values[i] is None and not self._primary[i].failures:
                    values[i] = self._primary[i].total_uj / 1e6  # its last measurement, frozen at the loss
            return failing, Outage(True, (self._away_ns + now_ns - self._since_ns) / 1e9, self.present.returned)
        if self.away:
            # The estimates up to the return, read once more as at the loss: frozen at the last snapshot that
            # found the agent away, they would leave the time since then unmeasured by anything (an interval
            # from that snapshot to this one had 0 J in every domain).
            for state in self._standby:
                state.read_joules(now_ns)
            self._back(values, now_ns, before_uj or ())
        self.last_present_ns = now_ns
        for state in self._standby:
            values.append(None if state.failed else state.total_uj / 1e6)  # frozen while the agent is there
        return failing, self.present

    def _lose(self, now_ns: int) -> None:
        """The agent went away: the standby estimates count from the last snapshot that saw it (not from the
        meter's start), at the pace they had since their previous read."""
        self.away = True
        # Away since the last snapshot that saw it: the loss lies somewhere after that one, so the snapshot
        # that finds it ends an interval that was not measured throughout (a span across it is partial).
        self._since_ns = min(now_ns, self.last_present_ns)
        for state in self._standby:
            if state.failures or state.failed or state.last_raw_uj is None:
                continue  # its own failure policy decides its origin
            try:
                raw = state.read_uj()
            except Exception:  # noqa: BLE001 - its next read_joules meets the failure and says it
                continue
            if raw is not None:
                state.last_raw_uj, state.last_ns = self._raw_at_uj(state, raw, now_ns), self._since_ns
        self._standby_at_loss_uj = tuple(s.total_uj for s in self._standby)

    def _raw_at_uj(self, state: _ChannelState, raw_uj: int, now_ns: int) -> int:
        """A standby estimate's value at the loss (:attr:`_since_ns`), found at ``now_ns`` when it is ``raw_uj``.

        The loss is found after it happened: the time from the last snapshot that saw the agent to the one that
        finds it gone was measured by nothing. Its estimate is the estimate's pace since its previous read
        (idle power for the wall time, the CPU time's average); an origin at ``now_ns`` would leave that time
        at 0 J, and a span from the last measured snapshot to the finding one with none.
        """
        unseen_ns = now_ns - self._since_ns
        elapsed_ns = now_ns - state.last_ns
        if unseen_ns <= 0 or elapsed_ns <= 0 or raw_uj < state.last_raw_uj:  # type: ignore[operator]
            return raw_uj
        pace_uj_per_ns = (raw_uj - state.last_raw_uj) / elapsed_ns  # type: ignore[operator]
        return raw_uj - round(pace_uj_per_ns * min(unseen_ns, elapsed_ns))

    def _back(self, values: list[float | None], now_ns: int, before_uj: tuple[int, ...]) -> None:
        """The agent is back: the gap is measured if its counters bridge it, else its estimate stands."""
        gap_s = (now_ns - self.last_present_ns) / 1e9
        wrap_s = self._wrap_s()
        if gap_s < wrap_s and len(before_uj) == len(self._agent):
            self.bridged_estimate_joules += self._estimate_since_loss_joules()
        else:
            for k, i in enumerate(self._agent):
                state = self._primary[i]
                if k < len(before_uj):
                    state.total_uj = before_uj[k]  # counted on from its new value: the gap is not measured
                    values[i] = state.total_uj / 1e6
            if not self._said_unbridged:
                self._said_unbridged = True
                _log.warning(
                    "otel-joules: the otel-joules agent at %s was away for %.1f s, longer than its counters take to wrap "
                    "at their power bound (%.1f s): that time stays estimated (energy.source = estimate), and the "
                    "counters are measured on from their new values.",
                    self._path,
                    gap_s,
                    wrap_s,
                )
        self._away_ns += now_ns - self._since_ns
        self.away = False
        agent = set(self._agent)
        returned = tuple(values[i] if i in agent else None for i in range(len(self._primary)))
        self.present = Outage(False, self._away_ns / 1e9, returned + (None,) * len(self._standby))
