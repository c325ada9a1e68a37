"""PDF reports of one training run, as carbontracker's ``carbontracker.report.generate_report_from_log``.

``generate_report_from_log(log_file_path, output_path)`` reads a standard log
(``..._carbontracker.log``, written by carbontracker or by otel-joules) and writes a
one-page PDF with carbontracker 2.4.7's sections: the title and who generated it, a
**Summary** (CO2eq with the carbon intensity, total energy with the average power,
training duration with the number of epochs), the **location**, a **System Power** table
(GPU and CPU power with their devices, average power, PUE coefficient) and a **Resource
Consumption Analysis** figure (power over time, energy per epoch, CO2eq per epoch).

Built with matplotlib (the ``plot`` extra: ``pip install 'otel-joules[plot]'``) on its
PDF backend; carbontracker uses reportlab and seaborn. What differs, on purpose:

- **The figures are the run's own totals.** When the run's output log (same name, ending
  ``_carbontracker_output.log``) has its actual consumption block, the report shows that
  block's kWh and gCO2eq, PUE included -- the numbers the tracker printed and
  :func:`otel_joules.carbontracker.parser.get_consumption` reads. Without one (a run still
  going), energy is the sum over epochs of power x duration, times the PUE, and CO2eq that
  times the average intensity. carbontracker's report multiplies the *average* power by the
  total duration and leaves the PUE out, so it disagrees with its own tracker.
- **Every number says what it is**: the summary states whether the energy was measured or
  estimated (the CPU estimate, simulated devices); CO2eq is shown in g below 1 kg
  (carbontracker always shows kg with three decimals, so short runs read 0.000 kg).
- A log without epochs or without any carbon intensity raises
  :class:`~otel_joules.carbontracker.logs.LogFormatError` saying so (carbontracker raises a
  bare ``ValueError``).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Dict, List, Optional, Tuple

from otel_joules.carbon.units import JOULES_PER_KWH
from otel_joules.training.logformat import OUTPUT_LOG_SUFFIX, SOFTWARE_NAME, STD_LOG_SUFFIX, LogFormatError
from otel_joules.training.logfiles import read_log_text
from otel_joules.training.logread import get_consumption, parse_standard_log
from otel_joules.errors import ConfigurationError
from otel_joules.exporters.safe_open import open_replace
from otel_joules.semconv import SOURCE_ESTIMATE, SOURCE_MEASURED

_LOCATION_RE = re.compile(r"at detected location:? (.+?)(?:: \[|\.?[ \t]*$)", re.MULTILINE)
_ESTIMATE_RE = re.compile(r"ESTIMATE, not a measurement|\((?:estimate|simulated)\)|Using simulated (?:CPU|GPU)")

# carbontracker's report colours.
_PRIMARY = "#1A237E"
_MUTED = "#455A64"
_PANEL = "#E8EAF6"
_GRID = "#C5CAE9"
_BLUE = "#0072B2"
_ORANGE = "#E69F00"
_GREEN = "#009E73"
_CO2 = "#D55E00"


@dataclass(frozen=True)
class EpochPower:
    """One epoch of the standard log.

    Attributes:
        epoch: Its number.
        duration_s: Its duration in seconds.
        watts_by_component: ``gpu``/``cpu`` -> average power (sum over the component's
            devices when the log lists them one by one); NaN where the log says ``None``.
    """

    epoch: int
    duration_s: float
    watts_by_component: Dict[str, float]

    @property
    def watts(self) -> float:
        """Average power of all components (those measured)."""
        return sum(w for w in self.watts_by_component.values() if not math.isnan(w))

    @property
    def joules(self) -> float:
        """IT energy of the epoch: power x duration (no PUE)."""
        return self.watts * self.duration_s


@dataclass(frozen=True)
class RunReport:
    """What the PDF shows, read from one run's logs.

    Attributes:
        std_log: The standard log read.
        output_log: Its output log, if it exists.
        software: Who wrote the log (``carbontracker``, ``otel-joules``), if it says.
        version: That writer's version.
        pue: The PUE coefficient of the log (1.0 when it names none).
        devices: Component -> device names.
        epochs: The epochs with a duration.
        intensity_gco2eq_per_kwh: Average carbon intensity of the run.
        location: Where the intensity applies (``Unknown`` when the log does not say).
        energy_kwh: Facility energy (PUE applied): the actual consumption block's, else
            from the epochs.
        co2eq_grams: CO2eq: the actual consumption block's, else from the epochs.
        from_consumption_block: True when the totals come from the output log's actual block.
        estimated: The log says some energy is an estimate (otel-joules' CPU estimate or
            simulated devices; carbontracker's own logs do not mark simulated devices).
        early_stop: Training was interrupted before all planned epochs.
        start_time: Timestamp of the log's first line (``YYYY-mm-dd HH:MM:SS``).
        end_time: Timestamp of its last line.
    """

    std_log: str
    output_log: Optional[str]
    software: Optional[str]
    version: Optional[str]
    pue: float
    devices: Dict[str, List[str]]
    epochs: Tuple[EpochPower, ...]
    intensity_gco2eq_per_kwh: float
    location: str
    energy_kwh: float
    co2eq_grams: float
    from_consumption_block: bool
    estimated: bool
    early_stop: bool = False
    start_time: Optional[str] = None
    end_time: Optional[str] = None
    _components: Tuple[str, ...] = field(default=(), repr=False)

    @property
    def energy_source(self) -> str:
        """``estimate`` where the log says so; ``measured`` for otel-joules' logs that do not; else that the log does not say."""
        if self.estimated:
            return SOURCE_ESTIMATE
        if self.software == SOFTWARE_NAME:
            return SOURCE_MEASURED
        return "measured or simulated: the log does not say"

    @property
    def duration_s(self) -> float:
        """Sum of the epochs' durations."""
        return sum(epoch.duration_s for epoch in self.epochs)

    @property
    def it_joules(self) -> float:
        """IT energy of the epochs (power x duration, no PUE)."""
        return sum(epoch.joules for epoch in self.epochs)

    @property
    def average_watts(self) -> float:
        """IT energy over the epochs' duration (0 for no duration)."""
        return self.it_joules / self.duration_s if self.duration_s > 0 else 0.0

    def component_watts(self, component: str) -> float:
        """Duration-weighted average power of one component over the epochs (NaN if never measured)."""
        pairs = [
            (e.watts_by_component[component], e.duration_s)
            for e in self.epochs
            if not math.isnan(e.watts_by_component.get(component, math.nan))
        ]
        seconds = sum(duration for _, duration in pairs)
        if not pairs:
            return math.nan
        if seconds <= 0:
            return sum(w for w, _ in pairs) / len(pairs)
        return sum(w * duration for w, duration in pairs) / seconds

    def epoch_kwh(self, epoch: EpochPower) -> float:
        """Facility energy of one epoch (PUE applied), in kWh."""
        return epoch.joules * self.pue / JOULES_PER_KWH

    def epoch_grams(self, epoch: EpochPower) -> float:
        """CO2eq of one epoch at the run's average intensity."""
        return self.epoch_kwh(epoch) * self.intensity_gco2eq_per_kwh


def read_run_report(log_file_path: str | os.PathLike[str]) -> RunReport:
    """Read the figures of one run's report from its standard log (and its output log, when there).

    Raises:
        LogFilesNotFoundError: the file does not exist.
        LogFormatError: it is not a carbontracker standard log, has no complete epoch, or
            names no carbon intensity and has no actual consumption block.
    """
    std_path = os.fspath(log_file_path)
    text = read_log_text(std_path)
    log = parse_standard_log(text, source=std_path)
    epochs = tuple(
        EpochPower(
            epoch=record.epoch,
            duration_s=float(record.duration_seconds or 0.0),
            watts_by_component={
                name: math.nan if power is None else float(sum(power)) for name, power in record.power_watts.items()
            },
        )
        for record in log.complete_epochs
    )
    if not epochs:
        raise LogFormatError(
            f"{std_path!r} has no complete epoch (no 'Duration:' line): the run has not finished an epoch yet, "
            "or this is not a carbontracker standard log"
        )
    output_path: Optional[str] = None
    actual = None
    if std_path.endswith(STD_LOG_SUFFIX):
        candidate = std_path[: -len(STD_LOG_SUFFIX)] + OUTPUT_LOG_SUFFIX
        if os.path.isfile(candidate):
            output_path = candidate
            actual, _ = get_consumption(read_log_text(candidate), text)
    pue = log.pue if log.pue is not None else 1.0
    it_joules = sum(epoch.joules for epoch in epochs)
    intensity = log.average_intensity_g_per_kwh
    if actual is not None:
        energy_kwh, co2eq_grams = float(actual["energy (kWh)"]), float(actual["co2eq (g)"])
        if intensity is None and energy_kwh > 0:
            intensity = co2eq_grams / energy_kwh
    elif intensity is not None:
        energy_kwh = it_joules * pue / JOULES_PER_KWH
        co2eq_grams = energy_kwh * intensity
    else:
        raise LogFormatError(
            f"{std_path!r} names no carbon intensity and its run has no actual consumption yet: "
            "the run has not finished (carbontracker's report needs the same)"
        )
    locations = _LOCATION_RE.findall(text)
    timestamps = re.findall(r"^(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})", text, re.MULTILINE)
    components = tuple(dict.fromkeys([*log.devices, *(name for e in epochs for name in e.watts_by_component)]))
    return RunReport(
        std_log=std_path,
        output_log=output_path,
        software=log.software,
        version=log.version,
        pue=pue,
        devices={name: list(names) for name, names in log.devices.items()},
        epochs=epochs,
        intensity_gco2eq_per_kwh=float(intensity if intensity is not None else 0.0),
        location=locations[-1].strip() if locations else "Unknown",
        energy_kwh=energy_kwh,
        co2eq_grams=co2eq_grams,
        from_consumption_block=actual is not None,
        estimated=bool(_ESTIMATE_RE.search(text)),
        early_stop=log.early_stop,
        start_time=timestamps[0] if timestamps else None,
        end_time=timestamps[-1] if timestamps else None,
        _components=components,
    )


# ------------------------------------------------------------------------------ text


def format_duration(seconds: float) -> str:
    """``1h 2min 3s`` as carbontracker's report writes durations; below a minute with one decimal (``3.9s``)."""
    if seconds < 60:
        return f"{seconds:.2f}s" if seconds < 1 else f"{seconds:.1f}s"
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours}h"] if hours else []
    if minutes:
        parts.append(f"{minutes}min")
    if secs or not parts:
        parts.append(f"{secs}s")
    return " ".join(parts)


def format_grams(grams: float) -> str:
    """``1.234 kg`` from 1 kg on, else grams with four significant digits (``0.01234 g``)."""
    if abs(grams) >= 1000:
        return f"{grams / 1000:.3f} kg"
    return f"{grams:.4g} g"


def format_kwh(kwh: float) -> str:
    """kWh with three decimals from 1 kWh, else four significant digits."""
    return f"{kwh:.3f} kWh" if abs(kwh) >= 1 else f"{kwh:.4g} kWh"


def _watts(value: float) -> str:
    return "not measured" if math.isnan(value) else f"{value:.1f} W"


# ------------------------------------------------------------------------------ PDF


def generate_report_from_log(log_file_path: str | os.PathLike[str], output_path: str | os.PathLike[str]) -> None:
    """Write a one-page PDF report of the run whose standard log is ``log_file_path``.

    Args:
        log_file_path: The run's standard log (``..._carbontracker.log``).
        output_path: Where to write the PDF.

    Raises:
        ConfigurationError: matplotlib is not installed.
        LogFilesNotFoundError, LogFormatError: see :func:`read_run_report`.
        OSError: the PDF cannot be written (:class:`~otel_joules.exporters.safe_open.SymlinkRefusedError`
            when ``output_path`` is a symbolic link).
    """
    try:
        from matplotlib.backends.backend_pdf import FigureCanvasPdf, PdfPages
        from matplotlib.figure import Figure
    except ImportError:
        raise ConfigurationError(
            "PDF reports need matplotlib, which is not installed: pip install 'otel-joules[plot]' (or matplotlib)"
        ) from None
    report = read_run_report(log_file_path)
    # The object API on a figure of our own: no global pyplot state or backend is touched.
    figure = Figure(figsize=(8.5, 11))
    FigureCanvasPdf(figure)
    _draw(figure, report)
    # Opened here, not by matplotlib: a link planted at the path is refused, not overwritten through.
    with os.fdopen(open_replace(output_path), "wb") as handle:
        with PdfPages(handle, metadata={"Title": "Carbon Emissions Report", "Creator": "otel-joules"}) as pdf:
            pdf.savefig(figure)


def _draw(figure: Any, report: RunReport) -> None:
    """carbontracker's report page, top to bottom: header, key figures, power table, power over time, per-epoch bars."""
    _draw_header(figure, report)
    _draw_summary(figure, report)
    _draw_power_table(figure, report)
    _draw_power_over_time(figure, report)
    _draw_epoch_bars(figure, report)


def _draw_header(figure: Any, report: RunReport) -> None:
    writer = report.software or "carbontracker"
    version = f" v{report.version}" if report.version else ""
    figure.text(0.5, 0.955, "Carbon Emissions Report", ha="center", va="center", fontsize=24, color=_PRIMARY, weight="bold")
    figure.text(
        0.5, 0.925, f"Generated by {writer}{version} from its log  \u2022  {datetime.now().strftime('%Y-%m-%d %H:%M')}",
        ha="center", va="center", fontsize=10, color=_MUTED,
    )
    figure.text(0.08, 0.885, "Summary", fontsize=16, color=_PRIMARY, weight="bold", va="center")


def _draw_summary(figure: Any, report: RunReport) -> None:
    from matplotlib.patches import FancyBboxPatch

    # Three key figures in boxes, as carbontracker's KPI table.
    kpis = figure.add_axes((0.08, 0.765, 0.84, 0.1))
    kpis.set_axis_off()
    kpis.set_xlim(0, 3)
    kpis.set_ylim(0, 1)
    source = report.energy_source
    cells = [
        (format_grams(report.co2eq_grams), "CO2eq Emissions", f"Carbon Intensity: {report.intensity_gco2eq_per_kwh:.2f} gCO2eq/kWh"),
        (format_kwh(report.energy_kwh), "Total Energy", f"Average Power: {report.average_watts:.1f} W"),
        (format_duration(report.duration_s), "Training Duration", f"Total Epochs: {len(report.epochs)}"
         + (" (stopped early)" if report.early_stop else "")),
    ]
    for index, (value, label, detail) in enumerate(cells):
        kpis.add_patch(FancyBboxPatch((index + 0.03, 0.04), 0.94, 0.92, boxstyle="round,pad=0,rounding_size=0.04",
                                      facecolor=_PANEL, edgecolor=_PRIMARY, linewidth=1.5))
        kpis.text(index + 0.5, 0.70, value, ha="center", va="center", fontsize=15, weight="bold", color="black")
        kpis.text(index + 0.5, 0.42, label, ha="center", va="center", fontsize=10)
        kpis.text(index + 0.5, 0.18, detail, ha="center", va="center", fontsize=7, color=_MUTED)

    basis = (
        "Energy and CO2eq: the run's actual consumption (output log), PUE included."
        if report.from_consumption_block
        else "Energy and CO2eq: sum over the epochs of power x duration, times the PUE (no actual consumption logged yet)."
    )
    figure.text(0.08, 0.748, f"{basis} Energy source: {source}.", fontsize=7.5, color=_MUTED, va="center")

    location = figure.add_axes((0.08, 0.705, 0.84, 0.03))
    location.set_axis_off()
    location.add_patch(FancyBboxPatch((0, 0), 1, 1, boxstyle="square,pad=0", facecolor="#F5F5FA", edgecolor=_GRID,
                                      transform=location.transAxes))
    location.text(0.015, 0.5, f"Location: {report.location}", va="center", fontsize=11, color=_PRIMARY,
                  transform=location.transAxes)


def _draw_power_table(figure: Any, report: RunReport) -> None:
    table_axes = figure.add_axes((0.08, 0.555, 0.84, 0.13))
    table_axes.set_axis_off()
    rows = [["System Power", ""]]
    for component, label in (("gpu", "GPU Power"), ("cpu", "CPU Power")):
        if component not in report._components:
            rows.append([label, f"none (no {component.upper()} in this run)"])
            continue
        devices = ", ".join(report.devices.get(component, [])) or "-"
        rows.append([label, f"{_watts(report.component_watts(component))} ({devices})"])
    rows.append(["Average Power", f"{report.average_watts:.1f} W"])
    rows.append(["PUE Coefficient", f"{report.pue:.2f}"])
    table = table_axes.table(cellText=rows, colWidths=[0.4, 0.6], loc="upper left", cellLoc="left", bbox=(0, 0, 1, 1))
    table.auto_set_font_size(False)
    for (row, column), cell in table.get_celld().items():
        cell.set_edgecolor(_GRID)
        cell.set_fontsize(10)
        if row == 0:
            cell.set_facecolor(_PANEL)
            cell.get_text().set_weight("bold")
            cell.get_text().set_fontsize(12)
        elif column == 0:
            cell.get_text().set_color(_PRIMARY)


def _draw_power_over_time(figure: Any, report: RunReport) -> None:
    figure.text(0.08, 0.52, "Resource Consumption Analysis", fontsize=16, color=_PRIMARY, weight="bold", va="center")
    minutes = []
    elapsed = 0.0
    for epoch in report.epochs:
        elapsed += epoch.duration_s
        minutes.append(elapsed / 60)
    power = figure.add_axes((0.1, 0.315, 0.82, 0.175))
    for component, label, colour, marker in (("gpu", "GPU", _BLUE, "o"), ("cpu", "CPU", _ORANGE, "s")):
        if component in report._components:
            values = [e.watts_by_component.get(component, math.nan) for e in report.epochs]
            power.plot(minutes, values, label=label, linewidth=2.5, marker=marker, markersize=5, color=colour)
    power.plot(minutes, [e.watts for e in report.epochs], label="Total", linewidth=2.5, linestyle="--", marker="^",
               markersize=5, color=_GREEN)
    power.set_title("Power Usage Over Time (average per epoch)", fontsize=12, color=_PRIMARY)
    power.set_xlabel("Time (minutes, at each epoch's end)", fontsize=9)
    power.set_ylabel("Power (W)", fontsize=9)
    power.legend(loc="upper right", fontsize=8)
    power.grid(True, alpha=0.5, color=_GRID)
    power.tick_params(labelsize=8)


def _draw_epoch_bars(figure: Any, report: RunReport) -> None:
    from matplotlib.ticker import MaxNLocator

    numbers = [e.epoch for e in report.epochs]
    energy = figure.add_axes((0.1, 0.05, 0.36, 0.165))
    energy.bar(numbers, [report.epoch_kwh(e) for e in report.epochs], color=_BLUE, alpha=0.75)
    energy.set_title("Energy per Epoch (PUE included)", fontsize=11, color=_PRIMARY)
    energy.set_xlabel("Epoch", fontsize=9)
    energy.set_ylabel("Energy (kWh)", fontsize=9)
    carbon = figure.add_axes((0.58, 0.05, 0.34, 0.165))
    carbon.bar(numbers, [report.epoch_grams(e) for e in report.epochs], color=_CO2, alpha=0.75)
    carbon.set_title("CO2eq Emissions per Epoch", fontsize=11, color=_PRIMARY)
    carbon.set_xlabel("Epoch", fontsize=9)
    carbon.set_ylabel("CO2eq (g)", fontsize=9)
    for axes in (energy, carbon):
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.grid(True, axis="y", alpha=0.5, color=_GRID)
        axes.tick_params(labelsize=8)
        axes.ticklabel_format(axis="y", style="sci", scilimits=(-3, 4))
