"""``otel-joules run [options] -- CMD ARGS...``: run a command and measure it as one root span.

The command runs as a child process with the same standard streams and environment,
plus ``TRACEPARENT`` (and ``TRACESTATE``): the W3C trace context of the root span, so
an instrumented child's spans join the same trace. The root span (named after the
command, or ``--span-name``) carries:

=============================  ===================================================
``energy.*``                   what the energy meter measured (:mod:`otel_joules.tracing.attributes`)
``energy.attributed.*``        the command's share: its CPU time's part of the host's CPU and
                               memory energy (its own and its reaped descendants' CPU time) plus
                               the measured GPUs (:func:`otel_joules.attribution.command_attribution`)
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
command's share of them, kWh, gCO2eq, source, where the data went); on a terminal a status
line shows elapsed time and current power while the command runs. Export problems (an unreachable collector) never change the exit code or block for
long: they are reported in one line.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TextIO

from opentelemetry import trace
from opentelemetry.sdk.trace import Span, TracerProvider
from opentelemetry.trace import Status, StatusCode

from otel_joules.carbon import co2eq_grams, joules_to_kwh, providers_from_env, resolve_carbon_intensity, validate_pue
from otel_joules.carbon.intensity import CarbonIntensity
from otel_joules.carbon.spans import carbon_attributes
from otel_joules.config import Settings
from otel_joules.instrumentation.context import child_environment, context_from_environment
from otel_joules.delivery.redaction import command_line
from otel_joules.delivery.setup import (
    DEFAULT_EXPORT_TIMEOUT_S,
    SIGNAL_METRICS,
    SIGNAL_TRACES,
    DeliveryReport,
    Telemetry,
    build_resource,
    capture_sdk_logs,
    iter_failures_by_destination,
    telemetry_from_env,
)
from otel_joules.attribution.model import SpanAttribution, command_attribution, measured_kinds
from otel_joules.attribution.procfs import CpuClocks, HostCpuTimes, ProcfsReadError
from otel_joules.errors import ConfigurationError
from otel_joules.meter.meter import EnergyMeasurement, EnergyMeter
from otel_joules.metrics.instruments import EnergyMetrics
from otel_joules.tracing.attributes import attribution_attributes
from otel_joules.semconv import ENERGY_CO2EQ_GRAMS
from otel_joules.tracing.processor import EnergySpanProcessor


PROCESS_COMMAND_LINE = "process.command_line"
PROCESS_EXECUTABLE_NAME = "process.executable.name"
PROCESS_PID = "process.pid"
PROCESS_EXIT_CODE = "process.exit.code"

#: Exit codes of a shell for a command that cannot be run.
EXIT_NOT_FOUND = 127
EXIT_NOT_EXECUTABLE = 126

#: Signals a terminal sends to its whole foreground process group.
_TERMINAL_SIGNALS = (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
_FORWARDED_SIGNALS = (signal.SIGTERM,) + _TERMINAL_SIGNALS

_STATUS_PERIOD_S = 0.5

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
        help="otlp, console, csv:PATH, jsonl:PATH, otlp-file:PATH or none; repeat for several "
        "(default: OTEL_TRACES_EXPORTER and OTEL_METRICS_EXPORTER, else otlp). The files hold spans only; "
        "otlp-file is OTLP/JSON for Jaeger's UI and Tempo",
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


class SignalForwarder:
    """Forwards termination signals to the child while it runs.

    A terminal delivers SIGINT (Ctrl-C), SIGQUIT and SIGHUP to its whole foreground
    process group, child included; forwarding those again would interrupt the child's
    own clean-up. So they are forwarded only when this process is not in the terminal's
    foreground group (e.g. ``kill -INT`` from a script, or running in the background).
    SIGTERM never comes from a terminal and is always forwarded.
    """

    def __init__(self, process: subprocess.Popen[Any]) -> None:
        self._process = process
        self._previous: dict[int, Any] = {}
        self.received: list[int] = []

    def install(self) -> None:
        """Take over the signals (main thread only)."""
        for signum in _FORWARDED_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)

    def restore(self) -> None:
        """Give the signals back to their previous handlers."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        self.received.append(signum)
        if signum in _TERMINAL_SIGNALS and _in_terminal_foreground():
            return
        try:
            self._process.send_signal(signum)
        except (ProcessLookupError, OSError):
            pass  # it has just exited: nothing to forward to


def _in_terminal_foreground() -> bool:
    """True when our process group is the foreground group of our controlling terminal."""
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd):
                return os.tcgetpgrp(fd) == os.getpgrp()
        except OSError:
            continue
    return False


class StatusLine(threading.Thread):
    """Rewrites one line on standard error: elapsed time, current power, joules so far."""

    def __init__(self, meter: EnergyMeter, stream: TextIO, label: str) -> None:
        super().__init__(name="otel-joules-status", daemon=True)
        self._meter = meter
        self._stream = stream
        self._label = label
        self._stop_event = threading.Event()
        self._started_at = time.monotonic()

    def run(self) -> None:
        first = previous = self._meter.snapshot()
        while not self._stop_event.wait(_STATUS_PERIOD_S):
            current = self._meter.snapshot()
            now_w = self._meter.measure(previous, current)
            so_far = self._meter.measure(first, current)
            previous = current
            # An estimate says so here too, as everywhere else.
            label = "" if now_w.source == "measured" else f" {now_w.source}"
            power = f"{now_w.watts:.1f} W{label}" if now_w.joules_by_domain else "nothing measured in this process"
            text = f"otel-joules: {self._label} {format_duration(time.monotonic() - self._started_at)}, {power}, {format_joules(so_far.total_joules)}"
            self._write("\r\x1b[K" + text)

    def _write(self, text: str) -> None:
        try:
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError):
            self._stop_event.set()  # the terminal went away

    def stop(self) -> None:
        """Stop updating and clear the line."""
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout=2)
        self._write("\r\x1b[K")


# --- formatting ------------------------------------------------------------------------


def format_duration(seconds: float) -> str:
    """``0.42 s``, ``12.3 s``, ``2:03:04`` (h:mm:ss) from one hour on, ``4:05`` (m:ss) from a minute."""
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def format_joules(joules: float) -> str:
    """Joules with a unit prefix: ``12.3 J``, ``4.56 kJ``, ``7.89 MJ``."""
    for factor, unit in ((1e9, "GJ"), (1e6, "MJ"), (1e3, "kJ")):
        if abs(joules) >= factor:
            return f"{joules / factor:.4g} {unit}"
    return f"{joules:.4g} J"


def summary_lines(result: RunResult, telemetry: Telemetry | None) -> list[str]:
    """The human summary printed at the end (without the delivery-failure line)."""
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
        kwh = joules_to_kwh(max(m.total_joules, 0.0))
        lines.append(
            f"  energy   {format_joules(m.total_joules)} = {kwh:.4g} kWh, {m.watts:.4g} W on average, "
            f"the whole host's during the command ({m.source}: {', '.join(sorted(m.joules_by_domain))})"
        )
        if m.below_resolution:
            lines.append(
                f"  note     BELOW RESOLUTION: {format_duration(m.duration_s)} is shorter than a counter's update "
                "period, so these joules and watts are quantised, not exact; measure a longer run"
            )
        if result.attribution is not None:
            share = result.attribution
            lines.append(
                f"  share    {format_joules(share.joules)} of that is the command's ({m.source}; its CPU time's part "
                f"of the host's CPU and memory energy: {format_joules(share.cpu_joules + share.memory_joules)}"
                + (f", plus its GPUs: {format_joules(share.gpu_joules)}" if share.gpu_joules else "")
                + ")"
            )
        if result.co2eq_grams is not None:
            pue = f", PUE {result.pue:g}" if result.pue != 1.0 else ""
            lines.append(
                f"  carbon   {result.co2eq_grams:.4g} gCO2eq at {result.intensity.gco2eq_per_kwh:g} gCO2eq/kWh{pue} "
                f"({result.intensity.source}: {result.intensity.detail})"
            )
    if telemetry is None:
        lines.append("  data     not exported (OTEL_SDK_DISABLED=true)")
    elif not telemetry.destinations:
        lines.append("  data     not exported (no exporter configured)")
    else:
        parts = []
        for signal_name in (SIGNAL_TRACES, SIGNAL_METRICS):
            for destination in telemetry.destinations_for(signal_name):
                parts.append(f"{signal_name} -> {destination}: {telemetry.report.outcome(destination)}")
        if not telemetry.destinations_for(SIGNAL_METRICS):
            parts.append("metrics not exported")
        lines.append("  data     " + "; ".join(parts))
    if result.span_context is not None and result.span_context.is_valid:
        lines.append(f"  trace    {result.span_context.trace_id:032x}")
    return lines


def failure_line(report: DeliveryReport) -> str | None:
    """One line naming every destination that failed and why, or None."""
    failed = list(iter_failures_by_destination(report))
    if not failed:
        return None
    by_target: dict[str, tuple[list[str], str]] = {}
    for destination, reason in failed:
        signals, _ = by_target.setdefault(str(destination), ([], reason))
        signals.append(destination.signal)
    described = "; ".join(f"{' and '.join(signals)} to {target}: {reason}" for target, (signals, reason) in by_target.items())
    hint = ""
    if report.sdk_messages:
        hint = f" (exporter said: {report.sdk_messages[0]})"
    return f"otel-joules: could not deliver {described}{hint}. The command's result is not affected."


# --- the command ------------------------------------------------------------------------


def _command_from(args: argparse.Namespace) -> list[str]:
    command = list(args.command or [])
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise ConfigurationError("no command given: put it after --, e.g. otel-joules run -- python train.py")
    return command


def check_runnable(executable: str) -> tuple[int, str] | None:
    """``(exit code, message)`` when ``executable`` cannot be run, the way a shell reports it."""
    if os.sep in executable:
        if not os.path.exists(executable):
            return EXIT_NOT_FOUND, f"{executable}: no such file"
        if os.path.isdir(executable) or not os.access(executable, os.X_OK):
            return EXIT_NOT_EXECUTABLE, f"{executable}: not an executable file"
        return None
    if shutil.which(executable) is None:
        return EXIT_NOT_FOUND, f"{executable}: command not found on PATH"
    return None


def _sdk_disabled() -> bool:
    return os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def run(args: argparse.Namespace) -> int:
    """Run the command, export its span and metrics, print the summary; return its exit code."""
    command = _command_from(args)
    problem = check_runnable(command[0])
    if problem is not None:
        print(f"otel-joules: {problem[1]}", file=sys.stderr)
        return problem[0]
    pue = validate_pue(args.pue)
    intensity = resolve_carbon_intensity(args.carbon_intensity, args.country, providers_from_env(country=args.country))
    name = os.path.basename(command[0]) or command[0]

    report = DeliveryReport()
    meter = EnergyMeter(sysfs_root=args.sysfs_root, procfs_root=args.procfs_root)
    telemetry: Telemetry | None = None
    try:
        with contextlib.nullcontext() if args.verbose else capture_sdk_logs(report):
            if _sdk_disabled():
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
    lines = [] if args.quiet else summary_lines(result, telemetry)
    failed = failure_line(report)
    if failed is not None:
        lines.append(failed)
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
    measured: dict[str, Any] = {}

    def on_measurement(span: Span, measurement: EnergyMeasurement) -> None:
        measured["measurement"] = measurement
        attributes = carbon_attributes(measurement.total_joules, intensity, pue, span.attributes)
        measured["grams"] = float(attributes[ENERGY_CO2EQ_GRAMS])
        span.set_attributes(attributes)

    # The command's share is set on the span below: the waiting thread of this process is not the work.
    provider.add_span_processor(EnergySpanProcessor(meter, on_measurement=on_measurement, attribution=False))
    energy_metrics = None
    if telemetry is not None and telemetry.meter_provider is not None:
        # No process.* here: this process only waits; the command's share is on its span.
        energy_metrics = EnergyMetrics(meter, telemetry.meter_provider, attributor=None)
    tracer = provider.get_tracer(INSTRUMENTATION_SCOPE)
    span = tracer.start_span(
        args.span_name or name,
        context=context_from_environment(),
        attributes={
            PROCESS_COMMAND_LINE: command_line(command, full=Settings.from_env().full_command_line),
            PROCESS_EXECUTABLE_NAME: name,
        },
    )
    show_status = args.status if args.status is not None else (not args.quiet and sys.stderr.isatty())
    # Own snapshots too: with OTEL_SDK_DISABLED the span does not record, and the
    # summary still reports the energy.
    first = meter.snapshot()
    clocks = CpuClocks(meter.settings.procfs_root)
    host_before = _host_cpu(clocks)
    children_before_s = _children_cpu_s()
    started = time.monotonic()
    env = child_environment(span)
    child = run_child(command, env, meter, name, show_status, on_start=lambda pid: span.set_attribute(PROCESS_PID, pid))
    exit_code, signal_name, start_error = child.exit_code, child.signal_name, child.start_error
    if start_error is not None:
        span.set_status(Status(StatusCode.ERROR, f"could not start: {start_error}"))
    else:
        if signal_name:
            span.set_status(Status(StatusCode.ERROR, f"killed by {signal_name}"))
        elif exit_code != 0:
            span.set_status(Status(StatusCode.ERROR, f"exited with code {exit_code}"))
    span.set_attribute(PROCESS_EXIT_CODE, exit_code)
    duration_s = time.monotonic() - started
    attribution = None
    host_after = _host_cpu(clocks)
    if host_before is not None and host_after is not None:
        attribution = command_attribution(
            meter,
            first,
            meter.snapshot(),
            _children_cpu_s() - children_before_s,
            host_after.busy_s - host_before.busy_s,
            host_after.idle_s - host_before.idle_s,
        )
        if span.is_recording() and meter.domains:
            span.set_attributes(attribution_attributes(attribution, measured_kinds(meter.domains)))
    span.end()
    if "measurement" not in measured:
        measurement = meter.measure(first, meter.snapshot())
        measured["measurement"] = measurement
        measured["grams"] = co2eq_grams(max(measurement.total_joules, 0.0), intensity, pue)
    if energy_metrics is not None:
        energy_metrics.refresh()  # the final collection must not reuse an older read
    return RunResult(
        list(command),
        exit_code,
        duration_s,
        measured.get("measurement"),
        measured.get("grams"),
        intensity,
        pue,
        attribution,
        span.get_span_context(),
        signal_name,
        start_error,
    )


@dataclass(frozen=True)
class ChildOutcome:
    """How a child process ended.

    Attributes:
        exit_code: Its exit code; 128 + N when killed by signal N; 127/126 when it could not start.
        signal_name: The signal that killed it (``SIGTERM``), or None.
        start_error: Why it could not start, or None.
    """

    exit_code: int
    signal_name: str | None = None
    start_error: str | None = None


def run_child(
    command: Sequence[str],
    env: dict[str, str],
    meter: EnergyMeter,
    label: str,
    show_status: bool,
    *,
    on_start: Callable[[int], None] | None = None,
) -> ChildOutcome:
    """Run ``command`` with ``env`` until it ends: signals forwarded, status line on request.

    Used by ``otel-joules run`` and by the carbontracker-style command line
    (:mod:`otel_joules.carbontracker.cli`). ``on_start`` gets the child's pid once it runs.
    """
    try:
        process = subprocess.Popen(list(command), env=env)
    except OSError as exc:
        exit_code = EXIT_NOT_FOUND if isinstance(exc, FileNotFoundError) else EXIT_NOT_EXECUTABLE
        return ChildOutcome(exit_code, start_error=exc.strerror or str(exc))
    if on_start is not None:
        on_start(process.pid)
    exit_code, signal_name = _wait(process, meter, label, show_status)
    return ChildOutcome(exit_code, signal_name)


def _host_cpu(clocks: CpuClocks) -> HostCpuTimes | None:
    """The host's busy and idle CPU seconds, None (the run then has no share) where procfs cannot be read."""
    try:
        return clocks.host()
    except ProcfsReadError:
        return None


def _children_cpu_s() -> float:
    """CPU seconds of this process's reaped children (the command and what it reaped)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _wait(process: subprocess.Popen[Any], meter: EnergyMeter, name: str, show_status: bool) -> tuple[int, str | None]:
    """Wait for the child, forwarding signals and showing the status line; return (exit code, signal name)."""
    forwarder = SignalForwarder(process)
    status = StatusLine(meter, sys.stderr, name) if show_status else None
    on_main_thread = threading.current_thread() is threading.main_thread()
    if on_main_thread:
        forwarder.install()
    try:
        if status is not None:
            status.start()
        returncode = _wait_uninterrupted(process.wait)
    finally:
        if status is not None:
            status.stop()
        if on_main_thread:
            forwarder.restore()
    if returncode < 0:
        signum = -returncode
        try:
            signal_name = signal.Signals(signum).name
        except ValueError:
            signal_name = f"signal {signum}"
        return 128 + signum, signal_name
    return returncode, None


def _wait_uninterrupted(wait: Callable[[], int]) -> int:
    # A KeyboardInterrupt can still arrive between installing handlers and waiting;
    # the child got the same Ctrl-C, so keep waiting for it.
    while True:
        try:
            return wait()
        except KeyboardInterrupt:
            continue
