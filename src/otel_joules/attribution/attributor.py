"""The attributor: one meter's energy attributed to this process and to its spans.

:class:`Attributor` is built from three layers, each a module: :class:`~.sampling._Sampling`
(the sampler thread, the history and its prices), :class:`~.history._History` (what readers get
from that history) and :class:`~.spans._SpanPath` (the span path). It sets up the state they
share, and renews it in a forked child. The model it implements is described in
:mod:`otel_joules.attribution.model`.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Mapping

from otel_joules._fork import register_fork_hook
from otel_joules.attribution.baseline import Baselines
from otel_joules.attribution.procfs import CpuClocks
from otel_joules.attribution.sampling import (
    HISTORY_PERIOD_S,
    HISTORY_S,
    HISTORY_SUMMARY_PERIOD_S,
    IDLE_PERIOD_MAX_S,
    HistorySample,
    _Rates,
    _SummaryBucket,
    _wall_offset_ns,
)
from otel_joules.attribution.shares import ATTRIBUTION_KIND, KINDS, attribution_label, measured_kinds
from otel_joules.attribution.spans import _SpanPath
from otel_joules.config import ATTRIBUTION_POLICIES, static_watts_problem
from otel_joules.errors import ConfigurationError
from otel_joules.meter.sampler import PeriodicThread
from otel_joules.sensors.base import Method
from otel_joules.semconv import KIND_CPU, KIND_GPU, KIND_MEMORY

if TYPE_CHECKING:
    from otel_joules.attribution.gpu import NvmlProcessShares
    from otel_joules.meter.meter import EnergyMeter


def check_attribution_options(policy: object = None, static_watts: object = None) -> None:
    """Raise :class:`ConfigurationError` unless ``policy`` (None or one of ``capacity``, ``busy``, ``none``) and
    ``static_watts`` (None or a mapping of domain id to watts) are valid (``instrument()``'s keywords)."""
    if policy is not None and policy not in ATTRIBUTION_POLICIES:
        raise ConfigurationError(f"attribution_policy={policy!r} is not one of {', '.join(ATTRIBUTION_POLICIES)}")
    if static_watts is None:
        return
    if not isinstance(static_watts, Mapping):
        raise ConfigurationError(f"static_watts={static_watts!r} is not a mapping of domain id to watts")
    for domain, watts in static_watts.items():
        problem = static_watts_problem(domain, watts)
        if problem is not None:
            raise ConfigurationError(f"static_watts={{{domain!r}: {watts!r}}}: {problem}")


class Attributor(_SpanPath):
    """Attributes a meter's energy to this process and to spans (:mod:`otel_joules.attribution.model`).

    Use :func:`~otel_joules.attribution.registry.attributor_for` for the shared one of a meter.
    Tests build their own with ``sample=False`` and call :meth:`sample` themselves.

    Args:
        meter: Where the joules come from.
        clocks: Where CPU times come from (default: procfs under the meter's ``procfs_root``).
        gpu_shares: This process's fraction of each GPU domain; NVML's view when omitted and
            the meter measures GPUs.
        sample: Run the sampler thread (started on first use).
        period_s: Sampler period.
        history_s: How much history to keep.
        policy: Who carries static energy (``capacity``, ``busy``, ``none``); default the meter's
            settings' (``OTEL_JOULES_ATTRIBUTION_POLICY``).
        static_watts: Static watts by domain id, over the settings' (``OTEL_JOULES_STATIC_WATTS``).

    Raises:
        ProcfsReadError: ``/proc/stat`` (under the procfs root) cannot be read.
        ConfigurationError: ``policy`` or ``static_watts`` is not valid.
    """

    def __init__(
        self,
        meter: "EnergyMeter",
        *,
        clocks: CpuClocks | None = None,
        gpu_shares: "NvmlProcessShares | None" = None,
        sample: bool = True,
        period_s: float = HISTORY_PERIOD_S,
        history_s: float = HISTORY_S,
        policy: str | None = None,
        static_watts: Mapping[str, float] | None = None,
    ) -> None:
        self.meter = meter
        self.clocks = clocks or CpuClocks(meter.settings.procfs_root)
        self.kind_indices: dict[str, tuple[int, ...]] = {kind: () for kind in KINDS}
        for i, domain in enumerate(meter.domains):
            if domain.in_total:
                kind = ATTRIBUTION_KIND[domain.kind]
                self.kind_indices[kind] += (i,)
        self.kinds = measured_kinds(meter.domains)
        # Capped per span (Attributor._cap). GPUs are not: their share is power x time, not a price
        # per CPU second that could lag, and a span's GPU snapshot may be the sampler's latest read.
        self._cpu_indices = self.kind_indices[KIND_CPU]
        self._memory_indices = self.kind_indices[KIND_MEMORY]
        self.has_gpu = bool(self.kind_indices[KIND_GPU])
        if gpu_shares is None and self.has_gpu:
            from otel_joules.attribution.gpu import NvmlProcessShares

            gpu_shares = NvmlProcessShares([meter.domains[i].hw_id for i in self.kind_indices[KIND_GPU]])
        self.gpu_shares = gpu_shares
        self.period_s = period_s
        self.history_s = history_s
        self._max_samples = max(2, int(history_s / period_s) + 1)
        self._history_ns = round(history_s * 1e9)
        self._summary_period_ns = max(1, round(max(period_s, min(HISTORY_SUMMARY_PERIOD_S, history_s / 5)) * 1e9))
        # Every sample reads every counter: the idle back-off never reads less often than the
        # meter's wrap-safe interval, so no counter can wrap twice unseen (see _next_period_s).
        wrap_safe_s = meter.sample_period_s
        self._idle_period_max_s = IDLE_PERIOD_MAX_S if wrap_safe_s is None else min(IDLE_PERIOD_MAX_S, wrap_safe_s)
        self._sample_enabled = sample
        self._generation = 0
        order = self.kind_indices[KIND_CPU] + self.kind_indices[KIND_MEMORY] + self.kind_indices[KIND_GPU]
        self._baseline_index = {i: k for k, i in enumerate(order)}
        fitted = len(self.kind_indices[KIND_CPU]) + len(self.kind_indices[KIND_MEMORY])
        self._fit_positions = tuple(range(fitted))
        # The CPU-time estimate (busy CPU seconds x TDP per CPU) has no static part by construction.
        self._configured_watts = {
            d.id: 0.0 for d in meter.domains if d.in_total and d.method is Method.ESTIMATE and ATTRIBUTION_KIND[d.kind] == KIND_CPU
        }
        self._configured_watts.update(meter.settings.static_watts)
        self.baselines = Baselines(
            [meter.domains[i].id for i in order], [k < fitted for k in range(len(order))], {}, self._history_ns
        )
        self.policy = meter.settings.attribution_policy
        self.attribution_label = attribution_label(self.policy)
        self.configure(policy=policy, static_watts=static_watts)
        self._reset_state()
        # Every attributor, shared or not: its sampler thread holds _reading_lock across reads.
        register_fork_hook(self, "_after_fork_in_child")
        self.clocks.host()  # fail now, with a clear error, rather than at the first span
        self.sample()
        # Sampling from now on, not from the first span: the first spans then find prices.
        self.ensure_sampling()

    def configure(self, *, policy: str | None = None, static_watts: Mapping[str, float] | None = None) -> None:
        """Set the policy and add configured static watts (by domain id; they win over the settings'), from the
        next sampler period on: what was priced stays as it was.

        Raises:
            ConfigurationError: ``policy`` is not one of ``capacity``, ``busy``, ``none``, or a static-watts
                entry is not a domain id with watts between 0 and the bound.
        """
        check_attribution_options(policy, static_watts)
        lock = getattr(self, "_sample_lock", None) or threading.Lock()
        with lock:
            if policy is not None:
                self.policy = policy
                self.attribution_label = attribution_label(policy)
            if static_watts:
                self._configured_watts.update({domain: float(watts) for domain, watts in static_watts.items()})
            self.baselines.configure(self._configured_watts)
            self.baseline_state = self.baselines.state(self._fit_positions)

    def _reset_state(self) -> None:
        self.wall_offset_ns = _wall_offset_ns()
        self._sample_lock = threading.Lock()
        self._reading_lock = threading.Lock()
        self._local = threading.local()
        self._history: list[HistorySample] = []
        self._times: list[int] = []
        self._summary: list[_SummaryBucket] = []
        self._rates = _Rates(0, 0.0, 0.0, 0.0, 0.0, 0.0)
        self._process_watts = (0.0, 0.0, 0.0)
        self._late_ticks_s = 0.0
        self._gpu_lock = threading.Lock()
        self._gpu_acc_j = 0.0
        self._gpu_dynamic_acc_j = 0.0
        self._unattributed_j = [0.0, 0.0]
        self._gpu_t_ns = time.monotonic_ns()
        self._gpu_leaves = 0
        self._sampler: PeriodicThread | None = None
        self._idle_period_s = self.period_s
        self._idle_since_ns = None
        self._tick_last = None
        self._dozing = False
        self._fractions: list[float] = []
        self._fractions_changed = False
        self._ledgers: list = []
        self._ledgers_alive = 0
        self._ledgers_lock = threading.Lock()
        self._closed = False
        self._failure_reported = False
        self._implausible_reported = False
        self.stat_fault = False
        self._stat_read_ns = 0
        self._stat_cpus = 0

    def _after_fork_in_child(self) -> None:
        # Ledgers, locks and the sampler thread belong to the parent: start those afresh, and
        # make spans opened before the fork (their ledgers' generation) end without attribution.
        # The history and prices describe the host, so the child keeps them; its own CPU time
        # restarts, so its process totals restart from the latest sample.
        self._generation += 1
        history, times, rates, summary = self._history, self._times, self._rates, self._summary
        self._reset_state()
        self._history, self._times, self._rates, self._summary = list(history), list(times), rates, list(summary)
        if self._history:
            last = self._history[-1]
            self._history[-1] = HistorySample(
                last.monotonic_ns,
                last.wall_offset_ns,
                last.snapshot,
                last.busy_s,
                self.clocks.process_cpu_s() if self.clocks.native else last.process_cpu_s,
                last.idle_s,
                (0.0, 0.0, 0.0),
                last.priced,
                last.period,
            )
