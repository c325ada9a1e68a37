"""No name otel-joules emits is also a namespace: none is a dotted prefix of another of its kind.

A backend that turns dotted keys into nested objects (Elasticsearch and OpenSearch mappings, MongoDB
documents) can hold only one of ``a.b`` (a value) and ``a.b.c`` (which makes ``a.b`` an object). The
OpenTelemetry conventions forbid it for the same reason. Checked on two sources:

- the vocabulary, :mod:`otel_joules.semconv`: attribute names (span, event, metric point and resource
  attributes, ``energy.<domain>.*`` for every domain id the sensors make) and metric names;
- what the library really emits: a CarbonTracker run (training and epoch spans, an interrupted epoch, the
  prediction event), an instrumented span, the metric points of the same meter, and the job resource.

Attributes and metric names are separate registries (a backend stores them apart), so each is checked
within itself.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterable

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_joules
from otel_joules import EnergyMeter, semconv
from otel_joules.carbontracker.tracker import CarbonTracker
from otel_joules.delivery.resource import job_resource_attributes
from tests.fakes.powercap import make_powercap

#: Domain ids the sensors make (RAPL, NVML, amdsmi, hwmon, the estimators): ``energy.<domain>.*`` for each.
DOMAIN_IDS = ("package_0", "core_0", "uncore_0", "dram_0", "psys", "nvidia_gpu_0", "amd_gpu_0", "intel_gpu_0",
              "grace_0", "cpu_estimate", "memory_estimate")
#: Resource attributes the exporters keep that OpenTelemetry defines, not otel-joules: ``deployment.environment``
#: is the conventions' own former name of ``deployment.environment.name``, read for older SDKs, never written by us.
_READ_NOT_WRITTEN = {"deployment.environment"}


def namespace_collisions(names: Iterable[str]) -> list[tuple[str, str]]:
    """Every ``(name, longer)`` pair where ``name`` is also the namespace of ``longer`` (``a.b`` and ``a.b.c``)."""
    unique = sorted(set(names))
    return [(a, b) for a in unique for b in unique if b.startswith(a + ".")]


def _semconv_names() -> tuple[set[str], set[str]]:
    """(attribute names, metric names) defined in semconv."""
    attributes: set[str] = set()
    metrics: set[str] = set()
    for constant, value in vars(semconv).items():
        if not constant.isupper() or constant.startswith("_"):
            continue
        if constant.startswith("METRIC_"):
            metrics.add(value)
        elif constant == "EXPORTED_RESOURCE_ATTRIBUTES":
            attributes.update(set(value) - _READ_NOT_WRITTEN)
        elif (
            isinstance(value, str)
            and "." in value
            and not value.endswith(".")
            and not constant.startswith(("SPAN_", "EVENT_", "SOURCE_", "BASELINE_", "KIND_", "ATTRIBUTION_"))
        ):
            attributes.add(value)
    for key in (semconv.domain_joules_key, semconv.domain_method_key, semconv.domain_stale_key,
                semconv.domain_missing_key, semconv.domain_rejected_jump_key):
        attributes.update(key(domain_id) for domain_id in DOMAIN_IDS)
    return attributes, metrics


def test_the_check_finds_a_name_that_is_also_a_namespace() -> None:
    """The names this library wrote before: each pair is a collision the check must report."""
    assert namespace_collisions(["training.epoch", "training.epoch.interrupted", "training.epochs",
                                 "training.epochs.planned", "energy.joules"]) == [
        ("training.epoch", "training.epoch.interrupted"),
        ("training.epochs", "training.epochs.planned"),
    ]
    assert namespace_collisions(["energy.components", "energy.components.power"]) == [
        ("energy.components", "energy.components.power")
    ]
    # A shared beginning that is not a dotted prefix is no namespace.
    assert namespace_collisions(["energy.domain", "energy.domain_kinds", "training.epochs.count"]) == []


def test_no_semconv_attribute_name_is_also_a_namespace() -> None:
    attributes, _ = _semconv_names()
    assert {semconv.TRAINING_EPOCH_NUMBER, semconv.TRAINING_EPOCH_INTERRUPTED, semconv.ENERGY_BASELINE} <= attributes
    assert namespace_collisions(attributes) == []


def test_no_semconv_metric_name_is_also_a_namespace() -> None:
    _, metrics = _semconv_names()
    assert {semconv.METRIC_ENERGY_COMPONENTS, semconv.METRIC_ENERGY_COMPONENTS_POWER} <= metrics
    assert namespace_collisions(metrics) == []


def test_no_former_name_is_still_defined() -> None:
    """A renamed name is gone from the vocabulary, and each replaces it with a name that is."""
    attributes, metrics = _semconv_names()
    assert not set(semconv.FORMER_ATTRIBUTE_NAMES) & attributes
    assert set(semconv.FORMER_ATTRIBUTE_NAMES.values()) <= attributes
    assert not set(semconv.FORMER_METRIC_NAMES) & metrics
    assert set(semconv.FORMER_METRIC_NAMES.values()) <= metrics


@pytest.fixture
def emitted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[set[str], set[str]]:
    """(attribute names, metric names) of what a CarbonTracker run and an instrumented span really emit."""
    monkeypatch.delenv("OTEL_JOULES_COUNTRY", raising=False)
    pc = make_powercap(tmp_path / "sys", "two_sockets")
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider(resource=Resource.create({"service.name": "names"}))
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter = EnergyMeter(sysfs_root=pc.sysfs_root, gpus=[], sample=False)
    handle = otel_joules.instrument(tracer_provider, MeterProvider(metric_readers=[reader]), meter=meter)
    try:
        tracer = tracer_provider.get_tracer("names")
        with tracer.start_as_current_span("work"):
            pc.zones["package_0"].advance_joules(5.0)
            time.sleep(0.01)
        tracker = CarbonTracker(
            epochs=3,
            log_dir=tmp_path / "logs",
            meter=EnergyMeter(sysfs_root=pc.sysfs_root, gpus=[], sample=False),
            intensity_gco2eq_per_kwh=250.0,
            tracer_provider=tracer_provider,
            verbose=0,
        )
        for _ in range(2):
            tracker.epoch_start()
            pc.zones["package_0"].advance_joules(60.0)
            pc.zones["psys"].advance_joules(90.0)
            time.sleep(0.01)
            tracker.epoch_end()
        tracker.epoch_start()  # interrupted by stop(): training.epoch.interrupted
        tracker.stop()
        time.sleep(0.6)  # older than the snapshot reuse window: the metrics read fresh values
        data = reader.get_metrics_data()
    finally:
        handle.uninstrument()
        tracer_provider.shutdown()
    attributes: set[str] = set()
    for span in spans.get_finished_spans():
        attributes.update(span.attributes or {})
        for event in span.events:
            attributes.update(event.attributes or {})
    metrics: set[str] = set()
    assert data is not None
    for resource_metrics in data.resource_metrics:
        for scope in resource_metrics.scope_metrics:
            for metric in scope.metrics:
                metrics.add(metric.name)
                for point in metric.data.data_points:
                    attributes.update(point.attributes or {})
    job = {"SLURM_JOB_ID": "7", "SLURM_JOB_NAME": "j", "SLURM_ARRAY_JOB_ID": "6", "SLURM_ARRAY_TASK_ID": "1",
           "SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NTASKS": "1",
           "SLURM_CLUSTER_NAME": "c", "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
           "GROUP_RANK": "0", "TORCHELASTIC_RUN_ID": "r"}
    attributes.update(job_resource_attributes(job, hostname="node-1"))
    return attributes, metrics


def test_no_emitted_name_is_also_a_namespace(emitted: tuple[set[str], set[str]]) -> None:
    attributes, metrics = emitted
    # The run really carried the names that once collided, and the metrics their power gauges.
    assert {semconv.TRAINING_EPOCH_NUMBER, semconv.TRAINING_EPOCH_INTERRUPTED, semconv.TRAINING_EPOCHS_COUNT,
            semconv.TRAINING_EPOCHS_PLANNED, semconv.ENERGY_DOMAIN_KINDS, "slurm.job.id"} <= attributes
    assert {semconv.METRIC_ENERGY_COMPONENTS, semconv.METRIC_ENERGY_COMPONENTS_POWER, semconv.METRIC_HW_HOST_ENERGY,
            semconv.METRIC_ENERGY_NESTED, semconv.METRIC_ENERGY_NESTED_POWER} <= metrics
    assert namespace_collisions(attributes) == []
    assert namespace_collisions(metrics) == []
    semconv_attributes, semconv_metrics = _semconv_names()
    assert namespace_collisions(attributes | semconv_attributes) == []
    assert namespace_collisions(metrics | semconv_metrics) == []
