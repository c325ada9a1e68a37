"""pyJoules drop-in: user-written devices end to end, NoSuchDeviceError, and domain indices checked at lookup.

pyJoules documents ``Device`` as the class users subclass to add an energy source
(``available_domains()``, ``configure()``, ``get_energy()``, ``get_configured_domains()``),
paired with a ``Domain`` subclass whose ``get_device_type()`` returns it. The device
below counts microjoules in a plain attribute the test advances by known amounts.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, List

import pytest

from otel_joules.meter.meter import EnergyMeter as CoreEnergyMeter
from otel_joules.pyjoules.device import Device, DeviceFactory, Domain
from otel_joules.pyjoules.device.nvidia_device import NvidiaGPUDomain
from otel_joules.pyjoules.device.rapl_device import RaplDramDomain, RaplPackageDomain
from otel_joules.pyjoules.energy_meter import EnergyContext, EnergyMeter, measure_energy
from otel_joules.pyjoules.exception import DomainTypeError, NoSuchDeviceError, NoSuchDomainError, PyJoulesWarning
from otel_joules.pyjoules.handler.csv_handler import CSVHandler
from otel_joules.pyjoules.handler.pandas_handler import PandasHandler

from tests.fakes.powercap import FakePowercap

if TYPE_CHECKING:
    from tests.pyjoules.conftest import GlobalTracing


class Counter:
    """The hardware of the test device: a cumulative count the test advances."""

    value = 0.0


class WattmeterDomain(Domain):
    """A pyJoules-style user domain: name in __repr__, device type from get_device_type()."""

    def __init__(self, plug: int) -> None:
        Domain.__init__(self)
        self.plug = plug

    def __repr__(self) -> str:
        return f"wattmeter_{self.plug}"

    def __eq__(self, other: object) -> bool:  # pyJoules' domains compare by repr (and so lose their hash)
        return isinstance(other, WattmeterDomain) and repr(self) == repr(other)

    def get_device_type(self) -> "type[WattmeterDevice]":
        return WattmeterDevice


class WattmeterDevice(Device):
    """A pyJoules-style user device: plug 0 exists, its counter is Counter.value (microjoules)."""

    def __init__(self) -> None:
        Device.__init__(self)

    @staticmethod
    def available_domains() -> List[Domain]:
        return [WattmeterDomain(0)]

    def get_energy(self) -> List[float]:
        return [Counter.value for _ in self.get_configured_domains()]


class MillijouleDevice(WattmeterDevice):
    """The same counter read as millijoules, to check the unit conversion."""

    energy_unit_joules = 1e-3

    @staticmethod
    def available_domains() -> List[Domain]:
        return [MillijouleDomain(0)]


class MillijouleDomain(WattmeterDomain):
    def __repr__(self) -> str:
        return f"mj_meter_{self.plug}"

    def get_device_type(self) -> "type[MillijouleDevice]":
        return MillijouleDevice


class AbsentDevice(Device):
    """A device whose hardware is missing: available_domains() raises, as pyJoules documents."""

    def __init__(self) -> None:
        Device.__init__(self)

    @staticmethod
    def available_domains() -> List[Domain]:
        raise NoSuchDeviceError("no wattmeter plugged in")


class AbsentDomain(WattmeterDomain):
    def __repr__(self) -> str:
        return "absent_0"

    def get_device_type(self) -> "type[AbsentDevice]":
        return AbsentDevice


@pytest.fixture(autouse=True)
def _reset_counter() -> None:
    Counter.value = 1_000_000.0


def test_user_device_with_the_manual_energy_meter(shared_meter: CoreEnergyMeter, powercap: FakePowercap) -> None:
    device = WattmeterDevice()
    device.configure()
    assert device.get_configured_domains() == [WattmeterDomain(0)]
    rapl = DeviceFactory.create_devices([RaplPackageDomain(0)])
    meter = EnergyMeter(rapl + [device])
    meter.start("first")
    Counter.value += 3_000_000.0
    powercap.zones["package_0"].advance_joules(2.5)
    meter.record("second")
    Counter.value += 250.5
    meter.stop()
    samples = list(meter.get_trace())
    assert [s.tag for s in samples] == ["first", "second"]
    assert samples[0].energy == {"package_0": 2_500_000.0, "wattmeter_0": 3_000_000.0}
    assert samples[1].energy == {"package_0": 0.0, "wattmeter_0": 250.5}
    assert [repr(d) for d in meter.domains] == ["package_0", "wattmeter_0"]


def test_factory_builds_user_devices_the_pyjoules_way(shared_meter: CoreEnergyMeter) -> None:
    devices = DeviceFactory.create_devices([WattmeterDomain(0), RaplDramDomain(0)])
    assert [type(d).__name__ for d in devices] == ["WattmeterDevice", "RaplDevice"]
    with pytest.raises(NoSuchDomainError, match=r"wattmeter_3 cannot be measured here: WattmeterDevice.available_domains\(\) does not list it \(it lists: wattmeter_0\)"):
        DeviceFactory.create_devices([WattmeterDomain(3)])
    with pytest.raises(NoSuchDeviceError, match="no wattmeter plugged in"):
        DeviceFactory.create_devices([AbsentDomain(0)])


def test_decorator_reports_a_user_device_in_records_handlers_and_spans(
    shared_meter: CoreEnergyMeter, powercap: FakePowercap, global_tracing: GlobalTracing, tmp_path
) -> None:
    handler = PandasHandler()
    csv_path = tmp_path / "energy.csv"
    csv_handler = CSVHandler(str(csv_path))

    @measure_energy(handler=handler, domains=[RaplPackageDomain(0), WattmeterDomain(0), MillijouleDomain(0)])
    def step() -> str:
        Counter.value += 4_000.0  # 4000 uJ for the wattmeter, 4000 mJ for the millijoule device
        powercap.zones["package_0"].advance_joules(1.25)
        return "done"

    @measure_energy(handler=csv_handler, domains=[WattmeterDomain(0)])
    def other() -> None:
        Counter.value += 7.0

    assert step() == "done"
    other()
    csv_handler.save_data()
    frame = handler.get_dataframe()
    assert list(frame.columns) == ["timestamp", "tag", "duration", "package_0", "wattmeter_0", "mj_meter_0",
                                  "energy.below_resolution"]
    assert frame.loc[0, "package_0"] == 1_250_000.0
    assert frame.loc[0, "wattmeter_0"] == 4_000.0
    assert frame.loc[0, "mj_meter_0"] == 4_000_000.0  # 4000 mJ = 4 J in microjoules
    lines = csv_path.read_text().splitlines()
    assert lines[0] == "timestamp;tag;duration;wattmeter_0;energy.below_resolution"
    assert lines[1].split(";")[1] == "other" and lines[1].split(";")[3] == "7.0"
    spans = {span.name: span for span in global_tracing.exporter.get_finished_spans()}
    attributes = spans["step"].attributes
    assert attributes["energy.wattmeter_0.joules"] == pytest.approx(0.004)
    assert attributes["energy.mj_meter_0.joules"] == pytest.approx(4.0)
    assert attributes["energy.package_0.joules"] == pytest.approx(1.25)
    assert attributes["energy.joules"] == pytest.approx(1.25 + 0.004 + 4.0)
    assert attributes["energy.source"] == "measured"
    assert spans["other"].attributes["energy.joules"] == pytest.approx(7e-6)


def test_context_records_segments_of_a_user_device(shared_meter: CoreEnergyMeter, global_tracing: GlobalTracing) -> None:
    handler = PandasHandler()
    with EnergyContext(handler=handler, domains=[WattmeterDomain(0)], start_tag="load") as ctx:
        Counter.value += 10.0
        ctx.record(tag="train")
        Counter.value += 90.0
    frame = handler.get_dataframe()
    assert list(frame["tag"]) == ["load", "train"]
    assert list(frame["wattmeter_0"]) == [10.0, 90.0]
    spans = {span.name: span for span in global_tracing.exporter.get_finished_spans()}
    assert spans["train"].attributes["energy.wattmeter_0.joules"] == pytest.approx(90e-6)
    assert spans["EnergyContext"].attributes["energy.joules"] == pytest.approx(100e-6)


def test_a_missing_user_device_warns_and_the_code_runs(shared_meter: CoreEnergyMeter) -> None:
    handler = PandasHandler()

    @measure_energy(handler=handler, domains=[AbsentDomain(0), RaplPackageDomain(0)])
    def step() -> int:
        return 7

    with pytest.warns(PyJoulesWarning, match=r"left out: absent_0: AbsentDevice: NoSuchDeviceError: no wattmeter plugged in"):
        assert step() == 7
    assert list(handler.get_dataframe().columns) == ["timestamp", "tag", "duration", "package_0", "energy.below_resolution"]


def test_a_failing_get_energy_is_logged_once_and_left_out(shared_meter: CoreEnergyMeter, caplog) -> None:
    class Flaky(WattmeterDevice):
        def get_energy(self) -> List[float]:
            raise OSError("plug unreachable")

    device = Flaky()
    device.configure()
    meter = EnergyMeter(DeviceFactory.create_devices([RaplPackageDomain(0)]) + [device])
    with caplog.at_level(logging.WARNING, logger="otel_joules.pyjoules"):
        meter.start("a")
        meter.record("b")
        meter.stop()
    assert [list(s.energy) for s in meter.get_trace()] == [["package_0"], ["package_0"]]
    messages = [r.getMessage() for r in caplog.records if "Flaky.get_energy() failed" in r.getMessage()]
    assert len(messages) == 1 and "plug unreachable" in messages[0]


def test_a_user_device_must_override_get_energy() -> None:
    class Half(Device):
        @staticmethod
        def available_domains() -> List[Domain]:
            return [WattmeterDomain(0)]

    half = Half()
    half.configure()
    with pytest.raises(NotImplementedError, match=r"Half.get_energy\(\) must be overridden"):
        half.get_energy()


# ------------------------------------------------------- NoSuchDeviceError, as in pyJoules


def test_factory_raises_no_such_device_when_the_device_is_absent(shared_meter: CoreEnergyMeter) -> None:
    # No GPU here: pyJoules' NvidiaGPUDevice() raises NoSuchDeviceError from create_devices.
    with pytest.raises(NoSuchDeviceError, match=r"NvidiaGPUDevice: no domain of this device can be measured here .*asked for nvidia_gpu_0: .*NVML index 0"):
        DeviceFactory.create_devices([NvidiaGPUDomain(0)])
    # The RAPL device exists, only socket 3 does not: NoSuchDomainError, as in pyJoules.
    with pytest.raises(NoSuchDomainError, match="package_3 cannot be measured here"):
        DeviceFactory.create_devices([RaplPackageDomain(0), RaplPackageDomain(3)])


def test_factory_without_rapl_raises_no_such_device(tmp_path) -> None:
    import otel_joules

    (tmp_path / "empty" / "class" / "powercap").mkdir(parents=True)
    otel_joules.get_energy_meter(sysfs_root=str(tmp_path / "empty"), gpus=[], estimate=False, sample=False)
    with pytest.raises(NoSuchDeviceError, match="RaplDevice: no domain of this device can be measured here"):
        DeviceFactory.create_devices([RaplPackageDomain(0)])
    assert DeviceFactory.create_devices() == []  # pyJoules: nothing available, no domain asked -> no device


# ------------------------------------------- domain indices: accepted, refused at lookup


@pytest.mark.parametrize("cls", [RaplPackageDomain, RaplDramDomain, NvidiaGPUDomain])
def test_negative_index_is_accepted_and_fails_at_lookup(cls, shared_meter: CoreEnergyMeter) -> None:
    domain = cls(-1)
    assert repr(domain).endswith("_-1")
    if cls is NvidiaGPUDomain:
        with pytest.raises(NoSuchDeviceError):  # no GPU at all on this machine
            DeviceFactory.create_devices([domain])
    else:
        with pytest.raises(NoSuchDomainError, match=r"_-1 cannot be measured here: this machine has no such domain"):
            DeviceFactory.create_devices([domain])


def test_non_integer_index_is_still_refused_at_construction() -> None:
    with pytest.raises(DomainTypeError, match="whole number"):
        RaplPackageDomain("0")  # type: ignore[arg-type]
