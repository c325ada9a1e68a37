"""Spans and carbontracker runs -> runs with joules, kWh and CO2eq -> one report."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Iterable, Mapping, NamedTuple

from otel_joules.carbon.equivalents import equivalents
from otel_joules.carbon.intensity import CarbonIntensity, resolve_carbon_intensity
from otel_joules.carbon.units import JOULES_PER_KWH, validate_pue
from otel_joules.training.logformat import ESTIMATE_DEVICE_MARKS
from otel_joules.errors import ConfigurationError
from otel_joules.report.model import (
    BASIS_ATTRIBUTED,
    BASIS_EPOCHS,
    BASIS_INTERVAL,
    BASIS_LOGGED,
    CarbonTrackerRun,
    EnergyPart,
    EpochSummary,
    Report,
    RunSummary,
    Skipped,
    SpanRow,
)
from otel_joules.report.readers import read_inputs
from otel_joules.semconv import (
    ATTRIBUTED_KIND_KEYS,
    CARBON_INTENSITY_GCO2EQ_PER_KWH,
    CARBON_PUE,
    ENERGY_ATTRIBUTED_CO2EQ_GRAMS,
    ENERGY_ATTRIBUTED_JOULES,
    ENERGY_ATTRIBUTED_SELF_CO2EQ_GRAMS,
    ENERGY_ATTRIBUTED_SELF_JOULES,
    ENERGY_BELOW_RESOLUTION,
    ENERGY_CO2EQ_GRAMS,
    ENERGY_JOULES,
    ENERGY_SOURCE,
    KIND_CPU,
    KIND_GPU,
    KIND_MEMORY,
    SOURCE_ESTIMATE,
    SOURCE_MEASURED,
    SOURCE_MIXED,
    SPAN_EPOCH,
    TRAINING_EPOCH,
    domain_joules_key,
    domain_method_key,
)
from otel_joules.sensors.base import Method

@dataclass(frozen=True)
class CarbonOptions:
    """What the user asked for on the command line; None: use what each run recorded.

    Attributes:
        intensity_gco2eq_per_kwh: ``--intensity``: use this for every run.
        country: ``--country``: the offline yearly average of this country for every run.
        pue: ``--pue``: use this PUE for every run.
    """

    intensity_gco2eq_per_kwh: float | None = None
    country: str | None = None
    pue: float | None = None


class _Intensities:
    """Resolves the override and the fallback intensity once each, when first needed."""

    def __init__(self, options: CarbonOptions) -> None:
        self.options = options
        self._override: CarbonIntensity | None = None
        self._fallback: CarbonIntensity | None = None
        if options.intensity_gco2eq_per_kwh is not None or options.country is not None:
            # Resolved now so that a bad value fails before any file is read.
            self._override = resolve_carbon_intensity(options.intensity_gco2eq_per_kwh, options.country)

    @property
    def override(self) -> CarbonIntensity | None:
        return self._override

    @property
    def fallback(self) -> CarbonIntensity:
        if self._fallback is None:
            self._fallback = resolve_carbon_intensity(None, None)
        return self._fallback


class _Carbon(NamedTuple):
    """A run's carbon figures, named as :class:`RunSummary`'s fields (passed on with ``**_asdict()``)."""

    pue: float
    pue_origin: str
    energy_kwh: float
    co2eq_grams: float
    intensity_gco2eq_per_kwh: float | None
    intensity_source: str


def _carbon(
    joules: float,
    *,
    recorded_pue: float | None,
    recorded_intensity: float | None,
    recorded_co2eq_grams: float | None,
    intensities: _Intensities,
    recorded_kwh: float | None = None,
    prefer_recorded_co2eq: bool = False,
) -> _Carbon:
    """PUE, kWh, grams and the intensity behind them for one run.

    A carbontracker log's own totals (``recorded_kwh``, and ``recorded_co2eq_grams`` with
    ``prefer_recorded_co2eq``) are used as they are unless an option overrides what they
    were computed with, so the report repeats the number the tracker printed instead of
    recomputing a near copy from the log's rounded intensity. Spans record their
    intensity as a full double, so for them the recorded intensity comes first.
    """
    options = intensities.options
    if options.pue is not None:
        pue, pue_origin = options.pue, "option"
    elif recorded_pue is not None and math.isfinite(recorded_pue) and recorded_pue >= 1.0:
        pue, pue_origin = recorded_pue, "recorded"
    else:
        pue, pue_origin = 1.0, "default"
    kwh = max(joules, 0.0) * pue / JOULES_PER_KWH
    if recorded_kwh is not None and pue_origin == "recorded":
        kwh = recorded_kwh
    override = intensities.override
    if override is not None:
        return _Carbon(pue, pue_origin, kwh, kwh * override.gco2eq_per_kwh, override.gco2eq_per_kwh, override.source)
    if prefer_recorded_co2eq and recorded_co2eq_grams is not None and options.pue is None:
        return _Carbon(pue, pue_origin, kwh, recorded_co2eq_grams, recorded_intensity, "recorded")
    if recorded_intensity is not None:
        return _Carbon(pue, pue_origin, kwh, kwh * recorded_intensity, recorded_intensity, "recorded")
    if recorded_co2eq_grams is not None and options.pue is None:
        derived = recorded_co2eq_grams / kwh if kwh > 0 else None
        return _Carbon(pue, pue_origin, kwh, recorded_co2eq_grams, derived, "recorded co2eq")
    fallback = intensities.fallback
    return _Carbon(pue, pue_origin, kwh, kwh * fallback.gco2eq_per_kwh, fallback.gco2eq_per_kwh, fallback.source)


# ------------------------------------------------------------------------ energy parts

# ``energy.<domain>.joules``: a domain id has no dot, which leaves out energy.joules and the
# per-kind and self shares (energy.attributed.joules itself matches as "attributed", a name
# _domain_kind does not know, so it adds to no kind).
_DOMAIN_JOULES_RE = re.compile(r"^energy\.([A-Za-z0-9_\-]+)\.joules$")


def _domain_kind(domain_id: str, has_package: bool) -> str | None:
    """The kind a domain adds to; None for one inside another (core, uncore; psys beside a package)."""
    if domain_id.startswith(("core", "uncore")):
        return None
    if domain_id.startswith("psys"):
        return None if has_package else KIND_CPU
    if domain_id.startswith("package") or domain_id in ("cpu_estimate", "sim_cpu"):
        return KIND_CPU
    if domain_id.startswith("dram") or domain_id == "memory_estimate":
        return KIND_MEMORY
    if domain_id.startswith("nvidia_gpu") or domain_id == "sim_gpu":
        return KIND_GPU
    return None  # unknown: its energy stays in "other"


def _merge_sources(sources: Iterable[str | None]) -> str | None:
    known = {source for source in sources if source is not None}
    if not known:
        return None
    return known.pop() if len(known) == 1 else SOURCE_MIXED


def _domain_source(span: SpanRow, domain_id: str) -> str | None:
    source = span.attributes.get(ENERGY_SOURCE)
    if source in (SOURCE_MEASURED, SOURCE_ESTIMATE):
        return str(source)
    if source == SOURCE_MIXED:
        method = span.attributes.get(domain_method_key(domain_id))
        return SOURCE_ESTIMATE if method == Method.ESTIMATE.value else SOURCE_MEASURED
    return None


def _span_source(span: SpanRow) -> str | None:
    source = span.attributes.get(ENERGY_SOURCE)
    return str(source) if isinstance(source, str) and source else None


def _span_parts(span: SpanRow, total: float, attributed: bool) -> dict[str, tuple[float, str | None]]:
    """``{kind: (joules, source)}`` of one span; what no kind covers is ``other``."""
    domains: dict[str, list[tuple[float, str | None]]] = {}
    ids = [m.group(1) for key in span.attributes if (m := _DOMAIN_JOULES_RE.match(key))]
    has_package = any(i.startswith("package") for i in ids)
    for domain_id in ids:
        kind = _domain_kind(domain_id, has_package)
        value = span.number(domain_joules_key(domain_id))
        if kind is not None and value is not None:
            domains.setdefault(kind, []).append((value, _domain_source(span, domain_id)))
    parts: dict[str, tuple[float, str | None]] = {}
    for kind in ATTRIBUTED_KIND_KEYS:
        sources = [source for _, source in domains.get(kind, ())]
        if attributed:
            value = span.number(ATTRIBUTED_KIND_KEYS[kind])
        else:
            value = sum(j for j, _ in domains[kind]) if kind in domains else None
        if value is not None:
            parts[kind] = (value, _merge_sources(sources) if sources else _span_source(span))
    rest = total - sum(j for j, _ in parts.values())
    if abs(rest) > 1e-9 * max(abs(total), 1.0):
        parts["other"] = (rest, _span_source(span))
    return parts


def _sum_parts(per_span: Iterable[Mapping[str, tuple[float, str | None]]]) -> tuple[EnergyPart, ...]:
    joules: dict[str, float] = {}
    sources: dict[str, list[str | None]] = {}
    for parts in per_span:
        for kind, (value, source) in parts.items():
            joules[kind] = joules.get(kind, 0.0) + value
            sources.setdefault(kind, []).append(source)
    order = [*ATTRIBUTED_KIND_KEYS, "cpu+memory", "other"]
    return tuple(
        EnergyPart(kind, joules[kind], _merge_sources(sources[kind])) for kind in order if kind in joules
    )


# ------------------------------------------------------------------------------ traces


def _counted_spans(spans: list[SpanRow], key: str = ENERGY_JOULES) -> list[SpanRow]:
    """The topmost spans carrying ``key``: no ancestor in the trace carries it.

    A nested span's energy (interval or inclusive attributed share) is inside its
    parent's, so adding both would count it twice.
    """
    by_id = {span.span_id: span for span in spans}
    counted = []
    for span in spans:
        if span.number(key) is None:
            continue
        parent_id, seen = span.parent_span_id, {span.span_id}
        nested = False
        while parent_id is not None and parent_id in by_id and parent_id not in seen:
            seen.add(parent_id)
            parent = by_id[parent_id]
            if parent.number(key) is not None:
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
    counted = _counted_spans(spans, ENERGY_ATTRIBUTED_JOULES)
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
    result = []
    for position, span in enumerate(epochs, start=1):
        # The tracker's own number (a run resumed at epoch 2 starts at 2); by position only
        # for CSV/JSON-lines files written before the exporters kept training.* attributes.
        number = span.attributes.get(TRAINING_EPOCH)
        epoch = number if isinstance(number, int) and not isinstance(number, bool) else position
        duration = (
            (span.end_unix_nano - span.start_unix_nano) / 1e9
            if span.start_unix_nano is not None and span.end_unix_nano is not None
            else None
        )
        joules = span.number(key) or 0.0
        result.append(
            EpochSummary(
                epoch=epoch,
                duration_s=duration,
                joules=joules,
                parts=_sum_parts([_span_parts(span, joules, attributed)]),
            )
        )
    return tuple(result)


def _trace_run(
    trace_id: str, spans: list[SpanRow], intensities: _Intensities, sources: tuple[str, ...]
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
    duration = (max(ends) - min(starts)) / 1e9 if starts and ends else None
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
    carbon = _carbon(
        joules,
        recorded_pue=recorded_pue,
        recorded_intensity=recorded_intensity,
        recorded_co2eq_grams=recorded_co2,
        intensities=intensities,
    )
    energy_source = _merge_sources(_span_source(span) for span in counted)
    notes = []
    if len(counted) > 1 and basis.joules_key != ENERGY_ATTRIBUTED_SELF_JOULES:
        if attributed:
            notes.append(f"{len(counted)} top-level spans' attributed shares summed")
        else:
            notes.append(f"{len(counted)} top-level spans with energy summed (their intervals may overlap)")
    if not attributed:
        notes.append("no energy.attributed.* attributes (an older export): summed the spans' interval energy")
    below = any(span.attributes.get(ENERGY_BELOW_RESOLUTION) is True for span in counted + interval_counted)
    if below:
        notes.append("a span was shorter than a counter's update period: its energy is quantised (below resolution)")
    if basis.joules_key == ENERGY_ATTRIBUTED_SELF_JOULES:
        # Self shares have no split by kind.
        per_span = [{"other": (span.number(basis.joules_key) or 0.0, _span_source(span))} for span in counted]
    else:
        per_span = [_span_parts(span, span.number(basis.joules_key) or 0.0, attributed) for span in counted]
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
        parts=_sum_parts(per_span),
    )


def _span_runs(spans: list[SpanRow], intensities: _Intensities, skipped: list[Skipped]) -> list[RunSummary]:
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


# ------------------------------------------------------------------------ carbontracker


def _component_source(run: CarbonTrackerRun, component: str) -> str | None:
    """measured / estimate / mixed for one component, from the log's label and its device names."""
    if run.energy_source != SOURCE_MIXED:
        return run.energy_source
    marks = [name.endswith(ESTIMATE_DEVICE_MARKS) for name in run.devices.get(component, ())]
    if marks and all(marks):
        return SOURCE_ESTIMATE
    return SOURCE_MIXED if any(marks) else SOURCE_MEASURED


def _component_kind(component: str, devices: Iterable[str]) -> str:
    # Our tracker's cpu component holds the memory domains too (carbontracker has no memory component).
    if component == KIND_CPU and any(name.startswith("dram") for name in devices):
        return "cpu+memory"
    return component if component in ATTRIBUTED_KIND_KEYS else "other"


def _carbontracker_summary(run: CarbonTrackerRun, intensities: _Intensities) -> RunSummary:
    notes: list[str] = []
    corrected: set[str] = set()
    missing = 0
    epochs = []
    for epoch, duration, power in run.epochs:
        by_kind: dict[str, tuple[float, str | None]] = {}
        for component, values in power.items():
            if values is None or any(math.isnan(v) for v in values):
                missing += 1
                values = tuple(0.0 if math.isnan(v) else v for v in values or ())
            watts = sum(values)
            devices = len(run.devices.get(component, ()))
            if run.software == "carbontracker" and len(values) == 1 and devices > 1:
                # carbontracker 2.x logs the mean over a component's devices (its samples of
                # every device go into one list): the component drew devices x that.
                watts *= devices
                corrected.add(component)
            kind = _component_kind(component, run.devices.get(component, ()))
            before, source = by_kind.get(kind, (0.0, None))
            by_kind[kind] = (before + watts * duration, _merge_sources([source, _component_source(run, component)]))
        joules = sum(j for j, _ in by_kind.values())
        epochs.append(EpochSummary(epoch=epoch, duration_s=duration, joules=joules, parts=_sum_parts([by_kind])))
    epoch_joules = sum(e.joules for e in epochs)
    joules = epoch_joules
    basis = BASIS_EPOCHS
    duration = sum(e.duration_s or 0.0 for e in epochs) if epochs else None
    if corrected:
        notes.append(
            "carbontracker logged the average over the devices of " + ", ".join(sorted(corrected)) + "; summed instead"
        )
    if missing:
        notes.append(f"{missing} component-epoch(s) without a power value counted as 0 W")
    logged_pue = run.pue if run.pue is not None and math.isfinite(run.pue) and run.pue >= 1.0 else 1.0
    recorded_kwh = recorded_co2 = None
    if (
        run.logged_actual_kwh is not None
        and math.isfinite(run.logged_actual_kwh)
        and not corrected
        and (not epochs or run.logged_actual_epochs == len(epochs))
    ):
        # The tracker's own total, as it printed it and as both parsers read it: the epochs'
        # durations in the standard log are rounded to 0.01 s, so recomputing from them
        # would give a second total for the same run.
        joules = run.logged_actual_kwh * JOULES_PER_KWH / logged_pue
        basis = BASIS_LOGGED
        recorded_kwh = run.logged_actual_kwh
        recorded_co2 = run.logged_actual_co2eq_grams
        if not epochs:
            notes.append("no epoch measurements: energy from the logged actual consumption")
        elif abs(epoch_joules - joules) > 5e-4 * max(joules, 1e-9):
            notes.append(
                f"total is the logged actual consumption; the per-epoch figures are the log's power x durations "
                f"rounded to 0.01 s (they add up to {epoch_joules:.3f} J)"
            )
    elif run.logged_actual_kwh is not None and epochs:
        notes.append("total recomputed from the log's epochs (power x durations rounded to 0.01 s)")
    if run.early_stop:
        notes.append("training was interrupted (early stop)")
    if run.below_resolution:
        notes.append("an epoch was shorter than a counter's update period: its energy is quantised (below resolution)")
    share_joules = None
    if run.logged_share_kwh is not None:
        share_joules = run.logged_share_kwh * JOULES_PER_KWH / logged_pue
        notes.append(
            f"the total is the host's energy, as the tracker logged it; this process's share of it "
            f"(its CPU time's part, as logged) was {share_joules:.3f} J"
        )
    carbon = _carbon(
        joules,
        recorded_pue=run.pue,
        recorded_intensity=run.average_intensity_g_per_kwh,
        recorded_co2eq_grams=recorded_co2,
        intensities=intensities,
        recorded_kwh=recorded_kwh,
        prefer_recorded_co2eq=True,
    )
    run_parts = _sum_parts({p.kind: (p.joules, p.source) for p in e.parts} for e in epochs) if epochs else ()
    if run_parts and epoch_joules > 0 and joules != epoch_joules:
        # The split by component comes from the epochs; the amounts follow the run's total.
        scale = joules / epoch_joules
        run_parts = tuple(EnergyPart(p.kind, p.joules * scale, p.source) for p in run_parts)
    elif not run_parts:
        run_parts = (EnergyPart("other", joules, run.energy_source),)
    return RunSummary(
        run_id=run.stem,
        kind="carbontracker",
        name=run.software or "carbontracker",
        service_name=None,
        sources=(run.std_log, run.output_log),
        start_unix_nano=_start_from_stem(run.stem),
        duration_s=duration,
        joules=joules,
        **carbon._asdict(),
        epochs=tuple(epochs),
        energy_source=run.energy_source,
        spans_counted=0,
        notes=tuple(notes),
        energy_basis=basis,
        below_resolution=run.below_resolution,
        parts=run_parts,
        process_share_joules=share_joules,
    )


def _start_from_stem(stem: str) -> int | None:
    import datetime as _dt

    date = stem.rsplit("_", 1)[-1]
    try:
        moment = _dt.datetime.strptime(date, "%Y-%m-%dT%H%M%SZ").replace(tzinfo=_dt.timezone.utc)
    except ValueError:
        return None
    return int(moment.timestamp()) * 1_000_000_000


# ------------------------------------------------------------------------------ report


def build_report(
    paths: Iterable[str | os.PathLike[str]],
    *,
    intensity_gco2eq_per_kwh: float | None = None,
    country: str | None = None,
    pue: float | None = None,
) -> Report:
    """Read every path and aggregate it into one :class:`Report` (see :mod:`otel_joules.report`).

    Raises:
        ConfigurationError: ``intensity_gco2eq_per_kwh``, ``country`` or ``pue`` is invalid.
    """
    if pue is not None:
        pue = validate_pue(pue)
    if intensity_gco2eq_per_kwh is not None and country is not None:
        raise ConfigurationError("give either an explicit intensity or a country, not both")
    intensities = _Intensities(CarbonOptions(intensity_gco2eq_per_kwh, country, pue))
    inputs = read_inputs(paths)
    skipped = list(inputs.skipped)
    span_runs = _span_runs(inputs.spans, intensities, skipped)
    traced = {run.run_id for run in span_runs}
    runs = []
    for log in inputs.carbontracker_runs:
        if log.trace_id is not None and log.trace_id in traced:
            # The same training, exported as spans too: count it once, from the spans
            # (exact durations rather than the log's centiseconds).
            skipped.append(
                Skipped(log.std_log, f"same training as trace {log.trace_id}, whose spans are counted instead")
            )
            continue
        runs.append(_carbontracker_summary(log, intensities))
    runs += span_runs
    total_joules = sum(r.joules for r in runs)
    total_kwh = sum(r.energy_kwh for r in runs)
    total_co2 = sum(r.co2eq_grams for r in runs)
    return Report(
        runs=tuple(runs),
        skipped=tuple(skipped),
        total_joules=total_joules,
        total_kwh=total_kwh,
        total_co2eq_grams=total_co2,
        equivalents=equivalents(max(total_co2, 0.0)),
        files_read=tuple(dict.fromkeys(inputs.files_read)),
        host_interval_joules=(
            sum(r.host_interval_joules for r in runs if r.host_interval_joules is not None)
            if any(r.host_interval_joules is not None for r in runs)
            else None
        ),
    )
