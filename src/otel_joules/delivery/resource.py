"""Resource attributes that let a backend group energy by host and job.

:class:`JobResourceDetector` is an OpenTelemetry ``ResourceDetector``. It reports:

==========================  ============================  ==========================
Attribute                   From                          Type
==========================  ============================  ==========================
``host.name``               ``socket.gethostname()``      string
``service.instance.id``     a random UUID per process     string
``slurm.job.id``            ``SLURM_JOB_ID``              string
``slurm.job.name``          ``SLURM_JOB_NAME``            string
``slurm.array.job.id``      ``SLURM_ARRAY_JOB_ID``        string
``slurm.array.task.id``     ``SLURM_ARRAY_TASK_ID``       int
``slurm.step.id``           ``SLURM_STEP_ID``             string
``slurm.procid``            ``SLURM_PROCID``              int (global task rank)
``slurm.localid``           ``SLURM_LOCALID``             int (task rank on the node)
``slurm.nodeid``            ``SLURM_NODEID``              int
``slurm.ntasks``            ``SLURM_NTASKS``              int
``slurm.cluster.name``      ``SLURM_CLUSTER_NAME``        string
``torchrun.rank``           ``RANK``                      int (global rank)
``torchrun.local_rank``     ``LOCAL_RANK``                int (rank on this host)
``torchrun.world_size``     ``WORLD_SIZE``                int
``torchrun.local_world_size``  ``LOCAL_WORLD_SIZE``       int
``torchrun.group_rank``     ``GROUP_RANK``                int (node rank)
``torchrun.run_id``         ``TORCHELASTIC_RUN_ID``       string
==========================  ============================  ==========================

``service.instance.id`` tells apart processes that share a service name (torchrun ranks,
Slurm tasks, gunicorn workers): the Collector's Prometheus exporter makes it the
``instance`` label, and emits ``target_info`` only for resources that have one. SDKs
before 1.39 do not generate it. It is one value per process (a forked child draws its own),
so its traces and metrics join.

Only variables that are set appear; an integer variable that does not parse is kept as
the string it is (a backend still groups by it). ``SLURM_JOBID`` is read when
``SLURM_JOB_ID`` is absent (older Slurm).

Use it:

- ``otel-joules run`` adds it by itself;
- ``opentelemetry-instrument`` and ``Resource.create()`` add it when
  ``OTEL_EXPERIMENTAL_RESOURCE_DETECTORS`` names ``otel_joules`` (the
  ``opentelemetry_resource_detector`` entry point), e.g. ``OTEL_EXPERIMENTAL_RESOURCE_DETECTORS=otel_joules``;
- in code: ``TracerProvider(resource=job_resource().merge(Resource.create()))``.
"""

from __future__ import annotations

import os
import socket
import uuid
from typing import Mapping

from opentelemetry.sdk.resources import Resource, ResourceDetector

from otel_joules.semconv import HOST_NAME, SERVICE_INSTANCE_ID

#: (attribute, environment variables tried in order, integer?)
_JOB_VARIABLES: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("slurm.job.id", ("SLURM_JOB_ID", "SLURM_JOBID"), False),
    ("slurm.job.name", ("SLURM_JOB_NAME",), False),
    ("slurm.array.job.id", ("SLURM_ARRAY_JOB_ID",), False),
    ("slurm.array.task.id", ("SLURM_ARRAY_TASK_ID",), True),
    ("slurm.step.id", ("SLURM_STEP_ID", "SLURM_STEPID"), False),
    ("slurm.procid", ("SLURM_PROCID",), True),
    ("slurm.localid", ("SLURM_LOCALID",), True),
    ("slurm.nodeid", ("SLURM_NODEID",), True),
    ("slurm.ntasks", ("SLURM_NTASKS",), True),
    ("slurm.cluster.name", ("SLURM_CLUSTER_NAME",), False),
    ("torchrun.rank", ("RANK",), True),
    ("torchrun.local_rank", ("LOCAL_RANK",), True),
    ("torchrun.world_size", ("WORLD_SIZE",), True),
    ("torchrun.local_world_size", ("LOCAL_WORLD_SIZE",), True),
    ("torchrun.group_rank", ("GROUP_RANK",), True),
    ("torchrun.run_id", ("TORCHELASTIC_RUN_ID",), False),
)

#: Every attribute name this module can report.
JOB_ATTRIBUTES: tuple[str, ...] = (HOST_NAME, SERVICE_INSTANCE_ID) + tuple(name for name, _, _ in _JOB_VARIABLES)

# (pid, id): drawn again in a forked child, whose series must not merge with its parent's.
_instance: tuple[int, str] | None = None


def service_instance_id() -> str:
    """This process's ``service.instance.id``: a random UUID, the same for every call in one process."""
    global _instance
    pid = os.getpid()
    if _instance is None or _instance[0] != pid:
        _instance = (pid, str(uuid.uuid4()))
    return _instance[1]


def job_resource_attributes(env: Mapping[str, str] | None = None, hostname: str | None = None) -> dict[str, str | int]:
    """The attributes of the table above that this environment provides."""
    env = os.environ if env is None else env
    attributes: dict[str, str | int] = {HOST_NAME: hostname or socket.gethostname(), SERVICE_INSTANCE_ID: service_instance_id()}
    for name, variables, integer in _JOB_VARIABLES:
        raw = next((env[v] for v in variables if env.get(v, "").strip()), None)
        if raw is None:
            continue
        value: str | int = raw.strip()
        if integer:
            try:
                value = int(value)
            except ValueError:
                pass
        attributes[name] = value
    return attributes


def job_resource(env: Mapping[str, str] | None = None) -> Resource:
    """A ``Resource`` with :func:`job_resource_attributes`."""
    return Resource(job_resource_attributes(env))


class JobResourceDetector(ResourceDetector):
    """``ResourceDetector`` for ``host.name``, ``service.instance.id``, Slurm and torchrun attributes (module docstring).

    Registered as the ``otel_joules`` entry point of ``opentelemetry_resource_detector``;
    the SDK constructs it without arguments.
    """

    def __init__(self, raise_on_error: bool = False, env: Mapping[str, str] | None = None) -> None:
        super().__init__(raise_on_error)
        self._env = env

    def detect(self) -> Resource:
        """The resource for the current environment."""
        return job_resource(self._env)
