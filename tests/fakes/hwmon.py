"""A hwmon tree laid out the way the Linux kernel lays it out, with readings tests can change.

The kernel registers each hwmon device under its parent device
(``devices/pci0000:00/0000:03:00.0/hwmon/hwmon2``) and links it from ``class/hwmon/hwmonN``;
``hwmonN/device`` links back to the parent device. ``name`` names the driver; ``energyN_input`` (uJ),
``powerN_input`` / ``powerN_average`` (uW) and ``*_label`` are the files read. The kernel prints
``energyN_input`` as a signed 64-bit value, so a counter past 2**63 - 1 shows as negative. The ACPI
power meter creates its files on the ACPI device (``hwmonN/device/power1_average``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


def _signed_64(value: int) -> int:
    value %= 2**64
    return value - 2**64 if value >= 2**63 else value


@dataclass
class FakeFile:
    """One value file (kept at the same inode: the meter keeps it open and preads it)."""

    path: Path

    def write(self, value: int) -> None:
        # One fixed-width pwrite, so a reader never sees a half-written value; int() ignores the padding.
        fd = os.open(self.path, os.O_WRONLY)
        try:
            os.pwrite(fd, f"{value}\n".ljust(24).encode(), 0)
        finally:
            os.close(fd)


@dataclass
class FakeEnergy(FakeFile):
    """An ``energyN_input`` counter: its true cumulative microjoules, shown as the kernel prints them."""

    total_uj: int = 0

    def set_uj(self, total_uj: int) -> None:
        """Set the cumulative count (shown modulo 2**64, as a signed 64-bit value)."""
        self.total_uj = total_uj
        self.write(_signed_64(total_uj))

    def advance_joules(self, joules: float) -> None:
        """Consume ``joules`` more joules."""
        self.set_uj(self.total_uj + round(joules * 1e6))


@dataclass
class FakePower(FakeFile):
    """A ``powerN_input`` or ``powerN_average`` reading."""

    def set_watts(self, watts: float) -> None:
        """Show ``watts`` (written in microwatts)."""
        self.write(round(watts * 1e6))


@dataclass
class FakeHwmon:
    """A sysfs root with a hwmon class; ``files`` by a test's own key."""

    root: Path
    files: dict[str, FakeFile] = field(default_factory=dict)
    _count: int = 0

    @property
    def sysfs_root(self) -> str:
        return str(self.root)

    def add_device(self, name: str, device_path: str, *, attributes_on_device: bool = False) -> Path:
        """Register a hwmon device named ``name`` under ``devices/<device_path>``; return where its files go."""
        device = self.root / "devices" / device_path
        hwmon = device / "hwmon" / f"hwmon{self._count}"
        hwmon.mkdir(parents=True)
        (hwmon / "name").write_text(name + "\n")
        (hwmon / "device").symlink_to(os.path.relpath(device, hwmon))
        link = self.root / "class" / "hwmon" / f"hwmon{self._count}"
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(hwmon, link.parent))
        self._count += 1
        return device if attributes_on_device else hwmon

    def energy(self, key: str, where: Path, channel: int, *, label: str | None = None, start_uj: int = 0,
               mode: int = 0o444) -> FakeEnergy:
        """``energy<channel>_input`` (and its label) in ``where``."""
        path = where / f"energy{channel}_input"
        path.write_text("")
        fake = FakeEnergy(path)
        fake.set_uj(start_uj)
        os.chmod(path, mode)
        if label is not None:
            (where / f"energy{channel}_label").write_text(label + "\n")
        self.files[key] = fake
        return fake

    def power(self, key: str, where: Path, channel: int, watts: float, *, kind: str = "input",
              label: str | None = None, mode: int = 0o444) -> FakePower:
        """``power<channel>_<kind>`` (``input`` or ``average``) in ``where``."""
        path = where / f"power{channel}_{kind}"
        path.write_text("")
        fake = FakePower(path)
        fake.set_watts(watts)
        os.chmod(path, mode)
        if label is not None:
            (where / f"power{channel}_label").write_text(label + "\n")
        self.files[key] = fake
        return fake

    def text(self, where: Path, filename: str, value: str, mode: int = 0o444) -> None:
        """Any other attribute (a limit, an interval, ``power1_oem_info``)."""
        (where / filename).write_text(value + "\n")
        os.chmod(where / filename, mode)

    def cpu_socket(self, cpu: int, socket: int) -> None:
        """``devices/system/cpu/cpu<N>/topology/physical_package_id``."""
        topology = self.root / "devices" / "system" / "cpu" / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True, exist_ok=True)
        (topology / "physical_package_id").write_text(f"{socket}\n")


def amd_energy(hw: FakeHwmon, sockets: int = 1, cores_per_socket: int = 2, mode: int = 0o444) -> Path:
    """amd_energy (as github.com/amd/amd_energy registers it): ``Ecore%03u`` per core, then ``Esocket%u`` per socket.

    Its real files are 0440 (root only, CVE-2020-12912); ``mode`` says which a test wants.
    """
    where = hw.add_device("amd_energy", "platform/amd_energy.0")
    channel = 1
    for cpu in range(sockets * cores_per_socket):
        hw.energy(f"core{cpu}", where, channel, label=f"Ecore{cpu:03d}", mode=mode)
        hw.cpu_socket(cpu, cpu // cores_per_socket)
        channel += 1
    for socket in range(sockets):
        hw.energy(f"socket{socket}", where, channel, label=f"Esocket{socket}", mode=mode)
        channel += 1
    return where


def xe_card(hw: FakeHwmon, pci: str = "0000:03:00.0", rated_max_uw: int = 300_000_000) -> Path:
    """xe (Intel Arc / Data Center GPU): energy1 = card, energy2 = pkg, with labels; limits, no power reading."""
    where = hw.add_device("xe", f"pci0000:00/0000:00:01.0/{pci}")
    hw.energy("card", where, 1, label="card")
    hw.energy("pkg", where, 2, label="pkg")
    hw.text(where, "power1_rated_max", str(rated_max_uw))
    hw.text(where, "power1_max", str(rated_max_uw), mode=0o644)
    hw.text(where, "power2_max", str(rated_max_uw // 2), mode=0o644)
    return where


def i915_card(hw: FakeHwmon, pci: str = "0000:04:00.0", gts: int = 1) -> Path:
    """i915 (DG1/DG2): hwmon ``i915`` with energy1 for the card, and ``i915_gt<N>`` hwmons on the same device."""
    where = hw.add_device("i915", f"pci0000:00/0000:00:02.0/{pci}")
    hw.energy("i915_card", where, 1)
    hw.text(where, "power1_rated_max", "225000000")
    for gt in range(gts):
        gt_where = hw.add_device(f"i915_gt{gt}", f"pci0000:00/0000:00:02.0/{pci}")
        hw.energy(f"i915_gt{gt}", gt_where, 1)
    return where


def acpi_power_meter(hw: FakeHwmon, watts: float, key: str = "meter", oem_info: str | None = None,
                     interval_ms: int = 1000, index: int = 0) -> Path:
    """ACPI power meter (``ACPI000D``): ``power1_average`` and its interval on the ACPI device, as the driver makes them."""
    where = hw.add_device("power_meter", f"LNXSYSTM:00/LNXSYBUS:00/ACPI000D:{index:02d}", attributes_on_device=True)
    hw.power(key, where, 1, watts, kind="average")
    hw.text(where, "power1_average_interval", str(interval_ms), mode=0o644)
    hw.text(where, "power1_average_interval_min", "1000")
    hw.text(where, "power1_is_battery", "0")
    if oem_info is not None:
        hw.text(where, "power1_oem_info", oem_info)
    return where


def ina226(hw: FakeHwmon, watts: float, address: str = "1-0040", key: str = "ina") -> Path:
    """ina2xx driving an INA226 on I2C bus 1: ``power1_input`` (uW), with bus and shunt voltages beside it."""
    bus = address.split("-")[0]
    where = hw.add_device("ina226", f"platform/i2c-{bus}/{address}")
    hw.power(key, where, 1, watts)
    hw.text(where, "in0_input", "5")
    hw.text(where, "in1_input", "12000")
    hw.text(where, "curr1_input", str(round(watts / 12 * 1000)))
    return where
