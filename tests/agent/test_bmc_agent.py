"""The agent reads the platform's power from a BMC: the host's energy, what the components do not cover, the
coverage; it serves the platform's joules (only joules) to clients that ask, whose processes' shares then add up
to the BMC's reading; the BMC's credentials reach no client, export, log line or command line.

Real processes only: the agent as root on a root-only fake powercap tree, exporting to a fake OTLP receiver on
loopback; the BMC an HTTP-level Redfish service with an energy counter, or a power that follows the load
(tests/fakes/redfish_http.py); a client instrumented through the front door, as a group member, reading RAPL
through the agent.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from otel_joules import EnergyMeter
from otel_joules.config import OTEL_JOULES_AGENT_SOCKET
from otel_joules.sensors.agent_protocol import MAX_REPLY_BYTES, decode_frames, encode

from tests.agent._support import (
    GROUP_GID,
    MEMBER_UID,
    OUTSIDER_GID,
    as_uid,
    root_only_tree,
    span_child,
    spans,
    start_agent,
    stop,
    walkable,
)
from tests.fakes.bmc_servers import bmc_file, redfish_fake
from tests.fakes.otlp_receiver import otlp_grpc_receiver  # noqa: F401  (fixture)
from tests.fakes.powercap import ConstantPower, LoadPower, PlatformPower
from tests.fakes.procfs import FakeProcfs, TickingProcfs
from tests.attribution.workers import observe_workers

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")

PLATFORM_WATTS, PACKAGE_WATTS, DRAM_WATTS = 90.0, 40.0, 6.0
USER, PASSWORD = "bmc-monitor", "Wall-Power-Secret-5521"


def _subscribe_raw(path: Path, request: dict[str, Any]) -> tuple[bytes, dict[str, Any], dict[str, Any]]:
    """One subscription on the wire, as any client makes it: (every byte the agent sent, its answer, its first reading)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(str(path))
        sock.sendall(encode(request))
        raw, buffer, messages = b"", bytearray(), []
        while len(messages) < 2:
            chunk = sock.recv(MAX_REPLY_BYTES)
            assert chunk, messages
            raw += chunk
            buffer += chunk
            messages += decode_frames(buffer, MAX_REPLY_BYTES)
    return raw, messages[0], messages[1]


def _rate(points: list, what: str) -> float:
    ordered = sorted(points, key=lambda p: p.time_unix_nano)
    first, last = ordered[0], ordered[-1]
    assert last.time_unix_nano > first.time_unix_nano, what
    return (last.value - first.value) / ((last.time_unix_nano - first.time_unix_nano) / 1e9)


def test_the_bmc_is_the_hosts_energy_with_its_uncovered_part_and_coverage_and_its_secrets_go_nowhere(
    tmp_path: Path, otlp_grpc_receiver
) -> None:
    tree = root_only_tree(tmp_path)
    walkable(tmp_path)
    sock = tmp_path / "run" / "agent.sock"
    out = tmp_path / "spans.jsonl"
    env = {
        **otlp_grpc_receiver.env(),
        "OTEL_METRICS_EXPORTER": "otlp",
        "OTEL_METRIC_EXPORT_INTERVAL": "300",
        "OTEL_RESOURCE_ATTRIBUTES": "host.id=bmc-host-1",
    }
    with redfish_fake(PLATFORM_WATTS, user=USER, password=PASSWORD) as url, ConstantPower(
        tree, {"package_0": PACKAGE_WATTS, "dram_0": DRAM_WATTS}
    ):
        config = bmc_file(
            tmp_path / "bmc.toml",
            f'poll_interval_s = 0.2\n[redfish]\nurl = "{url}"\nusername = "{USER}"\npassword = "{PASSWORD}"\n',
        )
        agent = start_agent(tmp_path, tree, sock, "--bmc-config", config, env=env)
        try:
            command_line = Path(f"/proc/{agent.pid}/cmdline").read_bytes()
            child = span_child(tmp_path, out, sock, tree, as_uid(MEMBER_UID, OUTSIDER_GID, [GROUP_GID]), "--spans", "3", "--span-s", "1.0")
            time.sleep(1.0)  # the program itself runs (setpriv has exec'ed it), well before its last span ends
            child_environment = Path(f"/proc/{child.pid}/environ").read_bytes()
            _, child_err = child.communicate(timeout=60)
            otlp_grpc_receiver.wait_for_data_points("energy.coverage", 6, timeout=30)
        finally:
            stop(agent)
    err = (tmp_path / "agent.err").read_text()
    assert "reading the platform's power from the Redfish BMC" in err and "as bmc_redfish (counter)" in err, err

    host_points = otlp_grpc_receiver.data_points("hw.host.energy")
    assert {p.attributes["energy.domain"] for p in host_points} == {"bmc_redfish"}
    assert {p.attributes["energy.method"] for p in host_points} == {"counter"}
    assert _rate(host_points, "hw.host.energy") == pytest.approx(PLATFORM_WATTS, rel=0.05)
    components_watts = _rate(otlp_grpc_receiver.data_points("energy.components"), "energy.components")
    assert components_watts == pytest.approx(PACKAGE_WATTS + DRAM_WATTS, rel=0.05)
    uncovered = otlp_grpc_receiver.data_points("energy.uncovered")
    assert {p.attributes["hw.id"] for p in uncovered} == {os.uname().nodename}  # per host, as energy.components
    assert _rate(uncovered, "energy.uncovered") == pytest.approx(PLATFORM_WATTS - PACKAGE_WATTS - DRAM_WATTS, rel=0.1)
    coverage = sorted(otlp_grpc_receiver.data_points("energy.coverage"), key=lambda p: p.time_unix_nano)[-1].value
    assert coverage == pytest.approx((PACKAGE_WATTS + DRAM_WATTS) / PLATFORM_WATTS, rel=0.05)

    # The client's spans are measured through the agent, which serves it the platform's joules too: a domain beside
    # the components (reported, not in energy.joules), read through the agent.
    got = spans(out)
    assert [s["source"] for s in got] == ["measured"] * 3, child_err
    assert all("bmc_redfish" in s["agent_domains"] for s in got), got
    duration_s = sum(s["duration_s"] for s in got)
    platform_j = sum(s["domain_joules"]["energy.bmc_redfish.joules"] for s in got)
    print(f"through the agent: the BMC's {platform_j:.2f} J over {duration_s:.2f} s ({platform_j / duration_s:.2f} W, "
          f"truth {PLATFORM_WATTS:g} W); the spans' energy.joules {sum(s['joules'] for s in got):.2f} J")
    assert platform_j == pytest.approx(PLATFORM_WATTS * duration_s, rel=0.03)
    assert sum(s["joules"] for s in got) == pytest.approx((PACKAGE_WATTS + DRAM_WATTS) * duration_s, rel=0.03)

    # The secrets: nowhere but the agent's BMC file.
    exported = "\n".join(str(m) for m in otlp_grpc_receiver.metrics_requests)
    for secret in (PASSWORD, USER):
        assert secret not in err
        assert secret not in exported
        assert secret.encode() not in command_line
        assert secret not in out.read_text() and secret not in child_err
        assert secret.encode() not in child_environment


def test_only_a_client_that_asks_gets_the_platform_zone_and_it_carries_joules_only(tmp_path: Path) -> None:
    """An older library (no ``"platform"`` in its request) gets the zones it knows, readings as wide as they are;
    one that asks gets the BMC's reading after them: kind platform, out of the total, floored to the agent's
    resolution, and nothing that names the BMC's address or credentials."""
    tree = root_only_tree(tmp_path)
    walkable(tmp_path)
    sock = tmp_path / "run" / "agent.sock"
    with redfish_fake(PLATFORM_WATTS, user=USER, password=PASSWORD) as url, ConstantPower(
        tree, {"package_0": PACKAGE_WATTS, "dram_0": DRAM_WATTS}
    ):
        config = bmc_file(
            tmp_path / "bmc.toml",
            f'poll_interval_s = 0.2\n[redfish]\nurl = "{url}"\nusername = "{USER}"\npassword = "{PASSWORD}"\n',
        )
        # Metrics off: the BMC is still read, for the clients.
        agent = start_agent(tmp_path, tree, sock, "--bmc-config", config, env={"OTEL_METRICS_EXPORTER": "none"})
        try:
            subscribe = {"op": "subscribe", "version": 1}
            _, old_answer, old_reading = _subscribe_raw(sock, {**subscribe, "gpus": True})
            raw, answer, reading = _subscribe_raw(sock, {**subscribe, "gpus": True, "platform_power": True})
        finally:
            stop(agent)
    old_ids = [z["id"] for z in old_answer["zones"]]
    assert "package_0" in old_ids and "dram_0" in old_ids and len(old_reading["uj"]) == len(old_ids)
    assert not any(z["hw_type"] == "enclosure" or "bmc" in z["id"] for z in old_answer["zones"])
    assert [z["id"] for z in answer["zones"]] == [*old_ids, "bmc_redfish"] and len(reading["uj"]) == len(old_ids) + 1
    platform = answer["zones"][-1]
    assert platform["hw_type"] == "enclosure" and platform["in_total"] is False and platform["update_period_s"] == 0.2
    assert platform["wrap_uj"] == 2**64 and 0 < platform["max_power_watts"] <= 5000
    value = reading["uj"][-1]
    assert isinstance(value, int) and value > 0 and value % 1000 == 0
    port = url.rsplit(":", 1)[1]
    for secret in (USER, PASSWORD, url, f":{port}"):
        assert secret.encode() not in raw, secret


def test_the_processes_shares_through_the_agent_add_up_to_the_bmcs_energy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 36's wall through the agent: the BMC reads 1.5x the components' power (its power following the load);
    three worker processes and an observer read everything through the agent (the BMC's reading only from there),
    under ``busy``. Their processes' shares plus the observer's unattributed are the BMC's energy."""
    tree = root_only_tree(tmp_path)
    walkable(tmp_path)
    sock = tmp_path / "run" / "agent.sock"
    # No counters of their own where the processes look: RAPL through the agent only (root reads the tree itself).
    no_sysfs = tmp_path / "no-sys"
    no_sysfs.mkdir()
    proc = FakeProcfs(tmp_path / "proc", cpus=4)
    proc.add_process(os.getpid(), 0.0)  # the observer: no CPU time of its own
    watts_file = tmp_path / "platform-watts"

    def set_platform_watts(watts: float) -> None:
        part = watts_file.with_suffix(".part")
        part.write_text(repr(watts))
        os.replace(part, watts_file)

    factor, workers_n, work_s = 1.5, 3, 5.0
    with (
        TickingProcfs(proc),
        LoadPower(tree, procfs_root=proc.procfs_root),
        PlatformPower(set_platform_watts, tree, ("package_0", "dram_0"), factor),
        redfish_fake(0.0, watts_file=str(watts_file)) as url,
    ):
        config = bmc_file(tmp_path / "bmc.toml", f'poll_interval_s = 0.1\n[redfish]\nurl = "{url}"\n')
        agent = start_agent(tmp_path, tree, sock, "--bmc-config", config, env={"OTEL_METRICS_EXPORTER": "none"})
        try:
            monkeypatch.setenv(OTEL_JOULES_AGENT_SOCKET, str(sock))
            time.sleep(0.3)  # the BMC's reading follows the load before anyone reads it
            meter = EnergyMeter(sysfs_root=str(no_sysfs), procfs_root=proc.procfs_root, gpus=[])
            assert "bmc_redfish" in meter.agent_domain_ids
            platform = next(d for d in meter.domains if d.id == "bmc_redfish")
            assert not platform.in_total and platform.via_agent
            run = observe_workers(meter, "busy", proc.procfs_root, str(no_sysfs), tmp_path, workers_n, work_s)
            outs, unattributed, host = run.outs, run.unattributed, run.host
        finally:
            stop(agent)
    platform_j = host.joules_by_domain["bmc_redfish"]
    components_j = host.total_joules
    processes_j = sum(sum(json.loads(Path(f"{out}.process.json").read_text()).values()) for out in outs)
    got = [json.loads(line) for out in outs for line in out.read_text().splitlines()]
    left_j = sum(unattributed.values())
    print(
        f"busy through the agent: BMC {platform_j:.2f} J, components {components_j:.2f} J "
        f"(coverage {components_j / platform_j:.3f}), processes' shares {processes_j:.2f} J, unattributed {left_j:.2f} J: "
        f"error {(processes_j + left_j - platform_j) / platform_j:+.2%}"
    )
    assert got and all("bmc_redfish" in s["attributes"]["energy.agent.domains"] for s in got)
    # The fake BMC is what it says: 1.5x the components (within its average's and its polls' lag at the ends).
    assert platform_j == pytest.approx(factor * components_j, rel=0.05)
    assert processes_j + left_j == pytest.approx(platform_j, rel=0.03)
    assert processes_j > components_j  # the platform's energy beyond the components went to the work


def test_the_agent_refuses_a_bmc_file_others_may_read_in_one_line(tmp_path: Path) -> None:
    tree = root_only_tree(tmp_path)
    walkable(tmp_path)
    sock = tmp_path / "run" / "agent.sock"
    config = bmc_file(tmp_path / "bmc.toml", f'[redfish]\nurl = "https://bmc.invalid"\nusername = "{USER}"\npassword = "{PASSWORD}"\n', 0o644)
    agent = start_agent(tmp_path, tree, sock, "--bmc-config", config, wait=False, env={"OTEL_METRICS_EXPORTER": "otlp"})
    try:
        agent.wait(30)
    finally:
        stop(agent)
    err = (tmp_path / "agent.err").read_text()
    assert agent.returncode != 0
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert f"`chmod 600 {config}`" in lines[0]
    assert PASSWORD not in err and not sock.exists()


@pytest.mark.parametrize("mode", ["slow", "garbage"])
def test_a_bmc_that_hangs_or_talks_garbage_is_said_once_and_spans_through_the_agent_are_not_slowed(
    tmp_path: Path, otlp_grpc_receiver, mode: str
) -> None:
    tree = root_only_tree(tmp_path)
    walkable(tmp_path)
    sock = tmp_path / "run" / "agent.sock"
    env = {**otlp_grpc_receiver.env(), "OTEL_METRICS_EXPORTER": "otlp", "OTEL_METRIC_EXPORT_INTERVAL": "300"}
    runs: dict[str, list] = {}
    with redfish_fake(PLATFORM_WATTS, mode=mode) as url, ConstantPower(tree, {"package_0": PACKAGE_WATTS, "dram_0": DRAM_WATTS}):
        for name, args in (("without", ()), ("with", ("--bmc-config", bmc_file(
            tmp_path / "bmc.toml", f'poll_interval_s = 0.1\ntimeout_s = 0.5\n[redfish]\nurl = "{url}"\n'
        )))):
            out = tmp_path / f"spans-{name}.jsonl"
            agent = start_agent(tmp_path, tree, sock, *args, env=env, stderr_name=f"agent-{name}.err")
            try:
                child = span_child(tmp_path, out, sock, tree, as_uid(MEMBER_UID, OUTSIDER_GID, [GROUP_GID]),
                                   "--spans", "20", "--span-s", "0.05")
                child.communicate(timeout=60)
                if name == "with":
                    otlp_grpc_receiver.wait_for_data_points("energy.components", 2, timeout=30)
            finally:
                stop(agent)
            runs[name] = spans(out)
    err = (tmp_path / "agent-with.err").read_text()
    assert err.count("gave no reading") == 1, err
    assert ("no answer within 0.5 s" if mode == "slow" else "not JSON") in err
    for name in ("without", "with"):
        assert [s["source"] for s in runs[name]] == ["measured"] * 20, runs[name]
    # Loosely: a span's own time is its work's, with or without a BMC that never answers properly.
    assert max(s["duration_s"] for s in runs["with"]) < 0.05 + 0.05
    assert sum(s["duration_s"] for s in runs["with"]) < sum(s["duration_s"] for s in runs["without"]) * 1.5
    # The host's energy has no value from the BMC; its components are still published.
    assert not otlp_grpc_receiver.data_points("hw.host.energy")
