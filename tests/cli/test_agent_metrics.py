"""The agent's host publisher reads every device of the host once: RAPL, hwmon and GPUs, by the in-process overlap rules."""

from __future__ import annotations

import time
from pathlib import Path

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from otel_joules.cli.agent_metrics import open_host_channels
from otel_joules.config import Settings
from otel_joules.meter.meter import EnergyMeter
from otel_joules.metrics.instruments import EnergyMetrics

from tests.fakes.hwmon import FakeHwmon, acpi_power_meter, amd_energy
from tests.fakes.powercap import make_powercap


def _series(reader: InMemoryMetricReader) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data is not None else ():
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                out[metric.name] = {p.attributes.get("energy.domain", ""): p.value for p in metric.data.data_points}
    return out


def test_the_agent_publishes_hwmon_once_beside_rapl_and_the_platform_meter_as_the_host(tmp_path: Path) -> None:
    pc = make_powercap(tmp_path / "sys", "amd")
    hw = FakeHwmon(pc.root)
    amd_energy(hw, sockets=1, cores_per_socket=2)  # its socket counter is RAPL's package again
    acpi_power_meter(hw, watts=80.0, interval_ms=100)
    settings = Settings(sysfs_root=pc.sysfs_root, agent_socket=str(tmp_path / "no-agent.sock"))
    channels = open_host_channels(settings)
    ids = [c.domain.id for c in channels]
    assert ids.count("package_0") == 1  # amd_energy's socket counter is left out: RAPL's is kept
    assert {"package_0", "core_0", "amd_core_0", "amd_core_1", "power_meter_0"} <= set(ids)
    reader = InMemoryMetricReader()
    started_s = time.monotonic()
    with EnergyMeter(channels=channels, settings=settings) as meter:
        EnergyMetrics(meter, MeterProvider(metric_readers=[reader]), host_id="host-a", attribution=False)
        pc.zones["package_0"].advance_joules(40.0)
        hw.files["socket0"].advance_joules(40.0)
        time.sleep(1.0)
        series = _series(reader)
        elapsed_s = time.monotonic() - started_s
    # The platform meter is the host; RAPL's package is a component, counted once.
    assert set(series["hw.host.energy"]) == {"power_meter_0"}
    # 80 W integrated from the meter's first reading to the collection, within the 1 s slept and the time elapsed.
    assert 80.0 * 0.99 <= series["hw.host.energy"]["power_meter_0"] <= 80.0 * elapsed_s
    assert series["hw.energy"]["package_0"] == 40.0
    assert "package_0" not in series.get("energy.nested", {})
