"""``otel-joules setup-access --install`` runs as root: it never writes through a link planted at its files (issue 24, item 6)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_setup_access_install_never_writes_through_a_planted_link(tmp_path: Path) -> None:
    # It wrote the rule through a link planted at its temporary name, chmod-ed the link's target 0644 and
    # renamed the link over the rule.
    root = tmp_path / "root"
    rules = root / "etc/udev/rules.d"
    rules.mkdir(parents=True)
    secret = tmp_path / "shadow"
    secret.write_bytes(b"root:x:0:0\n")
    os.chmod(secret, 0o600)
    (rules / "60-otel-joules-powercap.rules.tmp").symlink_to(secret)
    (rules / "60-otel-joules-powercap.rules").symlink_to(secret)
    result = subprocess.run(
        [sys.executable, "-m", "otel_joules.cli.main", "setup-access", "--group", "energy", "--install", "--root", str(root)],
        capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 0, result.stderr
    assert secret.read_bytes() == b"root:x:0:0\n" and stat.S_IMODE(secret.stat().st_mode) == 0o600
    rule = rules / "60-otel-joules-powercap.rules"
    assert not rule.is_symlink() and 'RUN+="/bin/chmod 0440 /sys%p/energy_uj"' in rule.read_text()
    assert stat.S_IMODE(rule.stat().st_mode) == 0o644
    assert not (rules / "60-otel-joules-powercap.rules.tmp").exists()
