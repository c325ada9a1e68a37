"""The meter owns an interval's time: meter.open_interval / meter.close_interval give one frozen Interval.

Real meters on a fake powercap tree; no attributor anywhere: explicit times are measured in the meter's
own history, fed by its samples (EnergyMeter.sample).
"""

from __future__ import annotations

import dataclasses
import time

import pytest

from otel_joules.meter.history import SnapshotHistory
from otel_joules.meter.interval import Interval
from otel_joules.meter.meter import EnergyMeter, EnergySnapshot


def _meter(powercap) -> EnergyMeter:  # type: ignore[no-untyped-def]
    return EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False)


def test_an_interval_opened_and_closed_now_has_the_energy_in_between(powercap) -> None:
    meter = _meter(powercap)
    opening = meter.open_interval()
    powercap.zones["package_0"].advance_joules(3.0)
    powercap.zones["dram_0"].advance_joules(1.0)
    interval = meter.close_interval(opening)
    assert isinstance(interval, Interval)
    assert not interval.explicit and interval.unavailable_reason is None and interval.clock_step_ns == 0
    assert interval.start is interval.opened and interval.end is interval.closed
    assert interval.total_joules == pytest.approx(4.0)
    assert interval.joules_by_domain["package_0"] == pytest.approx(3.0)
    assert interval.source == "measured"
    assert interval.measured
    with pytest.raises((AttributeError, dataclasses.FrozenInstanceError)):
        interval.total_joules = 0.0  # type: ignore[misc]


def test_a_start_stated_as_now_is_not_explicit(powercap) -> None:
    meter = _meter(powercap)
    opening = meter.open_interval(time.time_ns())
    assert opening.stated_start_ns is None
    assert not meter.close_interval(opening).explicit


def test_stated_times_are_measured_in_the_meters_own_history(powercap) -> None:
    meter = _meter(powercap)
    first = meter.sample()
    powercap.zones["package_0"].advance_joules(10.0)
    time.sleep(0.02)
    meter.sample()
    powercap.zones["package_0"].advance_joules(4.0)
    time.sleep(0.02)
    second = meter.sample()
    powercap.zones["package_0"].advance_joules(3.0)  # after the stated end
    offset_ns = time.time_ns() - time.monotonic_ns()
    opening = meter.open_interval(first.monotonic_ns + offset_ns)
    powercap.zones["package_0"].advance_joules(100.0)  # between open and close: not the stated interval
    interval = meter.close_interval(opening, second.monotonic_ns + offset_ns)
    assert interval.explicit and interval.unavailable_reason is None
    assert interval.closed is not None and interval.closed.joules[0] == pytest.approx(117.0)
    assert interval.total_joules == pytest.approx(14.0, rel=1e-3)  # wall-to-monotonic conversion jitters by µs


def test_a_stated_start_older_than_the_history_has_no_energy_and_says_why(powercap) -> None:
    meter = _meter(powercap)
    meter.sample()
    opening = meter.open_interval(time.time_ns() - 3600 * 10**9)
    powercap.zones["package_0"].advance_joules(5.0)
    interval = meter.close_interval(opening)
    assert interval.start is None and interval.end is None and interval.measure() is None
    assert "history" in interval.unavailable_reason and "300 s" in interval.unavailable_reason  # type: ignore[operator]
    assert not interval.measured and interval.total_joules is None


def test_an_end_before_the_start_or_in_the_future_has_no_energy(powercap) -> None:
    meter = _meter(powercap)
    now_ns = time.time_ns()
    before = meter.close_interval(meter.open_interval(now_ns - 10**9), now_ns - 2 * 10**9)
    assert before.unavailable_reason == "end_time is before start_time"
    future = meter.close_interval(meter.open_interval(), time.time_ns() + 60 * 10**9)
    assert "future" in future.unavailable_reason  # type: ignore[operator]


def test_the_meters_own_sampler_keeps_a_snapshot_at_most_every_gap(powercap) -> None:
    meter = _meter(powercap)
    for _ in range(5):
        meter.sample()
    assert len(meter.history) == 5
    meter.sample(min_gap_s=60.0)
    assert len(meter.history) == 5


def test_the_history_reaches_back_history_s_and_interpolates_within_it() -> None:
    history = SnapshotHistory(history_s=0.5)
    ms = 1_000_000
    for k in range(11):  # 0, 100, ..., 1000 ms; 1 J every 100 ms
        history.record(EnergySnapshot(k * 100 * ms, (float(k),)))
    # The latest snapshot at or before 1000 - 500 ms is kept, so the history reaches back 500 ms and no further.
    assert history.oldest_ns == 500 * ms and len(history) == 6
    latest = EnergySnapshot(1000 * ms, (10.0,))
    assert history.snapshot_at(450 * ms, latest) is None
    assert history.snapshot_at(550 * ms, latest).joules == (5.5,)  # type: ignore[union-attr]
    assert history.snapshot_at(1000 * ms + ms // 2, latest).joules == (10.0,)  # type: ignore[union-attr]
    assert history.snapshot_at(1010 * ms, latest) is None
