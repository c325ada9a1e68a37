"""``--plot FILE.png``: energy per run (bars) and per epoch (one line per run with epochs).

Needs matplotlib (the optional extra ``plot``: ``pip install 'otel-joules[plot]'``). The
figure is drawn with matplotlib's object API on an Agg canvas, so no global backend is
switched and no display is needed.
"""

from __future__ import annotations

import os

from otel_joules.report.model import Report, ReportError
from otel_joules.report.render import run_label


def plot_report(report: Report, path: str | os.PathLike[str]) -> None:
    """Write a PNG of energy per run and per epoch to ``path``.

    Raises:
        ReportError: matplotlib is not installed, there is nothing to plot, or the file
            cannot be written.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        raise ReportError(
            "--plot needs matplotlib, which is not installed: pip install 'otel-joules[plot]' (or matplotlib)"
        ) from None
    if not report.runs:
        raise ReportError("nothing to plot: no run was read")
    with_epochs = [run for run in report.runs if run.epochs]
    figure = Figure(figsize=(10, 8 if with_epochs else 4.5), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(2 if with_epochs else 1, 1, squeeze=False)[:, 0]

    labels = [run_label(run) for run in report.runs]
    bars = axes[0].bar(range(len(labels)), [run.joules for run in report.runs], color="tab:green")
    axes[0].bar_label(bars, labels=[f"{run.co2eq_grams:.3g} g" for run in report.runs], fontsize=8)
    axes[0].set_xticks(range(len(labels)), labels, rotation=20, ha="right", fontsize=8)
    axes[0].set_ylabel("energy (J)")
    axes[0].set_title(f"Energy per run (total {report.total_joules:.4g} J, {report.total_co2eq_grams:.4g} gCO2eq)")

    if with_epochs:
        for run in with_epochs:
            axes[1].plot([e.epoch for e in run.epochs], [e.joules for e in run.epochs], marker="o", label=run_label(run))
        axes[1].xaxis.set_major_locator(MaxNLocator(integer=True))
        axes[1].set_xlabel("epoch")
        axes[1].set_ylabel("energy (J)")
        axes[1].set_title("Energy per epoch")
        axes[1].legend(fontsize=8)
    try:
        figure.savefig(os.fspath(path), format="png")
    except OSError as exc:
        raise ReportError(f"cannot write the plot to {os.fspath(path)!r}: {exc.strerror or exc}") from exc
