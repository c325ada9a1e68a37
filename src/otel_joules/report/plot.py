"""``--plot FILE.png``: a figure fit for a paper: energy per run split by domain, average power, energy per epoch.

Panels (all axes start at zero, so bar lengths compare truthfully):

- **Energy per run**: one horizontal bar per run, stacked by kind (CPU, memory, GPU; a
  carbontracker log's ``cpu`` component, which holds the memory too, as "CPU + memory";
  "other" for energy no domain names). Measured energy is solid, estimated energy
  hatched (``//``), a mix dotted; the legend says so. A run's attributed share is the bar;
  the host's interval energy over the same spans is drawn as an outline around it. Each
  bar is labelled with its joules, grams of CO2eq and source.
- **Average power per run**: joules / duration (W), the same hatching; runs below a
  counter's resolution are labelled so.
- **Energy per epoch** (when a run has epochs): one line per run from zero, dashed for
  estimates.

Runs are named by their root span (or "carbontracker log"), service and start time,
not by ids. Needs matplotlib (the optional extra ``plot``: ``pip install
'otel-joules[plot]'``). The figure is drawn with matplotlib's object API on an Agg canvas,
so no global backend is switched and no display is needed.
"""

from __future__ import annotations

import datetime as _dt
import os
from typing import Any

from otel_joules.exporters.safe_open import open_replace
from otel_joules.report.model import BASIS_ATTRIBUTED, PART_KINDS, EnergyPart, Report, ReportError, RunSummary
from otel_joules.report.render import KIND_LABELS, source_label
from otel_joules.semconv import (
    KIND_CPU,
    KIND_GPU,
    KIND_MEMORY,
    SOURCE_ESTIMATE,
    SOURCE_MEASURED,
    SOURCE_MIXED,
    SOURCE_PARTIAL,
)

#: Colour per kind (colour-blind safe Okabe-Ito hues).
KIND_COLOURS = {
    KIND_CPU: "#0072B2",
    KIND_MEMORY: "#E69F00",
    KIND_GPU: "#009E73",
    "cpu+memory": "#56B4E9",
    "other": "#999999",
}
KIND_NAMES = {
    KIND_CPU: "CPU",
    KIND_MEMORY: "memory",
    KIND_GPU: "GPU",
    "cpu+memory": "CPU + memory",
    "other": "other / not split",
}
#: Hatching per source: an estimate never looks like a measurement.
SOURCE_HATCHES = {SOURCE_MEASURED: "", SOURCE_ESTIMATE: "//", SOURCE_MIXED: "..", SOURCE_PARTIAL: "--", None: "xx"}
SOURCE_NAMES = {
    SOURCE_MEASURED: "measured",
    SOURCE_ESTIMATE: "estimate (not measured)",
    SOURCE_MIXED: "measured + estimated",
    SOURCE_PARTIAL: "partial (a domain missing: low)",
    None: "source not stated",
}


def plot_label(run: RunSummary) -> str:
    """A readable name: root span (or "carbontracker log"), service, start time (UTC)."""
    name = run.name if run.kind == "trace" else f"carbontracker log ({run.name})"
    if run.service_name and run.service_name != run.name:
        name += f" [{run.service_name}]"
    if run.start_unix_nano is not None:
        start = _dt.datetime.fromtimestamp(run.start_unix_nano / 1e9, tz=_dt.timezone.utc)
        name += "\n" + start.strftime("%Y-%m-%d %H:%M:%S UTC")
    return name


def _labels(report: Report) -> list[str]:
    labels = [plot_label(run) for run in report.runs]
    # Runs with the same name and second: tell them apart by id.
    repeated = {label for label in labels if labels.count(label) > 1}
    return [
        f"{label} #{run.run_id[:8]}" if label in repeated else label for label, run in zip(labels, report.runs)
    ]


def _joules_text(joules: float) -> str:
    for factor, unit in ((1e9, "GJ"), (1e6, "MJ"), (1e3, "kJ")):
        if abs(joules) >= factor:
            return f"{joules / factor:.3g} {unit}"
    return f"{joules:.3g} J"


def _stack(run: RunSummary) -> list[EnergyPart]:
    """The run's parts in stacking order (a run without a split is one "other" part of its source)."""
    parts = [p for p in run.parts if p.joules > 0]
    if not parts and run.joules > 0:
        parts = [EnergyPart("other", run.joules, run.energy_source)]
    return sorted(parts, key=lambda p: PART_KINDS.index(p.kind) if p.kind in PART_KINDS else len(PART_KINDS))


def plot_report(report: Report, path: str | os.PathLike[str]) -> None:
    """Write the PNG described in this module's docstring to ``path``.

    Raises:
        ReportError: matplotlib is not installed, there is nothing to plot, or the file
            cannot be written.
    """
    figure = report_figure(report)
    try:
        # Opened here, not by matplotlib: a link planted at the path is refused, not overwritten through.
        with os.fdopen(open_replace(path), "wb") as handle:
            figure.savefig(handle, format="png", dpi=150)
    except OSError as exc:
        raise ReportError(f"cannot write the plot to {os.fspath(path)!r}: {exc.strerror or exc}") from exc


def _stacked_bar(axes: Any, y: float, run: RunSummary, scale: float) -> list[EnergyPart]:
    """Draw ``run``'s parts (joules x ``scale``) as one bar stacked by kind, hatched by source; return the parts."""
    parts = _stack(run)
    left = 0.0
    for part in parts:
        width = part.joules * scale
        axes.barh(
            y,
            width,
            left=left,
            height=0.6,
            color=KIND_COLOURS.get(part.kind, KIND_COLOURS["other"]),
            hatch=SOURCE_HATCHES.get(part.source, SOURCE_HATCHES[None]),
            edgecolor="white",
            linewidth=0.8,
        )
        left += width
    return parts


def report_figure(report: Report) -> Any:
    """The matplotlib ``Figure`` that :func:`plot_report` saves (on its own Agg canvas).

    Raises:
        ReportError: matplotlib is not installed, or there is nothing to plot.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ReportError(
            "--plot needs matplotlib, which is not installed: pip install 'otel-joules[plot]' (or matplotlib)"
        ) from None
    if not report.runs:
        raise ReportError("nothing to plot: no run was read")
    runs = list(report.runs)
    labels = _labels(report)
    with_epochs = [(run, label) for run, label in zip(runs, labels) if run.epochs]
    bar_height_in = 0.55
    runs_in = max(1.6, bar_height_in * len(runs) + 1.2)
    heights = [runs_in, runs_in] + ([3.2 + 0.25 * len(with_epochs)] if with_epochs else [])
    figure = Figure(figsize=(13, sum(heights) + 0.8), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(len(heights), 1, height_ratios=heights, squeeze=False)[:, 0]
    positions = list(range(len(runs)))[::-1]  # first run on top
    _energy_panel(axes[0], report, runs, labels, positions)
    _power_panel(axes[1], runs, labels, positions)
    if with_epochs:
        _epochs_panel(axes[2], with_epochs)
    return figure


def _energy_panel(energy: Any, report: Report, runs: list[RunSummary], labels: list[str], positions: list[int]) -> None:
    """Energy per run, stacked by kind, hatched by source, the host's energy over the same spans dashed."""
    kinds_used: list[str] = []
    sources_used: list[str | None] = []
    for run, y in zip(runs, positions):
        for part in _stacked_bar(energy, y, run, 1.0):
            if part.kind not in kinds_used:
                kinds_used.append(part.kind)
            if part.source not in sources_used:
                sources_used.append(part.source)
        if run.energy_basis == BASIS_ATTRIBUTED and run.host_interval_joules is not None:
            energy.barh(y, run.host_interval_joules, height=0.8, fill=False, edgecolor="black", linewidth=1.0, linestyle="--")
    annotate_at = max(
        [max(run.joules, run.host_interval_joules or 0.0) for run in runs] + [1e-12]
    )
    for run, y in zip(runs, positions):
        text = f"{_joules_text(run.joules)}, {run.co2eq_grams:.3g} gCO2eq, {source_label(run)}"
        if run.energy_basis == BASIS_ATTRIBUTED and run.host_interval_joules is not None:
            text += f" (host: {_joules_text(run.host_interval_joules)})"
        energy.text(max(run.joules, run.host_interval_joules or 0.0) + 0.01 * annotate_at, y, text, va="center", fontsize=8)
    energy.set_xlim(0, annotate_at * 1.55)
    energy.set_yticks(positions, labels, fontsize=8)
    energy.set_ylim(-0.7, len(runs) - 0.3)
    energy.set_xlabel("energy (J, IT energy without PUE)")
    energy.set_title(
        f"Energy per run: {_totals_text(report)}",
        loc="left",
        fontsize=11,
    )
    energy.grid(axis="x", alpha=0.3)
    energy.set_axisbelow(True)
    # Outside the axes: a legend must never hide a bar or its label.
    energy.legend(
        handles=_energy_legend(runs, kinds_used, sources_used),
        fontsize=8,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        borderaxespad=0,
    )


def _energy_legend(runs: list[RunSummary], kinds_used: list[str], sources_used: list[str | None]) -> list[Any]:
    """The energy panel's legend entries: the kinds drawn, in :data:`PART_KINDS` order, then the sources' hatches."""
    from matplotlib.patches import Patch

    kinds_used = sorted(kinds_used, key=lambda k: PART_KINDS.index(k) if k in PART_KINDS else len(PART_KINDS))
    handles: list[Any] = [Patch(facecolor=KIND_COLOURS.get(k, KIND_COLOURS["other"]), label=KIND_NAMES.get(k, k)) for k in kinds_used]
    handles += [
        Patch(facecolor="white", edgecolor="black", hatch=SOURCE_HATCHES.get(s, SOURCE_HATCHES[None]), label=SOURCE_NAMES.get(s, str(s)))
        for s in sources_used
    ]
    if any(run.energy_basis == BASIS_ATTRIBUTED and run.host_interval_joules is not None for run in runs):
        handles.append(Patch(fill=False, edgecolor="black", linestyle="--", label="host energy over the same spans"))
    return handles


def _power_panel(power: Any, runs: list[RunSummary], labels: list[str], positions: list[int]) -> None:
    """Average power per run (energy / duration), split like the energy."""
    annotate_w = 1e-12
    for run, y in zip(runs, positions):
        if not run.duration_s or run.duration_s <= 0:
            power.text(0, y, "  no duration recorded", va="center", fontsize=8)
            continue
        annotate_w = max(annotate_w, run.joules / run.duration_s)
        _stacked_bar(power, y, run, 1.0 / run.duration_s)
    for run, y in zip(runs, positions):
        if run.duration_s and run.duration_s > 0:
            watts = run.joules / run.duration_s
            note = f"{watts:.3g} W over {run.duration_s:.3g} s"
            if run.below_resolution:
                note += " (below a counter's resolution: quantised)"
            power.text(watts + 0.01 * annotate_w, y, note, va="center", fontsize=8)
    power.set_xlim(0, annotate_w * 1.55)
    power.set_yticks(positions, labels, fontsize=8)
    power.set_ylim(-0.7, len(runs) - 0.3)
    power.set_xlabel("average power (W) = energy / duration, split by kind")
    power.set_title("Average power per run", loc="left", fontsize=11)
    power.grid(axis="x", alpha=0.3)
    power.set_axisbelow(True)


def _epochs_panel(epochs_axes: Any, with_epochs: list[tuple[RunSummary, str]]) -> None:
    """Energy per epoch of the runs that have epochs, estimates dashed."""
    from matplotlib.ticker import MaxNLocator

    for run, label in with_epochs:
        estimated = run.energy_source in (SOURCE_ESTIMATE, SOURCE_MIXED)
        epochs_axes.plot(
            [e.epoch for e in run.epochs],
            [e.joules for e in run.epochs],
            marker="o",
            linestyle="--" if estimated else "-",
            label=label.replace("\n", ", ") + (f" ({run.energy_source})" if run.energy_source else ""),
        )
    top = max(e.joules for run, _ in with_epochs for e in run.epochs)
    epochs_axes.set_ylim(0, top * 1.15 if top > 0 else 1.0)
    epochs_axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    epochs_axes.set_xlabel("epoch")
    epochs_axes.set_ylabel("energy (J)")
    epochs_axes.set_title("Energy per epoch (dashed: estimate)", loc="left", fontsize=11)
    epochs_axes.grid(alpha=0.3)
    # Below the axes: long run names must not squeeze the panels above.
    epochs_axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0.0, -0.18), borderaxespad=0, frameon=False)


def _totals_text(report: Report) -> str:
    """``total X J, Y gCO2eq``, or one such figure per kind of run (never added together)."""
    parts = [
        f"{'total' if not report.mixed_kinds else KIND_LABELS.get(t.kind, (t.kind, ''))[0]} {_joules_text(t.joules)}, "
        f"{t.co2eq_grams:.3g} gCO2eq"
        for t in report.totals
    ]
    return "; ".join(parts) or "total 0 J"
