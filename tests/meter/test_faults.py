"""Fault matrix, measurement and configuration side (issue 13): faults of the hardware, the process and the settings.

Each cell asserts that the user's code ran and returned, that each fault is said at most
once and clearly, and that no energy was invented. Hardware is faked at its boundary: a
powercap tree in a temp dir, the stand-in libnvidia-ml.so.1 loaded by the real pynvml in a
child process, or an in-memory channel where only the meter's own logic is under test.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_joules
from otel_joules import EnergyMeter, EnergySpanProcessor
from otel_joules.config import ENVIRONMENT_VARIABLES, OTEL_JOULES_SYSFS_ROOT
from otel_joules.errors import SensorReadError
from otel_joules.meter import channels
from otel_joules.meter.registry import default_registry, get_energy_meter
from otel_joules.sensors.base import Channel, Domain
from otel_joules.semconv import KIND_CPU, KIND_GPU

from tests.fakes.nvml import FakeCard, FakeNvml, run_python, uuid_for
from tests.fakes.powercap import INTEL_RANGE_UJ, make_powercap, root_only_powercap
from tests.helpers.processes import clean_env, otel_joules_command

HOSTILE_VALUES = ("garbage", "-1", "nan", "inf", "1e400", "")


def _user_work() -> str:
    """Stands for the user's code: its result must come back whatever otel-joules meets."""
    return "done"


def _warnings(caplog: pytest.LogCaptureFixture, word: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and word in r.getMessage()]


# --- RAPL ------------------------------------------------------------------------------------


def test_no_rapl_estimates_and_the_user_code_returns(tmp_path: Path, tracer_provider, span_exporter, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="otel_joules"):
        handle = otel_joules.instrument(tracer_provider, sysfs_root=str(tmp_path), gpus=[])
        with tracer_provider.get_tracer("t").start_as_current_span("step"):
            result = _user_work()
        handle.uninstrument()
    assert result == "done"
    (span,) = span_exporter.get_finished_spans()
    assert span.attributes["energy.source"] == "estimate"
    # The user asked for energy: the front door says once that it is estimated, and why; and, since the
    # sysfs root given holds no powercap layout, once that the root is wrong.
    root, record = caplog.records
    assert root.getMessage().startswith(f"otel-joules: sysfs_root {str(tmp_path)!r} has no class/powercap")
    assert record.getMessage().startswith("otel-joules: spans and metrics carry ESTIMATES, not measurements, for cpu_estimate")


def test_root_only_rapl_falls_back_to_the_estimate_with_one_message(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to an unprivileged user (CI and our machines run as root)")
    with root_only_powercap() as pc:
        script = textwrap.dedent(
            f"""
            import json, logging, os
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import SimpleSpanProcessor
            from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
            import otel_joules
            import otel_joules.carbon.spans  # instrument() loads it (and csv) lazily; the stdlib is under /root
            logging.basicConfig(level=logging.WARNING, format="%(message)s")
            provider = TracerProvider(); exporter = InMemorySpanExporter()  # imports lazily: before the drop
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            os.setgid(65534); os.setuid(65534)  # imports first: the interpreter lives under /root
            otel_joules.instrument(provider, sysfs_root={pc.sysfs_root!r}, gpus=[])
            with provider.get_tracer("t").start_as_current_span("step"):
                result = "done"
            (span,) = exporter.get_finished_spans()
            print(json.dumps([result, span.attributes["energy.source"]]))
            """
        )
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == ["done", "estimate"]
    assert len([line for line in proc.stderr.splitlines() if line.strip()]) <= 1, proc.stderr


def test_rapl_reset_is_not_read_as_a_wrap(tmp_path: Path, caplog) -> None:
    # energy_uj 5,000,000,000 -> 1,000 between two reads 1 ms apart (driver reload): a wrap
    # would mean ~257 kJ in 1 ms; it is a restart, counted from the new origin.
    pc = make_powercap(tmp_path, "amd", start_uj=5_000_000_000)
    package = pc.zones["package_0"]
    meter = EnergyMeter(sysfs_root=pc.sysfs_root, gpus=[], sample=False)
    with caplog.at_level(logging.WARNING, logger="otel_joules"):
        start = meter.snapshot()
        package.total_uj = 1_000
        package.write()
        time.sleep(0.001)
        after_reset = meter.snapshot()
        package.advance_joules(2.5)
        end = meter.snapshot()
        package.total_uj = 500  # a second restart: counted right, not said again
        package.write()
        meter.snapshot()
    assert meter.measure(start, after_reset).joules_by_domain["package_0"] == 0.001
    assert meter.measure(start, end).joules_by_domain["package_0"] == pytest.approx(2.501, abs=1e-12)
    (message,) = _warnings(caplog, "package_0")
    assert "restarted" in message and "5000000000 uJ -> 1000 uJ" in message


def test_many_wraps_stay_exact_and_are_not_taken_for_restarts(tmp_path: Path, caplog) -> None:
    # A 1 J counter at a 1 kW bound, read between wraps (as the sampler does): 250 wraps.
    pc = make_powercap(tmp_path, "amd", range_uj=1_000_000, max_power_uw=1_000_000_000)
    meter = EnergyMeter(sysfs_root=pc.sysfs_root, gpus=[], sample=False)
    with caplog.at_level(logging.WARNING, logger="otel_joules"):
        start = meter.snapshot()
        for _ in range(1000):
            pc.zones["package_0"].advance_uj(250_123)
            meter.snapshot()
        end = meter.snapshot()
    assert round(meter.measure(start, end).joules_by_domain["package_0"] * 1e6) == 1000 * 250_123
    assert not caplog.records


def test_transient_read_failure_is_retried_and_the_gap_is_counted_once(tmp_path: Path, caplog) -> None:
    pc = make_powercap(tmp_path, "amd")
    package = pc.zones["package_0"]
    meter = EnergyMeter(sysfs_root=pc.sysfs_root, gpus=[], sample=False)
    with caplog.at_level(logging.WARNING, logger="otel_joules"):
        start = meter.snapshot()
        package.write_raw("")  # the zone vanished for a moment
        failing = meter.snapshot()
        package.advance_joules(4.0)  # spent during the gap; the file is whole again
        time.sleep(channels.READ_RETRY_FIRST_DELAY_S + 0.01)
        end = meter.snapshot()
    assert failing.joules[meter.domain_index("package_0")] is None  # left out, not guessed
    assert meter.measure(start, end).joules_by_domain["package_0"] == 4.0
    retrying, back = _warnings(caplog, "package_0")  # when it starts, and when it is over
    assert "is empty" in retrying and "energy.package_0.missing" in retrying
    assert "reads again" in back and "is empty" in back


class _FlakyChannel(Channel):
    """An in-memory counter that raises SensorReadError while ``broken`` (a GPU mid-reset, say)."""

    def __init__(self, domain_id: str) -> None:
        super().__init__(Domain(domain_id, KIND_GPU, "flaky", domain_id))
        self.value_uj = 0
        self.broken = False

    def read_uj(self) -> int:
        if self.broken:
            raise SensorReadError(f"{self.domain.id}: the device is resetting")
        return self.value_uj


def test_a_counter_failing_its_very_first_read_is_retried_not_dropped(caplog) -> None:
    # RAPL probes its zones at discovery; a channel that passes discovery and then fails the
    # meter's first read is retried like any other, and its first good read is the origin.
    flaky = _FlakyChannel("nvidia_gpu_0")
    flaky.value_uj, flaky.broken = 10_000_000, True
    with caplog.at_level(logging.WARNING, logger="otel_joules"):
        meter = EnergyMeter(channels=[flaky], sample=False)
        assert [d.id for d in meter.domains] == ["nvidia_gpu_0"] and meter.unavailable == ()
        before = meter.snapshot()
        flaky.broken, flaky.value_uj = False, 11_000_000
        time.sleep(channels.READ_RETRY_FIRST_DELAY_S + 0.01)
        start = meter.snapshot()
        flaky.value_uj += 500_000
        end = meter.snapshot()
    assert before.joules == (None,) and start.joules == (0.0,)
    assert meter.measure(start, end).joules_by_domain["nvidia_gpu_0"] == 0.5
    retrying, back = _warnings(caplog, "nvidia_gpu_0")
    assert "resetting" in retrying and "retrying" in retrying
    assert "reads again" in back and "resetting" in back


def test_persistent_read_failure_is_dropped_after_repeated_tries_said_when_it_starts_and_when_dropped(
    tmp_path: Path, caplog, monkeypatch
) -> None:
    monkeypatch.setattr(channels, "READ_RETRY_FIRST_DELAY_S", 0.0005)  # the policy, minus the waiting
    pc = make_powercap(tmp_path, "amd")
    meter = EnergyMeter(sysfs_root=pc.sysfs_root, gpus=[], sample=False)
    with caplog.at_level(logging.WARNING, logger="otel_joules"):
        start = meter.snapshot()
        pc.zones["package_0"].write_raw("garbage")
        deadline = time.monotonic() + 5
        while not meter._states[0].failed and time.monotonic() < deadline:
            meter.snapshot()
            time.sleep(0.001)
        pc.zones["package_0"].advance_joules(1.0)  # readable again, too late: dropped stays dropped
        end = meter.snapshot()
    assert meter._states[0].failures == channels.READ_FAILURES_BEFORE_DROP
    assert "package_0" not in meter.measure(start, end).joules_by_domain
    assert meter.measure(start, end).joules_by_domain["core_0"] == 0.0  # the others go on
    retrying, message = _warnings(caplog, "package_0")
    assert "retrying" in retrying
    assert f"stopped measuring package_0 after {channels.READ_FAILURES_BEFORE_DROP} failed reads" in message


# --- NVML ------------------------------------------------------------------------------------

GPU_SPAN = r"""
import json, logging, sys, time
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import otel_joules

logging.basicConfig(level=logging.WARNING, format="%(message)s")
provider = TracerProvider()
exporter = InMemorySpanExporter()
provider.add_span_processor(SimpleSpanProcessor(exporter))
handle = otel_joules.instrument(provider, sysfs_root={sysfs!r})
tracer = provider.get_tracer("t")
{before}
spans = []
for _ in range({spans}):
    t0 = time.monotonic()
    with tracer.start_as_current_span("step"):
        result = "done"
        time.sleep({work_s})
    spans.append(time.monotonic() - t0)
print(json.dumps({{"result": result, "wall_s": spans, "domains": [d.id for d in handle.meter.domains],
                   "attributes": [dict(s.attributes) for s in exporter.get_finished_spans()],
                   "durations_s": [(s.end_time - s.start_time) / 1e9 for s in exporter.get_finished_spans()]}}))
"""


def _gpu_run(tmp_path: Path, cards: list[FakeCard], *, before: str = "", spans: int = 1, work_s: float = 0.3,
             no_library: bool = False):
    pc = make_powercap(tmp_path / "sys", "amd")
    # The stand-in's clock starts at the child's first NVML call, so lost_after_s is not eaten by start-up.
    fake = FakeNvml(cards=cards, update_ms=1)
    code = GPU_SPAN.format(sysfs=pc.sysfs_root, before=before, spans=spans, work_s=work_s)
    result = run_python(code, fake, tmp_path, no_library=no_library)
    return result.data, [line for line in result.stderr.splitlines() if line.strip()]


def test_nvml_missing_measures_the_host_alone_without_a_word(tmp_path: Path) -> None:
    data, messages = _gpu_run(tmp_path, [], no_library=True, work_s=0.01)
    assert data["result"] == "done"
    assert data["domains"] == ["package_0", "core_0"]
    assert messages == []  # `otel-joules devices` says why; spans are not the place


def test_slow_nvml_never_stalls_a_span_and_flags_the_value_stale(tmp_path: Path) -> None:
    delay = tmp_path / "nvml-delay-ms"
    cards = [FakeCard(uuid=uuid_for(0), watts=200.0, read_delay_file=str(delay))]
    # NVML answers at once while instrument() discovers the GPU, then every read takes 2 s.
    data, messages = _gpu_run(tmp_path, cards, before=f"open({str(delay)!r}, 'w').write('2000')", spans=3)
    assert data["result"] == "done"
    assert data["domains"] == ["package_0", "core_0", "nvidia_gpu_0"]
    # ~0.3 s of work each: the span path waited at most the deadline at each end, never a
    # 2 s call (the margin is for a loaded machine; one blocked call alone would exceed it).
    bound_s = 0.3 + 2 * channels.DEVICE_READ_DEADLINE_S + 0.6
    assert max(data["wall_s"]) < bound_s, data["wall_s"]
    for attributes in data["attributes"]:
        assert attributes["energy.nvidia_gpu_0.stale"] is True
        # A late value never exceeds what the GPU could spend in the span: nothing invented.
        assert 0.0 <= attributes["energy.nvidia_gpu_0.joules"] <= 200.0 * (bound_s + 0.05)
    assert messages == []


SLOW_DISCOVERY = r"""
import json, logging, sys, time
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import otel_joules
from otel_joules.sensors import nvml

logging.basicConfig(level=logging.WARNING, format="%(message)s")
nvml.DISCOVERY_DEADLINE_S = {deadline_s!r}  # the default (5 s) would only make this test slower
provider = TracerProvider()
exporter = InMemorySpanExporter()
provider.add_span_processor(SimpleSpanProcessor(exporter))
t0 = time.monotonic()
handle = otel_joules.instrument(provider, sysfs_root={sysfs!r})
instrument_s = time.monotonic() - t0
with provider.get_tracer("t").start_as_current_span("step"):
    result = "done"
(span,) = exporter.get_finished_spans()
print(json.dumps({{"result": result, "instrument_s": instrument_s,
                   "domains": [d.id for d in handle.meter.domains],
                   "unavailable": [u.reason for u in handle.meter.unavailable],
                   "joules": span.attributes["energy.joules"]}}))
"""


def test_slow_nvml_at_discovery_holds_up_instrument_at_most_the_deadline(tmp_path: Path) -> None:
    # Every NVML energy read takes 3 s from the start: discovery's probe and the meter's first
    # read used to hold instrument() for 6 s. Past the deadline it measures without the GPU.
    deadline_s = 1.0
    pc = make_powercap(tmp_path / "sys", "amd")
    fake = FakeNvml(cards=[FakeCard(uuid=uuid_for(0), watts=200.0, read_delay_ms=3000)], update_ms=1)
    result = run_python(SLOW_DISCOVERY.format(deadline_s=deadline_s, sysfs=pc.sysfs_root), fake, tmp_path)
    data = result.data
    messages = [line for line in result.stderr.splitlines() if line.strip()]
    assert data["result"] == "done"
    assert data["instrument_s"] < deadline_s + 1.0, data  # the margin is start-up work on a loaded machine
    assert data["domains"] == ["package_0", "core_0"]  # the host is measured; no GPU value guessed
    assert data["joules"] >= 0
    assert any("NVML did not answer within 1 s" in reason for reason in data["unavailable"])
    assert len(messages) == 1 and "NVML did not answer within 1 s" in messages[0], messages
    assert "nvidia-smi" in messages[0]  # what to do


def test_nvml_answering_within_the_deadline_is_measured_from_discovery(tmp_path: Path) -> None:
    # Reads of 0.3 s each: slow, but discovery (probe + first read) fits the deadline.
    pc = make_powercap(tmp_path / "sys", "amd")
    fake = FakeNvml(cards=[FakeCard(uuid=uuid_for(0), watts=200.0, read_delay_ms=300)], update_ms=1)
    result = run_python(SLOW_DISCOVERY.format(deadline_s=5.0, sysfs=pc.sysfs_root), fake, tmp_path)
    assert result.data["domains"] == ["package_0", "core_0", "nvidia_gpu_0"]
    assert result.data["instrument_s"] < 5.0
    assert [line for line in result.stderr.splitlines() if line.strip()] == []


STALL_AFTER_DISCOVERY = r"""
import json, logging, sys, time
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import otel_joules
from otel_joules.meter.registry import get_energy_meter

logging.basicConfig(level=logging.WARNING, format="%(message)s")
get_energy_meter(sysfs_root={sysfs!r})  # the GPU is discovered while NVML answers at once ...
open({delay!r}, "w").write("2000")  # ... then every read and process list takes 2 s
provider = TracerProvider()
exporter = InMemorySpanExporter()
provider.add_span_processor(SimpleSpanProcessor(exporter))
t0 = time.monotonic()
handle = otel_joules.instrument(provider, sysfs_root={sysfs!r})  # creates the attribution
instrument_s = time.monotonic() - t0
with provider.get_tracer("t").start_as_current_span("step"):
    result = "done"
(span,) = exporter.get_finished_spans()
print(json.dumps({{"result": result, "instrument_s": instrument_s, "attributes": dict(span.attributes)}}))
"""


def test_nvml_stalling_after_discovery_does_not_hold_up_instrument(tmp_path: Path) -> None:
    # instrument() starts the attribution, whose first sample used to ask NVML which processes
    # run on the GPU: 4 stalled calls, 8 s. The first sample needs no GPU split.
    delay = tmp_path / "nvml-delay-ms"
    pc = make_powercap(tmp_path / "sys", "amd")
    fake = FakeNvml(cards=[FakeCard(uuid=uuid_for(0), watts=200.0, read_delay_file=str(delay))], update_ms=1)
    result = run_python(STALL_AFTER_DISCOVERY.format(sysfs=pc.sysfs_root, delay=str(delay)), fake, tmp_path)
    data = result.data
    assert data["result"] == "done"
    assert data["instrument_s"] < 1.0, data
    assert data["attributes"]["energy.nvidia_gpu_0.stale"] is True  # late, flagged, not waited for
    assert [line for line in result.stderr.splitlines() if line.strip()] == []


def test_fast_nvml_spans_are_fresh_and_exact(tmp_path: Path) -> None:
    data, messages = _gpu_run(tmp_path, [FakeCard(uuid=uuid_for(0), watts=200.0)], spans=2)
    for attributes, duration_s in zip(data["attributes"], data["durations_s"]):
        assert "energy.nvidia_gpu_0.stale" not in attributes
        assert attributes["energy.nvidia_gpu_0.joules"] == pytest.approx(200.0 * duration_s, rel=0.05)
    assert messages == []


def test_nvml_lost_and_not_supported_gpus_leave_the_others_measured(tmp_path: Path) -> None:
    cards = [
        FakeCard(uuid=uuid_for(0), energy=False, power=False),  # NOT_SUPPORTED for both
        FakeCard(uuid=uuid_for(1), watts=300.0, lost_after_s=0.4, pci="00000000:08:00.0"),
        FakeCard(uuid=uuid_for(2), watts=100.0, pci="00000000:09:00.0"),
    ]
    data, messages = _gpu_run(tmp_path, cards, spans=3, work_s=0.25)
    assert data["result"] == "done"
    assert data["domains"] == ["package_0", "core_0", "nvidia_gpu_1", "nvidia_gpu_2"]
    last = data["attributes"][-1]
    assert "energy.nvidia_gpu_1.joules" not in last  # lost: no partial value passed off as the span's
    assert last["energy.nvidia_gpu_2.joules"] == pytest.approx(100.0 * data["durations_s"][-1], rel=0.05)
    assert len(messages) == 1 and "stopped measuring nvidia_gpu_1" in messages[0], messages


# --- the process -----------------------------------------------------------------------------


class _BlockingChannel(Channel):
    """A counter whose read can be held mid-call (by whichever thread reads it)."""

    def __init__(self, domain_id: str, *, may_block: bool = False) -> None:
        super().__init__(Domain(domain_id, KIND_CPU, "blocking", domain_id))
        self._may_block = may_block
        self.value_uj = 0
        self.entered = threading.Event()
        self.release = threading.Event()
        self.release.set()

    @property
    def may_block(self) -> bool:
        return self._may_block

    def read_uj(self) -> int:
        if not self.release.is_set():
            self.entered.set()
            self.release.wait(10)
        return self.value_uj


def test_fork_while_the_sampler_holds_the_meter_lock_and_a_device_read_is_stuck(tmp_path: Path) -> None:
    host, gpu = _BlockingChannel("package_0"), _BlockingChannel("nvidia_gpu_0", may_block=True)
    meter = EnergyMeter(channels=[host, gpu], sample=False)
    start = meter.snapshot()
    gpu.release.clear()
    meter.snapshot()  # the GPU read is now stuck in its reader thread (past the deadline: stale)
    host.release.clear()
    sampler = threading.Thread(target=meter.snapshot, daemon=True)  # what the sampler does
    sampler.start()
    assert host.entered.wait(5)  # the sampler is inside a read, holding the meter's lock
    registry_held = threading.Event()
    registry_release = threading.Event()

    def hold_registry_lock() -> None:  # a thread creating the shared meter at fork time
        with default_registry()._lock:
            registry_held.set()
            registry_release.wait(10)

    threading.Thread(target=hold_registry_lock, daemon=True).start()
    assert registry_held.wait(5)
    pid = os.fork()
    if pid == 0:  # the child: a DataLoader-style worker
        code = 1
        try:
            signal.alarm(10)  # a hang fails the test instead of blocking it
            host.release.set()
            gpu.release.set()
            host.value_uj, gpu.value_uj = 3_000_000, 5_000_000
            joules = meter.measure(start, meter.snapshot()).joules_by_domain
            shared = get_energy_meter(channels=[_BlockingChannel("cpu")], sample=False)
            code = 0 if joules == {"package_0": 3.0, "nvidia_gpu_0": 5.0} and shared.domains else 2
        finally:
            os._exit(code)
    try:
        deadline = time.monotonic() + 15
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                pytest.fail("the forked child hung on a lock held at fork time")
            time.sleep(0.01)
    finally:
        host.release.set()
        gpu.release.set()
        registry_release.set()
        sampler.join(5)
    assert os.waitstatus_to_exitcode(status) == 0
    meter.close()


class _CountingProcessor(SpanProcessor):
    """Counts ended spans and those whose energy is missing or negative."""

    def __init__(self) -> None:
        self.ended = itertools.count()
        self.bad = itertools.count()

    def on_end(self, span: ReadableSpan) -> None:
        next(self.ended)
        joules = (span.attributes or {}).get("energy.joules")
        if not isinstance(joules, float) or joules < 0:
            next(self.bad)


class _WrappingCounter(Channel):
    """A cheap in-memory counter: +7 uJ per read, wrapping at 1000 uJ (a wrap every ~143 reads)."""

    def __init__(self) -> None:
        super().__init__(Domain("package_0", KIND_CPU, "fake", "fake"))
        self.raw_uj = 0
        self.reads = 0

    @property
    def wrap_uj(self) -> int:
        return 1000

    def read_uj(self) -> int:  # called under the meter's lock only
        self.reads += 1
        self.raw_uj = (self.raw_uj + 7) % 1000
        return self.raw_uj


def test_eight_threads_of_fifty_thousand_spans_keep_totals_exact(caplog) -> None:
    counter = _WrappingCounter()
    meter = EnergyMeter(channels=[counter], sample=False)
    provider = TracerProvider()
    provider.add_span_processor(EnergySpanProcessor(meter))
    counting = _CountingProcessor()
    provider.add_span_processor(counting)
    tracer = provider.get_tracer("t")
    errors: list[BaseException] = []
    results: list[str] = []

    def worker() -> None:
        try:
            for _ in range(50_000):
                span = tracer.start_span("s")
                span.end()
            results.append(_user_work())
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    with caplog.at_level(logging.WARNING, logger="otel_joules"):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    final = meter.snapshot().joules[0]
    assert errors == [] and results == ["done"] * 8 and not caplog.records
    assert next(counting.ended) == 400_000 and next(counting.bad) == 0
    # Every read's 7 uJ counted once across ~5,600 wraps raced by 8 threads: exact.
    assert round(final * 1e6) == 7 * (counter.reads - 1)
    # Two reads per span at least; the attribution sampler's reads of the meter come on top
    # and are counted exactly too (the line above).
    assert counter.reads >= 1 + 2 * 400_000 + 1


# --- the environment -------------------------------------------------------------------------


def _hostile_env(value: str, tmp_path: Path) -> dict[str, str]:
    env = {name: value for name in ENVIRONMENT_VARIABLES}
    # Empty means the defaults (the host's /sys and /proc): the sysfs root stays a temp dir so
    # no real counter is read. (Relative garbage lands in the test's own working directory.)
    env[OTEL_JOULES_SYSFS_ROOT] = value or str(tmp_path / "no-sys")
    return env


@pytest.mark.parametrize("value", HOSTILE_VALUES)
def test_hostile_settings_never_break_instrument(value: str, tmp_path: Path, monkeypatch, caplog) -> None:
    monkeypatch.chdir(tmp_path)  # relative paths such as "garbage" resolve here
    for name, raw in _hostile_env(value, tmp_path).items():
        monkeypatch.setenv(name, raw)
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with caplog.at_level(logging.WARNING, logger="otel_joules"):
        handle = otel_joules.instrument(provider, gpus=[])
        with provider.get_tracer("t").start_as_current_span("step"):
            result = _user_work()
        handle.uninstrument()
    assert result == "done"
    (span,) = exporter.get_finished_spans()
    assert span.attributes["energy.joules"] >= 0  # the estimate is kept (a bad TDP used to remove it)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == len(set(messages)), messages  # each at most once
    for name in ENVIRONMENT_VARIABLES:
        assert len([m for m in messages if f"{name}=" in m]) <= 1
    provider.shutdown()


@pytest.mark.parametrize("value", HOSTILE_VALUES)
def test_hostile_settings_never_stop_otel_joules_run(value: str, tmp_path: Path) -> None:
    env = clean_env(tmp_path, _hostile_env(value, tmp_path))
    marker = tmp_path / "ran"
    proc = subprocess.run(
        otel_joules_command("run", "--exporter", "console", "--", sys.executable, "-c",
                            f"open({str(marker)!r}, 'w').write('done'); raise SystemExit(3)"),
        env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path, stdin=subprocess.DEVNULL,
    )
    assert marker.read_text() == "done"  # the command ran
    assert proc.returncode == 3, proc.stderr  # and its exit code is ours
    assert "Traceback" not in proc.stderr
    setting_lines = [line for line in proc.stderr.splitlines() if "OTEL_JOULES_" in line]
    for name in ENVIRONMENT_VARIABLES:
        assert len([line for line in setting_lines if f"{name}=" in line]) <= 1, proc.stderr
    assert '"energy.joules"' in proc.stdout + proc.stderr  # and it was measured
