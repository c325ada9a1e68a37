"""Delivery: getting energy to existing observability stacks, and past one machine.

- :mod:`.setup`: tracer and meter providers from the standard ``OTEL_*`` variables (or
  ``--exporter`` specs), with exports that never hang or fail the caller
  (:func:`telemetry_from_env`).
- :mod:`.hosts`: which process of a host reports the host's CPU and memory
  (:func:`host_owner`, ``OTEL_JOULES_HOST_DOMAINS=auto|always|never``), and what a
  wrapper tells the command it runs (:func:`command_environment`).
- :mod:`.resource`: ``host.name``, Slurm and torchrun resource attributes
  (:class:`JobResourceDetector`).
- :mod:`.context`: the W3C trace context through ``TRACEPARENT``/``TRACESTATE``.

How the numbers add up across processes and hosts
-------------------------------------------------

Host-level domains (RAPL ``package_N``/``dram_N``/``psys``, or the ``cpu_estimate`` and
``memory_estimate`` estimates) measure a whole host; GPU domains measure one GPU.
With :func:`host_owner` electing one process per host, each host's CPU and memory
energy is reported by exactly one process, and each GPU by the process that uses it
(the GPUs in its ``CUDA_VISIBLE_DEVICES``). Spans and data points carry the resource
attributes ``host.name``, ``service.name``, ``slurm.job.id``, ``slurm.procid``,
``torchrun.rank``, ... (always under ``otel-joules run``; under ``opentelemetry-instrument``
with ``OTEL_EXPERIMENTAL_RESOURCE_DETECTORS=otel_joules``). So:

- **Energy of a job** = the sum of ``hw.host.energy`` over every process of the job
  (group by ``slurm.job.id`` or ``service.name``): per host, the owner's value holds
  CPU + memory + its GPUs, every other process's value holds only its GPUs, so nothing
  is counted twice. Equivalently, the sum of ``hw.energy`` over the domains that add to
  ``energy.joules`` (``package``, ``dram``, GPUs; not ``core``/``uncore``, which are inside
  their package, nor ``psys`` where a package exists).
- **Energy of a host** = the same sum restricted to one ``host.name``.
- **Per device** (``hw.energy`` by ``host.name`` and ``hw.id``): one series per
  device and host; ``hw.id`` is unique on a host only, so always group by ``host.name`` too.
- **Spans**: the owner's spans carry the host's CPU and memory energy during the span
  plus its GPUs'; every other process's spans carry its GPUs' energy only. Spans of one
  process overlap when they nest or run concurrently (each gets everything spent during
  its interval), so add up root spans, or one span name, never parents and children.
- **Layers**: ``otel-joules run`` measures the whole command as one root span. An
  instrumented program inside it measures again (inside its own election, see
  :func:`command_environment`): as with nested spans, the wrapper's span contains its
  children's, and the children's ``hw.*`` metrics repeat the wrapper's. Sum one layer,
  not both.

Caveat: GPUs are attributed through ``CUDA_VISIBLE_DEVICES``. When every worker sees every
GPU (torchrun's default, each worker picking ``cuda:LOCAL_RANK`` itself), every worker
would report every GPU; give each worker its own ``CUDA_VISIBLE_DEVICES`` or choose its
GPUs explicitly (``EnergyMeter(gpus=[...])``).
"""

from otel_joules.delivery.context import (
    TRACEPARENT_ENV,
    TRACESTATE_ENV,
    attach_environment_context,
    child_environment,
    context_from_environment,
    environment_for_span,
)
from otel_joules.delivery.hosts import (
    DEFAULT_HOST_LOCK_PATH,
    HOST_DOMAINS_ENV,
    HOST_LOCK_ENV,
    HostElection,
    HostOwnership,
    command_environment,
    default_election,
    host_owner,
    remove_command_lock,
)
from otel_joules.delivery.resource import JOB_ATTRIBUTES, JobResourceDetector, job_resource, job_resource_attributes
from otel_joules.delivery.setup import (
    BoundedMetricExporter,
    BoundedSpanExporter,
    DeliveryReport,
    Destination,
    Telemetry,
    capture_sdk_logs,
    parse_exporter_spec,
    telemetry_from_env,
)

__all__ = [
    "BoundedMetricExporter",
    "BoundedSpanExporter",
    "DEFAULT_HOST_LOCK_PATH",
    "DeliveryReport",
    "Destination",
    "HOST_DOMAINS_ENV",
    "HOST_LOCK_ENV",
    "HostElection",
    "HostOwnership",
    "JOB_ATTRIBUTES",
    "JobResourceDetector",
    "TRACEPARENT_ENV",
    "TRACESTATE_ENV",
    "Telemetry",
    "attach_environment_context",
    "capture_sdk_logs",
    "child_environment",
    "command_environment",
    "context_from_environment",
    "default_election",
    "environment_for_span",
    "host_owner",
    "job_resource",
    "job_resource_attributes",
    "parse_exporter_spec",
    "remove_command_lock",
    "telemetry_from_env",
]
