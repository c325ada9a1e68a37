"""Spans grouped into runs: one per trace, its energy summed without double counting.

A span exported twice (e.g. to CSV and to OTLP) counts once. A trace's energy is its
spans' attributed share (topmost ``energy.attributed.joules``, else every span's
``energy.attributed.self.joules``), or, for older exports, the topmost spans' interval
energy; see :mod:`otel_joules.report` for the rules. Epoch spans become the run's epochs.
"""

from __future__ import annotations

from dataclasses import dataclass

from otel_joules.report.energy_parts import merge_sources, missing_domains, span_parts, span_source, sum_parts
from otel_joules.report.model import (
    BASIS_ATTRIBUTED,
    BASIS_INTERVAL,
    EpochSummary,
    RunSummary,
    Skipped,
    SpanRow,
)
from otel_joules.report.run_carbon import Intensities, run_carbon
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
    TRAINING_EPOCH,
    TRAINING_RANK,
    domain_missing_key,
)


def _rank(span: SpanRow, by_id: dict[str, SpanRow]) -> object:
    """The ``training.rank`` of the span or of its nearest ancestor carrying one (None: not a multi-rank job's)."""
    seen = set()
    while span is not None and span.span_id not in seen:
        seen.add(span.span_id)
        rank = span.attributes.get(TRAINING_RANK)
        if rank is not None:
            return rank
        span = by_id.get(span.parent_span_id) if span.parent_span_id is not None else None  # type: ignore[assignment]
    return None


def _counted_spans(spans: list[SpanRow], key: str = ENERGY_JOULES, *, per_rank: bool = False) -> list[SpanRow]:
    """The topmost spans carrying ``key``: no ancestor in the trace carries it.

    A nested span's energy (interval or inclusive attributed share) is inside its
    parent's, so adding both would count it twice. ``per_rank``: an ancestor of another rank
    (``training.rank``) does not hold the span's value -- a share is its own process's, so
    the epochs of rank 1 under rank 0's ``training`` span are counted beside it. The host's
    interval energy is the same for every rank on a host: counted once, so never per rank.
    """
    by_id = {span.span_id: span for span in spans}
    ranks = {span.span_id: _rank(span, by_id) for span in spans} if per_rank else {}
    counted = []
    for span in spans:
        if span.number(key) is None:
            continue
        parent_id, seen = span.parent_span_id, {span.span_id}
        nested = False
        while parent_id is not None and parent_id in by_id and parent_id not in seen:
            seen.add(parent_id)
            parent = by_id[parent_id]
            if parent.number(key) is not None and (not per_rank or ranks[parent_id] == ranks[span.span_id]):
                nested = True
                break
            parent_id = parent.parent_span_id
        if not nested:
            counted.append(span)
    return counted


@dataclass(frozen=True)
class _Basis:
    """Which attribute a trace's energy is summed from, and over which spans."""

    name: str
    joules_key: str
    co2eq_key: str
    spans: list[SpanRow]


def _basis(spans: list[SpanRow]) -> _Basis | None:
    """Attributed shares when the export has them (topmost ``energy.attributed.joules``, else
    every span's ``energy.attributed.self.joules``); interval energy for older exports."""
    counted = _counted_spans(spans, ENERGY_ATTRIBUTED_JOULES, per_rank=True)
    if counted:
        return _Basis(BASIS_ATTRIBUTED, ENERGY_ATTRIBUTED_JOULES, ENERGY_ATTRIBUTED_CO2EQ_GRAMS, counted)
    selves = [span for span in spans if span.number(ENERGY_ATTRIBUTED_SELF_JOULES) is not None]
    if selves:
        return _Basis(BASIS_ATTRIBUTED, ENERGY_ATTRIBUTED_SELF_JOULES, ENERGY_ATTRIBUTED_SELF_CO2EQ_GRAMS, selves)
    counted = _counted_spans(spans, ENERGY_JOULES)
    if counted:
        return _Basis(BASIS_INTERVAL, ENERGY_JOULES, ENERGY_CO2EQ_GRAMS, counted)
    return None


def _trace_epochs(spans: list[SpanRow]) -> tuple[EpochSummary, ...]:
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
        number = span.attributes.get(TRAINING_EPOCH)
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


def _trace_run(
    trace_id: str, spans: list[SpanRow], intensities: Intensities, sources: tuple[str, ...]
) -> RunSummary | None:
    basis = _basis(spans)
    if basis is None:
        return None
    counted = basis.spans
    attributed = basis.name == BASIS_ATTRIBUTED
    joules = sum(span.number(basis.joules_key) or 0.0 for span in counted)
    interval_counted = _counted_spans(spans, ENERGY_JOULES)
    host_joules = sum(span.number(ENERGY_JOULES) or 0.0 for span in interval_counted) if attributed else None
    known = {span.span_id for span in spans}
    roots = [span for span in spans if span.parent_span_id is None or span.parent_span_id not in known]
    roots.sort(key=lambda s: (s.start_unix_nano or 0, s.span_id))
    name = (roots[0] if roots else counted[0]).name
    starts = [s.start_unix_nano for s in spans if s.start_unix_nano is not None]
    ends = [s.end_unix_nano for s in spans if s.end_unix_nano is not None]
    duration = max(0.0, (max(ends) - min(starts)) / 1e9) if starts and ends else None
    stepped = [span for span in spans if span.number(ENERGY_CLOCK_STEP_S) is not None]
    if stepped:
        # The spans' wall times are off by the step from one side of it to the other: the trace
        # lasted at least its longest span, whose duration is measured.
        duration = max((d for d in (span.duration_s for span in spans) if d is not None), default=duration)
    pues = {span.number(CARBON_PUE) for span in counted}
    recorded_pue = pues.pop() if len(pues) == 1 else None
    weights = [
        (span.number(basis.joules_key) or 0.0, span.number(CARBON_INTENSITY_GCO2EQ_PER_KWH)) for span in counted
    ]
    recorded_intensity = None
    if all(value is not None for _, value in weights):
        total = sum(max(j, 0.0) for j, _ in weights)
        recorded_intensity = (
            sum(max(j, 0.0) * value for j, value in weights) / total  # type: ignore[operator]
            if total > 0
            else weights[0][1]
        )
    # The grams of the same basis: never the interval's grams for an attributed share.
    grams = [span.number(basis.co2eq_key) for span in counted]
    recorded_co2 = sum(grams) if grams and all(g is not None for g in grams) else None  # type: ignore[arg-type]
    carbon = run_carbon(
        joules,
        recorded_pue=recorded_pue,
        recorded_intensity=recorded_intensity,
        recorded_co2eq_grams=recorded_co2,
        intensities=intensities,
    )
    energy_source = merge_sources(span_source(span) for span in counted)
    notes = []
    if len(counted) > 1 and basis.joules_key != ENERGY_ATTRIBUTED_SELF_JOULES:
        if attributed:
            notes.append(f"{len(counted)} top-level spans' attributed shares summed")
        else:
            notes.append(f"{len(counted)} top-level spans with energy summed (their intervals may overlap)")
    if not attributed:
        notes.append("no energy.attributed.* attributes (an older export): summed the spans' interval energy")
    if stepped:
        notes.append(
            f"the wall clock stepped during {len(stepped)} span(s) ({ENERGY_CLOCK_STEP_S}): their energy is right, "
            "their times are off by the step; the duration is the longest span's measured one"
        )
    below = any(span.attributes.get(ENERGY_BELOW_RESOLUTION) is True for span in counted + interval_counted)
    if below:
        notes.append("a span was shorter than a counter's update period: its energy is quantised (below resolution)")
    partial = [span for span in counted if span_source(span) == SOURCE_PARTIAL]
    if partial:
        left_out = sorted({domain for span in partial for domain in missing_domains(span)})
        notes.append(
            f"{len(partial)} of the {len(counted)} counted span(s) left out a domain that could not be read at their "
            f"start or end ({', '.join(domain_missing_key(d) for d in left_out) or 'energy.source = partial'}): "
            "the joules are low"
        )
    if basis.joules_key == ENERGY_ATTRIBUTED_SELF_JOULES:
        # Self shares have no split by kind.
        per_span = [{"other": (span.number(basis.joules_key) or 0.0, span_source(span))} for span in counted]
    else:
        per_span = [span_parts(span, span.number(basis.joules_key) or 0.0, attributed) for span in counted]
    epochs = _trace_epochs(spans)
    epoch_joules = sum(e.joules for e in epochs)
    if epochs and abs(epoch_joules - joules) > 5e-4 * max(abs(joules), 1e-9):
        # A CarbonTracker trace: its printed actual consumption is the epochs alone.
        notes.append(
            f"the epochs add up to {epoch_joules:.3f} J (what carbontracker prints as the actual consumption); "
            f"the {len(counted)} counted span(s) also cover the time between and around them"
        )
    return RunSummary(
        run_id=trace_id,
        kind="trace",
        name=name,
        service_name=next((s.service_name for s in roots + spans if s.service_name), None),
        sources=sources,
        start_unix_nano=min(starts) if starts else None,
        duration_s=duration,
        joules=joules,
        **carbon._asdict(),
        epochs=epochs,
        energy_source=energy_source,
        spans_counted=len(counted),
        notes=tuple(notes),
        energy_basis=basis.name,
        host_interval_joules=host_joules,
        below_resolution=below,
        parts=sum_parts(per_span),
    )


def runs_from_spans(spans: list[SpanRow], intensities: Intensities, skipped: list[Skipped]) -> list[RunSummary]:
    """One run per trace with energy, in start order; traces without any are counted in ``skipped``."""
    traces: dict[str, dict[str, SpanRow]] = {}
    sources: dict[str, dict[str, None]] = {}
    for span in spans:
        sources.setdefault(span.trace_id, {})[span.source] = None
        # The same span exported twice (a CSV and an OTLP file of one run) counts once;
        # keep the copy with the most attributes (OTLP has all of them, CSV and JSON
        # lines only energy.* and carbon.*).
        by_id = traces.setdefault(span.trace_id, {})
        kept = by_id.get(span.span_id)
        if kept is None or len(span.attributes) > len(kept.attributes):
            by_id[span.span_id] = span
    runs = []
    without_energy = 0
    for trace_id, by_id in traces.items():
        run = _trace_run(trace_id, list(by_id.values()), intensities, tuple(sources[trace_id]))
        if run is None:
            without_energy += 1
        else:
            runs.append(run)
    if without_energy:
        skipped.append(
            Skipped("(traces)", f"{without_energy} trace(s) without any energy.joules attribute left out")
        )
    runs.sort(key=lambda r: (r.start_unix_nano or 0, r.run_id))
    return runs
