"""Zero-code: ``opentelemetry-instrument python app.py`` puts energy on an API-only app's spans and exports hw.* metrics."""

from __future__ import annotations

import json
import logging
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_joules.instrumentation import EnergyInstrumentor

# The app imports nothing but the OpenTelemetry API. It adds known energy to the fake
# counters inside its span, the way real work would move the real ones.

from tests.fakes.otlp_receiver import otlp_grpc_receiver, otlp_receiver  # noqa: F401  (fixtures)
from tests.fakes.powercap import FakePowercap, make_powercap
from tests.helpers.processes import (ENTRY_POINTS, REPO, clean_env, closed_port, installed_entry_point, opentelemetry_instrument,
                                    otel_joules_command)
API_ONLY_APP = """
import sys
from opentelemetry import trace

tracer = trace.get_tracer("shop")

def consume(path, microjoules):
    with open(path, "r+") as f:
        value = int(f.read())
        f.seek(0)
        f.truncate()
        f.write(str(value + microjoules))

with tracer.start_as_current_span("checkout"):
    consume(sys.argv[1], 4_000_000)
    consume(sys.argv[2], 1_000_000)
    with tracer.start_as_current_span("charge-card"):
        consume(sys.argv[1], 500_000)
print("app done")
"""


@pytest.fixture
def fake_host(tmp_path: Path) -> FakePowercap:
    return make_powercap(tmp_path / "sys", "one_socket")


def run_app(tmp_path: Path, pc: FakePowercap, receiver, **extra: str) -> subprocess.CompletedProcess[str]:
    app = tmp_path / "app.py"
    app.write_text(API_ONLY_APP)
    env = clean_env(tmp_path, {"OTEL_JOULES_SYSFS_ROOT": pc.sysfs_root, "OTEL_SERVICE_NAME": "shop", **receiver.env(), **extra})
    command = [opentelemetry_instrument(), sys.executable, str(app),
               str(pc.zones["package_0"].path / "energy_uj"), str(pc.zones["dram_0"].path / "energy_uj")]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "app done\n"
    return result


def test_api_only_app_gets_energy_on_its_spans_and_metrics(otlp_receiver, tmp_path, fake_host):
    """Over gRPC and HTTP/protobuf, exactly the joules the app spent."""
    result = run_app(tmp_path, fake_host, otlp_receiver, OTEL_EXPERIMENTAL_RESOURCE_DETECTORS="otel_joules",
                     SLURM_JOB_ID="2024", RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
    assert "otel-joules" not in result.stderr  # no warning, e.g. about counters closed before the last collection
    (checkout,) = otlp_receiver.wait_for_spans(name="checkout")
    (charge,) = otlp_receiver.wait_for_spans(name="charge-card")
    assert checkout.attributes["energy.joules"] == 5.5
    assert checkout.attributes["energy.package_0.joules"] == 4.5
    assert checkout.attributes["energy.dram_0.joules"] == 1.0
    assert charge.attributes["energy.joules"] == 0.5
    assert charge.attributes["energy.source"] == "measured"
    assert charge.parent_span_id == checkout.span_id
    assert checkout.scope_name == "shop"
    resource = checkout.resource_attributes
    assert resource["service.name"] == "shop"
    assert (resource["slurm.job.id"], resource["torchrun.rank"], resource["torchrun.local_rank"], resource["torchrun.world_size"]) == ("2024", 0, 0, 1)

    otlp_receiver.wait_for_data_points("energy.components")
    energy = {p.attributes["hw.id"]: p.value for p in otlp_receiver.data_points("hw.energy")}
    # The final collection at exit saw every joule the app spent.
    assert energy == {"intel-rapl:0": 4.5, "intel-rapl:0:2": 1.0}  # core and uncore are energy.nested
    assert [p.value for p in otlp_receiver.data_points("energy.components")] == [5.5]
    assert otlp_receiver.data_points("hw.energy")[0].resource_attributes["slurm.job.id"] == "2024"


def test_disabled_by_the_standard_variable(otlp_grpc_receiver, tmp_path, fake_host):
    result = run_app(tmp_path, fake_host, otlp_grpc_receiver, OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="otel_joules")
    (checkout,) = otlp_grpc_receiver.wait_for_spans(name="checkout")
    assert not any(key.startswith("energy.") for key in checkout.attributes)
    assert not any(name.startswith("hw.") for name in otlp_grpc_receiver.metric_names())
    assert "otel-joules" not in result.stderr


def test_a_second_local_rank_beside_another_process_keeps_its_energy(otlp_grpc_receiver, tmp_path, fake_host):
    """No election: with LOCAL_RANK=1, the old variables pointing at a lock that another process holds, and
    another otel-joules process measuring the same host, the app's spans carry the host's energy and their share."""
    lock = tmp_path / "held.lock"
    holder_code = (
        "import fcntl, os, sys, time\n"
        "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "time.sleep(60)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", holder_code, str(lock)], stdout=subprocess.PIPE, text=True)
    other = subprocess.Popen(otel_joules_command("run", "--exporter", "none", "--quiet", "--", sys.executable, "-c",
                                                 "import time; time.sleep(60)"),
                             env=clean_env(tmp_path, {"OTEL_JOULES_SYSFS_ROOT": fake_host.sysfs_root}),
                             stdin=subprocess.DEVNULL)
    try:
        assert holder.stdout.readline() == "held\n"
        run_app(tmp_path, fake_host, otlp_grpc_receiver, LOCAL_RANK="1", OTEL_JOULES_HOST_DOMAINS="auto",
                OTEL_JOULES_HOST_LOCK=str(lock))
    finally:
        for process in (holder, other):
            process.terminate()
            process.wait(timeout=10)
    (checkout,) = otlp_grpc_receiver.wait_for_spans(name="checkout")
    (charge,) = otlp_grpc_receiver.wait_for_spans(name="charge-card")
    assert checkout.attributes["energy.joules"] == 5.5
    assert charge.attributes["energy.joules"] == 0.5
    # Shares: the parent includes its child, self is the rest, nothing exceeds what the host spent.
    inclusive = checkout.attributes["energy.attributed.joules"]
    assert inclusive == pytest.approx(checkout.attributes["energy.attributed.self.joules"]
                                      + charge.attributes["energy.attributed.joules"], rel=1e-9, abs=1e-12)
    assert 0 <= charge.attributes["energy.attributed.joules"] <= inclusive <= 5.5
    otlp_grpc_receiver.wait_for_data_points("energy.components")
    assert [p.value for p in otlp_grpc_receiver.data_points("energy.components")] == [5.5]


# Ends with the monotonic clock (system-wide on Linux) read after its last span.
TIMED_APP = """
import time
from opentelemetry import trace

with trace.get_tracer("shop").start_as_current_span("request"):
    sum(range(100_000))
print(f"last span ended at {time.monotonic():.6f}", flush=True)
"""


def exit_after_last_span_s(tmp_path: Path, extra: dict[str, str]) -> tuple[float, str, str]:
    """(seconds from the app's last span to its exit, stdout, stderr) under opentelemetry-instrument."""
    app = tmp_path / "timed_app.py"
    app.write_text(TIMED_APP)
    process = subprocess.Popen([opentelemetry_instrument(), sys.executable, str(app)], env=clean_env(tmp_path, extra),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    # All of stdout through communicate(): a readline() first may buffer more than its line (the span's JSON,
    # when the app is done by then), which communicate() then never sees.
    stdout, stderr = process.communicate(timeout=60)
    exited = time.monotonic()
    assert process.returncode == 0, stderr
    (ended,) = [line for line in stdout.splitlines() if line.startswith("last span ended at ")]
    return exited - float(ended.rsplit(" ", 1)[1]), stdout, stderr


def test_without_a_collector_the_app_exits_as_soon_as_without_the_instrumentor(tmp_path, fake_host):
    """Metrics to a closed port, spans to the console (the SDK's own OTLP span retries would add seconds of
    jitter to both runs alike): with energy on, the app exits as soon after its last span as with it off,
    and one line says the energy metrics are not exported. Were they sent, the SDK's final metric export
    at exit would retry against the closed port for up to its 10 s timeout."""
    port = closed_port()
    endpoint = f"http://127.0.0.1:{port}"
    base = {"OTEL_JOULES_SYSFS_ROOT": fake_host.sysfs_root, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "OTEL_TRACES_EXPORTER": "console", "OTEL_LOGS_EXPORTER": "none"}
    on_s, on_out, on_err = exit_after_last_span_s(tmp_path, base)
    off_s, off_out, off_err = exit_after_last_span_s(tmp_path, {**base, "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "otel_joules"})
    assert '"energy.joules"' in on_out and '"energy.joules"' not in off_out  # each run is what it claims
    assert on_s - off_s <= 0.5, f"{on_s:.2f} s with the instrumentor, {off_s:.2f} s without"
    assert on_err.splitlines() == [
        f"otel-joules: energy metrics are not exported while nothing answers at {endpoint} (connection to 127.0.0.1:{port} refused)"
    ]
    assert off_err == ""


def test_entry_points_are_registered():
    """pyproject.toml declares both entry points (the zero-code tests fall back to a stand-in until it does)."""
    for group, (name, value) in ENTRY_POINTS.items():
        assert installed_entry_point(group, name) == value, f"add to pyproject.toml: [project.entry-points.{group}] {name} = \"{value}\""


# --- in process ------------------------------------------------------------------------


@pytest.fixture
def instrumentor():
    inst = EnergyInstrumentor()
    yield inst
    if inst.is_instrumented_by_opentelemetry:
        inst.uninstrument()


def test_instrumentor_in_code_with_explicit_providers(instrumentor, powercap, tmp_path):
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    assert tuple(instrumentor.instrumentation_dependencies()) == ()
    instrumentor.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider,
                            sysfs_root=powercap.sysfs_root, gpus=[])
    tracer = tracer_provider.get_tracer("t")
    with tracer.start_as_current_span("measured"):
        powercap.zones["package_0"].advance_joules(2.0)
    instrumentor.instrumentation.metrics.refresh()  # a collection right after the span reads afresh
    metrics = {m.name: m for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    (host_total,) = metrics["energy.components"].data.data_points
    assert host_total.value == 2.0
    instrumentor.uninstrument()
    assert instrumentor.instrumentation is None
    with tracer.start_as_current_span("after"):
        powercap.zones["package_0"].advance_joules(1.0)
    measured, after = exporter.get_finished_spans()
    assert measured.attributes["energy.joules"] == 2.0
    assert not any(key.startswith("energy.") for key in after.attributes)
    tracer_provider.shutdown()
    meter_provider.shutdown()


def test_a_configuration_problem_is_a_warning_not_a_crash(instrumentor, caplog):
    """Raising would stop opentelemetry-instrument from loading the instrumentors after this one."""
    with caplog.at_level(logging.WARNING, logger="otel_joules"):
        instrumentor.instrument(tracer_provider=object())
    assert "energy instrumentation is off: tracer_provider= is a builtins.object, not an OpenTelemetry SDK TracerProvider" in caplog.text
    assert instrumentor.instrumentation is None


def test_the_readmes_console_command_shows_energy_on_the_apps_spans(tmp_path, fake_host):
    """The README's zero-code command for seeing spans, as written there, prints them with their energy."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    (line,) = [l for l in readme.splitlines() if "OTEL_TRACES_EXPORTER=console" in l and l.rstrip().endswith("opentelemetry-instrument python app.py")]
    words = shlex.split(line)
    assignments = dict(w.split("=", 1) for w in words[: words.index("opentelemetry-instrument")])
    app = tmp_path / "app.py"
    app.write_text(API_ONLY_APP)
    env = clean_env(tmp_path, {"OTEL_JOULES_SYSFS_ROOT": fake_host.sysfs_root, **assignments})
    command = [opentelemetry_instrument(), sys.executable, str(app),
               str(fake_host.zones["package_0"].path / "energy_uj"), str(fake_host.zones["dram_0"].path / "energy_uj")]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    assert "app done" in result.stdout
    spans = {}
    decoder = json.JSONDecoder()
    text = result.stdout.replace("app done\n", "")
    position = 0
    while text[position:].strip():
        position += len(text[position:]) - len(text[position:].lstrip())
        span, position = decoder.raw_decode(text, position)
        spans[span["name"]] = span["attributes"]
    assert spans["checkout"]["energy.joules"] == 5.5
    assert spans["checkout"]["energy.source"] == "measured"
    assert spans["checkout"]["energy.package_0.joules"] == 4.5
    assert spans["charge-card"]["energy.joules"] == 0.5
    assert "Connection" not in result.stderr and "Failed to export" not in result.stderr
