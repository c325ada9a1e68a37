"""A carbontracker-format run (a log pair) summarised: one total, its epochs and their parts.

The total is the output log's actual consumption as the tracker printed it, or, where the
log has none that matches (or carbontracker 2.x's per-device averaging had to be
corrected), recomputed from the epochs; see :mod:`otel_joules.report`.
"""

from __future__ import annotations

import datetime
import math
from typing import Iterable

from otel_joules.carbon.units import JOULES_PER_KWH
from otel_joules.report.energy_parts import merge_sources, sum_parts
from otel_joules.report.model import (
    BASIS_EPOCHS,
    BASIS_LOGGED,
    CarbonTrackerRun,
    EnergyPart,
    EpochSummary,
    RunSummary,
)
from otel_joules.report.run_carbon import Intensities, run_carbon
from otel_joules.semconv import (
    ATTRIBUTED_KIND_KEYS,
    KIND_CPU,
    SOURCE_ESTIMATE,
    SOURCE_MEASURED,
    SOURCE_MIXED,
)
from otel_joules.training.logformat import ESTIMATE_DEVICE_MARKS


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


def carbontracker_summary(run: CarbonTrackerRun, intensities: Intensities) -> RunSummary:
    """The run of one log pair: its total, kWh and CO2eq, epochs, parts and notes."""
    notes: list[str] = []
    epochs, corrected, missing = _epoch_summaries(run)
    epoch_joules = sum(e.joules for e in epochs)
    duration = sum(e.duration_s or 0.0 for e in epochs) if epochs else None
    if corrected:
        notes.append(
            "carbontracker logged the average over the devices of " + ", ".join(sorted(corrected)) + "; summed instead"
        )
    if missing:
        notes.append(f"{missing} component-epoch(s) without a power value counted as 0 W")
    logged_pue = run.pue if run.pue is not None and math.isfinite(run.pue) and run.pue >= 1.0 else 1.0
    joules, basis, recorded_kwh, recorded_co2 = _total(run, epochs, epoch_joules, logged_pue, bool(corrected), notes)
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
    carbon = run_carbon(
        joules,
        recorded_pue=run.pue,
        recorded_intensity=run.average_intensity_g_per_kwh,
        recorded_co2eq_grams=recorded_co2,
        intensities=intensities,
        recorded_kwh=recorded_kwh,
        prefer_recorded_co2eq=True,
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
        energy_source=run.energy_source,
        spans_counted=0,
        notes=tuple(notes),
        energy_basis=basis,
        below_resolution=run.below_resolution,
        parts=_run_parts(run, epochs, joules, epoch_joules),
        process_share_joules=share_joules,
    )


def _epoch_summaries(run: CarbonTrackerRun) -> tuple[list[EpochSummary], set[str], int]:
    """Each epoch's joules by kind (power x duration), the components whose logged power was a mean over
    devices (summed instead), and how many component-epochs had no power value (counted as 0 W)."""
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
            by_kind[kind] = (before + watts * duration, merge_sources([source, _component_source(run, component)]))
        joules = sum(j for j, _ in by_kind.values())
        epochs.append(EpochSummary(epoch=epoch, duration_s=duration, joules=joules, parts=sum_parts([by_kind])))
    return epochs, corrected, missing


def _total(
    run: CarbonTrackerRun,
    epochs: list[EpochSummary],
    epoch_joules: float,
    logged_pue: float,
    corrected: bool,
    notes: list[str],
) -> tuple[float, str, float | None, float | None]:
    """The run's joules and their basis (the logged actual consumption, else the epochs' sum), with the logged
    kWh and grams when the logged total is used; notes say which and why."""
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
        if not epochs:
            notes.append("no epoch measurements: energy from the logged actual consumption")
        elif abs(epoch_joules - joules) > 5e-4 * max(joules, 1e-9):
            notes.append(
                f"total is the logged actual consumption; the per-epoch figures are the log's power x durations "
                f"rounded to 0.01 s (they add up to {epoch_joules:.3f} J)"
            )
        return joules, BASIS_LOGGED, run.logged_actual_kwh, run.logged_actual_co2eq_grams
    if run.logged_actual_kwh is not None and epochs:
        notes.append("total recomputed from the log's epochs (power x durations rounded to 0.01 s)")
    return epoch_joules, BASIS_EPOCHS, None, None


def _run_parts(
    run: CarbonTrackerRun, epochs: list[EpochSummary], joules: float, epoch_joules: float
) -> tuple[EnergyPart, ...]:
    """The run's joules by kind: the epochs' split, scaled to the run's total (one 'other' part without epochs)."""
    run_parts = sum_parts({p.kind: (p.joules, p.source) for p in e.parts} for e in epochs) if epochs else ()
    if run_parts and epoch_joules > 0 and joules != epoch_joules:
        # The split by component comes from the epochs; the amounts follow the run's total.
        scale = joules / epoch_joules
        return tuple(EnergyPart(p.kind, p.joules * scale, p.source) for p in run_parts)
    if not run_parts:
        return (EnergyPart("other", joules, run.energy_source),)
    return tuple(run_parts)


def _start_from_stem(stem: str) -> int | None:
    """The start time in a log's file name (``..._YYYY-mm-ddTHHMMSSZ``), in Unix nanoseconds."""
    date = stem.rsplit("_", 1)[-1]
    try:
        moment = datetime.datetime.strptime(date, "%Y-%m-%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        return None
    return int(moment.timestamp()) * 1_000_000_000
