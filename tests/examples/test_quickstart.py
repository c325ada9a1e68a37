"""The README's main command: examples/quickstart.py prints labelled energy for each span."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.fakes.machine import write_dmi
from tests.fakes.powercap import make_powercap
from tests.helpers.processes import REPO, clean_env

QUICKSTART = REPO / "examples" / "quickstart.py"


def _run(sysfs_root: Path) -> subprocess.CompletedProcess[str]:
    # The suite's isolated agent socket kept (never the host's real agent); no GPU library: the CPU path alone.
    env = clean_env(sysfs_root, {"OTEL_JOULES_SYSFS_ROOT": str(sysfs_root), "LD_LIBRARY_PATH": ""})
    return subprocess.run([sys.executable, str(QUICKSTART)], env=env, capture_output=True, text=True, timeout=120)


def test_without_counters_it_prints_estimates_and_says_so(tmp_path: Path) -> None:
    # No class/powercap here; DMI says an EC2 instance, so the CPU model is Cloud Carbon Footprint's per vCPU.
    write_dmi(tmp_path, sys_vendor="Amazon EC2", product_name="m5.large")
    result = _run(tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "SOURCE: ESTIMATE" in out and "not measurements" in out
    assert "cpu_estimate: the CPUs, modelled, not measured:" in out and "DMI sys_vendor 'Amazon EC2'" in out
    (band,) = [line for line in out.splitlines() if line.startswith("band of that estimate: ")]
    low, high = float(band.split()[4]), float(band.split()[7])
    host = float(next(line for line in out.splitlines() if line.startswith("host during the workload: ")).split()[4])
    assert low < host < high
    assert "models: ccf:" in band and "memory:0.375_w_per_gb" in band
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.split()[:1] in (["count_primes"], ["hash_chain"], ["sort_numbers"], ["workload"])}
    assert set(rows) == {"count_primes", "hash_chain", "sort_numbers", "workload"}
    parts = [float(rows[name][1]) for name in ("count_primes", "hash_chain", "sort_numbers")]
    assert all(joules > 0 for joules in parts)
    # The root span covers its three children (plus the time between them).
    assert float(rows["workload"][1]) >= sum(parts) * 0.99
    assert "cpu_estimate" in out and "(estimate)" in out
    # Both numbers are labelled: the host's energy during the span and the span's share of it.
    assert "host (J)" in out and "share (J)" in out
    assert "host  = energy.joules" in out and "share = energy.attributed.joules" in out
    shares = {name: float(row[2]) for name, row in rows.items()}
    assert all(0 <= shares[name] <= float(rows[name][1]) for name in rows)
    # The root's share is inclusive: it holds its children's shares.
    assert shares["workload"] >= sum(shares[n] for n in ("count_primes", "hash_chain", "sort_numbers")) * 0.999
    assert "share of the workload:" in out


def test_with_readable_rapl_it_prints_measured_energy(tmp_path: Path) -> None:
    tree = make_powercap(tmp_path / "sys", "one_socket")
    result = _run(Path(tree.sysfs_root))
    assert result.returncode == 0, result.stderr
    # The fake counters do not move, so the figures are 0 J: what matters is the label and the domains.
    assert "SOURCE: MEASURED (domains: package_0, core_0, uncore_0, dram_0)" in result.stdout
