"""A report as text (a table per run, totals, equivalents) and as JSON-ready data."""

from __future__ import annotations

import math
from typing import Any

from otel_joules.carbon.equivalents import Equivalent
from otel_joules.carbon.units import format_co2eq_grams, format_duration
from otel_joules.exporters.records import iso_utc_from_unix_nano
from otel_joules.report.model import (
    BASIS_ATTRIBUTED,
    BASIS_EPOCHS,
    BASIS_INTERVAL,
    BASIS_LOGGED,
    RUN_KIND_CARBONTRACKER,
    RUN_KIND_TRACE,
    EnergyPart,
    KindTotals,
    Report,
    RunSummary,
    skipped_line,
)

#: Printed under every text report: what was summed, so nobody has to guess.
COUNTING_NOTE = (
    "Per trace, the spans' attributed share is summed (the topmost energy.attributed.joules; nested spans are "
    "inside their parents'); exports without attribution fall back to the topmost spans' interval energy "
    "(energy.joules: everything the host drew while they ran), labelled 'interval'. A carbontracker log counts "
    "with the total the tracker logged. kWh = joules x PUE / 3.6e6; CO2eq = kWh x intensity: each row's gCO2eq is of "
    "its 'counted' energy, at its PUE and intensity. Totals add runs of one kind only: traces (attributed shares) "
    "and carbontracker logs (the host's energy) are totalled apart, never added into one figure."
)

#: How each kind of run's total is named, and what its joules are.
KIND_LABELS = {
    RUN_KIND_TRACE: ("traces", "the traces' attributed shares"),
    RUN_KIND_CARBONTRACKER: ("carbontracker logs", "the host's energy each tracker logged"),
}

#: How each :attr:`RunSummary.energy_basis` is written in the table's "counted" column.
BASIS_LABELS = {
    BASIS_ATTRIBUTED: "attributed",
    BASIS_INTERVAL: "interval",
    BASIS_LOGGED: "logged total",
    BASIS_EPOCHS: "epochs",
}


def source_label(run: RunSummary) -> str:
    """``measured``, ``estimate``, ``mixed``, ``partial`` (a domain left out: low) or ``not stated``;
    ``(below resolution)`` when quantised."""
    label = run.energy_source or "not stated"
    return f"{label} (below resolution)" if run.below_resolution else label


def run_label(run: RunSummary) -> str:
    """How a run is named in tables and plots: trace id prefix and root span name, or the log stem."""
    if run.kind == "trace":
        label = f"{run.run_id[:12]} {run.name}"
        if run.service_name:
            label += f" ({run.service_name})"
        return label
    return f"{run.run_id} ({run.name})"


def _intensity(run: RunSummary) -> str:
    value = "-" if run.intensity_gco2eq_per_kwh is None else f"{run.intensity_gco2eq_per_kwh:.2f}"
    return f"{value} ({run.intensity_source})"


def format_report(report: Report) -> str:
    """The human-readable report: one row per run, then totals, equivalents and notes.

    Every row says whether its energy was measured or estimated (``source``) and what was
    summed (``counted``: the spans' attributed share, their interval energy, or a
    carbontracker log's total); attributed runs show the host's interval energy beside it.
    """
    with_host = any(run.host_interval_joules is not None for run in report.runs)
    headers = ["run", "kind", "source", "epochs", "duration", "joules", "counted"]
    if with_host:
        headers.append("host interval J")
    headers += ["kWh", "PUE", "gCO2eq/kWh (source)", "gCO2eq"]
    rows = []
    for run in report.runs:
        cells = [
            run_label(run),
            run.kind,
            source_label(run),
            str(len(run.epochs)) if run.epochs else "-",
            format_duration(run.duration_s),
            f"{run.joules:.3f}",
            BASIS_LABELS.get(run.energy_basis, run.energy_basis),
        ]
        if with_host:
            cells.append("-" if run.host_interval_joules is None else f"{run.host_interval_joules:.3f}")
        cells += [
            f"{run.energy_kwh:.9f}",
            f"{run.pue:g}" + ("*" if run.pue_origin == "default" else ""),
            _intensity(run),
            format_co2eq_grams(run.co2eq_grams),
        ]
        rows.append(tuple(cells))
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    numeric = {i for i, h in enumerate(headers) if h in ("epochs", "joules", "host interval J", "kWh", "PUE", "gCO2eq")}

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    out = [f"otel-joules report: {report.run_count} run(s) from {len(report.files_read)} file(s)"]
    if report.skipped:
        out.append(skipped_line(len(report.skipped)))
    out.append("")
    if rows:
        out.append(line(tuple(headers)))
        out.append(line(tuple("-" * w for w in widths)))
        out.extend(line(r) for r in rows)
        out.append("")
    if report.runs_not_listed:
        out.append(f"{not_listed_text(report)}.")
        out.append("")
    out.extend(_totals_lines(report))
    notes = [(run, note) for run in report.runs for note in run.notes]
    if notes:
        out.append("")
        out.append("Notes:")
        out.extend(f"  {run_label(run)}: {note}" for run, note in notes)
    if report.run_tally().default_pue:
        out.append("  * no PUE recorded and no --pue given: 1.0")
    out.append("")
    out.append(COUNTING_NOTE)
    return "\n".join(out)


def _totals_lines(report: Report) -> list[str]:
    """The totals: one ``Total:`` line when every run is of one kind, else one line per kind, never a sum of kinds."""
    if not report.mixed_kinds:
        single = report.totals[0] if report.totals else KindTotals(RUN_KIND_TRACE, 0, 0.0, 0.0, 0.0)
        lines = [f"Total: {_figures(single)}: {_of_what(report, single)}", "  " + _total_provenance(report)]
        return lines + _equivalents_lines("This is equivalent to:", single.equivalents)
    lines = ["Totals, one per kind of run (never added together: a trace counts its share, a carbontracker log the host's energy):"]
    for totals in report.totals:
        name, _ = KIND_LABELS.get(totals.kind, (totals.kind, ""))
        lines.append(f"  {name}, {totals.runs} run(s): {_figures(totals)}: {_of_what(report, totals)}")
    lines.append("  " + _total_provenance(report))
    for totals in report.totals:
        name, _ = KIND_LABELS.get(totals.kind, (totals.kind, ""))
        lines += _equivalents_lines(f"The {name}' CO2eq is equivalent to:", totals.equivalents)
    return lines


def _figures(totals: KindTotals) -> str:
    return (
        f"{totals.joules:.3f} J ({totals.joules / 3.6e6:.9f} kWh IT energy), {totals.kwh:.9f} kWh with PUE, "
        f"{format_co2eq_grams(totals.co2eq_grams)} gCO2eq"
    )


def _of_what(report: Report, totals: KindTotals) -> str:
    """What a total's energy is, and at which PUE and intensity."""
    _, energy = KIND_LABELS.get(totals.kind, (totals.kind, "their energy"))
    if totals.kind == RUN_KIND_TRACE:
        bases = {run_basis for run_basis in report.run_tally().by_basis if run_basis in (BASIS_ATTRIBUTED, BASIS_INTERVAL)}
        if bases == {BASIS_INTERVAL}:
            energy = "the traces' topmost spans' interval energy (no attribution in the export)"
        elif len(bases) > 1:
            energy = "the traces' attributed shares, and the interval energy of those exported without attribution"
    runs = [run for run in report.runs if run.kind == totals.kind]
    pues = {run.pue for run in runs}
    intensities = {(run.intensity_gco2eq_per_kwh, run.intensity_source) for run in runs}
    if report.runs_not_listed or len(pues) != 1 or len(intensities) != 1:
        return f"{energy}, at each run's PUE and intensity (its row)"
    ((value, source),) = intensities
    intensity = "an intensity derived from the recorded CO2eq" if value is None else f"{value:.2f} gCO2eq/kWh ({source})"
    return f"{energy}, at PUE {next(iter(pues)):g} and {intensity}"


def _equivalents_lines(heading: str, items: tuple[Equivalent, ...]) -> list[str]:
    if not items:
        return []
    return [heading, *(f"  {item.amount:.9f} {item.unit}  [{item.factor.source}]" for item in items)]


def _total_provenance(report: Report) -> str:
    """What the total is made of: bases and sources, and the attributed runs' host interval energy."""
    tally = report.run_tally()
    bases: dict[str, int] = {}
    for basis, count in tally.by_basis.items():
        key = BASIS_LABELS.get(basis, basis)
        bases[key] = bases.get(key, 0) + count
    sources: dict[str, int] = {}
    for source, count in tally.by_source.items():
        key = source or "not stated"
        sources[key] = sources.get(key, 0) + count
    text = "of which: " + ", ".join(f"{count} run(s) {name}" for name, count in bases.items())
    text += "; " + ", ".join(f"{count} {name}" for name, count in sources.items())
    if report.host_interval_joules is not None:
        text += f"; host interval energy of the attributed runs: {report.host_interval_joules:.3f} J"
    below = tally.below_resolution
    if below:
        text += f"; {below} run(s) below a counter's resolution (quantised)"
    return text


def not_listed_text(report: Report) -> str:
    """What a report that lists only some runs says about the others (they are in the totals)."""
    return (
        f"{report.runs_not_listed} more run(s) in the totals are not listed (listed: the first {len(report.runs)}; "
        "carbontracker runs, then traces by start): --runs all lists every one, --runs N the first N"
    )


def format_skipped(report: Report) -> list[str]:
    """One line per skipped input: ``skipped PATH: REASON``."""
    return [f"skipped {item.path}: {item.reason}" for item in report.skipped]


def _equivalents(items: tuple[Equivalent, ...]) -> list[dict[str, Any]]:
    return [
        {
            "key": item.key,
            "unit": item.unit,
            "amount": item.amount,
            "grams_per_unit": item.factor.grams_per_unit,
            "source": item.factor.source,
        }
        for item in items
    ]


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _parts(parts: tuple[EnergyPart, ...]) -> list[dict[str, Any]]:
    return [{"kind": p.kind, "energy_joules": p.joules, "energy_source": p.source} for p in parts]


def report_dict(report: Report) -> dict[str, Any]:
    """The report as plain JSON-ready data (``otel-joules report --json``)."""
    return {
        "runs": [
            {
                "run_id": run.run_id,
                "kind": run.kind,
                "name": run.name,
                "service_name": run.service_name,
                "sources": list(run.sources),
                "start_time": iso_utc_from_unix_nano(run.start_unix_nano) if run.start_unix_nano is not None else None,
                "duration_s": _finite(run.duration_s),
                "energy_joules": run.joules,
                "energy_kwh": run.energy_kwh,
                "pue": run.pue,
                "pue_origin": run.pue_origin,
                "co2eq_grams": run.co2eq_grams,
                "intensity_gco2eq_per_kwh": _finite(run.intensity_gco2eq_per_kwh),
                "intensity_source": run.intensity_source,
                "energy_source": run.energy_source,
                "energy_basis": run.energy_basis,
                "host_interval_joules": run.host_interval_joules,
                "process_share_joules": run.process_share_joules,
                "platform_domain": None if run.platform is None else run.platform[0],
                "platform_joules": None if run.platform is None else run.platform[1],
                "coverage": run.coverage,
                "below_resolution": run.below_resolution,
                "energy_parts": _parts(run.parts),
                "spans_counted": run.spans_counted,
                "epochs": [
                    {
                        "epoch": e.epoch,
                        "duration_s": _finite(e.duration_s),
                        "energy_joules": e.joules,
                        "energy_parts": _parts(e.parts),
                    }
                    for e in run.epochs
                ],
                "notes": list(run.notes),
            }
            for run in report.runs
        ],
        **({"runs_not_listed": report.runs_not_listed, "runs_listing": not_listed_text(report)}
           if report.runs_not_listed else {}),
        "totals": {
            "runs": report.run_count,
            # Null when the runs are of different kinds: their totals are only in by_kind, never added.
            "energy_joules": report.total_joules,
            "energy_kwh": report.total_kwh,
            "co2eq_grams": report.total_co2eq_grams,
            "host_interval_joules": report.host_interval_joules,
            "by_kind": {
                totals.kind: {
                    "runs": totals.runs,
                    "energy_joules": totals.joules,
                    "energy_kwh": totals.kwh,
                    "co2eq_grams": totals.co2eq_grams,
                    "host_interval_joules": totals.host_interval_joules,
                    "energy_of": KIND_LABELS.get(totals.kind, (totals.kind, ""))[1],
                    "equivalents": _equivalents(totals.equivalents),
                }
                for totals in report.totals
            },
        },
        "equivalents": _equivalents(report.equivalents),
        "skipped": [{"path": item.path, "reason": item.reason} for item in report.skipped],
        "files_read": list(report.files_read),
    }
