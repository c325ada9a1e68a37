"""Run the conservation test's worker processes (tests/attribution/conservation_worker.py) beside an observer.

The observer is an attributor in the test's own process, with no CPU time of its own: it reports the host's
unattributed energy (``energy.unattributed``) and the host's energy over a window that holds all the work.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from otel_joules import EnergyMeter
from otel_joules.attribution import Attributor

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class ObservedRun:
    """What the observer saw of the workers' run: their span files, the unattributed joules and the host's energy."""

    outs: list[Path]
    unattributed: dict[str, float]
    host: Any


def observe_workers(
    meter: EnergyMeter, policy: str, procfs_root: str, sysfs_root: str, tmp_path: Path, workers: int, work_s: float
) -> ObservedRun:
    """Start ``workers`` conservation workers under ``policy`` (each its own meter on ``sysfs_root``), let them work
    ``work_s`` seconds after 4 s of idling (their baselines' floors), and observe the whole window with ``meter``.
    Closes ``meter``."""
    observer = Attributor(meter, policy=policy)
    awake = observer.open_span()  # an open span keeps its sampler at 0.1 s (no idle back-off)
    start_at = time.monotonic() + 4.0
    # The caller's PYTHONPATH stays after the root: a checkout run against another's install keeps its own package.
    path = os.pathsep.join([str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    env = {**os.environ, "OTEL_JOULES_ATTRIBUTION_POLICY": policy, "PYTHONPATH": path}
    outs = [tmp_path / f"spans-{k}.jsonl" for k in range(workers)]
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.attribution.conservation_worker", procfs_root, sysfs_root, str(out),
             repr(start_at), repr(work_s)],
            env=env, cwd=ROOT,
        )
        for out in outs
    ]
    for process in processes:
        assert process.wait(timeout=60) == 0
    time.sleep(0.5)
    observer.sample()
    observer.close_span(awake)
    first, last = observer.history[0], observer.history[-1]
    unattributed = observer.unattributed_joules()
    host = meter.measure(first.snapshot, last.snapshot)
    observer.close()
    meter.close()
    return ObservedRun(outs, unattributed, host)
