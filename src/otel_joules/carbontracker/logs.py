"""carbontracker-format log files, under carbontracker's module path.

The writer (:class:`CarbonTrackerLogWriter`) is the core's, :mod:`otel_joules.training.logwrite`,
which also documents the format; the format's names are in :mod:`otel_joules.training.logformat`
and the formatters in :mod:`otel_joules.training.formatting`. All are importable from here, as
before, for carbontracker-compatible code.
"""

from __future__ import annotations

from otel_joules.training.logwrite import (  # noqa: F401 - re-exported for this module's users
    BELOW_RESOLUTION_LOG_PREFIX,
    CARBONTRACKER_PUE,
    CARBONTRACKER_PUE_SOURCE,
    CO2EQ_BASIS_LOG_PREFIX,
    CarbonTrackerLogError,
    CarbonTrackerLogWriter,
    ConsumptionKind,
    DEFAULT_DECIMAL_PRECISION,
    DEFAULT_INTENSITY_UPDATE_INTERVAL_SECONDS,
    ERR_LOG_SUFFIX,
    ESTIMATE_DEVICE_MARKS,
    ESTIMATE_LOG_PREFIX,
    FILE_TIME_FORMAT,
    InvalidLogValueError,
    LINE_TIME_FORMAT,
    LogFilesNotFoundError,
    LogFormatError,
    LogWriteError,
    MEASURED_LOG_PREFIX,
    MESSAGE_PREFIX,
    OUTPUT_LOG_SUFFIX,
    PROCESS_SHARE_LOG_PREFIX,
    PowerValue,
    SOFTWARE_NAME,
    STD_LOG_SUFFIX,
    TRACE_ID_LOG_PREFIX,
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
