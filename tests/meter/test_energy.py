"""energy_between: the one function from two snapshots to energy, and what it offers per-kind sums."""

from __future__ import annotations

import pytest

from otel_joules.errors import ConfigurationError
from otel_joules.meter.energy import EnergyPlan, energy_between, spent_joules
from otel_joules.meter.meter import EnergyMeter, EnergySnapshot
from otel_joules.semconv import SOURCE_ESTIMATE, SOURCE_MIXED, SOURCE_PARTIAL
from tests.helpers.domains import FixedChannel, five_domains


DOMAINS = five_domains()


def test_energy_between_gives_joules_totals_watts_and_flags_by_position() -> None:
    plan = EnergyPlan(DOMAINS)
    start = EnergySnapshot(0, (1.0, 2.0, 3.0, 4.0, 5.0), (), (), ())
    end = EnergySnapshot(2_000_000_000, (1.5, 2.25, None, 9.0, 5.5), (3,), (2,), (0, 1, 0, 0, 0))
    energy = energy_between(plan, start, end)
    assert energy.joules == (0.5, 0.25, None, 5.0, 0.5)
    assert energy.total_joules == 6.0  # core_0 is inside the package: not in the total
    assert energy.watts == 3.0
    assert energy.source == SOURCE_PARTIAL  # dram_0 adds to the total and is missing
    assert (energy.stale, energy.missing, energy.jumped) == ((3,), (2,), (1,))
    assert not energy.below_resolution
    positions = plan.positions(["package_0", "cpu_estimate", "dram_0"])
    assert spent_joules(positions, start, end) == 1.0  # dram_0 has no value at the end: left out
    assert spent_joules(positions, start, end) == sum(energy.joules[i] or 0.0 for i in positions)


def test_a_selection_counts_only_its_domains() -> None:
    plan = EnergyPlan(DOMAINS)
    start = EnergySnapshot(0, (1.0, 2.0, 3.0, 4.0, 5.0), (), (), ())
    end = EnergySnapshot(50_000_000, (1.5, 2.25, 3.5, 9.0, 5.5), (), (), ())
    gpu_and_estimate = energy_between(plan, start, end, plan.selection({"nvidia_gpu_0", "cpu_estimate"}))
    assert gpu_and_estimate.joules == (None, None, None, 5.0, 0.5)
    assert gpu_and_estimate.total_joules == 5.5
    assert gpu_and_estimate.source == SOURCE_MIXED
    assert gpu_and_estimate.below_resolution  # 50 ms against the GPU's 100 ms
    estimate = energy_between(plan, start, end, plan.selection({"cpu_estimate"}))
    assert (estimate.total_joules, estimate.source, estimate.below_resolution) == (0.5, SOURCE_ESTIMATE, False)
    with pytest.raises(ConfigurationError, match="'psys' is not measured here"):
        plan.selection({"psys"})


def test_the_meters_measurement_is_energy_between_by_domain_id() -> None:
    meter = EnergyMeter(channels=[FixedChannel(d) for d in DOMAINS], sample=False)
    try:
        start = EnergySnapshot(0, (1.0, 2.0, 3.0, 4.0, 5.0), (4,), (), ())
        end = EnergySnapshot(1_000_000_000, (1.5, 2.25, 3.5, 9.0, 5.5), (), (1,), (0, 0, 0, 2, 0))
        energy = energy_between(meter.plan, start, end)
        measurement = meter.measure(start, end)
        ids = [d.id for d in DOMAINS]
        assert measurement.joules_by_domain == {ids[i]: j for i, j in enumerate(energy.joules) if j is not None}
        assert (measurement.total_joules, measurement.watts, measurement.source) == (
            energy.total_joules, energy.watts, energy.source,
        )
        assert measurement.stale_domains == ("cpu_estimate",)
        assert measurement.missing_domains == ("core_0",)
        assert measurement.rejected_jump_domains == ("nvidia_gpu_0",)
    finally:
        meter.close()
