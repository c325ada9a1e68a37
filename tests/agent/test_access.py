"""The group route (``otel-joules setup-access``), the agent's systemd unit, and that no remedy anywhere opens the counters to everyone."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

from otel_joules.cli.agent import files_the_service_runs, installed_command, protect_home_for, systemd_word
from otel_joules.sensors.rapl import PERMISSION_REMEDY, WORLD_READABLE_RISK

REPO = Path(__file__).resolve().parents[2]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "otel_joules.cli.main", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"})  # the checkout's sources


def test_setup_access_prints_a_udev_rule_and_a_tmpfiles_alternative_giving_the_counters_to_the_group() -> None:
    result = cli("setup-access", "--group", "energy")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    rule = next(line for line in out.splitlines() if line.startswith('SUBSYSTEM=="powercap"'))
    assert 'KERNEL=="intel-rapl*:*"' in rule and 'ACTION=="add|change"' in rule
    assert 'RUN+="/bin/chown root:energy /sys%p/energy_uj"' in rule and 'RUN+="/bin/chmod 0440 /sys%p/energy_uj"' in rule
    tmpfiles = [line for line in out.splitlines() if line.startswith("z ")]
    assert tmpfiles[:2] == [
        "z /sys/class/powercap/intel-rapl:*/energy_uj 0440 root energy -",
        "z /sys/class/powercap/intel-rapl:*/intel-rapl:*/energy_uj 0440 root energy -",
    ]
    assert "sudo usermod -aG energy USER" in out and "sudo groupadd --system energy" in out
    assert WORLD_READABLE_RISK in out


def test_setup_access_install_writes_both_files_readable_by_all_writable_by_root_only(tmp_path: Path) -> None:
    result = cli("setup-access", "--group", "energy", "--install", "--root", str(tmp_path))
    assert result.returncode == 0, result.stderr
    rule = tmp_path / "etc/udev/rules.d/60-otel-joules-powercap.rules"
    conf = tmp_path / "etc/tmpfiles.d/otel-joules-powercap.conf"
    assert 'RUN+="/bin/chmod 0440 /sys%p/energy_uj"' in rule.read_text()
    assert "0440 root energy" in conf.read_text()
    for path in (rule, conf):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert "usermod -aG energy USER" in result.stdout
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["60-otel-joules-powercap.rules", "otel-joules-powercap.conf"]


def test_setup_access_refuses_a_group_name_that_could_change_the_rule() -> None:
    result = cli("setup-access", "--group", 'x", RUN+="/bin/sh')
    assert result.returncode == 2
    assert result.stderr.startswith("otel-joules: setup-access: ") and len(result.stderr.splitlines()) == 1
    assert result.stdout == ""


def test_the_agent_prints_a_systemd_unit_with_only_what_it_needs() -> None:
    result = cli("agent", "--group", "energy", "--print-systemd-unit")
    assert result.returncode == 0, result.stderr
    unit = result.stdout
    # The installed otel-joules by its absolute path (systemd does not search a venv's bin), readable under the
    # unit's own ProtectHome= (this interpreter or its venv may live in /home or /root); a dedicated user by
    # default: root only to open the counters and the socket.
    command = installed_command()
    assert os.path.isabs(command[0]) and os.access(command[0], os.X_OK)
    assert (
        f"ExecStart={' '.join(command)} agent --socket /run/otel-joules/agent.sock --group energy --min-interval-ms 10"
        " --user otel-joules-agent" in unit
    )
    assert f"ProtectHome={protect_home_for(files_the_service_runs(command))}" in unit.splitlines()
    assert "useradd --system --no-create-home --shell /usr/sbin/nologin otel-joules-agent" in unit
    for line in ("CapabilityBoundingSet=CAP_DAC_READ_SEARCH CAP_CHOWN CAP_FOWNER CAP_SETUID CAP_SETGID", "NoNewPrivileges=yes",
                 "ProtectSystem=strict", "PrivateNetwork=yes", "RestrictAddressFamilies=AF_UNIX",
                 "RuntimeDirectory=otel-joules", "RuntimeDirectoryPreserve=yes", "WantedBy=multi-user.target"):
        assert line in unit.splitlines(), line


def test_the_unit_with_a_bmc_file_passes_it_and_lets_the_agent_reach_the_network_only_over_ip() -> None:
    result = cli("agent", "--group", "energy", "--bmc-config", "/etc/otel-joules/bmc.toml", "--print-systemd-unit")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    (exec_start,) = [line for line in lines if line.startswith("ExecStart=")]
    assert exec_start.endswith(" --user otel-joules-agent --bmc-config /etc/otel-joules/bmc.toml")
    assert "PrivateNetwork=no" in lines and "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6" in lines
    assert "PrivateNetwork=yes" not in lines


def test_the_unit_keeps_a_home_readable_where_the_installation_lives_and_quotes_for_systemd() -> None:
    assert protect_home_for(["/home/alice/venv/bin/otel-joules", "/usr/bin/python3.12"]) == "read-only"
    assert protect_home_for(["/opt/venv/bin/otel-joules", "/root/.pyenv/versions/3.11/bin/python3.11"]) == "read-only"
    assert protect_home_for(["/usr/local/bin/otel-joules", "/usr/bin/python3.12", "/usr"]) == "yes"
    assert protect_home_for(["/homework/bin/otel-joules"]) == "yes"
    assert systemd_word("/opt/my venv/bin/otel-joules") == '"/opt/my venv/bin/otel-joules"'
    assert systemd_word("/opt/50%/bin/otel-joules") == "/opt/50%%/bin/otel-joules"


def test_agent_help_points_at_the_page_that_says_why() -> None:
    result = cli("agent", "--help")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "docs/measuring.md says why" in text and "README says why" not in text
    assert "--min-interval-ms" in (REPO / "docs" / "measuring.md").read_text()


def test_the_rapl_remedy_offers_the_agent_and_the_group_and_says_why_not_open_counters() -> None:
    assert "otel-joules agent --group" in PERMISSION_REMEDY
    assert "otel-joules setup-access --group" in PERMISSION_REMEDY
    assert PERMISSION_REMEDY.endswith(WORLD_READABLE_RISK)
    assert "CVE-2020-8694 (PLATYPUS)" in WORLD_READABLE_RISK


#: Advice that makes counters readable by everyone: chmod o+r / a+r / ugo+r / +r, or mode 444.
_WORLD_READABLE = re.compile(r"\b[ugoa]*[oa][ugoa]*\+[rwx]*r|chmod\s+\+r|\b0?o?444\b|\b0o444\b")


def test_no_remedy_anywhere_makes_the_counters_world_readable() -> None:
    tracked = subprocess.run(["git", "ls-files", "src", "docs", "README.md", "collector", "*.md"], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout.split()
    offenders = []
    for name in tracked:
        path = REPO / name
        if not path.is_file() or path.suffix in (".png", ".csv"):
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if _WORLD_READABLE.search(line):
                offenders.append(f"{name}:{number}: {line.strip()}")
    assert offenders == []
    assert _WORLD_READABLE.search("sudo chmod o+r /sys/class/powercap/intel-rapl:*/energy_uj")  # the pattern works
    assert _WORLD_READABLE.search("chmod a+r x") and _WORLD_READABLE.search("mode 0444")
    assert not _WORLD_READABLE.search("0440 root:energy")


def test_the_agent_refuses_bad_settings_with_one_line_and_starts_nothing(tmp_path: Path) -> None:
    sock = tmp_path / "run" / "agent.sock"
    cases = {
        ("--min-interval-ms", "0.1"): "--min-interval-ms 0.1 is outside 10..60000",
        # RAPL's own 1 ms resolution is refused: the floor is 10x it, and the error says why and what to give.
        ("--min-interval-ms", "1"): "--min-interval-ms 1 is outside 10..60000: give at least 10 (10x RAPL's 1 ms",
        ("--group", "no-such-group-here"): "group 'no-such-group-here' does not exist: create it",
        ("--socket", "relative.sock"): "--socket 'relative.sock' is not an absolute path",
        ("--sysfs-root", str(tmp_path / "nosys")): "no RAPL counter can be read here",
    }
    for args, expected in cases.items():
        argv = ["agent", "--socket", str(sock), "--group", "0", *args]
        result = cli(*argv)
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.startswith("otel-joules: agent: ") and expected in result.stderr, (args, result.stderr)
        assert len(result.stderr.splitlines()) == 1 and not sock.exists()
