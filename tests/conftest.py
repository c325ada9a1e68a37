"""Shared fixtures: fake powercap trees, SDK tracer providers with in-memory exporters."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_joules.config import OTEL_JOULES_AGENT_SOCKET, OTEL_JOULES_SYSFS_ROOT, forget_reported_values
from otel_joules.meter.notice import forget_announcement
from otel_joules.meter.registry import default_registry

from tests.fakes.powercap import FakePowercap, make_powercap


#: The settings that point the library at this host's energy counters and agent. Every test gets them
#: pointed into a folder of its session instead (child environments built by tests.helpers keep them).
HOST_ISOLATION_VARIABLES = (OTEL_JOULES_SYSFS_ROOT, OTEL_JOULES_AGENT_SOCKET)


@pytest.fixture(scope="session")
def isolated_host(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An empty sysfs root and an agent socket path nothing listens on, for the whole session.

    Under /run the default socket would be this host's real agent, and /sys its real counters: a test
    that does not ask for a tree of its own must see neither (no measured energy, no agent).
    """
    root = tmp_path_factory.mktemp("isolated-host")
    (root / "sys").mkdir()
    (root / "run").mkdir()
    return {OTEL_JOULES_SYSFS_ROOT: str(root / "sys"), OTEL_JOULES_AGENT_SOCKET: str(root / "run" / "agent.sock")}


@pytest.fixture(scope="session", autouse=True)
def _no_host_counters_or_agent_in_wider_fixtures(isolated_host: dict[str, str]) -> Iterator[None]:
    """The same isolation for the whole session, set before any module or session fixture starts processes (the
    end-to-end tier's apps): those run before a test's own fixtures, so the per-test setting below comes too late."""
    saved = {name: os.environ.get(name) for name in isolated_host}
    os.environ.update(isolated_host)
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(autouse=True)
def _no_host_counters_or_agent(monkeypatch: pytest.MonkeyPatch, isolated_host: dict[str, str]) -> None:
    """Every test reads the isolated sysfs root and socket through the library's own settings (config.py).

    Set unconditionally, so a runner's own values do not leak in either; a test that wants other ones sets
    them itself (monkeypatch.setenv, a keyword, a child environment), which wins.
    """
    for name, value in isolated_host.items():
        monkeypatch.setenv(name, value)


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
