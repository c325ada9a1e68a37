"""A real Prometheus server for tests: the ``prometheus`` binary on 127.0.0.1, config and storage in a temp dir.

The binary is Prometheus 3.5, built by ``collector/build.sh`` (the version compose.yaml
pins), run with created-timestamp zero ingestion as compose.yaml runs it: counters whose
created timestamp is known count their first sample in ``increase()``. It is started here
as a plain child process, scrapes the targets a test names every
:data:`SCRAPE_INTERVAL_S`, and is stopped at the end of the test; nothing is left behind
outside the test's temp dir.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers.stack import free_port, stack_binary  # noqa: F401 - free_port: tests find it beside the server

SCRAPE_INTERVAL_S = 1
#: The same flag compose.yaml gives Prometheus (collector/otelcol-config.yaml says why).
PROMETHEUS_FEATURES = "created-timestamp-zero-ingestion"


def prometheus_binary() -> str:
    """The built Prometheus 3.5; skip (fail in CI) when ``collector/build.sh`` has not built it."""
    return str(stack_binary("prometheus"))


@dataclass
class ScrapeJob:
    """One scrape job: its name, targets (``host:port``) and whether to keep the target's own job/instance labels."""

    name: str
    targets: list[str]
    honor_labels: bool = False


@dataclass
class Prometheus:
    """A running Prometheus; :meth:`query` evaluates PromQL through its HTTP API."""

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    jobs: list[ScrapeJob] = field(default_factory=list)

    def api(self, path: str, **params: str) -> Any:
        """GET ``/api/v1/<path>`` and return its ``data``; raise AssertionError with Prometheus' error otherwise."""
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                body = json.load(response)
        except urllib.error.HTTPError as exc:
            body = json.load(exc)
        if body.get("status") != "success":
            raise AssertionError(f"Prometheus rejected {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query: a list of ``{"metric": labels, "value": [t, "v"]}`` (a scalar becomes one such item)."""
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self.api("query", **params)
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        return data["result"]

    def target_health(self) -> dict[str, str]:
        """``job -> health`` of every active target (``up``, ``down``, ``unknown``)."""
        return {t["labels"]["job"]: t["health"] for t in self.api("targets")["activeTargets"]}

    def wait_for_scrapes(self, job: str, count: int, timeout_s: float = 30) -> None:
        """Wait until ``job`` has been scraped successfully ``count`` times."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            result = self.query(f'count_over_time(up{{job="{job}"}}[5m])')
            up_now = self.query(f'up{{job="{job}"}}')
            if result and float(result[0]["value"][1]) >= count and up_now and up_now[0]["value"][1] == "1":
                return
            time.sleep(0.2)
        raise AssertionError(f"{job} was not scraped {count} times within {timeout_s} s: targets {self.target_health()}")

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and wait for it."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


def start_prometheus(tmp_path: Path, jobs: list[ScrapeJob]) -> Prometheus:
    """Start Prometheus scraping ``jobs`` every second; config, storage and log under ``tmp_path``."""
    binary = prometheus_binary()
    folder = tmp_path / "prometheus"
    folder.mkdir()
    config = {
        "global": {"scrape_interval": f"{SCRAPE_INTERVAL_S}s", "evaluation_interval": f"{SCRAPE_INTERVAL_S}s"},
        "scrape_configs": [
            {"job_name": job.name, "honor_labels": job.honor_labels, "static_configs": [{"targets": job.targets}]}
            for job in jobs
        ],
    }
    # JSON is YAML: no YAML writer needed.
    (folder / "prometheus.yml").write_text(json.dumps(config, indent=2))
    port = free_port()
    log_path = folder / "prometheus.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [binary, f"--config.file={folder / 'prometheus.yml'}", f"--storage.tsdb.path={folder / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h", "--log.level=warn",
             f"--enable-feature={PROMETHEUS_FEATURES}"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=folder,
        )
    server = Prometheus(f"http://127.0.0.1:{port}", process, log_path, jobs)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"prometheus exited with {process.returncode}:\n{log_path.read_text()}")
        try:
            with urllib.request.urlopen(f"{server.url}/-/ready", timeout=1) as response:
                if response.status == 200:
                    return server
        except OSError:
            pass
        time.sleep(0.1)
    server.stop()
    raise AssertionError(f"prometheus did not become ready within 30 s:\n{log_path.read_text()}")
