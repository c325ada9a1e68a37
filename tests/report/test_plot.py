"""``otel-joules report --plot``: zero-based axes, per-kind stacks, estimates hatched, readable run names.

The figure is inspected through matplotlib's objects (what a reader sees: bar lengths,
hatching, legend and tick labels), then saved as a PNG as the command does.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from tests.report.test_attributed import _spans, _write_jsonl, _write_otlp  # noqa: E402
from tests.report.test_labels import _estimated_run  # noqa: E402

from otel_joules.cli.main import main  # noqa: E402
from otel_joules.report import build_report, report_figure  # noqa: E402


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    _estimated_run(tmp_path, epochs=3)  # tmp_path/logs: an estimated carbontracker run with epochs
    _write_otlp(tmp_path / "otlp.jsonl", _spans())  # attributed, measured, split by kind
    old = [{**s, "trace_id": "1" * 32} for s in _spans(lambda k: not k.startswith("energy.attributed"))]
    _write_jsonl(tmp_path / "old.jsonl", old)
    return tmp_path


def _bars(axes) -> list:
    return [p for p in axes.patches if p.get_width() > 0 and p.get_fill()]


def test_figure_is_honest(runs: Path) -> None:
    report = build_report([runs / "logs", runs / "otlp.jsonl", runs / "old.jsonl"])
    figure = report_figure(report)
    energy, power, epochs = figure.axes[:3]
    # Zero-based axes: a bar's length is its value.
    assert energy.get_xlim()[0] == 0 and power.get_xlim()[0] == 0 and epochs.get_ylim()[0] == 0
    # Stacks by kind add up to each run's joules; estimates are hatched, measurements are not.
    widths: dict[float, float] = {}
    for bar in _bars(energy):
        widths[bar.get_y()] = widths.get(bar.get_y(), 0.0) + bar.get_width()
    assert sorted(widths.values()) == pytest.approx(sorted(run.joules for run in report.runs), rel=1e-9)
    hatches = {bar.get_hatch() or "" for bar in _bars(energy)}
    assert hatches == {"", "//"}
    estimate_run = next(run for run in report.runs if run.energy_source == "estimate")
    estimated = [bar for bar in _bars(energy) if bar.get_hatch() == "//"]
    assert sum(bar.get_width() for bar in estimated) == pytest.approx(estimate_run.joules, rel=1e-9)
    # The attributed run's host interval energy is drawn beside it as an outline.
    outlines = [p for p in energy.patches if not p.get_fill()]
    assert [p.get_width() for p in outlines] == [100.0]
    legend = [text.get_text() for text in energy.get_legend().get_texts()]
    assert {"CPU", "memory", "GPU", "CPU + memory", "estimate (not measured)", "measured"} <= set(legend)
    assert "host energy over the same spans" in legend
    # Readable names: span name, service, start time; never a bare 32-digit id.
    names = [tick.get_text() for tick in energy.get_yticklabels()]
    assert any(name.startswith("serve [api]\n2023-11-14 22:13:20 UTC") for name in names)
    assert any(name.startswith("carbontracker log (otel-joules)") for name in names)
    assert not any(re.search(r"[0-9a-f]{32}", name) for name in names)
    # Power panel: watts = joules / duration, stacked the same way.
    watts: dict[float, float] = {}
    for bar in _bars(power):
        watts[bar.get_y()] = watts.get(bar.get_y(), 0.0) + bar.get_width()
    assert sorted(watts.values()) == pytest.approx(sorted(r.joules / r.duration_s for r in report.runs), rel=1e-9)


def test_cli_writes_the_png(runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from matplotlib import image

    target = runs / "energy.png"
    assert main(["report", str(runs / "logs"), str(runs / "otlp.jsonl"), "--plot", str(target)]) == 0
    pixels = image.imread(str(target))
    assert pixels.shape[0] > 600 and pixels.shape[1] > 1200
    assert "plot written to" in capsys.readouterr().err


def test_plot_is_not_written_through_a_link(runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 24, item 6: matplotlib opened --plot's path itself and overwrote the link's target.
    target = runs / "bashrc"
    target.write_bytes(b"# never touched\n")
    link = runs / "energy.png"
    link.symlink_to(target)
    assert main(["report", str(runs / "logs"), "--plot", str(link)]) == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "plot" in line]
    assert "is a symbolic link" in line and "remove the link" in line
    assert target.read_bytes() == b"# never touched\n"
