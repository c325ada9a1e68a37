"""span_record(): the one place spans become the fields every exporter writes."""

from __future__ import annotations

import math

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_joules.exporters import CORE_FIELDS, SpanRecord, span_record
from otel_joules.exporters.records import iso_utc_from_unix_nano, json_value
from otel_joules.semconv import ENERGY_CLOCK_STEP_S

from tests.helpers.known_spans import (
    CHILD_NAME,
    CHILD_SPAN_ID,
    EXPORTED_RESOURCE,
    ROOT_SPAN_ID,
    T0_NS,
    TRACE_ID,
    RUN_NAME,
    emit_run,
    emit_train_and_epoch,
    make_provider,
)


@pytest.mark.parametrize(
    ("unix_nano", "iso"),
    [
        (0, "1970-01-01T00:00:00.000000000Z"),
        (1, "1970-01-01T00:00:00.000000001Z"),
        (T0_NS, "2023-11-14T22:13:20.000000000Z"),
        (1_700_000_000_123_456_789, "2023-11-14T22:13:20.123456789Z"),
        (951_782_400_000_000_000, "2000-02-29T00:00:00.000000000Z"),
        (-1, "1969-12-31T23:59:59.999999999Z"),
    ],
)
def test_iso_utc_keeps_nanoseconds(unix_nano: int, iso: str) -> None:
    assert iso_utc_from_unix_nano(unix_nano) == iso


def test_json_value_makes_every_value_strict_json() -> None:
    assert json_value(float("nan")) == "NaN"
    assert json_value(float("inf")) == "Infinity"
    assert json_value(float("-inf")) == "-Infinity"
    assert json_value((1, 2.5, "x", True)) == [1, 2.5, "x", True]
    assert json_value(1.5) == 1.5 and json_value(3) == 3 and json_value(False) is False


def _records(service_name: str | None = "svc") -> list[SpanRecord]:
    memory = InMemorySpanExporter()
    provider = make_provider(SimpleSpanProcessor(memory), service_name=service_name)
    emit_train_and_epoch(provider)
    provider.shutdown()
    return [span_record(span) for span in memory.get_finished_spans()]


def test_record_fields_of_a_root_and_a_child_span() -> None:
    child, root = _records()
    assert root == SpanRecord(
        name="train",
        trace_id=TRACE_ID,
        span_id=ROOT_SPAN_ID,
        parent_span_id=None,
        start_time_unix_nano=T0_NS,
        end_time_unix_nano=T0_NS + 1_500_000_000,
        service_name="svc",
        attributes={
            "energy.co2eq.grams": 0.0015451388888888889,
            "energy.core_0.joules": 7.25,
            "energy.dram_0.joules": 2.5,
            "energy.joules": 12.5,
            "energy.package_0.joules": 10.0,
            "energy.source": "measured",
            "energy.watts": 8.333333333333334,
        },
        resource=EXPORTED_RESOURCE,
    )
    assert root.duration_s == 1.5
    assert root.start_time == "2023-11-14T22:13:20.000000000Z"
    assert root.end_time == "2023-11-14T22:13:21.500000000Z"
    assert list(root.attributes) == sorted(root.attributes)  # sorted keys, non-energy ones gone
    assert child.name == CHILD_NAME
    assert child.span_id == CHILD_SPAN_ID and child.parent_span_id == ROOT_SPAN_ID
    assert child.duration_s == 0.01
    assert child.attributes["energy.domains"] == ("nvidia_gpu_0",)
    assert child.attributes["energy.below_resolution"] is True


def test_missing_service_name_is_none_not_a_guess() -> None:
    child, root = _records(service_name=None)
    assert root.service_name is None and child.service_name is None


def test_core_fields_order_is_the_documented_one() -> None:
    _, root = _records()
    assert tuple(root.core_fields()) == CORE_FIELDS
    assert list(root.to_json_dict()) == [*CORE_FIELDS, "attributes", "resource"]
    # The resource's identities are kept, its command line (secrets) is not.
    assert root.resource == EXPORTED_RESOURCE


def test_missing_times_give_none_not_zero() -> None:
    record = SpanRecord("x", TRACE_ID, ROOT_SPAN_ID, None, T0_NS, None, None, {"energy.joules": math.pi})
    assert record.end_time is None and record.duration_s is None
    assert record.to_json_dict()["end_time_unix_nano"] is None


def test_carbon_attributes_are_kept_with_the_energy_ones_and_nothing_else() -> None:
    memory = InMemorySpanExporter()
    provider = make_provider(SimpleSpanProcessor(memory))
    emit_run(provider)
    tracer = provider.get_tracer("t")
    # Look-alikes of the two prefixes without their dot are not ours: not exported.
    tracer.start_span("x", start_time=T0_NS, attributes={"carbonara.grams": 1.0, "energyx": 2.0}).end(end_time=T0_NS)
    provider.shutdown()
    run, lookalike = [span_record(span) for span in memory.get_finished_spans()]
    assert run.name == RUN_NAME
    assert dict(run.attributes) == {
        "carbon.intensity.gco2eq_per_kwh": 300.0,
        "carbon.intensity.source": "explicit",
        "carbon.pue": 1.2,
        "energy.co2eq.grams": 0.00035,
        "energy.core_0.joules": 0.25,
        "energy.dram_0.joules": 0.5,
        "energy.joules": 3.5,
        "energy.package_0.joules": 3.0,
        "energy.source": "measured",
        "energy.watts": 1.75,
    }
    assert list(run.attributes) == sorted(run.attributes)  # process.* gone, carbon.* sorted first
    assert dict(lookalike.attributes) == {}


def test_duration_is_the_measured_one_and_never_negative() -> None:
    """A wall-clock step during a span puts its times off by the step (energy.clock_step_s says by how much):
    ``duration_s`` is the measured duration; a record of an older writer never has a negative one."""
    start = 1_700_000_000_000_000_000
    stepped_back = SpanRecord("s", TRACE_ID, ROOT_SPAN_ID, None, start, start - 29_400_000_000, None, {ENERGY_CLOCK_STEP_S: -30.0})
    assert stepped_back.duration_s == pytest.approx(0.6, abs=1e-9)
    stepped_on = SpanRecord("s", TRACE_ID, ROOT_SPAN_ID, None, start, start + 3_600_600_000_000, None, {ENERGY_CLOCK_STEP_S: 3600.0})
    assert stepped_on.duration_s == pytest.approx(0.6, abs=1e-6)
    unflagged = SpanRecord("s", TRACE_ID, ROOT_SPAN_ID, None, start, start - 29_400_000_000, None, {})
    assert unflagged.duration_s == 0.0
