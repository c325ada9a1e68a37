"""Shared fixtures: fake powercap trees, SDK tracer providers with in-memory exporters."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_joules.config import forget_reported_values
from otel_joules.meter.notice import forget_announcement
from otel_joules.meter.registry import default_registry

from tests.fakes.powercap import FakePowercap, make_powercap


@pytest.fixture
def powercap(tmp_path: Path) -> FakePowercap:
    """A one-socket Intel tree: package_0, core_0, uncore_0, dram_0."""
    return make_powercap(tmp_path / "sys", "one_socket")


@pytest.fixture
def span_exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracer_provider(span_exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    yield provider
    provider.shutdown()


@pytest.fixture(autouse=True)
def _fresh_shared_meter(monkeypatch: pytest.MonkeyPatch):
    """Every test starts without a shared meter and with no GPU library on the path."""
    default_registry().close()
    forget_reported_values()  # each bad setting is said once per process: once per test here
    forget_announcement()  # so is the fallback to estimates
    yield
    default_registry().close()
