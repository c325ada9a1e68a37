"""Each channel's read policy, in numbers: how long a span waits for a device, how failures are retried
and dropped, and how a counter's wrap, restart or jump is told apart.

The meter's snapshot applies them through its per-channel state (``otel_joules.meter._channels``): a
counter lower than before either wrapped or restarted, told apart by the zone's power bound, and a move
that bound rules out either way is a jump, not energy; a failing read is retried with back-off before the
domain is dropped. Channels that may block (NVML) are read in their own thread, which swaps each reading
in whole, so a span takes the newest without waiting on that thread, and a stalled device makes a span's
value stale, never the span slow.
"""

from __future__ import annotations

#: Longest a snapshot waits for a device read that may stall (NVML): past this, the span
#: gets the domain's last known value, flagged stale, and the read finishes off the span path.
#: NVML's counter updates about every 100 ms, so a longer wait gains nothing; a shorter one
#: flagged healthy reads stale on a loaded machine (the reader thread waits for the GIL and a
#: core). A stalled device costs this once per stall: later snapshots go on at once.
DEVICE_READ_DEADLINE_S = 0.1
#: A device read (NVML) that started less than this long ago is reused by a snapshot instead of
#: polling the device's thread: back-to-back spans then share one read per millisecond. A cumulative
#: counter's read is reused longer, until the thread's next read is due (within 3/4 of DEVICE_IDLE_S):
#: no newer value exists before it.
DEVICE_FRESH_S = 0.001
#: What a device's counter is taken to update every until its readings tell (NVML documents
#: about 100 ms) ...
DEVICE_PERIOD_GUESS_S = 0.1
#: ... and the longest period it is taken to have (a counter that stops moving, an idle GPU at
#: 0 W, must not slow the reads of a span that later needs them to a crawl).
DEVICE_PERIOD_MAX_S = 1.0
#: While snapshots keep asking, the device's thread reads again every half of the counter's update
#: period (twice its rate, as Zeus reads NVML: a read more often returns the value already held,
#: and on real hardware one costs ~0.4 ms), but never more often than this ...
DEVICE_REREAD_MIN_S = 0.001
#: ... learning the period from the gaps between the readings at which the counter moved: the median
#: of this many (a reading's phase against the counter's steps makes single gaps jitter by a read) ...
DEVICE_PERIOD_GAPS = 3
#: ... unless this many gaps in a row were each a single read (within half a read's slack): then the
#: counter moves at least once per read and may move faster, so the period is taken to be one read
#: (the reads go twice as often) and learned afresh from there.
DEVICE_PERIOD_FAST_GAPS = 2
#: The thread reads on until no snapshot has asked for this long: then it sleeps until the next one
#: asks (which waits for its read, at most DEVICE_READ_DEADLINE_S), so an idle program pays no reads.
DEVICE_IDLE_S = 0.1
#: A failing read is retried after this long, doubling after every further failure ...
READ_RETRY_FIRST_DELAY_S = 0.05
#: ... and the domain is dropped for good after this many consecutive failures (~6 s).
READ_FAILURES_BEFORE_DROP = 8
#: A wrap must fit the zone's power bound x the time between the reads, within this factor
#: (RAPL's PL2 bursts exceed the long-term limit) ...
RESET_POWER_TOLERANCE = 2.0
#: ... plus this much time at full power (counter update period and read jitter). The same bound
#: judges a forward move: one larger than it is a jump (a counter fault), not energy.
RESET_SLACK_S = 0.01
def read_retry_window_s() -> float:
    """Seconds from a counter's first failed read to the last retry before it is dropped (~6.4 s)."""
    return READ_RETRY_FIRST_DELAY_S * (2 ** (READ_FAILURES_BEFORE_DROP - 1) - 1)
