"""The meter's history: its recent sampled snapshots, and its joules at a past instant.

The samplers' snapshots (:meth:`EnergyMeter.sample <otel_joules.meter.meter.EnergyMeter.sample>`) are
kept for :data:`HISTORY_S` seconds, so an interval with explicit times (a span started or ended with a
stated time) is measured between the snapshots interpolated at its ends
(:meth:`SnapshotHistory.snapshot_at`), and an instant older than the history is known to be so.
"""

from __future__ import annotations

import bisect
import threading

from otel_joules.meter.values import EnergySnapshot

_new_tuple = tuple.__new__

#: How far back the history reaches (spans with explicit times older than this get no energy).
HISTORY_S = 300.0
#: The meter's own sampler adds a snapshot to the history at most this often (the attributor's samples,
#: every 0.1 s, are all kept): what the history's interpolation needs, and no more memory.
HISTORY_GAP_S = 0.1
#: At most this many snapshots per second of history are kept, whoever samples (a bound on memory).
_MAX_SAMPLES_PER_S = 20
#: Wall-to-monotonic conversion is good to microseconds: an instant this close outside an end is that end.
_EDGE_TOLERANCE_NS = 1_000_000


class SnapshotHistory:
    """The meter's snapshots of the last :attr:`history_s` seconds, oldest first, and interpolation between them.

    Written by the samplers, read by intervals with explicit times; both under one lock, held for a
    list append or a bisection (never across a counter read).

    Args:
        history_s: Seconds of history to keep.
    """

    __slots__ = ("history_s", "_history_ns", "_max_samples", "_times", "_snapshots", "_lock")

    def __init__(self, history_s: float = HISTORY_S) -> None:
        self.history_s = history_s
        self._history_ns = round(history_s * 1e9)
        self._max_samples = max(2, int(history_s * _MAX_SAMPLES_PER_S) + 1)
        self._times: list[int] = []
        self._snapshots: list[EnergySnapshot] = []
        self._lock = threading.Lock()

    def keep_at_least(self, history_s: float) -> None:
        """Keep at least ``history_s`` seconds from now on (an attributor keeping a longer history of its own)."""
        with self._lock:
            if history_s > self.history_s:
                self.history_s = history_s
                self._history_ns = round(history_s * 1e9)
                self._max_samples = max(2, int(history_s * _MAX_SAMPLES_PER_S) + 1)

    def record(self, snapshot: EnergySnapshot, min_gap_ns: int = 0) -> None:
        """Add a sampler's snapshot; left out when it is not later than the latest kept by ``min_gap_ns``
        (a snapshot older than the latest, from a sampler that lost the race for the lock, adds nothing)."""
        now_ns = snapshot[0]
        with self._lock:
            times = self._times
            if times and now_ns - times[-1] < max(min_gap_ns, 1):
                return
            times.append(now_ns)
            self._snapshots.append(snapshot)
            # Keep the latest snapshot at or before now - history_s, so the history reaches back that far.
            drop = max(0, len(times) - self._max_samples)
            horizon_ns = now_ns - self._history_ns
            while drop + 2 < len(times) and times[drop + 1] <= horizon_ns:
                drop += 1
            if drop:
                del times[:drop]
                del self._snapshots[:drop]

    @property
    def oldest_ns(self) -> int | None:
        """Monotonic time of the oldest snapshot kept, None before the first."""
        with self._lock:
            return self._times[0] if self._times else None

    def __len__(self) -> int:
        return len(self._times)

    def after_fork_in_child(self) -> None:
        """A new lock in a forked child (the parent's may have been held by a thread not copied); the snapshots
        describe the host, so the child keeps them."""
        self._lock = threading.Lock()

    def snapshot_at(self, monotonic_ns: int, latest: EnergySnapshot) -> EnergySnapshot | None:
        """The meter's cumulative joules at a past instant, interpolated between the snapshots kept.

        ``latest`` (a snapshot taken now) extends the history to the present. None when the
        instant is older than the history or later than ``latest``.
        """
        with self._lock:
            times = list(self._times)
            snapshots = list(self._snapshots)
        if not times or times[-1] < latest[0]:
            times.append(latest[0])
            snapshots.append(latest)
        if times[0] - _EDGE_TOLERANCE_NS <= monotonic_ns < times[0]:
            monotonic_ns = times[0]
        elif times[-1] < monotonic_ns <= times[-1] + _EDGE_TOLERANCE_NS:
            monotonic_ns = times[-1]
        if monotonic_ns < times[0] or monotonic_ns > times[-1]:
            return None
        k = bisect.bisect_left(times, monotonic_ns)
        t1, b = times[k], snapshots[k]
        if t1 == monotonic_ns or k == 0:
            return _new_tuple(EnergySnapshot, (monotonic_ns, b.joules, (), b.missing, b.jumps, b.outage))
        t0, a = times[k - 1], snapshots[k - 1]
        f = (monotonic_ns - t0) / (t1 - t0)
        joules = tuple(None if x is None or y is None else x + (y - x) * f for x, y in zip(a.joules, b.joules))
        # A domain missing at either snapshot is missing here too; the jumps counted are the later
        # snapshot's, so a jump inside the period counts as before the instant.
        missing = tuple(sorted({*a.missing, *b.missing})) if a.missing or b.missing else ()
        return _new_tuple(EnergySnapshot, (monotonic_ns, joules, (), missing, b.jumps, b.outage))
