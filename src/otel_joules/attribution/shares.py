"""What a consumer of the host's energy is given: the attribution kinds and their joules.

The kinds (:data:`KINDS`: CPU-side, memory, GPU) each domain's joules count as, a span's
:class:`SpanAttribution`, and the model's rule over one interval for one consumer
(:func:`share_of_cpu_time`), which :func:`command_attribution` applies to a whole command run
as a child process (``otel-joules run``). The model itself: :mod:`otel_joules.attribution.model`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, NamedTuple, Sequence

from otel_joules.attribution.sampling import policy_prices
from otel_joules.attribution.uncovered import uncovered_joules, uncovered_positions
from otel_joules.config import DEFAULT_ATTRIBUTION_POLICY
from otel_joules.meter.energy import energy_between
from otel_joules.meter.meter import EnergySnapshot
from otel_joules.semconv import ATTRIBUTION_CPU_TIME_SHARE, BASELINE_UNKNOWN, KIND_CPU, KIND_GPU, KIND_MEMORY, KIND_PLATFORM
from otel_joules.sensors.base import Domain

if TYPE_CHECKING:
    from otel_joules.meter.meter import EnergyMeter

KINDS = (KIND_CPU, KIND_MEMORY, KIND_GPU)
#: The attribution kind (one of :data:`KINDS`) of each ``Domain.kind``: the platform (psys) counts as CPU-side.
ATTRIBUTION_KIND: dict[str, str] = {KIND_CPU: KIND_CPU, KIND_MEMORY: KIND_MEMORY, KIND_GPU: KIND_GPU, KIND_PLATFORM: KIND_CPU}


def measured_kinds(domains: Iterable[Domain]) -> tuple[str, ...]:
    """The kinds (in :data:`KINDS` order) that domains adding to the host's total cover."""
    present = {ATTRIBUTION_KIND[d.kind] for d in domains if d.in_total}
    return tuple(kind for kind in KINDS if kind in present)


def attribution_label(policy: str) -> str:
    """``energy.attribution``'s value: the model and the policy, ``cpu_time_share/capacity``."""
    return f"{ATTRIBUTION_CPU_TIME_SHARE}/{policy}"


class SpanAttribution(NamedTuple):
    """One span's attributed joules (inclusive of children ended before it, per kind) and its self joules,
    under the policy; its dynamic joules (inclusive and self) beside them; the model and policy
    (``energy.attribution``) and where the baseline came from (``energy.baseline``)."""

    cpu_joules: float
    memory_joules: float
    gpu_joules: float
    self_joules: float
    dynamic_joules: float = 0.0
    dynamic_self_joules: float = 0.0
    attribution: str = attribution_label(DEFAULT_ATTRIBUTION_POLICY)
    baseline: str = BASELINE_UNKNOWN

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
    gpu_dynamic_joules: float | None = None,
    static_watts: Sequence[float | None] | None = None,
    policy: str = DEFAULT_ATTRIBUTION_POLICY,
    baseline: str = BASELINE_UNKNOWN,
) -> SpanAttribution:
    """The share of a command run as a child process (``otel-joules run``) between two snapshots.

    The model's rules (:mod:`.model`) over one interval: each domain's static joules are its
    ``static_watts`` (by the meter's domain index; None: unknown, its whole energy counts as
    static) x the interval, never more than it spent (a whole-platform reading's energy beyond the components' is
    CPU-side static energy: :mod:`.uncovered`); the command's CPU seconds (its and its
    reaped descendants') are priced by :func:`~.sampling.policy_prices` over the host's busy
    (and busy + idle) seconds. GPUs as for spans: ``gpu_joules`` (and ``gpu_dynamic_joules``)
    is what the command's own processes on them were charged
    (:class:`~otel_joules.attribution.gpu.CommandGpuShares`), never more than the GPUs measured.
    """
    joules = {kind: 0.0 for kind in KINDS}
    static = {kind: 0.0 for kind in KINDS}
    energy = energy_between(meter.plan, start, end)
    duration_s = energy.duration_s
    for i, (domain, spent) in enumerate(zip(meter.domains, energy.joules)):
        if domain.in_total and spent is not None:
            kind = ATTRIBUTION_KIND[domain.kind]
            joules[kind] += spent
            watts = None if static_watts is None else static_watts[i]
            static[kind] += max(spent, 0.0) if watts is None else min(max(watts * duration_s, 0.0), max(spent, 0.0))
    positions = uncovered_positions(meter.domains, meter.standby_domain_ids)
    if positions is not None:
        # The platform's energy beyond the components' is CPU-side static energy, as for spans (.uncovered).
        extra = uncovered_joules(positions, energy.joules)
        joules[KIND_CPU] += extra
        static[KIND_CPU] += extra
    cpu_s = max(command_cpu_s, 0.0)
    busy = max(host_busy_s, cpu_s)
    capacity = max(host_busy_s + max(host_idle_s, 0.0), busy)
    prices = policy_prices(
        policy, joules[KIND_CPU], static[KIND_CPU], joules[KIND_MEMORY], static[KIND_MEMORY], busy, capacity
    )
    cpu = min(prices.cpu * cpu_s, max(joules[KIND_CPU], 0.0))
    memory = min(prices.memory * cpu_s, max(joules[KIND_MEMORY], 0.0))
    gpu = min(max(gpu_joules, 0.0), max(joules[KIND_GPU], 0.0))
    gpu_dynamic = gpu if gpu_dynamic_joules is None else min(max(gpu_dynamic_joules, 0.0), gpu)
    dynamic = min(prices.dynamic * cpu_s, cpu + memory) + gpu_dynamic
    return SpanAttribution(
        cpu, memory, gpu, cpu + memory + gpu, dynamic, dynamic, attribution_label(policy), baseline
    )
