"""Spans and carbontracker runs -> runs with joules, kWh and CO2eq -> one report.

:func:`build_report` reads the inputs (:mod:`otel_joules.report.readers`), groups spans
into runs (:mod:`otel_joules.report.trace_runs`), summarises log pairs
(:mod:`otel_joules.report.carbontracker_runs`), counts a training exported both ways once,
and adds up the totals.
"""

from __future__ import annotations

import os
from typing import Iterable

from otel_joules.carbon.equivalents import equivalents
from otel_joules.carbon.units import validate_pue
from otel_joules.errors import ConfigurationError
from otel_joules.report.carbontracker_runs import carbontracker_summary
from otel_joules.report.model import Report, Skipped
from otel_joules.report.readers import read_inputs
from otel_joules.report.run_carbon import CarbonOptions, Intensities
from otel_joules.report.trace_runs import runs_from_spans


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
    intensities = Intensities(CarbonOptions(intensity_gco2eq_per_kwh, country, pue))
    inputs = read_inputs(paths)
    skipped = list(inputs.skipped)
    span_runs = runs_from_spans(inputs.spans, intensities, skipped)
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
        runs.append(carbontracker_summary(log, intensities))
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
