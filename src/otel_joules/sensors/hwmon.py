"""Energy counters and power readings of the Linux hwmon class (``<sysfs>/class/hwmon``).

Layout the kernel exposes: ``class/hwmon/hwmonN`` is a symlink to the hwmon directory under its
device (``devices/pci0000:00/0000:00:02.0/hwmon/hwmon3``); ``hwmonN/name`` names the driver,
``hwmonN/device`` links back to the device. Files, by the hwmon sysfs ABI
(``Documentation/hwmon/sysfs-interface.rst``)::

    energyN_input     cumulative energy, microjoules (a signed long: read modulo 2**64)
    powerN_input      instantaneous power, microwatts
    powerN_average    average power, microwatts, over powerN_average_interval (milliseconds)
    energyN_label / powerN_label   what channel N is, where the driver says

``powerN_max``, ``_cap``, ``_crit`` and ``_rated_max`` are limits, never readings; here they only bound
a counter's plausible power (the meter's wrap and jump policy). Which drivers are read, and what each
covers (no other driver is read: what it covers is not known, and counting it could count a device twice):

* ``amd_energy`` (AMD Zen, out of tree since Linux 5.13): ``Esocket<S>`` per socket, as ``package_<S>``
  (the same package RAPL's powercap zone reads; where both exist RAPL's is kept, see
  :mod:`otel_joules.sensors.overlap`), and ``Ecore<NNN>`` per core, as ``amd_core_<N>``, inside its socket.
  Root-only (mode 0440) since the fix for CVE-2020-12912.
* ``xe`` and ``i915`` (Intel discrete GPUs): the card (``xe`` channel 1 or ``card``, ``i915`` energy1) as
  ``intel_gpu_<G>``, adding to the total; the package (``xe`` channel 2 or ``pkg``) and each GT (``i915_gt<M>``)
  inside it. They have no power readings: energy counters only.
* ``power_meter`` (ACPI power meter, ``ACPI000D``): ``power1_average`` of the whole platform, as
  ``power_meter_<K>`` (kind platform). NVIDIA Grace exposes its sensors as ACPI power meters named by
  ``power1_oem_info``: ``Module Power Socket <S>`` (the whole module: CPU, memory and the Hopper GPU;
  kind platform) as ``grace_module_<S>``, ``Grace Power Socket <S>`` (CPU and its memory) as ``grace_<S>``,
  and inside it ``CPU Power Socket <S>`` and ``SysIO Power Socket <S>`` as ``grace_cpu_<S>``,
  ``grace_sysio_<S>``. The driver may create these files on the ACPI device rather than the hwmon
  directory: both are looked in.
* INA-type board sensors (``ina2xx``, ``ina219``, ``ina226``, ``ina238``, ...): each ``powerN_input`` as
  ``<driver>_<K>`` (``_<N>`` added for channels after the first), kind rail: what a rail feeds is not
  known, so it never adds to the total.

An energy counter is a :attr:`Method.COUNTER` channel that the meter wrap-corrects like RAPL's
(wrap at :data:`HWMON_ENERGY_WRAP_UJ`, told from a restart by the device's power bound). A power
reading is integrated over time (:class:`~otel_joules.sensors.integration.PowerIntegral`) and says so:
its domain's method is :attr:`Method.POWER_INTEGRATION` (``energy.<domain>.method`` on spans,
``energy.method`` on metrics). Reads that can stall (a GPU woken from runtime suspend, an ACPI method,
an I2C transfer) are made off the span path (:attr:`Channel.may_block`).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from otel_joules.config import Settings
from otel_joules.errors import SensorReadError
from otel_joules.sensors.base import Breadth, Channel, Discovery, Domain, Method, Unavailable
from otel_joules.sensors.integration import POWER_SAMPLE_PERIOD_S, PowerIntegral
from otel_joules.semconv import KIND_CPU, KIND_GPU, KIND_PLATFORM, KIND_RAIL

#: The kernel prints ``energyN_input`` as a signed 64-bit value: read modulo 2**64, it counts up to this and wraps to 0.
HWMON_ENERGY_WRAP_UJ = 2**64 - 1
#: Microwatts per watt: hwmon's power unit to the integrator's.
UW_PER_W = 1e6
#: The source named on hwmon domains (``otel-joules devices``).
SOURCE_NAME = "hwmon"
#: amd_energy's counters come from the RAPL MSRs, which update about every millisecond.
AMD_ENERGY_UPDATE_PERIOD_S = 0.001
#: Intel GPUs keep energy in a 32-bit register of 2**-14 J units (i915/xe): the driver folds one wrap
#: of it into its 64-bit count at each read, so it must be read before the register wraps twice.
INTEL_GPU_REGISTER_WRAP_J = 2**32 / 2**14
#: Read a counter at least this many times per wrap period (as RAPL's).
_READS_PER_WRAP = 4
#: How often the meter's reader thread reads a hwmon channel off the span path again while spans keep coming:
#: reading more often gains little (an ACPI average changes every interval, an integral every read adds
#: milliseconds) and costs much (each read may wake a GPU, run an ACPI method or an I2C transfer; at NVML's 1 ms
#: an idle program spent 3.5% of a core on one ACPI power meter). Spans' values are up to this old at either end.
HWMON_REREAD_S = 0.01
#: Intel GPUs' energy register changes about every millisecond, but it is read every HWMON_REREAD_S: that is
#: the resolution spans see.
INTEL_GPU_UPDATE_PERIOD_S = HWMON_REREAD_S

#: Drivers read as INA-type board sensors (power per rail).
_INA_NAME = re.compile(r"^ina(\d{3,4}[a-z]?|2xx)$")
_HWMON_DIR = re.compile(r"^hwmon(\d+)$")
_ENERGY_INPUT = re.compile(r"^energy(\d+)_input$")
_POWER_READING = re.compile(r"^power(\d+)_(input|average)$")
_AMD_SOCKET = re.compile(r"^Esocket(\d+)$")
_AMD_CORE = re.compile(r"^Ecore(\d+)$")
_GRACE = re.compile(r"^(Module|Grace|CPU|SysIO) Power Socket (\d+)$")
_I915_GT = re.compile(r"^i915_gt(\d+)$")
#: Per-channel limits (microwatts) that bound a counter's plausible power, best first.
_POWER_BOUNDS = ("rated_max", "crit", "max", "cap_max", "cap")

#: Said with amd_energy's permission problem.
AMD_ENERGY_PERMISSION_REMEDY = (
    "amd_energy's counters are readable by root only since the fix for CVE-2020-12912 (PLATYPUS). Run as root, or "
    "read the same packages through RAPL (powercap), which `otel-joules agent` serves to its group without root; "
    "never make energy counters world-readable: that reopens the side channel."
)


@dataclass(frozen=True)
class HwmonDevice:
    """One ``class/hwmon/hwmonN`` entry: its directory, driver name and device."""

    hwmon: str
    path: Path
    name: str
    device_id: str
    device_parent: str

    def attribute(self, filename: str) -> Path | None:
        """``hwmonN/<filename>``, else ``hwmonN/device/<filename>`` (ACPI power_meter's files sit on its device)."""
        for candidate in (self.path / filename, self.path / "device" / filename):
            if candidate.exists():
                return candidate
        return None

    def channels(self, pattern: re.Pattern[str]) -> dict[int, Path]:
        """Files matching ``pattern`` (its group 1 the channel number) in the hwmon or device directory, by channel."""
        found: dict[int, Path] = {}
        for directory in (self.path / "device", self.path):  # the hwmon directory's own files win
            try:
                names = os.listdir(directory)
            except OSError:
                continue
            for filename in names:
                match = pattern.match(filename)
                if match:
                    found[int(match.group(1))] = directory / filename
        return dict(sorted(found.items()))

    def text(self, filename: str) -> str | None:
        """The stripped text of an attribute, or None."""
        path = self.attribute(filename)
        return None if path is None else _read_text(path)


@dataclass(frozen=True)
class HwmonReading:
    """One file to read as a domain: an energy counter, or a power reading to integrate.

    Attributes:
        domain: The domain it measures.
        path: The ``energyN_input`` or ``powerN_input``/``powerN_average`` file.
        power: True for a power reading (integrated), False for an energy counter.
        may_block: The read may stall (a GPU woken from runtime suspend, ACPI, I2C): read off the span path.
        max_power_watts: The counter's power bound (energy counters only).
        max_read_interval_s: Longest time between two reads of the counter, or None.
    """

    domain: Domain
    path: Path
    power: bool
    may_block: bool
    max_power_watts: float | None = None
    max_read_interval_s: float | None = None


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _open_fd(path: Path) -> int:
    return os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))


def _pread_int(fd: int, what: str) -> int:
    try:
        raw = os.pread(fd, 32, 0)
    except OSError as exc:
        raise SensorReadError(f"{what} could not be read: {exc.strerror}") from exc
    try:
        return int(raw)
    except ValueError:
        reason = "is empty (the device went away?)" if not raw.strip() else f"holds {raw[:20]!r}, not an integer"
        raise SensorReadError(f"{what} {reason}") from None


class HwmonEnergyChannel(Channel):
    """An ``energyN_input`` counter (microjoules), read through a file descriptor kept open."""

    def __init__(
        self, domain: Domain, fd: int, what: str, max_power_watts: float, may_block: bool, max_read_interval_s: float | None
    ) -> None:
        super().__init__(domain)
        self._fd = fd
        self._what = what
        self._max_power_watts = max_power_watts
        self._may_block = may_block
        self._max_read_interval_s = max_read_interval_s

    @property
    def wrap_uj(self) -> int:
        """:data:`HWMON_ENERGY_WRAP_UJ`: the signed value the kernel prints, taken modulo 2**64."""
        return HWMON_ENERGY_WRAP_UJ

    @property
    def max_power_watts(self) -> float:
        """The device's largest power limit (``powerN_rated_max``, ...), else ``OTEL_JOULES_MAX_POWER_WATTS``."""
        return self._max_power_watts

    @property
    def max_read_interval_s(self) -> float | None:
        """For Intel GPUs, a quarter of the time their 32-bit register needs to wrap at full power; else None."""
        return self._max_read_interval_s

    @property
    def may_block(self) -> bool:
        """True for GPUs: a read wakes a runtime-suspended device, which can take many milliseconds."""
        return self._may_block

    @property
    def device_reread_s(self) -> float | None:
        """:data:`HWMON_REREAD_S` for a GPU read off the span path (each read may wake it)."""
        return HWMON_REREAD_S if self._may_block else None

    @property
    def pread_fd(self) -> int | None:
        """The counter's descriptor, where a read is exactly ``int(os.pread(fd, 32, 0))`` (negative values go to :meth:`read_uj`)."""
        return self._fd if self._fd >= 0 and not self._may_block else None

    def read_uj(self) -> int:
        """The counter in microjoules, modulo 2**64."""
        value = _pread_int(self._fd, self._what)
        if value < -(2**63) or value >= 2**64:
            raise SensorReadError(f"{self._what} = {value} is not a 64-bit value")
        return value % 2**64

    def close(self) -> None:
        """Close the file descriptor."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class HwmonPowerChannel(Channel):
    """A ``powerN_input`` or ``powerN_average`` reading (microwatts) integrated over time, as microjoules."""

    def __init__(self, domain: Domain, fd: int, what: str, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(domain)
        self._fd = fd
        self._what = what
        self._clock = clock
        self._integral = PowerIntegral()

    @property
    def max_read_interval_s(self) -> float:
        """The integration step: :data:`~otel_joules.sensors.integration.POWER_SAMPLE_PERIOD_S`."""
        return POWER_SAMPLE_PERIOD_S

    @property
    def may_block(self) -> bool:
        """True: a read may run an ACPI method or an I2C transfer, so the meter reads it off the span path."""
        return True

    @property
    def device_reread_s(self) -> float:
        """:data:`HWMON_REREAD_S`: the reading changes slowly and a read may be costly."""
        return HWMON_REREAD_S

    @property
    def last_power_watts(self) -> float | None:
        """The latest power reading, or None before the first read."""
        return self._integral.last_power_watts

    def energy_uj_now(self) -> int | None:
        """The integral through now, the latest power held since its reading (None before the first read)."""
        return self._integral.energy_uj_at(self._clock())

    def read_uj(self) -> int:
        """Integrated energy so far, in microjoules."""
        power_uw = _pread_int(self._fd, self._what)
        if power_uw < 0:
            raise SensorReadError(f"{self._what} = {power_uw} uW is negative")
        return self._integral.add(power_uw / UW_PER_W, self._clock())

    def close(self) -> None:
        """Close the file descriptor."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def list_devices(sysfs_root: str) -> list[HwmonDevice]:
    """Every ``class/hwmon/hwmonN`` with a ``name``, by N."""
    hwmon_class = Path(sysfs_root) / "class" / "hwmon"
    try:
        entries = os.listdir(hwmon_class)
    except OSError:
        return []
    devices: list[tuple[int, HwmonDevice]] = []
    for entry in entries:
        match = _HWMON_DIR.match(entry)
        path = hwmon_class / entry
        name = _read_text(path / "name") if match else None
        if not match or name is None:
            continue
        device = path / "device"
        resolved = device.resolve() if device.exists() else None
        device_id = resolved.name if resolved is not None else entry
        parent = resolved.parent.name if resolved is not None else ""
        devices.append((int(match.group(1)), HwmonDevice(entry, path, name, device_id, parent)))
    return [device for _, device in sorted(devices, key=lambda pair: pair[0])]


def _power_bound_watts(device: HwmonDevice) -> float | None:
    """The largest power limit of any channel of the device, in watts (the meter's wrap and jump bound)."""
    best_uw = 0
    for suffix in _POWER_BOUNDS:
        for path in device.channels(re.compile(rf"^power(\d+)_{suffix}$")).values():
            text = _read_text(path)
            if text and text.isdigit():
                best_uw = max(best_uw, int(text))
    return best_uw / UW_PER_W if best_uw > 0 else None


def _label(device: HwmonDevice, kind: str, channel: int) -> str | None:
    return device.text(f"{kind}{channel}_label")


def _hw_id(device: HwmonDevice, kind: str, channel: int) -> str:
    """A stable ``hw.id``: the device's sysfs name and the channel (``hwmonN`` numbers change between boots)."""
    return f"{device.device_id}/{kind}{channel}"


def _average_interval_s(device: HwmonDevice, channel: int) -> float:
    """How often a ``powerN_average`` changes (its interval), at least the integration step."""
    text = device.text(f"power{channel}_average_interval")
    if text and text.isdigit() and int(text) > 0:
        return max(int(text) / 1000.0, POWER_SAMPLE_PERIOD_S)
    return POWER_SAMPLE_PERIOD_S


def _power_file(device: HwmonDevice, channel: int) -> Path | None:
    """Channel ``channel``'s power reading: ``powerN_input`` (instantaneous), else ``powerN_average``."""
    return device.attribute(f"power{channel}_input") or device.attribute(f"power{channel}_average")


def _socket_of_cpu(sysfs_root: str, cpu: int) -> int | None:
    text = _read_text(Path(sysfs_root) / "devices" / "system" / "cpu" / f"cpu{cpu}" / "topology" / "physical_package_id")
    return int(text) if text is not None and text.isdigit() else None


def _amd_energy(device: HwmonDevice, settings: Settings) -> list[HwmonReading]:
    """Sockets (``package_<S>``, adding to the total) and cores (``amd_core_<N>``, inside their socket)."""
    bound = _power_bound_watts(device) or settings.max_power_watts
    labelled = [(n, path, _label(device, "energy", n) or "") for n, path in device.channels(_ENERGY_INPUT).items()]
    socket_ids = {int(m.group(1)): _hw_id(device, "energy", n) for n, _, label in labelled if (m := _AMD_SOCKET.match(label))}
    readings: list[HwmonReading] = []
    for channel, path, label in labelled:
        socket = _AMD_SOCKET.match(label)
        core = _AMD_CORE.match(label)
        if socket:
            number = int(socket.group(1))
            domain = Domain(
                id=f"package_{number}", kind=KIND_CPU, hw_name=f"AMD socket {number} (amd_energy)",
                hw_id=_hw_id(device, "energy", channel), update_period_s=AMD_ENERGY_UPDATE_PERIOD_S,
                source=f"{SOURCE_NAME} amd_energy", covers=f"CPU socket {number}: its cores and the rest of the package",
            )
        elif core:
            number = int(core.group(1))
            cpu_socket = _socket_of_cpu(settings.sysfs_root, number)
            if cpu_socket is None and len(socket_ids) == 1:
                cpu_socket = next(iter(socket_ids))
            # The socket's counter when known; else the amd_energy device, never nothing: a core is always inside something.
            parent = socket_ids.get(cpu_socket, device.device_id) if cpu_socket is not None else device.device_id
            domain = Domain(
                id=f"amd_core_{number}", kind=KIND_CPU, hw_name=f"AMD core {number} (amd_energy)",
                hw_id=_hw_id(device, "energy", channel), in_total=False, update_period_s=AMD_ENERGY_UPDATE_PERIOD_S,
                hw_parent=parent, source=f"{SOURCE_NAME} amd_energy", covers=f"core {number} (inside its socket's package)",
            )
        else:
            continue
        readings.append(HwmonReading(domain, path, power=False, may_block=False, max_power_watts=bound))
    return readings


def _intel_gpu(device: HwmonDevice, number: int, card_hw_id: str | None, settings: Settings) -> list[HwmonReading]:
    """An xe or i915 card (``intel_gpu_<G>``), its package and GTs inside it."""
    bound = _power_bound_watts(device) or settings.max_power_watts
    interval_s = INTEL_GPU_REGISTER_WRAP_J / bound / _READS_PER_WRAP
    source = f"{SOURCE_NAME} {device.name}"
    readings: list[HwmonReading] = []
    gt = _I915_GT.match(device.name)
    for channel, path in device.channels(_ENERGY_INPUT).items():
        label = (_label(device, "energy", channel) or "").lower()
        hw_id = _hw_id(device, "energy", channel)
        if gt:
            domain = Domain(
                id=f"intel_gpu_{number}_gt{gt.group(1)}", kind=KIND_GPU, hw_name=f"Intel GPU {number} GT {gt.group(1)} ({device.name})",
                hw_id=hw_id, in_total=card_hw_id is None, update_period_s=INTEL_GPU_UPDATE_PERIOD_S, hw_parent=card_hw_id,
                source=source, covers=f"graphics tile {gt.group(1)} (inside the card)",
            )
        elif label == "pkg" or (not label and channel == 2 and device.name == "xe"):
            inside = card_hw_id is not None
            domain = Domain(
                id=f"intel_gpu_{number}_pkg", kind=KIND_GPU, hw_name=f"Intel GPU {number} package ({device.name})",
                hw_id=hw_id, in_total=not inside, update_period_s=INTEL_GPU_UPDATE_PERIOD_S,
                hw_parent=card_hw_id if inside else None, source=source, covers="the GPU package (inside the card)",
            )
        elif label == "card" or (not label and channel == 1):
            domain = Domain(
                id=f"intel_gpu_{number}", kind=KIND_GPU, hw_name=f"Intel GPU {number} ({device.name}, {device.device_id})",
                hw_id=hw_id, update_period_s=INTEL_GPU_UPDATE_PERIOD_S, source=source,
                covers="the whole card: GPU package, memory and board",
            )
        else:
            continue
        readings.append(HwmonReading(domain, path, power=False, may_block=True, max_power_watts=bound, max_read_interval_s=interval_s))
    return readings


def _card_channel(device: HwmonDevice) -> int | None:
    """The channel of an xe/i915 device that measures the whole card."""
    for channel in device.channels(_ENERGY_INPUT):
        label = (_label(device, "energy", channel) or "").lower()
        if label == "card" or (not label and channel == 1):
            return channel
    return None


def _power_meter(device: HwmonDevice, number: int, grace_ids: dict[int, str]) -> list[HwmonReading]:
    """An ACPI power meter's ``power1_average``: the whole platform, or one of NVIDIA Grace's sensors."""
    path = _power_file(device, 1)
    if path is None:
        return []
    oem = _GRACE.match(device.text("power1_oem_info") or "")
    hw_id = _hw_id(device, "power", 1)
    update_s = _average_interval_s(device, 1)
    source = f"{SOURCE_NAME} power_meter"
    method = Method.POWER_INTEGRATION
    if oem is None:
        domain = Domain(
            id=f"power_meter_{number}", kind=KIND_PLATFORM, hw_name=f"ACPI power meter {number} ({device.device_id})",
            hw_id=hw_id, method=method, update_period_s=update_s, source=source,
            covers="the whole platform (what the ACPI power meter measures: usually the power supply's input)",
            breadth=Breadth.POWER_METER,
        )
    else:
        part, socket = oem.group(1), int(oem.group(2))
        name = f"NVIDIA Grace {part} Power Socket {socket}"
        if part == "Module":
            domain = Domain(
                id=f"grace_module_{socket}", kind=KIND_PLATFORM, hw_name=name, hw_id=hw_id, method=method,
                update_period_s=update_s, source=f"{source} (NVIDIA Grace)",
                covers=f"superchip module {socket}: Grace CPU, its memory and the Hopper GPU", breadth=Breadth.MODULE,
            )
        elif part == "Grace":
            domain = Domain(
                id=f"grace_{socket}", kind=KIND_CPU, hw_name=name, hw_id=hw_id, method=method,
                update_period_s=update_s, source=f"{source} (NVIDIA Grace)", covers=f"Grace CPU socket {socket} with its memory",
            )
        else:
            parent = grace_ids.get(socket)
            domain = Domain(
                id=f"grace_{part.lower()}_{socket}", kind=KIND_CPU, hw_name=name, hw_id=hw_id, method=method,
                in_total=parent is None, update_period_s=update_s, hw_parent=parent, source=f"{source} (NVIDIA Grace)",
                covers=f"the {part} rail of Grace socket {socket}" + (" (inside the socket's reading)" if parent else ""),
            )
    return [HwmonReading(domain, path, power=True, may_block=True)]


def _ina(device: HwmonDevice, number: int) -> list[HwmonReading]:
    """Each power channel of an INA-type sensor, as a rail (never in the total)."""
    readings = []
    for channel in sorted({n for n, _ in _power_channels(device)}):
        path = _power_file(device, channel)
        if path is None:
            continue
        label = _label(device, "power", channel) or _label(device, "in", channel)
        domain_id = f"{device.name}_{number}" + (f"_{channel}" if channel != 1 else "")
        domain = Domain(
            id=domain_id, kind=KIND_RAIL, hw_name=f"{device.name} {device.device_id}" + (f" {label}" if label else ""),
            hw_id=_hw_id(device, "power", channel), method=Method.POWER_INTEGRATION, in_total=False,
            update_period_s=POWER_SAMPLE_PERIOD_S,
            # A rail is inside the board it sits on: its bus names it (``hw.parent``).
            hw_parent=device.device_parent or device.device_id, source=f"{SOURCE_NAME} {device.name}",
            covers="one board power rail" + (f" ({label})" if label else "") + ": what it feeds is not known, so it is not added",
        )
        readings.append(HwmonReading(domain, path, power=True, may_block=True))
    return readings


def _power_channels(device: HwmonDevice) -> list[tuple[int, Path]]:
    return list(device.channels(_POWER_READING).items())


def _readings(devices: list[HwmonDevice], settings: Settings, found: Discovery) -> list[HwmonReading]:
    """What to read on each known device; an unknown one with energy or power readings is said, not read."""
    readings: list[HwmonReading] = []
    intel_cards = [d for d in devices if d.name in ("xe", "i915")]
    card_ids = {d.device_id: (i, d) for i, d in enumerate(sorted(intel_cards, key=lambda d: d.device_id))}
    meters = [d for d in devices if d.name == "power_meter"]
    grace_ids: dict[int, str] = {}
    for meter in meters:
        oem = _GRACE.match(meter.text("power1_oem_info") or "")
        if oem and oem.group(1) == "Grace":
            grace_ids[int(oem.group(2))] = _hw_id(meter, "power", 1)
    plain_meters = 0
    ina_counts: dict[str, int] = {}
    for device in devices:
        if device.name == "amd_energy":
            readings += _amd_energy(device, settings)
        elif device.name in ("xe", "i915"):
            number = card_ids[device.device_id][0]
            readings += _intel_gpu(device, number, None, settings)
        elif _I915_GT.match(device.name):
            card = card_ids.get(device.device_id)
            if card is None:
                found.unavailable.append(Unavailable(f"hwmon {device.name} ({device.hwmon})", "its i915 card has no hwmon entry", ""))
                continue
            card_channel = _card_channel(card[1])
            card_hw_id = _hw_id(card[1], "energy", card_channel) if card_channel is not None else None
            readings += _intel_gpu(device, card[0], card_hw_id, settings)
        elif device.name == "power_meter":
            is_grace = _GRACE.match(device.text("power1_oem_info") or "") is not None
            readings += _power_meter(device, plain_meters, grace_ids)
            plain_meters += 0 if is_grace else 1
        elif _INA_NAME.match(device.name):
            readings += _ina(device, ina_counts.get(device.name, 0))
            ina_counts[device.name] = ina_counts.get(device.name, 0) + 1
        elif device.channels(_ENERGY_INPUT) or _power_channels(device):
            found.unavailable.append(
                Unavailable(
                    f"hwmon {device.name} ({device.hwmon})",
                    "has energy or power readings, but otel-joules does not know what this driver's readings cover, "
                    "so they are not read (nothing is counted twice)",
                )
            )
    # xe/i915 package and GT readings sit inside their card: parent them now that every card is known.
    return _parent_intel_packages(readings)


def _parent_intel_packages(readings: list[HwmonReading]) -> list[HwmonReading]:
    cards = {r.domain.id: r.domain.hw_id for r in readings if r.domain.id.startswith("intel_gpu_") and r.domain.id.count("_") == 2}
    out = []
    for reading in readings:
        domain = reading.domain
        if domain.id.endswith("_pkg") and domain.hw_parent is None:
            card = cards.get(domain.id[: -len("_pkg")])
            if card is not None:
                reading = replace(reading, domain=replace(domain, in_total=False, hw_parent=card))
        out.append(reading)
    return out


def _open(reading: HwmonReading, found: Discovery) -> Channel | None:
    what = f"{reading.domain.id} ({reading.path})"
    try:
        fd = _open_fd(reading.path)
    except PermissionError:
        remedy = AMD_ENERGY_PERMISSION_REMEDY if "amd_energy" in reading.domain.source else (
            "run as a user who may read it; never make energy or power readings world-readable to get there"
        )
        found.unavailable.append(Unavailable(what, f"{reading.path.name} is not readable by this user", remedy))
        return None
    except OSError as exc:
        found.unavailable.append(Unavailable(what, f"{reading.path.name} cannot be opened: {exc.strerror}"))
        return None
    channel: Channel
    if reading.power:
        channel = HwmonPowerChannel(reading.domain, fd, str(reading.path))
    else:
        channel = HwmonEnergyChannel(
            reading.domain, fd, str(reading.path), reading.max_power_watts or 0.0, reading.may_block, reading.max_read_interval_s
        )
    try:
        channel.read_uj()
    except SensorReadError as exc:
        channel.close()
        found.unavailable.append(Unavailable(what, str(exc)))
        return None
    return channel


def discover(settings: Settings) -> Discovery:
    """Every readable energy counter and power reading of the drivers this module knows, under ``settings.sysfs_root``.

    Never raises for a missing, locked or broken file: those are in ``Discovery.unavailable`` with the
    reason (and the remedy where there is one). No ``class/hwmon`` at all is not news (most machines have
    no power sensor there): the discovery is empty.
    """
    found = Discovery()
    readings = _readings(list_devices(settings.sysfs_root), settings, found)
    seen: set[str] = set()
    for reading in readings:
        if reading.domain.id in seen:
            found.unavailable.append(Unavailable(reading.domain.id, f"a second reading of it ({reading.path}) is not read"))
            continue
        channel = _open(reading, found)
        if channel is not None:
            seen.add(reading.domain.id)
            found.channels.append(channel)
    return found
