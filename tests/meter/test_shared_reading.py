"""Channels whose counters are values of one shared reading (``Channel.shared_reading``, as the agent's zones are).

A snapshot takes the reading once for all of them, on the compiled path and on its pure-Python reference alike.
A value the reading lacks or holds out of range is read again through the channel's ``read_uj``, which says what
is wrong; a reading of None is the source away (no value, not a failure). Each test runs on both paths (the
folder's ``span_path`` fixture).
"""

from __future__ import annotations

from typing import Any

import pytest

from otel_joules.errors import SensorReadError
from otel_joules.meter import EnergyMeter
from otel_joules.semconv import KIND_CPU
from otel_joules.sensors.base import Channel, Domain

RANGE_UJ = 10_000_000


class _Reading:
    """The shared reading: raw values the test sets (a list of them is handed out one per read, the last one
    standing), and how many times it was read."""

    def __init__(self, *values: Any) -> None:
        self.queue = list(values)
        self.reads = 0

    def current(self) -> Any:
        self.reads += 1
        return self.queue.pop(0) if len(self.queue) > 1 else self.queue[0]


class _Zone(Channel):
    """One value of the shared reading; its read_uj says why a value is unusable, as the agent's channel does."""

    def __init__(self, name: str, reading: _Reading, index: int) -> None:
        super().__init__(Domain(name, KIND_CPU, "package", "test"))
        self._reading = reading
        self._index = index

    @property
    def wrap_uj(self) -> int:
        return RANGE_UJ

    @property
    def may_be_away(self) -> bool:
        return True

    @property
    def shared_reading(self) -> tuple[_Reading, int]:
        return self._reading, self._index

    def read_uj(self) -> int | None:  # type: ignore[override]
        values = self._reading.current()
        if values is None:
            return None
        value = values[self._index] if self._index < len(values) else None
        if value is None or not 0 <= value <= RANGE_UJ:
            raise SensorReadError(f"no usable value for {self.domain.id} ({value!r})")
        return value


def _meter(reading: _Reading, zones: int = 3) -> EnergyMeter:
    """A meter of ``zones`` channels sharing ``reading``, on the span path the environment selects."""
    return EnergyMeter(channels=[_Zone(f"zone_{i}", reading, i) for i in range(zones)], sample=False)


def test_a_snapshot_reads_the_shared_reading_once_for_all_its_channels(span_path: str) -> None:
    reading = _Reading((1_000, 2_000, 3_000))
    with _meter(reading) as meter:
        assert meter.fast_path is (span_path == "compiled")
        reading.queue = [(1_500, 2_250, 3_000)]
        before = reading.reads
        snapshot = meter.snapshot()
        assert reading.reads - before == 1  # not one read per channel
        assert snapshot.joules == (500 / 1e6, 250 / 1e6, 0.0)
        assert snapshot.missing == ()


def test_a_value_the_reading_lacks_or_holds_out_of_range_is_read_through_read_uj_and_fails_there(
    caplog: pytest.LogCaptureFixture
) -> None:
    reading = _Reading((1_000, 2_000, 3_000))
    with _meter(reading) as meter:
        reading.queue = [(1_100, None, RANGE_UJ + 1)]
        snapshot = meter.snapshot()
        assert snapshot.joules == (100 / 1e6, None, None)
        assert snapshot.missing == (1, 2)  # failed reads, retried
        assert "zone_1" in caplog.text and "None" in caplog.text and str(RANGE_UJ + 1) in caplog.text


def test_a_reading_of_none_is_the_source_away_not_a_failure() -> None:
    reading = _Reading((1_000, 2_000, 3_000))
    with _meter(reading) as meter:
        reading.queue = [None]
        snapshot = meter.snapshot()
        assert snapshot.joules == (None, None, None)
        assert snapshot.missing == ()
        reading.queue = [(1_200, 2_000, 3_000)]
        assert meter.snapshot().joules == (200 / 1e6, 0.0, 0.0)  # measured on: the counters are cumulative


def test_a_source_gone_when_an_odd_value_is_read_again_is_away() -> None:
    # The snapshot's reading holds a value out of range; by the time read_uj reads again, the source is gone.
    reading = _Reading((1_000,))
    with _meter(reading, zones=1) as meter:
        reading.queue = [(RANGE_UJ + 5,), None]
        snapshot = meter.snapshot()
        assert snapshot.joules == (None,)
        assert snapshot.missing == ()
