"""How long a device reading stands for the snapshots before they poll the device's reader thread again.

A cumulative counter's reading stands until the thread's next read is due: no newer value exists before then,
so polling meanwhile hands over nothing and costs every span. A reading integrated through now stands only
``DEVICE_FRESH_S``: the integral grows between reads.
"""

from __future__ import annotations

import itertools

import pytest

from otel_joules.meter._channels import _DeviceReader
from otel_joules.meter.channels import DEVICE_FRESH_S, DEVICE_IDLE_S


@pytest.mark.parametrize(
    "period_s, until_next_read, window_s",
    [
        (0.1, True, 0.05),  # half the period: the thread's next read
        (1.0, True, DEVICE_IDLE_S * 3 / 4),  # within the idle window: the polls that keep the thread reading still come
        (0.1, False, DEVICE_FRESH_S),  # an integral
        (0.001, True, DEVICE_FRESH_S),  # reads every millisecond: never less than DEVICE_FRESH_S
    ],
)
def test_a_reading_stands_until_the_next_read_is_due_or_fresh_s_for_an_integral(
    period_s: float, until_next_read: bool, window_s: float
) -> None:
    counter = itertools.count(1_000_000, 1000)
    reader = _DeviceReader(
        lambda: next(counter), "gpu_0", period_s, learn_period=False, fresh_until_next_read=until_next_read
    )
    try:
        values, fresh = reader.poll()  # the first poll starts the thread and waits for its read
        assert fresh and values == [1_000_000]
        started_ns = reader._published[1]  # noqa: SLF001 - the read's start, which the window counts from
        assert reader.fresh_until_ns - started_ns == round(window_s * 1e9)
    finally:
        reader.close()


def test_a_failed_read_stands_for_nothing() -> None:
    def fails() -> int:
        raise OSError("the device is gone")

    reader = _DeviceReader(fails, "gpu_0", 0.1, learn_period=False, fresh_until_next_read=True)
    try:
        values, _ = reader.poll()
        assert len(values) == 1 and isinstance(values[0], OSError)
        assert reader.fresh_until_ns == 0
    finally:
        reader.close()
