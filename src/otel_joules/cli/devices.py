"""``otel-joules devices``: every domain found, its source and what it covers, which reading counts where two\ncover the same hardware, and why the others are missing."""

from __future__ import annotations

import argparse
import json
from typing import Any

from otel_joules.meter.meter import EnergyMeter


def register(subparsers: Any) -> None:
    """Add the ``devices`` subcommand."""
    parser = subparsers.add_parser(
        "devices",
        help="list the energy domains this machine exposes, and why others are missing",
        description="List every energy domain found and its source; for each one missing or unreadable, why and what to do.",
    )
    parser.add_argument("--sysfs-root", help="where sysfs is mounted (default: $OTEL_JOULES_SYSFS_ROOT or /sys)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=run)


def describe(meter: EnergyMeter) -> dict[str, Any]:
    """The meter's domains and unavailable sensors as plain data.

    A ``standby`` domain is an estimate that stands in only while the agent is away: it is not
    part of what spans carry while the agent answers.
    """
    standby = set(meter.standby_domain_ids)
    return {
        "sysfs_root": meter.settings.sysfs_root,
        "domains": [
            {
                "id": d.id,
                "hw_type": d.hw_type.value,
                "hw_name": d.hw_name,
                "hw_id": d.hw_id,
                "method": d.method.value,
                "source": "measured" if d.method.is_measurement else "estimate",
                "in_total": d.in_total,
                "via_agent": d.via_agent,
                "standby": d.id in standby,
                "hw_parent": d.hw_parent,
                "hw_vendor": d.vendor or None,
                "source_name": d.source,
                "covers": d.covers,
            }
            for d in meter.domains
        ],
        "sources": _sources(meter),
        "counted_once": [
            {"domain": o.domain, "winner": o.winner, "reason": o.reason, "read": o.read} for o in meter.overlaps
        ],
        "unavailable": [{"what": u.what, "reason": u.reason, "remedy": u.remedy} for u in meter.unavailable],
    }


def spans_sources(report: dict[str, Any]) -> set[str]:
    """``measured`` and/or ``estimate``: what the domains spans add up carry (standby estimates left out)."""
    return {d["source"] for d in report["domains"] if d["in_total"] and not d["standby"]}


def _sources(meter: EnergyMeter) -> list[dict[str, Any]]:
    """Every source a domain comes from, with its domains, in the meter's order."""
    by_source: dict[str, list[str]] = {}
    for d in meter.domains:
        by_source.setdefault(d.source or "unnamed", []).append(d.id)
    return [{"source": source, "domains": ids} for source, ids in by_source.items()]


def run(args: argparse.Namespace) -> int:
    """Print the report; exit 0 even when nothing is measurable (that is an answer, not an error)."""
    with EnergyMeter(sysfs_root=args.sysfs_root, sample=False) as meter:
        report = describe(meter)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"otel-joules devices (sysfs root: {report['sysfs_root']})")
    print()
    if report["domains"]:
        width = max(len(d["id"]) for d in report["domains"])
        type_width = max(9, *(len(d["hw_type"]) for d in report["domains"]))
        # An estimate is never listed as a measurement.
        for source, heading in (
            ("measured", "Measured domains:"),
            ("estimate", "Estimated domains (no energy counter: a model, NOT a measurement):"),
        ):
            domains = [d for d in report["domains"] if d["source"] == source]
            if not domains:
                continue
            print(heading)
            for d in domains:
                total = "adds to energy.joules" if d["in_total"] else "reported, inside another domain"
                if d["standby"]:
                    total = "stands in only while the otel-joules agent is away"
                if d["via_agent"]:
                    total += "; read through the otel-joules agent"
                print(f"  {d['id']:<{width}}  {d['hw_type']:<{type_width}} {d['method']:<17} {d['hw_name']}  ({total})")
                if d["covers"] or d["source_name"]:
                    print(f"  {'':<{width}}  covers {d['covers'] or 'unknown'}; source: {d['source_name'] or 'unnamed'}")
    if report["counted_once"]:
        print()
        print("Counted once (where two sources cover the same hardware):")
        for o in report["counted_once"]:
            what = "read and reported, not added to energy.joules" if o["read"] else "not read"
            print(f"  {o['domain']}: {what}; counted instead: {o['winner']}")
            print(f"      why: {o['reason']}")
    if report["unavailable"]:
        print()
        print("Not measured:")
        for u in report["unavailable"]:
            print(f"  {u['what']}: {u['reason']}")
            if u["remedy"]:
                print(f"      what to do: {u['remedy']}")
    print()
    methods = spans_sources(report)
    if methods == {"estimate"}:
        print('No hardware energy counter is readable here: spans get ESTIMATES (energy.source = "estimate").')
    elif methods == {"measured"}:
        print('Spans get measured energy (energy.source = "measured").')
    elif methods:
        print('Spans get measured and estimated energy (energy.source = "mixed").')
    else:
        print("Nothing can be measured or estimated here.")
    return 0
