"""The contract between sensors and the meter.

A sensor finds *channels*; each channel measures one energy *domain* (``package_0``,
``dram_0``, ``nvidia_gpu_1``, ...) and exposes it as a cumulative counter in
microjoules that may wrap at a known range. Everything hardware-specific (file
descriptors, NVML handles, unit conversions from mJ or mW) stays inside the
channel; the meter only sees integers of microjoules, so there is exactly one
place where units are converted for each kind of hardware.
"""

from __future__ import annotations

import abc
import enum
from dataclasses import dataclass, field
from typing import Any, Iterable

from otel_joules.semconv import KIND_CPU, KIND_GPU, KIND_MEMORY, KIND_PLATFORM, KIND_RAIL, SOURCE_ESTIMATE


class HardwareType(str, enum.Enum):
    """``hw.type`` of the OpenTelemetry hardware semantic conventions, derived from a domain's kind (:data:`HW_TYPES`)."""

    # The kinds' names (semconv), so a domain's hw.type is its kind's name where the conventions have one.
    CPU = KIND_CPU
    MEMORY = KIND_MEMORY
    GPU = KIND_GPU
    #: psys: the whole platform (SoC and more). The conventions have no "platform"
    #: type; "enclosure" is their name for the whole box.
    PLATFORM = "enclosure"
    #: A board's power rail (INA-type sensor): the conventions' name for what supplies power.
    RAIL = "power_supply"


#: The ``hw.type`` of each domain kind; its keys are the kinds a :class:`Domain` may have.
HW_TYPES: dict[str, HardwareType] = {
    KIND_CPU: HardwareType.CPU,
    KIND_MEMORY: HardwareType.MEMORY,
    KIND_GPU: HardwareType.GPU,
    KIND_PLATFORM: HardwareType.PLATFORM,
    KIND_RAIL: HardwareType.RAIL,
}


class Breadth(enum.IntEnum):
    """How much of the box a whole-platform reading (kind platform) covers, broadest first: where several are read,
    the broadest is the host's, and each narrower one is inside it. Set by the sensor that reads it, so nothing
    downstream tells readings apart by their ids."""

    #: The power supplies' input, the whole box: a BMC's reading (Redfish, IPMI DCMI).
    BMC = 0
    #: An ACPI power meter (hwmon ``power_meter``): usually the supplies' input too, as the firmware measures it.
    POWER_METER = 1
    #: One module of a superchip (hwmon NVIDIA Grace): its CPU, memory and GPU, not the rest of the board.
    MODULE = 2
    #: RAPL's psys: the SoC platform, the narrowest.
    SOC = 3
    #: Not a whole-platform reading (every other kind).
    NONE = 4


class Method(str, enum.Enum):
    """How a domain's joules are obtained; decides ``energy.source`` on spans."""

    #: A hardware energy counter (RAPL ``energy_uj``, NVML total energy).
    COUNTER = "counter"
    #: A hardware power sensor integrated over time by the meter's sampler.
    POWER_INTEGRATION = "power_integration"
    #: A model (CPU time x per-CPU watts, memory size x W/GB): not a measurement. The same word as
    #: ``energy.source``'s estimate (defined once, in semconv): an estimated domain reads
    #: ``estimate`` in both attributes.
    ESTIMATE = SOURCE_ESTIMATE

    @property
    def is_measurement(self) -> bool:
        """True for readings from hardware, False for model estimates."""
        return self is not Method.ESTIMATE


@dataclass(frozen=True)
class Domain:
    """Static description of one measured energy domain.

    Attributes:
        id: Domain id as pyJoules names it (``package_0``, ``dram_0``, ``psys``,
            ``nvidia_gpu_0``) or ``cpu_estimate``/``memory_estimate``.
        kind: What the domain measures, one of :data:`HW_TYPES`' keys (semconv ``KIND_CPU``,
            ``KIND_MEMORY``, ``KIND_GPU``, ``KIND_PLATFORM``): the one classification of hardware
            that ``hw.type``, the attribution kinds and ``energy.domain_kinds`` are derived from.
        hw_name: Human-readable name (``hw.name``), e.g. the GPU's product name.
        hw_id: Stable identifier (``hw.id``), e.g. the powercap zone path or GPU UUID.
        method: Counter, integrated power or estimate.
        in_total: Whether the domain adds to ``energy.joules``. Core and uncore sit
            inside their package and psys covers the whole platform, so they are
            reported but not added (psys is added only where no package exists).
        update_period_s: How often the underlying counter changes; spans shorter than
            this are flagged as below the counter's resolution. For a count of coarse
            steps (the estimator's CPU time, 10 ms ticks) it is the interval over which
            one step stays under 10% (ten ticks), not the step itself.
        hw_parent: ``hw.parent``: the ``hw_id`` of the domain this one sits inside (a core
            zone's package zone), if any.
        via_agent: Read through ``otel-joules agent`` (``energy.agent.domains`` on spans), because this
            user may not read the counter itself.
        source: Where the reading comes from, in words (``RAPL (powercap)``, ``hwmon amd_energy``, ``NVML``), for
            ``otel-joules devices``.
        covers: What hardware the reading covers, in words (``CPU package 0: cores, caches, uncore``), for
            ``otel-joules devices``.
        estimate_source: For an estimate: the model and its reference data (``ccf:cascade_lake``,
            ``tdp:skylake``, ``memory:0.375_w_per_gb``), ``energy.estimate.source`` on spans; '' for a measurement.
        estimate_band: For an estimate: the low and high ends of its uncertainty band as factors on its joules
            (``energy.estimate.low.joules``, ``...high.joules``); (1.0, 1.0) for a measurement.
        estimate_static_watts: For a CPU estimate: the watts its model draws whatever the load (every logical CPU's
            idle watts), the static baseline that attribution then need not learn; 0.0 otherwise.
        vendor: ``hw.vendor``: the device's manufacturer (semconv ``VENDOR_AMD``, ``VENDOR_NVIDIA``), or empty
            where the sensor does not know it.
        breadth: For a whole-platform reading: how much of the box it covers (:class:`Breadth`), which ranks the
            platform readings and names the host's (``energy.platform.domain`` on spans); ``Breadth.NONE`` for the
            other kinds.
    """

    id: str
    kind: str
    hw_name: str
    hw_id: str
    method: Method = Method.COUNTER
    in_total: bool = True
    update_period_s: float = 0.001
    hw_parent: str | None = None
    via_agent: bool = False
    source: str = ""
    covers: str = ""
    estimate_source: str = ""
    estimate_band: tuple[float, float] = (1.0, 1.0)
    estimate_static_watts: float = 0.0
    vendor: str = ""
    breadth: Breadth = Breadth.NONE

    def __post_init__(self) -> None:
        if self.kind not in HW_TYPES:
            raise ValueError(f"domain {self.id!r}: kind {self.kind!r} is not one of {sorted(HW_TYPES)}; pass a semconv KIND_* value")
        if not self.estimate_band[0] <= 1.0 <= self.estimate_band[1]:
            raise ValueError(f"domain {self.id!r}: estimate band {self.estimate_band} does not hold the estimate itself (1.0)")
        if (self.kind == KIND_PLATFORM) != (self.breadth is not Breadth.NONE):
            raise ValueError(
                f"domain {self.id!r}: a whole-platform reading (kind {KIND_PLATFORM!r}) and only one has a breadth; "
                f"got kind {self.kind!r} with {self.breadth!r}"
            )
        if self.kind == KIND_RAIL and self.in_total:
            raise ValueError(f"domain {self.id!r}: a rail's coverage is unknown, so it cannot add to the total")

    @property
    def hw_type(self) -> HardwareType:
        """``hw.type`` for metrics, from the kind (platform reads ``enclosure``)."""
        return HW_TYPES[self.kind]


def domain_kinds(domains: Iterable[Domain]) -> tuple[str, ...]:
    """``energy.domain_kinds``'s value: the domains that add to the total with their kind, a string array
    (``("package_0:cpu", "dram_0:memory")``)."""
    return tuple(f"{d.id}:{d.kind}" for d in domains if d.in_total)


def parse_domain_kinds(value: object) -> dict[str, str] | None:
    """``{domain id: kind}`` from an ``energy.domain_kinds`` value: the array :func:`domain_kinds` makes, or the
    space-separated string older exports carry; an entry without a kind is skipped. None for any other value."""
    if isinstance(value, str):
        entries: list[object] = list(value.split())
    elif isinstance(value, (list, tuple)):
        entries = list(value)
    else:
        return None
    kinds: dict[str, str] = {}
    for entry in entries:
        if not isinstance(entry, str):
            continue
        domain_id, _, kind = entry.rpartition(":")
        if domain_id and kind:
            kinds[domain_id] = kind
    return kinds


@dataclass(frozen=True)
class Unavailable:
    """A domain that was found but cannot be measured, with the reason and the remedy."""

    what: str
    reason: str
    remedy: str = ""


class Channel(abc.ABC):
    """One domain's cumulative energy counter, in microjoules.

    Subclasses read their hardware in :meth:`read_uj`. The meter calls it under its
    own lock, so channels need no locking of their own.
    """

    def __init__(self, domain: Domain) -> None:
        self.domain = domain

    @property
    def wrap_uj(self) -> int | None:
        """Value at which the counter wraps back to 0, or None if it never wraps."""
        return None

    @property
    def max_read_interval_s(self) -> float | None:
        """Longest time allowed between two reads, or None if any interval is safe.

        For a wrapping counter: the time the counter needs to wrap at the highest
        power the hardware can draw (with a margin). For an integrated power sensor:
        the integration step that keeps the result accurate.
        """
        return None

    @property
    def max_power_watts(self) -> float | None:
        """The most power this domain can draw, or None if unknown.

        The meter uses it to tell a counter that wrapped from one that restarted (driver
        reload, suspend/resume): a wrap implying more energy than this power over the
        time between two reads allows was a restart.
        """
        return None

    @property
    def may_block(self) -> bool:
        """True when a read calls into a device library that can stall (NVML on a GPU falling off the bus).

        The meter then reads the channel off the span path with a deadline
        (:data:`otel_joules.meter.channels.DEVICE_READ_DEADLINE_S`) instead of inline.
        """
        return False

    @property
    def device_reread_s(self) -> float | None:
        """For a channel that :attr:`may_block`: how often its reader thread reads again while snapshots keep
        asking, or None for the meter's cadence: half the counter's update period, learned from its readings
        (NVML's: about 50 ms).

        A sensor whose reading changes far less often (an ACPI power meter's average) or whose read costs
        (waking a GPU, an I2C transfer) says so here, so an idle program does not read it a thousand times a
        second; spans' values are then up to this old at either end (late, not lost).
        """
        return None

    def energy_uj_now(self) -> int | None:
        """For a power reading integrated per read (:attr:`Method.POWER_INTEGRATION`): the integral through now,
        the latest power held since its reading, in :meth:`read_uj`'s microjoules; None for a counter.

        A channel read off the span path is read every :attr:`device_reread_s` or so: a counter's value
        at a span's end is at most that late, but an integral can say how much more has been spent since,
        and does (:class:`~otel_joules.sensors.integration.PowerIntegral`). Never blocks: no device is read.
        """
        return None

    @property
    def may_be_away(self) -> bool:
        """True when the channel's source can go away and come back (the agent): :meth:`read_uj` then returns None.

        None is not a failure: the meter leaves the domain out, lets its standby estimates stand in
        (labelled ``estimate``) and measures the domain again as soon as a read returns a value.
        """
        return False

    @property
    def pread_fd(self) -> int | None:
        """A file descriptor whose first bytes are the counter in decimal microjoules, or None.

        Where a channel is exactly "``int(os.pread(fd, 32, 0))``, within 0..:attr:`wrap_uj`" (a
        powercap ``energy_uj``), the meter reads that descriptor inline instead of calling
        :meth:`read_uj`: a snapshot reads every counter twice per span, and the call is a
        sizeable part of each read. Any doubt (an error, a value out of range) goes to
        :meth:`read_uj`, which says what is wrong.
        """
        return None

    @property
    def shared_reading(self) -> tuple[Any, int] | None:
        """``(source, position)`` where this channel's counter is one value of a reading several channels share,
        or None (read through :meth:`read_uj`).

        ``source.current()`` returns the reading's raw values (None while its source is away), and this channel's
        counter is the one at ``position``: a snapshot then takes one reading for all such channels instead of a
        :meth:`read_uj` each. Any doubt (no value at ``position``, a value out of range) goes to :meth:`read_uj`,
        which says what is wrong; a None reading is the source away, as :meth:`read_uj` returning None.
        """
        return None

    @abc.abstractmethod
    def read_uj(self) -> int:
        """Return the counter's current value in microjoules.

        Raises:
            SensorReadError: the value cannot be read or is garbage.
            DeviceLostError: the device is gone for good.
        """

    def reset_after_fork(self) -> None:
        """Re-acquire handles that are not valid in a forked child (NVML). Default: nothing."""

    def close(self) -> None:
        """Release file descriptors and library handles. Default: nothing."""


@dataclass
class Discovery:
    """What one sensor found: the channels it can read and what it could not."""

    channels: list[Channel] = field(default_factory=list)
    unavailable: list[Unavailable] = field(default_factory=list)
