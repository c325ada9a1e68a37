"""carbontracker's console and log text: numbers, durations, power, the components line and consumption blocks.

The functions format exactly as carbontracker 2.4.7 does (its own parser reads the result),
with the choices documented in :mod:`otel_joules.training.logwrite` (no exponent notation,
a component's power summed over its devices unless a list is given).
"""

from __future__ import annotations

import math
import numbers
import re
from decimal import Decimal
from typing import Iterable, Mapping, Sequence, Union

from otel_joules.carbon.units import JOULES_PER_KWH
from otel_joules.training.logformat import DEFAULT_DECIMAL_PRECISION, MESSAGE_PREFIX, InvalidLogValueError
from otel_joules.training.results import ConsumptionKind

# A component name is written as one word ("GPU with device(s) ..." / "for gpu: ..."),
# so that the parser can find where one component's device list ends.
_COMPONENT_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")

#: Power of one component in one epoch: the total in watts, a per-device list of watts,
#: or None when nothing was measured (written as ``None``, as carbontracker does).
PowerValue = Union[float, Sequence[Union[float, None]], None]


# --------------------------------------------------------------------------- numbers


def _finite(value: object, what: str, *, allow_negative: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidLogValueError(f"{what} must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise InvalidLogValueError(f"{what} must be finite, got {number!r}")
    if number < 0 and not allow_negative:
        raise InvalidLogValueError(f"{what} must not be negative, got {number!r}")
    return number


def format_number(value: float) -> str:
    """Shortest decimal that reads back as the same float, never in exponent notation.

    ``1.2e-05`` -> ``"0.000012"``, ``150`` -> ``"150.0"``, ``1e20`` ->
    ``"100000000000000000000.0"``. carbontracker's parser only reads digits and dots,
    so the exponent notation Python's ``repr`` uses for small and large floats would
    be misread.
    """
    number = _finite(value, "number", allow_negative=True)
    text = repr(number)
    if "e" in text or "E" in text:
        # Decimal(repr(x)) is exactly the shortest round-trip decimal; "f" spells it out.
        text = format(Decimal(text), "f")
        if "." not in text:
            text += ".0"
    return text


def format_duration(seconds: float, *, centiseconds: bool = False) -> str:
    """``h:mm:ss`` (or ``h:mm:ss.ff`` with ``centiseconds``) as carbontracker writes durations.

    Whole seconds round half to even, as carbontracker's ``convert_to_timestring`` does;
    hours are not wrapped into days (``25:00:00``).
    """
    total = _finite(seconds, "duration_seconds")
    if centiseconds:
        # Round the total once ("59.996" -> "60.00") and split the digits, so that a
        # rounded-up minute carries into the minutes instead of printing ":60.00".
        whole_text, fraction = f"{total:.2f}".split(".")
        whole = int(whole_text)
        suffix = f".{fraction}"
    else:
        whole = round(total)
        suffix = ""
    minutes, secs = divmod(whole, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:d}:{minutes:02d}:{secs:02d}{suffix}"


def _precision(decimal_precision: int) -> int:
    if isinstance(decimal_precision, bool) or not isinstance(decimal_precision, int) or decimal_precision < 0:
        raise InvalidLogValueError(
            f"decimal_precision must be a non-negative integer (carbontracker's default is "
            f"{DEFAULT_DECIMAL_PRECISION}), got {decimal_precision!r}"
        )
    return decimal_precision


def _energy_kwh(energy_kwh: float | None, energy_joules: float | None) -> float:
    if (energy_kwh is None) == (energy_joules is None):
        raise InvalidLogValueError("give the energy exactly once: energy_kwh=... or energy_joules=...")
    if energy_kwh is not None:
        return _finite(energy_kwh, "energy_kwh")
    return _finite(energy_joules, "energy_joules") / JOULES_PER_KWH


def _one_line(text: str, what: str) -> str:
    if not isinstance(text, str):
        raise InvalidLogValueError(f"{what} must be a string, got {text!r}")
    # A line break would start what the parser takes for a new log line.
    return " ".join(text.splitlines()).strip()


# ------------------------------------------------------------------ message formatting


def format_components_line(components: Mapping[str, Sequence[str]]) -> str:
    """``The following components were found: GPU with device(s) A, B. CPU with device(s) cpu:0.``

    ``components`` maps a component name (``gpu``, ``cpu``) to its device names, in the
    order to write them. A comma inside a device name would split it in two when read,
    so it is written as ``;``; line breaks become spaces.
    """
    if not components:
        raise InvalidLogValueError("components must name at least one component (e.g. {'cpu': ['cpu:0']})")
    parts = ["The following components were found:"]
    for name, devices in components.items():
        if not isinstance(name, str) or not _COMPONENT_NAME_RE.match(name):
            raise InvalidLogValueError(
                f"component name {name!r} must be one word of letters, digits, '_' or '-' (e.g. 'gpu', 'cpu')"
            )
        if isinstance(devices, str):
            raise InvalidLogValueError(f"devices of {name!r} must be a list of names, not the string {devices!r}")
        names = [_one_line(device, f"device name of {name!r}").replace(",", ";") for device in devices]
        parts.append(f"{name.upper()} with device(s) {', '.join(names)}.")
    return " ".join(parts)


def format_power(power_watts: PowerValue) -> str:
    """The value of an ``Average power usage (W) for <component>:`` line.

    A number (W) is written plainly (``400.0``), a per-device list as ``[300.0 100.0]``
    (the layout of a numpy array, which carbontracker's parser splits on spaces), and
    None -- or NaN -- as ``None``: nothing was measured.
    """
    if power_watts is None:
        return "None"
    if isinstance(power_watts, numbers.Real) and not isinstance(power_watts, bool):
        if math.isnan(float(power_watts)):
            return "None"
        return format_number(_finite(power_watts, "power_watts"))
    if isinstance(power_watts, (str, bytes)) or not isinstance(power_watts, Iterable):
        raise InvalidLogValueError(f"power_watts must be a number, a list of numbers or None, got {power_watts!r}")
    items: list[str] = []
    for item in power_watts:
        if item is None or (isinstance(item, numbers.Real) and math.isnan(float(item))):
            items.append("nan")
        else:
            items.append(format_number(_finite(item, "power_watts of a device")))
    if not items:
        raise InvalidLogValueError("a per-device power list must not be empty; pass None when nothing was measured")
    return "[" + " ".join(items) + "]"


def consumption_heading(kind: ConsumptionKind | str, epochs: int | None) -> str:
    """``Predicted consumption for N epoch(s):``, ``Actual consumption for N epoch(s):`` or ``Actual consumption:``.

    carbontracker writes the bare ``Actual consumption:`` when it makes no prediction
    (``epochs_before_pred=0``); pass ``epochs=None`` for that.
    """
    try:
        kind = ConsumptionKind(kind)
    except ValueError:
        raise InvalidLogValueError(f"kind must be 'actual' or 'predicted', got {kind!r}") from None
    if epochs is not None and (isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 0):
        raise InvalidLogValueError(f"epochs must be a non-negative integer or None, got {epochs!r}")
    if kind is ConsumptionKind.PREDICTED:
        if epochs is None:
            raise InvalidLogValueError("a predicted consumption is for a number of epochs; pass epochs=N")
        return f"Predicted consumption for {epochs} epoch(s):"
    if epochs is None:
        return "Actual consumption:"
    return f"Actual consumption for {epochs} epoch(s):"


def format_consumption(
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
    """The consumption block exactly as carbontracker prints it on the console.

    Example (``decimal_precision=12``)::

        CarbonTracker: 
        Predicted consumption for 4 epoch(s):
        \tTime:\t0:00:05
        \tEnergy:\t0.000579398850 kWh
        \tCO2eq:\t0.257832488281 g
        \tThis is equivalent to:
        \t0.002414161875 km travelled by car

    The output log holds the same text after its ``YYYY-mm-dd HH:MM:SS - `` prefix.
    Give the energy once, in kWh or in joules. ``equivalents`` maps a unit (``km travelled
    by car``) to an amount; when empty or None the "This is equivalent to" part is left out
    (carbontracker's ``interpretable=False``). Time is rounded to whole seconds and the
    other numbers to ``decimal_precision`` decimals, as carbontracker does.
    """
    precision = _precision(decimal_precision)
    heading = consumption_heading(kind, epochs)
    energy = _energy_kwh(energy_kwh, energy_joules)
    co2eq = _finite(co2eq_grams, "co2eq_grams")
    text = (
        f"{MESSAGE_PREFIX}\n{heading}\n"
        f"\tTime:\t{format_duration(duration_seconds)}\n"
        f"\tEnergy:\t{energy:.{precision}f} kWh\n"
        f"\tCO2eq:\t{co2eq:.{precision}f} g"
    )
    if equivalents:
        text += "\n\tThis is equivalent to:"
        for unit, amount in equivalents.items():
            unit_text = _one_line(unit, "equivalent unit")
            if not unit_text:
                raise InvalidLogValueError("an equivalent's unit must not be empty (e.g. 'km travelled by car')")
            value = _finite(amount, f"equivalent {unit_text!r}")
            text += f"\n\t{value:.{precision}f} {unit_text}"
    return text


def _format_interval(seconds: float) -> str:
    value = _finite(seconds, "update_interval_seconds")
    # carbontracker prints its integer 900 as "900", not "900.0".
    return str(int(value)) if value.is_integer() else format_number(value)
