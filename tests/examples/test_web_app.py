"""examples/web_app.py runs here: two requests to itself, one span each with energy."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.fakes.powercap import make_powercap
from tests.helpers.processes import REPO, clean_env

EXAMPLE = REPO / "examples" / "web_app.py"

SPAN_LINE = re.compile(r"^span '(?P<name>[^']+)': (?P<seconds>[0-9.]+) s, energy\.joules=(?P<joules>\S+) energy\.source=(?P<source>\w+)$")


def run_demo(tmp_path: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = clean_env(tmp_path, extra)
    result = subprocess.run([sys.executable, str(EXAMPLE), "--demo"], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result


def test_demo_serves_two_requests_with_energy_on_each_span(tmp_path):
    # A fake one-socket host whose counters stand still: every span measures exactly 0 J.
    pc = make_powercap(tmp_path / "sys", "one_socket")
    result = run_demo(tmp_path, OTEL_JOULES_SYSFS_ROOT=pc.sysfs_root)
    lines = result.stdout.splitlines()
    assert 'GET /primes?limit=200000 -> 200 {"limit": 200000, "primes": 17984}' in lines
    assert 'GET /primes?limit=400000 -> 200 {"limit": 400000, "primes": 33860}' in lines
    spans = [m.groupdict() for m in map(SPAN_LINE.match, lines) if m]
    assert [s["name"] for s in spans] == ["count_primes", "GET /primes", "count_primes", "GET /primes"]
    assert all(s["joules"] == "0.0" and s["source"] == "measured" for s in spans)
    assert result.stderr == ""


def test_demo_estimates_where_nothing_is_measurable(tmp_path):
    """No powercap tree at all: the estimator fills in, and the spans say so."""
    result = run_demo(tmp_path, OTEL_JOULES_SYSFS_ROOT=str(tmp_path / "empty-sys"))
    spans = [m.groupdict() for m in map(SPAN_LINE.match, result.stdout.splitlines()) if m]
    assert len(spans) == 4
    assert {s["source"] for s in spans} == {"estimate"}
    assert all(float(s["joules"]) >= 0 for s in spans)
