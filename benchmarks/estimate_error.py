"""The estimator's CPU model against an independent reference, CPU by CPU: its error and whether its band holds.

The model (:mod:`otel_joules.sensors.cpu_power`) gives watts per hardware thread from Cloud Carbon
Footprint's per-architecture figures (SPECpower servers, whole-server watts over threads). The reference
here is Boavizta's CPU consumption profile built from a CPU's own TDP: the points its model is fitted to,
``(0.12, 0.32, 0.75, 1.02) x TDP`` at 0, 10, 50 and 100 % load (boaviztapi 2.5.0,
``models/consumption_profile/consumption_profile.py``, ``CPUConsumptionProfileModel._TDP_RATIOS``; AGPL-3.0:
the four published figures are typed here, nothing of it is imported or shipped), linear between them,
divided by the CPU's threads. The CPUs below are the reference's, not the model's: the model has no
per-CPU parameter, so every one is held out. Their TDP and thread counts are the vendors' published
specifications (Intel ARK, AMD product pages), which Boavizta's ``cpu_specs.csv`` repeats.

For each CPU it prints the model's and the reference's watts per thread at 0, 10, 50 and 100 % load, the ratio
reference / model at each, and, over all CPUs, the extremes of that ratio: ``HELD_OUT_LOW_RATIO`` and
``HELD_OUT_HIGH_RATIO`` in :mod:`otel_joules.sensors.cpu_power` are these extremes, rounded outwards to 0.05,
so the band of a CPU whose architecture is known holds every reference value here. It also checks the bands of
the models used when the architecture is hidden (the family's mean, ``ccf:amd_epyc``; nothing known, ``ccf:any``):
``covered`` counts the CPUs whose reference lies inside that band at every load.

    python -m benchmarks.estimate_error [--json]

Pure arithmetic over typed figures: it runs anywhere in well under a second.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass

from otel_joules.sensors.cpu_power import Machine, architecture_of, power_model

#: Load levels (%) the reference is given at, and its watts there as a fraction of TDP (Boavizta's points).
REFERENCE_LOADS = (0.0, 10.0, 50.0, 100.0)
REFERENCE_TDP_RATIOS = (0.12, 0.32, 0.75, 1.02)

#: (CPU model name as /proc/cpuinfo shows it, TDP in W, hardware threads): vendors' specifications.
CPUS: tuple[tuple[str, float, int], ...] = (
    ("Intel(R) Xeon(R) CPU E5-2670 0 @ 2.60GHz", 115, 16),
    ("Intel(R) Xeon(R) CPU E5-2690 0 @ 2.90GHz", 135, 16),
    ("Intel(R) Xeon(R) CPU E5-2670 v2 @ 2.50GHz", 115, 20),
    ("Intel(R) Xeon(R) CPU E5-2680 v2 @ 2.80GHz", 115, 20),
    ("Intel(R) Xeon(R) CPU E5-2690 v3 @ 2.60GHz", 135, 24),
    ("Intel(R) Xeon(R) CPU E5-2699 v3 @ 2.30GHz", 145, 36),
    ("Intel(R) Xeon(R) CPU E5-2690 v4 @ 2.60GHz", 135, 28),
    ("Intel(R) Xeon(R) CPU E5-2699 v4 @ 2.20GHz", 145, 44),
    ("Intel(R) Xeon(R) Platinum 8180 CPU @ 2.50GHz", 205, 56),
    ("Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz", 150, 40),
    ("Intel(R) Xeon(R) Silver 4114 CPU @ 2.20GHz", 85, 20),
    ("Intel(R) Xeon(R) Platinum 8280 CPU @ 2.70GHz", 205, 56),
    ("Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz", 150, 40),
    ("Intel(R) Xeon(R) Silver 4216 CPU @ 2.10GHz", 100, 32),
    ("Intel(R) Xeon(R) E-2288G CPU @ 3.70GHz", 95, 16),
    ("Intel(R) Xeon(R) E-2176G CPU @ 3.70GHz", 80, 12),
    ("AMD EPYC 7551 32-Core Processor", 180, 64),
    ("AMD EPYC 7601 32-Core Processor", 180, 64),
    ("AMD EPYC 7502 32-Core Processor", 180, 64),
    ("AMD EPYC 7742 64-Core Processor", 225, 128),
    ("AMD EPYC 7543 32-Core Processor", 225, 64),
    ("AMD EPYC 7763 64-Core Processor", 280, 128),
)
#: Ampere Altra Q64-30 (Arm Neoverse N1, the core of AWS Graviton2; 180 W, 64 threads): cpuinfo shows no model
#: name on Arm, only the part number.
ARM_CPUS: tuple[tuple[str, str, float, int], ...] = (("Ampere Altra Q64-30", "0xd0c", 180, 64),)


@dataclass
class CpuResult:
    """One CPU: the model's source, watts per thread by load, and reference / model."""

    cpu: str
    model_source: str
    model_watts: list[float]
    reference_watts: list[float]
    ratios: list[float]
    hidden_source: str
    hidden_covered: bool
    any_covered: bool


def reference_watts(tdp_watts: float, threads: int) -> list[float]:
    """The reference's watts per thread at :data:`REFERENCE_LOADS`."""
    return [ratio * tdp_watts / threads for ratio in REFERENCE_TDP_RATIOS]


def _inside(model, reference: list[float]) -> bool:  # type: ignore[no-untyped-def]
    watts = [model.watts(1, load / 100) for load in REFERENCE_LOADS]
    return all(w * model.low_factor <= r <= w * model.high_factor for w, r in zip(watts, reference))


def run() -> dict[str, object]:
    """Every CPU's comparison and the summary."""
    results: list[CpuResult] = []
    cpus = [(name, "", tdp, threads) for name, tdp, threads in CPUS] + list(ARM_CPUS)
    nothing_known = power_model(Machine("", "", True, None, "benchmark"), 1, 0.0)
    for name, part, tdp, threads in cpus:
        # A VM: the per-vCPU figures of the architecture (bare metal would be the TDP model, not independent of the reference).
        model = power_model(Machine(name, part, True, None, "benchmark"), 1, tdp)
        reference = reference_watts(tdp, threads)
        watts = [model.watts(1, load / 100) for load in REFERENCE_LOADS]
        _, family = architecture_of(name, part)
        hidden_name = {"intel": "Intel(R) Xeon(R) CPU", "amd_epyc": "AMD EPYC"}.get(family or "", "")
        hidden = power_model(Machine(hidden_name, "", True, None, "benchmark"), 1, tdp)
        results.append(
            CpuResult(
                name, model.source, watts, reference, [r / w for r, w in zip(reference, watts)],
                hidden.source, _inside(hidden, reference), _inside(nothing_known, reference),
            )
        )
    ratios = [r for result in results for r in result.ratios]
    log_errors = [abs(math.log(r)) for r in ratios]
    return {
        "cpus": [asdict(r) for r in results],
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "ratio_at_50_percent": [r.ratios[2] for r in results],
        "median_abs_error_percent": 100 * (math.exp(sorted(log_errors)[len(log_errors) // 2]) - 1),
        "held_out_low_ratio": math.floor(min(ratios) * 20) / 20,
        "held_out_high_ratio": math.ceil(max(ratios) * 20) / 20,
        "hidden_architecture_covered": sum(r.hidden_covered for r in results),
        "nothing_known_covered": sum(r.any_covered for r in results),
        "count": len(results),
    }


def main(argv: list[str] | None = None) -> int:
    """Print the comparison (a table, or JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    report = run()
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{'CPU':<46} {'model':<22} {'W/thread 0%..100% model':>24} {'reference':>14}  reference/model at 0,10,50,100%")
    for cpu in report["cpus"]:  # type: ignore[attr-defined]
        m, r = cpu["model_watts"], cpu["reference_watts"]
        ratios = " ".join(f"{x:.2f}" for x in cpu["ratios"])
        print(f"{cpu['cpu'][:46]:<46} {cpu['model_source']:<22} {m[0]:>10.2f}..{m[3]:<6.2f} {r[0]:>8.2f}..{r[3]:<6.2f} {ratios}")
    print()
    print(
        f"reference/model over {report['count']} CPUs x 4 loads: {report['ratio_min']:.3f} .. {report['ratio_max']:.3f} "
        f"(band factors {report['held_out_low_ratio']:.2f} .. {report['held_out_high_ratio']:.2f}); "
        f"median |error| {report['median_abs_error_percent']:.0f}%"
    )
    print(
        f"architecture hidden (family mean): reference inside the band for {report['hidden_architecture_covered']}/"
        f"{report['count']}; nothing known (ccf:any): {report['nothing_known_covered']}/{report['count']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
