"""carbontracker's command line, measured by otel-joules: ``python -m otel_joules.carbontracker.cli``.

Same arguments as carbontracker 2.4.7's ``carbontracker`` command::

    python -m otel_joules.carbontracker.cli [--log_dir DIR] [--api_keys '{"electricitymaps": "KEY"}']
        [--sim-cpu NAME --sim-cpu-tdp W [--sim-cpu-util U]] [--sim-gpu NAME --sim-gpu-watts W [--sim-gpu-util U]]
        python train.py ...
    python -m otel_joules.carbontracker.cli --parse DIR                  # print_aggregate(DIR)
    python -m otel_joules.carbontracker.cli --report LOG --output report.pdf

The command runs as one epoch of a :class:`~otel_joules.carbontracker.tracker.CarbonTracker`
(``epochs=1, epochs_before_pred=0``, as carbontracker does), which writes
carbontracker-format logs into ``--log_dir`` (default ``./logs``), prints carbontracker's
console messages, and makes the ``training``/``epoch`` spans. The child is run by
``otel-joules run``'s machinery (:func:`otel_joules.cli.child.run_child`): signals are
forwarded, the child gets ``TRACEPARENT`` of the epoch span (an instrumented child's spans
join the trace), and the spans are exported by the standard ``OTEL_*`` variables
(:func:`otel_joules.delivery.setup.telemetry_from_env`) when ``OTEL_TRACES_EXPORTER`` or
an OTLP endpoint variable is set, or by ``--exporter`` (otel-joules' own option).

Different from carbontracker, on purpose: the exit code is the command's (carbontracker
exits 0 whatever the command did); a command that cannot be run is reported the way a shell
does, exit code 127 or 126, before anything is measured (carbontracker fails with a
traceback); no command at all is a usage error (carbontracker measures nothing and writes
an empty run); ``--api_keys`` is read as JSON or as a Python literal, never evaluated.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
from typing import Any, Mapping, Sequence

from opentelemetry import trace
from opentelemetry.environment_variables import OTEL_TRACES_EXPORTER
from opentelemetry.sdk.environment_variables import OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT

from otel_joules.carbontracker import parser as log_parser
from otel_joules.carbontracker.tracker import CarbonTracker
from otel_joules.cli.child import check_runnable, run_child
from otel_joules.cli.summary import failure_line
from otel_joules.instrumentation.context import child_environment
from otel_joules.delivery.outcomes import DeliveryReport, capture_sdk_logs
from otel_joules.delivery.setup import Telemetry, telemetry_from_env
from otel_joules.config import sdk_disabled
from otel_joules.errors import ConfigurationError, OtelJoulesError

PROG = "python -m otel_joules.carbontracker.cli"
#: carbontracker's default log directory for its command line.
DEFAULT_LOG_DIR = "./logs"
#: carbontracker's default PDF name for ``--report``.
DEFAULT_REPORT_PDF = "carbon_report.pdf"
#: Variables that name where OpenTelemetry data goes; without any, spans are not exported.
_EXPORT_VARIABLES = (
    OTEL_TRACES_EXPORTER,
    OTEL_EXPORTER_OTLP_ENDPOINT,
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
)


def build_parser() -> argparse.ArgumentParser:
    """carbontracker 2.4.7's arguments (same names and defaults), plus ``--exporter``."""
    cli = argparse.ArgumentParser(
        prog=PROG,
        description="Track the energy and carbon of a command, as carbontracker's command line does, measured by "
        "otel-joules.",
        epilog=(
            "examples:\n"
            f"  {PROG} --log_dir ./logs python train.py\n"
            f"  {PROG} --sim-cpu 'Intel Xeon' --sim-cpu-tdp 150 python train.py\n"
            f"  {PROG} --parse ./logs\n"
            f"  {PROG} --report ./logs/<run>_carbontracker.log --output report.pdf"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cli.add_argument("--log_dir", type=str, default=DEFAULT_LOG_DIR, help="Log directory (default ./logs)")
    cli.add_argument(
        "--api_keys", type=str, default=None, help='API keys as a dictionary, e.g. \'{"electricitymaps": "YOUR_KEY"}\''
    )
    cli.add_argument("--parse", type=str, help="Directory containing the log files to parse.")
    cli.add_argument("--report", type=str, help="Generate a PDF report from a log file.")
    cli.add_argument("--output", type=str, default=DEFAULT_REPORT_PDF, help="Output path for the generated report.")
    cli.add_argument("--sim-cpu", type=str, default=None, help="Simulated CPU name (overrides detection)")
    cli.add_argument("--sim-cpu-tdp", type=float, default=None, help="Simulated CPU TDP in Watts")
    cli.add_argument("--sim-cpu-util", type=float, default=None, help="Simulated CPU utilization (0.0 to 1.0)")
    cli.add_argument("--sim-gpu", type=str, default=None, help="Simulated GPU name (overrides detection)")
    cli.add_argument("--sim-gpu-watts", type=float, default=None, help="Simulated GPU power consumption in Watts")
    cli.add_argument("--sim-gpu-util", type=float, default=None, help="Simulated GPU utilization (0.0 to 1.0)")
    cli.add_argument(
        "--exporter",
        action="append",
        metavar="SPEC",
        help="(otel-joules) where the spans go: otlp, console, csv:PATH, jsonl:PATH; repeat for several "
        "(default: the OTEL_* variables when set, else none)",
    )
    # Everything from the first word that is not an option of ours is the command, its own
    # options included (carbontracker's parse_known_args took e.g. a script's --output).
    cli.add_argument("command", nargs=argparse.REMAINDER, help="the command to track, e.g. python train.py")
    return cli


def parse_api_keys(text: str | None) -> Mapping[str, str] | None:
    """``--api_keys`` as a dict: JSON, or a Python literal as carbontracker reads it (never evaluated as code).

    Raises:
        ConfigurationError: not a dictionary of strings.
    """
    if text is None:
        return None
    try:
        value: Any = json.loads(text)
    except ValueError:
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = None
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ConfigurationError(f"--api_keys {text!r} must be a dictionary such as '{{\"electricitymaps\": \"KEY\"}}'")
    return value


def _telemetry(exporters: Sequence[str] | None, name: str, report: DeliveryReport) -> Telemetry | None:
    if sdk_disabled():
        return None
    if exporters is None and not any(os.environ.get(variable) for variable in _EXPORT_VARIABLES):
        return None  # a carbontracker user asked for logs, not for a collector
    return telemetry_from_env(default_service_name=name, exporters=exporters, batch_spans=False, report=report)


def track_command(args: argparse.Namespace, command: Sequence[str]) -> int:
    """Run ``command`` as one measured epoch; return its exit code."""
    problem = check_runnable(command[0])
    if problem is not None:
        print(f"{PROG}: {problem[1]}", file=sys.stderr)
        return problem[0]
    name = os.path.basename(command[0]) or command[0]
    report = DeliveryReport()
    with capture_sdk_logs(report):
        api_keys = parse_api_keys(args.api_keys)
        telemetry = _telemetry(args.exporter, name, report)
        try:
            tracker = CarbonTracker(
                epochs=1,
                log_dir=args.log_dir,
                epochs_before_pred=0,
                api_keys=api_keys,
                sim_cpu=args.sim_cpu,
                sim_cpu_tdp=args.sim_cpu_tdp,
                sim_cpu_util=args.sim_cpu_util,
                sim_gpu=args.sim_gpu,
                sim_gpu_watts=args.sim_gpu_watts,
                sim_gpu_util=args.sim_gpu_util,
                tracer_provider=telemetry.tracer_provider if telemetry is not None else None,
            )
        except Exception:
            if telemetry is not None:
                telemetry.shutdown()
            raise
        try:
            tracker.epoch_start()
            # The tracker made the epoch span current: the child's spans become its children.
            env = child_environment(trace.get_current_span())
            meter = tracker.meter
            if meter is None:  # the tracker failed to start (with ignore_errors=False it raised already)
                raise OtelJoulesError("the tracker could not start measuring")
            outcome = run_child(command, env, meter, name, show_status=False)
            tracker.epoch_end()
        finally:
            tracker.stop()
            if telemetry is not None:
                telemetry.shutdown()
    failed = failure_line(report)
    if failed is not None:
        print(failed, file=sys.stderr)
    if outcome.start_error is not None:
        print(f"{PROG}: could not start {command[0]}: {outcome.start_error}", file=sys.stderr)
    elif outcome.signal_name is not None:
        print(f"{PROG}: {command[0]} was killed by {outcome.signal_name}", file=sys.stderr)
    elif outcome.exit_code != 0:
        print(f"{PROG}: {command[0]} exited with code {outcome.exit_code}", file=sys.stderr)
    return outcome.exit_code


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit code (the tracked command's, 2 for usage errors)."""
    cli = build_parser()
    known = cli.parse_args(argv)
    try:
        if known.parse:
            log_parser.print_aggregate(known.parse)
            return 0
        if known.report:
            from otel_joules.carbontracker.report import generate_report_from_log

            try:
                generate_report_from_log(known.report, known.output)
            except OtelJoulesError:
                raise
            except OSError as exc:  # the PDF cannot be written (a link at its path is refused)
                print(f"{PROG}: cannot write the report {known.output!r}: {exc.strerror or exc}", file=sys.stderr)
                return 1
            print(f"Report generated: {known.output}")
            return 0
        command = list(known.command)
        if command[:1] == ["--"]:
            command = command[1:]
        if not command:
            cli.print_usage(sys.stderr)
            print(f"{PROG}: no command given: e.g. {PROG} --log_dir ./logs python train.py", file=sys.stderr)
            return 2
        return track_command(known, command)
    except OtelJoulesError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
