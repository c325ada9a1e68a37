"""Energy and carbon unit conversions: joules, kWh, PUE and grams of CO2eq.

Every function validates its inputs and raises :class:`~otel_joules.errors.ConfigurationError`
with a message that says what to pass instead, because these numbers usually come
from user settings (PUE, an explicit intensity) rather than from measurements.
"""

from __future__ import annotations

import math
from typing import Protocol

from otel_joules.errors import ConfigurationError

#: Joules in one kilowatt-hour (1000 W x 3600 s), exact by definition.
JOULES_PER_KWH = 3.6e6


def _finite_non_negative(name: str, value: float) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigurationError(f"{name}={value!r} is not a number; pass a finite number >= 0") from None
    if not math.isfinite(number) or number < 0:
        raise ConfigurationError(f"{name}={value!r} must be a finite number >= 0")
    return number


def joules_to_kwh(joules: float) -> float:
    """Convert joules to kilowatt-hours (divide by 3.6e6)."""
    return _finite_non_negative("joules", joules) / JOULES_PER_KWH


def kwh_to_joules(kwh: float) -> float:
    """Convert kilowatt-hours to joules (multiply by 3.6e6)."""
    return _finite_non_negative("kwh", kwh) * JOULES_PER_KWH


def format_co2eq_grams(grams: float) -> str:
    """Grams of CO2eq as every command prints them: 4 significant digits, never an exponent (``0.0008624``, ``12.35``,
    ``123457``), so that ``otel-joules run``'s summary and ``otel-joules report`` on its export print the same digits."""
    if not math.isfinite(grams):
        return str(grams)
    if grams == 0:
        return "0"
    decimals = max(0, 3 - math.floor(math.log10(abs(grams))))
    text = f"{grams:.{decimals}f}"
    # Rounding up can add a digit (0.00099996 -> 0.0010000): one decimal fewer keeps four.
    if decimals and len(text.replace("-", "").replace(".", "").lstrip("0")) > 4:
        text = f"{grams:.{decimals - 1}f}"
    return text


def validate_pue(pue: float) -> float:
    """Return ``pue`` as a float, or raise ConfigurationError unless it is finite and >= 1.0.

    PUE (power usage effectiveness) is facility energy divided by IT energy, so by
    definition it cannot be below 1.0; a value below 1 is almost always a
    misunderstanding (e.g. an overhead fraction such as 0.58 instead of 1.58).
    """
    try:
        number = float(pue)
    except (TypeError, ValueError):
        raise ConfigurationError(f"pue={pue!r} is not a number; pass a number >= 1.0 (1.0 = no overhead)") from None
    if not math.isfinite(number) or number < 1.0:
        hint = f" (did you mean {1.0 + number:g}?)" if math.isfinite(number) and 0 < number < 1 else ""
        raise ConfigurationError(
            f"pue={pue!r} must be a finite number >= 1.0: facility energy / IT energy, 1.0 = no overhead{hint}"
        )
    return number


class HasIntensity(Protocol):
    """Anything that carries a carbon intensity in gCO2eq/kWh (an intensity reading, a run)."""

    gco2eq_per_kwh: float


def co2eq_grams(joules: float, gco2eq_per_kwh: "float | HasIntensity", pue: float = 1.0) -> float:
    """Grams of CO2-equivalent for ``joules`` of IT energy.

    ``grams = joules / 3.6e6 * pue * gco2eq_per_kwh``. ``gco2eq_per_kwh`` is a number
    or a :class:`~otel_joules.carbon.CarbonIntensity`; ``pue`` scales the IT energy
    up to the facility energy and must be >= 1.0.
    """
    kwh = joules_to_kwh(joules)
    raw = getattr(gco2eq_per_kwh, "gco2eq_per_kwh", gco2eq_per_kwh)
    intensity = _finite_non_negative("gco2eq_per_kwh", raw)
    return kwh * validate_pue(pue) * intensity


def format_duration(seconds: float | None) -> str:
    """A duration as every table of ``otel-joules run`` and ``otel-joules report`` prints it: ``H:MM:SS.mmm``
    (``0:00:00.526``, ``0:00:02.000``, ``1:02:03.250``), one form for every row so they compare at a glance;
    ``-`` for an unknown or non-finite one."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    milliseconds = round(max(0.0, seconds) * 1000)
    whole, millis = divmod(milliseconds, 1000)
    minutes, secs = divmod(whole, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:d}:{minutes:02d}:{secs:02d}.{millis:03d}"
