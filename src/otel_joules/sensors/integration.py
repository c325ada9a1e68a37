"""Energy from a power sensor: the one integrator behind every :attr:`Method.POWER_INTEGRATION` channel.

A power channel (NVML's power reading on a GPU without an energy counter, a hwmon ``powerN_input`` or
``powerN_average``) reads its sensor at every ``read_uj`` and hands the reading here; the trapezoid rule
turns the readings into a cumulative count of microjoules that the meter treats like any counter. The
meter's sampler reads every such channel at least every :data:`POWER_SAMPLE_PERIOD_S`, the channels'
:attr:`~otel_joules.sensors.base.Channel.max_read_interval_s`, so the integration step stays short.
"""

from __future__ import annotations

import threading

#: Longest step between two power readings of an integrated channel, in seconds.
POWER_SAMPLE_PERIOD_S = 0.1


class PowerIntegral:
    """Cumulative energy from successive power readings, by the trapezoid rule.

    The first reading starts the integral at 0; each later one adds the mean of the last two
    readings times the time between them. A reading at the same instant as the previous one (or
    earlier: a clock that did not move) adds nothing but becomes the latest power.

    :meth:`energy_uj_at` reads the integral through a later instant, the latest power held since
    its reading, and keeps that part: the next reading integrates on from there. So the integral
    never goes back, and a span that ends between two readings of the sensor gets the energy up to
    its end instead of up to the last reading (up to half a sensor period late at either end).
    A reader thread adds readings while snapshots read through now: one lock keeps them whole.
    """

    __slots__ = ("_lock", "_last_time_s", "_last_power_watts", "_energy_uj")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_time_s: float | None = None
        self._last_power_watts = 0.0
        self._energy_uj = 0.0

    @property
    def last_power_watts(self) -> float | None:
        """The latest power reading, or None before the first."""
        return None if self._last_time_s is None else self._last_power_watts

    def add(self, power_watts: float, now_s: float) -> int:
        """Take the reading ``power_watts`` made at ``now_s`` (monotonic seconds); return the microjoules so far."""
        with self._lock:
            if self._last_time_s is not None and now_s > self._last_time_s:
                # W x s = J; x 1e6 = uJ.
                self._energy_uj += (self._last_power_watts + power_watts) / 2 * (now_s - self._last_time_s) * 1e6
            if self._last_time_s is None or now_s >= self._last_time_s:
                self._last_time_s = now_s
            self._last_power_watts = power_watts
            return int(self._energy_uj)

    def energy_uj_at(self, now_s: float) -> int | None:
        """The microjoules through ``now_s``, the latest power held since its reading (None before the first)."""
        with self._lock:
            if self._last_time_s is None:
                return None
            if now_s > self._last_time_s:
                self._energy_uj += self._last_power_watts * (now_s - self._last_time_s) * 1e6
                self._last_time_s = now_s
            return int(self._energy_uj)
