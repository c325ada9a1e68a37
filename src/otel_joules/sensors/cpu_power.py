"""Which CPU power model the estimator uses, and why: the CPU from ``/proc/cpuinfo``, a VM from DMI.

Where nothing can be read, a CPU's energy is modelled per hardware thread (vCPU): each draws its idle watts
while it exists and up to its full-load watts while busy, interpolated by utilisation, as Cloud Carbon
Footprint does (``data/ccf_cpu_power.csv``: its per-microarchitecture and per-cloud figures, Apache-2.0).

- On a VM or cloud instance (DMI's vendor or product names a hypervisor or cloud, or ``/proc/cpuinfo`` has
  the ``hypervisor`` flag) the per-vCPU figures are the model (``ccf:<architecture>``): dividing a whole
  CPU's TDP by a VM's vCPUs would charge each vCPU a physical core's share of a socket it does not own.
- On bare metal with a CPU whose architecture is known, a TDP-style model (``tdp:<architecture>``): full load
  is ``OTEL_JOULES_CPU_TDP_WATTS`` / logical CPUs, idle that times the architecture's idle/full ratio.
- Where the architecture is not known (a model name the hypervisor hides, a newer CPU), the figures of every
  architecture it may be (its family, else all) give the band, and the cloud's fleet average (``ccf:aws``), else
  the candidates' mean (``ccf:amd_epyc``, ``ccf:any``), the value.

Every model carries an uncertainty band as two factors on its joules (:attr:`CpuPowerModel.low_factor`,
:attr:`~CpuPowerModel.high_factor`): the spread of the candidate architectures' figures, widened by the
held-out error against an independent reference (``benchmarks/estimate_error.py``, docs/estimates.md).
"""

from __future__ import annotations

import csv
import functools
import io
import os
import re
from dataclasses import dataclass

#: The reference data's file, in ``otel_joules/sensors/data``.
REFERENCE_FILE = "ccf_cpu_power.csv"
#: ``source`` prefixes: Cloud Carbon Footprint's per-vCPU figures, or a TDP-style model.
SOURCE_CCF = "ccf"
SOURCE_TDP = "tdp"
#: ``ccf:any``: no architecture, family or cloud known: the mean over every architecture.
ANY_ARCHITECTURE = "any"
#: The reference's per-thread idle and full-load watts over the independent reference's, at their extremes over
#: the held-out CPUs (``python -m benchmarks.estimate_error``; a test checks the benchmark still finds these):
#: the model's value times these bounds the reference's.
HELD_OUT_LOW_RATIO = 0.2
HELD_OUT_HIGH_RATIO = 2.15

#: DMI files (under ``<sysfs>/class/dmi/id``) that name a machine's maker and product.
DMI_FILES = ("sys_vendor", "product_name", "board_vendor", "bios_vendor", "chassis_vendor")
#: Words in those files that say the machine is virtual, and the cloud they name (None: a hypervisor only).
_VIRTUAL_MARKERS: tuple[tuple[str, str | None], ...] = (
    ("amazon ec2", "aws"),
    ("google compute engine", "gcp"),
    ("google", "gcp"),
    ("microsoft corporation virtual machine", "azure"),
    ("virtual machine", None),
    ("qemu", None),
    ("kvm", None),
    ("vmware", None),
    ("virtualbox", None),
    ("innotek", None),
    ("xen", None),
    ("openstack", None),
    ("bochs", None),
    ("parallels", None),
    ("digitalocean", None),
    ("hetzner", None),
    ("alibaba cloud", None),
    ("oraclecloud", None),
)


@dataclass(frozen=True)
class ReferenceRow:
    """One row of the reference data: watts per vCPU at idle and at full load.

    Attributes:
        key: ``cascade_lake``, ``amd_epyc_2nd_gen``, ``aws`` (a provider row).
        kind: ``architecture`` or ``provider``.
        family: Architectures a CPU name may hide between (``intel``, ``amd_epyc``); empty for providers.
        name: The architecture or fleet, in words.
        min_watts: Watts per vCPU at idle.
        max_watts: Watts per vCPU at full load.
    """

    key: str
    kind: str
    family: str
    name: str
    min_watts: float
    max_watts: float


@functools.lru_cache(maxsize=1)
def reference() -> dict[str, ReferenceRow]:
    """The shipped reference data (``data/ccf_cpu_power.csv``) by key."""
    # A plain open beside this module, not importlib.resources: its readers are imported lazily, which fails in a
    # process that has dropped privileges since (a service switching to its user after importing otel_joules).
    with open(os.path.join(os.path.dirname(__file__), "data", REFERENCE_FILE), encoding="utf-8") as f:
        text = f.read()
    rows: dict[str, ReferenceRow] = {}
    for raw in csv.DictReader(io.StringIO("".join(line for line in text.splitlines(True) if not line.startswith("#")))):
        row = ReferenceRow(
            raw["key"], raw["kind"], raw["family"], raw["name"],
            float(raw["min_watts_per_vcpu"]), float(raw["max_watts_per_vcpu"]),
        )
        # A broken packaged file is a packaging bug: fail loudly, naming the row.
        if row.key in rows or row.kind not in ("architecture", "provider") or not 0 < row.min_watts < row.max_watts < 1000:
            raise RuntimeError(f"{REFERENCE_FILE}: bad or duplicate row {raw!r}")
        rows[row.key] = row
    return rows


@dataclass(frozen=True)
class Machine:
    """What the estimator knows of this machine's CPU and whether it is virtual.

    Attributes:
        cpu_name: ``model name`` of ``/proc/cpuinfo``'s first processor ('' when absent).
        cpu_part: ``CPU part`` (Arm) of the same, '' when absent.
        virtual: A hypervisor or cloud was found.
        provider: ``aws``, ``gcp``, ``azure`` where DMI names the cloud, else None.
        evidence: What said so, in words (``DMI sys_vendor 'Amazon EC2'``, ``the cpuinfo hypervisor flag``).
    """

    cpu_name: str
    cpu_part: str
    virtual: bool
    provider: str | None
    evidence: str


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def detect_machine(sysfs_root: str, procfs_root: str) -> Machine:
    """Read ``<procfs_root>/cpuinfo`` and ``<sysfs_root>/class/dmi/id/*``; files that are absent or unreadable say nothing."""
    cpuinfo = _read_text(os.path.join(procfs_root, "cpuinfo"))
    first = cpuinfo.split("\n\n", 1)[0]
    fields: dict[str, str] = {}
    for line in first.splitlines():
        name, sep, value = line.partition(":")
        if sep:
            fields.setdefault(name.strip().lower(), value.strip())
    flags = fields.get("flags", "").split()
    evidence = ""
    provider: str | None = None
    virtual = False
    for dmi_file in DMI_FILES:
        value = _read_text(os.path.join(sysfs_root, "class", "dmi", "id", dmi_file)).strip()
        lowered = value.lower()
        for marker, cloud in _VIRTUAL_MARKERS:
            if marker in lowered:
                virtual = True
                evidence = evidence or f"DMI {dmi_file} {value!r}"
                provider = provider or cloud
                break
    if not virtual and "hypervisor" in flags:
        virtual, evidence = True, "the hypervisor flag in cpuinfo"
    return Machine(fields.get("model name", ""), fields.get("cpu part", ""), virtual, provider, evidence or "no hypervisor found")


_XEON_SCALABLE = re.compile(r"xeon\(r\)\s+(?:cpu\s+)?(?:platinum|gold|silver|bronze)\s+\d(\d)\d\d", re.I)
_XEON_E5_E7 = re.compile(r"\be[57]-\d{4}[a-z]?\b(?:\s*v(\d))?", re.I)
_XEON_E3 = re.compile(r"\be3-\d{4}[a-z]?\b(?:\s*v(\d))?", re.I)
_XEON_E = re.compile(r"xeon\(r\)\s+(?:cpu\s+)?e-2[12]\d\d", re.I)
_CORE = re.compile(r"core\(tm\)\s+i[3579]-(\d{4,5})", re.I)
_EPYC = re.compile(r"epyc\s+7\w\w(\d)\b", re.I)
#: QEMU/KVM CPU model names (``Intel Xeon Processor (Cascadelake)``, ``AMD EPYC-Rome Processor``).
_QEMU_NAMES = {
    "sandybridge": "sandy_bridge", "ivybridge": "ivy_bridge", "haswell": "haswell", "broadwell": "broadwell",
    "skylake": "skylake", "cascadelake": "cascade_lake", "epyc-rome": "amd_epyc_2nd_gen", "epyc-milan": "amd_epyc_3rd_gen",
}
_QEMU_NAME = re.compile(r"\b(sandybridge|ivybridge|haswell|broadwell|skylake|cascadelake|epyc-rome|epyc-milan)\b", re.I)
_SCALABLE_GENERATIONS = {"1": "skylake", "2": "cascade_lake"}
_E5_VERSIONS = {None: "sandy_bridge", "2": "ivy_bridge", "3": "haswell", "4": "broadwell"}
_E3_VERSIONS = {None: "sandy_bridge", "2": "ivy_bridge", "3": "haswell", "4": "broadwell", "5": "skylake"}
_CORE_GENERATIONS = {"2": "sandy_bridge", "3": "ivy_bridge", "4": "haswell", "5": "broadwell", "6": "skylake", "8": "coffee_lake", "9": "coffee_lake"}
_EPYC_GENERATIONS = {"1": "amd_epyc_1st_gen", "2": "amd_epyc_2nd_gen", "3": "amd_epyc_3rd_gen"}
#: Arm ``CPU part`` numbers: Neoverse N1 (AWS Graviton2, also Ampere Altra).
_ARM_PARTS = {"0xd0c": "aws_graviton2"}


def architecture_of(cpu_name: str, cpu_part: str = "") -> tuple[str | None, str | None]:
    """``(architecture key, family)`` of a CPU from its ``model name`` (and Arm ``CPU part``).

    The architecture is None where the name does not tell it (``AMD EPYC`` as some hypervisors report it, an
    Ice Lake or newer part without reference figures); the family (``intel``, ``amd_epyc``) is then what is known.
    """
    name = cpu_name.lower()
    match = _QEMU_NAME.search(cpu_name)
    if match:
        key = _QEMU_NAMES[match.group(1).lower()]
        return key, reference()[key].family
    match = _XEON_SCALABLE.search(cpu_name)
    if match:
        return _SCALABLE_GENERATIONS.get(match.group(1)), "intel"
    match = _XEON_E5_E7.search(cpu_name)
    if match:
        return _E5_VERSIONS.get(match.group(1)), "intel"
    match = _XEON_E3.search(cpu_name)
    if match:
        return _E3_VERSIONS.get(match.group(1)), "intel"
    if _XEON_E.search(cpu_name):
        return "coffee_lake", "intel"
    match = _CORE.search(cpu_name)
    if match:
        digits = match.group(1)
        return (_CORE_GENERATIONS.get(digits[0]) if len(digits) == 4 else None), "intel"
    match = _EPYC.search(cpu_name)
    if match:
        return _EPYC_GENERATIONS.get(match.group(1)), "amd_epyc"
    if "epyc" in name:
        return None, "amd_epyc"
    if cpu_part.lower() in _ARM_PARTS:
        key = _ARM_PARTS[cpu_part.lower()]
        return key, reference()[key].family
    if "intel" in name:
        return None, "intel"
    return None, None


@dataclass(frozen=True)
class CpuPowerModel:
    """Watts per logical CPU at idle and at full load, with the band and the source of the figures.

    Attributes:
        source: ``energy.estimate.source``'s part for the CPU: ``ccf:<architecture>``, ``ccf:<family>``,
            ``ccf:<provider>``, ``ccf:any`` or ``tdp:<architecture>``.
        description: One sentence for the notice and ``otel-joules devices``: which model and why.
        idle_watts_per_cpu: Watts of one logical CPU (vCPU) that exists but does nothing.
        busy_watts_per_cpu: Watts of one logical CPU busy all the time.
        low_factor: The band's low end as a factor on the model's joules.
        high_factor: The band's high end as a factor on the model's joules.
    """

    source: str
    description: str
    idle_watts_per_cpu: float
    busy_watts_per_cpu: float
    low_factor: float
    high_factor: float

    def watts(self, cpus: int, busy_cpus: float) -> float:
        """Power of ``cpus`` logical CPUs of which ``busy_cpus`` (CPU-seconds per second) are busy."""
        return cpus * self.idle_watts_per_cpu + busy_cpus * (self.busy_watts_per_cpu - self.idle_watts_per_cpu)


def _spread(idle: float, busy: float, others: list[tuple[float, float]]) -> tuple[float, float]:
    """The band's factors: the other figures at their extremes over the model's (each end of the range is linear
    in utilisation, so the extremes of the ratio are at idle or at full load), widened by the held-out error."""
    ratios = [1.0] + [o_idle / idle for o_idle, _ in others] + [o_busy / busy for _, o_busy in others]
    return min(ratios) * HELD_OUT_LOW_RATIO, max(ratios) * HELD_OUT_HIGH_RATIO


def power_model(machine: Machine, logical_cpus: int, tdp_watts: float) -> CpuPowerModel:
    """The model for ``machine`` (:func:`detect_machine`) with ``logical_cpus`` CPUs and the configured TDP."""
    rows = reference()
    architectures = [r for r in rows.values() if r.kind == "architecture"]
    key, family = architecture_of(machine.cpu_name, machine.cpu_part)
    cpu_words = f"CPU {machine.cpu_name!r}" if machine.cpu_name else "an unnamed CPU"
    where = f"a VM ({machine.evidence})" if machine.virtual else "bare metal"
    if key is not None:
        row = rows[key]
        if not machine.virtual:
            busy = tdp_watts / max(1, logical_cpus)
            idle = busy * row.min_watts / row.max_watts
            low, high = _spread(idle, busy, [(row.min_watts, row.max_watts)])
            return CpuPowerModel(
                f"{SOURCE_TDP}:{key}",
                f"{cpu_words} ({row.name}) on {where}: {tdp_watts:g} W TDP over {logical_cpus} logical CPUs at full "
                f"load, idle at {row.name}'s idle/full ratio from Cloud Carbon Footprint",
                idle, busy, low, high,
            )
        low, high = _spread(row.min_watts, row.max_watts, [])
        return CpuPowerModel(
            f"{SOURCE_CCF}:{key}",
            f"{cpu_words} ({row.name}) on {where}: Cloud Carbon Footprint's {row.min_watts:g}..{row.max_watts:g} W per vCPU",
            row.min_watts, row.max_watts, low, high,
        )
    candidates = [r for r in architectures if family is not None and r.family == family] or architectures
    figures = [(r.min_watts, r.max_watts) for r in candidates]
    if machine.provider is not None:
        fleet = rows[machine.provider]
        idle, busy, name = fleet.min_watts, fleet.max_watts, fleet.key
        described = f"Cloud Carbon Footprint's {fleet.name}, {idle:g}..{busy:g} W per vCPU"
    else:
        idle = sum(f[0] for f in figures) / len(figures)
        busy = sum(f[1] for f in figures) / len(figures)
        name = family if family is not None and len(candidates) < len(architectures) else ANY_ARCHITECTURE
        which = f"{len(candidates)} {name}" if name != ANY_ARCHITECTURE else f"{len(candidates)}"
        described = f"the mean of Cloud Carbon Footprint's {which} architectures, {idle:.2f}..{busy:.2f} W per vCPU"
    low, high = _spread(idle, busy, figures)
    return CpuPowerModel(
        f"{SOURCE_CCF}:{name}",
        f"{cpu_words} on {where}, architecture not known: {described}; the band spans every candidate architecture",
        idle, busy, low, high,
    )
