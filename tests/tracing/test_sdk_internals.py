"""The SDK's private names otel_joules.tracing._sdk relies on, checked on the installed SDK.

CI runs this file on the lowest SDK the pin allows (.venv-min) and the newest: a release that
renames one fails here, loudly, rather than turning a fast path slow or a removal into a no-op.
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest
from opentelemetry import trace
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader, MetricExporter
from opentelemetry.sdk.metrics import Counter
from opentelemetry.sdk.metrics.view import SumAggregation
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

from otel_joules.tracing import _sdk


def _owner(path: str) -> type | object:
    module_path, _, name = path.rpartition(".")
    module = importlib.import_module("opentelemetry." + module_path) if module_path else None
    if module is None:
        return importlib.import_module("opentelemetry." + name)
    return getattr(module, name)


def _instance(owner: object) -> object:
    """A live instance of ``owner`` (instance attributes are set in ``__init__``)."""
    if owner is trace:
        return owner
    provider = TracerProvider()
    if owner.__name__ == "Span":  # type: ignore[union-attr]
        return provider.get_tracer("t").start_span("s")
    if owner.__name__ == "BoundedAttributes":  # type: ignore[union-attr]
        return BoundedAttributes(maxlen=None, immutable=False)
    if owner.__name__ == "TracerProvider":  # type: ignore[union-attr]
        return provider
    if owner.__name__ == "SynchronousMultiSpanProcessor":  # type: ignore[union-attr]
        return provider._active_span_processor
    if owner.__name__ == "MetricExporter":  # type: ignore[union-attr]
        return _Exporter(preferred_temporality={Counter: AggregationTemporality.DELTA})
    raise AssertionError(f"no instance for {owner}")


class _Exporter(MetricExporter):
    def export(self, metrics_data, timeout_millis=10_000, **kwargs):  # noqa: ANN001, ANN003, ANN201
        raise NotImplementedError

    def force_flush(self, timeout_millis=10_000):  # noqa: ANN001, ANN201
        return True

    def shutdown(self, timeout_millis=30_000, **kwargs):  # noqa: ANN001, ANN003, ANN201
        pass


@pytest.mark.parametrize(("owner", "name"), _sdk.PRIVATE_NAMES, ids=[f"{o}.{n}" for o, n in _sdk.PRIVATE_NAMES])
def test_every_private_name_we_touch_exists_on_this_sdk(owner: str, name: str) -> None:
    instance = _instance(_owner(owner))
    assert hasattr(instance, name), f"opentelemetry.{owner} has no {name} any more: update otel_joules.tracing._sdk"


def test_the_attribute_shortcut_is_taken_on_this_sdk_and_matches_set_attributes() -> None:
    provider = TracerProvider()
    fast = provider.get_tracer("t").start_span("fast", attributes={"user.key": "kept"})
    slow = provider.get_tracer("t").start_span("slow", attributes={"user.key": "kept"})
    calls = []
    fast.set_attributes = lambda attributes: calls.append(attributes)  # type: ignore[method-assign]
    _sdk.set_clean_attributes(fast, {"energy.joules": 1.5, "energy.source": "measured"})
    slow.set_attributes({"energy.joules": 1.5, "energy.source": "measured"})
    assert calls == []  # straight into the attribute dict, not through set_attributes
    assert dict(fast.attributes) == dict(slow.attributes)
    assert list(fast.attributes) == list(slow.attributes)


def test_an_ended_span_gets_nothing_as_with_set_attributes() -> None:
    span = TracerProvider().get_tracer("t").start_span("s")
    span.end()
    _sdk.set_clean_attributes(span, {"energy.joules": 1.5})
    assert "energy.joules" not in span.attributes


def test_a_processor_is_removed_from_the_provider() -> None:
    class Counting(SpanProcessor):
        def __init__(self) -> None:
            self.started = 0

        def on_start(self, span, parent_context=None):  # noqa: ANN001, ANN201
            self.started += 1

    provider = TracerProvider()
    processor = Counting()
    provider.add_span_processor(processor)
    provider.get_tracer("t").start_span("one").end()
    _sdk.remove_span_processor(provider, processor)
    provider.get_tracer("t").start_span("two").end()
    assert processor.started == 1


def test_the_global_setter_is_heard_and_unwrapped() -> None:
    # In a child: setting the API's global provider is once per process.
    code = """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from otel_joules.tracing import _sdk
original = trace._set_tracer_provider
heard = []
unwrap = _sdk.wrap_global_tracer_provider_setter(lambda: heard.append(trace.get_tracer_provider()))
provider = TracerProvider()
trace.set_tracer_provider(provider)
unwrap()
assert heard == [provider], heard
assert trace._set_tracer_provider is original
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_a_metric_exporters_preferences_are_read() -> None:
    sum_aggregation = SumAggregation()
    exporter = _Exporter(
        preferred_temporality={Counter: AggregationTemporality.DELTA}, preferred_aggregation={Counter: sum_aggregation}
    )
    temporality, aggregation = _sdk.metric_exporter_preferences(exporter)
    assert temporality[Counter] is AggregationTemporality.DELTA
    assert aggregation == {Counter: sum_aggregation}
    InMemoryMetricReader(preferred_temporality=temporality)  # accepted as a reader's preference
