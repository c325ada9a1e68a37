"""``otel-joules run`` with ``OTEL_METRICS_EXPORTER=prometheus``: a real Prometheus scrapes even a short run's last joules."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest

from otel_joules.config import DEFAULT_PROMETHEUS_WAIT_S, OTEL_JOULES_PROMETHEUS_WAIT_S, Settings

# The child adds 3 J to the package and 0.5 J to DRAM: the host's 3.5 J.

from tests.fakes.powercap import make_powercap
from tests.helpers.processes import ADVANCE, clean_env, otel_joules_command
from tests.helpers.prometheus import ScrapeJob, free_port, start_prometheus
PACKAGE_UJ, DRAM_UJ = 3_000_000, 500_000
HOST_JOULES = 3.5


def _run(tmp_path: Path, port: int, **extra: str) -> subprocess.CompletedProcess[str]:
    pc = make_powercap(tmp_path / "sys", "one_socket")
    env = clean_env(tmp_path, {
        "OTEL_JOULES_SYSFS_ROOT": pc.sysfs_root,
        "OTEL_TRACES_EXPORTER": "none",
        "OTEL_METRICS_EXPORTER": "prometheus",
        "OTEL_EXPORTER_PROMETHEUS_HOST": "127.0.0.1",
        "OTEL_EXPORTER_PROMETHEUS_PORT": str(port),
        **extra,
    })
    child = [sys.executable, "-c", ADVANCE, str(pc.zones["package_0"].path / "energy_uj"), str(PACKAGE_UJ),
             str(pc.zones["dram_0"].path / "energy_uj"), str(DRAM_UJ)]
    return subprocess.run(otel_joules_command("run", "--service-name", "short", "--", *child), env=env,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_a_short_runs_last_joules_are_scraped_and_the_summary_says_so(tmp_path):
    port = free_port()
    prometheus = start_prometheus(tmp_path, [ScrapeJob("run", [f"127.0.0.1:{port}"])])
    try:
        started = time.monotonic()
        result = _run(tmp_path, port)
        took_s = time.monotonic() - started
        assert result.returncode == 0, result.stderr
        endpoint = f"http://127.0.0.1:{port}/metrics"
        assert f"metrics -> prometheus {endpoint}: scraped" in result.stderr, result.stderr
        assert "the last after the final measurement" in result.stderr, result.stderr
        assert "nothing sent" not in result.stderr
        assert took_s < 15  # waited for the next scrape (1 s apart), not for the bound
        # What Prometheus stored: the run's whole 3.5 J, from the scrape after the command ended.
        stored = prometheus.query('max_over_time(energy_components_joules_total{job="run"}[5m])')
        assert [float(s["value"][1]) for s in stored] == [HOST_JOULES], stored
        info = prometheus.query('max_over_time(target_info{job="run"}[5m])')
        assert info and info[0]["metric"]["service_name"] == "short"
    finally:
        prometheus.stop()


def test_unscraped_endpoint_waits_only_the_bound_and_says_what_was_lost(tmp_path):
    result = _run(tmp_path, free_port(), OTEL_JOULES_PROMETHEUS_WAIT_S="0.5")
    assert result.returncode == 0, result.stderr
    assert "never scraped (waited 0.5 s; set OTEL_JOULES_PROMETHEUS_WAIT_S to your scrape interval)" in result.stderr


def test_bad_wait_setting_is_said_once_and_the_default_used(caplog):
    # As every OTEL_JOULES_* setting: a bad value warns by name and never stops the run.
    with caplog.at_level(logging.WARNING, logger="otel_joules"):
        settings = Settings.from_env({OTEL_JOULES_PROMETHEUS_WAIT_S: "soon"})
    assert settings.prometheus_wait_s == DEFAULT_PROMETHEUS_WAIT_S == 15.0
    assert "OTEL_JOULES_PROMETHEUS_WAIT_S='soon' is not a number; using the default 15 instead" in caplog.text
