"""Traces made runs: one per trace, its energy summed without double counting.

The SQL engine (:mod:`otel_joules.report.sql`) dedupes spans exported twice and finds, per
trace, the spans a run is made of (:class:`~otel_joules.report.sql.TraceSpans`). A trace's
energy is its spans' attributed share (topmost ``energy.attributed.joules``, else every span's
``energy.attributed.self.joules``), or, for older exports, the topmost spans' interval
energy; see :mod:`otel_joules.report` for the rules. Epoch spans become the run's epochs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

from otel_joules.report.energy_parts import (
    merge_sources,
    missing_domains,
    platform_reading,
    span_parts,
    span_source,
    sum_parts,
)
from otel_joules.report.model import (
    BASIS_ATTRIBUTED,
    BASIS_INTERVAL,
    EnergyPart,
    EpochSummary,
    RunSummary,
    Skipped,
    SpanRow,
)
from otel_joules.report.run_carbon import Intensities, RunCarbon, run_carbon
from otel_joules.report.sql import TraceSpans
from otel_joules.semconv import (
    CARBON_INTENSITY_GCO2EQ_PER_KWH,
    CARBON_PUE,
    ENERGY_ATTRIBUTED_CO2EQ_GRAMS,
    ENERGY_ATTRIBUTED_JOULES,
    ENERGY_ATTRIBUTED_SELF_CO2EQ_GRAMS,
    ENERGY_ATTRIBUTED_SELF_JOULES,
    ENERGY_BELOW_RESOLUTION,
    ENERGY_CLOCK_STEP_S,
    ENERGY_CO2EQ_GRAMS,
    ENERGY_JOULES,
    SOURCE_PARTIAL,
    SPAN_EPOCH,
    TRAINING_EPOCH_NUMBER,
    domain_missing_key,
)


@dataclass(frozen=True)
class EnergyBasis:
    """Which attribute a trace's energy is summed from, and over which spans."""

    name: str
    joules_key: str
    co2eq_key: str
    spans: list[SpanRow]


def _basis(trace: TraceSpans) -> EnergyBasis | None:
    """Attributed shares when the export has them (topmost ``energy.attributed.joules``, else
    every span's ``energy.attributed.self.joules``); interval energy for older exports."""
    if trace.attributed:
        return EnergyBasis(BASIS_ATTRIBUTED, ENERGY_ATTRIBUTED_JOULES, ENERGY_ATTRIBUTED_CO2EQ_GRAMS, list(trace.attributed))
    if trace.attributed_self:
        return EnergyBasis(
            BASIS_ATTRIBUTED, ENERGY_ATTRIBUTED_SELF_JOULES, ENERGY_ATTRIBUTED_SELF_CO2EQ_GRAMS, list(trace.attributed_self)
        )
    if trace.interval:
        return EnergyBasis(BASIS_INTERVAL, ENERGY_JOULES, ENERGY_CO2EQ_GRAMS, list(trace.interval))
    return None


def _trace_epochs(spans: Sequence[SpanRow]) -> tuple[EpochSummary, ...]:
    epochs = [s for s in spans if s.name == SPAN_EPOCH and s.number(ENERGY_JOULES) is not None]
    if not epochs:
        return ()
    epochs.sort(key=lambda s: (s.start_unix_nano or 0, s.span_id))
    # Epochs are summed on the run's basis too: their attributed share when every epoch has one.
    attributed = all(span.number(ENERGY_ATTRIBUTED_JOULES) is not None for span in epochs)
    key = ENERGY_ATTRIBUTED_JOULES if attributed else ENERGY_JOULES
    # The ranks of a multi-rank job each have an epoch span per epoch: one epoch of the run, the
    # ranks' shares added; the host's interval energy is the same for every rank, taken once (the largest).
    by_number: dict[int, list[SpanRow]] = {}
    for position, span in enumerate(epochs, start=1):
        # The tracker's own number (a run resumed at epoch 2 starts at 2); by position only
        # for CSV/JSON-lines files written before the exporters kept training.* attributes.
        number = span.attributes.get(TRAINING_EPOCH_NUMBER)
        epoch = number if isinstance(number, int) and not isinstance(number, bool) else position
        by_number.setdefault(epoch, []).append(span)
    result = []
    for epoch, ranks in by_number.items():
        durations = [d for d in (span.duration_s for span in ranks) if d is not None]
        if attributed:
            counted = ranks
        else:
            counted = [max(ranks, key=lambda span: span.number(key) or 0.0)]
        joules = sum(span.number(key) or 0.0 for span in counted)
        result.append(
            EpochSummary(
                epoch=epoch,
                duration_s=max(durations) if durations else None,
                joules=joules,
                parts=sum_parts([span_parts(span, span.number(key) or 0.0, attributed) for span in counted]),
            )
        )
    return tuple(result)


def _trace_run(trace: TraceSpans, intensities: Intensities) -> RunSummary | None:
    basis = _basis(trace)
    if basis is None:
        return None
    counted = basis.spans
    attributed = basis.name == BASIS_ATTRIBUTED
    joules = sum(span.number(basis.joules_key) or 0.0 for span in counted)
    interval_counted = list(trace.interval)
    host_joules = sum(span.number(ENERGY_JOULES) or 0.0 for span in interval_counted) if attributed else None
    start, end = trace.start_unix_nano, trace.end_unix_nano
    below = any(span.attributes.get(ENERGY_BELOW_RESOLUTION) is True for span in counted + interval_counted)
    epochs = _trace_epochs(trace.epochs)
    platform = _platform(interval_counted)
    notes = _trace_notes(trace, basis, joules, below, epochs)
    coverage = None
    if platform is not None and platform[1] > 0:
        components = sum(span.number(ENERGY_JOULES) or 0.0 for span in interval_counted)
        coverage = components / platform[1]
        notes.append(
            f"coverage {coverage:.3f}: the components counted ({components:.3f} J) of the platform reading "
            f"{platform[0]} ({platform[1]:.3f} J) over the same spans"
        )
    return RunSummary(
        run_id=trace.trace_id,
        kind="trace",
        name=trace.root_name if trace.root_name is not None else counted[0].name,
        service_name=trace.service_name,
        sources=trace.sources,
        start_unix_nano=start,
        duration_s=_trace_duration(trace),
        joules=joules,
        **_trace_carbon(basis, joules, intensities)._asdict(),
        epochs=epochs,
        energy_source=merge_sources(span_source(span) for span in counted),
        spans_counted=len(counted),
        notes=tuple(notes),
        energy_basis=basis.name,
        host_interval_joules=host_joules,
        below_resolution=below,
        parts=_trace_parts(basis),
        platform=platform,
        coverage=coverage,
    )


def _platform(spans: Sequence[SpanRow]) -> tuple[str, float] | None:
    """(domain id, joules) of the platform reading every one of ``spans`` carries beside its components (the same
    one on all: :func:`~.energy_parts.platform_reading`), summed; None when one lacks it or they differ."""
    readings = [platform_reading(span) for span in spans]
    if not readings or any(r is None for r in readings) or len({r[0] for r in readings if r is not None}) != 1:
        return None
    return readings[0][0], sum(r[1] for r in readings if r is not None)  # type: ignore[index]


def _trace_duration(trace: TraceSpans) -> float | None:
    """First start to last end; where the wall clock stepped, the longest span's measured duration."""
    start, end = trace.start_unix_nano, trace.end_unix_nano
    duration = max(0.0, (end - start) / 1e9) if start is not None and end is not None else None
    if trace.stepped:
        # The spans' wall times are off by the step from one side of it to the other: the trace
        # lasted at least its longest span, whose duration is measured.
        duration = trace.longest_duration_s if trace.longest_duration_s is not None else duration
    return duration


def _trace_carbon(basis: EnergyBasis, joules: float, intensities: Intensities) -> RunCarbon:
    """The run's PUE, kWh and grams from what its counted spans recorded (one PUE; an energy-weighted intensity)."""
    counted = basis.spans
    pues = {span.number(CARBON_PUE) for span in counted}
    recorded_pue = pues.pop() if len(pues) == 1 else None
    weights = [
        (span.number(basis.joules_key) or 0.0, span.number(CARBON_INTENSITY_GCO2EQ_PER_KWH)) for span in counted
    ]
    recorded_intensity = None
    if all(value is not None for _, value in weights) and len({value for _, value in weights}) == 1:
        recorded_intensity = weights[0][1]  # one intensity: itself, not (j x it) / j, which can differ in the last bit
    elif all(value is not None for _, value in weights):
        total = sum(max(j, 0.0) for j, _ in weights)
        recorded_intensity = (
            sum(max(j, 0.0) * value for j, value in weights) / total  # type: ignore[operator]
            if total > 0
            else weights[0][1]
        )
    # The grams of the same basis: never the interval's grams for an attributed share.
    grams = [span.number(basis.co2eq_key) for span in counted]
    recorded_co2 = sum(grams) if grams and all(g is not None for g in grams) else None  # type: ignore[arg-type]
    return run_carbon(
        joules,
        recorded_pue=recorded_pue,
        recorded_intensity=recorded_intensity,
        recorded_co2eq_grams=recorded_co2,
        intensities=intensities,
    )


def _trace_notes(
    trace: TraceSpans, basis: EnergyBasis, joules: float, below: bool, epochs: tuple[EpochSummary, ...]
) -> list[str]:
    """The run's caveats: spans summed, an older export, clock steps, quantised spans, partial spans, epochs."""
    counted = basis.spans
    attributed = basis.name == BASIS_ATTRIBUTED
    notes = []
    if len(counted) > 1 and basis.joules_key != ENERGY_ATTRIBUTED_SELF_JOULES:
        if attributed:
            notes.append(f"{len(counted)} top-level spans' attributed shares summed")
        else:
            notes.append(f"{len(counted)} top-level spans with energy summed (their intervals may overlap)")
    if not attributed:
        notes.append("no energy.attributed.* attributes (an older export): summed the spans' interval energy")
    if trace.stepped:
        notes.append(
            f"the wall clock stepped during {trace.stepped} span(s) ({ENERGY_CLOCK_STEP_S}): their energy is right, "
            "their times are off by the step; the duration is the longest span's measured one"
        )
    if below:
        notes.append("a span was shorter than a counter's update period: its energy is quantised (below resolution)")
    notes.extend(_partial_notes(counted))
    epoch_joules = sum(e.joules for e in epochs)
    if epochs and abs(epoch_joules - joules) > 5e-4 * max(abs(joules), 1e-9):
        # A CarbonTracker trace: its printed actual consumption is the epochs alone.
        notes.append(
            f"the epochs add up to {epoch_joules:.3f} J (what carbontracker prints as the actual consumption); "
            f"the {len(counted)} counted span(s) also cover the time between and around them"
        )
    return notes


def _partial_notes(counted: Sequence[SpanRow]) -> list[str]:
    """A note naming the domains partial spans left out, if any span is partial."""
    partial = [span for span in counted if span_source(span) == SOURCE_PARTIAL]
    if not partial:
        return []
    left_out = sorted({domain for span in partial for domain in missing_domains(span)})
    return [
        f"{len(partial)} of the {len(counted)} counted span(s) left out a domain that could not be read at their "
        f"start or end ({', '.join(domain_missing_key(d) for d in left_out) or 'energy.source = partial'}): "
        "the joules are low"
    ]


def _trace_parts(basis: EnergyBasis) -> tuple[EnergyPart, ...]:
    """The run's joules by kind (self shares have no split by kind: ``other``)."""
    attributed = basis.name == BASIS_ATTRIBUTED
    if basis.joules_key == ENERGY_ATTRIBUTED_SELF_JOULES:
        per_span = [{"other": (span.number(basis.joules_key) or 0.0, span_source(span))} for span in basis.spans]
    else:
        per_span = [span_parts(span, span.number(basis.joules_key) or 0.0, attributed) for span in basis.spans]
    return sum_parts(per_span)


def runs_in_order(traces: Iterable[TraceSpans], intensities: Intensities, skipped: list[Skipped]) -> Iterator[RunSummary]:
    """One run per trace with energy, as the traces come; once they are all read, the traces without any are
    counted in ``skipped``."""
    without_energy = 0
    for trace in traces:
        run = _trace_run(trace, intensities)
        if run is None:
            without_energy += 1
        else:
            yield run
    if without_energy:
        skipped.append(without_energy_skip(without_energy))


def without_energy_skip(traces: int) -> Skipped:
    """How a report says it left out ``traces`` traces without energy."""
    return Skipped("(traces)", f"{traces} trace(s) without any energy.joules attribute left out")


def runs_from_traces(traces: Iterable[TraceSpans], intensities: Intensities, skipped: list[Skipped]) -> list[RunSummary]:
    """One run per trace with energy, in start order; traces without any are counted in ``skipped``."""
    runs = list(runs_in_order(traces, intensities, skipped))
    runs.sort(key=run_order)
    return runs


def run_order(run: RunSummary) -> tuple[int, str]:
    """Where a trace's run comes in a report: by start (unknown: 0), then trace id (the SQL engine's ORDER BY)."""
    return (run.start_unix_nano or 0, run.run_id)
