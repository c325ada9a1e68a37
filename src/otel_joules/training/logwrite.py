"""Write carbontracker-format log files and console text from values.

carbontracker 2.4.7 writes three files per run into ``log_dir``::

    {prefix_}{pid}.{random}_{%Y-%m-%dT%H%M%SZ}_carbontracker.log          standard log
    {prefix_}{pid}.{random}_{%Y-%m-%dT%H%M%SZ}_carbontracker_output.log   output log
    {prefix_}{pid}.{random}_{%Y-%m-%dT%H%M%SZ}_carbontracker_err.log      error log (only if needed)

(a non-empty prefix is followed by ``_``, as carbontracker does). Every message starts
with ``YYYY-mm-dd HH:MM:SS - ``; a message may span several lines (the consumption
blocks do), and only its first line carries the prefix.

:class:`CarbonTrackerLogWriter` writes these files so that carbontracker's own parser,
unmodified, reads our values back. Two choices make that hold where carbontracker's own
writer does not:

- numbers in the standard log never use exponent notation (carbontracker's parser reads
  ``1.2e-05`` as ``1.2``): they are written as the shortest plain decimal that reads
  back to the same float (``0.000012``);
- a component's power is written as one number, the sum over its devices, unless the
  caller passes a per-device list (carbontracker's parser keeps only the first number of
  a list; ours reads all of them).

Every value crosses this boundary in explicit units (``_seconds``, ``_kwh``/``_joules``,
``_watts``, ``_grams``, ``_g_per_kwh``); the units written in the files are carbontracker's
(kWh, W, g, gCO2eq/kWh, ``h:mm:ss``).
"""

from __future__ import annotations

import datetime as _dt
import os
import secrets
import threading
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

from otel_joules._fork import register_fork_hook
from otel_joules.exporters.safe_open import SymlinkRefusedError, create_new, open_append
from otel_joules.training.results import ConsumptionKind
from otel_joules.training.logformat import (  # noqa: F401 - the format, re-exported for this module's users
    BELOW_RESOLUTION_LOG_PREFIX,
    CARBONTRACKER_PUE,
    CARBONTRACKER_PUE_SOURCE,
    CO2EQ_BASIS_LOG_PREFIX,
    DEFAULT_DECIMAL_PRECISION,
    DEFAULT_INTENSITY_UPDATE_INTERVAL_SECONDS,
    ERR_LOG_SUFFIX,
    ESTIMATE_DEVICE_MARKS,
    ESTIMATE_LOG_PREFIX,
    FILE_TIME_FORMAT,
    LINE_TIME_FORMAT,
    MEASURED_LOG_PREFIX,
    MESSAGE_PREFIX,
    OUTPUT_LOG_SUFFIX,
    PROCESS_SHARE_LOG_PREFIX,
    SOFTWARE_NAME,
    STD_LOG_SUFFIX,
    TRACE_ID_LOG_PREFIX,
    CarbonTrackerLogError,
    InvalidLogValueError,
    LogFilesNotFoundError,
    LogFormatError,
    LogWriteError,
)
from otel_joules.training.formatting import (  # noqa: F401 - the public formatters, also importable from here
    PowerValue,
    consumption_heading,
    format_components_line,
    format_consumption,
    format_duration,
    format_number,
    format_power,
    _COMPONENT_NAME_RE,
    _finite,
    _format_interval,
    _one_line,
)


# ------------------------------------------------------------------------------ writer


class CarbonTrackerLogWriter:
    """Writes one run's carbontracker-format logs into ``log_dir``.

    Creating the writer creates ``log_dir`` (with parents) and the (empty) standard and
    output logs, as carbontracker does when it starts; the error log appears on the first
    :meth:`write_error`. Each message is appended and closed at once, so a crash loses
    nothing already written and no file handle outlives a call; a lock keeps messages
    from several threads whole.

    Args:
        log_dir: Directory for the three files.
        log_file_prefix: Put before the file names, followed by ``_`` when not empty
            (carbontracker's ``log_file_prefix``). Must not contain a path separator.
        clock: Seconds since the epoch for file names and line prefixes; tests pass a
            fixed clock. File names use UTC (their ``Z`` says so); line prefixes use local
            time, as carbontracker's do.
        pid: Process id for the file name (default: this process).
        run_id: The ``{random}`` part of the name, 1..999999 (default: random; retried
            with another number if the files already exist).
    """

    def __init__(
        self,
        log_dir: str | os.PathLike[str],
        log_file_prefix: str = "",
        *,
        clock: Callable[[], float] = time.time,
        pid: int | None = None,
        run_id: int | None = None,
    ) -> None:
        if not isinstance(log_file_prefix, str) or "/" in log_file_prefix or os.sep in log_file_prefix:
            raise InvalidLogValueError(
                f"log_file_prefix {log_file_prefix!r} must be a plain name without a path separator; "
                "put directories into log_dir"
            )
        self._clock = clock
        self._lock = threading.Lock()
        # A fork while another thread appends would leave the child's lock held forever.
        register_fork_hook(self, "_new_lock")
        self.log_dir = Path(log_dir)
        try:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LogWriteError(f"cannot create the log directory {str(self.log_dir)!r}: {exc}") from exc
        prefix = f"{log_file_prefix}_" if log_file_prefix else ""
        pid = os.getpid() if pid is None else pid
        date = _dt.datetime.fromtimestamp(self._clock(), tz=_dt.timezone.utc).strftime(FILE_TIME_FORMAT)
        attempts = 1 if run_id is not None else 5
        for _ in range(attempts):
            number = run_id if run_id is not None else secrets.randbelow(999_999) + 1
            stem = f"{prefix}{pid}.{number}_{date}"
            if self._create(stem):
                break
        else:
            raise LogWriteError(
                f"log files for {stem!r} already exist in {str(self.log_dir)!r}; pass another run_id or log_dir"
            )
        #: The part of the file names before ``_carbontracker``.
        self.stem = stem

    def _create(self, stem: str) -> bool:
        std = self.log_dir / f"{stem}{STD_LOG_SUFFIX}"
        output = self.log_dir / f"{stem}{OUTPUT_LOG_SUFFIX}"
        try:
            # O_EXCL: never append to another run's log, nor write through a link.
            os.close(create_new(std))
        except FileExistsError:
            return False
        except OSError as exc:
            raise LogWriteError(f"cannot create the log file {str(std)!r}: {exc}") from exc
        try:
            os.close(create_new(output))
        except FileExistsError:
            std.unlink()
            return False
        except OSError as exc:
            raise LogWriteError(f"cannot create the log file {str(output)!r}: {exc}") from exc
        return True

    @property
    def std_log_path(self) -> Path:
        """The standard log (``..._carbontracker.log``)."""
        return self.log_dir / f"{self.stem}{STD_LOG_SUFFIX}"

    @property
    def output_log_path(self) -> Path:
        """The output log (``..._carbontracker_output.log``)."""
        return self.log_dir / f"{self.stem}{OUTPUT_LOG_SUFFIX}"

    @property
    def err_log_path(self) -> Path:
        """The error log (``..._carbontracker_err.log``); exists once an error was written."""
        return self.log_dir / f"{self.stem}{ERR_LOG_SUFFIX}"

    # -- low level

    def _new_lock(self) -> None:
        self._lock = threading.Lock()

    def _append(self, path: Path, text: str) -> None:
        with self._lock:
            try:
                # A link planted at a log's path (the error log is created on its first
                # message) is refused, never appended through.
                with os.fdopen(open_append(path), "a", encoding="utf-8") as handle:
                    handle.write(text)
            except SymlinkRefusedError as exc:
                raise LogWriteError(f"cannot append to the log file: {exc.strerror}; this message is not logged") from exc
            except OSError as exc:
                raise LogWriteError(f"cannot append to the log file {str(path)!r}: {exc}") from exc

    def _stamp(self) -> str:
        return _dt.datetime.fromtimestamp(self._clock()).strftime(LINE_TIME_FORMAT)

    def write_info(self, message: str) -> None:
        """Append ``message`` to the standard log (one message; it may span lines)."""
        if not isinstance(message, str):
            raise InvalidLogValueError(f"message must be a string, got {message!r}")
        self._append(self.std_log_path, f"{self._stamp()} - {message}\n")

    def write_output(self, message: str) -> str:
        """Append ``CarbonTracker: <message>`` to the output log; returns that console text."""
        if not isinstance(message, str):
            raise InvalidLogValueError(f"message must be a string, got {message!r}")
        text = f"{MESSAGE_PREFIX}{message}"
        self._append(self.output_log_path, f"{self._stamp()} - {text}\n")
        return text

    def write_error(self, message: str, *, level: str = "WARNING", thread_name: str | None = None) -> None:
        """Append to the error log as carbontracker does: ``date time,ms - thread - LEVEL - message``."""
        if not isinstance(message, str):
            raise InvalidLogValueError(f"message must be a string, got {message!r}")
        now = self._clock()
        moment = _dt.datetime.fromtimestamp(now)
        stamp = f"{moment.strftime(LINE_TIME_FORMAT)},{int(now * 1000) % 1000:03d}"
        thread = thread_name if thread_name is not None else threading.current_thread().name
        self._append(self.err_log_path, f"{stamp} - {thread} - {level.upper()} - {message}\n")

    # -- carbontracker's messages

    def write_header(
        self,
        components: Mapping[str, Sequence[str]],
        *,
        pue: float = CARBONTRACKER_PUE,
        pue_source: str | None = CARBONTRACKER_PUE_SOURCE,
        software: str = SOFTWARE_NAME,
        version: str | None = None,
    ) -> str:
        """The start of a run: version line, PUE line and the components found.

        The components line goes to the standard and the output log; its console text
        is returned. ``version`` defaults to the installed otel-joules version.
        """
        line = format_components_line(components)
        pue_value = _finite(pue, "pue")
        if pue_value <= 0:
            raise InvalidLogValueError(f"pue must be positive (1.0 = no data-centre overhead), got {pue!r}")
        if version is None:
            version = _installed_version()
        self.write_info(f"{_one_line(software, 'software')} version {_one_line(version, 'version')}")
        pue_line = f"Only predicted and actual consumptions are multiplied by a PUE coefficient of {format_number(pue_value)}"
        if pue_source:
            pue_line += f" ({_one_line(pue_source, 'pue_source')})"
        self.write_info(pue_line + ".")
        self.write_info(line)
        return self.write_output(line)

    def write_epoch(self, epoch: int, *, duration_seconds: float, power_watts: Mapping[str, PowerValue]) -> None:
        """One epoch's block: ``Epoch N:``, ``Duration: h:mm:ss.ff`` and one power line per component.

        ``power_watts`` maps a component (``gpu``, ``cpu``) to its average power during
        the epoch: the sum over its devices in W (what carbontracker's parser reads
        right), a per-device list, or None when nothing was measured.
        """
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise InvalidLogValueError(f"epoch must be a non-negative integer, got {epoch!r}")
        duration = format_duration(duration_seconds, centiseconds=True)
        lines = []
        for name, value in power_watts.items():
            if not isinstance(name, str) or not _COMPONENT_NAME_RE.match(name):
                raise InvalidLogValueError(f"component name {name!r} must be one word, e.g. 'gpu' or 'cpu'")
            lines.append(f"Average power usage (W) for {name.lower()}: {format_power(value)}")
        # Everything is formatted before the first line is written, so a bad value
        # cannot leave half an epoch block in the log.
        self.write_info(f"Epoch {epoch}:")
        self.write_info(f"Duration: {duration}")
        for line in lines:
            self.write_info(line)

    def write_intensity_fetched(self, intensity_g_per_kwh: float, *, location: str = "Unknown") -> None:
        """``Carbon intensity fetched: 123.45 gCO2/kWh at <location>`` (standard log)."""
        value = _finite(intensity_g_per_kwh, "intensity_g_per_kwh")
        self.write_info(f"Carbon intensity fetched: {value:.2f} gCO2/kWh at {_one_line(location, 'location')}")

    def write_average_intensity(
        self,
        average_g_per_kwh: float,
        *,
        intensities_g_per_kwh: Sequence[float] = (),
        update_interval_seconds: float = DEFAULT_INTENSITY_UPDATE_INTERVAL_SECONDS,
        location: str = "Unknown",
        source: str | None = None,
    ) -> str:
        """The intensity used for the actual consumption.

        Standard log: ``Carbon intensities (gCO2eq/kWh) fetched every 900 s at detected
        location: <location>: [445.0]`` (when ``intensities_g_per_kwh`` is given) and
        ``Average carbon intensity during training was 445.00 gCO2eq/kWh. ``; the latter
        also goes to the output log, and its console text is returned. ``source`` (which
        provider or table the value came from) is appended after carbontracker's text.
        """
        average = _finite(average_g_per_kwh, "average_g_per_kwh")
        values = [round(_finite(v, "intensities_g_per_kwh"), 2) for v in intensities_g_per_kwh]
        if values:
            self.write_info(
                f"Carbon intensities (gCO2eq/kWh) fetched every {_format_interval(update_interval_seconds)} s "
                f"at detected location: {_one_line(location, 'location')}: {values}"
            )
        message = f"Average carbon intensity during training was {average:.2f} gCO2eq/kWh. "
        if source:
            message += _one_line(source, "source")
        self.write_info(message)
        return self.write_output(message)

    def write_predicted_intensity(
        self,
        intensity_g_per_kwh: float,
        *,
        duration_seconds: float,
        location: str = "Unknown",
        source: str | None = None,
    ) -> str:
        """``Carbon intensity for the next h:mm:ss is predicted to be 107.49 gCO2/kWh at detected location: ...``.

        Written to both logs (carbontracker 1.x's wording; 2.4.7 prints no predicted
        intensity); returns the console text.
        """
        value = _finite(intensity_g_per_kwh, "intensity_g_per_kwh")
        message = (
            f"Carbon intensity for the next {format_duration(duration_seconds)} is predicted to be "
            f"{value:.2f} gCO2/kWh at detected location: {_one_line(location, 'location')}."
        )
        if source:
            message += f" {_one_line(source, 'source')}"
        self.write_info(message)
        return self.write_output(message)

    def write_early_stop(self, monitor_epochs: int) -> None:
        """``Training was interrupted before all N epochs were monitored.`` (what the parser calls early stop)."""
        if isinstance(monitor_epochs, bool) or not isinstance(monitor_epochs, int) or monitor_epochs < 0:
            raise InvalidLogValueError(f"monitor_epochs must be a non-negative integer, got {monitor_epochs!r}")
        self.write_info(f"Training was interrupted before all {monitor_epochs} epochs were monitored.")

    def write_consumption(
        self,
        kind: ConsumptionKind | str,
        *,
        epochs: int | None,
        duration_seconds: float,
        co2eq_grams: float,
        energy_kwh: float | None = None,
        energy_joules: float | None = None,
        equivalents: Mapping[str, float] | None = None,
        decimal_precision: int = DEFAULT_DECIMAL_PRECISION,
    ) -> str:
        """Append a consumption block to the output log; returns its console text.

        Same arguments as :func:`format_consumption`.
        """
        text = format_consumption(
            kind,
            epochs=epochs,
            duration_seconds=duration_seconds,
            co2eq_grams=co2eq_grams,
            energy_kwh=energy_kwh,
            energy_joules=energy_joules,
            equivalents=equivalents,
            decimal_precision=decimal_precision,
        )
        self._append(self.output_log_path, f"{self._stamp()} - {text}\n")
        return text

    def write_finished(self) -> str:
        """``Monitoring thread ended.`` (standard log) and ``Finished monitoring.`` (output log)."""
        self.write_info("Monitoring thread ended.")
        return self.write_output("Finished monitoring.")


def _installed_version() -> str:
    # Imported here so that importing this module stays cheap.
    from importlib import metadata

    try:
        return metadata.version("otel-joules")
    except metadata.PackageNotFoundError:
        return "unknown"
