"""Which GPUs this process uses: ``CUDA_VISIBLE_DEVICES``, ``CUDA_DEVICE_ORDER``, ``devices_by_pid``, or an explicit choice.

The rules, in order of precedence:

1. **Explicit selection** (``gpus=[0, "GPU-8f2a"]``): NVML indices (the numbering of
   ``nvidia-smi``) or full/abbreviated ``GPU-`` UUIDs, or ``MIG-`` UUIDs (their parent GPU).
   It overrides the two rules below; an entry that matches no GPU is a
   :class:`~otel_joules.errors.ConfigurationError`.
2. **devices_by_pid**: only GPUs on which NVML lists a process of this process tree (this
   process and all its descendants, found with psutil). It replaces the
   ``CUDA_VISIBLE_DEVICES`` rule, because launchers often give each worker its own value.
   Caveats: NVML reports *host* PIDs, so inside a container started without
   ``--pid=host`` the PIDs never match and no GPU is selected; and a process appears in
   NVML's list only once it has created a CUDA context, so the selection is only as good as
   the moment it is made (create the meter after the model is on the GPU).
3. **CUDA_VISIBLE_DEVICES**, read as CUDA reads it: unset means every GPU, an empty value
   means none; entries are indices (in the order ``CUDA_DEVICE_ORDER`` defines), full or
   abbreviated ``GPU-<uuid>`` and ``MIG-<uuid>`` (or the legacy ``MIG-GPU-<uuid>/gi/ci``);
   the first invalid entry ends the list, as in CUDA.

MIG: NVML has an energy counter per physical GPU only, so a ``MIG-`` entry selects its
parent GPU and the figure covers every slice of it; the selection says so in a note.

``CUDA_DEVICE_ORDER``: with ``PCI_BUS_ID`` CUDA numbers GPUs by ascending PCI bus id, which
is exact here. CUDA's default, ``FASTEST_FIRST``, uses a heuristic the driver does not
publish; we approximate it from what NVML tells us: higher compute capability first, then
higher CUDA cores x maximum SM clock, ties by PCI bus id. On machines with identical GPUs
(the usual case) both orders agree. Set ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` to be exact on
mixed machines.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Callable, Collection, Mapping, Protocol, Sequence, TypeVar

from otel_joules.config import CUDA_DEVICE_ORDER, CUDA_VISIBLE_DEVICES
from otel_joules.errors import ConfigurationError

#: CUDA's default order.
FASTEST_FIRST = "FASTEST_FIRST"
#: Ascending PCI bus id, the order NVML and nvidia-smi use.
PCI_BUS_ID = "PCI_BUS_ID"

SOURCE_EXPLICIT = "explicit"
SOURCE_DEVICES_BY_PID = "devices_by_pid"
SOURCE_CUDA_VISIBLE_DEVICES = CUDA_VISIBLE_DEVICES
SOURCE_ALL = "all"

_MIG_NOTE = (
    "NVML measures energy per physical GPU only, not per MIG slice: measured as its parent GPU "
    "{domain}, whose figure includes every slice of it"
)


@dataclass(frozen=True)
class GpuInfo:
    """What NVML says about one physical GPU, as far as selection needs it.

    Attributes:
        index: NVML index (the numbering of ``nvidia-smi``); domain ids use it.
        uuid: ``GPU-...`` UUID.
        name: Product name.
        pci_bus_id: PCI bus id as NVML writes it (``00000000:3B:00.0``).
        compute_capability: CUDA compute capability (major, minor), if NVML knows it.
        cores: Number of CUDA cores, if NVML knows it.
        max_sm_clock_mhz: Maximum SM clock in MHz, if NVML knows it.
        mig_uuids: UUIDs of the MIG devices on this GPU (empty without MIG).
    """

    index: int
    uuid: str
    name: str
    pci_bus_id: str
    compute_capability: tuple[int, int] | None = None
    cores: int | None = None
    max_sm_clock_mhz: int | None = None
    mig_uuids: tuple[str, ...] = ()

    @property
    def domain_id(self) -> str:
        """The energy domain id of this GPU, ``nvidia_gpu_<NVML index>``."""
        return f"nvidia_gpu_{self.index}"

    def describe(self) -> str:
        """``nvidia_gpu_0 (NVIDIA A100-SXM4-40GB, GPU-...)`` for messages."""
        return f"{self.domain_id} ({self.name}, {self.uuid})"


@dataclass(frozen=True)
class SelectionNote:
    """Why a GPU or a ``CUDA_VISIBLE_DEVICES`` entry is not measured (fully), and what to do."""

    what: str
    reason: str
    remedy: str = ""


@dataclass(frozen=True)
class GpuSelection:
    """The GPUs to measure.

    Attributes:
        indices: NVML indices, in the order they were named, without duplicates.
        source: Which rule decided: ``explicit``, ``devices_by_pid``,
            ``CUDA_VISIBLE_DEVICES`` or ``all``.
        notes: GPUs left out and entries ignored or mapped (MIG), with reasons.
    """

    indices: tuple[int, ...]
    source: str
    notes: tuple[SelectionNote, ...] = ()

    @property
    def explicit(self) -> bool:
        """True when the user named the GPUs: one that cannot be measured is then an error."""
        return self.source == SOURCE_EXPLICIT


def pci_sort_key(bus_id: str) -> tuple[int, ...]:
    """Numeric (domain, bus, device, function) of a PCI bus id; unparsable ids sort last."""
    match = re.fullmatch(r"\s*([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)\.([0-9a-fA-F]+)\s*", bus_id)
    if not match:
        return (1 << 64,)
    return tuple(int(part, 16) for part in match.groups())


def _fastest_first_key(gpu: GpuInfo) -> tuple[object, ...]:
    major, minor = gpu.compute_capability or (0, 0)
    throughput = (gpu.cores or 0) * (gpu.max_sm_clock_mhz or 0)
    return (-major, -minor, -throughput, pci_sort_key(gpu.pci_bus_id))


def cuda_order(gpus: Sequence[GpuInfo], device_order: str | None = None) -> list[GpuInfo]:
    """The GPUs in the order CUDA numbers them under ``CUDA_DEVICE_ORDER`` (see module docs)."""
    order = (device_order or "").strip().upper()
    if order == PCI_BUS_ID:
        return sorted(gpus, key=lambda gpu: pci_sort_key(gpu.pci_bus_id))
    return sorted(gpus, key=_fastest_first_key)


def _match_uuid_prefix(entry: str, gpus: Sequence[GpuInfo]) -> tuple[GpuInfo | None, str]:
    """A ``GPU-`` entry, full or abbreviated (as CUDA accepts), case-insensitively."""
    wanted = entry.strip().lower()
    if len(wanted) <= len("gpu-"):
        return None, "a GPU- entry needs at least one character of the UUID"
    found = [gpu for gpu in gpus if gpu.uuid.lower().startswith(wanted)]
    if len(found) == 1:
        return found[0], ""
    if not found:
        return None, "matches no GPU's UUID"
    return None, "is ambiguous: it abbreviates " + ", ".join(gpu.uuid for gpu in found)


def _match_mig(entry: str, gpus: Sequence[GpuInfo]) -> tuple[GpuInfo | None, str]:
    """A ``MIG-`` entry: its parent GPU."""
    rest = entry.strip()[len("MIG-") :]
    if rest.upper().startswith("GPU-"):
        # Legacy form (drivers before R470): MIG-GPU-<parent uuid>/<gi>/<ci>.
        return _match_uuid_prefix(rest.split("/")[0], gpus)
    wanted = entry.strip().lower()
    if len(wanted) <= len("mig-"):
        return None, "a MIG- entry needs at least one character of the UUID"
    parents = [gpu for gpu in gpus if any(mig.lower().startswith(wanted) for mig in gpu.mig_uuids)]
    if len(parents) == 1:
        return parents[0], ""
    if not parents:
        return None, "matches no MIG device's UUID"
    return None, "is ambiguous: it abbreviates MIG devices on " + ", ".join(gpu.uuid for gpu in parents)


def _resolve_identifier(entry: str, gpus: Sequence[GpuInfo]) -> tuple[GpuInfo | None, str]:
    upper = entry.strip().upper()
    if upper.startswith("GPU-"):
        return _match_uuid_prefix(entry, gpus)
    if upper.startswith("MIG-"):
        return _match_mig(entry, gpus)
    return None, "is neither an index, a GPU-<uuid> nor a MIG-<uuid>"


def _excluded_notes(gpus: Sequence[GpuInfo], selected: Collection[int], reason: str, remedy: str) -> list[SelectionNote]:
    return [SelectionNote(gpu.describe(), reason, remedy) for gpu in sorted(gpus, key=lambda g: g.index) if gpu.index not in selected]


_Named = TypeVar("_Named")


def read_visible_list(
    value: str, resolve: Callable[[str], tuple[_Named | None, str]], variable: str, runtime: str
) -> tuple[list[tuple[str, _Named]], SelectionNote | None]:
    """Each entry of a visibility list (``CUDA_VISIBLE_DEVICES``, ``ROCR_VISIBLE_DEVICES``, ...) with the GPU it names.

    ``resolve`` maps an entry to its GPU, or to None and the problem in words. The first entry that names no GPU
    ends the list, as in the runtimes; the note returned with the entries before it says so.
    """
    named: list[tuple[str, _Named]] = []
    entries = value.split(",")
    for position, raw in enumerate(entries):
        entry = raw.strip()
        found, problem = resolve(entry)
        if found is None:
            ignored = len(entries) - position - 1
            tail = f" and the {ignored} {'entry' if ignored == 1 else 'entries'} after it are" if ignored else " is"
            reason = f"{entry!r} {problem}; as in {runtime}, it{tail} ignored"
            return named, SelectionNote(f"{variable} entry {entry!r}", reason, "fix or remove the entry")
        named.append((entry, found))
    return named, None


def parse_cuda_visible_devices(
    value: str | None, gpus: Sequence[GpuInfo], device_order: str | None = None
) -> GpuSelection:
    """The GPUs a CUDA program sees with ``CUDA_VISIBLE_DEVICES=value`` (None: unset)."""
    if value is None:
        return GpuSelection(tuple(sorted(gpu.index for gpu in gpus)), SOURCE_ALL)
    remedy = "unset CUDA_VISIBLE_DEVICES or list this GPU in it, or select GPUs explicitly"
    if value.strip() == "":
        notes = _excluded_notes(gpus, (), "CUDA_VISIBLE_DEVICES is set and empty: this process sees no GPU", remedy)
        return GpuSelection((), SOURCE_CUDA_VISIBLE_DEVICES, tuple(notes))
    ordered = cuda_order(gpus, device_order)
    selected: list[int] = []
    notes: list[SelectionNote] = []

    def resolve(entry: str) -> tuple[GpuInfo | None, str]:
        if re.fullmatch(r"\d+", entry):
            number = int(entry)
            return (ordered[number] if number < len(ordered) else None), f"is index {number}, but there are only {len(ordered)} GPUs"
        return _resolve_identifier(entry, ordered)

    named, ended = read_visible_list(value, resolve, CUDA_VISIBLE_DEVICES, "CUDA")
    for entry, gpu in named:
        if entry.upper().startswith("MIG-"):
            notes.append(SelectionNote(f"MIG device {entry}", _MIG_NOTE.format(domain=gpu.domain_id)))
        if gpu.index not in selected:
            selected.append(gpu.index)
    notes += [ended] if ended is not None else []
    notes += _excluded_notes(gpus, selected, f"not visible to this process: CUDA_VISIBLE_DEVICES={value!r}", remedy)
    return GpuSelection(tuple(selected), SOURCE_CUDA_VISIBLE_DEVICES, tuple(notes))


def _available(gpus: Sequence[GpuInfo]) -> str:
    if not gpus:
        return "NVML lists no GPU"
    return "available: " + "; ".join(f"{gpu.index} = {gpu.name} {gpu.uuid}" for gpu in sorted(gpus, key=lambda g: g.index))


def split_requested(requested: Sequence[int | str] | str) -> list[int | str]:
    """``"0,GPU-ab"`` or ``[0, "GPU-ab"]`` as a list of entries."""
    if isinstance(requested, str):
        return [part.strip() for part in requested.split(",") if part.strip()]
    return list(requested)


def select_explicit(requested: Sequence[int | str] | str, gpus: Sequence[GpuInfo]) -> GpuSelection:
    """GPUs the user named, by NVML index or UUID.

    Raises:
        ConfigurationError: an entry matches no GPU, or several.
    """
    by_index = {gpu.index: gpu for gpu in gpus}
    selected: list[int] = []
    notes: list[SelectionNote] = []
    for item in split_requested(requested):
        gpu: GpuInfo | None
        if isinstance(item, bool) or not isinstance(item, (int, str)):
            raise ConfigurationError(f"gpus: {item!r} is not an NVML index or a GPU UUID; {_available(gpus)}")
        if isinstance(item, int) or re.fullmatch(r"\s*\d+\s*", item):
            number = int(item)
            gpu = by_index.get(number)
            problem = f"there is no GPU with NVML index {number}"
        else:
            gpu, problem = _resolve_identifier(item, gpus)
            problem = f"{item!r} {problem}"
        if gpu is None:
            raise ConfigurationError(f"gpus: {problem}; {_available(gpus)}")
        if isinstance(item, str) and item.strip().upper().startswith("MIG-"):
            notes.append(SelectionNote(f"MIG device {item.strip()}", _MIG_NOTE.format(domain=gpu.domain_id)))
        if gpu.index not in selected:
            selected.append(gpu.index)
    notes += _excluded_notes(gpus, selected, f"not selected: gpus={requested!r}", "add it to gpus= to measure it")
    return GpuSelection(tuple(selected), SOURCE_EXPLICIT, tuple(notes))


def process_tree_pids(root_pid: int | None = None) -> frozenset[int]:
    """``root_pid`` (default: this process) and all its descendants."""
    import psutil

    root_pid = os.getpid() if root_pid is None else root_pid
    pids = {root_pid}
    try:
        pids.update(child.pid for child in psutil.Process(root_pid).children(recursive=True))
    except psutil.Error:
        # The tree changed while we walked it; the root alone is still right.
        pass
    return frozenset(pids)


class ListedGpu(Protocol):
    """What :func:`select_by_pids` needs of a GPU (NVML's :class:`GpuInfo`, amdsmi's ``AmdGpu``)."""

    @property
    def index(self) -> int:
        """The library's index of the GPU."""

    def describe(self) -> str:
        """The GPU in messages."""


#: Why devices_by_pid may miss NVIDIA GPUs, and what to do.
NVML_PIDS_REMEDY = (
    "NVML reports host PIDs: in a container without --pid=host they never match; a process is listed "
    "only once it has created a CUDA context. Select GPUs explicitly in either case"
)


def select_by_pids(
    gpus: Sequence[ListedGpu],
    gpu_pids: Mapping[int, Collection[int] | str],
    tree_pids: Collection[int],
    library: str = "NVML",
    remedy: str = NVML_PIDS_REMEDY,
) -> GpuSelection:
    """GPUs on which a process of ``tree_pids`` runs.

    ``gpu_pids`` maps the library's index of a GPU to the PIDs ``library`` lists on it, or to a message when
    the list could not be read; ``remedy`` says what to do where a GPU is left out.
    """
    tree = set(tree_pids)
    selected = []
    notes = []
    for gpu in sorted(gpus, key=lambda g: g.index):
        listed = gpu_pids.get(gpu.index, ())
        if isinstance(listed, str):
            notes.append(SelectionNote(gpu.describe(), f"its process list cannot be read: {listed}", remedy))
        elif tree & set(listed):
            selected.append(gpu.index)
        else:
            shown = ", ".join(str(pid) for pid in sorted(listed)) or "none"
            notes.append(
                SelectionNote(
                    gpu.describe(),
                    f"devices_by_pid: no process of this process tree runs on it ({library} lists: {shown})",
                    remedy,
                )
            )
    return GpuSelection(tuple(selected), SOURCE_DEVICES_BY_PID, tuple(notes))


def select_gpus(
    gpus: Sequence[GpuInfo],
    *,
    requested: Sequence[int | str] | str | None = None,
    devices_by_pid: bool = False,
    env: Mapping[str, str] | None = None,
    gpu_pids: Callable[[], Mapping[int, Collection[int] | str]] | None = None,
    tree_pids: Collection[int] | None = None,
) -> GpuSelection:
    """Apply the rules of this module's docstring, in order of precedence.

    ``gpu_pids`` is called only for ``devices_by_pid`` (it asks NVML); ``tree_pids``
    defaults to :func:`process_tree_pids`.
    """
    if requested is not None:
        return select_explicit(requested, gpus)
    if devices_by_pid:
        if gpu_pids is None:
            raise ValueError("devices_by_pid needs gpu_pids")
        return select_by_pids(gpus, gpu_pids(), process_tree_pids() if tree_pids is None else tree_pids)
    env = os.environ if env is None else env
    return parse_cuda_visible_devices(env.get(CUDA_VISIBLE_DEVICES), gpus, env.get(CUDA_DEVICE_ORDER))
