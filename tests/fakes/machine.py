"""Test helper: what the estimator reads to choose its CPU model, written as the kernel lays it out in temp dirs.

``<procfs>/cpuinfo``: one block per logical CPU (``processor``, ``vendor_id``, ``model name``, ``flags``; on Arm
``CPU implementer`` and ``CPU part`` and no model name), blocks separated by a blank line.
``<sysfs>/class/dmi/id/<file>``: one value and a newline per file (``sys_vendor``, ``product_name``, ...), as
the ``dmi-id`` driver shows them.
"""

from __future__ import annotations

from pathlib import Path

#: Flags of an x86 guest: the kernel sets ``hypervisor`` when CPUID says a hypervisor is present.
GUEST_FLAGS = "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr sse sse2 ht syscall nx lm hypervisor"
HOST_FLAGS = "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr sse sse2 ht syscall nx lm"


def write_cpuinfo(procfs_root: Path, cpus: int, model_name: str | None, flags: str = HOST_FLAGS, cpu_part: str | None = None) -> None:
    """``<procfs_root>/cpuinfo`` for ``cpus`` logical CPUs (x86 with ``model_name``; Arm with ``cpu_part``)."""
    procfs_root.mkdir(parents=True, exist_ok=True)
    blocks = []
    for i in range(cpus):
        if cpu_part is not None:
            blocks.append(f"processor\t: {i}\nBogoMIPS\t: 243.75\nFeatures\t: fp asimd\nCPU implementer\t: 0x41\nCPU part\t: {cpu_part}\n")
        else:
            vendor = "AuthenticAMD" if model_name and "AMD" in model_name else "GenuineIntel"
            name_line = f"model name\t: {model_name}\n" if model_name is not None else ""
            blocks.append(f"processor\t: {i}\nvendor_id\t: {vendor}\ncpu family\t: 6\n{name_line}flags\t\t: {flags}\n")
    (procfs_root / "cpuinfo").write_text("\n".join(blocks) + "\n")


def write_dmi(sysfs_root: Path, **files: str) -> None:
    """``<sysfs_root>/class/dmi/id/<name>`` for each keyword (``sys_vendor="Amazon EC2"``)."""
    dmi = sysfs_root / "class" / "dmi" / "id"
    dmi.mkdir(parents=True, exist_ok=True)
    for name, value in files.items():
        (dmi / name).write_text(value + "\n")
