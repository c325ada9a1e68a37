"""What ``otel-joules run`` prints at the end: the run's result in a few lines, and delivery failures."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from opentelemetry import trace

from otel_joules.attribution.gpu import GpuCharge
from otel_joules.attribution.shares import SpanAttribution
from otel_joules.carbon import joules_to_kwh
from otel_joules.carbon.units import format_co2eq_grams
from otel_joules.carbon.accounting import CarbonAccounting
from otel_joules.carbon.units import format_duration
from otel_joules.carbon.intensity import CarbonIntensity
from otel_joules.config import (
    DEFAULT_PROCFS_ROOT,
    OTEL_JOULES_PROCFS_ROOT,
    POLICY_BUSY,
    POLICY_CAPACITY,
    POLICY_DYNAMIC,
)
from otel_joules.delivery.destinations import SIGNAL_METRICS, SIGNAL_TRACES, Destination
from otel_joules.delivery.outcomes import DeliveryReport, iter_failures_by_destination
from otel_joules.delivery.setup import Telemetry
from otel_joules.meter.meter import EnergyMeasurement


@dataclass
class RunResult:
    """What one run produced (for the summary and for callers in code)."""

    command: list[str]
    exit_code: int
    duration_s: float
    measurement: EnergyMeasurement | None
    co2eq_grams: float | None
    intensity: CarbonIntensity
    pue: float
    attribution: SpanAttribution | None
    span_context: trace.SpanContext | None
    signal_name: str | None = None
    start_error: str | None = None
    #: Each measured GPU's energy, the part charged to the command and why.
    gpu_charges: list[GpuCharge] = field(default_factory=list)
    #: Why the run has no share (the host's CPU time could not be read), or None.
    share_missing: str | None = None
    #: Grams of CO2eq of the command's share (the span's ``energy.attributed.co2eq.grams``), or None without a share;
    #: ``co2eq_grams`` is of the host's interval energy.
    share_co2eq_grams: float | None = None
    #: (the whole-platform reading's domain id, its joules, its joules beyond the components') where one is read beside
    #: the components (the share carries that part with the CPU time: docs/attribution.md), else None.
    platform: tuple[str, float, float] | None = None



def format_joules(joules: float) -> str:
    """Joules with a unit prefix: ``12.3 J``, ``4.56 kJ``, ``7.89 MJ``."""
    for factor, unit in ((1e9, "GJ"), (1e6, "MJ"), (1e3, "kJ")):
        if abs(joules) >= factor:
            return f"{joules / factor:.4g} {unit}"
    return f"{joules:.4g} J"


def summary_lines(result: RunResult, telemetry: Telemetry | None) -> list[str]:
    """The human summary printed at the end; its ``data`` line says where the data went, and what failed and why."""
    how = (
        f"was killed by {result.signal_name}"
        if result.signal_name
        else f"could not start ({result.start_error})"
        if result.start_error
        else f"exited with code {result.exit_code}"
    )
    lines = [f"otel-joules: {shlex.join(result.command)} {how} after {format_duration(result.duration_s)}"]
    m = result.measurement
    if m is None or not m.joules_by_domain:
        lines.append("  energy   nothing measurable or estimable here; `otel-joules devices` says why and what to do")
    else:
        # IT energy (no PUE), the measurement noise below zero counted as zero as everywhere.
        kwh = joules_to_kwh(CarbonAccounting.it_joules(m.total_joules))
        # With a platform reading beside them the counted domains are the components, not the whole box.
        whose = "the measured components" if result.platform is not None else "the whole host's"
        lines.append(
            f"  energy   {format_joules(m.total_joules)} = {kwh:.4g} kWh, {m.watts:.4g} W on average, {whose} during the command "
            f"({m.source}: {', '.join(sorted(m.joules_by_domain))})"
        )
        if m.estimate_band is not None:
            lines.append(
                f"  band     ESTIMATE between {format_joules(m.estimate_band[0])} and {format_joules(m.estimate_band[1])} "
                f"(model: {m.estimate_source or 'unnamed'}; docs/estimates.md)"
            )
        if m.estimated_s:
            lines.append(
                f"  note     PARTIAL: the otel-joules agent was away for {format_duration(m.estimated_s)} of the "
                f"{format_duration(m.duration_s)}: that part is estimated (CPU time x per-CPU watts, memory size x W/GB), the "
                "rest measured through it; `otel-joules devices` says whether it is back"
            )
        if m.below_resolution:
            lines.append(
                f"  note     BELOW RESOLUTION: {format_duration(m.duration_s)} is shorter than a counter's update "
                "period, so these joules and watts are quantised, not exact; measure a longer run"
            )
        if result.platform is not None:
            domain, platform_j, uncovered_j = result.platform
            lines.append(
                f"  platform {format_joules(platform_j)} by {domain}, the whole box: {format_joules(uncovered_j)} beyond "
                "the components, shared with CPU time like their idle power (docs/attribution.md)"
            )
        if result.attribution is not None:
            share = result.attribution
            of = "the platform's" if result.platform is not None else "that"
            of_host = "CPU and memory energy and the platform's beyond them" if result.platform is not None else "CPU and memory energy"
            lines.append(
                f"  share    {format_joules(share.joules)} of {of} is the command's ({m.source}; its CPU time's part "
                f"of the host's {of_host}: {format_joules(share.cpu_joules + share.memory_joules)}"
                + (f", plus its processes' part of the GPUs: {format_joules(share.gpu_joules)}" if result.gpu_charges else "")
                + ")"
            )
            lines.append(_policy_line(share))
        elif result.share_missing is not None:
            lines.append(
                f"  share    MISSING, no energy.attributed.* on the span: the host's CPU time is needed and {result.share_missing}; "
                f"point {OTEL_JOULES_PROCFS_ROOT} (or --procfs-root) at procfs (default {DEFAULT_PROCFS_ROOT})"
            )
        for charge in result.gpu_charges:
            # Every GPU, charged or not: a command is never silently given (or spared) a GPU's energy.
            lines.append(
                f"  gpu      {charge.domain_id}: {format_joules(charge.charged_joules)} of "
                f"{format_joules(charge.measured_joules)} charged ({charge.reason})"
            )
        if result.co2eq_grams is not None:
            lines.append(carbon_line(result))
    if telemetry is None:
        lines.append("  data     not exported (OTEL_SDK_DISABLED=true)")
    elif not telemetry.destinations:
        lines.append("  data     not exported (no exporter configured)")
    else:
        # Failed destinations are told once, in the failure clause, never also as "failed" here:
        # an unreachable collector is one line of the summary, whatever it refused.
        failed = {destination for destination, _ in iter_failures_by_destination(telemetry.report)}
        parts = []
        for signal_name in (SIGNAL_TRACES, SIGNAL_METRICS):
            for destination in telemetry.destinations_for(signal_name):
                if destination not in failed:
                    parts.append(f"{signal_name} -> {destination}: {telemetry.report.outcome(destination)}")
        if not telemetry.destinations_for(SIGNAL_METRICS):
            parts.append("metrics not exported")
        failures = _failures_described(telemetry.report)
        if failures is not None:
            parts.append(f"{failures}; the command's result is not affected")
        lines.append("  data     " + "; ".join(parts))
    if result.span_context is not None and result.span_context.is_valid:
        lines.append(f"  trace    {result.span_context.trace_id:032x}")
    return lines


def carbon_line(result: RunResult) -> str:
    """The summary's carbon: of the command's share (what ``otel-joules report`` counts for the run), else of the
    host's interval energy; always with the PUE and intensity used, and the other figure beside it."""
    m = result.measurement
    assert m is not None and result.co2eq_grams is not None
    used = (
        f"at {result.intensity.gco2eq_per_kwh:g} gCO2eq/kWh and PUE {result.pue:g} "
        f"({result.intensity.source}: {result.intensity.detail})"
    )
    host = f"the host's interval energy ({format_joules(m.total_joules)})"
    if result.attribution is not None and result.share_co2eq_grams is not None:
        return (
            f"  carbon   {format_co2eq_grams(result.share_co2eq_grams)} gCO2eq of the command's share "
            f"({format_joules(result.attribution.joules)}) {used}; {host}: {format_co2eq_grams(result.co2eq_grams)} gCO2eq"
        )
    return f"  carbon   {format_co2eq_grams(result.co2eq_grams)} gCO2eq of {host}, as there is no share, {used}"


#: What each policy charges a command for the host's static (idle) energy, for the summary.
_POLICY_WORDS = {
    POLICY_CAPACITY: "each of its CPU seconds carries one core's share of the host's idle power; unused capacity's is nobody's",
    POLICY_BUSY: "the host's busy CPU time carries all of its idle power (a dedicated machine's bill)",
    POLICY_DYNAMIC: "only the energy above the idle baseline counts",
}


def _policy_line(share: SpanAttribution) -> str:
    """The summary's line saying what the share is made of and why (the policy, the baseline)."""
    policy = share.attribution.rpartition("/")[2]
    static = share.joules - share.dynamic_joules
    static = static if static > 1e-9 * max(share.joules, 1.0) else 0.0  # rounding, not energy
    return (
        f"  policy   {policy}: {format_joules(share.dynamic_joules)} dynamic + {format_joules(static)} static; "
        f"{_POLICY_WORDS.get(policy, policy)} (baseline {share.baseline}; OTEL_JOULES_ATTRIBUTION_POLICY)"
    )


def failure_line(report: DeliveryReport) -> str | None:
    """One line naming every destination that failed and why, or None.

    For output without the summary (``--quiet``, the carbontracker command); the summary
    says the same in its ``data`` line instead.
    """
    failures = _failures_described(report)
    if failures is None:
        return None
    return f"otel-joules: {failures}. The command's result is not affected."


def _failures_described(report: DeliveryReport) -> str | None:
    """``could not deliver traces and metrics to TARGET: REASON``, every failed destination once, or None.

    Destinations that failed for the same reason (one collector that is not there refuses
    spans and metrics alike, at one URL for gRPC and at two for HTTP) share one clause.
    """
    failed = list(iter_failures_by_destination(report))
    if not failed:
        return None
    by_reason: dict[str, list[Destination]] = {}
    for destination, reason in failed:
        by_reason.setdefault(reason, []).append(destination)
    clauses = []
    for reason, destinations in by_reason.items():
        signals = [_what_failed(report, d) for d in destinations]
        targets = list(dict.fromkeys(str(d) for d in destinations))
        if len(targets) == 1:
            where = f"{' and '.join(signals)} to {targets[0]}"
        else:
            where = " and ".join(f"{signal} to {d}" for signal, d in zip(signals, destinations))
        clauses.append(f"{where}: {reason}")
    hint = f" (exporter said: {report.sdk_messages[0]})" if report.sdk_messages else ""
    return f"could not deliver {'; '.join(clauses)}{hint}"


def _what_failed(report: DeliveryReport, destination: Destination) -> str:
    """``traces``, or ``some traces`` where part of them got through."""
    partly = report.outcome(destination) == "partly delivered"
    return f"some {destination.signal}" if partly else destination.signal
