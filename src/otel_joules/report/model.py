"""The values a report is made of: spans read from files, runs, skipped inputs, totals."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from otel_joules.carbon.equivalents import Equivalent
from otel_joules.errors import OtelJoulesError
from otel_joules.semconv import ENERGY_CLOCK_STEP_S, KIND_CPU, KIND_GPU, KIND_MEMORY

#: Attribute values as read back from any export format.
AttributeValue = object

#: What a run's ``joules`` are (:attr:`RunSummary.energy_basis`).
BASIS_ATTRIBUTED = "attributed share"
BASIS_INTERVAL = "interval energy"
BASIS_LOGGED = "logged total"
BASIS_EPOCHS = "epoch power x duration"

#: :attr:`RunSummary.kind` values. A report's totals are kept apart by kind (:class:`KindTotals`): a trace counts its
#: spans' attributed share, a carbontracker log the host's energy the tracker logged, and the two never add into one figure.
RUN_KIND_TRACE = "trace"
RUN_KIND_CARBONTRACKER = "carbontracker"
RUN_KINDS = (RUN_KIND_TRACE, RUN_KIND_CARBONTRACKER)

#: Energy kinds a run is split into: ``hw.type`` values; ``cpu+memory`` for a carbontracker
#: log's cpu component that holds the memory too; ``other`` for what no kind covers.
PART_KINDS = (KIND_CPU, KIND_MEMORY, KIND_GPU, "cpu+memory", "other")


class ReportError(OtelJoulesError):
    """The report cannot be made (nothing readable, a plot without matplotlib, an unwritable file)."""


@dataclass(frozen=True, slots=True)
class SpanRow:
    """One span read back from a CSV, JSON-lines or OTLP JSON file.

    Attributes:
        trace_id: 32 lowercase hex digits.
        span_id: 16 lowercase hex digits.
        parent_span_id: The parent's span id, or None for a root span.
        name: The span's name.
        start_unix_nano: Start, nanoseconds since the epoch (None if unknown).
        end_unix_nano: End, nanoseconds since the epoch (None if unknown).
        service_name: ``service.name`` of its resource, if known.
        attributes: Its attributes (CSV and JSON lines hold only ``energy.*``,
            ``carbon.*`` and ``training.*`` ones: all the report needs).
        source: The file it was read from.
    """

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    start_unix_nano: int | None
    end_unix_nano: int | None
    service_name: str | None
    attributes: Mapping[str, AttributeValue]
    source: str

    @property
    def duration_s(self) -> float | None:
        """Its measured duration in seconds: end - start, less ``energy.clock_step_s`` where the wall clock stepped
        during the span (its times are off by the step), never negative; None when a time is unknown."""
        if self.start_unix_nano is None or self.end_unix_nano is None:
            return None
        return max(0.0, (self.end_unix_nano - self.start_unix_nano) / 1e9 - (self.number(ENERGY_CLOCK_STEP_S) or 0.0))

    def number(self, key: str) -> float | None:
        """The attribute ``key`` as a finite float, or None when absent or not a finite number."""
        value = self.attributes.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        number = float(value)
        return number if number == number and number not in (float("inf"), float("-inf")) else None


@dataclass(frozen=True)
class CarbonTrackerRun:
    """A carbontracker-format run (a standard log and its output log), as read.

    Attributes:
        stem: The common part of the two file names.
        std_log: Path of the standard log.
        output_log: Path of the output log.
        software: Who wrote it (``carbontracker``, ``otel-joules``), from the version line.
        pue: The PUE the log states.
        average_intensity_g_per_kwh: The intensity the log states, if any.
        devices: Component -> device names.
        epochs: ``(epoch, duration_s, {component: watts tuple or None})`` per complete epoch.
        logged_actual_kwh: The output log's actual consumption (kWh, with PUE), if any.
        logged_actual_co2eq_grams: Its CO2eq, if any.
        early_stop: The log says training was interrupted.
        trace_id: The trace of the same run, when an otel-joules tracker wrote the log.
        logged_actual_epochs: How many epochs the logged actual consumption covers.
        energy_source: ``measured``, ``estimate`` or ``mixed`` as the log says; None when
            it does not say (carbontracker's own logs).
        below_resolution: The log says an epoch was shorter than a counter's update period.
        logged_share_kwh: This process's share of the logged actual consumption (kWh, with
            PUE), when an otel-joules tracker logged it.
    """

    stem: str
    std_log: str
    output_log: str
    software: str | None
    pue: float | None
    average_intensity_g_per_kwh: float | None
    devices: Mapping[str, tuple[str, ...]]
    epochs: tuple[tuple[int, float, Mapping[str, tuple[float, ...] | None]], ...]
    logged_actual_kwh: float | None
    logged_actual_co2eq_grams: float | None
    early_stop: bool
    trace_id: str | None = None
    logged_actual_epochs: int | None = None
    energy_source: str | None = None
    below_resolution: bool = False
    logged_share_kwh: float | None = None


@dataclass(frozen=True)
class Skipped:
    """An input (file, line, run or trace) left out of the report, and why."""

    path: str
    reason: str


@dataclass(frozen=True)
class EnergyPart:
    """One kind's share of a run's (or epoch's) joules, and whether it was measured.

    Attributes:
        kind: One of :data:`PART_KINDS`.
        joules: Its joules, on the run's basis (attributed share or interval energy).
        source: ``measured``, ``estimate`` or ``mixed``; None when the input does not say.
    """

    kind: str
    joules: float
    source: str | None


@dataclass(frozen=True)
class EpochSummary:
    """Energy of one epoch of a run (IT energy, no PUE)."""

    epoch: int
    duration_s: float | None
    joules: float
    parts: tuple[EnergyPart, ...] = ()


@dataclass(frozen=True)
class RunSummary:
    """One run: a trace (spans from any export) or a carbontracker log pair.

    Attributes:
        run_id: Trace id, or the carbontracker log stem.
        kind: ``trace`` or ``carbontracker`` (:data:`RUN_KINDS`).
        name: The root span's name, or ``carbontracker`` / ``otel-joules`` for logs.
        service_name: ``service.name`` of the trace, if known.
        sources: Files it was read from.
        start_unix_nano: When it started, if known.
        duration_s: Its length (trace: first start to last end; log: sum of epochs).
        joules: IT energy in joules (see :mod:`otel_joules.report` for what is summed).
        pue: PUE applied to ``energy_kwh`` and ``co2eq_grams``.
        pue_origin: ``option`` (``--pue``), ``recorded`` (in the input) or ``default`` (1.0).
        energy_kwh: ``joules x pue / 3.6e6``.
        co2eq_grams: Grams of CO2eq.
        intensity_gco2eq_per_kwh: The intensity behind ``co2eq_grams`` (None if unknown).
        intensity_source: Where it came from: ``recorded``, ``recorded co2eq`` (the
            spans' own ``energy.co2eq.grams``), or a :data:`otel_joules.carbon.SOURCES` name.
        epochs: Per-epoch energy, where the input has epochs.
        energy_source: ``measured``, ``estimate`` or ``mixed`` when the input says; ``partial`` when a
            counted span left out a domain that could not be read (its notes name it): the joules are low.
        spans_counted: Spans whose energy makes up ``joules`` (0 for logs).
        notes: Corrections and caveats for this run.
        energy_basis: What ``joules`` is: :data:`BASIS_ATTRIBUTED` (the spans' attributed
            share), :data:`BASIS_INTERVAL` (host energy over the spans' intervals: exports
            without attribution), :data:`BASIS_LOGGED` (carbontracker's logged actual
            consumption) or :data:`BASIS_EPOCHS` (recomputed from the log's epochs).
        host_interval_joules: For an attributed run, the host's energy over the same spans'
            intervals (``energy.joules``), shown beside the share; None otherwise.
        below_resolution: A counted span or epoch was shorter than a counter's update
            period: the figure is quantised.
        parts: ``joules`` split by kind (cpu, memory, gpu, other), each measured or estimated.
        process_share_joules: For a carbontracker run whose ``joules`` is the host's energy,
            the tracking process's share of it (IT energy), when the log says; None otherwise.
        platform: For a trace whose interval spans all carry a whole-platform reading beside the components they
            count (an ACPI power meter, psys): (its domain id, its joules over those spans); None otherwise.
        coverage: The components' energy over those spans (``energy.joules``) / the platform's; None without one.
    """

    run_id: str
    kind: str
    name: str
    service_name: str | None
    sources: tuple[str, ...]
    start_unix_nano: int | None
    duration_s: float | None
    joules: float
    pue: float
    pue_origin: str
    energy_kwh: float
    co2eq_grams: float
    intensity_gco2eq_per_kwh: float | None
    intensity_source: str
    epochs: tuple[EpochSummary, ...] = ()
    energy_source: str | None = None
    spans_counted: int = 0
    notes: tuple[str, ...] = ()
    energy_basis: str = BASIS_INTERVAL
    host_interval_joules: float | None = None
    below_resolution: bool = False
    parts: tuple[EnergyPart, ...] = ()
    process_share_joules: float | None = None
    platform: tuple[str, float] | None = None
    coverage: float | None = None


@dataclass(frozen=True)
class KindTotals:
    """The totals of the runs of one kind (:data:`RUN_KINDS`); a report never adds two kinds' totals together.

    Attributes:
        kind: ``trace`` or ``carbontracker``.
        runs: How many runs they are of (listed or not).
        joules: Sum of the runs' IT energy (traces: their attributed shares, or interval energy for exports
            without attribution; carbontracker logs: the host's energy the tracker logged).
        kwh: Sum of the runs' kWh (with each run's PUE).
        co2eq_grams: Sum of the runs' CO2eq (each run's kWh x its intensity).
        host_interval_joules: Sum of the attributed runs' host interval energy; None when no run has it.
        equivalents: ``co2eq_grams`` as km by car and more.
    """

    kind: str
    runs: int
    joules: float
    kwh: float
    co2eq_grams: float
    host_interval_joules: float | None = None
    equivalents: tuple[Equivalent, ...] = ()


@dataclass(frozen=True)
class Report:
    """Every run found, what was skipped, and the totals of each kind of run.

    Attributes:
        runs: The runs, in the order their inputs were given (traces by start time).
        skipped: Inputs left out, each with the reason.
        totals: One :class:`KindTotals` per kind of run present (traces first): never added together.
        files_read: Files that contributed at least one run.
        runs_not_listed: Runs in the totals but not in ``runs`` (past the report's listing limit,
            ``otel-joules report --runs``); 0 when every run is listed.
        tally: What every run in the totals is made of (bases, sources, ...), listed or not;
            None: count it from ``runs``.
    """

    runs: tuple[RunSummary, ...]
    skipped: tuple[Skipped, ...]
    totals: tuple[KindTotals, ...] = ()
    files_read: tuple[str, ...] = ()
    runs_not_listed: int = 0
    tally: RunTally | None = None

    @property
    def run_count(self) -> int:
        """How many runs the totals are of: the listed ones and those not listed."""
        return len(self.runs) + self.runs_not_listed

    @property
    def mixed_kinds(self) -> bool:
        """Runs of more than one kind: there is no one total, only :attr:`totals` per kind."""
        return len(self.totals) > 1

    def _single(self) -> KindTotals | None:
        if self.mixed_kinds:
            return None
        return self.totals[0] if self.totals else KindTotals(RUN_KIND_TRACE, 0, 0.0, 0.0, 0.0)

    @property
    def total_joules(self) -> float | None:
        """The runs' IT energy added up; None when they are of different kinds (see :attr:`totals`)."""
        single = self._single()
        return None if single is None else single.joules

    @property
    def total_kwh(self) -> float | None:
        """The runs' kWh (with each run's PUE) added up; None when they are of different kinds."""
        single = self._single()
        return None if single is None else single.kwh

    @property
    def total_co2eq_grams(self) -> float | None:
        """The runs' CO2eq added up; None when they are of different kinds."""
        single = self._single()
        return None if single is None else single.co2eq_grams

    @property
    def host_interval_joules(self) -> float | None:
        """The attributed runs' host interval energy added up (traces only: carbontracker runs have none)."""
        traces = next((t for t in self.totals if t.kind == RUN_KIND_TRACE), None)
        return None if traces is None else traces.host_interval_joules

    @property
    def equivalents(self) -> tuple[Equivalent, ...]:
        """:attr:`total_co2eq_grams` as km by car and more; none when the runs are of different kinds."""
        single = self._single()
        return () if single is None else single.equivalents

    def run_tally(self) -> RunTally:
        """:attr:`tally`, or, for a report built without one, the tally of its listed runs."""
        if self.tally is not None:
            return self.tally
        tally = RunTally()
        for run in self.runs:
            tally.add(run)
        return tally


@dataclass
class RunTally:
    """Counts over every run of a report, kept as runs stream past (a report need not keep its runs).

    Attributes:
        runs: Runs counted.
        by_basis: Runs per :attr:`RunSummary.energy_basis`, in the order first seen.
        by_source: Runs per :attr:`RunSummary.energy_source` (None: not stated), in the order first seen.
        below_resolution: Runs with :attr:`RunSummary.below_resolution`.
        default_pue: Whether some run's PUE is the default (1.0: none recorded, no ``--pue``).
        with_host: Whether some run has :attr:`RunSummary.host_interval_joules`.
    """

    runs: int = 0
    by_basis: dict[str, int] = field(default_factory=dict)
    by_source: dict[str | None, int] = field(default_factory=dict)
    below_resolution: int = 0
    default_pue: bool = False
    with_host: bool = False

    def add(self, run: RunSummary) -> None:
        """Count ``run``."""
        self.count(
            run.energy_basis, run.energy_source, run.below_resolution, run.pue_origin == "default",
            run.host_interval_joules is not None,
        )

    def count(
        self, basis: str, source: str | None, below: bool, default_pue: bool, with_host: bool, runs: int = 1
    ) -> None:
        """Count ``runs`` runs of one basis and source (``below``: each below resolution)."""
        self.runs += runs
        self.by_basis[basis] = self.by_basis.get(basis, 0) + runs
        self.by_source[source] = self.by_source.get(source, 0) + runs
        self.below_resolution += runs if below else 0
        self.default_pue = self.default_pue or default_pue
        self.with_host = self.with_host or with_host


def skipped_line(count: int) -> str:
    """The text report's line saying how many inputs were left out and where each reason is (a reader of stdout
    alone, a file or a pipe, must not take partial figures for the whole)."""
    return (
        f"{count} input(s) skipped, not in the figures below: each reason is a 'skipped PATH: REASON' "
        'line on stderr (and in --json\'s "skipped")'
    )
