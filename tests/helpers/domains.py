"""Five domains of every kind of row the energy arithmetic treats differently, on channels never read.

Counters, integrated power, an estimate, a domain outside the total (core inside the package), and
update periods from none to 100 ms: what :func:`otel_joules.meter.energy.energy_between` and the span
attributes built from it are checked against.
"""

from __future__ import annotations

from otel_joules.sensors.base import Channel, Domain, Method
from otel_joules.semconv import KIND_CPU, KIND_GPU, KIND_MEMORY


class FixedChannel(Channel):
    """A domain whose reads the test never uses: only its Domain matters."""

    def read_uj(self) -> int:
        return 0


def five_domains() -> list[Domain]:
    """package_0, core_0 (not in the total), dram_0, nvidia_gpu_0 (power integration, 100 ms), cpu_estimate (10 ms)."""
    return [
        Domain("package_0", KIND_CPU, "p", "p0"),
        Domain("core_0", KIND_CPU, "c", "c0", in_total=False),
        Domain("dram_0", KIND_MEMORY, "d", "d0"),
        Domain("nvidia_gpu_0", KIND_GPU, "g", "g0", method=Method.POWER_INTEGRATION, update_period_s=0.1),
        Domain("cpu_estimate", KIND_CPU, "e", "e0", method=Method.ESTIMATE, update_period_s=0.01),
    ]
