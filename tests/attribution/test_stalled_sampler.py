"""The span path waits on no background thread: a sampler stuck in its reads holds no span up.

The written host is tests/attribution/test_model.py's (powercap and procfs written by the test, no
sampler thread of its own). The stall is at the hardware boundary: the GPU shares' NVML read blocks,
as a hung driver call does, in the middle of a sample, and the history's lock is held beside it. A
span that opened before the latest sample (its CPU time priced over the history) and its child that
opens now must both end, with their shares, while the sample stays stuck.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from otel_joules import EnergyMeter
from otel_joules.attribution import Attributor
from tests.fakes.powercap import make_powercap
from tests.fakes.procfs import FakeProcfs

PID = os.getpid()


class StallingNvml:
    """GPU shares whose read blocks while :attr:`stall` is set (a hung NVML call), until :attr:`release`."""

    def __init__(self) -> None:
        self.stall = threading.Event()
        self.release = threading.Event()
        self.stuck = threading.Event()

    def fractions(self) -> list[float]:
        if self.stall.is_set():
            self.stuck.set()
            self.release.wait(30)
        return []


def test_spans_end_with_their_shares_while_the_sampler_is_stuck_in_a_read(tmp_path: Path) -> None:
    powercap = make_powercap(tmp_path / "sys", "one_socket")
    proc = FakeProcfs(tmp_path / "proc")
    proc.add_process(PID, 0.0)
    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, procfs_root=proc.procfs_root, gpus=[], sample=False)
    nvml = StallingNvml()
    attributor = Attributor(meter, sample=False, gpu_shares=nvml, policy="busy")  # type: ignore[arg-type]
    results: dict[str, object] = {}

    def period(tid: int) -> None:
        time.sleep(0.1)
        proc.add_thread(PID, tid, 0.02)
        proc.add_host(busy_s=0.04, idle_s=0.06)
        powercap.zones["package_0"].advance_joules(4.0)
        attributor.sample()

    def spans() -> None:
        tid = threading.get_native_id()
        proc.add_thread(PID, tid, 0.0)
        period(tid)  # the forecast exists from here on
        before = attributor.open_span()
        period(tid)  # ``before`` now spans a sample: its CPU time is priced over the history
        nvml.stall.set()
        sampler.start()
        assert nvml.stuck.wait(10)
        history_lock.acquire()
        try:
            during = attributor.open_span(before)
            proc.add_thread(PID, tid, 0.01)
            results["during"] = attributor.close_span(during)
            results["before"] = attributor.close_span(before)
        finally:
            history_lock.release()

    sampler = threading.Thread(target=attributor.sample, daemon=True)  # stuck in the GPU shares' read
    history_lock = attributor.prices._sample_lock
    worker = threading.Thread(target=spans, daemon=True)
    try:
        worker.start()
        worker.join(10)
        assert not worker.is_alive(), "a span waited on the stuck sampler"
        assert sampler.is_alive()  # still stuck: the spans did not wait for it
    finally:
        nvml.release.set()
        if sampler.ident is not None:
            sampler.join(10)
        attributor.close()
        meter.close()
    # 4 J over 0.04 busy CPU seconds a period: 100 J per CPU second. ``before`` spent 0.02 s in the sampled
    # period, its child ``during`` 0.01 s at the forecast: both counted in ``before``'s inclusive share.
    assert results["before"].cpu_joules == pytest.approx(3.0, rel=0.02)  # type: ignore[union-attr]
    assert results["during"].cpu_joules == pytest.approx(1.0, rel=0.02)  # type: ignore[union-attr]
