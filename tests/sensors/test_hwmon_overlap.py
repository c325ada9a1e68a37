"""Never count a device twice: RAPL and hwmon on the same fake host (one sysfs root), through the meter and spans."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import otel_joules
from otel_joules.config import Settings
from otel_joules.meter.channels import DEVICE_READ_DEADLINE_S
from otel_joules.meter.meter import EnergyMeter
from otel_joules.sensors.base import Breadth
from otel_joules.sensors.overlap import Overlap

from tests.fakes.hwmon import FakeHwmon, acpi_power_meter, amd_energy
from tests.fakes.powercap import make_powercap


def _settings(root: str, tmp_path: Path) -> Settings:
    return Settings(sysfs_root=root, agent_socket=str(tmp_path / "no-agent.sock"))


def test_a_package_read_by_rapl_and_amd_energy_is_rapl_s_and_counted_once(tmp_path, tracer_provider, span_exporter) -> None:
    pc = make_powercap(tmp_path / "sys", "amd")
    hw = FakeHwmon(pc.root)
    amd_energy(hw, sockets=1, cores_per_socket=2)
    with EnergyMeter(settings=_settings(pc.sysfs_root, tmp_path), gpus=[], sample=False) as meter:
        rows = [(d.id, d.hw_id, d.in_total, d.hw_parent) for d in meter.domains]
        assert rows == [
            ("package_0", "intel-rapl:0", True, None),
            ("core_0", "intel-rapl:0:0", False, "intel-rapl:0"),
            # amd_energy's cores lay inside its socket counter, which is not read: now inside RAPL's package.
            ("amd_core_0", "amd_energy.0/energy1", False, "intel-rapl:0"),
            ("amd_core_1", "amd_energy.0/energy2", False, "intel-rapl:0"),
        ]
        (overlap,) = meter.overlaps
        assert overlap == Overlap(
            "package_0 (hwmon amd_energy)",
            "package_0 (RAPL (powercap))",
            overlap.reason,
            read=False,
        )
        assert "RAPL (powercap) counter is kept" in overlap.reason and "not read" in overlap.reason
        handle = otel_joules.instrument(tracer_provider, meter=meter)
        with tracer_provider.get_tracer("t").start_as_current_span("work"):
            # The same package's energy, seen by both drivers.
            pc.zones["package_0"].advance_joules(10.0)
            hw.files["socket0"].advance_joules(10.0)
            hw.files["core0"].advance_joules(3.0)
        handle.uninstrument()
    attributes = span_exporter.get_finished_spans()[0].attributes
    assert attributes["energy.joules"] == 10.0  # not 20
    assert attributes["energy.package_0.joules"] == 10.0
    assert attributes["energy.amd_core_0.joules"] == 3.0
    assert attributes["energy.domain_kinds"] == ("package_0:cpu",)


def test_a_platform_meter_beside_rapl_is_reported_but_not_added(tmp_path, tracer_provider, span_exporter) -> None:
    """The issue's host: an ACPI power meter at 80 W beside RAPL. The span's energy.joules stays the components'
    (the meter contains them); the meter's own reading is on the span, integrated, and says so."""
    pc = make_powercap(tmp_path / "sys", "one_socket")
    hw = FakeHwmon(pc.root)
    acpi_power_meter(hw, watts=80.0, interval_ms=100)
    with EnergyMeter(settings=_settings(pc.sysfs_root, tmp_path), gpus=[]) as meter:
        in_total = {d.id: d.in_total for d in meter.domains}
        assert in_total == {
            "package_0": True, "core_0": False, "uncore_0": False, "dram_0": True, "power_meter_0": False,
        }
        (overlap,) = meter.overlaps
        assert overlap.domain == "power_meter_0 (hwmon power_meter)" and overlap.read
        assert overlap.winner == "package_0, dram_0"
        assert "covers the whole platform" in overlap.reason
        handle = otel_joules.instrument(tracer_provider, meter=meter)
        with tracer_provider.get_tracer("t").start_as_current_span("work"):
            pc.zones["package_0"].advance_joules(10.0)
            pc.zones["dram_0"].advance_joules(2.0)
            time.sleep(1.0)
        handle.uninstrument()
    span = span_exporter.get_finished_spans()[0]
    attributes = span.attributes
    assert attributes["energy.joules"] == 12.0
    assert attributes["energy.domain_kinds"] == ("package_0:cpu", "dram_0:memory")
    assert attributes["energy.platform.domain"] == "power_meter_0"  # the report's coverage reads it, not the id
    duration_s = (span.end_time - span.start_time) / 1e9
    # Read off the span path (an ACPI method may be slow): each end's value may be up to the device deadline old,
    # late rather than lost. Accuracy over a long interval: tests/sensors/test_hwmon.py.
    late_s = DEVICE_READ_DEADLINE_S
    assert 80.0 * (duration_s - late_s) <= attributes["energy.power_meter_0.joules"] <= 80.0 * (duration_s + late_s)
    assert attributes["energy.power_meter_0.method"] == "power_integration"
    assert "energy.package_0.method" not in attributes  # a counter needs no method


def test_the_span_names_the_broadest_platform_reading_by_its_sensor_s_word(tmp_path, tracer_provider, span_exporter) -> None:
    """psys and an ACPI power meter beside a package: both are read, neither counts, and the span's
    energy.platform.domain names the power meter (Breadth.POWER_METER is broader than psys's Breadth.SOC)."""
    pc = make_powercap(tmp_path / "sys", "four_domains")
    acpi_power_meter(FakeHwmon(pc.root), watts=80.0, interval_ms=100)
    with EnergyMeter(settings=_settings(pc.sysfs_root, tmp_path), gpus=[]) as meter:
        by_id = {d.id: d for d in meter.domains}
        assert not by_id["psys"].in_total and not by_id["power_meter_0"].in_total
        assert (by_id["power_meter_0"].breadth, by_id["psys"].breadth) == (Breadth.POWER_METER, Breadth.SOC)
        assert meter.platform_domain == "power_meter_0"
        handle = otel_joules.instrument(tracer_provider, meter=meter)
        with tracer_provider.get_tracer("t").start_as_current_span("work"):
            pc.zones["package_0"].advance_joules(1.0)
            time.sleep(0.3)
        handle.uninstrument()
        measurement = meter.measure(meter.snapshot(), meter.snapshot())
    attributes = span_exporter.get_finished_spans()[0].attributes
    assert attributes["energy.platform.domain"] == "power_meter_0"
    assert "energy.psys.joules" in attributes and "energy.power_meter_0.joules" in attributes
    assert measurement.platform_domain == "power_meter_0"
    # A measurement over the components alone carries no platform reading, so it names none.
    assert meter.measure(meter.snapshot(), meter.snapshot(), domains=["package_0"]).platform_domain is None


def test_a_platform_meter_alone_is_the_host_s_energy_and_no_estimate_is_added(tmp_path) -> None:
    """A host whose RAPL this user may not read but whose ACPI power meter is readable (0444): the meter is the total."""
    hw = FakeHwmon(tmp_path / "sys")
    acpi_power_meter(hw, watts=80.0)
    with EnergyMeter(settings=_settings(hw.sysfs_root, tmp_path), gpus=[]) as meter:
        assert [(d.id, d.in_total) for d in meter.domains] == [("power_meter_0", True)]
        assert meter.overlaps == ()
        assert meter.platform_domain is None  # the total itself: energy.domain_kinds lists it


def test_the_broadest_platform_reading_counts_where_only_platforms_exist(tmp_path) -> None:
    pc = make_powercap(tmp_path / "sys", "psys_only")
    hw = FakeHwmon(pc.root)
    acpi_power_meter(hw, watts=80.0)
    with EnergyMeter(settings=_settings(pc.sysfs_root, tmp_path), gpus=[]) as meter:
        # The power meter first: the broadest platform reading leads (metrics take the first as the host's).
        assert [(d.id, d.in_total) for d in meter.domains] == [("power_meter_0", True), ("psys", False)]
        (overlap,) = meter.overlaps
        assert overlap.domain == "psys (RAPL (powercap))" and overlap.winner == "power_meter_0 (hwmon power_meter)"


def test_estimates_asked_for_beside_a_platform_meter_keep_the_meter_out_of_the_total(tmp_path) -> None:
    hw = FakeHwmon(tmp_path / "sys")
    acpi_power_meter(hw, watts=80.0)
    with EnergyMeter(settings=_settings(hw.sysfs_root, tmp_path), gpus=[], estimate=True) as meter:
        in_total = {d.id: d.in_total for d in meter.domains}
    assert in_total == {"power_meter_0": False, "cpu_estimate": True, "memory_estimate": True}


def test_psys_beside_packages_is_said_in_the_overlaps(tmp_path) -> None:
    pc = make_powercap(tmp_path / "sys", "two_sockets")
    with EnergyMeter(settings=_settings(pc.sysfs_root, tmp_path), gpus=[], sample=False) as meter:
        (overlap,) = meter.overlaps
    assert overlap.domain == "psys (RAPL (powercap))" and overlap.read
    assert overlap.winner == "package_0, dram_0, package_1, dram_1"


def test_amd_energy_without_rapl_measures_the_sockets_and_no_cpu_estimate_is_added(tmp_path) -> None:
    hw = FakeHwmon(tmp_path / "sys")
    amd_energy(hw, sockets=2, cores_per_socket=1)
    with EnergyMeter(settings=_settings(hw.sysfs_root, tmp_path), gpus=[], sample=False) as meter:
        assert meter.domain_kinds == ("package_0:cpu", "package_1:cpu")
        assert not any(d.id.endswith("_estimate") for d in meter.domains)
        assert meter.overlaps == ()


def test_a_grace_module_is_reported_beside_its_socket_and_not_added(tmp_path) -> None:
    """The module contains the Grace socket (and the Hopper GPU): the socket counts, the module is reported."""
    hw = FakeHwmon(tmp_path / "sys")
    for index, (part, watts) in enumerate([("Module", 500.0), ("Grace", 200.0), ("CPU", 150.0), ("SysIO", 30.0)]):
        acpi_power_meter(hw, watts, key=part, oem_info=f"{part} Power Socket 0", index=index)
    with EnergyMeter(settings=_settings(hw.sysfs_root, tmp_path), gpus=[], sample=False) as meter:
        assert meter.domain_kinds == ("grace_0:cpu",)
        (overlap,) = meter.overlaps
    assert overlap.domain == "grace_module_0 (hwmon power_meter (NVIDIA Grace))" and overlap.winner == "grace_0"
