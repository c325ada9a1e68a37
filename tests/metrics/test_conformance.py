"""Every metric otel-joules publishes conforms to the OpenTelemetry semantic conventions, or is declared our own.

The reference is the ``opentelemetry-semantic-conventions`` package at the version pyproject.toml pins (the
dev extra): for a name it defines, our instrument must export the same kind of data and unit as the
package's own ``create_*`` function does, carry the attributes the conventions require, and use only
``hw.type`` values they list. A name it does not define must be listed as ours in docs/metrics.md.
"""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import re
import time
from importlib import metadata
from pathlib import Path

import pytest
from opentelemetry.metrics import Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import Gauge, InMemoryMetricReader, Sum
from opentelemetry.sdk.trace import TracerProvider

import otel_joules
from otel_joules import EnergyMeter
from otel_joules.attribution import Attributor
from otel_joules.metrics.instruments import EnergyMetrics
from otel_joules.sensors.base import HardwareType
from otel_joules.semconv import domain_joules_key
from tests.fakes.procfs import FakeProcfs
from tests.metrics.test_sums import advance, platform_tree

ROOT = Path(__file__).resolve().parents[2]

hw_metrics = pytest.importorskip(
    "opentelemetry.semconv._incubating.metrics.hw_metrics",
    reason="this opentelemetry-semantic-conventions predates the hardware metrics; install the dev extra's pin",
)
from opentelemetry.semconv._incubating.attributes import hw_attributes  # noqa: E402

#: Attributes the conventions require (``requirement_level: required`` in semantic-conventions'
#: model/hardware/common.yaml and host.yaml; the Python package carries names, not requirement levels).
REQUIRED_ATTRIBUTES = {
    "hw.energy": {hw_attributes.HW_ID, hw_attributes.HW_TYPE},
    "hw.power": {hw_attributes.HW_ID, hw_attributes.HW_TYPE},
    "hw.host.energy": {hw_attributes.HW_ID},
    "hw.host.power": {hw_attributes.HW_ID},
}


def test_the_installed_conventions_are_the_pinned_ones() -> None:
    pin = re.search(r'"opentelemetry-semantic-conventions==([^"]+)"', (ROOT / "pyproject.toml").read_text())
    assert pin, "pyproject.toml's dev extra pins no opentelemetry-semantic-conventions"
    assert metadata.version("opentelemetry-semantic-conventions") == pin.group(1)


def _convention_metrics() -> dict[str, object]:
    """Every metric name the package defines, with its ``create_*`` function."""
    import opentelemetry.semconv._incubating.metrics as package

    found: dict[str, object] = {}
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for constant, value in vars(module).items():
            create = getattr(module, f"create_{constant.lower()}", None)
            if constant.isupper() and isinstance(value, str) and create is not None:
                found[value] = create
    return found


def _kind(metric) -> tuple[str, bool | None]:
    """What a metric exports: ("sum", monotonic) or ("gauge", None)."""
    if isinstance(metric.data, Sum):
        return "sum", metric.data.is_monotonic
    assert isinstance(metric.data, Gauge), type(metric.data)
    return "gauge", None


def _convention_shape(name: str, create) -> tuple[tuple[str, bool | None], str]:
    """The kind and unit of the data the conventions' own instrument for ``name`` exports."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    meter = provider.get_meter("conventions")
    if "callbacks" in inspect.signature(create).parameters:
        create(meter, [lambda options: [Observation(1)]])
    else:
        instrument = create(meter)
        (getattr(instrument, "add", None) or instrument.set)(1)
    (metric,) = [m for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics for m in sm.metrics]
    provider.shutdown()
    assert metric.name == name
    return _kind(metric), metric.unit


def _documented_own_names() -> set[str]:
    """The names docs/metrics.md lists as not defined by the conventions."""
    text = (ROOT / "docs" / "metrics.md").read_text()
    paragraph = text.split("**Names the conventions do not define.**", 1)[1].split("\n\n", 1)[0]
    ours = re.split(r"otel-joules'\s+own:", paragraph, maxsplit=1)[1]
    return set(re.findall(r"`([a-z][a-z0-9_.]*)`", ours))


@pytest.fixture
def published(tmp_path):
    """Every metric of a host with psys, sub-zones, DRAM and both estimates, with attribution on: name -> metric."""
    tree = platform_tree(tmp_path / "sys")
    proc = FakeProcfs(tmp_path / "proc")
    proc.add_process(os.getpid(), 0.0)
    meter = EnergyMeter(sysfs_root=tree.sysfs_root, procfs_root=proc.procfs_root, gpus=[], estimate=True, sample=False)
    attributor = Attributor(meter, sample=False, policy="busy")
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    EnergyMetrics(meter, provider, host_id="host-a", attribution=attributor)
    reader.collect()
    time.sleep(0.1)
    advance(tree)
    proc.add_host(busy_s=4.0, idle_s=4.0)
    proc.add_process(os.getpid(), 1.0)
    metrics = {m.name: m for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    yield metrics
    provider.shutdown()
    attributor.close()
    meter.close()


def test_every_published_metric_conforms_or_is_declared_ours(published) -> None:
    conventions = _convention_metrics()
    own = _documented_own_names()
    assert {"hw.energy", "hw.power", "hw.host.energy", "hw.host.power", "energy.nested", "energy.estimate"} <= set(published)
    for name, metric in published.items():
        assert metric.data.data_points, f"{name} has no point: the check would be vacuous"
        if name not in conventions:
            assert name in own, f"{name} is not a semantic-conventions metric: list it in docs/metrics.md as ours"
            assert not name.startswith("hw."), f"{name}: the conventions own the hw.* namespace"
            continue
        assert name not in own, f"{name} is a conventions' metric, documented as ours"
        kind, unit = _convention_shape(name, conventions[name])
        assert (_kind(metric), metric.unit) == (kind, unit), name
        for point in metric.data.data_points:
            missing = REQUIRED_ATTRIBUTES.get(name, set()) - set(point.attributes)
            assert not missing, f"{name} lacks the required {sorted(missing)}: {dict(point.attributes)}"


def test_every_hw_attribute_and_hw_type_is_the_conventions(published) -> None:
    defined = {v for k, v in vars(hw_attributes).items() if k.startswith("HW_") and isinstance(v, str)}
    types = {value.value for value in hw_attributes.HwTypeValues}
    for name, metric in published.items():
        for point in metric.data.data_points:
            used = {key for key in point.attributes if key.startswith("hw.")}
            assert used <= defined, f"{name}: {sorted(used - defined)} are not hardware attributes of the conventions"
            if "hw.type" in point.attributes:
                assert point.attributes["hw.type"] in types, name
    # Every hw.type a domain can have, GPUs included (no GPU in this tree).
    assert {t.value for t in HardwareType} <= types


def test_a_spans_domain_joins_its_metric_series(tmp_path, span_exporter) -> None:
    """Each span's ``energy.<domain>.joules`` names a domain that one device series carries as ``energy.domain``."""
    tree = platform_tree(tmp_path / "sys")
    meter = EnergyMeter(sysfs_root=tree.sysfs_root, gpus=[], sample=False)
    tracer_provider = TracerProvider()
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    tracer_provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    reader = InMemoryMetricReader()
    handle = otel_joules.instrument(tracer_provider, MeterProvider(metric_readers=[reader]), meter=meter, attribution=False)
    with tracer_provider.get_tracer("t").start_as_current_span("work"):
        advance(tree)
    (span,) = span_exporter.get_finished_spans()
    handle.metrics.refresh()  # a collection right after the span reads afresh
    series = {}
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.unit == "J":
                    for point in metric.data.data_points:
                        if "energy.domain" in point.attributes:
                            series[point.attributes["energy.domain"]] = (metric.name, point.value)
    handle.uninstrument()
    meter.close()
    span_domains = {d.id for d in meter.domains if domain_joules_key(d.id) in span.attributes}
    assert span_domains == {"psys", "package_0", "core_0", "uncore_0", "dram_0"}
    assert span_domains <= set(series)
    for domain in span_domains:
        name, joules = series[domain]
        assert joules == pytest.approx(span.attributes[domain_joules_key(domain)]), (domain, name)
    assert series["psys"][0] == "hw.host.energy" and series["core_0"][0] == "energy.nested"
