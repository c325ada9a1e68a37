"""``otel-joules devices``: every domain found, its source and what it covers, which reading counts where two\ncover the same hardware, why the others are missing, and where a whole-platform reading exists, the coverage:
how much of the platform's power the component counters see.

The BMC (``--bmc-config``, else ``OTEL_JOULES_BMC_CONFIG``) is the agent's: its file is readable by the agent's
user only, so ``devices`` reads it only when run as that user (or root) and otherwise says that the agent's
``energy.coverage`` metric has the figure.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from otel_joules.config import bmc_config_path
from otel_joules.errors import ConfigurationError
from otel_joules.meter.meter import EnergyMeter
from otel_joules.sensors import bmc
from otel_joules.sensors.base import Channel, Domain
from otel_joules.semconv import KIND_PLATFORM

#: How long ``devices`` measures the components and the platform for the coverage figure, by default.
DEFAULT_COVERAGE_S = 1.0


def register(subparsers: Any) -> None:
    """Add the ``devices`` subcommand."""
    parser = subparsers.add_parser(
        "devices",
        help="list the energy domains this machine exposes, and why others are missing",
        description="List every energy domain found and its source; for each one missing or unreadable, why and what to do.",
    )
    parser.add_argument("--sysfs-root", help="where sysfs is mounted (default: $OTEL_JOULES_SYSFS_ROOT or /sys)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--bmc-config",
        help="the agent's BMC file, read where this user may (default: $OTEL_JOULES_BMC_CONFIG, else none)",
    )
    parser.add_argument(
        "--coverage-s",
        type=float,
        default=DEFAULT_COVERAGE_S,
        help=(
            "seconds to measure the components against the whole-platform reading, where there is one "
            f"(default {DEFAULT_COVERAGE_S:g}; at least two BMC polls; 0: no coverage figure)"
        ),
    )
    parser.set_defaults(handler=run)


def describe(meter: EnergyMeter) -> dict[str, Any]:
    """The meter's domains and unavailable sensors as plain data.

    A ``standby`` domain is an estimate that stands in only while the agent is away: it is not
    part of what spans carry while the agent answers.
    """
    standby = set(meter.standby_domain_ids)
    return {
        "sysfs_root": meter.settings.sysfs_root,
        "domains": [_domain_entry(d, d.id in standby) for d in meter.domains],
        "sources": _sources(meter.domains),
        "counted_once": [
            {"domain": o.domain, "winner": o.winner, "reason": o.reason, "read": o.read} for o in meter.overlaps
        ],
        "unavailable": [{"what": u.what, "reason": u.reason, "remedy": u.remedy} for u in meter.unavailable],
    }


def _domain_entry(d: Domain, standby: bool) -> dict[str, Any]:
    return {
        "id": d.id,
        "hw_type": d.hw_type.value,
        "hw_name": d.hw_name,
        "hw_id": d.hw_id,
        "method": d.method.value,
        "source": "measured" if d.method.is_measurement else "estimate",
        "in_total": d.in_total,
        "via_agent": d.via_agent,
        "standby": standby,
        "hw_parent": d.hw_parent,
        "hw_vendor": d.vendor or None,
        "source_name": d.source,
        "covers": d.covers,
        "estimate_source": d.estimate_source or None,
        "estimate_band": list(d.estimate_band) if not d.method.is_measurement else None,
    }


def add_bmc(report: dict[str, Any], channels: list[Channel]) -> None:
    """Add the BMC's domains to ``report`` (read by the agent only: reported, never in spans' total)."""
    for channel in channels:
        entry = _domain_entry(channel.domain, False)
        entry["in_total"] = False
        report["domains"].append(entry)
        report["sources"].append({"source": channel.domain.source, "domains": [channel.domain.id]})


def coverage(meter: EnergyMeter, bmc_channels: list[Channel], seconds: float) -> dict[str, Any] | None:
    """The components' power against the broadest whole-platform reading over ``seconds`` (at least two polls of a
    BMC), or None where there is no platform reading.

    The platform is the BMC where one answers, else the meter's broadest platform domain (an ACPI power meter,
    a Grace module, psys); the components are the measured domains that add to the total.
    """
    platforms = [d for d in meter.domains if d.kind == KIND_PLATFORM and d.method.is_measurement]
    if not platforms and not bmc_channels:
        return None
    standby = set(meter.standby_domain_ids)
    components = [
        d for d in meter.domains if d.in_total and d.kind != KIND_PLATFORM and d.method.is_measurement and d.id not in standby
    ]
    window_s = max([seconds] + [2 * c.domain.update_period_s for c in bmc_channels])
    first = meter.snapshot()
    bmc_first = [c.read_uj() for c in bmc_channels]
    time.sleep(window_s)
    last = meter.snapshot()
    bmc_last = [c.read_uj() for c in bmc_channels]
    measured = meter.measure(first, last)
    joules = measured.joules_by_domain
    duration_s = measured.duration_s
    platform_id, platform_watts = None, None
    for channel, before, after in zip(bmc_channels, bmc_first, bmc_last):
        if before is not None and after is not None:
            platform_id, platform_watts = channel.domain.id, (after - before) / 1e6 / duration_s
            break
    if platform_id is None:
        for domain in platforms:
            if domain.id in joules:
                platform_id, platform_watts = domain.id, joules[domain.id] / duration_s
                break
    if any(d.id not in joules for d in components):
        components_watts = None
    else:
        components_watts = sum(joules[d.id] for d in components) / duration_s
    ratio = components_watts / platform_watts if components_watts is not None and platform_watts else None
    return {
        "platform": platform_id,
        "platform_watts": platform_watts,
        "components": [d.id for d in components],
        "components_watts": components_watts,
        "coverage": ratio,
        "seconds": duration_s,
    }


def open_bmc(path: str | None, report: dict[str, Any]) -> list[Channel]:
    """The BMC's channels where its file is readable here; else an ``unavailable`` entry saying why."""
    if path is None:
        return []
    try:
        return list(bmc.discover(path).channels)
    except ConfigurationError as exc:
        report["unavailable"].append(
            {
                "what": f"BMC ({path})",
                "reason": str(exc),
                "remedy": "the agent reads it (otel-joules agent --bmc-config); its energy.coverage metric has the figure, "
                "or run this as the agent's user",
            }
        )
        return []


def spans_sources(report: dict[str, Any]) -> set[str]:
    """``measured`` and/or ``estimate``: what the domains spans add up carry (standby estimates left out)."""
    return {d["source"] for d in report["domains"] if d["in_total"] and not d["standby"]}


def _sources(domains: tuple[Domain, ...]) -> list[dict[str, Any]]:
    """Every source a domain comes from, with its domains, in the meter's order."""
    by_source: dict[str, list[str]] = {}
    for d in domains:
        by_source.setdefault(d.source or "unnamed", []).append(d.id)
    return [{"source": source, "domains": ids} for source, ids in by_source.items()]


def _print_coverage(figure: dict[str, Any]) -> None:
    print()
    print("Coverage (the component counters against the whole-platform reading):")
    if figure["platform_watts"] is None:
        print(f"  no platform reading over {figure['seconds']:.1f} s: no figure")
        return
    components = ", ".join(figure["components"]) or "no component"
    if figure["coverage"] is None:
        print(f"  {figure['platform']}: {figure['platform_watts']:.1f} W; the components ({components}) could not all be read")
        return
    uncovered = figure["platform_watts"] - figure["components_watts"]
    print(
        f"  {figure['coverage']:.0%}: {components} draw {figure['components_watts']:.1f} W of {figure['platform']}'s "
        f"{figure['platform_watts']:.1f} W over {figure['seconds']:.1f} s"
    )
    print(f"  the other {uncovered:.1f} W (fans, disks, NICs, the board, supply losses) is in no component counter")


def run(args: argparse.Namespace) -> int:
    """Print the report; exit 0 even when nothing is measurable (that is an answer, not an error)."""
    with EnergyMeter(sysfs_root=args.sysfs_root, sample=False) as meter:
        report = describe(meter)
        bmc_channels = open_bmc(args.bmc_config or bmc_config_path(), report)
        try:
            add_bmc(report, bmc_channels)
            report["coverage"] = coverage(meter, bmc_channels, args.coverage_s) if args.coverage_s > 0 else None
        finally:
            for channel in bmc_channels:
                channel.close()
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
                if d["estimate_band"] is not None:
                    low, high = d["estimate_band"]
                    print(
                        f"  {'':<{width}}  model {d['estimate_source'] or 'unnamed'}; band {low:.2f}x to {high:.2f}x "
                        "the estimate (energy.estimate.low/high.joules)"
                    )
    if report["counted_once"]:
        print()
        print("Counted once (where two sources cover the same hardware):")
        for o in report["counted_once"]:
            what = "read and reported, not added to energy.joules" if o["read"] else "not read"
            print(f"  {o['domain']}: {what}; counted instead: {o['winner']}")
            print(f"      why: {o['reason']}")
    if report["coverage"] is not None:
        _print_coverage(report["coverage"])
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
