"""Job resource attributes (host, Slurm, torchrun) and the W3C trace context through the environment."""

from __future__ import annotations

import os
import socket
import uuid

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from otel_joules.instrumentation.context import (
    attach_environment_context,
    child_environment,
    context_from_environment,
    environment_for_span,
)
from otel_joules.delivery.resource import (
    JOB_ATTRIBUTES,
    JobResourceDetector,
    job_resource,
    job_resource_attributes,
    service_instance_id,
)

from tests.helpers.processes import entry_point_path

SLURM_TORCHRUN_ENV = {
    "SLURM_JOB_ID": "912345",
    "SLURM_JOB_NAME": "train-resnet",
    "SLURM_ARRAY_JOB_ID": "912300",
    "SLURM_ARRAY_TASK_ID": "45",
    "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "7",
    "SLURM_LOCALID": "3",
    "SLURM_NODEID": "1",
    "SLURM_NTASKS": "8",
    "SLURM_CLUSTER_NAME": "hpc",
    "RANK": "7",
    "LOCAL_RANK": "3",
    "WORLD_SIZE": "8",
    "LOCAL_WORLD_SIZE": "4",
    "GROUP_RANK": "1",
    "TORCHELASTIC_RUN_ID": "none",
    "UNRELATED": "x",
}


def test_every_slurm_and_torchrun_variable_becomes_an_attribute():
    attributes = job_resource_attributes(SLURM_TORCHRUN_ENV, hostname="node-17")
    assert attributes == {
        "host.name": "node-17",
        "service.instance.id": service_instance_id(),
        "slurm.job.id": "912345",
        "slurm.job.name": "train-resnet",
        "slurm.array.job.id": "912300",
        "slurm.array.task.id": 45,
        "slurm.step.id": "0",
        "slurm.procid": 7,
        "slurm.localid": 3,
        "slurm.nodeid": 1,
        "slurm.ntasks": 8,
        "slurm.cluster.name": "hpc",
        "torchrun.rank": 7,
        "torchrun.local_rank": 3,
        "torchrun.world_size": 8,
        "torchrun.local_world_size": 4,
        "torchrun.group_rank": 1,
        "torchrun.run_id": "none",
    }
    assert set(attributes) == set(JOB_ATTRIBUTES)


def test_only_what_is_set_and_old_slurm_names():
    assert job_resource_attributes({}, hostname="h") == {"host.name": "h", "service.instance.id": service_instance_id()}
    assert job_resource_attributes({"SLURM_JOBID": "55", "SLURM_JOB_ID": " "}, hostname="h")["slurm.job.id"] == "55"
    # A rank that does not parse is kept as text: a backend still groups by it.
    assert job_resource_attributes({"RANK": "r7"}, hostname="h")["torchrun.rank"] == "r7"
    assert job_resource_attributes({})["host.name"] == socket.gethostname()


def test_the_instance_id_is_one_per_process_and_new_in_a_forked_child():
    """Traces and metrics of one process join on it; a forked worker's series must not merge with its parent's."""
    first = job_resource_attributes({})["service.instance.id"]
    assert str(uuid.UUID(first)) == first
    assert job_resource().attributes["service.instance.id"] == first == JobResourceDetector().detect().attributes["service.instance.id"]
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its id and leave without running the parent's atexit handlers
        os.write(write_end, service_instance_id().encode())
        os._exit(0)
    os.close(write_end)
    os.waitpid(pid, 0)
    with os.fdopen(read_end) as pipe:
        child = pipe.read()
    assert child and child != first
    assert service_instance_id() == first


def test_detector_gives_a_resource():
    resource = JobResourceDetector(env={"SLURM_JOB_ID": "1", "LOCAL_RANK": "0"}).detect()
    assert resource.attributes["slurm.job.id"] == "1"
    assert resource.attributes["torchrun.local_rank"] == 0
    assert resource.attributes["host.name"] == socket.gethostname()


def test_resource_create_uses_the_detector_named_in_the_sdk_variable(tmp_path, monkeypatch):
    """The opentelemetry_resource_detector entry point, as Resource.create() (and the distro) load it."""
    extra = entry_point_path(tmp_path)
    if extra is not None:
        monkeypatch.syspath_prepend(extra)
    monkeypatch.setenv("OTEL_EXPERIMENTAL_RESOURCE_DETECTORS", "otel_joules")
    monkeypatch.setenv("SLURM_JOB_ID", "31337")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "svc")
    resource = Resource.create()
    assert resource.attributes["slurm.job.id"] == "31337"
    assert resource.attributes["host.name"] == socket.gethostname()
    assert resource.attributes["service.name"] == "svc"


# --- TRACEPARENT -----------------------------------------------------------------------

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"


def test_context_from_environment_reads_w3c_traceparent_and_tracestate():
    ctx = context_from_environment({"TRACEPARENT": f"00-{TRACE_ID}-{SPAN_ID}-01", "TRACESTATE": "congo=t61rcWkgMzE"})
    assert ctx is not None
    span_context = trace.get_current_span(ctx).get_span_context()
    assert f"{span_context.trace_id:032x}" == TRACE_ID
    assert f"{span_context.span_id:016x}" == SPAN_ID
    assert span_context.is_remote and span_context.trace_flags == 1
    assert span_context.trace_state.to_header() == "congo=t61rcWkgMzE"


@pytest.mark.parametrize("value", ["", "garbage", f"00-{'0' * 32}-{SPAN_ID}-01", f"ff-{TRACE_ID}-{SPAN_ID}-01"])
def test_absent_or_invalid_traceparent_gives_no_context(value):
    assert context_from_environment({"TRACEPARENT": value}) is None
    assert context_from_environment({}) is None


def test_a_span_round_trips_through_the_environment():
    provider = TracerProvider()
    span = provider.get_tracer("t").start_span("root")
    env = child_environment(span, {"PATH": "/bin", "TRACEPARENT": "00-stale", "TRACESTATE": "stale=1"})
    sc = span.get_span_context()
    assert env == {"PATH": "/bin", "TRACEPARENT": f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{sc.trace_flags:02x}"}
    assert environment_for_span(trace.INVALID_SPAN) == {}
    # The child's side: spans started after attaching belong to the parent's trace.
    token = attach_environment_context(env)
    try:
        child = provider.get_tracer("t").start_span("child")
        assert child.get_span_context().trace_id == sc.trace_id
        assert child.parent.span_id == sc.span_id
        child.end()
    finally:
        otel_context.detach(token)
    span.end()
    assert attach_environment_context({}) is None

