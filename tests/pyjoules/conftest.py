"""Fixtures shared by the tests of the pyJoules-compatible package (tests/pyjoules/)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

import otel_joules
from otel_joules.meter.meter import EnergyMeter as CoreEnergyMeter

from tests.fakes.powercap import FakePowercap


@pytest.fixture
def shared_meter(powercap: FakePowercap) -> CoreEnergyMeter:
    """The process-wide meter on the one-socket fake tree, no GPU, no sampler (reads happen only when asked)."""
    return otel_joules.get_energy_meter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False)


@dataclass
class GlobalTracing:
    """The SDK provider installed as the global one, and what it exported."""

    provider: TracerProvider
    exporter: InMemorySpanExporter


@pytest.fixture
def global_tracing(monkeypatch: pytest.MonkeyPatch) -> Iterator[GlobalTracing]:
    """An SDK TracerProvider set as the *global* provider for one test, then the old globals back.

    The API lets a process set its global provider once; the test resets that guard the
    way opentelemetry-test-utils' ``reset_trace_globals`` does, and monkeypatch restores it.
    """
    monkeypatch.setattr(trace, "_TRACER_PROVIDER_SET_ONCE", Once())
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    yield GlobalTracing(provider, exporter)
    provider.shutdown()
