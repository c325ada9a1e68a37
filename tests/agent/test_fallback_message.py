"""The one message every front door gives when it falls back to estimates: what is estimated, and which remedy.

Each front door runs in a child process as an unprivileged uid on a fake tree whose counters are
root-only, with no agent: spans get estimates, and stderr (nothing handles the ``otel_joules``
logger) says so exactly once, naming both safe routes and why open counters are unsafe.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from otel_joules.sensors.rapl import PERMISSION_REMEDY, WORLD_READABLE_RISK
from tests.agent._support import OUTSIDER_GID, OUTSIDER_UID, as_uid, child_env, root_only_tree, walkable

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")

SPANS = """
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
"""

FRONT_DOORS = {
    "instrument": SPANS + """
import otel_joules
otel_joules.instrument(tracer_provider=provider, metrics_enabled=False)
for _ in range(3):
    with provider.get_tracer("t").start_as_current_span("s"):
        pass
assert {s.attributes["energy.source"] for s in exporter.get_finished_spans()} == {"estimate"}
""",
    "pyjoules": """
from otel_joules.pyjoules.energy_meter import measure_energy
@measure_energy
def work():
    return sum(range(1000))
work(); work()
""",
    "carbontracker": """
import sys
from otel_joules.carbontracker.tracker import CarbonTracker
tracker = CarbonTracker(epochs=1, log_dir=sys.argv[1], verbose=0, update_interval=0.05)
tracker.epoch_start(); sum(range(10000)); tracker.epoch_end(); tracker.stop()
""",
}


def _one_message(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if "ESTIMATES" in line]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr, stderr
    (message,) = lines
    assert message.startswith("otel-joules: spans and metrics carry ESTIMATES, not measurements, for cpu_estimate, memory_estimate")
    assert "the RAPL counters (energy_uj) are readable only by root" in message
    assert PERMISSION_REMEDY in message and WORLD_READABLE_RISK in message
    return message


def _as_outsider(tmp_path: Path, argv: list[str], **env_extra: str) -> subprocess.CompletedProcess[str]:
    tree = root_only_tree(tmp_path)
    walkable(tmp_path)
    logs = tmp_path / "logs"
    logs.mkdir()
    os.chmod(logs, 0o777)
    env = child_env(tmp_path, OTEL_JOULES_SYSFS_ROOT=tree.sysfs_root,
                    OTEL_JOULES_AGENT_SOCKET=str(tmp_path / "no-agent" / "agent.sock"), LD_LIBRARY_PATH="", **env_extra)
    return subprocess.run([*as_uid(OUTSIDER_UID, OUTSIDER_GID), *argv], env=env, cwd=tmp_path / "home",
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("door", sorted(FRONT_DOORS))
def test_a_front_door_falling_back_to_estimates_says_so_once_with_the_remedy(tmp_path: Path, door: str) -> None:
    script = tmp_path / "app.py"
    script.write_text(textwrap.dedent(FRONT_DOORS[door]))
    os.chmod(script, 0o644)
    result = _as_outsider(tmp_path, [sys.executable, str(script), str(tmp_path / "logs")])
    assert result.returncode == 0, result.stderr
    _one_message(result.stderr)


def test_zero_code_says_so_once(tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    app.write_text("from opentelemetry import trace\nwith trace.get_tracer('shop').start_as_current_span('request'):\n    pass\n")
    os.chmod(app, 0o644)
    # What `opentelemetry-instrument python app.py` does, minus its `which` (which cannot see this venv's
    # interpreter as another uid here): its sitecustomize first on PYTHONPATH, then the app.
    import opentelemetry.instrumentation.auto_instrumentation as auto

    path = os.pathsep.join((os.path.dirname(auto.__file__), str(Path(__file__).resolve().parents[2])))
    result = _as_outsider(tmp_path, [sys.executable, str(app)], PYTHONPATH=path, OTEL_TRACES_EXPORTER="console")
    assert result.returncode == 0, result.stderr
    _one_message(result.stderr)


def test_otel_joules_run_says_so_once(tmp_path: Path) -> None:
    result = _as_outsider(tmp_path, [sys.executable, "-m", "otel_joules.cli.main", "run", "--exporter", "none", "-q", "--", "true"])
    assert result.returncode == 0, result.stderr
    _one_message(result.stderr)


def test_a_handled_otel_joules_logger_gets_the_message_instead_of_stderr(tmp_path: Path) -> None:
    script = tmp_path / "app.py"
    script.write_text(textwrap.dedent("""
        import logging, sys
        handler = logging.StreamHandler(sys.stdout)
        logging.getLogger("otel_joules").addHandler(handler)
    """) + textwrap.dedent(FRONT_DOORS["instrument"]))
    os.chmod(script, 0o644)
    result = _as_outsider(tmp_path, [sys.executable, str(script)])
    assert result.returncode == 0, result.stderr
    assert "ESTIMATES" not in result.stderr
    _one_message(result.stdout)
