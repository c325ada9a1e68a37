"""The one power integrator behind every power_integration channel (NVML's power reading, hwmon power files)."""

from __future__ import annotations

import pytest

from otel_joules.sensors.integration import PowerIntegral


def test_trapezoid_rule_is_exact_for_power_that_changes_linearly_between_readings() -> None:
    integral = PowerIntegral()
    assert integral.last_power_watts is None
    assert integral.add(100.0, 10.0) == 0  # the first reading starts the count
    assert integral.add(200.0, 11.0) == 150_000_000  # (100 + 200) / 2 W x 1 s
    assert integral.add(200.0, 11.5) == 250_000_000
    assert integral.last_power_watts == 200.0


def test_a_clock_that_does_not_move_adds_nothing_and_never_subtracts() -> None:
    integral = PowerIntegral()
    integral.add(50.0, 5.0)
    assert integral.add(80.0, 5.0) == 0
    assert integral.add(80.0, 4.0) == 0  # earlier than the last reading: nothing, and no negative energy
    # The next step starts from the latest instant (5.0) and the latest power (80 W).
    assert integral.add(80.0, 6.0) == pytest.approx(80_000_000, abs=1)
