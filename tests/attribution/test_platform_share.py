"""Shares that add up to the wall (issue 36): with a whole-platform meter beside the component counters, the
processes' shares (``process.energy``) and the spans' self shares, plus the unattributed remainder, are the
platform's energy, not only the components', under every policy (``dynamic`` gives the uncovered part to nobody).

The host of test_conservation.py (three worker processes on a written 4-CPU ``/proc`` that runs with the wall
clock, load-dependent fake power on the powercap zones: 10 W + 12 W per busy core, 3 W dram) with an ACPI power
meter (hwmon ``power_meter``, a power reading the meter integrates) in the same sysfs tree, whose reading follows
the components' power x 1.5 (fans, disks, the supplies' losses: the part no component counter covers).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from otel_joules import EnergyMeter
from otel_joules.attribution import command_attribution
from otel_joules.attribution.uncovered import UncoveredEnergy
from otel_joules.meter.energy import energy_between
from tests.fakes.hwmon import FakeHwmon, FakePower, acpi_power_meter
from tests.fakes.powercap import LoadPower, PlatformPower, make_powercap
from tests.fakes.procfs import FakeProcfs, TickingProcfs
from tests.attribution.workers import observe_workers

WORKERS = 3
WORK_S = 5.0
#: The platform meter's power over the components'.
PLATFORM_FACTOR = 1.5


@pytest.mark.parametrize("policy", ["busy", "capacity", "dynamic"])
def test_processes_shares_plus_the_unattributed_add_up_to_the_platform_meter(tmp_path: Path, policy: str) -> None:
    powercap = make_powercap(tmp_path / "sys", "one_socket")
    hwmon = FakeHwmon(powercap.root)
    acpi_power_meter(hwmon, watts=0.0, interval_ms=100)
    proc = FakeProcfs(tmp_path / "proc", cpus=4)
    proc.add_process(os.getpid(), 0.0)  # the observer: no CPU time of its own
    with (
        TickingProcfs(proc),
        LoadPower(powercap, procfs_root=proc.procfs_root),
        PlatformPower(hwmon.files["meter"].set_watts, powercap, ("package_0", "dram_0"), PLATFORM_FACTOR),  # type: ignore[union-attr]
    ):
        time.sleep(0.2)  # the platform's reading follows the load before anyone reads it
        meter = EnergyMeter(sysfs_root=powercap.sysfs_root, procfs_root=proc.procfs_root, gpus=[])
        platform = next(d for d in meter.domains if d.id.startswith("power_meter_"))
        assert not platform.in_total  # the components count in energy.joules; the platform is read beside them
        run = observe_workers(meter, policy, proc.procfs_root, powercap.sysfs_root, tmp_path, WORKERS, WORK_S)
    outs, unattributed, host = run.outs, run.unattributed, run.host
    platform_j = host.joules_by_domain[platform.id]
    components_j = host.total_joules
    processes_j = sum(sum(json.loads(Path(f"{out}.process.json").read_text()).values()) for out in outs)
    spans = [json.loads(line) for out in outs for line in out.read_text().splitlines()]
    self_j = sum(s["attributes"]["energy.attributed.self.joules"] for s in spans)
    left_j = sum(unattributed.values())
    print(
        f"{policy}: platform {platform_j:.2f} J, components {components_j:.2f} J "
        f"(coverage {components_j / platform_j:.3f}), processes' shares {processes_j:.2f} J, spans' self {self_j:.2f} J, "
        f"unattributed {left_j:.2f} J {unattributed}: processes' error {(processes_j + left_j - platform_j) / platform_j:+.2%}, "
        f"spans' error {(self_j + left_j - platform_j) / platform_j:+.2%}"
    )
    # The fake platform is what it says: 1.5x the components (within its 50 ms average's lag at the ends).
    assert platform_j == pytest.approx(PLATFORM_FACTOR * components_j, rel=0.03)
    assert len(spans) > WORKERS * 2 * 20
    assert processes_j + left_j == pytest.approx(platform_j, rel=0.02)
    # Spans are priced at the periods' (and the forecast's) prices, not by the period like a process's share, and a
    # lagging platform reading makes each period's uncovered part noisier than the counters' (seen: -2.2% to +1.4%).
    assert self_j + left_j == pytest.approx(platform_j, rel=0.03)
    if policy == "busy":
        # The whole bill to the work: the busy periods' platform energy is the processes', more than every
        # component's joules (idle periods' included), not a remainder nobody holds.
        assert processes_j > components_j
    if policy == "dynamic":
        # The marginal energy only: the uncovered part is static, nobody's (all of it in energy.unattributed).
        assert processes_j < components_j and unattributed["cpu"] > platform_j - components_j


def test_a_platform_reading_that_lags_its_components_is_owed_never_negative_and_counted_once() -> None:
    # Positions: 0 the platform, 1 and 2 the components. The platform reads 5 J short, then catches up.
    uncovered = UncoveredEnergy((0, (1, 2)))
    periods = [(10.0, 8.0, 2.0), (5.0, 8.0, 2.0), (18.0, 8.0, 2.0), (None, 8.0, 2.0), (15.0, 8.0, None), (12.0, 8.0, 2.0)]
    taken = [uncovered.take(joules) for joules in periods]
    assert taken == [0.0, 0.0, 3.0, 0.0, 0.0, 2.0]
    # Over the periods whose parts were all read, the platform minus the components: 10 + 5 + 18 + 12 - 4 x 10.
    assert sum(taken) == pytest.approx(5.0)


def test_a_command_run_shares_the_platform_s_uncovered_energy_with_its_cpu_time(tmp_path: Path) -> None:
    """``otel-joules run``'s share (:func:`command_attribution`): under ``busy`` a command that was all of the
    host's busy time gets the CPU-side joules and the platform's beyond the components, under ``dynamic`` none
    of the latter."""
    powercap = make_powercap(tmp_path / "sys", "one_socket")
    hwmon = FakeHwmon(powercap.root)
    acpi_power_meter(hwmon, watts=100.0, interval_ms=100)
    with EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False) as meter:
        assert [d.id for d in meter.domains if d.in_total] == ["package_0", "dram_0"]
        start = meter.snapshot()
        time.sleep(0.3)
        for zone, joules in (("package_0", 12.0), ("dram_0", 3.0)):
            powercap.zones[zone].total_uj += round(joules * 1e6)
            powercap.zones[zone].write()
        end = meter.snapshot()
        spent = dict(zip((d.id for d in meter.domains), energy_between(meter.plan, start, end).joules))
        platform_j = spent["power_meter_0"]
        assert platform_j > 20.0  # 100 W for 0.3 s: more than the components' 15 J
        shares = {
            policy: command_attribution(meter, start, end, 1.0, 1.0, 1.0, static_watts=[None] * len(meter.domains), policy=policy)
            for policy in ("busy", "dynamic")
        }
    assert shares["busy"].cpu_joules == pytest.approx(spent["package_0"] + platform_j - 15.0)
    assert shares["dynamic"].cpu_joules == 0.0  # every joule static (unknown baselines): the dynamic share is none
