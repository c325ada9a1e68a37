"""RAPL discovery and reading on powercap trees laid out like the kernel's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from otel_joules.config import Settings
from otel_joules.errors import SensorReadError
from otel_joules.sensors import rapl
from otel_joules.sensors.base import Breadth, Domain, HardwareType, domain_kinds, parse_domain_kinds
from otel_joules.semconv import KIND_CPU, KIND_GPU, KIND_PLATFORM

from tests.fakes.powercap import make_powercap, root_only_powercap


def _ids(found) -> list[str]:
    return [c.domain.id for c in found.channels]


def test_one_socket_finds_package_subzones_by_name(tmp_path: Path) -> None:
    pc = make_powercap(tmp_path, "one_socket")
    found = rapl.discover(Settings(sysfs_root=pc.sysfs_root))
    assert _ids(found) == ["package_0", "core_0", "uncore_0", "dram_0"]
    by_id = {c.domain.id: c.domain for c in found.channels}
    assert by_id["package_0"].in_total and by_id["dram_0"].in_total
    assert not by_id["core_0"].in_total and not by_id["uncore_0"].in_total
    assert by_id["dram_0"].hw_type is HardwareType.MEMORY
    assert by_id["core_0"].hw_parent == "intel-rapl:0"  # the package zone's hw_id
    assert found.unavailable == []


def test_two_sockets_psys_and_mmio_duplicate_not_counted_twice(tmp_path: Path) -> None:
    pc = make_powercap(tmp_path, "two_sockets")
    found = rapl.discover(Settings(sysfs_root=pc.sysfs_root))
    ids = _ids(found)
    assert sorted(ids) == ["core_0", "core_1", "dram_0", "dram_1", "package_0", "package_1", "psys"]
    package_0 = [c for c in found.channels if c.domain.id == "package_0"]
    assert len(package_0) == 1 and package_0[0].domain.hw_id == "intel-rapl:0"  # the MSR zone, not MMIO
    psys = next(c.domain for c in found.channels if c.domain.id == "psys")
    assert psys.in_total is False  # packages exist: psys would double count them


def test_psys_at_index_zero_does_not_shift_socket_numbers(tmp_path: Path) -> None:
    pc = make_powercap(tmp_path, "psys_first")
    found = rapl.discover(Settings(sysfs_root=pc.sysfs_root))
    assert sorted(_ids(found)) == ["core_0", "package_0", "psys"]
    assert next(c.domain.hw_id for c in found.channels if c.domain.id == "package_0") == "intel-rapl:1"


def test_psys_counts_where_no_package_exists(tmp_path: Path) -> None:
    pc = make_powercap(tmp_path, "psys_only")
    found = rapl.discover(Settings(sysfs_root=pc.sysfs_root))
    assert [(c.domain.id, c.domain.in_total) for c in found.channels] == [("psys", True)]


def test_each_zone_has_one_kind_and_hw_type_follows_it(tmp_path: Path) -> None:
    """The kind is the one classification: hw.type comes from it (psys is the platform, ``enclosure``), and
    energy.domain_kinds lists only the domains that add to the total (psys beside packages does not)."""
    pc = make_powercap(tmp_path, "two_sockets")
    domains = [c.domain for c in rapl.discover(Settings(sysfs_root=pc.sysfs_root)).channels]
    kinds = {d.id: (d.kind, d.hw_type) for d in domains}
    assert kinds["package_1"] == ("cpu", HardwareType.CPU)
    assert kinds["core_0"] == ("cpu", HardwareType.CPU)
    assert kinds["dram_1"] == ("memory", HardwareType.MEMORY)
    assert kinds["psys"] == ("platform", HardwareType.PLATFORM)
    assert HardwareType.PLATFORM.value == "enclosure"
    assert sorted(domain_kinds(domains)) == ["dram_0:memory", "dram_1:memory", "package_0:cpu", "package_1:cpu"]
    alone = [c.domain for c in rapl.discover(Settings(sysfs_root=make_powercap(tmp_path / "alone", "psys_only").sysfs_root)).channels]
    assert domain_kinds(alone) == ("psys:platform",)


def test_amd_package_and_core_only(tmp_path: Path) -> None:
    pc = make_powercap(tmp_path, "amd")
    found = rapl.discover(Settings(sysfs_root=pc.sysfs_root))
    assert _ids(found) == ["package_0", "core_0"]


def test_mmio_only_package_is_used(tmp_path: Path) -> None:
    pc = make_powercap(tmp_path, "psys_only")
    pc.add_zone("intel-rapl-mmio:0", "package-0", "package_0", interface="intel-rapl-mmio")
    found = rapl.discover(Settings(sysfs_root=pc.sysfs_root))
    assert sorted(_ids(found)) == ["package_0", "psys"]


def test_reads_through_open_descriptor_in_microjoules(tmp_path: Path) -> None:
    pc = make_powercap(tmp_path, "amd", start_uj=5_000_000)
    found = rapl.discover(Settings(sysfs_root=pc.sysfs_root))
    channel = found.channels[0]
    assert channel.read_uj() == 5_000_000
    pc.zones["package_0"].advance_uj(1234)
    assert channel.read_uj() == 5_001_234
    assert channel.wrap_uj == 262143328850


def test_sampling_bound_from_constraint_power(tmp_path: Path) -> None:
    # 1 J range at 10 W max power wraps in 0.1 s: read at least every 25 ms.
    pc = make_powercap(tmp_path, "amd", range_uj=1_000_000, max_power_uw=10_000_000)
    channel = rapl.discover(Settings(sysfs_root=pc.sysfs_root)).channels[0]
    assert channel.max_read_interval_s == pytest.approx(0.025)


def test_sampling_bound_defaults_to_conservative_power(tmp_path: Path) -> None:
    pc = make_powercap(tmp_path, "amd", range_uj=1_000_000, max_power_uw=None)
    channel = rapl.discover(Settings(sysfs_root=pc.sysfs_root, max_power_watts=1000.0)).channels[0]
    assert channel.max_read_interval_s == pytest.approx(1 / 1000 / 4)


def test_garbage_and_vanished_counter_raise_sensor_read_error(tmp_path: Path) -> None:
    pc = make_powercap(tmp_path, "amd")
    channel = rapl.discover(Settings(sysfs_root=pc.sysfs_root)).channels[0]
    pc.zones["package_0"].write_raw("not-a-number\n")
    with pytest.raises(SensorReadError, match="not an integer"):
        channel.read_uj()
    pc.zones["package_0"].write_raw("")
    with pytest.raises(SensorReadError, match="empty"):
        channel.read_uj()


def test_missing_powercap_says_why_and_what_to_do(tmp_path: Path) -> None:
    found = rapl.discover(Settings(sysfs_root=str(tmp_path)))
    assert found.channels == []
    (entry,) = found.unavailable
    assert "does not exist" in entry.reason and "OTEL_JOULES_SYSFS_ROOT" in entry.remedy


def test_sysfs_root_from_environment(tmp_path: Path) -> None:
    pc = make_powercap(tmp_path, "amd")
    settings = Settings.from_env({"OTEL_JOULES_SYSFS_ROOT": pc.sysfs_root})
    assert _ids(rapl.discover(settings)) == ["package_0", "core_0"]


def test_root_only_energy_files_are_reported_with_remedy() -> None:
    """As an unprivileged user (the kernel's 0400 root-only energy_uj), discovery explains and falls back."""
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to an unprivileged user (CI and our machines run as root)")
    with root_only_powercap() as pc:
        script = textwrap.dedent(
            f"""
            import os, json
            from otel_joules.config import Settings
            from otel_joules.sensors import rapl
            os.setgid(65534); os.setuid(65534)  # imports first: the interpreter lives under /root
            found = rapl.discover(Settings(sysfs_root={pc.sysfs_root!r}))
            print(json.dumps([[u.what, u.reason, u.remedy] for u in found.unavailable]))
            print(len(found.channels))
            """
        )
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    unavailable_json, channel_count = out.strip().splitlines()
    unavailable = json.loads(unavailable_json)
    assert channel_count == "0"
    assert [what.split()[0] for what, _, _ in unavailable] == ["package_0", "core_0", "uncore_0", "dram_0"]
    assert all("not readable" in reason and "CVE-2020-8694" in remedy for _, reason, remedy in unavailable)


def test_a_domain_with_a_kind_outside_the_vocabulary_is_refused() -> None:
    """A typo'd kind would silently count as no hardware at all: the error lists the kinds to choose from."""
    with pytest.raises(ValueError, match=r"kind 'enclosure' is not one of \['cpu', 'gpu', 'memory', 'platform', 'rail'\]"):
        Domain("psys", "enclosure", "RAPL psys", "intel-rapl:1")


def test_domain_kinds_parse_back_to_the_domains_that_add_to_the_total() -> None:
    domains = [
        Domain("package_0", KIND_CPU, "p", "p0"),
        Domain("core_0", KIND_CPU, "c", "c0", in_total=False),
        Domain("nvidia_gpu_0", KIND_GPU, "g", "g0"),
        Domain("psys", KIND_PLATFORM, "s", "s0", breadth=Breadth.SOC),
    ]
    value = domain_kinds(domains)
    assert value == ("package_0:cpu", "nvidia_gpu_0:gpu", "psys:platform")
    assert parse_domain_kinds(value) == {"package_0": KIND_CPU, "nvidia_gpu_0": KIND_GPU, "psys": KIND_PLATFORM}
    assert parse_domain_kinds(()) == {}


def test_domain_kinds_of_an_older_export_parse_as_the_array_does() -> None:
    """Exports written before energy.domain_kinds was an array carry one space-separated string."""
    assert parse_domain_kinds("package_0:cpu nvidia_gpu_0:gpu psys:platform") == parse_domain_kinds(
        ["package_0:cpu", "nvidia_gpu_0:gpu", "psys:platform"]
    )
    assert parse_domain_kinds("") == {}
    assert parse_domain_kinds(12) is None


def test_a_whole_platform_reading_says_how_broad_it_is_and_only_it_does() -> None:
    """What ranks platform readings is the sensor's word (Domain.breadth), never the id: a platform domain without
    one, or another kind with one, is refused where it is made."""
    assert Domain("psys", KIND_PLATFORM, "s", "s0", breadth=Breadth.SOC).breadth is Breadth.SOC
    with pytest.raises(ValueError, match="breadth"):
        Domain("meter", KIND_PLATFORM, "m", "m0")
    with pytest.raises(ValueError, match="breadth"):
        Domain("package_0", KIND_CPU, "p", "p0", breadth=Breadth.BMC)
