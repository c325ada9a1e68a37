"""carbontracker's log format: file names, line prefixes and errors, shared by writers and readers.

The log writer (:mod:`otel_joules.training.logwrite`) and the log readers
(:mod:`otel_joules.training.logread`, used by ``otel-joules report`` and by the
carbontracker-compatible parser) agree on these strings; they live here, in core, so the
report reads logs without importing the compatibility layer.
"""

from __future__ import annotations

from otel_joules.errors import OtelJoulesError

#: What carbontracker puts before every output-log and console message.
MESSAGE_PREFIX = "CarbonTracker: "
#: strftime format of the ``YYYY-mm-dd HH:MM:SS - `` line prefix (local time, as carbontracker).
LINE_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
#: strftime format of the date in file names (carbontracker's "modified ISO 8601").
FILE_TIME_FORMAT = "%Y-%m-%dT%H%M%SZ"
#: File name endings; the part before them (the *stem*) pairs a run's files.
STD_LOG_SUFFIX = "_carbontracker.log"
OUTPUT_LOG_SUFFIX = "_carbontracker_output.log"
ERR_LOG_SUFFIX = "_carbontracker_err.log"
#: carbontracker 2.4.7's default ``decimal_precision``.
DEFAULT_DECIMAL_PRECISION = 12
#: Standard-log line naming the run's OpenTelemetry trace (followed by 32 hex digits),
#: so a report given both the log and the trace's spans counts the run once.
TRACE_ID_LOG_PREFIX = "OpenTelemetry trace_id "
#: Standard-log line naming the domains that are estimates, not measurements (their ids follow);
#: readers label such a run ``estimate`` (every device estimated) or ``mixed``.
ESTIMATE_LOG_PREFIX = "ESTIMATE, not a measurement: "
#: Standard-log line naming the domains read from hardware energy counters (their ids follow),
#: the counterpart of :data:`ESTIMATE_LOG_PREFIX`, so a measured run says so too.
MEASURED_LOG_PREFIX = "MEASURED by hardware energy counters: "
#: Output-log line after the actual consumption: this process's share of it (kWh, PUE applied, follows; then its
#: gCO2eq at the same intensity).
PROCESS_SHARE_LOG_PREFIX = "Of which this process's share: "
#: Line after each consumption block (console, output and standard logs): which energy its CO2eq is of, and the
#: PUE and intensity (with its source) it used, so the block is never read as a share or with another PUE.
CO2EQ_BASIS_LOG_PREFIX = "CO2eq above is of "
#: How a device name on the components line says it is not measured (``cpu (estimate)``).
ESTIMATE_DEVICE_MARKS = ("(estimate)", "(simulated)")
#: Standard-log line for an epoch shorter than a counter's update period (its energy is quantised).
BELOW_RESOLUTION_LOG_PREFIX = "BELOW RESOLUTION: "
#: The ``software`` of the version line our writer puts first.
SOFTWARE_NAME = "otel-joules"
#: carbontracker 2.4.7's PUE and the source it prints with it.
CARBONTRACKER_PUE = 1.58
CARBONTRACKER_PUE_SOURCE = "Daniel Bizo, 2023, Uptime Institute Global Data Center Survey"
#: carbontracker refreshes the carbon intensity every 900 s and prints that interval.
DEFAULT_INTENSITY_UPDATE_INTERVAL_SECONDS = 900

class CarbonTrackerLogError(OtelJoulesError):
    """Base class of the errors of the carbontracker log writer and parser."""


class InvalidLogValueError(CarbonTrackerLogError, ValueError):
    """A value cannot be written to a carbontracker log (negative, not finite, wrong type)."""


class LogWriteError(CarbonTrackerLogError, OSError):
    """A log file could not be created or appended to (the message names the file)."""


class LogFormatError(CarbonTrackerLogError, ValueError):
    """A log's content is not in carbontracker's format (the message says where and why)."""


class LogFilesNotFoundError(CarbonTrackerLogError, FileNotFoundError):
    """No log directory or no carbontracker log in it."""


class LogReadError(CarbonTrackerLogError, OSError):
    """A log file exists but cannot be read (permissions, I/O error)."""
