"""Never count a device twice: where two sources cover the same hardware, which one counts, and why.

Two rules, applied by the meter to everything it discovers (:func:`count_once`, :func:`settle_platforms`):

1. **The same domain from two sources** (``package_0`` from RAPL's powercap zone and from ``amd_energy``'s
   ``Esocket0``: both read the same package's RAPL energy register): the first source wins and the other is
   not read at all. The meter passes RAPL first: it is in the mainline kernel, its counters update every
   millisecond, and ``otel-joules agent`` serves them to users who may not read them. Readings that lay
   inside the loser (``amd_energy``'s cores) now lie inside the winner (``hw.parent``).
2. **Whole-platform readings** (kind platform: an ACPI power meter, an NVIDIA Grace module, RAPL's psys)
   contain every package, memory and GPU reading. A hwmon platform reading adds to ``energy.joules`` only
   where no other domain does; psys follows RAPL's own rule (only where no package zone exists). Where
   several platform readings could count, the broadest does (its sensor says how broad: :class:`Breadth`, a BMC,
   then an ACPI power meter, a Grace module, psys). The others are still read and reported, not added.

Each decision is an :class:`Overlap`, which ``otel-joules devices`` prints.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from otel_joules.sensors.base import Breadth, Channel
from otel_joules.semconv import KIND_PLATFORM


@dataclass(frozen=True)
class Overlap:
    """A domain that is not counted because another covers the same hardware.

    Attributes:
        domain: The domain left out of the total (or not read at all), with its source.
        winner: What counts instead.
        reason: Why, in words.
        read: True: still read and reported (``energy.<domain>.joules``), only not added to
            ``energy.joules``; False: not read at all (a second copy of the same counter).
    """

    domain: str
    winner: str
    reason: str
    read: bool


def _label(channel: Channel) -> str:
    source = channel.domain.source
    return f"{channel.domain.id} ({source})" if source else channel.domain.id


def count_once(first: Sequence[Channel], second: Sequence[Channel]) -> tuple[list[Channel], list[Overlap]]:
    """``second``'s channels that measure no domain of ``first`` (rule 1), and what was left out.

    A left-out channel is closed. Channels of ``second`` whose ``hw_parent`` was a left-out channel's
    ``hw_id`` get the winner's instead.
    """
    winners = {c.domain.id: c for c in first}
    kept: list[Channel] = []
    overlaps: list[Overlap] = []
    moved_parents: dict[str, str] = {}
    for channel in second:
        winner = winners.get(channel.domain.id)
        if winner is None:
            kept.append(channel)
            continue
        overlaps.append(
            Overlap(
                _label(channel),
                _label(winner),
                f"both read {channel.domain.id}'s energy; the {winner.domain.source or 'first'} counter is kept "
                "(updated every millisecond, readable through otel-joules agent), this copy is not read",
                read=False,
            )
        )
        moved_parents[channel.domain.hw_id] = winner.domain.hw_id
        channel.close()
    for channel in kept:
        parent = channel.domain.hw_parent
        if parent in moved_parents:
            channel.domain = replace(channel.domain, hw_parent=moved_parents[parent])
    return kept, overlaps


def _is_hwmon(channel: Channel) -> bool:
    """A platform reading broader than RAPL's psys (hwmon's, a BMC's): it adds to the total only where nothing else
    does (RAPL decides psys's place itself)."""
    return channel.domain.breadth < Breadth.SOC


def platform_counts(channels: Sequence[Channel]) -> bool:
    """Whether a hwmon whole-platform reading would add to the total (rule 2): one exists and nothing else counts."""
    others = [c for c in channels if c.domain.in_total and c.domain.kind != KIND_PLATFORM]
    return not others and any(c.domain.kind == KIND_PLATFORM and _is_hwmon(c) for c in channels)


def settle_platforms(channels: list[Channel]) -> list[Overlap]:
    """Apply rule 2 to ``channels`` in place: platform readings broadest first, at most one in the total.

    Returns one :class:`Overlap` per platform reading left out of the total (read and reported).
    """
    positions = [i for i, c in enumerate(channels) if c.domain.kind == KIND_PLATFORM]
    ranked = sorted((channels[i] for i in positions), key=lambda channel: channel.domain.breadth)
    for i, channel in zip(positions, ranked):
        channels[i] = channel
    components = [c for c in channels if c.domain.in_total and c.domain.kind != KIND_PLATFORM]
    overlaps: list[Overlap] = []
    counted: Channel | None = None
    for channel in ranked:
        if components and (_is_hwmon(channel) or not channel.domain.in_total):
            names = ", ".join(c.domain.id for c in components)
            reason = f"covers the whole platform, which {names} are part of: reported, not added to energy.joules"
            winner = names
        elif counted is None and channel.domain.in_total:
            counted = channel
            continue
        else:
            winner = _label(counted) if counted is not None else "another platform reading"
            reason = "covers the same platform as a broader reading: reported, not added to energy.joules"
        if channel.domain.in_total:
            channel.domain = replace(channel.domain, in_total=False)
        overlaps.append(Overlap(_label(channel), winner, reason, read=True))
    return overlaps
