"""The agent reads the platform's power from a BMC: the host's energy, what the components do not cover, the
coverage; the BMC's credentials reach no client, export, log line or command line.

Real processes only: the agent as root on a root-only fake powercap tree, exporting to a fake OTLP receiver on
loopback; the BMC an HTTP-level Redfish service with an energy counter (tests/fakes/redfish_http.py); a client
instrumented through the front door, as a group member, reading RAPL through the agent.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

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
from tests.fakes.powercap import ConstantPower

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")

PLATFORM_WATTS, PACKAGE_WATTS, DRAM_WATTS = 90.0, 40.0, 6.0
USER, PASSWORD = "bmc-monitor", "Wall-Power-Secret-5521"


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
            child = span_child(tmp_path, out, sock, tree, as_uid(MEMBER_UID, OUTSIDER_GID, [GROUP_GID]), "--spans", "2", "--span-s", "0.5")
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

    # The client's spans are measured through the agent, which never serves it the BMC.
    got = spans(out)
    assert [s["source"] for s in got] == ["measured", "measured"], child_err
    assert all("bmc_redfish" not in s["agent_domains"] and not any("bmc" in d for d in s["domains"]) for s in got)

    # The secrets: nowhere but the agent's BMC file.
    exported = "\n".join(str(m) for m in otlp_grpc_receiver.metrics_requests)
    for secret in (PASSWORD, USER):
        assert secret not in err
        assert secret not in exported
        assert secret.encode() not in command_line
        assert secret not in out.read_text() and secret not in child_err


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
