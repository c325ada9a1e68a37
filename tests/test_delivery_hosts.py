"""One process per host owns the host-level domains: ranks, the per-host lock, explicit modes."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_joules
from delivery_support import clean_env
from otel_joules.delivery.hosts import (
    DEFAULT_HOST_LOCK_PATH,
    HOST_DOMAINS_ENV,
    HOST_LOCK_ENV,
    HostElection,
    command_environment,
    host_owner,
    rank_decision,
    remove_command_lock,
    resolve_mode,
)
from otel_joules.errors import ConfigurationError


@pytest.fixture
def election():
    e = HostElection()
    yield e
    e.release()


@pytest.mark.parametrize(
    ("env", "owner"),
    [
        ({"LOCAL_RANK": "0"}, True),
        ({"LOCAL_RANK": "3"}, False),
        ({"SLURM_LOCALID": "0"}, True),
        ({"SLURM_LOCALID": "1"}, False),
        # srun with one task per node running torchrun: SLURM_LOCALID=0 for all its workers
        ({"SLURM_LOCALID": "0", "LOCAL_RANK": "0"}, True),
        ({"SLURM_LOCALID": "0", "LOCAL_RANK": "2"}, False),
        # two torchrun launchers on one node (srun with two tasks per node): only task 0's rank 0
        ({"SLURM_LOCALID": "1", "LOCAL_RANK": "0"}, False),
    ],
)
def test_ranks_elect_local_rank_zero(election, tmp_path, env, owner):
    decision = election.decide(env=env, lock_path=str(tmp_path / "lock"))
    assert decision.owner is owner
    assert bool(decision) is owner
    assert decision.meter_options() == ({} if owner else {"host": False})
    assert decision.lock_path is None
    # Ranks decide without the lock: another process may hold it.
    assert not (tmp_path / "lock").exists()


def test_rank_reason_names_the_variables():
    decision = rank_decision({"SLURM_LOCALID": "1", "LOCAL_RANK": "0"})
    assert decision is not None
    assert decision.reason.startswith("LOCAL_RANK=0, SLURM_LOCALID=1: local rank 0 reports")


def test_a_malformed_rank_is_ignored_with_a_warning(election, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="otel_joules"):
        decision = election.decide(env={"LOCAL_RANK": "zero"}, lock_path=str(tmp_path / "lock"))
    assert decision.owner and decision.reason.startswith("holds ")  # fell through to the lock
    assert "ignoring LOCAL_RANK='zero'" in caplog.text


def test_explicit_modes_and_the_environment_variable(election, tmp_path, caplog):
    lock = str(tmp_path / "lock")
    assert election.decide("always", env={"LOCAL_RANK": "5"}, lock_path=lock).owner is True
    assert election.decide("never", env={"LOCAL_RANK": "0"}, lock_path=lock).owner is False
    assert election.decide(env={HOST_DOMAINS_ENV: " NEVER "}, lock_path=lock).owner is False
    assert election.decide(env={HOST_DOMAINS_ENV: "always"}, lock_path=lock).reason == f"{HOST_DOMAINS_ENV}=always"
    assert resolve_mode(None, {}) == "auto"
    with pytest.raises(ConfigurationError, match="'sometimes' is not one of auto, always, never"):
        resolve_mode("sometimes", {})
    # A bad variable is not an error in the user's program: said once by name, auto used.
    with caplog.at_level(logging.WARNING, logger="otel_joules"):
        assert resolve_mode(None, {HOST_DOMAINS_ENV: "1"}) == "auto"
        assert resolve_mode(None, {HOST_DOMAINS_ENV: "1"}) == "auto"
    assert [r.getMessage() for r in caplog.records] == [
        f"otel-joules: {HOST_DOMAINS_ENV}='1' is not one of auto, always, never; using 'auto' instead"
    ]


def test_the_lock_elects_one_owner_in_process(tmp_path):
    lock = str(tmp_path / "host.lock")
    first, second = HostElection(), HostElection()
    try:
        a = first.decide(env={}, lock_path=lock)
        b = second.decide(env={}, lock_path=lock)
        assert a.owner and not b.owner
        assert a.lock_path == b.lock_path == lock
        assert b.reason == f"another process on this host holds {lock}"
        # The same question again: the same answer, without re-electing.
        assert second.decide(env={}, lock_path=lock) is b
        first.release()
        third = HostElection()
        assert third.decide(env={}, lock_path=lock).owner
        third.release()
    finally:
        first.release()
        second.release()


ELECT = (
    "import json, sys\n"
    "from otel_joules.delivery.hosts import host_owner\n"
    "d = host_owner()\n"
    "print(json.dumps({'owner': d.owner, 'reason': d.reason}), flush=True)\n"
    "sys.stdin.read()\n"  # hold the decision (and the lock) until told to exit
)


def _elect_in_process(env: dict[str, str]) -> tuple[subprocess.Popen[str], dict]:
    process = subprocess.Popen([sys.executable, "-c", ELECT], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    return process, json.loads(line)


def test_two_processes_elect_one_owner_by_lock_and_the_lock_dies_with_its_owner(tmp_path):
    env = clean_env(tmp_path)
    first, a = _elect_in_process(env)
    try:
        second, b = _elect_in_process(env)
        second.communicate("")
    finally:
        first.communicate("")
    assert a == {"owner": True, "reason": f"holds {env[HOST_LOCK_ENV]}"}
    assert b == {"owner": False, "reason": f"another process on this host holds {env[HOST_LOCK_ENV]}"}
    # The owner exited: the kernel released its lock, so the next process owns the host.
    third, c = _elect_in_process(env)
    third.communicate("")
    assert c["owner"] is True


def test_two_processes_elect_by_local_rank_whatever_the_lock_says(tmp_path):
    env = clean_env(tmp_path)
    rank1, a = _elect_in_process({**env, "LOCAL_RANK": "1"})
    rank0, b = _elect_in_process({**env, "LOCAL_RANK": "0"})
    rank1.communicate("")
    rank0.communicate("")
    assert (a["owner"], b["owner"]) == (False, True)
    assert not Path(env[HOST_LOCK_ENV]).exists()


def test_unopenable_lock_means_owner_with_one_warning(election, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="otel_joules"):
        decision = election.decide(env={}, lock_path=str(tmp_path / "missing-dir" / "lock"))
    assert decision.owner
    assert "unavailable" in decision.reason
    assert caplog.text.count("cannot open the host lock") == 1


def test_a_symlink_at_the_lock_path_is_not_followed(election, tmp_path):
    target = tmp_path / "precious"
    target.write_text("keep me")
    link = tmp_path / "lock"
    link.symlink_to(target)
    decision = election.decide(env={}, lock_path=str(link))
    assert decision.owner and "unavailable" in decision.reason
    assert target.read_text() == "keep me"


def test_an_existing_read_only_lock_file_still_works(election, tmp_path):
    lock = tmp_path / "lock"
    lock.write_text("")
    lock.chmod(0o444)
    other = HostElection()
    try:
        assert election.decide(env={}, lock_path=str(lock)).owner
        assert not other.decide(env={}, lock_path=str(lock)).owner
    finally:
        other.release()


def test_default_lock_path_and_environment_override(election, tmp_path):
    assert DEFAULT_HOST_LOCK_PATH == "/tmp/otel-joules-host-domains.lock"
    lock = str(tmp_path / "from-env.lock")
    assert election.decide(env={HOST_LOCK_ENV: lock}).lock_path == lock


def test_command_environment_scopes_the_lock_for_an_owner(election, tmp_path):
    lock = str(tmp_path / "lock")
    owner = election.decide(env={}, lock_path=lock)
    added = command_environment(owner, {})
    assert added == {HOST_LOCK_ENV: f"{lock}.run-{os.getpid()}"}
    # Inside the command, its processes elect among themselves with that lock.
    inner = HostElection()
    assert inner.decide(env=added).owner
    inner.release()
    remove_command_lock(added)
    assert not os.path.exists(added[HOST_LOCK_ENV])
    not_owner = HostElection().decide("never", env={})
    assert command_environment(not_owner, {}) == {HOST_DOMAINS_ENV: "never"}
    assert command_environment(owner, {HOST_DOMAINS_ENV: "always"}) == {}


def test_non_owner_spans_carry_no_host_energy(tmp_path, powercap):
    """The decision feeds instrument(): a non-owner's meter has no RAPL domain."""
    decision = HostElection().decide(env={"LOCAL_RANK": "1"})
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    handle = otel_joules.instrument(provider, metrics_enabled=False, sysfs_root=powercap.sysfs_root, gpus=[], **decision.meter_options())
    try:
        with provider.get_tracer("t").start_as_current_span("step"):
            powercap.zones["package_0"].advance_joules(2.0)
        owner_meter = otel_joules.EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False)
        assert handle.energy_meter.domains == ()
        assert [d.id for d in owner_meter.domains] == ["package_0", "core_0", "uncore_0", "dram_0"]
        owner_meter.close()
    finally:
        handle.uninstrument()
        provider.shutdown()
    (span,) = exporter.get_finished_spans()
    assert not any(key.startswith("energy.") for key in span.attributes)


def test_host_owner_uses_the_process_wide_election():
    from otel_joules.delivery.hosts import default_election

    try:
        decision = host_owner("auto", env={"LOCAL_RANK": "0"})
        assert default_election().decision is decision
        assert host_owner("auto", env={"LOCAL_RANK": "0"}) is decision
    finally:
        default_election().release()
