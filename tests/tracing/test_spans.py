"""Energy on spans: every processor and exporter sees it, nested and threaded spans, failures."""

from __future__ import annotations

import gc
import logging
import os
import threading
import time

import pytest
from opentelemetry.sdk.trace import TracerProvider

import otel_joules
from otel_joules import ConfigurationError, EnergyMeter, EnergySpanProcessor
from otel_joules.attribution import SpanAttribution, attributor_for
from otel_joules.attribution.shares import measured_kinds
from otel_joules.meter.meter import EnergySnapshot
from otel_joules.meter.interval import START_LAG_TOLERANCE_NS, Interval
from otel_joules.tracing.attributes import MeterAttributes, _measurement_part, _share_part, span_attributes

from tests.fakes.powercap import make_powercap
from tests.fakes.procfs import FakeProcfs
from tests.helpers.domains import FixedChannel, five_domains


@pytest.fixture
def meter(powercap) -> EnergyMeter:
    m = EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False)
    yield m
    m.close()


def test_instrument_adds_energy_seen_by_a_processor_registered_before(tracer_provider, span_exporter, powercap, meter) -> None:
    handle = otel_joules.instrument(tracer_provider, meter=meter)
    tracer = tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("work"):
        powercap.zones["package_0"].advance_joules(10.0)
        powercap.zones["core_0"].advance_joules(7.0)
        powercap.zones["dram_0"].advance_joules(2.0)
        time.sleep(0.2)  # long enough that the snapshots' own cost is negligible in watts
    (span,) = span_exporter.get_finished_spans()
    a = span.attributes
    assert a["energy.joules"] == 12.0
    assert a["energy.package_0.joules"] == 10.0
    assert a["energy.core_0.joules"] == 7.0
    assert a["energy.uncore_0.joules"] == 0.0
    assert a["energy.dram_0.joules"] == 2.0
    assert a["energy.source"] == "measured"
    # The domains that add to energy.joules, with their kinds: a reader needs no rules about domain ids.
    assert a["energy.domain_kinds"] == ("package_0:cpu", "dram_0:memory")
    duration_s = (span.end_time - span.start_time) / 1e9
    assert a["energy.watts"] == pytest.approx(12.0 / duration_s, rel=0.05)
    handle.uninstrument()


def test_instrument_is_idempotent_and_uninstrument_stops(tracer_provider, span_exporter, powercap, meter) -> None:
    first = otel_joules.instrument(tracer_provider, meter=meter)
    assert otel_joules.instrument(tracer_provider, meter=meter) is first
    tracer = tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("measured"):
        powercap.zones["package_0"].advance_joules(1.0)
    first.uninstrument()
    first.uninstrument()
    with tracer.start_as_current_span("not measured"):
        powercap.zones["package_0"].advance_joules(1.0)
    measured, plain = span_exporter.get_finished_spans()
    assert measured.attributes["energy.package_0.joules"] == 1.0  # one processor, not two
    assert not any(k.startswith("energy.") for k in plain.attributes)
    again = otel_joules.instrument(tracer_provider, meter=meter)
    assert again is not first and again.active
    again.uninstrument()


def test_otel_sdk_disabled_measures_nothing(monkeypatch, tracer_provider, span_exporter, meter) -> None:
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    handle = otel_joules.instrument(tracer_provider, meter=meter)
    assert not handle.active
    with tracer_provider.get_tracer("t").start_as_current_span("x"):
        pass
    assert "energy.joules" not in span_exporter.get_finished_spans()[0].attributes


def test_no_sdk_provider_is_a_clear_error() -> None:
    from opentelemetry.trace import NoOpTracerProvider

    with pytest.raises(ConfigurationError, match="TracerProvider"):
        otel_joules.instrument(NoOpTracerProvider())


def test_nested_spans_each_get_their_own_interval(tracer_provider, span_exporter, powercap, meter) -> None:
    tracer_provider.add_span_processor(EnergySpanProcessor(meter))
    tracer = tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("training"):
        powercap.zones["package_0"].advance_joules(1.0)
        for epoch in range(3):
            with tracer.start_as_current_span(f"epoch {epoch}"):
                powercap.zones["package_0"].advance_joules(10.0 * (epoch + 1))
    spans = {s.name: s.attributes["energy.package_0.joules"] for s in span_exporter.get_finished_spans()}
    assert spans == {"epoch 0": 10.0, "epoch 1": 20.0, "epoch 2": 30.0, "training": 61.0}


def test_spans_in_many_threads_get_their_own_interval(tracer_provider, span_exporter, powercap, meter) -> None:
    tracer_provider.add_span_processor(EnergySpanProcessor(meter))
    tracer = tracer_provider.get_tracer("test")
    barrier = threading.Barrier(4)
    opened = threading.Event()
    spent = threading.Event()

    def worker(i: int) -> None:
        barrier.wait()
        with tracer.start_as_current_span(f"t{i}"):
            if i == 0:
                opened.set()
            spent.wait(5)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    opened.wait(5)
    time.sleep(0.1)  # all four spans are open
    powercap.zones["package_0"].advance_joules(5.0)
    spent.set()
    for t in threads:
        t.join()
    values = [s.attributes["energy.package_0.joules"] for s in span_exporter.get_finished_spans()]
    assert values == [5.0] * 4  # machine-level: overlapping spans each see the machine's energy


def test_span_shorter_than_counter_update_is_flagged_not_zeroed(tracer_provider, span_exporter, tmp_path) -> None:
    meter = EnergyMeter(sysfs_root=str(tmp_path), gpus=[], sample=False)  # estimator: 10 ms CPU-time ticks
    tracer_provider.add_span_processor(EnergySpanProcessor(meter))
    with tracer_provider.get_tracer("t").start_as_current_span("tiny"):
        pass
    a = span_exporter.get_finished_spans()[0].attributes
    assert a["energy.below_resolution"] is True
    assert isinstance(a["energy.joules"], float)
    assert a["energy.source"] == "estimate"
    assert a["energy.cpu_estimate.method"] == "estimate"


def test_failing_counter_never_breaks_the_span(tracer_provider, span_exporter, powercap, meter, caplog) -> None:
    tracer_provider.add_span_processor(EnergySpanProcessor(meter))
    tracer = tracer_provider.get_tracer("t")
    with caplog.at_level(logging.WARNING, logger="otel_joules"):
        with tracer.start_as_current_span("during failure"):
            powercap.zones["package_0"].advance_joules(3.0)
            powercap.zones["dram_0"].write_raw("")  # the zone vanished
        with tracer.start_as_current_span("after"):
            pass
        # Said at the first failed read, with what spans carry meanwhile.
        (retrying,) = [r.getMessage() for r in caplog.records if "dram_0" in r.getMessage()]
        assert "retrying" in retrying and "energy.dram_0.missing" in retrying
        powercap.zones["dram_0"].advance_joules(0.5)  # back
        time.sleep(0.06)  # past the first retry's back-off
        with tracer.start_as_current_span("back"):
            powercap.zones["dram_0"].advance_joules(0.25)
    during, after, back = span_exporter.get_finished_spans()
    assert during.attributes["energy.package_0.joules"] == 3.0
    assert "energy.dram_0.joules" not in during.attributes
    assert "energy.dram_0.joules" not in after.attributes
    assert back.attributes["energy.dram_0.joules"] == 0.25
    for left_out in (during, after):
        assert left_out.attributes["energy.dram_0.missing"] is True
        assert left_out.attributes["energy.source"] == "partial"
    assert "energy.dram_0.missing" not in back.attributes and back.attributes["energy.source"] == "measured"
    _, message = [r.getMessage() for r in caplog.records if "dram_0" in r.getMessage()]
    assert "reads again" in message


def test_ending_a_span_twice_keeps_the_first_values(tracer_provider, span_exporter, powercap, meter) -> None:
    tracer_provider.add_span_processor(EnergySpanProcessor(meter))
    span = tracer_provider.get_tracer("t").start_span("x")
    powercap.zones["package_0"].advance_joules(1.0)
    span.end()
    powercap.zones["package_0"].advance_joules(1.0)
    span.end()
    (finished,) = span_exporter.get_finished_spans()
    assert finished.attributes["energy.package_0.joules"] == 1.0


def test_ended_and_abandoned_spans_leave_nothing_behind(powercap, meter) -> None:
    provider = TracerProvider()
    provider.add_span_processor(EnergySpanProcessor(meter))
    tracer = provider.get_tracer("t")
    gc.collect()
    gc.disable()  # collected by reference counting alone: no span -> wrapper -> span cycle
    try:
        for _ in range(200):
            tracer.start_span("abandoned")  # never ended
            with tracer.start_as_current_span("ended"):
                pass
        from opentelemetry.sdk.trace import Span

        live = [o for o in gc.get_objects() if isinstance(o, Span)]
    finally:
        gc.enable()
    assert live == []


def test_default_shared_meter_with_sysfs_root_keyword(tracer_provider, span_exporter, tmp_path) -> None:
    pc = make_powercap(tmp_path, "amd")
    handle = otel_joules.instrument(tracer_provider, sysfs_root=pc.sysfs_root, gpus=[])
    with tracer_provider.get_tracer("t").start_as_current_span("x"):
        pc.zones["package_0"].advance_joules(2.0)
    assert span_exporter.get_finished_spans()[0].attributes["energy.joules"] == 2.0
    assert handle.meter is otel_joules.get_energy_meter()
    handle.uninstrument()


@pytest.mark.parametrize("variables", [{}, {"LOCAL_RANK": "1"}, {"OTEL_JOULES_HOST_DOMAINS": "never"}])
def test_every_process_measures_the_host_whatever_its_rank(
    monkeypatch, tmp_path, tracer_provider, span_exporter, powercap, variables
) -> None:
    """No election any more: a non-zero rank or the old variable changes nothing on spans."""
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    handle = otel_joules.instrument(tracer_provider, sysfs_root=powercap.sysfs_root, gpus=[])
    with tracer_provider.get_tracer("t").start_as_current_span("x"):
        powercap.zones["package_0"].advance_joules(1.0)
    attributes = span_exporter.get_finished_spans()[0].attributes
    assert attributes["energy.package_0.joules"] == 1.0
    assert "energy.attributed.joules" in attributes
    handle.uninstrument()


def test_instrument_refuses_a_keyword_it_does_not_take_and_names_meter(tracer_provider, meter) -> None:
    with pytest.raises(ConfigurationError, match="no option energy_meter: give a meter of your own as meter="):
        otel_joules.instrument(tracer_provider, energy_meter=meter, metrics_enabled=False)
    handle = otel_joules.instrument(tracer_provider, meter=meter, metrics_enabled=False)
    assert handle.meter is meter
    handle.uninstrument()


def test_instrument_without_attribution_keeps_energy_only(tracer_provider, span_exporter, powercap) -> None:
    handle = otel_joules.instrument(tracer_provider, sysfs_root=powercap.sysfs_root, gpus=[], attribution=False)
    with tracer_provider.get_tracer("t").start_as_current_span("x"):
        powercap.zones["package_0"].advance_joules(1.0)
    attributes = span_exporter.get_finished_spans()[0].attributes
    assert attributes["energy.joules"] == 1.0
    assert not any(key.startswith("energy.attribut") for key in attributes)
    handle.uninstrument()



def test_planned_attributes_equal_those_of_a_measurement() -> None:
    """span_attributes' two routes agree: between two snapshots (MeterAttributes) and through meter.measure(...):
    same keys in the same order, same floats, for counters, integrated power, estimates, domains outside the
    total, a failed domain, stale domains and intervals below a counter's resolution."""
    domains = five_domains()
    meter = EnergyMeter(channels=[FixedChannel(d) for d in domains], sample=False)
    plan = MeterAttributes(meter, measured_kinds(meter.domains))
    cases = [
        ((0, (1.0, 2.0, 3.0, 4.0, 5.0), ()), (2_000_000_000, (1.5, 2.25, 3.125, 9.0, 5.5), ())),
        ((0, (1.0, 2.0, 3.0, 4.0, 5.0), ()), (50_000_000, (1.5, 2.25, 3.125, 9.0, 5.5), (3,))),  # below 0.1 s
        ((0, (1.0, None, 3.0, 4.0, 5.0), (4, 3)), (5_000, (1.5, 2.5, 3.0, 4.0, 5.0), (0,))),
        ((7, (1.0, 2.0, 3.0, None, None), ()), (7, (1.5, 2.5, 3.5, 1.0, None), (3,))),  # zero length, stale None
        ((0, (1.0, 2.0, 3.0, 4.0, 5.0), ()), (1_000_000, (1.0, 2.0, 3.0, 4.0, 5.75), ())),  # only an estimate moved
        ((0, (None,) * 5, ()), (1_000, (None,) * 5, ())),
    ]
    for start, end in cases:
        a, b = EnergySnapshot(*start), EnergySnapshot(*end)
        measurement = meter.measure(a, b)
        expected = span_attributes(Interval.of_measurement(measurement, meter), None)
        got = plan.span_attributes(a, b, None)
        assert got == expected
        assert got is None or list(got) == list(expected)  # type: ignore[arg-type]
    # Domains outside the total (core_0) are not listed; each listed one carries its kind.
    assert plan.domain_kinds == ("package_0:cpu", "dram_0:memory", "nvidia_gpu_0:gpu", "cpu_estimate:cpu")
    attribution = SpanAttribution(0.25, 0.125, 2.5, 0.5)
    a, b = EnergySnapshot(*cases[0][0]), EnergySnapshot(*cases[0][1])
    for kinds in ((), ("cpu",), ("cpu", "memory"), ("cpu", "memory", "gpu"), ("memory", "gpu")):
        both = MeterAttributes(meter, kinds).span_attributes(a, b, attribution)
        # The reference's pieces, for kinds other than the meter's own.
        expected = _share_part(attribution, kinds, _measurement_part(meter.measure(a, b)))
        assert both == expected  # the estimate band comes last, after the share
    meter.close()


def test_an_estimated_span_carries_its_band_and_its_models(tracer_provider, span_exporter, powercap) -> None:
    """A measured package beside estimated CPU and memory: the band counts the package as read and each estimate
    at its model's ends; the models are named. On both span paths (the autouse fixture)."""
    from otel_joules.config import Settings
    from otel_joules.sensors.cpu_power import CpuPowerModel
    from otel_joules.sensors.estimator import CpuTimeEstimateChannel, MemoryEstimateChannel
    from otel_joules.sensors.rapl import discover

    busy, clock = [100.0], [10.0]
    cascade_lake = CpuPowerModel("ccf:cascade_lake", "a Cascade Lake VM", 0.64, 3.97, low_factor=0.2, high_factor=2.15)
    channels = discover(Settings(sysfs_root=powercap.sysfs_root)).channels[:1] + [
        CpuTimeEstimateChannel(cascade_lake, 2, busy_seconds=lambda: busy[0], clock=lambda: clock[0]),
        MemoryEstimateChannel(16 * 0.375, clock=lambda: clock[0], watts_per_gb=0.375),
    ]
    meter = EnergyMeter(channels=channels, sample=False)
    tracer_provider.add_span_processor(EnergySpanProcessor(meter))
    with tracer_provider.get_tracer("t").start_as_current_span("work"):
        powercap.zones["package_0"].advance_joules(4.0)
        busy[0] += 2.0
        clock[0] += 1.0
    meter.close()
    a = span_exporter.get_finished_spans()[0].attributes
    cpu = 2 * 0.64 * 1.0 + 2.0 * (3.97 - 0.64)  # 7.94 J: two vCPUs idle for 1 s, both busy for it
    memory = 16 * 0.375 * 1.0
    assert a["energy.cpu_estimate.joules"] == pytest.approx(cpu)
    assert a["energy.source"] == "mixed"
    assert a["energy.joules"] == pytest.approx(4.0 + cpu + memory)
    assert a["energy.estimate.low.joules"] == pytest.approx(4.0 + cpu * 0.2 + memory * 0.5)
    assert a["energy.estimate.high.joules"] == pytest.approx(4.0 + cpu * 2.15 + memory * 1.5)
    assert a["energy.estimate.source"] == "ccf:cascade_lake memory:0.375_w_per_gb"


def test_a_measured_span_carries_no_band(tracer_provider, span_exporter, powercap, meter) -> None:
    tracer_provider.add_span_processor(EnergySpanProcessor(meter))
    with tracer_provider.get_tracer("t").start_as_current_span("work"):
        powercap.zones["package_0"].advance_joules(4.0)
    a = span_exporter.get_finished_spans()[0].attributes
    assert a["energy.source"] == "measured"
    assert not {"energy.estimate.low.joules", "energy.estimate.high.joules", "energy.estimate.source"} & set(a)


@pytest.mark.parametrize("attribution", [True, False], ids=["attributed", "attribution_off"])
def test_a_span_stated_an_hour_ago_has_no_energy_with_or_without_attribution(
    tracer_provider, span_exporter, tmp_path, attribution
) -> None:
    """The stated interval, not the joules spent between start() and end(), is the span's: an hour ago is
    older than the meter's history whether or not shares are attributed."""
    powercap = make_powercap(tmp_path / "sys", "one_socket")
    proc = FakeProcfs(tmp_path / "proc")
    proc.add_thread(os.getpid(), threading.get_native_id(), 0.0)
    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, procfs_root=proc.procfs_root, gpus=[], sample=False)
    tracer_provider.add_span_processor(EnergySpanProcessor(meter, attribution=attribution))
    span = tracer_provider.get_tracer("t").start_span("ancient", start_time=time.time_ns() - 3600 * 10**9)
    powercap.zones["package_0"].advance_joules(5.0)  # spent between start() and end(): not the stated interval
    span.end()
    attributes = span_exporter.get_finished_spans()[0].attributes
    attributor_for(meter).close()
    meter.close()
    assert "energy.joules" not in attributes
    assert "history" in attributes["energy.unavailable_reason"]
    assert ("energy.attributed.joules" in attributes) is attribution


def test_a_start_stamped_just_before_its_processor_ran_is_that_start_and_one_older_is_explicit(
    tracer_provider, span_exporter, tmp_path
) -> None:
    """The SDK stamps a span's start, then runs its processors: a thread that waited for the GIL in between opens
    it tens of ms late. Where no history holds such a start (this meter samples nothing), the span is measured from
    its opening instead of losing all its energy; a start stated 200 ms ago is explicit and, unknown, has none."""
    powercap = make_powercap(tmp_path / "sys", "one_socket")
    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False)
    tracer_provider.add_span_processor(EnergySpanProcessor(meter, attribution=False))
    tracer = tracer_provider.get_tracer("t")
    for name, lag_ns in (("late", START_LAG_TOLERANCE_NS - 10_000_000), ("stated", 4 * START_LAG_TOLERANCE_NS)):
        span = tracer.start_span(name, start_time=time.time_ns() - lag_ns)
        powercap.zones["package_0"].advance_joules(5.0)
        span.end()
    meter.close()
    spans = {s.name: s.attributes for s in span_exporter.get_finished_spans()}
    assert spans["late"]["energy.package_0.joules"] == 5.0 and "energy.unavailable_reason" not in spans["late"]
    assert "energy.joules" not in spans["stated"] and "history" in spans["stated"]["energy.unavailable_reason"]
