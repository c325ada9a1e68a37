"""Spans and carbontracker runs -> runs with joules, kWh and CO2eq -> one report."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Iterable, NamedTuple

from otel_joules.carbon.equivalents import equivalents
from otel_joules.carbon.intensity import CarbonIntensity, resolve_carbon_intensity
from otel_joules.carbon.units import JOULES_PER_KWH, validate_pue
from otel_joules.carbontracker.tracker import ATTR_EPOCH as EPOCH
from otel_joules.carbontracker.tracker import SPAN_EPOCH as EPOCH_SPAN_NAME
from otel_joules.errors import ConfigurationError
from otel_joules.report.model import CarbonTrackerRun, EpochSummary, Report, RunSummary, Skipped, SpanRow
from otel_joules.report.readers import read_inputs
from otel_joules.tracing.attributes import CARBON_INTENSITY_GCO2EQ_PER_KWH as INTENSITY
from otel_joules.tracing.attributes import CARBON_PUE as PUE
from otel_joules.tracing.attributes import ENERGY_CO2EQ_GRAMS as CO2EQ_GRAMS
from otel_joules.tracing.attributes import ENERGY_JOULES, ENERGY_SOURCE


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
) -> _Carbon:
    """PUE, kWh, grams and the intensity behind them for one run."""
    options = intensities.options
    if options.pue is not None:
        pue, pue_origin = options.pue, "option"
    elif recorded_pue is not None and math.isfinite(recorded_pue) and recorded_pue >= 1.0:
        pue, pue_origin = recorded_pue, "recorded"
    else:
        pue, pue_origin = 1.0, "default"
    kwh = max(joules, 0.0) * pue / JOULES_PER_KWH
    override = intensities.override
    if override is not None:
        return _Carbon(pue, pue_origin, kwh, kwh * override.gco2eq_per_kwh, override.gco2eq_per_kwh, override.source)
    if recorded_intensity is not None:
        return _Carbon(pue, pue_origin, kwh, kwh * recorded_intensity, recorded_intensity, "recorded")
    if recorded_co2eq_grams is not None and options.pue is None:
        derived = recorded_co2eq_grams / kwh if kwh > 0 else None
        return _Carbon(pue, pue_origin, kwh, recorded_co2eq_grams, derived, "recorded co2eq")
    fallback = intensities.fallback
    return _Carbon(pue, pue_origin, kwh, kwh * fallback.gco2eq_per_kwh, fallback.gco2eq_per_kwh, fallback.source)


# ------------------------------------------------------------------------------ traces


def _counted_spans(spans: list[SpanRow]) -> list[SpanRow]:
    """The topmost spans carrying ``energy.joules``: no ancestor in the trace carries it.

    A nested span's energy is inside its parent's (energy is machine-level over the
    span's interval), so adding both would count it twice.
    """
    by_id = {span.span_id: span for span in spans}
    counted = []
    for span in spans:
        if span.number(ENERGY_JOULES) is None:
            continue
        parent_id, seen = span.parent_span_id, {span.span_id}
        nested = False
        while parent_id is not None and parent_id in by_id and parent_id not in seen:
            seen.add(parent_id)
            parent = by_id[parent_id]
            if parent.number(ENERGY_JOULES) is not None:
                nested = True
                break
            parent_id = parent.parent_span_id
        if not nested:
            counted.append(span)
    return counted


def _trace_epochs(spans: list[SpanRow]) -> tuple[EpochSummary, ...]:
    epochs = [s for s in spans if s.name == EPOCH_SPAN_NAME and s.number(ENERGY_JOULES) is not None]
    if not epochs:
        return ()
    epochs.sort(key=lambda s: (s.start_unix_nano or 0, s.span_id))
    result = []
    for position, span in enumerate(epochs, start=1):
        number = span.attributes.get(EPOCH)
        epoch = number if isinstance(number, int) and not isinstance(number, bool) else position
        duration = (
            (span.end_unix_nano - span.start_unix_nano) / 1e9
            if span.start_unix_nano is not None and span.end_unix_nano is not None
            else None
        )
        result.append(EpochSummary(epoch=epoch, duration_s=duration, joules=span.number(ENERGY_JOULES) or 0.0))
    return tuple(result)


def _trace_run(
    trace_id: str, spans: list[SpanRow], intensities: _Intensities, sources: tuple[str, ...]
) -> RunSummary | None:
    counted = _counted_spans(spans)
    if not counted:
        return None
    joules = sum(span.number(ENERGY_JOULES) or 0.0 for span in counted)
    known = {span.span_id for span in spans}
    roots = [span for span in spans if span.parent_span_id is None or span.parent_span_id not in known]
    roots.sort(key=lambda s: (s.start_unix_nano or 0, s.span_id))
    name = (roots[0] if roots else counted[0]).name
    starts = [s.start_unix_nano for s in spans if s.start_unix_nano is not None]
    ends = [s.end_unix_nano for s in spans if s.end_unix_nano is not None]
    duration = (max(ends) - min(starts)) / 1e9 if starts and ends else None
    pues = {span.number(PUE) for span in counted}
    recorded_pue = pues.pop() if len(pues) == 1 else None
    weights = [(span.number(ENERGY_JOULES) or 0.0, span.number(INTENSITY)) for span in counted]
    recorded_intensity = None
    if all(value is not None for _, value in weights):
        total = sum(max(j, 0.0) for j, _ in weights)
        recorded_intensity = (
            sum(max(j, 0.0) * value for j, value in weights) / total  # type: ignore[operator]
            if total > 0
            else weights[0][1]
        )
    grams = [span.number(CO2EQ_GRAMS) for span in counted]
    recorded_co2 = sum(grams) if grams and all(g is not None for g in grams) else None  # type: ignore[arg-type]
    carbon = _carbon(
        joules,
        recorded_pue=recorded_pue,
        recorded_intensity=recorded_intensity,
        recorded_co2eq_grams=recorded_co2,
        intensities=intensities,
    )
    energy_sources = {str(span.attributes.get(ENERGY_SOURCE)) for span in counted if span.attributes.get(ENERGY_SOURCE)}
    energy_source = (
        energy_sources.pop() if len(energy_sources) == 1 else ("mixed" if energy_sources else None)
    )
    notes = []
    if len(counted) > 1:
        notes.append(f"{len(counted)} top-level spans with energy summed (their intervals may overlap)")
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
        epochs=_trace_epochs(spans),
        energy_source=energy_source,
        spans_counted=len(counted),
        notes=tuple(notes),
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


def _carbontracker_summary(run: CarbonTrackerRun, intensities: _Intensities) -> RunSummary:
    notes: list[str] = []
    corrected: set[str] = set()
    missing = 0
    epochs = []
    for epoch, duration, power in run.epochs:
        joules = 0.0
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
            joules += watts * duration
        epochs.append(EpochSummary(epoch=epoch, duration_s=duration, joules=joules))
    joules = sum(e.joules for e in epochs)
    duration = sum(e.duration_s or 0.0 for e in epochs) if epochs else None
    if corrected:
        notes.append(
            "carbontracker logged the average over the devices of " + ", ".join(sorted(corrected)) + "; summed instead"
        )
    if missing:
        notes.append(f"{missing} component-epoch(s) without a power value counted as 0 W")
    if not epochs and run.logged_actual_kwh is not None:
        # No epoch block to integrate: take the logged actual consumption back to IT energy.
        logged_pue = run.pue if run.pue and run.pue >= 1.0 else 1.0
        joules = run.logged_actual_kwh * JOULES_PER_KWH / logged_pue
        notes.append("no epoch measurements: energy from the logged actual consumption")
    if run.early_stop:
        notes.append("training was interrupted (early stop)")
    carbon = _carbon(
        joules,
        recorded_pue=run.pue,
        recorded_intensity=run.average_intensity_g_per_kwh,
        recorded_co2eq_grams=None,
        intensities=intensities,
    )
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
        energy_source=None,
        spans_counted=0,
        notes=tuple(notes),
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
    )
