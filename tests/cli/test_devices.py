"""``otel-joules devices``: every domain found with its source, and for each one missing why and what to do.

Runs the real console command in a child process on a fake powercap tree and the
stand-in ``libnvidia-ml.so.1`` (or no library at all), as a user would.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.fakes.nvml import FakeCard, FakeNvml, build_library, subprocess_env, uuid_for
from tests.fakes.hwmon import FakeHwmon, acpi_power_meter, amd_energy, ina226
from tests.fakes.powercap import make_powercap


def devices(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "otel_joules.cli.main", "devices", *args], env=env,
                          capture_output=True, text=True, timeout=60)


def test_json_lists_rapl_and_gpu_domains_with_their_source_and_the_gpu_that_cannot_be_measured(tmp_path: Path) -> None:
    pc = make_powercap(tmp_path / "sys", "one_socket")
    cards = [
        FakeCard(uuid=uuid_for(0)),
        FakeCard(uuid=uuid_for(1), name="GeForce GT 710", energy=False, power=False, pci="00000000:08:00.0"),
        FakeCard(uuid=uuid_for(2), name="Tesla P100-PCIE-16GB", energy=False, pci="00000000:09:00.0"),
    ]
    env = subprocess_env(FakeNvml(cards=cards).write(tmp_path / "fake.conf"), build_library())
    result = devices(["--sysfs-root", pc.sysfs_root, "--json"], env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["sysfs_root"] == pc.sysfs_root
    rows = [(d["id"], d["hw_type"], d["hw_id"], d["method"], d["source"], d["in_total"]) for d in report["domains"]]
    assert rows == [
        ("package_0", "cpu", "intel-rapl:0", "counter", "measured", True),
        ("core_0", "cpu", "intel-rapl:0:0", "counter", "measured", False),
        ("uncore_0", "cpu", "intel-rapl:0:1", "counter", "measured", False),
        ("dram_0", "memory", "intel-rapl:0:2", "counter", "measured", True),
        ("nvidia_gpu_0", "gpu", uuid_for(0), "counter", "measured", True),
        ("nvidia_gpu_2", "gpu", uuid_for(2), "power_integration", "measured", True),
    ]
    assert [d["hw_name"] for d in report["domains"] if d["hw_type"] == "gpu"] == ["NVIDIA A100-SXM4-40GB", "Tesla P100-PCIE-16GB"]
    (missing,) = report["unavailable"]
    assert missing["what"] == f"nvidia_gpu_1 (GeForce GT 710, {uuid_for(1)})"
    assert missing["reason"] == "NVML supports neither its energy counter nor its power reading"


def test_nothing_readable_says_why_what_to_do_and_that_spans_get_estimates(tmp_path: Path) -> None:
    empty_lib = tmp_path / "no-nvidia-lib"
    empty_lib.mkdir()
    env = subprocess_env(None, empty_lib, {"OTEL_JOULES_SYSFS_ROOT": str(tmp_path / "nosys")})
    result = devices([], env)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0] == f"otel-joules devices (sysfs root: {tmp_path / 'nosys'})"
    assert [line.split()[:3] for line in lines if line.startswith("  ") and "_estimate" in line] == [
        ["cpu_estimate", "cpu", "estimate"],
        ["memory_estimate", "memory", "estimate"],
    ]
    rapl_line = lines.index(f"  RAPL: {tmp_path / 'nosys' / 'class' / 'powercap'} does not exist "
                            "(no powercap driver, not Linux, or a VM/container without it)")
    assert lines[rapl_line + 1].startswith("      what to do: ") and "OTEL_JOULES_SYSFS_ROOT" in lines[rapl_line + 1]
    gpu_line = next(i for i, line in enumerate(lines) if line.startswith("  nvidia_gpu: "))
    assert "libnvidia-ml.so.1 was not found" in lines[gpu_line]
    assert lines[gpu_line + 1].startswith("      what to do: install the NVIDIA driver")
    assert lines[-1] == 'No hardware energy counter is readable here: spans get ESTIMATES (energy.source = "estimate").'


def test_every_source_is_listed_with_what_it_covers_and_which_reading_counts_where_two_overlap(tmp_path: Path) -> None:
    """RAPL on an AMD host with amd_energy loaded, an ACPI power meter and an INA rail: the command names each
    domain's source and what it covers, says amd_energy's package copy is not read (RAPL's counts) and the power
    meter is reported but not added, and lists the rail as never added."""
    pc = make_powercap(tmp_path / "sys", "amd")
    hw = FakeHwmon(pc.root)
    amd_energy(hw, sockets=1, cores_per_socket=1)
    acpi_power_meter(hw, watts=80.0)
    ina226(hw, watts=6.0)
    empty_lib = tmp_path / "no-nvidia-lib"
    empty_lib.mkdir()
    env = subprocess_env(None, empty_lib, {"OTEL_JOULES_AGENT_SOCKET": str(tmp_path / "no-agent.sock")})
    result = devices(["--sysfs-root", pc.sysfs_root, "--json"], env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    rows = [(d["id"], d["source_name"], d["in_total"], d["method"]) for d in report["domains"]]
    assert rows == [
        ("package_0", "RAPL (powercap)", True, "counter"),
        ("core_0", "RAPL (powercap)", False, "counter"),
        ("amd_core_0", "hwmon amd_energy", False, "counter"),
        ("power_meter_0", "hwmon power_meter", False, "power_integration"),
        ("ina226_0", "hwmon ina226", False, "power_integration"),
    ]
    assert all(d["covers"] for d in report["domains"])
    assert [s["source"] for s in report["sources"]] == ["RAPL (powercap)", "hwmon amd_energy", "hwmon power_meter", "hwmon ina226"]
    assert [(o["domain"], o["winner"], o["read"]) for o in report["counted_once"]] == [
        ("package_0 (hwmon amd_energy)", "package_0 (RAPL (powercap))", False),
        ("power_meter_0 (hwmon power_meter)", "package_0", True),
    ]

    text = devices(["--sysfs-root", pc.sysfs_root], env)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    meter_line = next(i for i, line in enumerate(lines) if line.startswith("  power_meter_0 "))
    assert "(reported, inside another domain)" in lines[meter_line]
    assert lines[meter_line + 1].split()[:4] == ["covers", "the", "whole", "platform"]
    heading = lines.index("Counted once (where two sources cover the same hardware):")
    assert lines[heading + 1] == "  package_0 (hwmon amd_energy): not read; counted instead: package_0 (RAPL (powercap))"
    assert lines[heading + 2].startswith("      why: both read package_0's energy")
    assert lines[heading + 3] == (
        "  power_meter_0 (hwmon power_meter): read and reported, not added to energy.joules; counted instead: package_0"
    )
    rail_line = next(line for line in lines if line.strip().startswith("covers one board power rail"))
    assert "not added" in rail_line and "source: hwmon ina226" in rail_line


def test_amd_gpus_are_listed_with_their_source_vendor_and_partitions(tmp_path: Path) -> None:
    from tests.fakes.amdsmi import FakeAmdGpu, FakeAmdSmi, build_library as build_amdsmi, uuid_for as amd_uuid

    fake = FakeAmdSmi(gpus=[
        FakeAmdGpu(uuid=amd_uuid(0), compute_partition="SPX", memory_partition="NPS1"),
        FakeAmdGpu(uuid=amd_uuid(1), name="AMD Radeon PRO W7900", bdf="0000:0d:00.0", energy=False),
    ])
    no_nvidia = tmp_path / "no-nvidia-lib"
    no_nvidia.mkdir()
    env = subprocess_env(None, no_nvidia, {
        "ROCM_PATH": str(build_amdsmi()), "FAKE_AMDSMI_CONFIG": str(fake.write(tmp_path / "amd.conf")),
        "OTEL_JOULES_SYSFS_ROOT": str(tmp_path / "nosys"),
    })
    result = devices(["--json"], env)
    assert result.returncode == 0, result.stderr
    gpus = [d for d in json.loads(result.stdout)["domains"] if d["hw_type"] == "gpu"]
    assert [(d["id"], d["hw_id"], d["method"], d["hw_vendor"], d["source_name"]) for d in gpus] == [
        ("amd_gpu_0", amd_uuid(0), "counter", "AMD", "amdsmi energy accumulator"),
        ("amd_gpu_1", amd_uuid(1), "power_integration", "AMD", "amdsmi power reading"),
    ]
    assert gpus[0]["hw_name"] == "AMD Instinct MI300X (SPX, NPS1)"
    text = devices([], env)
    assert text.returncode == 0, text.stderr
    assert "amd_gpu_0" in text.stdout and "amd_gpu_1" in text.stdout and "amdsmi energy accumulator" in text.stdout
