"""pyJoules-compatible domains and devices: names, hashable values, pyJoules' order, import without a GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

import otel_joules
from otel_joules.meter.meter import EnergyMeter as CoreEnergyMeter
from otel_joules.pyjoules.device import DeviceFactory, NotConfiguredDeviceException
from otel_joules.pyjoules.device.meter_device import MeterDevice, MeterDomain
from otel_joules.pyjoules.device.nvidia_device import NvidiaGPUDevice, NvidiaGPUDomain
from otel_joules.pyjoules.device.rapl_device import (
    RaplCoreDomain,
    RaplDevice,
    RaplDramDomain,
    RaplPackageDomain,
    RaplUncoreDomain,
)
from otel_joules.pyjoules.exception import DomainTypeError, NoSuchDeviceError, NoSuchDomainError

from tests.fakes.nvml import run_python
from tests.fakes.powercap import FakePowercap, make_powercap


def test_names_are_pyjoules_names() -> None:
    assert [repr(d) for d in (RaplPackageDomain(0), RaplDramDomain(1), RaplCoreDomain(2), RaplUncoreDomain(3))] == [
        "package_0",
        "dram_1",
        "core_2",
        "uncore_3",
    ]
    assert str(NvidiaGPUDomain(4)) == repr(NvidiaGPUDomain(4)) == "nvidia_gpu_4"
    assert RaplDramDomain(1).socket == 1 and RaplDramDomain(1).get_domain_name() == "dram"
    assert NvidiaGPUDomain(4).device_id == 4


def test_domains_are_hashable_values() -> None:
    # pyJoules 0.5.1 defined __eq__ without __hash__: a set of domains raised TypeError.
    domains = {RaplPackageDomain(0), RaplPackageDomain(0), NvidiaGPUDomain(1), NvidiaGPUDomain(1), RaplDramDomain(0)}
    assert domains == {RaplPackageDomain(0), NvidiaGPUDomain(1), RaplDramDomain(0)}
    by_domain = {RaplPackageDomain(0): "cpu", NvidiaGPUDomain(0): "gpu"}
    assert by_domain[RaplPackageDomain(0)] == "cpu" and by_domain[NvidiaGPUDomain(0)] == "gpu"
    assert RaplPackageDomain(0) != RaplDramDomain(0) and RaplPackageDomain(0) != RaplPackageDomain(1)
    assert NvidiaGPUDomain(0) != RaplPackageDomain(0)
    with pytest.raises(AttributeError):
        RaplPackageDomain(0).socket = 1  # type: ignore[misc]


def test_ordering_as_in_pyjoules() -> None:
    assert sorted([RaplPackageDomain(1), RaplDramDomain(0), RaplCoreDomain(0)]) == [
        RaplCoreDomain(0),
        RaplDramDomain(0),
        RaplPackageDomain(1),
    ]
    assert sorted([NvidiaGPUDomain(10), NvidiaGPUDomain(2)]) == [NvidiaGPUDomain(2), NvidiaGPUDomain(10)]
    with pytest.raises(ValueError, match="only RAPL domains"):
        RaplPackageDomain(0) < NvidiaGPUDomain(0)  # noqa: B015


# -1 is accepted, as by pyJoules, and refused at lookup (tests/pyjoules/test_user_devices.py).
@pytest.mark.parametrize("bad", ["0", 1.5, True, None])
def test_bad_socket_or_index_is_refused_clearly(bad: object) -> None:
    with pytest.raises(DomainTypeError, match="RaplPackageDomain"):
        RaplPackageDomain(bad)  # type: ignore[arg-type]
    with pytest.raises(DomainTypeError, match="NVML index"):
        NvidiaGPUDomain(bad)  # type: ignore[arg-type]


NVIDIA_IMPORT = r"""
import json, sys
from otel_joules.pyjoules.device.nvidia_device import NvidiaGPUDomain, NvidiaGPUDevice
domains = {NvidiaGPUDomain(0), NvidiaGPUDomain(0), NvidiaGPUDomain(3)}
print(json.dumps({"domains": sorted(map(repr, domains)), "pynvml_loaded": "pynvml" in sys.modules}))
"""


def test_nvidia_domain_imports_without_driver(tmp_path: Path) -> None:
    out = run_python(NVIDIA_IMPORT, None, tmp_path, no_library=True).data
    assert out == {"domains": ["nvidia_gpu_0", "nvidia_gpu_3"], "pynvml_loaded": False}


def test_nvidia_domain_imports_without_pynvml(tmp_path: Path) -> None:
    # pyJoules' nvidia_device did `import pynvml` at the top and failed without it.
    code = "import sys; sys.modules['pynvml'] = None\n" + NVIDIA_IMPORT
    out = run_python(code, None, tmp_path, no_library=True).data
    assert out["domains"] == ["nvidia_gpu_0", "nvidia_gpu_3"]


def test_every_domain_name_is_a_core_domain_id(shared_meter: CoreEnergyMeter) -> None:
    devices = DeviceFactory.create_devices()
    names = [repr(d) for device in devices for d in device.get_configured_domains()]
    # pyJoules' order: packages, drams, cores, uncores.
    assert names == ["package_0", "dram_0", "core_0", "uncore_0"]
    assert sorted(names) == sorted(d.id for d in shared_meter.domains)


def test_default_order_on_two_sockets_with_psys(tmp_path: Path) -> None:
    pc = make_powercap(tmp_path / "sys", "two_sockets")
    otel_joules.get_energy_meter(sysfs_root=pc.sysfs_root, gpus=[], sample=False)
    assert RaplDevice.available_domains() == [
        RaplPackageDomain(0),
        RaplPackageDomain(1),
        RaplDramDomain(0),
        RaplDramDomain(1),
        RaplCoreDomain(0),
        RaplCoreDomain(1),
    ]
    devices = DeviceFactory.create_devices()
    assert [type(d) for d in devices] == [RaplDevice, MeterDevice]
    assert devices[1].get_configured_domains() == [MeterDomain("psys")]


def test_explicit_domains_are_grouped_by_device_in_first_seen_order(shared_meter: CoreEnergyMeter) -> None:
    devices = DeviceFactory.create_devices([RaplDramDomain(0), RaplPackageDomain(0), RaplDramDomain(0)])
    assert len(devices) == 1
    assert devices[0].get_configured_domains() == [RaplDramDomain(0), RaplPackageDomain(0)]


def test_factory_refuses_a_missing_domain_with_the_reason(shared_meter: CoreEnergyMeter) -> None:
    with pytest.raises(NoSuchDomainError, match=r"package_3 cannot be measured here: this machine has no such domain") as info:
        DeviceFactory.create_devices([RaplPackageDomain(3)])
    assert info.value.domain_name == RaplPackageDomain(3)
    # No GPU at all: the device is missing, so NoSuchDeviceError as in pyJoules, with the reason.
    with pytest.raises(NoSuchDeviceError, match=r"asked for nvidia_gpu_0: .*NVML index 0"):
        DeviceFactory.create_devices([NvidiaGPUDomain(0)])


def test_device_without_domains_says_why(shared_meter: CoreEnergyMeter) -> None:
    with pytest.raises(NoSuchDeviceError, match="NvidiaGPUDevice: no domain of this device can be measured here"):
        NvidiaGPUDevice()


def test_device_energy_is_cumulative_microjoules(powercap: FakePowercap, shared_meter: CoreEnergyMeter) -> None:
    device = RaplDevice()
    with pytest.raises(NotConfiguredDeviceException):
        device.get_energy()
    device.configure([RaplPackageDomain(0), RaplDramDomain(0)])
    before = device.get_energy()
    powercap.zones["package_0"].advance_joules(2.5)
    powercap.zones["dram_0"].advance_uj(7)
    after = device.get_energy()
    assert [b - a for a, b in zip(before, after)] == [2_500_000.0, 7.0]


def test_the_sensors_kind_decides_a_domains_device_not_its_id() -> None:
    """Issue 37: a domain's family comes from ``Domain.kind``. An INA-type board rail is named ``<driver>_<K>``, so a
    rail can carry a RAPL-like id: it is still a rail (reported by the meter device), and a GPU with an id outside
    NVML's naming is no NvidiaGPUDomain; only the id of a domain of the right kind names a RAPL or NVML domain."""
    from otel_joules.semconv import KIND_CPU, KIND_GPU, KIND_RAIL
    from otel_joules.sensors.base import Domain as CoreDomain, Method

    from tests.helpers.domains import FixedChannel

    domains = [
        CoreDomain("package_0", KIND_CPU, "socket 0", "intel-rapl:0"),
        CoreDomain("dram_0", KIND_RAIL, "a rail", "hwmon3/power1", method=Method.POWER_INTEGRATION, in_total=False),
        CoreDomain("nvidia_gpu_1", KIND_GPU, "a GPU", "GPU-1", method=Method.POWER_INTEGRATION),
        CoreDomain("intel_gpu_0", KIND_GPU, "an Intel GPU", "i915", method=Method.POWER_INTEGRATION),
    ]
    meter = CoreEnergyMeter(channels=[FixedChannel(d) for d in domains], sample=False)
    try:
        assert RaplDevice.available_domains(meter) == [RaplPackageDomain(0)]
        assert NvidiaGPUDevice.available_domains(meter) == [NvidiaGPUDomain(1)]
        assert MeterDevice.available_domains(meter) == [MeterDomain("dram_0"), MeterDomain("intel_gpu_0")]
    finally:
        meter.close()
