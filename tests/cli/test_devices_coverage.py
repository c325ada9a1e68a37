"""``otel-joules devices``: where a whole-platform reading exists (an ACPI power meter, the agent's BMC), how much of
its power the component counters see.

The real console command in a child process, on a fake powercap and hwmon tree whose counters move at known
power, and a BMC served by sushy-tools' static emulator on 127.0.0.1.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.bmc_servers import bmc_file, sushy_static
from tests.fakes.hwmon import FakeHwmon, acpi_power_meter
from tests.fakes.nvml import subprocess_env
from tests.fakes.powercap import ConstantPower, make_powercap

PACKAGE_WATTS, DRAM_WATTS = 30.0, 5.0
COMPONENTS_WATTS = PACKAGE_WATTS + DRAM_WATTS


def _devices(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    empty_lib = tmp_path / "no-nvidia-lib"
    empty_lib.mkdir(exist_ok=True)
    env = subprocess_env(None, empty_lib, {"OTEL_JOULES_AGENT_SOCKET": str(tmp_path / "no-agent.sock")})
    return subprocess.run([sys.executable, "-m", "otel_joules.cli.main", "devices", *args], env=env,
                          capture_output=True, text=True, timeout=60)


def test_an_acpi_power_meter_gives_the_coverage_of_the_components(tmp_path: Path) -> None:
    pc = make_powercap(tmp_path / "sys", "one_socket")
    acpi_power_meter(FakeHwmon(pc.root), watts=70.0)
    with ConstantPower(pc, {"package_0": PACKAGE_WATTS, "dram_0": DRAM_WATTS}):
        report = json.loads(_devices(tmp_path, "--sysfs-root", pc.sysfs_root, "--json", "--coverage-s", "2").stdout)
        text = _devices(tmp_path, "--sysfs-root", pc.sysfs_root, "--coverage-s", "1").stdout
    figure = report["coverage"]
    assert figure["platform"] == "power_meter_0"
    assert figure["components"] == ["package_0", "dram_0"]
    assert figure["platform_watts"] == pytest.approx(70.0, rel=0.01)
    assert figure["components_watts"] == pytest.approx(COMPONENTS_WATTS, rel=0.05)
    assert figure["coverage"] == pytest.approx(COMPONENTS_WATTS / 70.0, rel=0.05)
    lines = text.splitlines()
    heading = lines.index("Coverage (the component counters against the whole-platform reading):")
    # The figures as measured over the second: a loaded box reads 69.9 W as often as 70.0 W, and 49% as 50%.
    line = re.fullmatch(r"  ([0-9]+)%: package_0, dram_0 draw [0-9.]+ W of power_meter_0's ([0-9.]+) W over [0-9.]+ s", lines[heading + 1])
    assert line, lines[heading + 1]
    assert float(line.group(1)) == pytest.approx(100 * COMPONENTS_WATTS / 70.0, rel=0.05), lines[heading + 1]
    assert float(line.group(2)) == pytest.approx(70.0, rel=0.01), lines[heading + 1]
    assert "is in no component counter" in lines[heading + 2]


def test_the_agents_bmc_is_listed_and_is_the_platform_where_its_file_is_readable(tmp_path: Path) -> None:
    pc = make_powercap(tmp_path / "sys", "one_socket")
    acpi_power_meter(FakeHwmon(pc.root), watts=70.0)  # narrower than the BMC: the BMC is the platform
    with sushy_static("power-control") as url, ConstantPower(pc, {"package_0": PACKAGE_WATTS, "dram_0": DRAM_WATTS}):
        config = bmc_file(tmp_path / "bmc.toml", f'poll_interval_s = 0.2\n[redfish]\nurl = "{url}"\n')
        result = _devices(tmp_path, "--sysfs-root", pc.sysfs_root, "--json", "--bmc-config", config)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    (entry,) = [d for d in report["domains"] if d["id"] == "bmc_redfish"]
    assert entry["hw_type"] == "enclosure" and entry["method"] == "power_integration" and not entry["in_total"]
    assert entry["source_name"] == "BMC (Redfish, /redfish/v1/Chassis/1U/Power)" and "whole platform" in entry["covers"]
    figure = report["coverage"]
    assert figure["platform"] == "bmc_redfish"
    assert figure["platform_watts"] == pytest.approx(344.0, rel=0.02)
    assert figure["coverage"] == pytest.approx(COMPONENTS_WATTS / 344.0, rel=0.05)


def test_a_bmc_file_it_may_not_use_is_said_with_where_the_figure_is(tmp_path: Path) -> None:
    pc = make_powercap(tmp_path / "sys", "one_socket")
    config = bmc_file(tmp_path / "bmc.toml", '[redfish]\nurl = "https://bmc.invalid"\nusername = "u"\npassword = "Devices-Secret-1"\n', 0o644)
    result = _devices(tmp_path, "--sysfs-root", pc.sysfs_root, "--json", "--bmc-config", config)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    (missing,) = [u for u in report["unavailable"] if u["what"] == f"BMC ({config})"]
    assert "`chmod 600 " in missing["reason"] and "energy.coverage" in missing["remedy"]
    assert report["coverage"] is None  # no platform reading at all
    assert "Devices-Secret-1" not in result.stdout + result.stderr
