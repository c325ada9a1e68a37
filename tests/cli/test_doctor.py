"""``otel-joules doctor`` on the fake powercap tree in four states: direct, agent, agent refusing this user, nothing.

Each state is real: the counters' modes, a real agent process on a socket under tmp_path, and the doctor
run as a numeric uid through ``setpriv`` (as tests/agent does), inside or outside the agent's group. The
doctor never sees the host's counters, agent socket or collector: every path is under tmp_path and the
exporters are off unless a test gives an endpoint of its own.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

import pytest

from otel_joules.cli.doctor import START_AGENT_REMEDY
from otel_joules.sensors.rapl import PERMISSION_REMEDY
from tests.agent._support import (
    GROUP_GID,
    MEMBER_UID,
    OUTSIDER_GID,
    OUTSIDER_UID,
    as_uid,
    child_env,
    root_only_tree,
    start_agent,
    stop,
    walkable,
)
from tests.fakes.powercap import make_powercap
from tests.helpers.processes import REPO, closed_port

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv (a real agent, other uids)"
)


def _env(tmp_path: Path, sysfs_root: str, socket_path: Path, **extra: str) -> dict[str, str]:
    # src first: the doctor under test is this checkout's, whatever is installed.
    return child_env(
        tmp_path,
        PYTHONPATH=f"{REPO / 'src'}{os.pathsep}{REPO}",
        OTEL_JOULES_SYSFS_ROOT=sysfs_root,
        OTEL_JOULES_AGENT_SOCKET=str(socket_path),
        OTEL_JOULES_COUNTRY="DK",
        **extra,
    )


def _doctor(env: dict[str, str], prefix: Sequence[str] = (), *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, sys.executable, "-m", "otel_joules.cli.main", "doctor", *args],
        env=env,
        cwd=env["HOME"],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def _json(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert result.stderr == "" or "Traceback" not in result.stderr, result.stderr
    report = json.loads(result.stdout)
    assert report["exit_status"] == result.returncode
    return report


def _steps(report: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {c["step"]: c for c in report["checks"] if not c["step"].startswith("exporter.")}


def test_direct_counters_exit_0_and_need_no_agent(tmp_path: Path) -> None:
    tree = make_powercap(tmp_path / "sys", "one_socket")
    env = _env(tmp_path, tree.sysfs_root, tmp_path / "no-agent.sock")
    report = _json(_doctor(env, (), "--json"))
    assert report["exit_status"] == 0 and report["measured"] is True
    steps = _steps(report)
    assert steps["counters.direct"]["status"] == "ok"
    assert "package_0" in steps["counters.direct"]["detail"] and "dram_0" in steps["counters.direct"]["detail"]
    # No agent, and none needed: said, but not a failure and no remedy to follow.
    assert steps["agent.socket"]["status"] == "info" and steps["agent.socket"]["remedy"] == ""
    assert steps["carbon.intensity"]["status"] == "ok" and "offline" in steps["carbon.intensity"]["detail"]
    assert 'energy.source = "measured"' in report["verdict"] and report["fallback_message"] is None
    text = _doctor(env)
    assert text.returncode == 0
    assert any(line.split()[:2] == ["ok", "counters.direct"] for line in text.stdout.splitlines())
    assert "Verdict: spans will carry MEASURED energy" in text.stdout


@needs_root
def test_through_the_agent_exit_0_for_a_member_of_its_group(tmp_path: Path) -> None:
    walkable(tmp_path)
    tree = root_only_tree(tmp_path)
    sock = tmp_path / "run" / "agent.sock"
    agent = start_agent(tmp_path, tree, sock)
    try:
        result = _doctor(_env(tmp_path, tree.sysfs_root, sock), as_uid(MEMBER_UID, OUTSIDER_GID, [GROUP_GID]), "--json")
    finally:
        stop(agent)
    report = _json(result)
    assert result.returncode == 0, result.stdout
    steps = _steps(report)
    for step in ("agent.socket", "agent.reachable", "agent.admits"):
        assert steps[step]["status"] == "ok", steps[step]
    assert f"uid {MEMBER_UID}" in steps["agent.admits"]["detail"] and "package_0" in steps["agent.admits"]["detail"]
    # The root-only counters are one route that fails; with the agent serving, it needs nothing done.
    assert steps["counters.direct"]["status"] == "info" and steps["counters.direct"]["remedy"] == ""
    assert "not readable by this user" in steps["counters.direct"]["detail"]
    assert all(d["via_agent"] for d in report["devices"]["domains"] if d["source"] == "measured")


@needs_root
def test_an_agent_refusing_this_user_exits_1_and_its_advice_works_when_followed(tmp_path: Path) -> None:
    walkable(tmp_path)
    tree = root_only_tree(tmp_path)
    sock = tmp_path / "run" / "agent.sock"
    agent = start_agent(tmp_path, tree, sock)
    env = _env(tmp_path, tree.sysfs_root, sock)
    try:
        refused = _doctor(env, as_uid(OUTSIDER_UID, OUTSIDER_GID), "--json")
        text = _doctor(env, as_uid(OUTSIDER_UID, OUTSIDER_GID))
        # The advice: join the agent's group (here: the same uid, with the group).
        joined = _doctor(env, as_uid(OUTSIDER_UID, OUTSIDER_GID, [GROUP_GID]), "--json")
    finally:
        stop(agent)
    report = _json(refused)
    assert refused.returncode == 1, refused.stdout
    steps = _steps(report)
    # The agent's runtime directory is its group's (0750): this user cannot even see the socket.
    assert steps["agent.socket"]["status"] == "skipped" and "may not look into" in steps["agent.socket"]["detail"]
    admits = steps["agent.admits"]
    assert admits["status"] == "fail"
    assert f"uid {OUTSIDER_UID}" in admits["detail"] and f"NOT in group {GROUP_GID}" in admits["detail"]
    assert f"sudo usermod -aG {GROUP_GID} $USER" in admits["remedy"]
    # The direct route fails too, and its remedy names both safe routes (never world-readable counters).
    assert steps["counters.direct"]["status"] == "fail" and steps["counters.direct"]["remedy"] == PERMISSION_REMEDY
    assert "ESTIMATES only" in report["verdict"]
    assert text.returncode == 1
    assert any(line.split()[:2] == ["FAIL", "agent.admits"] for line in text.stdout.splitlines())
    assert "what to do: ask an administrator to add you to" in text.stdout
    followed = _json(joined)
    assert joined.returncode == 0 and _steps(followed)["agent.admits"]["status"] == "ok"


def test_nothing_readable_and_no_agent_exits_1_and_says_to_start_the_agent(tmp_path: Path) -> None:
    env = _env(tmp_path, str(tmp_path / "nosys"), tmp_path / "run" / "agent.sock")
    result = _doctor(env, (), "--json")
    report = _json(result)
    assert result.returncode == 1
    steps = _steps(report)
    assert steps["counters.direct"]["status"] == "fail"
    assert "set OTEL_JOULES_SYSFS_ROOT to where it is mounted" in steps["counters.direct"]["remedy"]
    assert steps["agent.socket"] == {
        "step": "agent.socket",
        "status": "fail",
        "detail": f"no agent socket at {tmp_path / 'run' / 'agent.sock'}",
        "remedy": START_AGENT_REMEDY,
    }
    assert steps["agent.reachable"]["status"] == steps["agent.admits"]["status"] == "skipped"
    assert report["measured"] is False and "ESTIMATES only" in report["verdict"]
    # The words every front door will say once, as `run` and instrument() say them.
    assert report["fallback_message"].startswith("otel-joules: spans and metrics carry ESTIMATES")
    # Followed (the host's /sys "mounted" elsewhere, the variable pointing there): measured.
    tree = make_powercap(tmp_path / "host-sys", "one_socket")
    assert _doctor({**env, "OTEL_JOULES_SYSFS_ROOT": tree.sysfs_root}).returncode == 0


def test_a_stale_socket_with_no_agent_behind_it_is_not_reachable(tmp_path: Path) -> None:
    path = tmp_path / "agent.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()  # the file stays; nothing listens
    report = _json(_doctor(_env(tmp_path, str(tmp_path / "nosys"), path), (), "--json"))
    steps = _steps(report)
    assert steps["agent.socket"]["status"] == "ok"
    assert steps["agent.reachable"]["status"] == "fail" and "nothing listens" in steps["agent.reachable"]["detail"]
    assert steps["agent.reachable"]["remedy"] == START_AGENT_REMEDY
    assert report["exit_status"] == 1


def test_exporter_endpoints_are_checked_and_never_change_the_exit_status(tmp_path: Path) -> None:
    tree = make_powercap(tmp_path / "sys", "one_socket")
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        port = listener.getsockname()[1]
        env = _env(
            tmp_path,
            tree.sysfs_root,
            tmp_path / "no-agent.sock",
            OTEL_TRACES_EXPORTER="otlp",
            OTEL_METRICS_EXPORTER="otlp,console",
            OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=f"http://127.0.0.1:{port}",
            OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=f"http://127.0.0.1:{closed_port()}",
        )
        result = _doctor(env, (), "--json")
    finally:
        listener.close()
    report = _json(result)
    assert result.returncode == 0
    exporters = [c for c in report["checks"] if c["step"].startswith("exporter.")]
    traces = [c for c in exporters if c["step"] == "exporter.traces"]
    metrics = [c for c in exporters if c["step"] == "exporter.metrics"]
    assert [c["status"] for c in traces] == ["ok"] and f"127.0.0.1:{port}" in traces[0]["detail"]
    assert [c["status"] for c in metrics] == ["warn", "info"]
    assert "refused" in metrics[0]["detail"] and "OTEL_EXPORTER_OTLP_ENDPOINT" in metrics[0]["remedy"]
    assert "console" in metrics[1]["detail"]


def test_the_carbon_step_says_which_source_answered_and_warns_when_a_live_provider_does_not() -> None:
    from otel_joules.carbon import ElectricityMapsProvider
    from otel_joules.cli.doctor import carbon_check

    from tests.fakes.electricity_maps import electricity_maps_server

    with electricity_maps_server(321) as (root, _):
        live = carbon_check([ElectricityMapsProvider("key", zone="DE", base_url=root)])
    assert (live.status, live.remedy) == ("ok", "") and live.detail.startswith("321 gCO2eq/kWh (electricitymaps")
    down = carbon_check([ElectricityMapsProvider("key", zone="DE", base_url=f"http://127.0.0.1:{closed_port()}")])
    assert down.status == "warn" and down.detail.startswith("no live provider answered; using ")
    assert "key and network access" in down.remedy


def test_amd_gpus_are_checked_through_amdsmi(tmp_path: Path) -> None:
    from tests.fakes.amdsmi import FakeAmdGpu, FakeAmdSmi, build_library as build_amdsmi, uuid_for as amd_uuid

    tree = make_powercap(tmp_path / "sys", "one_socket")
    fake = FakeAmdSmi(gpus=[FakeAmdGpu(uuid=amd_uuid(0)), FakeAmdGpu(uuid=amd_uuid(1), energy=False, power=False)])
    env = _env(tmp_path, tree.sysfs_root, tmp_path / "no-agent.sock",
               ROCM_PATH=str(build_amdsmi()), FAKE_AMDSMI_CONFIG=str(fake.write(tmp_path / "amd.conf")))
    steps = _steps(_json(_doctor(env, (), "--json")))
    amd = steps["gpu.amdsmi"]
    # One GPU measured, the other said with its reason: a warning, not silence.
    assert amd["status"] == "warn"
    assert amd["detail"].startswith("amdsmi measures amd_gpu_0")
    assert "amdsmi supports neither its energy accumulator nor its power reading" in amd["detail"]
    assert "amd_gpu" not in steps["gpu.nvml"]["detail"]
