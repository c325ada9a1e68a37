"""The agent reads the host's GPUs for every client: one NVML reader per host, not one per process.

The agent runs as root on a root-only fake powercap tree and loads the gcc-built NVML stand-in
(tests/fakes/nvml.py); clients run as an unprivileged group member through ``setpriv``, with the
same stand-in. Agent and client each get their own stand-in config (the same cards and epoch, so
the same truth) counting energy reads in its own file: the client's count is the reads it made
itself. Counts, not timings.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from otel_joules.sensors.agent_protocol import MAX_REPLY_BYTES, decode_frames, encode
from tests.agent._support import (
    GROUP_GID,
    MEMBER_UID,
    OUTSIDER_GID,
    PACKAGE_WATTS,
    SPAN_CHILD,
    as_uid,
    child_env,
    root_only_tree,
    spans,
    start_agent,
    stop,
    wait_for,
    walkable,
)
from tests.fakes.nvml import FakeCard, FakeNvml, build_library, energy_reads, uuid_for
from tests.fakes.powercap import ConstantPower

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None or shutil.which("gcc") is None,
    reason="needs root, setpriv and gcc",
)

#: The two stand-in boards' constant power.
GPU0_WATTS = 300.0
GPU1_WATTS = 100.0
#: Back-to-back spans: their sum is off by at most the difference of the readings' ages at the first start and
#: the last end (NVML's 100 ms step, the agent's 50 ms read period and its interval), under 3% of 8 s.
SPAN_S = 2.0
SPAN_COUNT = 4


def _nvml_config(tmp_path: Path, name: str, epoch_s: float) -> tuple[Path, Path]:
    """A stand-in config of both boards counting energy reads in its own file, readable and countable by any uid:
    (config, reads file)."""
    reads = tmp_path / f"{name}-reads"
    reads.write_bytes(bytes(8))
    os.chmod(reads, 0o666)  # a client's reads must be counted, were it to make any
    fake = FakeNvml(
        cards=[
            FakeCard(uuid=uuid_for(0), pci="00000000:07:00.0", watts=GPU0_WATTS),
            FakeCard(uuid=uuid_for(1), pci="00000000:0B:00.0", watts=GPU1_WATTS),
        ],
        update_ms=100,
        epoch_monotonic_s=epoch_s,
        reads_path=str(reads),
    )
    config = fake.write(tmp_path / f"{name}.conf")
    os.chmod(config, 0o644)
    return config, reads


def _threads(pid: int) -> list[str]:
    return [(task / "comm").read_text().strip() for task in Path(f"/proc/{pid}/task").iterdir()]


def _run_client(tmp_path: Path, sock: Path, tree, library: Path, **env: str) -> tuple[list[dict], list[str], str, Path]:  # type: ignore[no-untyped-def]
    """The instrumented program as a group member, with the stand-in: (its spans, its threads while spans ran,
    its stderr, its reads file)."""
    config, reads = _nvml_config(tmp_path, "client", env.pop("epoch_s"))
    out = tmp_path / "spans.jsonl"
    out.touch()
    os.chmod(out, 0o666)
    child = subprocess.Popen(
        [*as_uid(MEMBER_UID, OUTSIDER_GID, [GROUP_GID]), sys.executable, str(SPAN_CHILD), str(out),
         "--spans", str(SPAN_COUNT), "--span-s", str(SPAN_S)],
        env=child_env(
            tmp_path,
            OTEL_JOULES_SYSFS_ROOT=tree.sysfs_root,
            OTEL_JOULES_AGENT_SOCKET=str(sock),
            LD_LIBRARY_PATH=str(library),
            FAKE_NVML_CONFIG=str(config),
            **env,
        ),
        cwd=tmp_path / "home",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: len(spans(out)) >= 1, 30, "a first span")
        threads = _threads(child.pid)  # setpriv execs python: the child's pid is the instrumented program's
        _, err = child.communicate(timeout=60)
    finally:
        stop(child)
    assert child.returncode == 0, err
    return spans(out), threads, err, reads


def _agent_and_client(tmp_path: Path, agent_nvml: bool = True, **env: str) -> tuple[list[dict], list[str], str, int, int]:
    """An agent with the stand-in's two boards (with ``agent_nvml``; else no NVML library) and one client with them:
    (its spans, its threads, its stderr, the client's energy reads, the agent's)."""
    tree = root_only_tree(tmp_path)
    walkable(tmp_path)
    sock = tmp_path / "run" / "agent.sock"
    library = build_library()
    epoch_s = time.monotonic()
    agent_config, agent_reads = _nvml_config(tmp_path, "agent", epoch_s)
    with ConstantPower(tree, {"package_0": PACKAGE_WATTS}):
        no_library = tmp_path / "no-nvml"
        no_library.mkdir()
        agent_env = {"LD_LIBRARY_PATH": str(library if agent_nvml else no_library), "FAKE_NVML_CONFIG": str(agent_config)}
        agent = start_agent(tmp_path, tree, sock, env=agent_env)
        try:
            got, threads, err, client_reads = _run_client(tmp_path, sock, tree, library, epoch_s=epoch_s, **env)
        finally:
            stop(agent)
    return got, threads, err, energy_reads(client_reads), energy_reads(agent_reads)


def _sum(got: list[dict], domain: str) -> tuple[float, float]:
    """The spans' joules of ``domain`` and their seconds, summed."""
    return sum(s["domain_joules"][f"energy.{domain}.joules"] for s in got), sum(s["duration_s"] for s in got)


def test_a_client_through_the_agent_gets_its_gpus_joules_from_the_agent_and_reads_no_nvml_energy_itself(tmp_path: Path) -> None:
    got, threads, err, client_reads, agent_reads = _agent_and_client(tmp_path)
    # One reader on the host: the agent read the boards; the client made no NVML energy read and ran no GPU reader.
    assert client_reads == 0
    assert agent_reads > 0
    assert not [t for t in threads if t.startswith("otel-joules-rea")], threads  # comm is cut at 15 bytes
    assert len(got) == SPAN_COUNT
    for span in got:
        assert span["source"] == "measured", span
        assert {"nvidia_gpu_0", "nvidia_gpu_1", "package_0"} <= set(span["agent_domains"]), span
    for domain, watts in (("nvidia_gpu_0", GPU0_WATTS), ("nvidia_gpu_1", GPU1_WATTS)):
        joules, seconds = _sum(got, domain)
        assert joules == pytest.approx(watts * seconds, rel=0.03), (domain, joules, watts * seconds)
    assert "Traceback" not in err, err


def test_cuda_visible_devices_by_uuid_selects_the_agents_gpus_the_client_sees(tmp_path: Path) -> None:
    got, _, err, client_reads, _ = _agent_and_client(tmp_path, CUDA_VISIBLE_DEVICES=uuid_for(1))
    assert len(got) == SPAN_COUNT
    for span in got:
        assert "energy.nvidia_gpu_0.joules" not in span["domain_joules"], span
        assert "nvidia_gpu_1" in span["agent_domains"] and "nvidia_gpu_0" not in span["agent_domains"], span
    joules, seconds = _sum(got, "nvidia_gpu_1")
    assert joules == pytest.approx(GPU1_WATTS * seconds, rel=0.03)
    assert client_reads == 0
    assert "Traceback" not in err, err


def _subscribe_raw(sock: Path, **request: object) -> socket.socket:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(5)
    client.connect(str(sock))
    client.sendall(encode({"op": "subscribe", "version": 1, **request}))
    return client


def _frames(client: socket.socket, count: int, timeout_s: float = 10.0) -> list[tuple[float, dict]]:
    """The next ``count`` frames, each with the monotonic time it arrived."""
    buffer = bytearray()
    got: list[tuple[float, dict]] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count:
        client.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = client.recv(MAX_REPLY_BYTES)
        assert chunk, "the agent closed the connection"
        buffer += chunk
        got += [(time.monotonic(), m) for m in decode_frames(buffer, MAX_REPLY_BYTES)]
    return got


def test_gpus_are_served_only_to_clients_that_ask_and_a_stalled_gpu_delays_no_reading(tmp_path: Path) -> None:
    tree = root_only_tree(tmp_path)
    walkable(tmp_path)
    sock = tmp_path / "run" / "agent.sock"
    delay = tmp_path / "read-delay-ms"
    delay.write_text("")
    fake = FakeNvml(
        cards=[FakeCard(uuid=uuid_for(0), watts=GPU0_WATTS, read_delay_file=str(delay))],
        update_ms=100,
        epoch_monotonic_s=time.monotonic(),
    )
    config = fake.write(tmp_path / "agent.conf")
    with ConstantPower(tree, {"package_0": PACKAGE_WATTS}):
        agent = start_agent(tmp_path, tree, sock, env={"LD_LIBRARY_PATH": str(build_library()), "FAKE_NVML_CONFIG": str(config)})
        try:
            # A client that does not ask (an older library, which reads its GPUs itself): RAPL zones only.
            plain = _subscribe_raw(sock)
            (_, answer), (_, reading) = _frames(plain, 2)
            plain.close()
            assert "gpu" not in {z["hw_type"] for z in answer["zones"]}, answer
            assert len(reading["uj"]) == len(answer["zones"])
            # One that asks: the GPU after the RAPL zones, by its UUID, with a wrap range and a power bound.
            client = _subscribe_raw(sock, gpus=True)
            (_, answer), *readings = _frames(client, 4)
            gpu = answer["zones"][-1]
            assert (gpu["hw_type"], gpu["hw_id"], gpu["id"]) == ("gpu", uuid_for(0), "nvidia_gpu_0")
            assert gpu["wrap_uj"] == 2**64 and 0 < gpu["max_power_watts"] <= 5000
            assert all(r["uj"][-1] is not None and r["uj"][-1] % 1000 == 0 for _, r in readings)
            package = [z["id"] for z in answer["zones"]].index("package_0")
            # The GPU stalls NVML for 3 s a read: readings keep coming every interval (10 ms), RAPL's moving;
            # the GPU's value is served as unread once its newest is older than a second.
            delay.write_text("3000")
            stalled = _frames(client, 200, timeout_s=8.0)
            gaps_s = [b[0] - a[0] for a, b in zip(stalled, stalled[1:])]
            assert max(gaps_s) < 0.5, max(gaps_s)
            assert stalled[-1][1]["uj"][package] > stalled[0][1]["uj"][package]
            assert stalled[-1][1]["uj"][-1] is None
            delay.write_text("")
            # Back once the stalled read ends (at most 3 s): the GPU's values are served again.
            deadline = time.monotonic() + 10
            while _frames(client, 1)[0][1]["uj"][-1] is None:
                assert time.monotonic() < deadline, "the GPU's values did not come back"
            client.close()
        finally:
            stop(agent)


def test_where_the_agent_serves_no_gpu_the_client_reads_its_gpus_itself(tmp_path: Path) -> None:
    got, _, err, client_reads, agent_reads = _agent_and_client(tmp_path, agent_nvml=False)
    assert agent_reads == 0 and client_reads > 0
    assert len(got) == SPAN_COUNT
    for span in got:
        assert span["agent_domains"] == ["core_0", "dram_0", "package_0", "uncore_0"], span
    for domain, watts in (("nvidia_gpu_0", GPU0_WATTS), ("nvidia_gpu_1", GPU1_WATTS)):
        joules, seconds = _sum(got, domain)
        assert joules == pytest.approx(watts * seconds, rel=0.03), (domain, joules, watts * seconds)
    assert "Traceback" not in err, err


@pytest.mark.parametrize("before, after", [(False, True), (True, False)], ids=["gpus_added", "gpus_gone"])
def test_an_agent_restarted_with_other_gpus_keeps_the_clients_rapl_measured(tmp_path: Path, before: bool, after: bool) -> None:
    # An agent upgraded to one that serves GPUs, or restarted where NVML does not answer: the RAPL zones keep their
    # positions, so a running process is measured again, not left on estimates for the rest of its life.
    tree = root_only_tree(tmp_path)
    walkable(tmp_path)
    sock = tmp_path / "run" / "agent.sock"
    library = build_library()
    no_library = tmp_path / "no-nvml"
    no_library.mkdir()
    epoch_s = time.monotonic()
    agent_config, _ = _nvml_config(tmp_path, "agent", epoch_s)
    client_config, _ = _nvml_config(tmp_path, "client", epoch_s)

    def agent_env(nvml: bool) -> dict[str, str]:
        return {"LD_LIBRARY_PATH": str(library if nvml else no_library), "FAKE_NVML_CONFIG": str(agent_config)}

    out, until = tmp_path / "spans.jsonl", tmp_path / "stop-now"
    out.touch()
    os.chmod(out, 0o666)
    with ConstantPower(tree, {"package_0": PACKAGE_WATTS}):
        agent = start_agent(tmp_path, tree, sock, env=agent_env(before))
        child = subprocess.Popen(
            [*as_uid(MEMBER_UID, OUTSIDER_GID, [GROUP_GID]), sys.executable, str(SPAN_CHILD), str(out),
             "--spans", "1000", "--span-s", "1.0", "--until", str(until)],
            env=child_env(tmp_path, OTEL_JOULES_SYSFS_ROOT=tree.sysfs_root, OTEL_JOULES_AGENT_SOCKET=str(sock),
                          LD_LIBRARY_PATH=str(library), FAKE_NVML_CONFIG=str(client_config)),
            cwd=tmp_path / "home", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        try:
            wait_for(lambda: len(spans(out)) >= 2, 30, "two spans")
            stop(agent)
            agent = start_agent(tmp_path, tree, sock, env=agent_env(after), stderr_name="agent2.err")
            restarted = len(spans(out))
            wait_for(lambda: len(spans(out)) >= restarted + 4, 30, "four spans after the restart")
            until.touch()
            _, err = child.communicate(timeout=60)
        finally:
            until.touch()
            stop(child)
            stop(agent)
    assert child.returncode == 0, err
    assert "serves other zones" not in err, err
    for span in spans(out)[-2:]:
        assert "package_0" in span["agent_domains"], span
        package_j = span["domain_joules"]["energy.package_0.joules"]
        assert package_j == pytest.approx(PACKAGE_WATTS * span["duration_s"], rel=0.03), span
