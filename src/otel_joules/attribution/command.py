"""The attribution model for a whole command run as a child process (``otel-joules run``).

The command's CPU time is known only once it is reaped, so its share is priced over the whole run
(:func:`~.shares.command_attribution`); the domains' baselines for the static/dynamic split come
from :class:`CommandBaselines`: an :class:`~.attributor.Attributor` whose sampler runs in the
waiting parent during the command, learning them from the host's periods as spans' do (or taking
the configured ones). It prices nothing itself: the parent's own CPU time is not the work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from otel_joules.attribution.attributor import Attributor
from otel_joules.attribution.procfs import CpuClocks, ProcfsReadError
from otel_joules.semconv import BASELINE_UNKNOWN

if TYPE_CHECKING:
    from otel_joules.meter.meter import EnergyMeter


class HostOnlyClocks(CpuClocks):
    """The host's CPU times only: the waiting parent's own CPU time counts as none (it is not the work)."""

    def __init__(self, procfs_root: str) -> None:
        super().__init__(procfs_root)
        self.native = False

    def process_cpu_s(self) -> float:
        """Always 0.0: the parent only waits; the command's CPU seconds are counted from its children."""
        return 0.0


class NoGpuShares:
    """No GPU fractions for the parent: the command's are :class:`~.gpu.CommandGpuShares`' (NVML is read once)."""

    def fractions(self) -> list[float]:
        """No GPU fractions: an empty list."""
        return []


class CommandBaselines:
    """The meter's domain baselines, learned while a command runs (or configured), and the policy.

    Args:
        meter: The run's meter (its settings give the policy and configured watts).
    """

    def __init__(self, meter: "EnergyMeter") -> None:
        self._meter = meter
        self.policy = meter.settings.attribution_policy
        try:
            self._attributor: Attributor | None = Attributor(
                meter, clocks=HostOnlyClocks(meter.settings.procfs_root), gpu_shares=NoGpuShares()  # type: ignore[arg-type]
            )
        except (ProcfsReadError, OSError):
            self._attributor = None  # the share is missing anyway (run says why)

    def static_watts(self) -> list[float | None]:
        """Each domain's static watts by the meter's domain index (None: nothing known, or not in the total)."""
        watts: list[float | None] = [None] * len(self._meter.domains)
        if self._attributor is not None:
            for i, value, _ in self._attributor.baseline_watts():
                watts[i] = value
        return watts

    @property
    def state(self) -> str:
        """``energy.baseline`` of the CPU-side and memory domains."""
        return self._attributor.baseline_state if self._attributor is not None else BASELINE_UNKNOWN

    def close(self) -> None:
        """Stop the sampler (one last sample first, so the baselines include the command's last period)."""
        if self._attributor is not None:
            self._attributor.sample()
            self._attributor.close()
