"""The attributor: one meter's energy attributed to this process and to its spans.

:class:`Attributor` composes two objects, each owning its state: a
:class:`~.history.PriceHistory` (the sampler thread, the history, its prices and baselines) and a
:class:`~.spans.SpanLedger` (each thread's ledger of open spans, priced by that history). It forwards
their public methods, and renews both, in that order, in a forked child. The model it implements is
described in :mod:`otel_joules.attribution.model`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from otel_joules._fork import register_fork_hook
from otel_joules.attribution.history import PriceHistory
from otel_joules.attribution.procfs import CpuClocks
from otel_joules.attribution.sampling import HISTORY_PERIOD_S, HISTORY_S, HistorySample
from otel_joules.attribution.shares import ATTRIBUTION_KIND, SpanAttribution
from otel_joules.attribution.spans import SpanLedger, SpanShare
from otel_joules.config import ATTRIBUTION_POLICIES, DEPRECATED_POLICY_NAMES, attribution_policy_name, static_watts_problem
from otel_joules.errors import ConfigurationError
from otel_joules.meter.meter import EnergySnapshot
from otel_joules.semconv import KIND_GPU

if TYPE_CHECKING:
    from otel_joules.attribution.gpu import GpuProcessShares, NvmlProcessShares
    from otel_joules.attribution.baseline import Baselines
    from otel_joules.meter.meter import EnergyMeter


def check_attribution_options(policy: object = None, static_watts: object = None) -> str | None:
    """The policy's current name (:func:`~otel_joules.config.attribution_policy_name`: a former name warns);
    raise :class:`ConfigurationError` unless ``policy`` (None or one of ``capacity``, ``busy``, ``dynamic``) and
    ``static_watts`` (None or a mapping of domain id to watts) are valid (``instrument()``'s keywords)."""
    if policy is not None and policy not in ATTRIBUTION_POLICIES and policy not in DEPRECATED_POLICY_NAMES:
        raise ConfigurationError(f"attribution_policy={policy!r} is not one of {', '.join(ATTRIBUTION_POLICIES)}")
    if static_watts is None:
        return attribution_policy_name(policy)  # type: ignore[arg-type]
    if not isinstance(static_watts, Mapping):
        raise ConfigurationError(f"static_watts={static_watts!r} is not a mapping of domain id to watts")
    for domain, watts in static_watts.items():
        problem = static_watts_problem(domain, watts)
        if problem is not None:
            raise ConfigurationError(f"static_watts={{{domain!r}: {watts!r}}}: {problem}")
    return attribution_policy_name(policy)  # type: ignore[arg-type]


class Attributor:
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
        policy: Who carries static energy (``capacity``, ``busy``, ``dynamic``); default the meter's
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
        gpu_shares: "GpuProcessShares | NvmlProcessShares | None" = None,
        sample: bool = True,
        period_s: float = HISTORY_PERIOD_S,
        history_s: float = HISTORY_S,
        policy: str | None = None,
        static_watts: Mapping[str, float] | None = None,
    ) -> None:
        self.meter = meter
        clocks = clocks or CpuClocks(meter.settings.procfs_root)
        if gpu_shares is None:
            gpu_domains = [d for d in meter.domains if d.in_total and ATTRIBUTION_KIND[d.kind] == KIND_GPU]
            if gpu_domains:
                from otel_joules.attribution.gpu import gpu_process_shares

                gpu_shares = gpu_process_shares(gpu_domains)
        #: The sampler thread, the history, its prices and baselines.
        self.prices = PriceHistory(
            meter, clocks=clocks, gpu_shares=gpu_shares, sample=sample, period_s=period_s, history_s=history_s
        )
        #: Each thread's ledger of open spans, priced by :attr:`prices`.
        self.ledger = SpanLedger(self.prices, compiled=meter.fast_path)
        self.prices.spans_open = self.ledger.spans_open
        self.configure(policy=policy, static_watts=static_watts)
        # Every attributor, shared or not: its sampler thread holds locks across reads.
        register_fork_hook(self, "_after_fork_in_child")
        clocks.host()  # fail now, with a clear error, rather than at the first span
        self.prices.sample()
        # Sampling from now on, not from the first span: the first spans then find prices.
        self.prices.ensure_sampling()

    def _after_fork_in_child(self) -> None:
        # The one re-initialisation after fork: the history first, so the ledgers start from its prices.
        self.prices.after_fork_in_child()
        self.ledger.after_fork_in_child()

    # -- configuration and what the history says ------------------------------------------------

    def configure(self, *, policy: str | None = None, static_watts: Mapping[str, float] | None = None) -> None:
        """Set the policy and add configured static watts (by domain id; they win over the settings'), from the
        next sampler period on: what was priced stays as it was.

        Raises:
            ConfigurationError: ``policy`` is not one of ``capacity``, ``busy``, ``dynamic``, or a static-watts
                entry is not a domain id with watts between 0 and the bound.
        """
        policy = check_attribution_options(policy, static_watts)
        self.prices.configure(policy=policy, static_watts=static_watts)

    @property
    def clocks(self) -> CpuClocks:
        """Where CPU times come from."""
        return self.prices.clocks

    @property
    def gpu_shares(self) -> "GpuProcessShares | NvmlProcessShares | None":
        """This process's fraction of each GPU domain (None: no GPU measured)."""
        return self.prices.gpu_shares

    @property
    def kinds(self) -> tuple[str, ...]:
        """The attribution kinds the meter measures."""
        return self.prices.kinds

    @property
    def kind_indices(self) -> dict[str, tuple[int, ...]]:
        """The meter's domain indices of each kind (domains that add to the total)."""
        return self.prices.kind_indices

    @property
    def has_gpu(self) -> bool:
        """Whether a GPU domain adds to the total."""
        return self.prices.has_gpu

    @property
    def period_s(self) -> float:
        """The sampler period."""
        return self.prices.period_s

    @property
    def history_s(self) -> float:
        """How much history is kept."""
        return self.prices.history_s

    @property
    def policy(self) -> str:
        """Who carries static energy (``capacity``, ``busy``, ``dynamic``)."""
        return self.prices.policy

    @property
    def attribution_label(self) -> str:
        """``energy.attribution``'s value (``cpu_time_share/<policy>``)."""
        return self.prices.attribution_label

    @property
    def baselines(self) -> "Baselines":
        """The domains' static watts."""
        return self.prices.baselines

    @property
    def baseline_state(self) -> str:
        """``energy.baseline`` of the CPU-side and memory domains."""
        return self.prices.baseline_state

    @property
    def stat_fault(self) -> bool:
        """True while ``/proc/stat``'s latest read failed or was implausible: spans that end get no share."""
        return self.prices.stat_fault

    @property
    def wall_offset_ns(self) -> int:
        """``time.time_ns() - time.monotonic_ns()`` at the latest sample (spans state wall times)."""
        return self.prices.wall_offset_ns

    @property
    def history(self) -> tuple[HistorySample, ...]:
        """The samples kept, oldest first."""
        return self.prices.history

    @property
    def oldest_ns(self) -> int | None:
        """Monotonic time of the oldest sample kept, None before the first."""
        return self.prices.oldest_ns

    def sample(self) -> HistorySample | None:
        """Read ``/proc/stat``, this process's CPU time, the counters (and GPU shares); extend the history."""
        return self.prices.sample()

    def ensure_sampling(self) -> None:
        """Start the sampler thread unless it runs, sampling is off or the attributor is closed."""
        self.prices.ensure_sampling()

    def close(self) -> None:
        """Stop the sampler thread. Idempotent."""
        self.prices.close()

    def process_joules(self) -> dict[str, float]:
        """This process's attributed joules per kind since the attributor started (up to the latest sample)."""
        return self.prices.process_joules()

    def process_joules_since(self, monotonic_ns: int) -> dict[str, float] | None:
        """This process's attributed joules per kind from an instant to now (:meth:`.PriceHistory.process_joules_since`)."""
        return self.prices.process_joules_since(monotonic_ns)

    def process_joules_estimated(self) -> dict[str, float]:
        """The part of :meth:`process_joules` priced from standby estimates while ``otel-joules agent`` was away."""
        return self.prices.process_joules_estimated()

    def process_watts(self) -> dict[str, float]:
        """This process's attributed power per kind over the latest sampler period."""
        return self.prices.process_watts()

    def process_watts_estimated(self) -> dict[str, float]:
        """The part of :meth:`process_watts` priced from standby estimates."""
        return self.prices.process_watts_estimated()

    def unattributed_joules(self) -> dict[str, float]:
        """The host's joules the model gave to no process (:meth:`.PriceHistory.unattributed_joules`)."""
        return self.prices.unattributed_joules()

    def baseline_watts(self) -> list[tuple[int, float | None, str]]:
        """(the meter's domain index, static watts or None while nothing is known, ``energy.baseline``) of every
        domain that adds to the total."""
        return self.prices.baseline_watts()

    def price(self, t0_ns: int, t1_ns: int) -> tuple[float, float, float]:
        """Joules per CPU second (CPU-side, memory: the policy's; dynamic) for CPU time spent between two
        monotonic instants (:meth:`.PriceHistory.price`)."""
        return self.prices.price(t0_ns, t1_ns)

    def first_forecast(self, snapshot: EnergySnapshot | None = None) -> tuple[float, ...]:
        """The forecast before the sampler's second sample (:meth:`.PriceHistory.first_forecast`)."""
        return self.prices.first_forecast(snapshot)

    def snapshot_at(self, monotonic_ns: int, latest: EnergySnapshot) -> EnergySnapshot | None:
        """The meter's cumulative joules at a past instant, interpolated in the history
        (:meth:`.PriceHistory.snapshot_at`)."""
        return self.prices.snapshot_at(monotonic_ns, latest)

    # -- the span path ------------------------------------------------------------------------

    def open_span(self, parent: SpanShare | None = None) -> SpanShare:
        """Start attributing to a new span on the calling thread, a child of ``parent`` if that is local."""
        return self.ledger.open_span(parent)

    def close_span(
        self, share: SpanShare, start: EnergySnapshot | None = None, end: EnergySnapshot | None = None
    ) -> SpanAttribution | None:
        """Stop attributing to ``share``'s span and return what it was attributed (:meth:`.SpanLedger.close_span`)."""
        return self.ledger.close_span(share, start, end)
