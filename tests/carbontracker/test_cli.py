"""``python -m otel_joules.carbontracker.cli``: carbontracker's command line on a fake powercap tree.

The tracked command is a child that spends a known amount of energy by advancing the fake
RAPL counter (in place, as the hardware does); the logs it leaves are read by our parser
and by carbontracker 2.4.7's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from carbontracker import parser as ct_parser

from otel_joules.carbontracker import parser as our_parser
from otel_joules.carbontracker.logs import TRACE_ID_LOG_PREFIX

from tests.fakes.powercap import FakePowercap

J_PER_KWH = 3.6e6
PUE = 1.58

SPEND = textwrap.dedent(
    """
    import os, sys
    energy_uj, joules, seen = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    fd = os.open(energy_uj, os.O_RDWR)
    value = int(os.pread(fd, 64, 0).split()[0]) + round(joules * 1e6)
    os.pwrite(fd, f"{value}\\n".ljust(24).encode(), 0)
    os.close(fd)
    with open(seen, "w") as out:
        out.write(os.environ.get("TRACEPARENT", ""))
    sys.exit(int(sys.argv[4]))
    """
)


def _cli(tmp_path: Path, pc: FakePowercap | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OTEL_JOULES_COUNTRY": "DK"}
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                 "OTEL_JOULES_CARBON_PROVIDERS", "OTEL_JOULES_ELECTRICITYMAPS_API_KEY", "TRACEPARENT"):
        env.pop(name, None)
    if pc is not None:
        env["OTEL_JOULES_SYSFS_ROOT"] = pc.sysfs_root
    return subprocess.run(
        [sys.executable, "-m", "otel_joules.carbontracker.cli", *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )


def test_tracks_a_command_and_writes_carbontracker_logs(tmp_path: Path, powercap: FakePowercap) -> None:
    logs = tmp_path / "logs"
    spans = tmp_path / "spans.jsonl"
    seen = tmp_path / "traceparent"
    energy_uj = str(powercap.zones["package_0"].path / "energy_uj")
    proc = _cli(tmp_path, powercap, "--log_dir", str(logs), "--exporter", f"jsonl:{spans}",
                sys.executable, "-c", SPEND, energy_uj, "1800", str(seen), "3")
    assert proc.returncode == 3, proc.stderr  # the command's exit code (carbontracker exits 0)
    assert "exited with code 3" in proc.stderr
    assert "CarbonTracker: The following components were found: CPU with device(s) cpu:0, dram:0." in proc.stdout
    assert "Actual consumption:\n" in proc.stdout

    kwh = 1800.0 * PUE / J_PER_KWH  # the child's energy, the only counter that moved
    grams = kwh * 143.3  # Denmark's offline yearly average (OTEL_JOULES_COUNTRY=DK)
    (run,) = our_parser.parse_all_logs(logs)
    assert run["actual"]["energy (kWh)"] == pytest.approx(kwh, abs=1e-12)
    assert run["actual"]["co2eq (g)"] == pytest.approx(grams, rel=1e-3)
    assert run["pred"] is None
    (theirs,) = ct_parser.parse_all_logs(str(logs))  # carbontracker's own parser reads the same numbers
    assert theirs["actual"]["energy (kWh)"] == run["actual"]["energy (kWh)"]
    assert theirs["actual"]["co2eq (g)"] == run["actual"]["co2eq (g)"]

    # The child ran inside the epoch span: its TRACEPARENT names the run's trace.
    trace_line = [line for line in Path(run["standard_filename"]).read_text().splitlines() if TRACE_ID_LOG_PREFIX in line]
    trace_id = trace_line[0].split(TRACE_ID_LOG_PREFIX)[1][:32]
    assert seen.read_text().split("-")[1] == trace_id
    exported = [json.loads(line) for line in spans.read_text().splitlines()]
    by_name = {span["name"]: span for span in exported}
    assert set(by_name) == {"training", "epoch"}
    assert by_name["epoch"]["trace_id"] == trace_id
    assert by_name["epoch"]["attributes"]["energy.package_0.joules"] == pytest.approx(1800.0)


def test_parse_and_report(tmp_path: Path, powercap: FakePowercap) -> None:
    logs = tmp_path / "logs"
    energy_uj = str(powercap.zones["package_0"].path / "energy_uj")
    assert _cli(tmp_path, powercap, "--log_dir", str(logs), sys.executable, "-c", SPEND, energy_uj, "900",
                str(tmp_path / "seen"), "0").returncode == 0
    parsed = _cli(tmp_path, None, "--parse", str(logs))
    assert parsed.returncode == 0, parsed.stderr
    kwh = 900.0 * PUE / J_PER_KWH
    assert parsed.stdout.startswith(f"The training of models in this work is estimated to use {kwh:.16f} kWh")
    (std,) = logs.glob("*_carbontracker.log")
    pdf = tmp_path / "out" / "report.pdf"
    pdf.parent.mkdir()
    reported = _cli(tmp_path, None, "--report", str(std), "--output", str(pdf))
    assert reported.returncode == 0, reported.stderr
    assert reported.stdout.strip() == f"Report generated: {pdf}"
    assert pdf.read_bytes().startswith(b"%PDF-")


def test_usage_errors_are_clear(tmp_path: Path, powercap: FakePowercap) -> None:
    missing = _cli(tmp_path, powercap, "--log_dir", str(tmp_path / "logs"), "no-such-command-xyz")
    assert missing.returncode == 127 and "no-such-command-xyz: command not found on PATH" in missing.stderr
    assert not (tmp_path / "logs").exists()  # nothing measured, no empty run logged
    nothing = _cli(tmp_path, powercap)
    assert nothing.returncode == 2 and "no command given" in nothing.stderr
    keys = _cli(tmp_path, powercap, "--api_keys", "electricitymaps=KEY", "true")
    assert keys.returncode == 2 and "--api_keys 'electricitymaps=KEY' must be a dictionary" in keys.stderr
    util = _cli(tmp_path, powercap, "--sim-cpu", "X", "--sim-cpu-tdp", "100", "--sim-cpu-util", "2", "true")
    assert util.returncode == 2 and "sim_cpu_util=2.0 must be greater than 0 and at most 1" in util.stderr
    empty = tmp_path / "empty-logs"
    empty.mkdir()
    nothing_logged = _cli(tmp_path, None, "--parse", str(empty))
    assert nothing_logged.returncode == 2 and "no carbontracker logs found" in nothing_logged.stderr
    assert "kWh" not in nothing_logged.stdout  # never "estimated to use 0.0000000000000000 kWh"
    assert "Traceback" not in missing.stderr + nothing.stderr + keys.stderr + util.stderr + nothing_logged.stderr


def test_simulated_cpu_as_in_carbontracker(tmp_path: Path, powercap: FakePowercap) -> None:
    logs = tmp_path / "logs"
    proc = _cli(tmp_path, powercap, "--log_dir", str(logs), "--sim-cpu", "Intel Xeon", "--sim-cpu-tdp", "150",
                "--sim-cpu-util", "0.4", sys.executable, "-c", "import time; time.sleep(0.3)")
    assert proc.returncode == 0, proc.stderr
    (run,) = our_parser.parse_all_logs(logs)
    assert run["components"]["cpu"]["devices"] == ["Intel Xeon (simulated)"]
    assert run["components"]["cpu"]["avg_power_usages (W)"].tolist() == [[pytest.approx(60.0)]]  # 150 W x 0.4


def test_report_to_a_link_is_refused_in_one_line(tmp_path: Path) -> None:
    from tests.carbontracker.test_report import _logged_run

    std = _logged_run(tmp_path / "logs")
    target = tmp_path / "bashrc"
    target.write_bytes(b"# never touched\n")
    link = tmp_path / "report.pdf"
    link.symlink_to(target)
    reported = _cli(tmp_path, None, "--report", str(std), "--output", str(link))
    assert reported.returncode == 1
    (line,) = reported.stderr.splitlines()
    assert "is a symbolic link" in line and "remove the link" in line
    assert target.read_bytes() == b"# never touched\n"
