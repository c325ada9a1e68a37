"""``otel-joules run [options] -- CMD ARGS...``: run a command and measure it as one root span.

The command runs as a child process with the same standard streams and environment,
plus ``TRACEPARENT`` (and ``TRACESTATE``): the W3C trace context of the root span, so
an instrumented child's spans join the same trace. The root span (named after the
command, or ``--span-name``) carries:

=============================  ===================================================
``energy.*``                   what the energy meter measured (:mod:`otel_joules.tracing.attributes`)
``energy.attributed.*``        the command's share: its CPU time's part of the host's CPU and
                               memory energy (its own and its reaped descendants' CPU time) plus
                               its processes' part of each GPU, split as for spans: nothing of a
                               GPU NVML shows idle or used only by others
                               (:func:`otel_joules.attribution.command_attribution`,
                               :class:`otel_joules.attribution.gpu.CommandGpuShares`)
``energy.co2eq.grams``         CO2-equivalent of ``energy.joules`` (carbon intensity x PUE)
``energy.attributed[.self].co2eq.grams``  the same of the attributed shares, when the span has them
``carbon.intensity.gco2eq_per_kwh``  the intensity used
``carbon.intensity.source``          where it came from (``offline``, ``world_average``, ...)
``carbon.pue``                       the PUE applied
``process.command_line``       the command, shell-quoted, values that look like secrets
                               redacted (:mod:`otel_joules.delivery.redaction`;
                               ``OTEL_JOULES_FULL_COMMAND_LINE=true`` exports it whole)
``process.executable.name``    the command's base name
``process.pid``                the child's process id
``process.exit.code``          its exit code (128 + N when killed by signal N)
=============================  ===================================================

``service.name`` is ``--service-name``, else ``OTEL_SERVICE_NAME`` (or ``service.name`` in
``OTEL_RESOURCE_ATTRIBUTES``), else the command's base name. Spans and the ``hw.*``
metrics go where the standard ``OTEL_*`` variables say, or to ``--exporter`` (see
:mod:`otel_joules.delivery.setup`); metrics are exported every ``OTEL_METRIC_EXPORT_INTERVAL``
ms and once more at the end.

Behaviour: exits with the child's exit code (128 + N when it was killed by signal N).
SIGTERM is forwarded to the child; SIGINT, SIGHUP and SIGQUIT too, except when they come
from the terminal, which already delivered them to the child (same process group). At the
end a summary goes to standard error (duration, the host's joules during the run and the
command's share of them, kWh, gCO2eq of the share (of the host's energy where there is no share), with the PUE
and intensity used, source, where the data went); on a terminal a status
line shows elapsed time and current power while the command runs. Export problems (an unreachable collector) never change the exit code or block for
long: they are reported in one line.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import resource
import sys
import time
from typing import Any, Sequence

from opentelemetry.sdk.trace import Span, TracerProvider
from opentelemetry.trace import Status, StatusCode

from otel_joules.attribution.command import CommandBaselines
from otel_joules.attribution.gpu import CommandGpuShares
from otel_joules.attribution.shares import SpanAttribution, command_attribution
from otel_joules.attribution.procfs import CpuClocks, HostCpuTimes, ProcfsReadError
from otel_joules.attribution.uncovered import uncovered_joules, uncovered_positions
from otel_joules.carbon import providers_from_env, validate_pue
from otel_joules.carbon.intensity import CarbonIntensity
from otel_joules.carbon.accounting import CarbonAccounting
from otel_joules.carbon.refresh import RefreshingIntensity
from otel_joules.cli.child import ChildOutcome, check_runnable, run_child
from otel_joules.cli.summary import RunResult, failure_line, summary_lines
from otel_joules.config import POLICY_DYNAMIC, Settings, sdk_disabled
from otel_joules.instrumentation.context import child_environment, context_from_environment
from otel_joules.delivery.redaction import command_line
from otel_joules.delivery.outcomes import DeliveryReport, capture_sdk_logs
from otel_joules.delivery.setup import (
    DEFAULT_EXPORT_TIMEOUT_S,
    Telemetry,
    build_resource,
    telemetry_from_env,
)
from otel_joules.errors import ConfigurationError
from otel_joules.meter.interval import Interval
from otel_joules.meter.meter import EnergyMeasurement, EnergyMeter, EnergySnapshot
from otel_joules.meter.notice import announce_estimates
from otel_joules.metrics.instruments import EnergyMetrics
from otel_joules.semconv import (
    PROCESS_COMMAND_LINE,
    PROCESS_EXECUTABLE_NAME,
    PROCESS_EXIT_CODE,
    PROCESS_PID,
)
from otel_joules.tracing.attributes import span_attributes
from otel_joules.tracing.processor import EnergySpanProcessor, end_span_with_measurement

INSTRUMENTATION_SCOPE = "otel_joules.cli.run"


def register(subparsers: Any) -> None:
    """Add the ``run`` subcommand."""
    parser = subparsers.add_parser(
        "run",
        help="run a command and measure its energy as one OpenTelemetry span",
        description=(
            "Run CMD as a child process and measure it as one root span (energy, carbon, exit code),\n"
            "exported by the standard OTEL_* variables or --exporter, with the hw.* energy metrics.\n"
            "The child gets TRACEPARENT, so its own spans join the trace. Exits with the child's exit code."
        ),
        epilog=(
            "examples:\n"
            "  otel-joules run -- python train.py --epochs 3\n"
            "  OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4317 otel-joules run -- make test\n"
            "  otel-joules run --exporter csv:runs.csv --exporter console -- ./benchmark\n"
            "  srun otel-joules run -- python train.py   # each task reports its share of its node"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--exporter",
        action="append",
        metavar="SPEC",
        help="otlp, console, csv:PATH, jsonl:PATH, otlp-file:PATH, parquet:PATH or none; repeat for several "
        "(default: OTEL_TRACES_EXPORTER and OTEL_METRICS_EXPORTER, else otlp). The files hold spans only; "
        "otlp-file is OTLP/JSON for Jaeger's UI and Tempo; parquet:out/spans.parquet writes out/spans-<time>-<pid>-<n>.parquet",
    )
    parser.add_argument("--service-name", help="service.name (default: OTEL_SERVICE_NAME, else the command's name)")
    parser.add_argument("--span-name", help="name of the root span (default: the command's name)")
    parser.add_argument("--sysfs-root", help="where sysfs is mounted (default: OTEL_JOULES_SYSFS_ROOT or /sys)")
    parser.add_argument("--procfs-root", help="where procfs is mounted (default: OTEL_JOULES_PROCFS_ROOT or /proc)")
    parser.add_argument("--country", help="ISO country code for the carbon intensity (default: OTEL_JOULES_COUNTRY)")
    parser.add_argument("--carbon-intensity", type=float, metavar="GCO2EQ_PER_KWH", help="use this carbon intensity")
    parser.add_argument("--pue", type=float, default=1.0, help="data-centre PUE applied to the CO2eq (default 1.0)")
    parser.add_argument(
        "--export-timeout",
        type=float,
        default=DEFAULT_EXPORT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"longest wait for one export (default {DEFAULT_EXPORT_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--status",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="live status line with elapsed time and power (default: when standard error is a terminal)",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no summary at the end")
    parser.add_argument("-v", "--verbose", action="store_true", help="show the OpenTelemetry SDK's own log messages")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ARGS", help="the command to run")
    parser.set_defaults(handler=run)


# --- the parts --------------------------------------------------------------------------


# --- the command ------------------------------------------------------------------------


def _command_from(args: argparse.Namespace) -> list[str]:
    command = list(args.command or [])
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise ConfigurationError("no command given: put it after --, e.g. otel-joules run -- python train.py")
    return command


def run(args: argparse.Namespace) -> int:
    """Run the command, export its span and metrics, print the summary; return its exit code."""
    command = _command_from(args)
    problem = check_runnable(command[0])
    if problem is not None:
        print(f"otel-joules: {problem[1]}", file=sys.stderr)
        return problem[0]
    pue = validate_pue(args.pue)
    # Resolved once, here, and never refreshed: a command's run is one span priced at one intensity.
    intensity = RefreshingIntensity.resolve(
        args.carbon_intensity, args.country, providers_from_env(country=args.country)
    ).current()
    name = os.path.basename(command[0]) or command[0]

    report = DeliveryReport()
    meter = EnergyMeter(sysfs_root=args.sysfs_root, procfs_root=args.procfs_root)
    announce_estimates(meter)
    telemetry: Telemetry | None = None
    try:
        with contextlib.nullcontext() if args.verbose else capture_sdk_logs(report):
            if sdk_disabled():
                provider = TracerProvider(resource=build_resource(args.service_name, default_service_name=name))
            else:
                telemetry = telemetry_from_env(
                    service_name=args.service_name,
                    default_service_name=name,
                    exporters=args.exporter,
                    export_timeout_s=args.export_timeout,
                    batch_spans=False,
                    report=report,
                )
                provider = telemetry.tracer_provider
            result = _run_measured(args, command, name, meter, provider, telemetry, intensity, pue)
            if telemetry is not None:
                telemetry.shutdown()
            # Still capturing: an export that overran its bound may log from its thread now.
            _print_summary(args, result, telemetry, report)
    finally:
        meter.close()
    return result.exit_code


def _print_summary(args: argparse.Namespace, result: RunResult, telemetry: Telemetry | None, report: DeliveryReport) -> None:
    if args.quiet:
        failed = failure_line(report)
        lines = [] if failed is None else [failed]
    else:
        lines = summary_lines(result, telemetry)  # its data line says what could not be delivered
    try:
        for line in lines:
            print(line, file=sys.stderr)
    except (OSError, ValueError):
        pass  # standard error is gone (closed terminal): the exit code still tells


def _run_measured(
    args: argparse.Namespace,
    command: Sequence[str],
    name: str,
    meter: EnergyMeter,
    provider: TracerProvider,
    telemetry: Telemetry | None,
    intensity: CarbonIntensity,
    pue: float,
) -> RunResult:
    """Run the command as one span: its energy between two snapshots of our own, its share, its carbon."""
    accounting = CarbonAccounting(intensity, pue)
    # The span is ended with the measurement taken here (end_span_with_measurement): the processor
    # adds what every span carries (ranks), and the command's share is set below, because the
    # waiting thread of this process is not the work.
    provider.add_span_processor(EnergySpanProcessor(meter, attribution=False))
    energy_metrics = None
    if telemetry is not None and telemetry.meter_provider is not None:
        # No process.* here: this process only waits; the command's share is on its span.
        energy_metrics = EnergyMetrics(meter, telemetry.meter_provider, attribution=False)
    span = _command_span(provider, args, command, name)
    show_status = args.status if args.status is not None else (not args.quiet and sys.stderr.isatty())
    # Our own snapshots: with OTEL_SDK_DISABLED the span does not record, and the summary still
    # reports the energy.
    first = meter.snapshot()
    usage = CommandUsage(meter, first)
    started = time.monotonic()

    def on_start(pid: int) -> None:
        span.set_attribute(PROCESS_PID, pid)
        usage.gpu_shares.watch(pid)

    child = run_child(command, child_environment(span), meter, name, show_status, on_start=on_start)
    _set_outcome(span, child)
    duration_s = time.monotonic() - started
    last = meter.snapshot()
    attribution, gpu_charges, host_problem = usage.finish(first, last)
    measurement = _end_command_span(span, meter, accounting, first, last, attribution)
    grams = accounting.co2eq_grams(measurement.total_joules)
    # The span's energy.attributed.co2eq.grams: what `report` counts for this run, so the summary's headline.
    share_grams = None if attribution is None else accounting.co2eq_grams(attribution.joules)
    if energy_metrics is not None:
        energy_metrics.refresh()  # the final collection must not reuse an older read
    return RunResult(
        list(command),
        child.exit_code,
        duration_s,
        measurement,
        grams,
        intensity,
        pue,
        attribution,
        span.get_span_context(),
        child.signal_name,
        child.start_error,
        gpu_charges,
        None if attribution is not None else host_problem,
        share_grams,
        _platform(meter, measurement),
    )


def _platform(meter: EnergyMeter, measurement: EnergyMeasurement) -> tuple[str, float, float] | None:
    """(the whole-platform reading's domain id, its joules, its joules beyond the components') where one is read
    beside the components (:mod:`otel_joules.attribution.uncovered`), else None."""
    positions = uncovered_positions(meter.domains, meter.standby_domain_ids)
    if positions is None:
        return None
    domain = meter.domains[positions[0]].id
    joules = measurement.joules_by_domain
    if domain not in joules:
        return None
    return domain, joules[domain], uncovered_joules(positions, [joules.get(d.id) for d in meter.domains])


def _command_span(provider: TracerProvider, args: argparse.Namespace, command: Sequence[str], name: str) -> Span:
    """The command's span, started in the caller's trace (``TRACEPARENT``) with its command line."""
    return provider.get_tracer(INSTRUMENTATION_SCOPE).start_span(
        args.span_name or name,
        context=context_from_environment(),
        attributes={
            PROCESS_COMMAND_LINE: command_line(command, full=Settings.from_env().full_command_line),
            PROCESS_EXECUTABLE_NAME: name,
        },
    )


def _end_command_span(
    span: Span,
    meter: EnergyMeter,
    accounting: CarbonAccounting,
    first: EnergySnapshot,
    last: EnergySnapshot,
    attribution: SpanAttribution | None,
) -> EnergyMeasurement:
    """End the span with the energy between our two snapshots, the command's share and its carbon."""
    measurement = meter.measure(first, last)
    share_attributes = None
    if attribution is not None and span.is_recording() and meter.domains:
        # The share is priced here, not by the span's processor (which has no attributor): set before the span
        # ends, with the energy the processor sets again from the same measurement.
        share_attributes = span_attributes(Interval.of_measurement(measurement, meter), attribution)
        if share_attributes:
            span.set_attributes(share_attributes)
    carbon = None
    if measurement.joules_by_domain or measurement.missing_domains:
        carbon = accounting.span_attributes(measurement.total_joules, share_attributes)
    end_span_with_measurement(span, measurement, attributes=carbon)
    return measurement


def _set_outcome(span: Span, child: ChildOutcome) -> None:
    """The span's status and exit code from how the command ended."""
    if child.start_error is not None:
        span.set_status(Status(StatusCode.ERROR, f"could not start: {child.start_error}"))
    elif child.signal_name:
        span.set_status(Status(StatusCode.ERROR, f"killed by {child.signal_name}"))
    elif child.exit_code != 0:
        span.set_status(Status(StatusCode.ERROR, f"exited with code {child.exit_code}"))
    span.set_attribute(PROCESS_EXIT_CODE, child.exit_code)


class CommandUsage:
    """What the command used while it ran: the host's and its reaped processes' CPU time, its processes'
    GPU energy, and the domains' idle baselines, learned meanwhile (the spans' model: static and dynamic)."""

    def __init__(self, meter: EnergyMeter, first: EnergySnapshot) -> None:
        self.meter = meter
        self.clocks = CpuClocks(meter.settings.procfs_root)
        self.host_before, self.host_problem = _host_cpu(self.clocks)
        self.children_before_s = _children_cpu_s()
        self.baselines = CommandBaselines(meter)
        self.gpu_shares = CommandGpuShares(meter, first, static_watts=self.baselines.static_watts)

    def finish(
        self, first: EnergySnapshot, last: EnergySnapshot
    ) -> tuple[SpanAttribution | None, list[Any], str | None]:
        """The command's share between the snapshots (None where procfs could not be read, and why), and its GPUs' charges."""
        gpu_charges = self.gpu_shares.finish(last)
        baselines = self.baselines
        baselines.close()
        if baselines.policy == POLICY_DYNAMIC:
            # Dynamic energy only: each GPU's line says the part above its baseline, as the share counts it.
            gpu_charges = [dataclasses.replace(c, charged_joules=c.dynamic_joules) for c in gpu_charges]
        host_after, problem_after = _host_cpu(self.clocks)
        host_problem = self.host_problem or problem_after
        if self.host_before is None or host_after is None:
            return None, gpu_charges, host_problem
        attribution = command_attribution(
            self.meter,
            first,
            last,
            _children_cpu_s() - self.children_before_s,
            host_after.busy_s - self.host_before.busy_s,
            host_after.idle_s - self.host_before.idle_s,
            # A GPU the command holds carries its static energy under capacity and busy, as for spans.
            gpu_joules=sum(c.charged_joules for c in gpu_charges),
            gpu_dynamic_joules=sum(charge.dynamic_joules for charge in gpu_charges),
            static_watts=baselines.static_watts(),
            policy=baselines.policy,
            baseline=baselines.state,
        )
        return attribution, gpu_charges, host_problem


def _host_cpu(clocks: CpuClocks) -> tuple[HostCpuTimes | None, str | None]:
    """The host's busy and idle CPU seconds, or None and why (the run then has no share) where procfs cannot be read."""
    try:
        return clocks.host(), None
    except ProcfsReadError as exc:
        return None, str(exc)


def _children_cpu_s() -> float:
    """CPU seconds of this process's reaped children (the command and what it reaped)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


