"""Delivery: getting energy to existing observability stacks, and past one machine.

- :mod:`.setup`: tracer and meter providers from the standard ``OTEL_*`` variables (or
  ``--exporter`` specs), with exports that never hang or fail the caller
  (:func:`telemetry_from_env`), built from:

  - :mod:`.destinations`: ``--exporter`` specs, the exporter variables, OTLP endpoints and
    their TCP probe;
  - :mod:`.bounded`: exporters bounded in time that never raise;
  - :mod:`.outcomes`: what reached each destination (:class:`DeliveryReport`), the SDK's
    log lines kept for it;
  - :mod:`.prometheus`: the ``prometheus`` scrape endpoint.
- :mod:`.reachability`: under ``opentelemetry-instrument``, the energy instruments report only
  while the SDK's OTLP metrics endpoint answers (:func:`~.reachability.sdk_metrics_gate`), so
  an absent collector adds no exports to retry and no wait at exit.
- :mod:`.resource`: ``host.name``, Slurm and torchrun resource attributes
  (:class:`JobResourceDetector`).
- :mod:`.redaction`: secrets out of ``process.command_line``.

The W3C trace context through ``TRACEPARENT``/``TRACESTATE`` lives in
:mod:`otel_joules.instrumentation.context`.

How the numbers add up across processes and hosts
-------------------------------------------------

Every process measures what its meter can see: the host-level domains (RAPL
``package_N``/``dram_N``/``psys``, or the ``cpu_estimate``/``memory_estimate`` estimates) and
its GPUs. No process is elected and no lock file is used. Spans and data points carry the
resource attributes ``host.name``, ``service.name``, ``slurm.job.id``, ``torchrun.rank``, ...
(always under ``otel-joules run``; under ``opentelemetry-instrument`` with
``OTEL_EXPERIMENTAL_RESOURCE_DETECTORS=otel_joules``). So:

- **Energy of a job, a service, an endpoint**: sum the *shares*: ``process.energy`` over the
  job's processes, or ``energy.attributed.self.joules`` over its spans. Each process's share is
  its CPU time's part of the host's energy (and its part of its GPUs'), so shares of
  processes on one host add up to at most what the host spent (:mod:`otel_joules.attribution`).
- **Energy of a host or a device**: ``hw.energy``/``hw.host.energy`` describe the hardware
  (each domain in one metric, so a plain sum of one counts each joule once:
  :mod:`otel_joules.metrics.series`). With ``otel-joules agent`` the agent alone publishes them,
  once per host. Without one every otel-joules process on a host reports the same hardware:
  identical rates under the same ``host.name`` and ``hw.id``, from counters that started at
  different times. Take one per device: ``max by (host_name, hw_id) (rate(hw_energy_joules_total[5m]))``,
  then sum over devices. Never sum ``hw.*`` over processes.
- **Spans**: ``energy.joules`` is what the host spent during the span (nested and concurrent
  spans overlap); ``energy.attributed.self.joules`` is what adds up.
- **Layers**: ``otel-joules run`` measures the whole command as one root span whose share is
  the command's CPU time's part. An instrumented program inside it reports its own spans'
  shares, which are part of the command's: sum one layer, not both.

Caveat: GPUs are measured through ``CUDA_VISIBLE_DEVICES``. When every worker sees every
GPU (torchrun's default), each worker measures every GPU, and its share of each comes from
NVML's list of the processes running there.
"""

from otel_joules.delivery.resource import JobResourceDetector, job_resource, job_resource_attributes
from otel_joules.delivery.outcomes import DeliveryReport
from otel_joules.delivery.setup import Telemetry, telemetry_from_env

# What users build on. The rest (exporter specs, bounded exporters, SDK log capture,
# JOB_ATTRIBUTES) is for otel-joules' own commands and tests: import it from its module.
__all__ = [
    "DeliveryReport",
    "JobResourceDetector",
    "Telemetry",
    "job_resource",
    "job_resource_attributes",
    "telemetry_from_env",
]
