"""Spans for free: pyJoules-style code makes OpenTelemetry spans when an SDK provider is the global one."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

import pytest
from opentelemetry import trace
from opentelemetry.trace import StatusCode

import otel_joules
from otel_joules.attribution.registry import attributor_for
from otel_joules.meter.meter import EnergyMeasurement
from otel_joules.meter.meter import EnergyMeter as CoreEnergyMeter
from otel_joules.pyjoules.device.rapl_device import RaplDramDomain, RaplPackageDomain
from otel_joules.pyjoules.energy_meter import EnergyContext, measure_energy
from otel_joules.pyjoules.handler import EnergyHandler

from tests.fakes.powercap import FakePowercap

if TYPE_CHECKING:
    from tests.pyjoules.conftest import GlobalTracing


def test_one_span_per_call_named_after_the_tag(
    powercap: FakePowercap, shared_meter: CoreEnergyMeter, global_tracing: GlobalTracing
) -> None:
    handler = EnergyHandler()
    tracer = trace.get_tracer("user")

    @measure_energy(handler=handler)
    def train() -> int:
        powercap.zones["package_0"].advance_joules(1.5)
        powercap.zones["dram_0"].advance_joules(0.25)
        powercap.zones["core_0"].advance_joules(1)
        with tracer.start_as_current_span("inner"):
            pass
        return 3

    assert train() == 3
    inner, span = global_tracing.exporter.get_finished_spans()
    assert span.name == "train" and span.instrumentation_scope.name == "otel_joules.pyjoules"
    assert inner.parent is not None and inner.parent.span_id == span.context.span_id
    attributes = dict(span.attributes or {})
    assert attributes["energy.package_0.joules"] == 1.5
    assert attributes["energy.dram_0.joules"] == 0.25
    assert attributes["energy.core_0.joules"] == 1.0 and attributes["energy.uncore_0.joules"] == 0.0
    # Core sits inside the package: the total is package + dram.
    assert attributes["energy.joules"] == 1.75
    assert attributes["energy.source"] == "measured"
    # The span and the handler's sample come from the same snapshots.
    (sample,) = handler.traces[0]
    assert {k: v / 1e6 for k, v in sample.energy.items()} == {
        k.split(".")[1]: v for k, v in attributes.items() if k.endswith(".joules") and k != "energy.joules"
    }


def test_span_of_selected_domains_only(powercap: FakePowercap, shared_meter: CoreEnergyMeter, global_tracing: GlobalTracing) -> None:
    @measure_energy(handler=EnergyHandler(), domains=[RaplDramDomain(0)])
    def work() -> None:
        powercap.zones["package_0"].advance_joules(5)
        powercap.zones["dram_0"].advance_joules(2)

    work()
    (span,) = global_tracing.exporter.get_finished_spans()
    assert {k: v for k, v in (span.attributes or {}).items() if k.endswith(".joules")} == {
        "energy.dram_0.joules": 2.0,
        "energy.joules": 2.0,
    }


def test_exception_marks_the_span(shared_meter: CoreEnergyMeter, global_tracing: GlobalTracing) -> None:
    @measure_energy(handler=EnergyHandler())
    def fail() -> None:
        raise KeyError("missing")

    with pytest.raises(KeyError):
        fail()
    (span,) = global_tracing.exporter.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert [event.name for event in span.events] == ["exception"]
    assert "energy.joules" in (span.attributes or {})


def test_context_parent_with_one_child_per_segment(
    powercap: FakePowercap, shared_meter: CoreEnergyMeter, global_tracing: GlobalTracing
) -> None:
    tracer = trace.get_tracer("user")
    with EnergyContext(handler=EnergyHandler(), domains=[RaplPackageDomain(0)], start_tag="load") as ctx:
        powercap.zones["package_0"].advance_joules(1)
        ctx.record(tag="train")
        powercap.zones["package_0"].advance_joules(2)
        with tracer.start_as_current_span("user-span"):
            pass
        ctx.record(tag="save")
        powercap.zones["package_0"].advance_joules(4)
    spans = {span.name: span for span in global_tracing.exporter.get_finished_spans()}
    assert set(spans) == {"EnergyContext", "load", "train", "save", "user-span"}
    parent = spans["EnergyContext"]
    assert parent.parent is None
    for name, joules in (("load", 1.0), ("train", 2.0), ("save", 4.0)):
        child = spans[name]
        assert child.parent is not None and child.parent.span_id == parent.context.span_id
        assert child.context.trace_id == parent.context.trace_id
        assert (child.attributes or {})["energy.package_0.joules"] == joules
    assert (parent.attributes or {})["energy.package_0.joules"] == 7.0
    assert spans["user-span"].parent.span_id == parent.context.span_id  # type: ignore[union-attr]
    assert spans["load"].end_time <= spans["train"].start_time <= spans["save"].start_time


def test_context_exception_marks_the_parent(shared_meter: CoreEnergyMeter, global_tracing: GlobalTracing) -> None:
    with pytest.raises(ZeroDivisionError):
        with EnergyContext(handler=EnergyHandler()):
            1 / 0  # noqa: B018
    spans = {span.name: span for span in global_tracing.exporter.get_finished_spans()}
    assert spans["EnergyContext"].status.status_code is StatusCode.ERROR
    assert spans["start"].status.status_code is StatusCode.UNSET


def test_no_double_measurement_with_instrument(
    powercap: FakePowercap, shared_meter: CoreEnergyMeter, global_tracing: GlobalTracing, monkeypatch: pytest.MonkeyPatch
) -> None:
    instrumentation = otel_joules.instrument(metrics_enabled=False)
    assert instrumentation.meter is shared_meter
    # Once the sampler has a forecast: before it, a span's close reads the counters once more to price
    # its CPU time (attribution's first_forecast), which is not the processor measuring twice.
    attributor = attributor_for(shared_meter)
    deadline = time.monotonic() + 10
    while len(attributor.history) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    reads = []
    original = shared_meter.snapshot

    def counting_snapshot():  # type: ignore[no-untyped-def]
        if threading.current_thread() is threading.main_thread():  # not the attribution sampler's reads
            reads.append(1)
        return original()

    monkeypatch.setattr(shared_meter, "snapshot", counting_snapshot)
    handler = EnergyHandler()

    @measure_energy(handler=handler)
    def work() -> None:
        powercap.zones["package_0"].advance_uj(123)

    try:
        work()
    finally:
        instrumentation.uninstrument()
    # Ours at start and end, plus the processor's opening read; its closing read and
    # second set of attributes are skipped (4 reads and overwritten values otherwise).
    assert len(reads) == 3
    (span,) = global_tracing.exporter.get_finished_spans()
    assert (span.attributes or {})["energy.package_0.joules"] == 123 / 1e6
    assert handler.traces[0][0].energy["package_0"] == 123.0


def test_energy_processor_hook_gets_our_measurement(
    powercap: FakePowercap, shared_meter: CoreEnergyMeter, global_tracing: GlobalTracing
) -> None:
    seen: list[tuple[str, EnergyMeasurement]] = []

    def add_carbon(span, measurement: EnergyMeasurement) -> None:  # type: ignore[no-untyped-def]
        seen.append((span.name, measurement))
        span.set_attribute("energy.co2eq.grams", measurement.total_joules * 2)

    global_tracing.provider.add_span_processor(otel_joules.EnergySpanProcessor(shared_meter, on_measurement=add_carbon))

    @measure_energy(handler=EnergyHandler(), domains=[RaplPackageDomain(0)])
    def work() -> None:
        powercap.zones["package_0"].advance_joules(3)

    work()
    assert [(name, m.joules_by_domain) for name, m in seen] == [("work", {"package_0": 3.0})]
    (span,) = global_tracing.exporter.get_finished_spans()
    assert (span.attributes or {})["energy.co2eq.grams"] == 6.0


def test_no_sdk_provider_no_spans(powercap: FakePowercap, shared_meter: CoreEnergyMeter) -> None:
    assert not hasattr(trace.get_tracer_provider(), "add_span_processor")
    handler = EnergyHandler()

    @measure_energy(handler=handler)
    def work() -> int:
        powercap.zones["package_0"].advance_uj(9)
        return 1

    assert work() == 1
    assert handler.traces[0][0].energy["package_0"] == 9.0
