"""With an agent, the host's devices are reported once: by the agent, over OTLP; processes reading through it publish only ``process.*``.

Real processes only: the agent runs as root on a root-only fake tree with psys and exports to a fake OTLP
receiver on loopback; the client meter reads through the agent's socket.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from otel_joules import EnergyMeter
from otel_joules.attribution import Attributor, CpuClocks
from otel_joules.config import Settings
from otel_joules.metrics.instruments import EnergyMetrics
from otel_joules.sensors import agent
from tests.agent._support import GROUP_GID, REPO, child_env, root_only_tree, stop, wait_for, walkable
from tests.fakes.otlp_receiver import otlp_grpc_receiver  # noqa: F401  (fixture)
from tests.fakes.powercap import ConstantPower, FakePowercap
from tests.helpers.processes import closed_port
from tests.fakes.procfs import FakeProcfs

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")

PSYS_WATTS, PACKAGE_WATTS, DRAM_WATTS = 80.0, 40.0, 6.0


def _platform_tree(tmp_path: Path) -> FakePowercap:
    tree = root_only_tree(tmp_path)
    tree.add_zone("intel-rapl:1", "psys", "psys", mode=0o400)
    for dirpath, _, _ in os.walk(tree.root):
        os.chmod(dirpath, 0o755)
    return tree


def _start_agent(tmp_path: Path, tree: FakePowercap, sock: Path, **env: str) -> subprocess.Popen[bytes]:
    """``otel-joules agent`` as root with ``env`` on top of the tests' small environment; returns once it serves."""
    err_path = tmp_path / "agent.err"
    cwd = tmp_path / "agent-cwd"
    cwd.mkdir(exist_ok=True)
    with open(err_path, "ab") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "otel_joules.cli.main", "agent", "--socket", str(sock), "--group", str(GROUP_GID)],
            # This checkout's code first, whatever otel-joules the interpreter has installed.
            env=child_env(tmp_path, OTEL_JOULES_SYSFS_ROOT=tree.sysfs_root, PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(REPO)]), **env),
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        wait_for(lambda: b"otel-joules agent: serving" in err_path.read_bytes() or process.poll() is not None, 30, "the agent")
    except AssertionError:
        stop(process)
        raise
    assert process.poll() is None, err_path.read_text()
    return process


def test_the_agent_publishes_the_hosts_devices_over_otlp_with_host_name_and_id(tmp_path, otlp_grpc_receiver) -> None:
    tree = _platform_tree(tmp_path)
    walkable(tmp_path)
    sock = tmp_path / "run" / "agent.sock"
    env = {
        **otlp_grpc_receiver.env(),
        "OTEL_METRICS_EXPORTER": "otlp",
        "OTEL_METRIC_EXPORT_INTERVAL": "300",
        "OTEL_RESOURCE_ATTRIBUTES": "host.id=test-host-7,deployment.environment.name=test",
    }
    with ConstantPower(tree, {"psys": PSYS_WATTS, "package_0": PACKAGE_WATTS, "dram_0": DRAM_WATTS}):
        process = _start_agent(tmp_path, tree, sock, **env)
        try:
            otlp_grpc_receiver.wait_for_data_points("hw.host.energy", 3, timeout=30)
        finally:
            stop(process)
    err = (tmp_path / "agent.err").read_text()
    assert "publishing the host's hw.* metrics" in err, err
    (host,) = {p.attributes["energy.domain"]: p for p in otlp_grpc_receiver.data_points("hw.host.energy")}.values()
    resource = host.resource_attributes
    assert resource["host.id"] == "test-host-7"  # OTEL_RESOURCE_ATTRIBUTES wins over the machine id
    assert resource["host.name"] == os.uname().nodename
    assert resource["service.name"] == "otel-joules-agent"
    assert resource["deployment.environment.name"] == "test"
    assert host.attributes["energy.domain"] == "psys"
    devices = {p.attributes["energy.domain"] for p in otlp_grpc_receiver.data_points("hw.energy")}
    assert devices == {"package_0", "dram_0"}
    assert {p.attributes["energy.domain"] for p in otlp_grpc_receiver.data_points("energy.nested")} == {"core_0", "uncore_0"}
    assert not otlp_grpc_receiver.data_points("process.energy")  # the agent is no process of the workload
    # Its energy grows at the platform's power (the last export is the one after SIGTERM: the final values).
    points = sorted(otlp_grpc_receiver.data_points("hw.host.energy"), key=lambda p: p.time_unix_nano)
    first, last = points[0], points[-1]
    watts = (last.value - first.value) / ((last.time_unix_nano - first.time_unix_nano) / 1e9)
    assert watts == pytest.approx(PSYS_WATTS, rel=0.1)


def test_without_otlp_metrics_the_agent_says_so_and_still_serves(tmp_path) -> None:
    tree = _platform_tree(tmp_path)
    walkable(tmp_path)
    sock = tmp_path / "run" / "agent.sock"
    process = _start_agent(tmp_path, tree, sock, OTEL_METRICS_EXPORTER="none")
    stop(process)
    err = (tmp_path / "agent.err").read_text()
    assert "OTEL_METRICS_EXPORTER is none: the host's hw.* metrics are not published" in err, err


def test_with_no_collector_listening_the_agent_says_so_once_and_serves_on(tmp_path) -> None:
    tree = _platform_tree(tmp_path)
    walkable(tmp_path)
    sock = tmp_path / "run" / "agent.sock"
    env = {"OTEL_METRICS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{closed_port()}",
           "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_METRIC_EXPORT_INTERVAL": "200"}
    process = _start_agent(tmp_path, tree, sock, **env)
    try:
        err_path = tmp_path / "agent.err"
        wait_for(lambda: b"energy metrics are not exported while nothing answers" in err_path.read_bytes(), 30, "the warning")
        time.sleep(1.0)  # five more export intervals
        assert process.poll() is None and sock.exists()
    finally:
        stop(process)
    assert err_path.read_text().count("nothing answers") == 1, err_path.read_text()


def test_a_process_reading_through_the_agent_publishes_only_its_share(tmp_path) -> None:
    tree = _platform_tree(tmp_path)
    walkable(tmp_path)
    sock = tmp_path / "run" / "agent.sock"
    process = _start_agent(tmp_path, tree, sock, OTEL_METRICS_EXPORTER="none")
    try:
        settings = Settings(sysfs_root=tree.sysfs_root, agent_socket=str(sock))
        proc = FakeProcfs(tmp_path / "proc")
        proc.add_process(os.getpid(), 0.0)
        meter = EnergyMeter(channels=agent.discover(settings).channels, settings=settings, sample=False)
        assert meter.agent_domain_ids  # read through the agent: the real client path
        attributor = Attributor(meter, clocks=CpuClocks(proc.procfs_root, pid=os.getpid()), sample=False, policy="busy")
        reader = InMemoryMetricReader()
        provider = MeterProvider(metric_readers=[reader])
        metrics = EnergyMetrics(meter, provider, host_id="host-a", attribution=attributor)
        time.sleep(0.3)
        tree.zones["package_0"].advance_joules(10.0)
        proc.add_host(busy_s=4.0, idle_s=4.0)
        proc.add_process(os.getpid(), 1.0)
        time.sleep(0.3)  # the agent's next reading
        names = {m.name for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
        assert not metrics.publishes_host
        assert names == {"process.energy", "process.power"}
        provider.shutdown()
        attributor.close()
        meter.close()
    finally:
        stop(process)
