"""NVML lifecycle: initialised once per process, shut down at exit, initialised again after fork().

The stand-in logs every nvmlInit/nvmlShutdown with the calling pid and its reference count,
and answers a forked child's calls with UNINITIALIZED until the child initialises NVML itself
(handles from before are then invalid), which is how the real library's state after fork()
is unusable.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.fakes.nvml import FakeCard, FakeNvml, read_stats, run_python, uuid_for

ONCE = r"""
import json
from otel_joules.sensors import nvml
first = nvml.discover()
second = nvml.discover(gpus=[0])          # a second meter in the same process
values = [c.read_uj() for c in first.channels + second.channels]
print(json.dumps({"values": values}))
"""


def test_initialised_once_and_shut_down_at_exit(tmp_path: Path) -> None:
    stats = tmp_path / "stats.log"
    fake = FakeNvml(cards=[FakeCard(uuid=uuid_for(0))], stats_path=str(stats))
    run_python(ONCE, fake, tmp_path)
    events = read_stats(stats)
    assert [(event, refcount) for event, _, refcount in events] == [("init", 1), ("shutdown", 0)]
    assert len({pid for _, pid, _ in events}) == 1


FORK = r"""
import json, os, sys, time
import pynvml
from otel_joules.errors import SensorReadError
from otel_joules.sensors import nvml

found = nvml.discover()
counter, integrated = found.channels           # GPU 0 has the counter, GPU 1 only power
parent_before = [counter.read_uj(), integrated.read_uj()]
stale_handle = pynvml.nvmlDeviceGetHandleByIndex(0)
read_fd, write_fd = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(read_fd)
    # The hazard this guards against: the parent's NVML state is not valid here.
    try:
        pynvml.nvmlDeviceGetTotalEnergyConsumption(stale_handle)
        stale = "worked"
    except pynvml.NVMLError as exc:
        stale = str(exc)
    counter.reset_after_fork()                  # what the meter's fork hook does; `integrated` relies on the generation check
    t0 = time.monotonic()
    child = [counter.read_uj(), integrated.read_uj()]
    time.sleep(0.3)
    child_after = [counter.read_uj(), integrated.read_uj()]
    t1 = time.monotonic()
    # A handle fetched before the child re-initialised is rejected too: re-acquiring was necessary.
    try:
        pynvml.nvmlDeviceGetTotalEnergyConsumption(stale_handle)
        stale_after = "worked"
    except pynvml.NVMLError as exc:
        stale_after = str(exc)
    os.write(write_fd, json.dumps({"pid": os.getpid(), "stale": stale, "stale_after": stale_after,
                                   "child": child, "child_after": child_after, "t0": t0, "t1": t1}).encode())
    os.close(write_fd)
    sys.exit(0)                                 # a normal exit: atexit shuts the child's NVML down
os.close(write_fd)
with os.fdopen(read_fd) as pipe:
    child = json.loads(pipe.read())
_, status = os.waitpid(pid, 0)
parent_after = [counter.read_uj(), integrated.read_uj()]
print(json.dumps({"parent": os.getpid(), "status": status, "child": child, "parent_before": parent_before, "parent_after": parent_after}))
"""


def test_fork_child_reinitialises_and_parent_is_unaffected(tmp_path: Path) -> None:
    stats = tmp_path / "stats.log"
    cards = [
        FakeCard(uuid=uuid_for(0), watts=250, energy_start_mj=10_000_000),
        FakeCard(uuid=uuid_for(1), watts=60, energy=False, pci="00000000:08:00.0"),
    ]
    out = run_python(FORK, FakeNvml(cards=cards, update_ms=1, stats_path=str(stats), epoch_monotonic_s=time.monotonic()), tmp_path).data
    child = out["child"]
    assert out["status"] == 0
    assert child["stale"] == "Uninitialized"
    assert child["stale_after"] == "Invalid Argument"
    # The child's reads work and measure the right thing.
    assert child["child"][0] >= out["parent_before"][0]
    child_counter_j = (child["child_after"][0] - child["child"][0]) / 1e6
    assert child_counter_j == pytest.approx(250 * (child["t1"] - child["t0"]), rel=0.05)
    child_integrated_j = (child["child_after"][1] - child["child"][1]) / 1e6
    assert child_integrated_j == pytest.approx(60 * (child["t1"] - child["t0"]), rel=0.05)
    # The parent still reads, with the handles it had, and its counter kept advancing.
    assert out["parent_after"][0] > child["child_after"][0]
    assert out["parent_after"][1] > out["parent_before"][1]

    events = read_stats(stats)
    parent, child_pid = out["parent"], child["pid"]
    assert [(e, r) for e, p, r in events if p == parent] == [("init", 1), ("shutdown", 0)]
    assert [(e, r) for e, p, r in events if p == child_pid] == [("init", 1), ("shutdown", 0)]
