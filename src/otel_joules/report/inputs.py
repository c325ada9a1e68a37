"""What reading a report's inputs yields, and how the unreadable lines of one file are collected.

Every format reader (:mod:`otel_joules.report.span_exports`, :mod:`otel_joules.report.otlp_files`,
:mod:`otel_joules.report.carbontracker_logs`) appends to one :class:`Inputs`; a file's
unreadable lines go through a :class:`LineErrors`, so a damaged file reports its first few
lines one by one and then only a count.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from otel_joules.report.model import CarbonTrackerRun, Skipped, SpanRow

#: Unreadable lines reported one by one per file; the rest are counted.
MAX_LINE_MESSAGES = 3


@dataclass
class Inputs:
    """Everything read from the paths given."""

    spans: list[SpanRow] = field(default_factory=list)
    carbontracker_runs: list[CarbonTrackerRun] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    files_read: list[str] = field(default_factory=list)


class LineErrors:
    """Collects unreadable lines of one file, reporting the first few and counting the rest."""

    def __init__(self, path: str, skipped: list[Skipped]) -> None:
        self.path = path
        self.skipped = skipped
        self.count = 0

    def add(self, line_number: int, reason: str) -> None:
        """Report line ``line_number`` as skipped for ``reason`` (one of the first few) or count it."""
        self.count += 1
        if self.count <= MAX_LINE_MESSAGES:
            self.skipped.append(Skipped(f"{self.path}:{line_number}", reason))

    def close(self) -> None:
        """At the end of the file: say how many more lines were skipped than were reported."""
        if self.count > MAX_LINE_MESSAGES:
            self.skipped.append(Skipped(self.path, f"{self.count - MAX_LINE_MESSAGES} more unreadable lines skipped"))
