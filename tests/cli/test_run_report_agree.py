"""One carbon story: ``otel-joules run``'s summary and ``otel-joules report`` on its export print the same figures.

The rule (docs/run.md, docs/report.md): the headline CO2eq is of the command's share, the energy ``report`` counts
for the run; where the run has no share, both use the host's interval energy. Each output names that energy, the
PUE and the intensity. A carbontracker log and a trace export in one report are totalled apart, never added.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from otel_joules.carbon.units import format_co2eq_grams
from otel_joules.cli.summary import format_joules
from otel_joules.carbontracker.logs import CarbonTrackerLogWriter
from tests.fakes.powercap import FakePowercap, make_powercap
from tests.helpers.processes import BUSY_THEN_ADVANCE, clean_env, otel_joules_command

#: What the command adds to the fake counters: 3 J to the package, 0.5 J to DRAM (3.5 J in all).
ADDED_UJ = {"package_0": 3_000_000, "dram_0": 500_000}
PUE = 1.5
INTENSITY = 300.0

_SHARE_LINE = re.compile(
    r"  carbon   (?P<grams>\S+) gCO2eq of the command's share \((?P<joules>[^)]+)\) at 300 gCO2eq/kWh and PUE 1\.5 "
    r"\(explicit: [^)]*\); the host's interval energy \((?P<host_joules>[^)]+)\): (?P<host_grams>\S+) gCO2eq$",
    re.M,
)
_HOST_LINE = re.compile(
    r"  carbon   (?P<grams>\S+) gCO2eq of the host's interval energy \((?P<joules>[^)]+)\), as there is no share, "
    r"at 300 gCO2eq/kWh and PUE 1\.5 ",
    re.M,
)


def _command(pc: FakePowercap) -> list[str]:
    args = [str(arg) for domain, uj in ADDED_UJ.items() for arg in (pc.zones[domain].path / "energy_uj", uj)]
    return [sys.executable, "-c", BUSY_THEN_ADVANCE, *args]


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(otel_joules_command(*args), env=env, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def _run_and_report(tmp_path: Path, *run_options: str) -> tuple[str, dict, str]:
    pc = make_powercap(tmp_path / "sys", "one_socket")
    env = clean_env(tmp_path, {"OTEL_JOULES_SYSFS_ROOT": pc.sysfs_root,
                               "OTEL_JOULES_AGENT_SOCKET": str(tmp_path / "no-agent.sock")})
    export = tmp_path / "run.jsonl"
    run = _cli(["run", "--exporter", f"jsonl:{export}", "--pue", str(PUE), "--carbon-intensity", str(INTENSITY),
                *run_options, "--", *_command(pc)], env)
    assert run.returncode == 0, run.stderr
    as_json = _cli(["report", str(export), "--json"], env)
    as_text = _cli(["report", str(export)], env)
    assert as_json.returncode == 0 and as_text.returncode == 0, as_json.stderr + as_text.stderr
    return run.stderr, json.loads(as_json.stdout), as_text.stdout


def _row(text: str) -> list[str]:
    header, _, row = text.split("\n\n")[1].splitlines()[:3]
    return row.split()


def test_run_and_report_on_its_export_agree_on_the_shares_carbon_to_the_printed_digit(tmp_path: Path) -> None:
    summary, report, text = _run_and_report(tmp_path)
    line = _SHARE_LINE.search(summary)
    assert line, summary
    (run,) = report["runs"]
    assert run["energy_basis"] == "attributed share"
    # The same energy, PUE and intensity, printed the same.
    assert format_joules(run["energy_joules"]) == line["joules"]
    assert format_joules(run["host_interval_joules"]) == line["host_joules"] == "3.5 J"
    assert (run["pue"], run["intensity_gco2eq_per_kwh"]) == (PUE, INTENSITY)
    assert format_co2eq_grams(run["co2eq_grams"]) == line["grams"]
    assert format_co2eq_grams(report["totals"]["co2eq_grams"]) == line["grams"]
    # The host's figure is the other one, named as such, never the headline.
    assert line["host_grams"] == format_co2eq_grams(3.5 / 3.6e6 * PUE * INTENSITY)
    row = _row(text)
    assert row[-1] == line["grams"] and "attributed" in row and "1.5" in row and "300.00" in row
    total = next(l for l in text.splitlines() if l.startswith("Total: "))
    assert f", {line['grams']} gCO2eq: the traces' attributed shares, at PUE 1.5 and 300.00 gCO2eq/kWh (recorded)" in total


def test_without_a_share_both_use_the_hosts_interval_energy_and_say_so(tmp_path: Path) -> None:
    summary, report, text = _run_and_report(tmp_path, "--procfs-root", str(tmp_path / "no-proc"))
    line = _HOST_LINE.search(summary)
    assert line, summary
    (run,) = report["runs"]
    assert run["energy_basis"] == "interval energy" and run["energy_joules"] == 3.5
    assert line["joules"] == "3.5 J"
    assert format_co2eq_grams(run["co2eq_grams"]) == line["grams"] == format_co2eq_grams(3.5 / 3.6e6 * PUE * INTENSITY)
    assert _row(text)[-1] == line["grams"] and "interval" in _row(text)
    total = next(l for l in text.splitlines() if l.startswith("Total: "))
    assert f"{line['grams']} gCO2eq: the traces' topmost spans' interval energy (no attribution in the export)" in total


def test_a_carbontracker_log_and_a_trace_export_are_never_added_into_one_total(tmp_path: Path) -> None:
    _, alone, _ = _run_and_report(tmp_path)
    trace_joules = alone["totals"]["energy_joules"]
    trace_grams = alone["totals"]["co2eq_grams"]
    # A carbontracker log beside the export: 600 J of host energy at PUE 1.58, 0.05 g as logged.
    writer = CarbonTrackerLogWriter(tmp_path / "logs", clock=lambda: 1_700_000_000.0, run_id=7)
    writer.write_header({"cpu": ["cpu:0"]})
    writer.write_epoch(1, duration_seconds=2.0, power_watts={"cpu": 150.0})
    writer.write_epoch(2, duration_seconds=3.0, power_watts={"cpu": 100.0})
    writer.write_average_intensity(200.0)
    writer.write_consumption("actual", epochs=2, duration_seconds=5.0, energy_joules=600.0 * 1.58, co2eq_grams=0.05)
    env = clean_env(tmp_path, {"OTEL_JOULES_AGENT_SOCKET": str(tmp_path / "no-agent.sock")})
    inputs = [str(tmp_path / "run.jsonl"), str(tmp_path / "logs")]
    data = json.loads(_cli(["report", *inputs, "--json"], env).stdout)
    text = _cli(["report", *inputs], env).stdout

    totals = data["totals"]
    assert totals["runs"] == 2
    assert totals["energy_joules"] is totals["energy_kwh"] is totals["co2eq_grams"] is None and data["equivalents"] == []
    trace, log = totals["by_kind"]["trace"], totals["by_kind"]["carbontracker"]
    assert (trace["energy_joules"], trace["co2eq_grams"]) == (trace_joules, trace_grams)
    assert log["energy_joules"] == pytest.approx(600.0, rel=1e-8) and log["co2eq_grams"] == 0.05
    assert trace["energy_of"] == "the traces' attributed shares"
    assert log["energy_of"] == "the host's energy each tracker logged"
    # The text: one line per kind, each naming its energy; no line holds the sum of the two.
    assert "Total:" not in text
    assert f"  traces, 1 run(s): {trace_joules:.3f} J" in text
    assert "  carbontracker logs, 1 run(s): 600.000 J" in text and "0.05000 gCO2eq: the host's energy each tracker logged" in text
    mixed_joules = f"{trace_joules + log['energy_joules']:.3f}"
    mixed_grams = format_co2eq_grams(trace_grams + 0.05)
    assert mixed_joules not in text and f"{mixed_grams} gCO2eq" not in text
