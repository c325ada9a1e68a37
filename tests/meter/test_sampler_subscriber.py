"""A sampler whose subscriber's owner was collected without unsubscribing goes back to the meter's own sampling.

Kept, the dead subscriber made the thread tick again at once, forever: a core at 100% for the rest of the process,
and every span thread starved of the GIL (the full suite's eight-thread span test crawled for minutes beside one).
"""

from __future__ import annotations

import gc
import time

from otel_joules import EnergyMeter


class _Subscriber:
    """Ticks for the meter, as the attributor's price history does."""

    def __init__(self) -> None:
        self.ticks = 0

    def tick(self) -> float:
        self.ticks += 1
        return 0.01


def test_a_collected_subscriber_ends_its_ticks_and_the_thread_goes_back_to_its_own_pace(powercap) -> None:
    with EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False) as meter:
        subscriber = _Subscriber()
        meter.sampler.subscribe(meter, subscriber.tick, 0.0)
        deadline = time.monotonic() + 5
        while subscriber.ticks < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert subscriber.ticks >= 3
        thread = meter.sampler.thread
        assert thread is not None
        del subscriber
        gc.collect()
        # The meter samples nothing on its own (sample=False): with no subscriber the thread ends.
        thread.join(2)
        assert not thread.is_alive() and meter.sampler.thread is None
