"""benchmarks/idle_cost.py reads what it claims: a process's context switches and CPU time, per task, from /proc.

Its figures are the benchmark's to judge; this checks the reading, on this process.
"""

from __future__ import annotations

import os
import threading
import time

from benchmarks import idle_cost


def test_costs_count_a_threads_wakeups_and_cpu_time_between_two_readings() -> None:
    wakeups = 50
    slept, done = threading.Event(), threading.Event()

    def sleeper() -> None:
        for _ in range(wakeups):
            time.sleep(0.001)  # one voluntary context switch each
        slept.set()
        done.wait()  # alive until read: an ended task is gone from /proc

    thread = threading.Thread(target=sleeper, name="sleeper")
    before = idle_cost._read(os.getpid())
    start = time.monotonic()
    thread.start()
    slept.wait()
    end = time.thread_time() + 0.05
    while time.thread_time() < end:
        pass  # 50 ms of CPU time on this thread
    after = idle_cost._read(os.getpid())
    window_s = time.monotonic() - start
    done.set()
    thread.join()

    costs = idle_cost._costs(before, after, window_s, {thread.native_id: "sleeper"})
    assert costs["wakeups_per_s"] * window_s >= wakeups
    assert costs["wakeups_per_s_by_thread"]["sleeper"] * window_s >= wakeups  # a task born in the window counts from 0
    assert costs["cpu_percent_schedstat"] / 100 * window_s >= 0.04
    assert costs["cpu_percent_stat"] / 100 * window_s >= 0.03  # in 10 ms ticks
