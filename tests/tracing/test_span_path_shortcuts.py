"""The span path's shortcuts give exactly what the long way gives: attributes set straight into the
span, RAPL counters read inline, device reads reused for a millisecond."""

from __future__ import annotations

import threading
import time

import pytest
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests.fakes.powercap import make_powercap

from otel_joules import EnergyMeter, EnergySpanProcessor
from otel_joules.meter.channels import DEVICE_FRESH_S
from otel_joules.sensors.base import Channel, Domain
from otel_joules.semconv import KIND_GPU


def _spans(tmp_path, limits: SpanLimits | None = None, *, before: dict | None = None):
    powercap = make_powercap(tmp_path / "sys", "four_domains")
    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False)
    provider = TracerProvider(span_limits=limits) if limits is not None else TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.add_span_processor(EnergySpanProcessor(meter, attribution=False))
    with provider.get_tracer("t").start_as_current_span("work") as span:
        for key, value in (before or {}).items():
            span.set_attribute(key, value)
        powercap.zones["package_0"].advance_joules(5.0)
    meter.close()
    (finished,) = exporter.get_finished_spans()
    return finished


def test_energy_attributes_land_on_the_span_like_set_attributes(tmp_path) -> None:
    span = _spans(tmp_path, before={"user.key": "kept"})
    assert span.attributes["energy.package_0.joules"] == 5.0
    assert span.attributes["energy.source"] == "measured"
    # The user's attribute stays first, ours follow in the processor's order, as set_attributes would leave them.
    keys = list(span.attributes)
    assert keys[0] == "user.key" and keys[1:4] == ["energy.joules", "energy.watts", "energy.source"]
    assert span.dropped_attributes == 0


def test_a_value_length_limit_is_applied_as_the_sdk_does(tmp_path) -> None:
    span = _spans(tmp_path, SpanLimits(max_span_attribute_length=3))
    assert span.attributes["energy.source"] == "mea"  # the SDK's truncation: the shortcut is not taken
    assert span.attributes["energy.package_0.joules"] == 5.0


def test_an_attribute_count_limit_drops_the_oldest_as_the_sdk_does(tmp_path) -> None:
    span = _spans(tmp_path, SpanLimits(max_span_attributes=4), before={"user.key": "first"})
    assert len(span.attributes) == 4
    assert "user.key" not in span.attributes  # the oldest went first
    assert span.dropped_attributes > 0


def test_a_key_the_user_set_already_is_replaced_and_moves_last_as_the_sdk_does(tmp_path) -> None:
    span = _spans(tmp_path, before={"energy.joules": -1.0, "user.key": "x"})
    assert span.attributes["energy.joules"] == 5.0
    assert list(span.attributes)[0] == "user.key"  # set_attributes deletes and re-inserts an existing key


class _CountingDevice(Channel):
    """A channel read off the span path (like NVML) that counts its reads and can fail."""

    def __init__(self) -> None:
        super().__init__(Domain("nvidia_gpu_0", KIND_GPU, "test GPU", "GPU-test", update_period_s=0.1))
        self.reads = 0
        self.fail = False
        self.value_uj = 0
        self.lock = threading.Lock()

    @property
    def may_block(self) -> bool:
        return True

    def read_uj(self) -> int:
        with self.lock:
            self.reads += 1
            if self.fail:
                raise OSError("device says no")
            return self.value_uj


def test_a_device_read_under_a_millisecond_old_is_reused_and_an_older_one_is_not() -> None:
    device = _CountingDevice()
    meter = EnergyMeter(channels=[device], sample=False)
    try:
        meter.snapshot()
        reads = device.reads
        device.value_uj = 7_000_000
        deadline = time.monotonic() + DEVICE_FRESH_S / 2
        snapshots = 0
        while time.monotonic() < deadline:
            meter.snapshot()
            snapshots += 1
        # Reused within the window (a loaded machine may let one more read through)...
        assert device.reads - reads <= 1 < snapshots
        # ... and after it a snapshot takes the reader's newest value: the new one within one read
        # (half the counter's stated 100 ms period), not flagged stale.
        time.sleep(device.domain.update_period_s)
        snapshot = meter.snapshot()
        assert snapshot.joules == (7.0,) and snapshot.stale == ()
    finally:
        meter.close()


def test_a_failed_device_read_is_never_reused() -> None:
    device = _CountingDevice()
    meter = EnergyMeter(channels=[device], sample=False)
    try:
        meter.snapshot()
        device.fail = True
        # The reader reads again within half the counter's period; a snapshot after that sees the failure.
        time.sleep(device.domain.update_period_s)
        assert meter.snapshot().joules == (None,)  # the failure is seen, not hidden by the last good value
        reads = device.reads
        time.sleep(0.2)  # past the first retry delay
        device.fail = False
        device.value_uj = 3_000_000
        assert meter.snapshot().joules == (3.0,)
        assert device.reads > reads
    finally:
        meter.close()


@pytest.mark.parametrize("content", [b"", b"garbage\n", b"99999999999999999999\n"])
def test_an_odd_counter_file_goes_to_the_channels_own_read_and_its_error(tmp_path, content, caplog) -> None:
    powercap = make_powercap(tmp_path / "sys", "four_domains")
    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False)
    try:
        path = powercap.zones["package_0"].path / "energy_uj"
        path.write_bytes(content)
        snapshot = meter.snapshot()
        assert snapshot.joules[meter.domain_index("package_0")] is None
        path.write_text("1000000\n")
        time.sleep(0.1)
        assert meter.snapshot().joules[meter.domain_index("package_0")] is not None
    finally:
        meter.close()


def test_a_callers_measurement_lands_on_the_span_whether_or_not_the_processor_still_measures(tmp_path) -> None:
    # end_span_with_measurement: the caller's measurement of 5 J (the counter advanced by exactly that) is
    # on the span through an enabled processor, through one switched off after the span started, and on a
    # span no processor wraps; the caller's own attributes come last in each case.
    from otel_joules.tracing import end_span_with_measurement

    powercap = make_powercap(tmp_path / "sys", "four_domains")
    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    processor = EnergySpanProcessor(meter, attribution=False)
    provider.add_span_processor(processor)
    bare = TracerProvider()
    bare.add_span_processor(SimpleSpanProcessor(exporter))
    for name, tracer, switch_off in (
        ("enabled", provider.get_tracer("t"), False),
        ("switched off", provider.get_tracer("t"), True),
        ("no processor", bare.get_tracer("t"), False),
    ):
        processor.enabled = True
        span = tracer.start_span(name)
        start = meter.snapshot()
        powercap.zones["package_0"].advance_joules(5.0)
        measurement = meter.measure(start, meter.snapshot())
        processor.enabled = not switch_off
        end_span_with_measurement(span, measurement, attributes={"energy.source": "caller's"})
    meter.close()
    for finished in exporter.get_finished_spans():
        assert finished.attributes["energy.package_0.joules"] == 5.0, finished.name
        assert finished.attributes["energy.joules"] == 5.0, finished.name
        assert finished.attributes["energy.source"] == "caller's", finished.name
    assert len(exporter.get_finished_spans()) == 3
