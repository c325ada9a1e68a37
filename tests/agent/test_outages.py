"""Outages of ``otel-joules agent`` lose and double nothing, with real processes only.

The agent runs as root on a fake powercap tree whose counters advance at a known power
(:class:`~tests.fakes.powercap.ConstantPower`); the application runs as a group member and reads
through it. The agent is stopped (SIGTERM) mid-run: for a few seconds and started again, or for good.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.agent._support import (
    agent_socket,
    DRAM_WATTS,
    span_child,
    spans,
    GROUP_GID,
    MEMBER_UID,
    OUTSIDER_GID,
    PACKAGE_WATTS,
    TOTAL_WATTS,
    as_uid,
    child_env,
    root_only_tree,
    start_agent,
    stop,
    wait_for,
    walkable,
)
from otel_joules.config import Settings
from otel_joules.meter import EnergyMeter
from otel_joules.semconv import SOURCE_PARTIAL
from tests.fakes.powercap import ConstantPower

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")

HOST_ENERGY_CHILD = r"""
import json, os, sys, time
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
import otel_joules

out, ready, until = sys.argv[1:4]
reader = InMemoryMetricReader()
tracer_provider = TracerProvider()
meter = otel_joules.instrument(tracer_provider=tracer_provider, meter_provider=MeterProvider(metric_readers=[reader])).meter
tracer = tracer_provider.get_tracer("outage-test")


def host_joules():
    # The host's total as this process's meter counts it (the agent, not this process, publishes hw.*):
    # every domain that adds to the total, less the standby estimates the agent's counters bridged.
    reader.collect()
    snapshot = meter.snapshot()
    total = sum(j for j, d in zip(snapshot.joules, meter.domains) if d.in_total and j is not None)
    return total - meter.withheld_estimate_joules()


first_ns, first_j = time.monotonic_ns(), host_joules()
open(ready, "w").close()
while not os.path.exists(until):  # an application's spans: the meter reads as they start and end
    with tracer.start_as_current_span("work"):
        time.sleep(0.1)
    host_joules()  # collected often, as during the outage too (an exporter's period)
last_ns, last_j = time.monotonic_ns(), host_joules()
with open(out, "w") as f:
    json.dump({"seconds": (last_ns - first_ns) / 1e9, "joules": last_j - first_j}, f)
"""


def _writable(tmp_path: Path) -> Path:
    """A directory the member's child writes its files in (never one above the socket: the agent refuses that)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    return shared


def _member() -> list[str]:
    return as_uid(MEMBER_UID, OUTSIDER_GID, [GROUP_GID])


def _across_a_3_s_restart(tmp_path: Path, child_script: str) -> tuple[dict, str]:
    """Run ``child_script`` (OUT READY UNTIL) as a member through an agent that stops 2 s after the child is ready
    and is back 3 s later, for 3 s more; (the JSON the child wrote to OUT, its stderr)."""
    tree = root_only_tree(tmp_path)
    sock = agent_socket(tmp_path)
    script = tmp_path / "child.py"
    script.write_text(child_script)
    os.chmod(script, 0o644)
    shared = _writable(tmp_path)
    out, ready, until = shared / "out.json", shared / "ready", shared / "stop-now"
    with ConstantPower(tree, {"package_0": PACKAGE_WATTS, "dram_0": DRAM_WATTS}):
        agent = start_agent(tmp_path, tree, sock)
        child = subprocess.Popen(
            [*_member(), sys.executable, str(script), str(out), str(ready), str(until)],
            env=child_env(tmp_path, OTEL_JOULES_SYSFS_ROOT=tree.sysfs_root, OTEL_JOULES_AGENT_SOCKET=str(sock)),
            cwd=tmp_path / "home", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        try:
            wait_for(ready.exists, 60, "the instrumented child")
            time.sleep(2.0)
            stop(agent)
            time.sleep(3.0)
            agent = start_agent(tmp_path, tree, sock, stderr_name="agent2.err")
            time.sleep(3.0)
            until.touch()
            _, err = child.communicate(timeout=60)
        finally:
            until.touch()
            stop(child)
            stop(agent)
    assert child.returncode == 0, err
    return json.loads(out.read_text()), err


def _meter_through(tree, sock: Path) -> EnergyMeter:  # type: ignore[no-untyped-def]
    """A meter reading ``tree`` through the agent at ``sock``, sampled by hand."""
    return EnergyMeter(settings=Settings(sysfs_root=tree.sysfs_root, agent_socket=str(sock)), gpus=[], sample=False)


def _assert_estimated_throughout(meter: EnergyMeter, measured) -> None:  # type: ignore[no-untyped-def]
    """``measured`` is partial and holds, for every second estimated, at least the standby estimates' static power
    (the CPUs' idle draw): the unseen time was estimated, not left at 0 J."""
    assert measured.source == SOURCE_PARTIAL and measured.estimated_s > 0.4, measured
    static_watts = sum(d.estimate_static_watts for d in meter.domains if d.id in meter.standby_domain_ids and d.in_total)
    assert measured.total_joules >= 0.9 * static_watts * measured.estimated_s > 0, (measured, static_watts)


def test_an_interval_from_the_last_snapshot_that_saw_the_agent_to_the_one_that_finds_it_gone_is_estimated(
    tmp_path: Path,
) -> None:
    # The counters stand still: nothing is measured in between, so every joule of the interval is the estimate's.
    tree = root_only_tree(tmp_path)
    sock = agent_socket(tmp_path)
    agent = start_agent(tmp_path, tree, sock)
    try:
        meter = _meter_through(tree, sock)
        try:
            assert meter.agent_domain_ids and meter.standby_domain_ids
            time.sleep(0.3)  # the standby estimates' pace: from their first read to the loss
            start = meter.snapshot()
            stop(agent)
            time.sleep(0.5)
            end = meter.snapshot()
            measured = meter.measure(start, end)
        finally:
            meter.close()
    finally:
        stop(agent)
    # The loss found at the end once re-originated the estimates there: 0 J.
    _assert_estimated_throughout(meter, measured)


def test_an_interval_from_the_last_snapshot_that_found_the_agent_away_to_the_one_that_finds_it_back_is_estimated(
    tmp_path: Path,
) -> None:
    # The mirror of the loss: the interval is the estimates' up to the return (the agent's counters stand still,
    # so from the return on nothing is measured). The return read the estimates one last time; before, they
    # were frozen at the last snapshot that found the agent away, and such an interval (a span from that
    # snapshot to this one) had 0 J in every domain.
    tree = root_only_tree(tmp_path)
    sock = agent_socket(tmp_path)
    agent = start_agent(tmp_path, tree, sock)
    try:
        meter = _meter_through(tree, sock)
        try:
            time.sleep(0.3)
            meter.snapshot()
            stop(agent)
            time.sleep(0.3)  # the standby estimates' pace, from the loss on
            start = meter.snapshot()
            assert start.outage is not None and start.outage.away
            time.sleep(0.5)
            agent = start_agent(tmp_path, tree, sock, stderr_name="agent2.err")
            time.sleep(0.6)  # past the meter's next try to reconnect (every 0.5 s): the next snapshot finds it back
            end = meter.snapshot()
            assert end.outage is not None and not end.outage.away
            measured = meter.measure(start, end)
            after = meter.measure(end, meter.snapshot())
        finally:
            meter.close()
    finally:
        stop(agent)
    _assert_estimated_throughout(meter, measured)
    # Measured again from the return on, the estimates frozen: nothing after it is estimated.
    assert not after.estimated_s and set(after.joules_by_domain) == set(meter.agent_domain_ids), after


def test_a_3_s_agent_restart_counts_every_joule_once_in_the_host_total(tmp_path: Path) -> None:
    result, err = _across_a_3_s_restart(tmp_path, HOST_ENERGY_CHILD)
    truth_j = TOTAL_WATTS * result["seconds"]
    print(f"restart: host total {result['joules']:.1f} J over {result['seconds']:.2f} s, truth {truth_j:.1f} J")
    # Counted once: the standby estimate of the outage is not added to the counters that bridge it.
    assert abs(result["joules"] - truth_j) <= 0.02 * truth_j, (result, truth_j)
    # Besides the first use of the agent (said once when it answered).
    lines = [line for line in err.splitlines() if line and " through the otel-joules agent at " not in line]
    assert len(lines) == 1 and lines[0].startswith(f"otel-joules: lost the otel-joules agent at {tmp_path / 'run' / 'agent.sock'}"), err


def test_a_run_whose_agent_stops_for_good_keeps_its_measured_part_labelled_partial(tmp_path: Path) -> None:
    tree = root_only_tree(tmp_path)
    sock = agent_socket(tmp_path)
    started = _writable(tmp_path) / "started"
    with ConstantPower(tree, {"package_0": PACKAGE_WATTS, "dram_0": DRAM_WATTS}):
        agent = start_agent(tmp_path, tree, sock)
        run = subprocess.Popen(
            [*_member(), sys.executable, "-m", "otel_joules.cli.main", "run", "--", "sh", "-c", f"touch {started}; sleep 5"],
            env=child_env(tmp_path, OTEL_JOULES_SYSFS_ROOT=tree.sysfs_root, OTEL_JOULES_AGENT_SOCKET=str(sock)),
            cwd=tmp_path / "home", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        try:
            wait_for(started.exists, 60, "the command to start")
            time.sleep(2.5)
            stop(agent)  # for good: it is not back before the command ends
            _, err = run.communicate(timeout=60)
        finally:
            stop(run)
            stop(agent)
    assert run.returncode == 0, err
    energy = next((line for line in err.splitlines() if line.strip().startswith("energy")), "")
    assert "(partial:" in energy, err
    joules = float(re.search(r"energy\s+([0-9.]+) J", energy).group(1))  # type: ignore[union-attr]
    # At least the measured part (2.5 s at the fake's power); never 0 J.
    assert joules >= 0.9 * TOTAL_WATTS * 2.5, err
    assert "PARTIAL: the otel-joules agent was away for" in err, err
    assert f"lost the otel-joules agent at {sock}" in err, err


def test_a_container_that_mounts_the_runtime_directory_is_measured_again_after_an_agent_restart(tmp_path: Path) -> None:
    tree = root_only_tree(tmp_path)
    sock = agent_socket(tmp_path)
    container = tmp_path / "container"
    container.mkdir()
    walkable(container)
    mounted = container / "run"
    out = tmp_path / "spans.jsonl"
    until = _writable(tmp_path) / "stop-now"
    # The "container": its own mount namespace with the runtime directory bind-mounted in (as the docs'
    # `docker run -v /run/otel-joules:/run/otel-joules`), the host's directory and sysfs tree covered. A mount of
    # the socket file instead keeps the first agent's dead socket: with it this test times out after the restart.
    script = (
        f"mount -t tmpfs -o mode=0755 none {container} && mkdir {mounted} && mount --bind {sock.parent} {mounted} "
        f"&& mount -t tmpfs -o mode=0755 none {sock.parent} && mount -t tmpfs -o mode=0755 none {tree.root} "
        f"&& exec \"$@\""
    )
    with ConstantPower(tree, {"package_0": PACKAGE_WATTS, "dram_0": DRAM_WATTS}):
        agent = start_agent(tmp_path, tree, sock)
        prefix = ["unshare", "--mount", "--propagation", "private", "--fork", "sh", "-c", script, "sh", *_member()]
        child = span_child(tmp_path, out, mounted / "agent.sock", tree, prefix,
                           "--spans", "1000", "--span-s", "0.1", "--until", str(until))
        try:
            wait_for(lambda: sum(s["source"] == "measured" for s in spans(out)) >= 3, 60, "measured spans")
            stop(agent)
            gone = len(spans(out))
            wait_for(lambda: any(s["source"] == "estimate" for s in spans(out)[gone:]), 30, "estimates")
            agent = start_agent(tmp_path, tree, sock, stderr_name="agent2.err")
            back = len(spans(out))
            wait_for(lambda: sum(s["source"] == "measured" for s in spans(out)[back:]) >= 3, 30, "measured spans again")
            until.touch()
            _, err = child.communicate(timeout=60)
        finally:
            until.touch()
            stop(child)
            stop(agent)
    assert child.returncode == 0, err
    assert "Traceback" not in err, err


PROCESS_ENERGY_CHILD = r"""
import json, os, sys, time
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
import otel_joules

out, ready, until = sys.argv[1:4]
reader = InMemoryMetricReader()
tracer_provider = TracerProvider()
otel_joules.instrument(tracer_provider=tracer_provider, meter_provider=MeterProvider(metric_readers=[reader]))
tracer = tracer_provider.get_tracer("outage-test")


def points(name):
    data = reader.get_metrics_data()
    return [
        {"attributes": dict(p.attributes), "value": p.value}
        for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics if m.name == name
        for p in m.data.data_points
    ]


open(ready, "w").close()
samples = []
while not os.path.exists(until):  # busy requests: this process's CPU time earns it a share all along
    with tracer.start_as_current_span("work"):
        deadline = time.monotonic() + 0.1
        while time.monotonic() < deadline:
            sum(range(1000))
    samples.append(points("process.energy"))  # collected often, as an exporter's period would
with open(out, "w") as f:
    json.dump({"samples": samples, "last": points("process.energy")}, f)
"""


def test_a_processs_share_while_the_agent_is_away_is_reported_as_an_estimate_never_as_measured(tmp_path: Path) -> None:
    """process.energy keeps measured and estimated energy in series of their own: the share priced from the
    standby estimates during a 3 s outage goes to ``energy.source = estimate``, and the measured series does
    not grow meanwhile."""
    result, _ = _across_a_3_s_restart(tmp_path, PROCESS_ENERGY_CHILD)

    def cpu(points: list[dict], source: str) -> float | None:
        found = [p["value"] for p in points if p["attributes"] == {"hw.type": "cpu", "energy.source": source}]
        assert len(found) <= 1, points
        return found[0] if found else None

    last = result["last"]
    sources = {p["attributes"]["energy.source"] for p in last}
    assert sources == {"measured", "estimate"}, last  # never one series mixing the two
    measured, estimated = cpu(last, "measured"), cpu(last, "estimate")
    assert measured is not None and estimated is not None and measured > 0, last
    # The outage was 3 s of about 8: its estimated share is a real part of the total, not a rounding.
    assert 0.1 <= estimated / (measured + estimated) <= 0.7, last
    # Each series only grows, and the estimate grew only while the measured one stood still (the outage).
    series = [(cpu(s, "measured"), cpu(s, "estimate")) for s in result["samples"]]
    series = [(m, e) for m, e in series if m is not None and e is not None]
    for (m0, e0), (m1, e1) in zip(series, series[1:]):
        assert m1 >= m0 - 1e-9 and e1 >= e0 - 1e-9, (m0, e0, m1, e1)
    grew_together = sum(1 for (m0, e0), (m1, e1) in zip(series, series[1:]) if m1 - m0 > 1e-6 and e1 - e0 > 1e-6)
    assert grew_together <= 4, series  # at most the periods that straddle the loss and the return
