"""A set but unusable ``OTEL_JOULES_PROCFS_ROOT`` / ``OTEL_JOULES_SYSFS_ROOT`` is said once, by ``run`` and ``instrument()``.

Without the notice a wrong procfs root silently dropped ``run``'s share line and every
``energy.attributed.*``, and a wrong sysfs root silently turned measurements into estimates.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.fakes.powercap import make_powercap
from tests.helpers.processes import clean_env, otel_joules_command

PROCFS_NOTICE = "OTEL_JOULES_PROCFS_ROOT={root!r} is not a directory, so spans and `otel-joules run` get no energy.attributed.* shares"
SYSFS_NOTICE = "OTEL_JOULES_SYSFS_ROOT={root!r} has no class/powercap (the RAPL counters' layout), so no RAPL counter is read there"

INSTRUMENTED = textwrap.dedent("""
    import json
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    import otel_joules

    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    for _ in range(2):  # instrumented twice, several spans: still said once
        handle = otel_joules.instrument(provider, gpus=[])
        for _ in range(3):
            with provider.get_tracer("t").start_as_current_span("step"):
                sum(range(10_000))
        handle.uninstrument()
    print(json.dumps([dict(s.attributes) for s in exporter.get_finished_spans()]))
""")


def test_run_with_a_missing_procfs_root_says_so_once_and_its_summary_says_the_share_is_missing(tmp_path: Path) -> None:
    pc = make_powercap(tmp_path / "sys", "one_socket")
    root = str(tmp_path / "no-proc")
    env = clean_env(tmp_path, {"OTEL_JOULES_SYSFS_ROOT": pc.sysfs_root, "OTEL_JOULES_PROCFS_ROOT": root})
    out = tmp_path / "run.jsonl"
    result = subprocess.run(otel_joules_command("run", "--exporter", f"jsonl:{out}", "--", "true"), env=env,
                            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count(PROCFS_NOTICE.format(root=root)) == 1, result.stderr
    assert "  share    MISSING, no energy.attributed.* on the span: the host's CPU time is needed and cannot read " \
           f"{root}/stat" in result.stderr, result.stderr
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert not [k for k in record["attributes"] if k.startswith("energy.attributed")]
    assert record["attributes"]["energy.source"] == "measured"  # the measurement itself is kept


def test_run_with_a_sysfs_root_without_powercap_says_so_once(tmp_path: Path) -> None:
    root = tmp_path / "empty-sys"
    root.mkdir()
    env = clean_env(tmp_path, {"OTEL_JOULES_SYSFS_ROOT": str(root)})
    result = subprocess.run(otel_joules_command("run", "--exporter", "none", "--", "true"), env=env,
                            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count(SYSFS_NOTICE.format(root=str(root))) == 1, result.stderr


def test_instrument_with_bad_roots_says_each_once_on_stderr(tmp_path: Path) -> None:
    sysfs, procfs = tmp_path / "empty-sys", str(tmp_path / "no-proc")
    sysfs.mkdir()
    env = clean_env(tmp_path, {"OTEL_JOULES_SYSFS_ROOT": str(sysfs), "OTEL_JOULES_PROCFS_ROOT": procfs})
    result = subprocess.run([sys.executable, "-c", INSTRUMENTED], env=env, capture_output=True, text=True, timeout=60,
                            stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    spans = json.loads(result.stdout.splitlines()[-1])
    assert len(spans) == 6 and all("energy.attributed.joules" not in s for s in spans)
    assert result.stderr.count(PROCFS_NOTICE.format(root=procfs)) == 1, result.stderr
    assert result.stderr.count(SYSFS_NOTICE.format(root=str(sysfs))) == 1, result.stderr


def test_good_and_default_roots_say_nothing(tmp_path: Path) -> None:
    pc = make_powercap(tmp_path / "sys", "one_socket")
    procfs = tmp_path / "proc"
    procfs.mkdir()
    (procfs / "stat").write_text("cpu  100 0 50 1000 0 0 0 0 0 0\ncpu0 100 0 50 1000 0 0 0 0 0 0\n")
    env = clean_env(tmp_path, {"OTEL_JOULES_SYSFS_ROOT": pc.sysfs_root, "OTEL_JOULES_PROCFS_ROOT": str(procfs)})
    result = subprocess.run([sys.executable, "-c", INSTRUMENTED], env=env, capture_output=True, text=True, timeout=60,
                            stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "ROOT=" not in result.stderr, result.stderr
