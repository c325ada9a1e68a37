"""The ``otel-joules`` command: one subcommand per module in this package."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from typing import Sequence

from otel_joules._version import __version__
from otel_joules.errors import OtelJoulesError

#: Modules providing ``register(subparsers)``; each subcommand lives in its own module.
SUBCOMMAND_MODULES = (
    "otel_joules.cli.devices",
    "otel_joules.cli.doctor",
    "otel_joules.cli.run",
    "otel_joules.cli.report",
    "otel_joules.cli.agent",
    "otel_joules.cli.access",
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every available subcommand."""
    parser = argparse.ArgumentParser(
        prog="otel-joules",
        description="Energy (joules) and carbon of your code, as OpenTelemetry spans and metrics.",
    )
    parser.add_argument("--version", action="version", version=f"otel-joules {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        return int(args.handler(args) or 0)
    except OtelJoulesError as exc:
        print(f"otel-joules: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
