"""One host, one agent, three instrumented processes, the real Collector and Prometheus: every documented sum is the truth.

The fake host is issue 33's: psys 80 W (the whole platform); package 40 W, of which core 25 W and uncore 2 W; DRAM
6 W, on a root-only tree. ``otel-joules agent`` (root) reads it and publishes the host's devices over OTLP; three
instrumented processes, as a uid in the agent's group, read through the agent and publish only their
``process.*`` shares. All of it goes through the shipped Collector config to a real Prometheus 3.5, where:

- per host, ``sum(rate(hw_host_energy_joules_total))`` is the platform's 80 W within 2%;
- ``sum by (hw_type) (rate(hw_energy_joules_total))`` is each kind's truth (cpu 40 W, memory 6 W) within 2%;
- the processes' ``process.energy`` adds up to at most the host's energy, and no process publishes ``hw.*``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from tests.agent._support import GROUP_GID, MEMBER_UID, OUTSIDER_GID, as_uid, root_only_tree, walkable
from tests.fakes.powercap import ConstantPower, FakePowercap
from tests.helpers.processes import clean_env, closed_port, stop_by_pid
from tests.helpers.prometheus import Prometheus, ScrapeJob, prometheus_binary, start_prometheus
from tests.helpers.stack import stack_binary, start_collector, wait_until

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")

WATTS = {"psys": 80.0, "package_0": 40.0, "core_0": 25.0, "uncore_0": 2.0, "dram_0": 6.0}
PLATFORM_WATTS = WATTS["psys"]
WATTS_BY_TYPE = {"cpu": WATTS["package_0"], "memory": WATTS["dram_0"]}
PROCESSES = 3
EXPORT_INTERVAL_MS = 500
#: Rates over this window, averaged over RATE_AVERAGE_S of evaluation times: an export delayed on a loaded box
#: shifts a sample by up to one export interval, under 2% of the window.
RATE_WINDOW_S = 40
RATE_AVERAGE_S = 10

WORKER = r"""
import socket, sys, time, uuid
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
import otel_joules

endpoint, name, interval_ms = sys.argv[1:4]
resource = Resource({"service.name": name, "service.instance.id": str(uuid.uuid4()), "host.name": socket.gethostname()})
reader = PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=endpoint, insecure=True), export_interval_millis=int(interval_ms))
tracer_provider = TracerProvider(resource=resource)
handle = otel_joules.instrument(tracer_provider, MeterProvider(resource=resource, metric_readers=[reader]))
assert handle.meter.agent_domain_ids, "not reading through the agent"
print("ready", flush=True)
tracer = tracer_provider.get_tracer("worker")
while True:
    with tracer.start_as_current_span("step"):
        end = time.thread_time() + 0.005
        while time.thread_time() < end:
            pass
    time.sleep(0.05)
"""


def _platform_tree(tmp_path: Path) -> FakePowercap:
    tree = root_only_tree(tmp_path)
    tree.add_zone("intel-rapl:1", "psys", "psys", mode=0o400)
    for dirpath, _, _ in os.walk(tree.root):
        os.chmod(dirpath, 0o755)
    return tree


def _started(process: subprocess.Popen[bytes], log: Path, marker: bytes, what: str) -> subprocess.Popen[bytes]:
    try:
        wait_until(lambda: process.poll() is not None or marker in log.read_bytes(), 60, f"{what} did not start")
        assert process.poll() is None, f"{what} exited ({process.returncode}): {log.read_text(errors='replace')}"
    except BaseException:
        stop_by_pid(process)
        raise
    return process


def _start_agent(tmp_path: Path, tree: FakePowercap, sock: Path, endpoint: str) -> subprocess.Popen[bytes]:
    log = tmp_path / "agent.log"
    env = clean_env(tmp_path, {
        "OTEL_JOULES_SYSFS_ROOT": tree.sysfs_root, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_INSECURE": "true",
        "OTEL_METRIC_EXPORT_INTERVAL": str(EXPORT_INTERVAL_MS), "OTEL_TRACES_EXPORTER": "none",
    })
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "otel_joules.cli.main", "agent", "--socket", str(sock), "--group", str(GROUP_GID)],
            env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
        )
    return _started(process, log, b"otel-joules agent: serving", "the agent")


def _start_worker(tmp_path: Path, tree: FakePowercap, sock: Path, endpoint: str, index: int) -> subprocess.Popen[bytes]:
    log = tmp_path / f"worker-{index}.log"
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    os.chmod(home, 0o777)
    env = clean_env(tmp_path, {
        "OTEL_JOULES_SYSFS_ROOT": tree.sysfs_root, "OTEL_JOULES_AGENT_SOCKET": str(sock), "HOME": str(home),
        "PYTHONDONTWRITEBYTECODE": "1",
    })
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [*as_uid(MEMBER_UID, OUTSIDER_GID, [GROUP_GID]), sys.executable, "-c", WORKER, endpoint, f"worker-{index}",
             str(EXPORT_INTERVAL_MS)],
            env=env, cwd=home, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
        )
    return _started(process, log, b"ready", f"worker {index}")


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    prometheus_binary()  # skip (or fail in CI) before starting anything
    stack_binary("otelcol-joules")
    tmp_path = tmp_path_factory.mktemp("host-once")
    walkable(tmp_path)
    tree = _platform_tree(tmp_path)
    sock = tmp_path / "run" / "agent.sock"
    with contextlib.ExitStack() as stack:
        collector = start_collector(tmp_path, jaeger_endpoint=f"127.0.0.1:{closed_port()}")
        stack.callback(collector.stop)
        server = start_prometheus(tmp_path, [ScrapeJob("collector", [collector.prometheus_target], honor_labels=True)])
        stack.callback(server.stop)
        stack.enter_context(ConstantPower(tree, WATTS))
        endpoint = collector.otlp_grpc_endpoint
        agent = _start_agent(tmp_path, tree, sock, endpoint)
        stack.callback(stop_by_pid, agent)
        for index in range(PROCESSES):
            stack.callback(stop_by_pid, _start_worker(tmp_path, tree, sock, endpoint, index))
        wait_until(lambda: len(server.query("count by (job) (process_energy_joules_total)")) == PROCESSES, 90,
                   "three processes' process.energy did not reach Prometheus")
        samples = RATE_WINDOW_S + RATE_AVERAGE_S + 3
        wait_until(lambda: _fewest_samples(server, "hw_host_energy_joules_total") >= samples, 3 * samples,
                   f"Prometheus did not store {samples} samples of the agent's hw.host.energy")
        yield server


def _fewest_samples(prometheus: Prometheus, selector: str) -> float:
    result = prometheus.query(f"min(count_over_time({selector}[5m]))")
    return float(result[0]["value"][1]) if result else 0.0


def _averaged(expr: str) -> str:
    """``expr`` (a rate over :data:`RATE_WINDOW_S`) averaged over :data:`RATE_AVERAGE_S` of evaluation times."""
    return f"avg_over_time(({expr})[{RATE_AVERAGE_S}s:200ms])"


def _by(prometheus: Prometheus, expr: str, label: str) -> dict[str, float]:
    return {s["metric"].get(label, ""): float(s["value"][1]) for s in prometheus.query(expr)}


def test_per_host_the_host_energy_is_the_platform(prometheus: Prometheus) -> None:
    per_host = _by(prometheus, _averaged(
        f"sum by (host_name) (rate(hw_host_energy_joules_total[{RATE_WINDOW_S}s]) * on (job, instance) group_left (host_name) target_info)"),
        "host_name")
    print("per host (W):", per_host)
    assert list(per_host) == [socket.gethostname()], per_host
    assert per_host[socket.gethostname()] == pytest.approx(PLATFORM_WATTS, rel=0.02)


def test_per_type_the_device_energy_is_each_kinds_truth(prometheus: Prometheus) -> None:
    by_type = _by(prometheus, _averaged(f"sum by (hw_type) (rate(hw_energy_joules_total[{RATE_WINDOW_S}s]))"), "hw_type")
    print("per hw_type (W):", by_type)
    assert by_type == pytest.approx(WATTS_BY_TYPE, rel=0.02), by_type


def test_only_the_agent_publishes_devices_and_the_processes_shares_fit_in_the_host(prometheus: Prometheus) -> None:
    device_jobs = {s["metric"]["job"] for s in prometheus.query("count by (job) ({__name__=~\"hw_.*|energy_components.*|energy_nested.*\"})")}
    assert device_jobs == {"otel-joules-agent"}, device_jobs
    share_jobs = {s["metric"]["job"] for s in prometheus.query("count by (job) (process_energy_joules_total)")}
    assert share_jobs == {f"worker-{i}" for i in range(PROCESSES)}, share_jobs
    shares = prometheus.query(_averaged(f"sum(rate(process_energy_joules_total[{RATE_WINDOW_S}s]))"))
    share_watts = float(shares[0]["value"][1])
    print("processes' shares (W):", share_watts)
    assert 0 < share_watts <= PLATFORM_WATTS * 1.02, share_watts
