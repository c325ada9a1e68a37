"""Static and dynamic energy, and the policies, on a host whose power follows its load (issue 22).

The fake (tests.fakes.powercap.LoadPower) draws package 10 W + 12 W per busy core and dram 3 W: a CPU
second's dynamic energy is 12 J whatever else runs. The host is a written ``/proc`` that runs with the wall
clock (tests.fakes.procfs.TickingProcfs, 4 CPUs): the box these tests run on is shared and often saturated,
so its real ``/proc/stat`` can be neither idle nor given a neighbour at will. The requests' CPU time is
written to their thread's file; the neighbour is a one-core CPU hog's ticks (another process's, as far as
``/proc/stat`` can tell). The attributor runs its sampler thread in real time, as in production.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_joules import EnergyMeter, EnergySpanProcessor
from otel_joules.attribution import Attributor
from otel_joules.config import Settings
from otel_joules.errors import ConfigurationError
from tests.fakes.powercap import LoadPower, make_powercap
from tests.fakes.procfs import FakeProcfs, TickingProcfs

PID = os.getpid()
REQUEST_CPU_S = 0.02


def burn(cpu_s: float) -> None:
    """Spin until this thread has used ``cpu_s`` more CPU seconds."""
    deadline = time.thread_time() + cpu_s
    while time.thread_time() < deadline:
        pass


class LoadHost:
    """A ticking written host, the load-dependent fake power on it, a meter, an attributor (sampler thread
    on), a tracer."""

    def __init__(self, tmp_path: Path, **attributor_options: object) -> None:
        self.powercap = make_powercap(tmp_path / "sys", "one_socket")
        self.proc = FakeProcfs(tmp_path / "proc", cpus=4)
        self.tid = threading.get_native_id()
        self.proc.add_thread(PID, self.tid, 0.0)
        self.ticks = TickingProcfs(self.proc).__enter__()
        self.power = LoadPower(self.powercap, procfs_root=self.proc.procfs_root).__enter__()
        self.meter = EnergyMeter(sysfs_root=self.powercap.sysfs_root, procfs_root=self.proc.procfs_root, gpus=[])
        self.attributor = Attributor(self.meter, **attributor_options)  # type: ignore[arg-type]
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.provider.add_span_processor(EnergySpanProcessor(self.meter, attribution=self.attributor))
        self.tracer = self.provider.get_tracer("static")

    def baselines(self) -> dict[str, tuple[float | None, str]]:
        return {self.meter.domains[i].id: (w, state) for i, w, state in self.attributor.baseline_watts()}

    def learn(self, seconds: float = 4.0) -> None:
        """Vary the load (a hog on, then off, twice): the fit needs periods whose busy cores spread."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with hog(self):
                time.sleep(seconds / 4)
            time.sleep(seconds / 4)

    def requests(self, n: int = 20, gap_s: float = 0.01) -> list[tuple[float, dict]]:
        """``n`` requests of REQUEST_CPU_S each, ``gap_s`` apart: (their CPU seconds, their attributes)."""
        self.exporter.clear()
        cpu: list[float] = []
        for _ in range(n):
            with self.tracer.start_as_current_span("request"):
                # Its CPU time, a tick every 10 ms as the kernel counts a busy thread's.
                for _ in range(round(REQUEST_CPU_S * 100)):
                    time.sleep(0.01)
                    self.ticks.spend(PID, self.tid, 0.01)
                cpu.append(REQUEST_CPU_S)
            time.sleep(gap_s)
        spans = self.exporter.get_finished_spans()
        return list(zip(cpu, [dict(s.attributes) for s in spans]))

    def close(self) -> None:
        self.provider.shutdown()
        self.attributor.close()
        self.meter.close()
        self.power.__exit__()
        self.ticks.__exit__()


class hog:
    """A CPU hog (another process's ticks in ``/proc/stat``, one core by default) while the block runs."""

    def __init__(self, host: LoadHost, cores: float = 1.0) -> None:
        self.host = host
        self.cores = cores

    def __enter__(self) -> "hog":
        self.host.ticks.hog_cores = self.cores
        time.sleep(0.3)  # running, and the forecast's periods hold it
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.host.ticks.hog_cores = 0.0


@pytest.fixture
def load_host(tmp_path: Path):
    host = LoadHost(tmp_path)
    yield host
    host.close()


def test_shares_stay_put_beside_a_hog_and_dynamic_shares_are_the_works_own_draw(load_host: LoadHost) -> None:
    """The issue's numbers: before, requests got 0.23-0.27 J on an idle box and 0.38-0.44 J beside a hog.
    Under the default policy a request's self share is the same within 10% either way (medians), and its
    dynamic share is 12 W x its CPU seconds within 20%, idle box or busy: over the 20 requests, for the
    median one and for most one by one. (A sampler period that holds a single busy tick is left unpriced,
    MIN_BUSY_S: a request with a tick there gets less. Back to back, 10 ms apart, the requests keep the idle
    box at about two thirds of a core, six ticks a period, so that is rare.)"""
    assert all(state == "unknown" for _, state in load_host.baselines().values())  # nothing learned yet
    load_host.learn()
    baselines = load_host.baselines()
    print("baselines:", baselines)
    assert baselines["package_0"][1] == "learned" and baselines["dram_0"][1] == "learned"
    assert baselines["package_0"][0] == pytest.approx(10.0, rel=0.1)
    assert baselines["dram_0"][0] == pytest.approx(3.0, rel=0.1)
    quiet = load_host.requests()
    with hog(load_host):
        busy = load_host.requests()
    shares = {}
    for name, requests in (("idle", quiet), ("hog", busy)):
        print(name, "dynamic / (12 W x CPU s): %s" % [
            round(a["energy.attributed.dynamic.self.joules"] / (12.0 * c), 3) for c, a in requests])
        assert len(requests) == 20
        ratios = [a["energy.attributed.dynamic.self.joules"] / (12.0 * c) for c, a in requests]
        for cpu_s, attributes in requests:
            assert attributes["energy.attribution"] == "cpu_time_share/capacity"
            assert attributes["energy.baseline"] == "learned"
            assert attributes["energy.attributed.dynamic.self.joules"] <= attributes["energy.attributed.self.joules"]
        total_dynamic = sum(a["energy.attributed.dynamic.self.joules"] for _, a in requests)
        assert total_dynamic == pytest.approx(12.0 * sum(c for c, _ in requests), rel=0.2)
        assert statistics.median(ratios) == pytest.approx(1.0, rel=0.2)
        assert sum(0.8 <= r <= 1.2 for r in ratios) >= 0.75 * len(ratios)
        shares[name] = statistics.median(a["energy.attributed.self.joules"] for _, a in requests)
        print(name, "self J per request: median %.4f, range %.4f-%.4f" % (
            shares[name], min(a["energy.attributed.self.joules"] for _, a in requests),
            max(a["energy.attributed.self.joules"] for _, a in requests)))
    assert shares["hog"] == pytest.approx(shares["idle"], rel=0.1)


def test_the_busy_policy_is_the_old_price_and_moves_with_the_neighbour(tmp_path: Path) -> None:
    """Under busy a request still carries the idle power of the whole box: beside a hog (two cores here),
    which shares that power, it gets less; its dynamic share stays the work's own draw."""
    host = LoadHost(tmp_path, policy="busy")
    try:
        host.learn()
        quiet = host.requests(gap_s=0.05)
        with hog(host, cores=2.0):
            busy = host.requests(gap_s=0.05)
    finally:
        host.close()
    for requests in (quiet, busy):
        for _, attributes in requests:
            assert attributes["energy.attribution"] == "cpu_time_share/busy"
        total_dynamic = sum(a["energy.attributed.dynamic.self.joules"] for _, a in requests)
        assert total_dynamic == pytest.approx(12.0 * sum(c for c, _ in requests), rel=0.2)
    alone = statistics.median(a["energy.attributed.self.joules"] / a["energy.joules"] for _, a in quiet)
    beside = statistics.median(a["energy.attributed.self.joules"] / a["energy.joules"] for _, a in busy)
    print(f"busy policy: {alone:.2f} of the host's energy during a request alone, {beside:.2f} beside a hog")
    # Alone, the request is the box's only work: it carries nearly all the box's energy during it (the
    # share is capped at what the host spent), idle power included; beside the hog it shares it.
    assert alone > 0.75
    assert beside < 0.5


def test_configured_baselines_win_and_bad_ones_are_refused(tmp_path: Path, monkeypatch) -> None:
    host = LoadHost(tmp_path, static_watts={"package_0": 7.5})
    try:
        baselines = host.baselines()
        assert baselines["package_0"] == (7.5, "configured")
        assert baselines["dram_0"][1] == "unknown"  # the others stay to be learned
        host.attributor.configure(static_watts={"dram_0": 2.0})
        assert host.baselines()["dram_0"] == (2.0, "configured")
        assert host.attributor.baseline_state == "configured"
        with host.tracer.start_as_current_span("request"):
            host.ticks.spend(PID, host.tid, REQUEST_CPU_S)
        (span,) = host.exporter.get_finished_spans()
        assert span.attributes["energy.baseline"] == "configured"
        with pytest.raises(ConfigurationError, match="attribution_policy='all'"):
            host.attributor.configure(policy="all")
        with pytest.raises(ConfigurationError, match="watts must be between"):
            host.attributor.configure(static_watts={"package_0": -1})
    finally:
        host.close()
    settings = Settings.from_env({"OTEL_JOULES_STATIC_WATTS": "package_0=10, dram_0=3", "OTEL_JOULES_ATTRIBUTION_POLICY": "dynamic"})
    assert settings.static_watts == (("package_0", 10.0), ("dram_0", 3.0)) and settings.attribution_policy == "dynamic"


def test_the_former_policy_name_none_in_the_environment_is_dynamic_and_warns() -> None:
    with pytest.warns(DeprecationWarning, match="OTEL_JOULES_ATTRIBUTION_POLICY='none' is deprecated: write 'dynamic'"):
        settings = Settings.from_env({"OTEL_JOULES_ATTRIBUTION_POLICY": "none"})
    assert settings.attribution_policy == "dynamic"


def test_bad_policy_and_static_watts_are_said_once_and_the_rest_used(caplog) -> None:
    env = {"OTEL_JOULES_ATTRIBUTION_POLICY": "fair", "OTEL_JOULES_STATIC_WATTS": "package_0=10,dram_0,gpu=-3"}
    with caplog.at_level("WARNING", logger="otel_joules"):
        settings = Settings.from_env(env)
        Settings.from_env(env)
    assert settings.attribution_policy == "capacity"
    assert settings.static_watts == (("package_0", 10.0),)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == len(set(messages)) == 3, messages
    assert any("OTEL_JOULES_ATTRIBUTION_POLICY='fair' is not one of capacity, busy, dynamic" in m for m in messages)


def test_instrument_takes_the_policy_and_refuses_a_bad_one(tmp_path: Path) -> None:
    import otel_joules

    powercap = make_powercap(tmp_path / "sys", "one_socket")
    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[])
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with pytest.raises(ConfigurationError, match="attribution_policy"):
        otel_joules.instrument(provider, meter=meter, metrics_enabled=False, attribution_policy="most")
    handle = otel_joules.instrument(
        provider, meter=meter, metrics_enabled=False, attribution_policy="dynamic", static_watts={"package_0": 1.0}
    )
    try:
        with provider.get_tracer("t").start_as_current_span("work"):
            burn(0.01)
        (span,) = exporter.get_finished_spans()
        assert span.attributes["energy.attribution"] == "cpu_time_share/dynamic"
        # Under dynamic the share is the dynamic share.
        assert span.attributes["energy.attributed.self.joules"] == pytest.approx(
            span.attributes["energy.attributed.dynamic.self.joules"], rel=1e-9, abs=1e-12
        )
    finally:
        handle.uninstrument()
        provider.shutdown()
        meter.close()


def test_the_former_policy_keyword_none_is_dynamic_and_warns(tmp_path: Path) -> None:
    """``attribution_policy="none"`` read like "attribution off": it still works, as ``dynamic``, and says so."""
    powercap = make_powercap(tmp_path / "sys", "one_socket")
    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False)
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        with pytest.warns(DeprecationWarning, match="attribution_policy='none' is deprecated: write 'dynamic'"):
            processor = EnergySpanProcessor(meter, attribution_policy="none")
        provider.add_span_processor(processor)
        with provider.get_tracer("t").start_as_current_span("work"):
            burn(0.01)
        (span,) = exporter.get_finished_spans()
        assert processor.attributor is not None and processor.attributor.policy == "dynamic"
        assert span.attributes["energy.attribution"] == "cpu_time_share/dynamic"
        assert span.attributes["energy.attributed.self.joules"] == pytest.approx(
            span.attributes["energy.attributed.dynamic.self.joules"], rel=1e-9, abs=1e-12
        )
    finally:
        provider.shutdown()
        meter.close()


@pytest.mark.skipif(os.cpu_count() is None, reason="needs os.cpu_count()")
def test_the_64_core_example_in_the_readme() -> None:
    """docs/attribution.md's figures come from the model's prices: 64 cores idling at 100 W, 3 W per busy core, a lone
    20 ms request in a 0.1 s period."""
    from otel_joules.attribution.sampling import policy_prices

    dt, cores, request = 0.1, 64, 0.02
    energy, static = (100.0 + 3.0 * request / dt) * dt, 100.0 * dt
    capacity = policy_prices("capacity", energy, static, 0.0, 0.0, request, cores * dt)
    busy = policy_prices("busy", energy, static, 0.0, 0.0, request, cores * dt)
    dynamic = policy_prices("dynamic", energy, static, 0.0, 0.0, request, cores * dt)
    assert (capacity.cpu - capacity.dynamic) * request == pytest.approx(0.031, abs=0.001)
    assert capacity.dynamic * request == pytest.approx(0.06, rel=1e-9)
    assert busy.cpu * request == pytest.approx(10.06, rel=1e-9)
    assert dynamic.cpu * request == pytest.approx(0.06, rel=1e-9)
