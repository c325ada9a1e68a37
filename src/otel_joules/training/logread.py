"""Read carbontracker-format logs: standard log, consumption blocks, and the run pairs of a directory.

Reads logs written by carbontracker itself and by the training tracker's
writer; used by ``otel-joules report`` and by the carbontracker-compatible parser (which
adds carbontracker's directory-wide functions on top). Where carbontracker 2.4.7 reads its own
logs wrongly, these functions read them right (see that module's docstring).

Errors: text that is not in carbontracker's format raises
:class:`~otel_joules.training.logformat.LogFormatError` saying where and why. Reading the
files and pairing a directory's runs is :mod:`otel_joules.training.logfiles`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from otel_joules.semconv import SOURCE_ESTIMATE, SOURCE_MEASURED, SOURCE_MIXED
from otel_joules.training.logformat import (
    BELOW_RESOLUTION_LOG_PREFIX,
    ESTIMATE_DEVICE_MARKS,
    ESTIMATE_LOG_PREFIX,
    SOFTWARE_NAME,
    MESSAGE_PREFIX,
    LogFormatError,
)

#: carbontracker's dictionary of one consumption block (see :func:`get_consumption`).
Consumption = Dict[str, Any]


# ----------------------------------------------------------------------------- values

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?nan|[-+]?inf"
_NUMBER_RE = re.compile(rf"^(?:{_NUMBER})$", re.IGNORECASE)
_DURATION_RE = re.compile(r"^(-?)(\d+):(\d{2}):(\d{2}(?:\.\d+)?)$")
_NUMPY_SCALAR_RE = re.compile(r"^np\.float\d*\((.*)\)$")


def _number(text: str) -> float:
    if not _NUMBER_RE.match(text):
        raise ValueError(f"{text!r} is not a number")
    return float(text)


def parse_duration(text: str) -> float:
    """Seconds of carbontracker's ``h:mm:ss`` or ``h:mm:ss.ff`` (``-`` allowed in front).

    Raises:
        LogFormatError: ``text`` is not such a duration.
    """
    match = _DURATION_RE.match(text.strip())
    if not match:
        raise LogFormatError(f"{text!r} is not a duration in carbontracker's h:mm:ss[.ff] format")
    sign, hours, minutes, seconds = match.groups()
    value = int(hours) * 3600 + int(minutes) * 60 + float(seconds)
    return -value if sign else value


def _parse_power(text: str) -> Optional[Tuple[float, ...]]:
    """``None``/``nan`` -> None (not measured); ``400.0`` -> (400.0,); ``[300. 100.]`` -> (300.0, 100.0)."""
    text = " ".join(text.split())
    numpy_scalar = _NUMPY_SCALAR_RE.match(text)
    if numpy_scalar:
        text = numpy_scalar.group(1).strip()
    if text == "None":
        return None
    if text.startswith("["):
        if not text.endswith("]"):
            raise ValueError(f"the list {text!r} is not closed with ']'")
        items = [item for item in re.split(r"[\s,]+", text[1:-1]) if item]
        if not items:
            raise ValueError("the list of powers is empty")
        return tuple(_number(item) for item in items)
    value = _number(text)
    if math.isnan(value):
        return None
    return (value,)


# --------------------------------------------------------------------- standard log


@dataclass(frozen=True)
class EpochRecord:
    """One ``Epoch N:`` block of a standard log.

    Attributes:
        epoch: The number after ``Epoch``.
        duration_seconds: From the ``Duration:`` line; None when the block has none
            (a run killed while writing it).
        power_watts: Component -> average power in W: one value (the component's total
            as we write it, or carbontracker's average over its devices), one value per
            device, or None when the log says ``None`` (nothing measured).
    """

    epoch: int
    duration_seconds: Optional[float] = None
    power_watts: Dict[str, Optional[Tuple[float, ...]]] = field(default_factory=dict)


@dataclass(frozen=True)
class StandardLog:
    """What a standard log (``..._carbontracker.log``) says.

    Attributes:
        software: Who wrote it, from the version line (``carbontracker``, ``otel-joules``).
        version: That writer's version.
        pue: The PUE coefficient of the PUE line.
        devices: Component (``gpu``, ``cpu``) -> device names, from the components line.
        epochs: The epoch blocks, in log order.
        average_intensity_g_per_kwh: From ``Average carbon intensity during training was ...``.
        early_stop: Whether it says ``Training was interrupted``.
        energy_source: ``measured``, ``estimate`` (every device estimated or simulated) or
            ``mixed``, from the ``ESTIMATE, not a measurement`` line and the device names;
            None when the log does not say (carbontracker's own logs).
        below_resolution: An epoch was shorter than a counter's update period (a
            ``BELOW RESOLUTION`` line): its energy is quantised.
    """

    software: Optional[str] = None
    version: Optional[str] = None
    pue: Optional[float] = None
    devices: Dict[str, List[str]] = field(default_factory=dict)
    epochs: List[EpochRecord] = field(default_factory=list)
    average_intensity_g_per_kwh: Optional[float] = None
    early_stop: bool = False
    energy_source: Optional[str] = None
    below_resolution: bool = False

    @property
    def complete_epochs(self) -> List[EpochRecord]:
        """The epochs that have a duration (those energy can be computed for)."""
        return [epoch for epoch in self.epochs if epoch.duration_seconds is not None]


_LINE_PREFIX_RE = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:,\d+)? - ")
_VERSION_RE = re.compile(r"^(\S+) version (\S+)\s*$")
_PUE_RE = re.compile(rf"PUE coefficient of ({_NUMBER})", re.IGNORECASE)
_COMPONENTS_RE = re.compile(r"^The following components were found:(.*)$", re.DOTALL)
_COMPONENT_START_RE = re.compile(r"([A-Za-z][A-Za-z0-9_-]*) with device\(s\) ")
_EPOCH_RE = re.compile(r"^Epoch (\d+):\s*$")
_DURATION_LINE_RE = re.compile(r"^Duration:\s*(.*?)\s*$")
_POWER_RE = re.compile(r"^Average power usage \(W\) for (.+?): (.*)$", re.DOTALL)
_AVERAGE_INTENSITY_RE = re.compile(rf"Average carbon intensity during training was ({_NUMBER}) gCO2", re.IGNORECASE)
_EARLY_STOP_RE = re.compile(r"Training was interrupted", re.IGNORECASE)


def _messages(text: str) -> List[Tuple[int, str]]:
    """(line number, message) pairs: the timestamp prefix removed, wrapped power lists joined."""
    messages: List[Tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        prefix = _LINE_PREFIX_RE.match(line)
        body = line[prefix.end():] if prefix else line
        if not prefix and messages:
            previous_number, previous = messages[-1]
            # numpy wraps long arrays over several lines; only the first carries the prefix.
            if previous.startswith("Average power usage") and previous.count("[") > previous.count("]"):
                messages[-1] = (previous_number, f"{previous} {body.strip()}")
                continue
        messages.append((number, body))
    return messages


def _parse_devices(text: str) -> Dict[str, List[str]]:
    """``GPU with device(s) A100.1, T4. CPU with device(s) cpu:0.`` -> {"gpu": ["A100.1", "T4"], "cpu": ["cpu:0"]}."""
    text = text.strip()
    # A component starts the text or follows the ". " that ends the previous one, so a
    # dot inside a device name ("A100.1", "8.x") does not end the list.
    starts = [m for m in _COMPONENT_START_RE.finditer(text) if m.start() == 0 or text[: m.start()].endswith(". ")]
    devices: Dict[str, List[str]] = {}
    for index, match in enumerate(starts):
        end = starts[index + 1].start() if index + 1 < len(starts) else len(text)
        segment = text[match.end():end].rstrip()
        if segment.endswith("."):
            segment = segment[:-1]
        devices[match.group(1).lower()] = [name.strip() for name in segment.split(",") if name.strip()]
    return devices


def components_line_devices(text: str) -> Dict[str, List[str]]:
    """Component -> device names from the first components line of a standard *or output* log's text.

    The output log writes the same line after carbontracker's ``CarbonTracker: `` message
    prefix; carbontracker's ``get_devices`` finds it in either log. ``{}`` when no line is
    found. Never raises: only that one line is read.
    """
    for _, message in _messages(text):
        if message.startswith(MESSAGE_PREFIX):
            message = message[len(MESSAGE_PREFIX):]
        if match := _COMPONENTS_RE.match(message):
            return _parse_devices(match.group(1))
    return {}


def parse_standard_log(text: str, *, source: str = "<text>") -> StandardLog:
    """Parse the text of a standard log (``..._carbontracker.log``).

    Lines the format does not define (``Monitoring thread started.``, intensity fetches)
    are ignored. ``source`` names the file in error messages.

    Raises:
        LogFormatError: a line the format defines holds a value that cannot be read
            (says which line), the same component appears twice in one epoch, or an epoch
            other than the last has no duration.
    """
    parser = StandardLogParser()
    for line_number, message in _messages(text):
        parser.read(message, f"{source}, line {line_number}")
    return parser.result(source)


class StandardLogParser:
    """What a standard log has said so far, one message at a time: :meth:`read` each line's message, then
    :meth:`result` (what :func:`parse_standard_log` does with a whole file)."""

    def __init__(self) -> None:
        self.software: Optional[str] = None
        self.version: Optional[str] = None
        self.pue: Optional[float] = None
        self.devices: Optional[Dict[str, List[str]]] = None
        self.epochs: List[EpochRecord] = []
        # Kept beside the frozen records until the end: a duration arrives after its epoch's line.
        self.durations: List[Optional[float]] = []
        self.intensity: Optional[float] = None
        self.early_stop = False
        self.estimate_line = self.below_resolution = False

    def read(self, message: str, where: str) -> None:
        """Take one message; ``where`` (file and line) goes into any error."""
        if self.software is None and (match := _VERSION_RE.match(message)):
            self.software, self.version = match.group(1), match.group(2)
        elif match := _COMPONENTS_RE.match(message):
            if self.devices is None:
                self.devices = _parse_devices(match.group(1))
        elif match := _EPOCH_RE.match(message):
            self._new_epoch(int(match.group(1)))
        elif match := _DURATION_LINE_RE.match(message):
            self._duration(match.group(1), where)
        elif match := _POWER_RE.match(message):
            self._power(match.group(1).strip().lower(), match.group(2), where)
        else:
            self._other(message)

    def _new_epoch(self, number: int) -> int:
        self.epochs.append(EpochRecord(epoch=number))
        self.durations.append(None)
        return len(self.epochs) - 1

    def _current_epoch(self) -> int:
        # A Duration or power line before any "Epoch N:" starts an epoch of its own:
        # carbontracker's parser does not need the Epoch lines either.
        if not self.epochs:
            return self._new_epoch(1)
        return len(self.epochs) - 1

    def _duration(self, text: str, where: str) -> None:
        index = self._current_epoch()
        if self.durations[index] is not None:
            # Two durations in one block: the second belongs to an epoch whose
            # "Epoch N:" line is missing.
            index = self._new_epoch(self.epochs[index].epoch + 1)
        try:
            self.durations[index] = parse_duration(text)
        except LogFormatError as exc:
            raise LogFormatError(f"{where}: {exc}") from None

    def _power(self, component: str, text: str, where: str) -> None:
        try:
            power = _parse_power(text)
        except ValueError as exc:
            raise LogFormatError(f"{where}: cannot read the power of {component!r}: {exc}") from None
        epoch = self.epochs[self._current_epoch()]
        if component in epoch.power_watts:
            raise LogFormatError(
                f"{where}: a second power line for {component!r} in epoch {epoch.epoch}; "
                "the log is corrupt (two runs written into one file?)"
            )
        epoch.power_watts[component] = power

    def _other(self, message: str) -> None:
        """A line with no block of its own: PUE, the average intensity, an early stop, our labels."""
        if self.pue is None and (match := _PUE_RE.search(message)):
            self.pue = float(match.group(1))
        if match := _AVERAGE_INTENSITY_RE.search(message):
            self.intensity = float(match.group(1))
        if _EARLY_STOP_RE.search(message):
            self.early_stop = True
        self.estimate_line = self.estimate_line or message.startswith(ESTIMATE_LOG_PREFIX)
        self.below_resolution = self.below_resolution or message.startswith(BELOW_RESOLUTION_LOG_PREFIX)

    def result(self, source: str) -> StandardLog:
        """The log read; raises :class:`LogFormatError` when an epoch other than the last has no duration."""
        records = [
            EpochRecord(epoch=record.epoch, duration_seconds=duration, power_watts=record.power_watts)
            for record, duration in zip(self.epochs, self.durations)
        ]
        for record in records[:-1]:
            if record.duration_seconds is None:
                raise LogFormatError(
                    f"{source}: epoch {record.epoch} has no 'Duration:' line but later epochs do; the log is corrupt"
                )
        devices = self.devices or {}
        return StandardLog(
            software=self.software,
            version=self.version,
            pue=self.pue,
            devices=devices,
            epochs=records,
            average_intensity_g_per_kwh=self.intensity,
            early_stop=self.early_stop,
            energy_source=_energy_source(self.software, devices, self.estimate_line),
            below_resolution=self.below_resolution,
        )


def _energy_source(software: Optional[str], devices: Dict[str, List[str]], estimate_line: bool) -> Optional[str]:
    """What the log says its figures are: measured, estimate or mixed (None: it does not say)."""
    names = [name for group in devices.values() for name in group]
    estimated = [name for name in names if name.endswith(ESTIMATE_DEVICE_MARKS)]
    if estimate_line or estimated:
        return SOURCE_MIXED if len(estimated) < len(names) else SOURCE_ESTIMATE
    # Our writer always writes the ESTIMATE line when there is one; carbontracker never does.
    return SOURCE_MEASURED if software == SOFTWARE_NAME else None


def looks_like_standard_log(log: StandardLog) -> bool:
    """The log has at least one carbontracker line (version, PUE, components or epochs)."""
    return bool(log.software or log.pue is not None or log.devices or log.epochs)


# ----------------------------------------------------------------------- output log

_HEADING_RE = re.compile(
    r"(Actual|Predicted) consumption(?: for (-?\d+) epochs?(?:\(s\))?)?:[ \t]*$",
    re.IGNORECASE | re.MULTILINE,
)
_TIME_RE = re.compile(r"^\s*Time:\s*(.*?)\s*$")
_ENERGY_RE = re.compile(rf"^\s*Energy:\s*({_NUMBER})\s*kWh\s*$", re.IGNORECASE)
_CO2EQ_RE = re.compile(rf"^\s*CO2eq:\s*({_NUMBER})\s*g\s*$", re.IGNORECASE)
_EQUIVALENT_HEAD_RE = re.compile(r"^\s*This is equivalent to:\s*$", re.IGNORECASE)
_EQUIVALENT_RE = re.compile(rf"^\s*({_NUMBER})\s+(\S.*?)\s*$", re.IGNORECASE)


def _block(text: str, heading: "re.Match[str]", epochs_in_std_log: Optional[int]) -> Consumption:
    kind = heading.group(1).capitalize()
    line_number = text.count("\n", 0, heading.start()) + 1
    where = f"the '{heading.group(0).strip()}' block (line {line_number})"
    lines = [line for line in text[heading.end():].split("\n")[1:]]
    position = 0

    def expect(pattern: "re.Pattern[str]", what: str) -> "re.Match[str]":
        nonlocal position
        while position < len(lines) and not lines[position].strip():
            position += 1
        line = lines[position] if position < len(lines) else ""
        match = pattern.match(line)
        if not match:
            raise LogFormatError(f"{where} has no readable {what} line (found {line.strip()!r})")
        position += 1
        return match

    duration = parse_duration(expect(_TIME_RE, "'Time:'").group(1))
    energy = float(expect(_ENERGY_RE, "'Energy: ... kWh'").group(1))
    co2eq = float(expect(_CO2EQ_RE, "'CO2eq: ... g'").group(1))
    equivalents: Optional[Dict[str, float]] = None
    if position < len(lines) and _EQUIVALENT_HEAD_RE.match(lines[position]):
        equivalents = {}
        for line in lines[position + 1:]:
            # The block ends at the first line that is not "<amount> <unit>": the next
            # timestamped message, or the console's next "CarbonTracker:" line.
            if _LINE_PREFIX_RE.match(line):
                break
            match = _EQUIVALENT_RE.match(line)
            if not match:
                break
            equivalents[match.group(2)] = float(match.group(1))
    if heading.group(2) is not None:
        epochs: Optional[int] = int(heading.group(2))
    elif kind == "Actual":
        epochs = epochs_in_std_log
    else:
        epochs = None
    return {
        "epochs": epochs,
        "duration (s)": duration,
        "energy (kWh)": energy,
        "co2eq (g)": co2eq,
        "equivalents": equivalents,
    }


def get_consumption(
    output_log_data: str, std_log_data: Optional[str] = None
) -> Tuple[Optional[Consumption], Optional[Consumption]]:
    """Actual and predicted consumption from the text of an output log.

    Returns:
        ``(actual, pred)``, each None when the log has no such block, else::

            {
                "epochs": int | None,   # N of "... for N epoch(s):"
                "duration (s)": float,
                "energy (kWh)": float,
                "co2eq (g)": float,
                "equivalents": {unit: amount} | None,  # None without "This is equivalent to:"
            }

        When a log has several blocks of a kind, the last one counts. carbontracker
        writes a bare ``Actual consumption:`` when it makes no prediction; its
        ``"epochs"`` is then the number of complete epochs in ``std_log_data`` (the
        standard log's text) if given, else None (carbontracker says 1).

        ``"epochs"`` is the number the block states. carbontracker's ``stop()`` states one
        epoch fewer than ran when the last epoch had ended (its energy covers them all);
        the standard log's epoch blocks (:func:`parse_logs`) show how many ran.

    Raises:
        LogFormatError: a block's Time, Energy or CO2eq line is missing or unreadable.
    """
    epochs_in_std_log = None
    if std_log_data is not None:
        epochs_in_std_log = len(parse_standard_log(std_log_data).complete_epochs)
    return consumption_blocks(output_log_data, epochs_in_std_log)


def consumption_blocks(
    output_log_data: str, epochs_in_std_log: Optional[int]
) -> Tuple[Optional[Consumption], Optional[Consumption]]:
    text = output_log_data.replace("\r\n", "\n")
    actual: Optional[Consumption] = None
    pred: Optional[Consumption] = None
    for heading in _HEADING_RE.finditer(text):
        block = _block(text, heading, epochs_in_std_log)
        if heading.group(1).lower() == "actual":
            actual = block
        else:
            pred = block
    return actual, pred


def get_early_stop(std_log_data: str) -> bool:
    """Whether a standard log's text says training was interrupted (carbontracker's ``stop()``)."""
    return bool(_EARLY_STOP_RE.search(std_log_data))
