"""``instrument()`` before an SDK TracerProvider is set: one warning, then energy from the moment one is set.

The global provider can be set once per process, so each case runs in a child process.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry import trace

import otel_joules
from otel_joules.errors import ConfigurationError

from tests.fakes.powercap import FakePowercap, make_powercap
from tests.helpers.processes import clean_env

CHILD = """
import json, logging, sys
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import otel_joules

mode, zone = sys.argv[1], sys.argv[2]
api_setter = trace._set_tracer_provider
records = []
handler = logging.Handler()
handler.emit = records.append
logging.getLogger("otel_joules").addHandler(handler)

def consume(joules):
    with open(zone, "r+") as f:
        value = int(f.read())
        f.seek(0)
        f.truncate()
        f.write(str(value + int(joules * 1e6)))

early = trace.get_tracer("early")  # a ProxyTracer, made before any provider exists
handle = otel_joules.instrument()
out = {"waiting": handle.waiting, "same_handle": otel_joules.instrument() is handle}
if mode == "uninstrument":
    handle.uninstrument()
    out["waiting_after_uninstrument"] = handle.waiting
reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
exporter = InMemorySpanExporter()
if mode == "not_sdk":
    trace.set_tracer_provider(trace.NoOpTracerProvider())
else:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    with early.start_as_current_span("early-tracer"):
        consume(2.0)
    with trace.get_tracer("late").start_as_current_span("late-tracer"):
        consume(0.5)
    out["attached_to_the_global"] = handle.tracer_provider is provider
if mode == "attach":
    out["same_handle_after"] = otel_joules.instrument() is handle
out["active"] = handle.active
out["waiting_at_end"] = handle.waiting
out["api_setter_restored"] = trace._set_tracer_provider is api_setter
out["spans"] = {s.name: dict(s.attributes) for s in exporter.get_finished_spans()}
data = reader.get_metrics_data()
out["metrics"] = sorted({m.name for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}) if data else []
out["log"] = [[r.levelname, r.getMessage()] for r in records]
print(json.dumps(out))
"""

WAITING = ("otel-joules: no OpenTelemetry SDK TracerProvider is set yet; energy will be attached to spans once one is "
           "set with trace.set_tracer_provider(...)")


@pytest.fixture
def fake_host(tmp_path: Path) -> FakePowercap:
    return make_powercap(tmp_path / "sys", "one_socket")


def run_child(tmp_path: Path, pc: FakePowercap, mode: str) -> dict:
    env = clean_env(tmp_path, {"OTEL_JOULES_SYSFS_ROOT": pc.sysfs_root})
    result = subprocess.run([sys.executable, "-c", CHILD, mode, str(pc.zones["package_0"].path / "energy_uj")],
                            env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_instrument_first_warns_once_and_attaches_when_a_provider_is_set(tmp_path, fake_host):
    out = run_child(tmp_path, fake_host, "attach")
    assert out["waiting"] and out["same_handle"]
    assert out["log"] == [["WARNING", WAITING]]  # instrument() twice, one warning
    assert out["attached_to_the_global"] and out["same_handle_after"]
    assert out["active"] and not out["waiting_at_end"]
    # Spans from a tracer got before the provider existed, and after.
    assert out["spans"]["early-tracer"]["energy.joules"] == 2.0
    assert out["spans"]["late-tracer"]["energy.joules"] == 0.5
    assert out["spans"]["late-tracer"]["energy.source"] == "measured"
    # The meter provider was set by then: the energy metrics are on it.
    assert {"hw.energy", "energy.components", "process.energy"} <= set(out["metrics"])
    assert out["api_setter_restored"]


def test_uninstrument_before_a_provider_is_set_cancels_the_attachment(tmp_path, fake_host):
    out = run_child(tmp_path, fake_host, "uninstrument")
    assert out["waiting"] and not out["waiting_after_uninstrument"]
    assert not out["active"]
    assert set(out["spans"]) == {"early-tracer", "late-tracer"}
    assert not any(k.startswith("energy.") for span in out["spans"].values() for k in span)
    assert out["metrics"] == []
    assert out["api_setter_restored"]
    assert out["log"] == [["WARNING", WAITING]]


def test_a_global_provider_that_is_not_the_sdks_turns_the_waiting_handle_off_with_a_warning(tmp_path, fake_host):
    out = run_child(tmp_path, fake_host, "not_sdk")
    assert not out["active"] and not out["waiting_at_end"]
    assert out["api_setter_restored"]
    (waiting, off) = out["log"]
    assert waiting == ["WARNING", WAITING]
    assert off[0] == "WARNING"
    assert off[1].startswith("otel-joules: energy instrumentation is off: the global TracerProvider is a "
                             "opentelemetry.trace.NoOpTracerProvider, not an OpenTelemetry SDK TracerProvider")


@pytest.mark.parametrize("provider", [trace.NoOpTracerProvider(), trace.ProxyTracerProvider(), object()])
def test_an_explicit_provider_that_is_not_the_sdks_is_a_programming_error(provider):
    with pytest.raises(ConfigurationError, match=r"^tracer_provider= is a .*, not an OpenTelemetry SDK TracerProvider"):
        otel_joules.instrument(tracer_provider=provider)


def test_the_api_still_sets_the_global_where_we_hook():
    """_call_when_global_tracer_provider_set wraps the API's private ``trace._set_tracer_provider``: every public
    way of setting the global must still go through it, looked up by name, with the same parameters."""
    from opentelemetry.sdk import _configuration

    setter = trace._set_tracer_provider
    assert list(inspect.signature(setter).parameters) == ["tracer_provider", "log"]
    assert "_set_tracer_provider" in trace.set_tracer_provider.__code__.co_names
    assert "_set_tracer_provider" in trace.get_tracer_provider.__code__.co_names  # OTEL_PYTHON_TRACER_PROVIDER
    assert _configuration.set_tracer_provider is trace.set_tracer_provider  # zero-code's auto-configuration
    assert isinstance(trace.ProxyTracerProvider(), trace.TracerProvider)
