"""Conservation for every policy, across processes (issue 22): the self shares of all spans of all processes
plus the unattributed remainder are the host's energy, within 2%, and no kind's shares exceed the host's.

Three worker processes (tests/attribution/conservation_worker.py), each with its own attributor and sampler
thread, serve nested requests on a written 4-CPU ``/proc`` that runs with the wall clock
(tests.fakes.procfs.TickingProcfs), under load-dependent fake power (10 W + 12 W per busy core, 3 W dram);
an observer attributor in this process, with no CPU time of its own, reports the host's unattributed energy
(``energy.unattributed``) over a window that holds all the work.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from otel_joules import EnergyMeter
from tests.fakes.powercap import LoadPower, make_powercap
from tests.fakes.procfs import FakeProcfs, TickingProcfs
from tests.attribution.workers import observe_workers

WORKERS = 3
#: Long enough that the start of the work weighs little: the first spans of a process that was idle are
#: priced at a forecast that has no busy period yet (docs/attribution.md: the first 0.1 s after the load changes).
WORK_S = 5.0


@pytest.mark.parametrize("policy", ["capacity", "busy", "dynamic"])
def test_every_spans_self_share_plus_the_unattributed_is_the_hosts_energy(tmp_path: Path, policy: str) -> None:
    powercap = make_powercap(tmp_path / "sys", "one_socket")
    proc = FakeProcfs(tmp_path / "proc", cpus=4)
    proc.add_process(os.getpid(), 0.0)  # the observer: no CPU time of its own
    with TickingProcfs(proc), LoadPower(powercap, procfs_root=proc.procfs_root):
        meter = EnergyMeter(sysfs_root=powercap.sysfs_root, procfs_root=proc.procfs_root, gpus=[])
        run = observe_workers(meter, policy, proc.procfs_root, powercap.sysfs_root, tmp_path, WORKERS, WORK_S)
    outs, unattributed, host = run.outs, run.unattributed, run.host
    spans = [json.loads(line) for out in outs for line in out.read_text().splitlines()]
    assert len(spans) > WORKERS * 2 * 20
    assert all(s["attributes"]["energy.attribution"] == f"cpu_time_share/{policy}" for s in spans)
    self_j = sum(s["attributes"]["energy.attributed.self.joules"] for s in spans)
    dynamic_j = sum(s["attributes"]["energy.attributed.dynamic.self.joules"] for s in spans)
    host_j = host.total_joules
    cpu_j = host.joules_by_domain["package_0"]
    memory_j = host.joules_by_domain["dram_0"]
    left_j = sum(unattributed.values())
    print(
        f"{policy}: host {host_j:.2f} J (package {cpu_j:.2f}, dram {memory_j:.2f}), spans' self {self_j:.2f} J "
        f"(dynamic {dynamic_j:.2f}), unattributed {left_j:.2f} J {unattributed}: "
        f"error {(self_j + left_j - host_j) / host_j:+.2%}"
    )
    assert self_j + left_j == pytest.approx(host_j, rel=0.02)
    roots = [s["attributes"] for s in spans if s["name"] == "request"]
    assert sum(a["energy.attributed.cpu.joules"] for a in roots) <= cpu_j
    assert sum(a["energy.attributed.memory.joules"] for a in roots) <= memory_j
    assert dynamic_j <= self_j * (1 + 1e-9)
