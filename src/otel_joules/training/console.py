"""What the training tracker says: console lines and log files in carbontracker's format.

:class:`TrackerOutput` holds the optional :class:`~otel_joules.training.logwrite.CarbonTrackerLogWriter`
(``log_dir``) and the console settings (``verbose``, ``decimal_precision``,
``interpretable``); each method writes one of carbontracker's messages (to which we add, where
they apply, the intensity's source, that a figure is an estimate or measured, the process
share) to the console and, with a log directory, to the standard and output logs.
"""

from __future__ import annotations

import sys
import traceback
from typing import Mapping, Sequence, TextIO

from otel_joules.carbon.intensity import CarbonIntensity
from otel_joules.training.logwrite import (
    BELOW_RESOLUTION_LOG_PREFIX,
    CARBONTRACKER_PUE,
    CARBONTRACKER_PUE_SOURCE,
    CO2EQ_BASIS_LOG_PREFIX,
    DEFAULT_INTENSITY_UPDATE_INTERVAL_SECONDS,
    ESTIMATE_LOG_PREFIX,
    MEASURED_LOG_PREFIX,
    MESSAGE_PREFIX,
    PROCESS_SHARE_LOG_PREFIX,
    TRACE_ID_LOG_PREFIX,
    CarbonTrackerLogWriter,
    format_components_line,
    format_consumption,
)
from otel_joules.training.results import Consumption, ConsumptionKind, EpochResult

#: The equivalents carbontracker 2.4.7 prints with ``interpretable=True`` (its conversion
#: table's latest row: km travelled by car); keys of :data:`otel_joules.carbon.equivalents.FACTORS`.
PRINTED_EQUIVALENT_KEYS = ("km_by_car",)


def _location(intensity: CarbonIntensity) -> str:
    return intensity.region or "Unknown"


def _say(intensity: CarbonIntensity) -> str:
    """Which intensity was used, in one line (the source names are otel_joules.carbon's)."""
    return f"Source: {intensity.source} - {intensity.detail.rstrip('.')}."


class TrackerOutput:
    """The tracker's console and log output (see the module docstring).

    Args:
        writer: Writes the log files; None without ``log_dir``.
        verbose: 0: nothing on the console (errors still go to stderr).
        decimal_precision: Decimals of the printed kWh, g and equivalents.
        interpretable: Print carbontracker's "This is equivalent to:" line.
    """

    def __init__(
        self, writer: CarbonTrackerLogWriter | None, verbose: int, decimal_precision: int, interpretable: bool
    ) -> None:
        self.writer = writer
        self.verbose = verbose
        self.decimal_precision = decimal_precision
        self.interpretable = interpretable

    # -- channels ---------------------------------------------------------------------------

    def console(self, text: str) -> None:
        """Print ``text`` unless ``verbose`` is 0."""
        if self.verbose > 0:
            print(text, file=sys.stdout, flush=True)

    def info(self, message: str) -> None:
        """A line of the standard log only."""
        if self.writer is not None:
            self.writer.write_info(message)

    def output(self, message: str) -> None:
        """A line of the output log, also printed."""
        text = self.writer.write_output(message) if self.writer is not None else MESSAGE_PREFIX + message
        self.console(text)

    def note(self, message: str) -> None:
        """A line of the standard log, also printed."""
        self.info(message)
        self.console(MESSAGE_PREFIX + message)

    def error(self, message: str, *, level: str = "ERROR") -> None:
        """An error: on stderr whatever ``verbose`` says (carbontracker prints them too), and in the error log."""
        print(f"{MESSAGE_PREFIX}{level} - {message}", file=sys.stderr, flush=True)
        if self.writer is not None:
            try:
                self.writer.write_error(message, level=level)
            except Exception:  # noqa: BLE001 - the log may be what failed
                pass

    def failure(self, exc: BaseException, ignore_errors: bool) -> None:
        """A failure of monitoring, with its traceback: ignored (training goes on) or critical."""
        details = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        if ignore_errors:
            self.error(f"Ignored error: {details}Continued training without monitoring...")
        else:
            self.error(details, level="CRITICAL")

    # -- messages ---------------------------------------------------------------------------

    def header(
        self,
        devices: Mapping[str, Sequence[str]],
        pue: float,
        ignored_sim: str,
        measured: Sequence[str],
        estimated: Sequence[str],
        has_estimates: bool,
        intensity: CarbonIntensity,
    ) -> None:
        """The components found, the PUE, which figures are measured or estimated, the first intensity."""
        components = {name: list(devs) for name, devs in devices.items()}
        line = format_components_line(components)
        pue_line = f"Only predicted and actual consumptions are multiplied by a PUE coefficient of {pue:g}"
        if pue == CARBONTRACKER_PUE:
            pue_line += f" ({CARBONTRACKER_PUE_SOURCE})"
        pue_line += "."
        if self.writer is not None:
            self.writer.write_header(
                components, pue=pue, pue_source=CARBONTRACKER_PUE_SOURCE if pue == CARBONTRACKER_PUE else None
            )
        self.console(MESSAGE_PREFIX + line)
        self.console(MESSAGE_PREFIX + pue_line)
        if ignored_sim:
            self.note(f"{ignored_sim} (as carbontracker ignores them): the real hardware is measured.")
        if measured:
            # Said as plainly as an estimate is: a reader of a measured run's log sees the word too.
            self.note(f"{MEASURED_LOG_PREFIX}{', '.join(measured)}.")
        if estimated:
            self.note(
                f"{ESTIMATE_LOG_PREFIX}{', '.join(estimated)} "
                + (
                    "(no readable RAPL counter: CPU time x per-CPU watts and memory size x W/GB; run `otel-joules devices` for why)"
                    if has_estimates
                    else "(simulated constant power)"
                )
                + "."
            )
        if self.writer is not None:
            self.writer.write_intensity_fetched(intensity.gco2eq_per_kwh, location=_location(intensity))

    def trace_id(self, trace_id: str) -> None:
        """Names the trace in the log, so `otel-joules report` counts a run whose spans and logs it is given only once.

        Both parsers ignore this line."""
        self.info(f"{TRACE_ID_LOG_PREFIX}{trace_id}: the training and epoch spans of this run.")

    def epoch(self, result: EpochResult) -> None:
        """An epoch's duration and power (log), and a note when it was below a counter's resolution."""
        if self.writer is not None:
            self.writer.write_epoch(
                result.epoch, duration_seconds=result.duration_s, power_watts=result.power_watts_by_component
            )
        if result.below_resolution:
            # The figure is quantised (a counter did not tick, or ticked once, inside the
            # epoch): say so where it is shown, and in the log for the report.
            self.note(
                f"{BELOW_RESOLUTION_LOG_PREFIX}epoch {result.epoch} lasted {result.duration_s:.4f} s, shorter than a "
                "counter's update period: its energy and power are quantised, not exact."
            )

    def block(self, consumption: Consumption, epochs: int | None) -> None:
        """carbontracker's "Actual/Predicted consumption" block."""
        kind = ConsumptionKind(consumption.kind)
        # carbontracker prints only its one equivalent (km by car); the others stay in the result.
        shown = (
            {item.unit: item.amount for item in consumption.equivalents if item.key in PRINTED_EQUIVALENT_KEYS}
            if self.interpretable
            else None
        )
        # The writer's method formats exactly like format_consumption and also logs the block.
        write = self.writer.write_consumption if self.writer is not None else format_consumption
        text = write(
            kind,
            epochs=epochs,
            duration_seconds=consumption.duration_s,
            co2eq_grams=consumption.co2eq_grams,
            energy_kwh=consumption.energy_kwh,
            equivalents=shown,
            decimal_precision=self.decimal_precision,
        )
        self.console(text)

    def basis(self, consumption: Consumption, intensity: CarbonIntensity) -> None:
        """After a consumption block: which energy its CO2eq is of (the host's interval energy, never the process's
        share), and the PUE and intensity, with its source, that made kWh and grams of it (console, output log and
        standard log). An extra line: carbontracker's parsers ignore it."""
        kind = ConsumptionKind(consumption.kind)
        energy = (
            "the host's interval energy during the epochs"
            if kind is ConsumptionKind.ACTUAL
            else f"the host's interval energy of the epochs measured, scaled to {consumption.epochs} epoch(s)"
        )
        message = (
            f"{CO2EQ_BASIS_LOG_PREFIX}{energy} (what its devices used, every process's work included), "
            f"x PUE {consumption.pue:g}, at {consumption.intensity_gco2eq_per_kwh:.2f} gCO2eq/kWh "
            f"({consumption.intensity_source}: {intensity.detail.rstrip('.')})."
        )
        self.info(message)
        self.output(message)

    def share(self, kwh: float, co2eq_grams: float) -> None:
        """Beside the host's consumption printed above, this process's share of it (console and output log).

        An extra line after carbontracker's block: its parsers ignore it, ``otel-joules report`` shows it."""
        self.output(
            f"{PROCESS_SHARE_LOG_PREFIX}{kwh:.{self.decimal_precision}f} kWh, "
            f"{co2eq_grams:.{self.decimal_precision}f} g CO2eq at the same PUE and intensity "
            "(its CPU time's part of the host's CPU and memory energy, its part of the GPUs). "
            "The consumption above is what the host's devices used, measured or estimated as said above."
        )

    def prediction(self, predicted: Consumption, intensity: CarbonIntensity, epochs: int) -> None:
        """The prediction's intensity and block."""
        if self.writer is not None:
            text = self.writer.write_predicted_intensity(
                intensity.gco2eq_per_kwh,
                duration_seconds=predicted.duration_s,
                location=_location(intensity),
                source=_say(intensity),
            )
            self.console(text)
        else:
            self.console(
                f"{MESSAGE_PREFIX}Carbon intensity for the prediction: {intensity.gco2eq_per_kwh:.2f} gCO2eq/kWh. "
                f"{_say(intensity)}"
            )
        self.block(predicted, epochs)
        self.basis(predicted, intensity)

    def actual(
        self,
        actual: Consumption,
        epochs: int | None,
        intensity: CarbonIntensity,
        intensities_g_per_kwh: Sequence[float],
        estimated: Sequence[str],
        measured: Sequence[str],
    ) -> None:
        """The average intensity, the actual consumption block, and whether it includes estimates."""
        if self.writer is not None:
            text = self.writer.write_average_intensity(
                actual.intensity_gco2eq_per_kwh,
                intensities_g_per_kwh=list(intensities_g_per_kwh),
                update_interval_seconds=DEFAULT_INTENSITY_UPDATE_INTERVAL_SECONDS,
                location=_location(intensity),
                source=_say(intensity),
            )
            self.console(text)
        else:
            self.console(
                f"{MESSAGE_PREFIX}Average carbon intensity during training was "
                f"{actual.intensity_gco2eq_per_kwh:.2f} gCO2eq/kWh. {_say(intensity)}"
            )
        self.block(actual, epochs)
        self.basis(actual, intensity)
        if estimated:
            # The block above is carbontracker's format and cannot carry a label: say it right after.
            self.output(f"{ESTIMATE_LOG_PREFIX}the consumption above includes estimates ({', '.join(estimated)}).")
        elif measured:
            self.output(f"{MEASURED_LOG_PREFIX}the consumption above ({', '.join(measured)}).")

    def finished(self) -> None:
        """carbontracker's last line."""
        if self.writer is not None:
            self.console(self.writer.write_finished())
        else:
            self.console(f"{MESSAGE_PREFIX}Finished monitoring.")

    def confirm(self, stdin: TextIO | None) -> bool:
        """Ask whether to continue; True to go on. Without a terminal, go on and say so."""
        stream = stdin if stdin is not None else sys.stdin
        try:
            interactive = stream is not None and bool(stream.isatty())
        except (AttributeError, ValueError, OSError):
            interactive = False
        if not interactive:
            message = (
                "stop_and_confirm=True, but standard input is not a terminal, so nobody can answer: "
                "continuing training without asking."
            )
            self.info(message)
            self.output(message)
            return True
        while True:
            self.output("Continue training (y/n)?")
            try:
                line = stream.readline()
            except (OSError, ValueError) as exc:
                self.output(f"Cannot read the answer ({exc}): continuing training.")
                return True
            if line == "":
                self.output("No answer (end of input): continuing training.")
                return True
            answer = line.strip().lower()
            if answer in ("y", "yes"):
                self.output("Continuing...")
                return True
            if answer in ("n", "no"):
                return False
            self.output("Input not recognized. Try again (y/n):")
