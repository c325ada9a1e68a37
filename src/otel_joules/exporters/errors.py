"""Errors the local exporters raise at construction (never from ``export``)."""

from __future__ import annotations

from otel_joules.errors import ConfigurationError


class ExporterPathError(ConfigurationError):
    """The output file cannot be created, read or written; the message says which and why."""


class CsvHeaderMismatchError(ConfigurationError):
    """The existing CSV file has another header than this exporter would write.

    Raised before anything is written, so the existing file is left exactly as it was.
    """

