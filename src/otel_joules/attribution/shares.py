"""What a consumer of the host's energy is given: the attribution kinds and their joules.

The kinds (:data:`KINDS`: CPU-side, memory, GPU) each domain's joules count as, a span's
:class:`SpanAttribution`, and the model's rule over one interval for one consumer
(:func:`share_of_cpu_time`), which :func:`command_attribution` applies to a whole command run
as a child process (``otel-joules run``). The model itself: :mod:`otel_joules.attribution.model`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, NamedTuple

from otel_joules.meter.meter import EnergySnapshot
from otel_joules.semconv import KIND_CPU, KIND_GPU, KIND_MEMORY
from otel_joules.sensors.base import Domain, HardwareType

if TYPE_CHECKING:
    from otel_joules.meter.meter import EnergyMeter

KINDS = (KIND_CPU, KIND_MEMORY, KIND_GPU)


def kind_of(hw_type: HardwareType) -> str:
    """The attribution kind of a domain's hardware type (psys counts as CPU-side)."""
    if hw_type is HardwareType.MEMORY:
        return KIND_MEMORY
    if hw_type is HardwareType.GPU:
        return KIND_GPU
    return KIND_CPU


def measured_kinds(domains: Iterable[Domain]) -> tuple[str, ...]:
    """The kinds (in :data:`KINDS` order) that domains adding to the host's total cover."""
    present = {kind_of(d.hw_type) for d in domains if d.in_total}
    return tuple(kind for kind in KINDS if kind in present)


class SpanAttribution(NamedTuple):
    """One span's attributed joules (inclusive of children ended before it, per kind) and its self joules."""

    cpu_joules: float
    memory_joules: float
    gpu_joules: float
    self_joules: float

    @property
    def joules(self) -> float:
        """The inclusive total over the kinds."""
        return self.cpu_joules + self.memory_joules + self.gpu_joules


def share_of_cpu_time(joules: float, cpu_s: float, busy_s: float) -> float:
    """``joules`` x ``cpu_s`` / ``busy_s``, never more than ``joules`` (0 when nothing was busy).

    The model's rule for one interval and one consumer: used for a whole command's share
    (``otel-joules run``) where the consumer is another process tree.
    """
    denominator = max(busy_s, cpu_s)
    if denominator <= 0 or joules <= 0:
        return 0.0
    return joules * max(cpu_s, 0.0) / denominator


def command_attribution(
    meter: "EnergyMeter",
    start: EnergySnapshot,
    end: EnergySnapshot,
    command_cpu_s: float,
    host_busy_s: float,
    host_idle_s: float = 0.0,
    *,
    gpu_joules: float = 0.0,
) -> SpanAttribution:
    """The share of a command run as a child process (``otel-joules run``) between two snapshots.

    The model's rules over one interval: CPU-side joules by :func:`share_of_cpu_time` of the
    command's CPU seconds (its and its reaped descendants') in the host's busy seconds, memory
    in the host's busy + idle seconds. GPUs as for spans: ``gpu_joules`` is what the command's
    own processes on them were charged (:class:`~otel_joules.attribution.gpu.CommandGpuShares`),
    never more than the GPUs measured.
    """
    joules = {kind: 0.0 for kind in KINDS}
    for i, domain in enumerate(meter.domains):
        a, b = start.joules[i], end.joules[i]
        if domain.in_total and a is not None and b is not None:
            joules[kind_of(domain.hw_type)] += b - a
    cpu = share_of_cpu_time(joules[KIND_CPU], command_cpu_s, host_busy_s)
    memory = share_of_cpu_time(joules[KIND_MEMORY], command_cpu_s, host_busy_s + max(host_idle_s, 0.0))
    gpu = min(max(gpu_joules, 0.0), max(joules[KIND_GPU], 0.0))
    return SpanAttribution(cpu, memory, gpu, cpu + memory + gpu)


__all__ = [
    "KINDS",
    "SpanAttribution",
    "command_attribution",
    "kind_of",
    "measured_kinds",
    "share_of_cpu_time",
]
