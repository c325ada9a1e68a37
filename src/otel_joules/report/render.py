"""A report as text (a table per run, totals, equivalents) and as JSON-ready data."""

from __future__ import annotations

import math
from typing import Any

from otel_joules.exporters.records import iso_utc_from_unix_nano
from otel_joules.report.model import Report, RunSummary

#: Printed under every text report: what was summed, so nobody has to guess.
COUNTING_NOTE = (
    "Per trace, only the topmost spans carrying energy.joules are summed (nested spans are inside their "
    "parents' energy). kWh = joules x PUE / 3.6e6; CO2eq = kWh x intensity."
)


def _duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    whole = int(round(seconds))
    minutes, secs = divmod(whole, 60)
    hours, minutes = divmod(minutes, 60)
    text = f"{hours:d}:{minutes:02d}:{secs:02d}"
    return text if seconds >= 1 or seconds == 0 else f"{seconds:.3f}s"


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
    """The human-readable report: one row per run, then totals, equivalents and notes."""
    headers = ("run", "kind", "epochs", "duration", "joules", "kWh", "PUE", "gCO2eq/kWh (source)", "gCO2eq")
    rows = [
        (
            run_label(run),
            run.kind,
            str(len(run.epochs)) if run.epochs else "-",
            _duration(run.duration_s),
            f"{run.joules:.3f}",
            f"{run.energy_kwh:.9f}",
            f"{run.pue:g}" + ("*" if run.pue_origin == "default" else ""),
            _intensity(run),
            f"{run.co2eq_grams:.6f}",
        )
        for run in report.runs
    ]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    numeric = {2, 4, 5, 6, 8}

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    out = [f"otel-joules report: {len(report.runs)} run(s) from {len(report.files_read)} file(s)", ""]
    if rows:
        out.append(line(headers))
        out.append(line(tuple("-" * w for w in widths)))
        out.extend(line(r) for r in rows)
        out.append("")
    out.append(
        f"Total: {report.total_joules:.3f} J ({report.total_joules / 3.6e6:.9f} kWh IT energy), "
        f"{report.total_kwh:.9f} kWh with PUE, {report.total_co2eq_grams:.6f} gCO2eq"
    )
    if report.equivalents:
        out.append("This is equivalent to:")
        for item in report.equivalents:
            out.append(f"  {item.amount:.9f} {item.unit}  [{item.factor.source}]")
    notes = [(run, note) for run in report.runs for note in run.notes]
    if notes:
        out.append("")
        out.append("Notes:")
        out.extend(f"  {run_label(run)}: {note}" for run, note in notes)
    if any(run.pue_origin == "default" for run in report.runs):
        out.append("  * no PUE recorded and no --pue given: 1.0")
    out.append("")
    out.append(COUNTING_NOTE)
    return "\n".join(out)


def format_skipped(report: Report) -> list[str]:
    """One line per skipped input: ``skipped PATH: REASON``."""
    return [f"skipped {item.path}: {item.reason}" for item in report.skipped]


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


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
                "spans_counted": run.spans_counted,
                "epochs": [
                    {"epoch": e.epoch, "duration_s": _finite(e.duration_s), "energy_joules": e.joules} for e in run.epochs
                ],
                "notes": list(run.notes),
            }
            for run in report.runs
        ],
        "totals": {
            "runs": len(report.runs),
            "energy_joules": report.total_joules,
            "energy_kwh": report.total_kwh,
            "co2eq_grams": report.total_co2eq_grams,
        },
        "equivalents": [
            {
                "key": item.key,
                "unit": item.unit,
                "amount": item.amount,
                "grams_per_unit": item.factor.grams_per_unit,
                "source": item.factor.source,
            }
            for item in report.equivalents
        ],
        "skipped": [{"path": item.path, "reason": item.reason} for item in report.skipped],
        "files_read": list(report.files_read),
    }
