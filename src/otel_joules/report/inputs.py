"""What reading a report's inputs yields, and how the unreadable lines of one file are collected.

Every format reader (:mod:`otel_joules.report.span_exports`, :mod:`otel_joules.report.otlp_files`,
:mod:`otel_joules.report.carbontracker_logs`) appends to one :class:`Inputs`; a file's
unreadable lines go through a :class:`LineErrors`, so a damaged file reports its first few
lines one by one and then only a count.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from otel_joules.report.model import CarbonTrackerRun, Skipped, SpanRow

#: Unreadable lines reported one by one per file; the rest are counted.
MAX_LINE_MESSAGES = 3


#: Spans the Python reader holds before handing them to :attr:`Inputs.flush` (its memory stays that of these).
SPANS_PER_FLUSH = 20000


@dataclass
class Inputs:
    """Everything read from the paths given.

    Attributes:
        spans: Spans read by the Python reader and not yet handed to ``flush``.
        carbontracker_runs: The log pairs read.
        skipped: Inputs left out, each with the reason.
        files_read: Files that gave something.
        spans_read: How many spans the Python reader has read, handed on or not.
        flush: Where spans go in batches (the SQL engine's store); None: they stay in ``spans``.
    """

    spans: list[SpanRow] = field(default_factory=list)
    carbontracker_runs: list[CarbonTrackerRun] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    files_read: list[str] = field(default_factory=list)
    spans_read: int = 0
    flush: Callable[[list[SpanRow]], None] | None = None

    def add_span(self, span: SpanRow) -> None:
        """Take one span read; hand the batch on once it is :data:`SPANS_PER_FLUSH` long."""
        self.spans.append(span)
        self.spans_read += 1
        if self.flush is not None and len(self.spans) >= SPANS_PER_FLUSH:
            self.flush_spans()

    def flush_spans(self) -> None:
        """Hand the spans held to :attr:`flush` (if set) and forget them."""
        if self.flush is not None and self.spans:
            self.flush(self.spans)
            self.spans = []


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
