"""``otel-joules run -- CMD``: what arrives on the wire, exit codes, signals, unreachable collectors."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from otel_joules.carbon.units import format_co2eq_grams
from tests.fakes.otlp_receiver import OTLPGrpcReceiver, OTLPHttpReceiver, otlp_grpc_receiver, otlp_receiver  # noqa: F401  (fixtures)
from tests.fakes.hwmon import FakeHwmon, acpi_power_meter
from tests.fakes.powercap import FakePowercap, make_powercap
from tests.helpers.processes import ADVANCE, clean_env, closed_port, opentelemetry_instrument, otel_joules_command

PYTHON_NAME = os.path.basename(sys.executable)

# Known energy the child adds: 3 J to the package, 0.5 J to DRAM, 0.25 J to the core
# (inside the package: reported, never added to the total).
PACKAGE_UJ, DRAM_UJ, CORE_UJ = 3_000_000, 500_000, 250_000
TOTAL_JOULES = 3.5


@pytest.fixture
def fake_host(tmp_path: Path) -> FakePowercap:
    return make_powercap(tmp_path / "sys", "one_socket")


def advance_command(pc: FakePowercap) -> list[str]:
    """A child command that adds PACKAGE_UJ, DRAM_UJ and CORE_UJ to the fake counters."""
    zone = pc.zones
    return [sys.executable, "-c", ADVANCE,
            str(zone["package_0"].path / "energy_uj"), str(PACKAGE_UJ),
            str(zone["dram_0"].path / "energy_uj"), str(DRAM_UJ),
            str(zone["core_0"].path / "energy_uj"), str(CORE_UJ)]


def run_cli(args: list[str], env: dict[str, str], timeout: float = 30, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(otel_joules_command("run", *args), env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, **kwargs)


def run_env(tmp_path: Path, pc: FakePowercap, receiver=None, **extra: str) -> dict[str, str]:
    env = clean_env(tmp_path, {"OTEL_JOULES_SYSFS_ROOT": pc.sysfs_root, **extra})
    if receiver is not None:
        env.update(receiver.env())
    return env


def last_points_by_hw_id(receiver, metric: str) -> dict[str, float]:
    """The latest value of each series of ``metric``, by ``hw.id``."""
    values = {}
    for point in receiver.data_points(metric):
        values[point.attributes["hw.id"]] = point.value
    return values


# --- on the wire -----------------------------------------------------------------------


def test_root_span_and_metrics_arrive_with_exact_energy(otlp_receiver, tmp_path, fake_host):
    """Over gRPC and over HTTP/protobuf: one root span with the child's joules, and the hw.* metrics."""
    env = run_env(tmp_path, fake_host, otlp_receiver, SLURM_JOB_ID="4242", SLURM_PROCID="3")
    result = run_cli(["--carbon-intensity", "400", "--", *advance_command(fake_host)], env)
    assert result.returncode == 0, result.stderr

    (span,) = otlp_receiver.wait_for_spans(name=PYTHON_NAME)
    assert span.parent_span_id == ""
    assert span.attributes["energy.joules"] == TOTAL_JOULES
    assert span.attributes["energy.package_0.joules"] == 3.0
    assert span.attributes["energy.dram_0.joules"] == 0.5
    assert span.attributes["energy.core_0.joules"] == 0.25
    assert span.attributes["energy.source"] == "measured"
    assert span.attributes["energy.co2eq.grams"] == pytest.approx(TOTAL_JOULES / 3.6e6 * 400, rel=1e-12)
    assert span.attributes["carbon.intensity.gco2eq_per_kwh"] == 400.0
    assert span.attributes["carbon.intensity.source"] == "explicit"
    assert span.attributes["carbon.pue"] == 1.0
    assert span.attributes["process.exit.code"] == 0
    assert span.attributes["process.executable.name"] == PYTHON_NAME
    assert span.attributes["process.command_line"].startswith(f"{sys.executable} -c ")
    assert isinstance(span.attributes["process.pid"], int)
    assert span.status_code == 0  # unset: success
    resource = span.resource_attributes
    assert resource["service.name"] == PYTHON_NAME
    assert resource["host.name"] == os.uname().nodename
    assert resource["slurm.job.id"] == "4242"
    assert resource["slurm.procid"] == 3

    otlp_receiver.wait_for_data_points("energy.components")
    energy = last_points_by_hw_id(otlp_receiver, "hw.energy")
    assert energy == {"intel-rapl:0": 3.0, "intel-rapl:0:2": 0.5}  # core and uncore are energy.nested
    (host_total,) = otlp_receiver.data_points("energy.components")
    assert host_total.value == TOTAL_JOULES
    assert host_total.resource_attributes["slurm.job.id"] == "4242"
    assert {p.metric_name for p in otlp_receiver.data_points()} >= {"hw.energy", "hw.power", "energy.components", "power.components"}
    assert all(p.unit == "J" for p in otlp_receiver.data_points("hw.energy"))

    # The summary: duration, joules, kWh, gCO2eq, source, destinations.
    assert "exited with code 0" in result.stderr
    assert f"3.5 J = {TOTAL_JOULES / 3.6e6:.4g} kWh" in result.stderr
    # The headline CO2eq is of the share (what `report` counts); the host's interval energy's is beside it, named.
    share_grams = span.attributes["energy.attributed.co2eq.grams"]
    assert f"carbon   {format_co2eq_grams(share_grams)} gCO2eq of the command's share (" in result.stderr
    assert ") at 400 gCO2eq/kWh and PUE 1 (explicit: " in result.stderr
    assert f"; the host's interval energy (3.5 J): {format_co2eq_grams(TOTAL_JOULES / 3.6e6 * 400)} gCO2eq" in result.stderr
    assert "measured: core_0, dram_0, package_0, uncore_0" in result.stderr
    assert f"traces -> otlp {otlp_receiver.env()['OTEL_EXPORTER_OTLP_PROTOCOL']}" in result.stderr
    assert result.stderr.count(": delivered") == 2
    assert f"trace    {span.trace_id}" in result.stderr


def test_service_name_and_headers_from_the_standard_variables(otlp_grpc_receiver, tmp_path, fake_host):
    env = run_env(tmp_path, fake_host, otlp_grpc_receiver, OTEL_SERVICE_NAME="nightly-train",
                  OTEL_EXPORTER_OTLP_HEADERS="x-team=green,authorization=Bearer%20t0k",
                  OTEL_RESOURCE_ATTRIBUTES="deployment.environment=ci")
    result = run_cli(["--span-name", "train", "--", sys.executable, "-c", "pass"], env)
    assert result.returncode == 0, result.stderr
    (span,) = otlp_grpc_receiver.wait_for_spans(name="train")
    assert span.resource_attributes["service.name"] == "nightly-train"
    assert span.resource_attributes["deployment.environment"] == "ci"
    trace_request = next(r for r in otlp_grpc_receiver.requests if r.signal == "traces")
    assert trace_request.headers["x-team"] == "green"
    assert trace_request.headers["authorization"] == "Bearer t0k"


def test_traceparent_puts_an_instrumented_childs_spans_in_the_same_trace(otlp_grpc_receiver, tmp_path, fake_host):
    """The child is an OpenTelemetry-API-only app under opentelemetry-instrument."""
    app = tmp_path / "child_app.py"
    app.write_text(
        "from opentelemetry import trace\n"
        "tracer = trace.get_tracer('child')\n"
        "with tracer.start_as_current_span('child-step'):\n"
        "    with tracer.start_as_current_span('inner'):\n"
        "        pass\n"
    )
    env = run_env(tmp_path, fake_host, otlp_grpc_receiver, OTEL_SERVICE_NAME="wrapped")
    result = run_cli(["--span-name", "job", "--", opentelemetry_instrument(), sys.executable, str(app)], env)
    assert result.returncode == 0, result.stderr
    (root,) = otlp_grpc_receiver.wait_for_spans(name="job")
    (child,) = otlp_grpc_receiver.wait_for_spans(name="child-step")
    (inner,) = otlp_grpc_receiver.wait_for_spans(name="inner")
    assert child.trace_id == root.trace_id == inner.trace_id
    assert child.parent_span_id == root.span_id
    assert inner.parent_span_id == child.span_id
    assert root.parent_span_id == ""
    assert "energy.joules" in child.attributes  # the child's own spans get energy too


def test_child_sees_the_root_spans_traceparent_and_run_joins_its_own_parent(otlp_grpc_receiver, tmp_path, fake_host):
    outer_trace, outer_span = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    env = run_env(tmp_path, fake_host, otlp_grpc_receiver,
                  TRACEPARENT=f"00-{outer_trace}-{outer_span}-01", TRACESTATE="vendor=1")
    seen = tmp_path / "seen.json"
    code = f"import json, os; json.dump({{k: os.environ.get(k) for k in ('TRACEPARENT', 'TRACESTATE')}}, open({str(seen)!r}, 'w'))"
    result = run_cli(["--", sys.executable, "-c", code], env)
    assert result.returncode == 0, result.stderr
    (root,) = otlp_grpc_receiver.wait_for_spans(name=PYTHON_NAME)
    assert root.trace_id == outer_trace
    assert root.parent_span_id == outer_span
    child_env = json.loads(seen.read_text())
    assert child_env["TRACEPARENT"] == f"00-{root.trace_id}-{root.span_id}-01"
    assert child_env["TRACESTATE"] == "vendor=1"


# --- exit codes and signals ------------------------------------------------------------


def test_exit_code_is_the_childs(otlp_grpc_receiver, tmp_path, fake_host):
    env = run_env(tmp_path, fake_host, otlp_grpc_receiver)
    result = run_cli(["--", sys.executable, "-c", "import sys; sys.exit(7)"], env)
    assert result.returncode == 7
    (span,) = otlp_grpc_receiver.wait_for_spans(name=PYTHON_NAME)
    assert span.attributes["process.exit.code"] == 7
    assert span.status_code == 2 and span.status_message == "exited with code 7"
    assert "exited with code 7" in result.stderr


def test_child_killed_by_a_signal_exits_128_plus_n(otlp_grpc_receiver, tmp_path, fake_host):
    env = run_env(tmp_path, fake_host, otlp_grpc_receiver)
    result = run_cli(["--", sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"], env)
    assert result.returncode == 128 + signal.SIGKILL
    (span,) = otlp_grpc_receiver.wait_for_spans(name=PYTHON_NAME)
    assert span.attributes["process.exit.code"] == 137
    assert span.status_message == "killed by SIGKILL"
    assert "was killed by SIGKILL" in result.stderr


SIGNAL_CHILD = """
import signal, sys, time
def stop(signum, frame):
    open(sys.argv[1], "w").write(signal.Signals(signum).name)
    sys.exit(40 + signum)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
open(sys.argv[2], "w").write("ready")
time.sleep(30)
sys.exit(1)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_sigint_are_forwarded_to_the_child(otlp_grpc_receiver, tmp_path, fake_host, signum):
    marker, ready = tmp_path / "got-signal", tmp_path / "ready"
    env = run_env(tmp_path, fake_host, otlp_grpc_receiver)
    process = subprocess.Popen(otel_joules_command("run", "--", sys.executable, "-c", SIGNAL_CHILD, str(marker), str(ready)),
                               env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while not ready.exists():
            assert process.poll() is None and time.monotonic() < deadline, "the child never started"
            time.sleep(0.02)
        started = time.monotonic()
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert marker.read_text() == signal.Signals(signum).name
    assert process.returncode == 40 + signum, stderr
    assert time.monotonic() - started < 5
    (span,) = otlp_grpc_receiver.wait_for_spans(name=PYTHON_NAME)
    assert span.attributes["process.exit.code"] == 40 + signum


# --- delivery problems -----------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_unreachable_endpoint_finishes_fast_with_one_message(tmp_path, fake_host, protocol):
    port = closed_port()
    env = run_env(tmp_path, fake_host, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
                  OTEL_EXPORTER_OTLP_PROTOCOL=protocol)
    started = time.monotonic()
    result = run_cli(["--", *advance_command(fake_host)], env)
    elapsed = time.monotonic() - started
    assert result.returncode == 0
    # Interpreter start-up and imports included; the exports themselves fail in milliseconds.
    assert elapsed < 4.0, f"took {elapsed:.2f} s"
    assert result.stderr.count("could not deliver") == 1, result.stderr
    assert f"connection to 127.0.0.1:{port} refused" in result.stderr
    assert "Traceback" not in result.stderr
    assert "Transient error" not in result.stderr and "Failed to export" not in result.stderr
    # The measurement itself is still reported.
    assert "3.5 J" in result.stderr


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_unreachable_collector_is_one_line_of_the_whole_summary(tmp_path, fake_host, protocol):
    """Nothing listening where spans and metrics go is said once, in one line (it was the data line's
    "failed" for each signal plus a failure line), and the rest of the summary and the exit code stay."""
    port = closed_port()
    env = run_env(tmp_path, fake_host, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
                  OTEL_EXPORTER_OTLP_PROTOCOL=protocol)
    child = tmp_path / "child.py"  # a file, so the summary's first line is one line
    child.write_text(ADVANCE + "raise SystemExit(7)\n")
    command = advance_command(fake_host)
    command[1:3] = [str(child)]
    result = run_cli(["--", *command], env)
    assert result.returncode == 7, result.stderr
    lines = result.stderr.splitlines()
    about_delivery = [line for line in lines if str(port) in line or "refused" in line or "deliver" in line or "fail" in line.lower()]
    assert len(about_delivery) == 1, result.stderr
    (line,) = about_delivery
    assert line.startswith("  data     could not deliver traces ") and " and metrics " in line, line
    assert f"connection to 127.0.0.1:{port} refused" in line and line.endswith("the command's result is not affected")
    # The whole summary, and nothing but the summary: no SDK retry warnings or errors.
    assert "exited with code 7 after" in lines[0]
    assert any(l.startswith("  energy   3.5 J = ") for l in lines), result.stderr
    assert any(l.startswith("  trace    ") for l in lines), result.stderr
    assert all(l.startswith(("otel-joules: ", "  ")) for l in lines), result.stderr


def test_unreachable_endpoint_does_not_change_a_failing_exit_code(tmp_path, fake_host):
    env = run_env(tmp_path, fake_host, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{closed_port()}")
    result = run_cli(["--quiet", "--", sys.executable, "-c", "raise SystemExit(5)"], env)
    assert result.returncode == 5
    assert result.stderr.count("\n") == 1 and "could not deliver" in result.stderr


def test_refusing_receiver_is_reported_with_the_exporters_reason(tmp_path, fake_host):
    with OTLPHttpReceiver(failure=400) as receiver:
        env = run_env(tmp_path, fake_host, receiver)
        result = run_cli(["--", sys.executable, "-c", "pass"], env)
    assert result.returncode == 0
    assert result.stderr.count("could not deliver") == 1
    assert "the exporter reported a failure" in result.stderr
    assert "400" in result.stderr
    assert receiver.rejected >= 2  # spans and metrics were both sent, and refused


# --- local exporters and options -------------------------------------------------------


def test_csv_and_jsonl_exporters_write_the_root_span(tmp_path, fake_host):
    csv_path, jsonl_path = tmp_path / "runs.csv", tmp_path / "runs.jsonl"
    env = run_env(tmp_path, fake_host)
    result = run_cli(["--exporter", f"csv:{csv_path}", "--exporter", f"jsonl:{jsonl_path}", "--span-name", "bench",
                      "--", *advance_command(fake_host)], env)
    assert result.returncode == 0, result.stderr
    (record,) = [json.loads(line) for line in jsonl_path.read_text().splitlines()]
    assert record["name"] == "bench"
    assert record["attributes"]["energy.joules"] == TOTAL_JOULES
    assert record["service_name"] == PYTHON_NAME
    header, row = csv_path.read_text().splitlines()
    assert row.startswith("bench,")
    assert dict(zip(header.split(","), row.split(",")))["energy.joules"] == "3.5"
    assert "metrics not exported" in result.stderr
    assert f"traces -> csv {csv_path}: delivered" in result.stderr


def test_parquet_exporter_writes_the_root_span_to_a_complete_file(tmp_path, fake_host):
    pq = pytest.importorskip("pyarrow.parquet", reason="--exporter parquet needs pyarrow (pip install -e '.[parquet]')")
    env = run_env(tmp_path, fake_host)
    out = tmp_path / "out"
    out.mkdir()
    result = run_cli(["--exporter", f"parquet:{out / 'runs.parquet'}", "--span-name", "bench",
                      "--", *advance_command(fake_host)], env)
    assert result.returncode == 0, result.stderr
    (file,) = list(out.iterdir())  # the journal is gone: only the closed file is left
    assert file.name.startswith("runs-") and file.name.endswith(".parquet")
    (row,) = pq.read_table(file).to_pylist()
    assert (row["name"], row["energy.joules"], row["service_name"]) == ("bench", TOTAL_JOULES, PYTHON_NAME)
    assert json.loads(row["attributes"])["energy.joules"] == TOTAL_JOULES
    assert f"traces -> parquet {out / 'runs.parquet'}: delivered" in result.stderr


def test_console_exporter_writes_to_stderr_and_leaves_stdout_to_the_child(tmp_path, fake_host):
    env = run_env(tmp_path, fake_host)
    result = run_cli(["--exporter", "console", "--", sys.executable, "-c", "print('child output')"], env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "child output\n"
    assert '"energy.joules": 0.0' in result.stderr
    assert '"name": "hw.energy"' in result.stderr


def test_another_otel_joules_process_and_a_rank_change_nothing(otlp_grpc_receiver, tmp_path, fake_host):
    """No election any more: a non-zero LOCAL_RANK, another otel-joules process measuring the same host, and a
    FIFO planted where the old lock file was configured neither block the run nor take energy from its span."""
    fifo = tmp_path / "planted.lock"
    os.mkfifo(fifo)
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    other = subprocess.Popen(otel_joules_command("run", "--exporter", "none", "--quiet", "--", *sleeper),
                             env=run_env(tmp_path, fake_host), stdin=subprocess.DEVNULL)
    try:
        env = run_env(tmp_path, fake_host, otlp_grpc_receiver, LOCAL_RANK="1", OTEL_JOULES_HOST_DOMAINS="auto",
                      OTEL_JOULES_HOST_LOCK=str(fifo))
        result = run_cli(["--", *advance_command(fake_host)], env)
    finally:
        other.terminate()
        other.wait(timeout=10)
    assert result.returncode == 0, result.stderr
    (span,) = otlp_grpc_receiver.wait_for_spans(name=PYTHON_NAME)
    assert span.attributes["energy.joules"] == TOTAL_JOULES
    assert 0 <= span.attributes["energy.attributed.joules"] <= TOTAL_JOULES
    assert span.attributes["energy.attribution"] == "cpu_time_share/capacity"  # the default policy
    assert span.resource_attributes["torchrun.local_rank"] == 1
    otlp_grpc_receiver.wait_for_data_points("energy.components")
    assert [p.value for p in otlp_grpc_receiver.data_points("energy.components")][-1] == TOTAL_JOULES
    assert "share" in result.stderr and "of that is the command's" in result.stderr


def test_command_alone_on_a_written_host_gets_all_of_its_energy(tmp_path, fake_host):
    """A written /proc whose busy time does not move: only the command was busy, so its share is the whole
    host energy (exactly); the summary labels both numbers."""
    procfs = tmp_path / "proc"
    procfs.mkdir()
    (procfs / "stat").write_text("cpu  100 0 50 1000 0 0 0 0 0 0\n")
    env = run_env(tmp_path, fake_host, OTEL_JOULES_PROCFS_ROOT=str(procfs))
    result = run_cli(["--exporter", f"jsonl:{tmp_path / 'run.jsonl'}", "--",
                      sys.executable, "-c", "sum(range(3_000_000))\n" + ADVANCE, *advance_command(fake_host)[3:]], env)
    assert result.returncode == 0, result.stderr
    (record,) = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    attributes = record["attributes"]
    assert attributes["energy.joules"] == TOTAL_JOULES
    assert attributes["energy.attributed.joules"] == pytest.approx(TOTAL_JOULES, abs=1e-9)
    assert attributes["energy.attributed.cpu.joules"] == pytest.approx(3.0, abs=1e-9)
    assert attributes["energy.attributed.memory.joules"] == pytest.approx(0.5, abs=1e-9)
    assert "energy   3.5 J" in result.stderr and "the whole host's during the command" in result.stderr
    assert "share    3.5 J of that is the command's" in result.stderr


def test_command_alone_beside_a_platform_meter_gets_the_platform_s_energy(tmp_path, fake_host):
    """With an ACPI power meter beside the counters (100 W, more than they count), the command alone on the host is
    given the platform's energy, not only the components' (docs/attribution.md), and the summary says which is which."""
    acpi_power_meter(FakeHwmon(fake_host.root), watts=100.0, interval_ms=100)
    procfs = tmp_path / "proc"
    procfs.mkdir()
    (procfs / "stat").write_text("cpu  100 0 50 1000 0 0 0 0 0 0\n")
    env = run_env(tmp_path, fake_host, OTEL_JOULES_PROCFS_ROOT=str(procfs))
    result = run_cli(["--exporter", f"jsonl:{tmp_path / 'run.jsonl'}", "--",
                      sys.executable, "-c", "sum(range(3_000_000))\n" + ADVANCE, *advance_command(fake_host)[3:]], env)
    assert result.returncode == 0, result.stderr
    (record,) = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    attributes = record["attributes"]
    assert attributes["energy.joules"] == TOTAL_JOULES  # the components count; the platform is read beside them
    assert attributes["energy.platform.domain"] == "power_meter_0"
    platform_j = attributes["energy.power_meter_0.joules"]
    assert platform_j > TOTAL_JOULES
    assert attributes["energy.attributed.joules"] == pytest.approx(platform_j, rel=1e-9)
    assert attributes["energy.attributed.cpu.joules"] == pytest.approx(platform_j - 0.5, rel=1e-9)
    assert "share    " in result.stderr and "of the platform's is the command's" in result.stderr
    assert "platform " in result.stderr and "by power_meter_0, the whole box" in result.stderr
    assert "energy   3.5 J" in result.stderr and "the measured components during the command" in result.stderr
    # otel-joules report of the export: the coverage beside the run, in --json and as a note in the text.
    report = subprocess.run(otel_joules_command("report", "--json", str(tmp_path / "run.jsonl")), env=env,
                            capture_output=True, text=True, timeout=60)
    assert report.returncode == 0, report.stderr
    (run,) = json.loads(report.stdout)["runs"]
    assert run["platform_domain"] == "power_meter_0" and run["platform_joules"] == pytest.approx(platform_j)
    assert run["coverage"] == pytest.approx(TOTAL_JOULES / platform_j)
    text = subprocess.run(otel_joules_command("report", str(tmp_path / "run.jsonl")), env=env,
                          capture_output=True, text=True, timeout=60)
    assert f"coverage {TOTAL_JOULES / platform_j:.3f}: the components counted (3.500 J)" in text.stdout, text.stdout


def test_command_not_found_exits_127(tmp_path, fake_host):
    result = run_cli(["--exporter", "none", "--", "no-such-command-otel-joules"], run_env(tmp_path, fake_host))
    assert result.returncode == 127
    assert "no-such-command-otel-joules: command not found" in result.stderr


def test_missing_command_and_bad_exporter_are_usage_errors(tmp_path, fake_host):
    env = run_env(tmp_path, fake_host)
    missing = run_cli(["--exporter", "none"], env)
    assert missing.returncode == 2
    assert "no command given: put it after --" in missing.stderr
    bad = run_cli(["--exporter", "kafka", "--", "true"], env)
    assert bad.returncode == 2
    assert "unknown exporter 'kafka'" in bad.stderr


def test_status_line_on_a_terminal(tmp_path, fake_host):
    """With standard error on a terminal, a status line shows elapsed time and power, then is cleared."""
    env = run_env(tmp_path, fake_host)
    master, slave = pty.openpty()
    zone = fake_host.zones["package_0"].path / "energy_uj"
    # 10 J per 0.1 s on the package for 1.2 s: about 100 W.
    child = ("import sys, time\n"
             "for _ in range(12):\n"
             "    v = int(open(sys.argv[1]).read()); f = open(sys.argv[1], 'r+'); f.write(str(v + 10_000_000)); f.close()\n"
             "    time.sleep(0.1)\n")
    process = subprocess.Popen(otel_joules_command("run", "--exporter", "none", "--", sys.executable, "-c", child, str(zone)),
                               env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    output = b""
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 20)
            if not ready:
                break
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the terminal's other end is closed
                break
            if not chunk:
                break
            output += chunk
    finally:
        os.close(master)
        process.wait(timeout=20)
    text = output.decode()
    assert process.returncode == 0, text
    status_updates = [part for part in text.split("\r\x1b[K") if part.startswith("otel-joules: python")]
    assert status_updates, text
    watts = [float(part.split(", ")[1].split(" W")[0]) for part in status_updates]
    assert any(50 < w < 200 for w in watts), watts
    assert "120 J" in text  # the summary: 12 x 10 J


def test_help_lists_the_options():
    result = subprocess.run(otel_joules_command("run", "--help"), capture_output=True, text=True, timeout=30)
    assert result.returncode == 0
    for option in ("--exporter", "--service-name", "--procfs-root", "--export-timeout", "--status"):
        assert option in result.stdout


COUNT_SIGINT_CHILD = """
import signal, sys, time
received = []
signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
open(sys.argv[1], "w").write("ready")
while not received:
    time.sleep(0.01)
time.sleep(0.5)  # a forwarded duplicate would arrive in this window
sys.exit(50 + len(received))
"""


def test_ctrl_c_on_the_terminal_reaches_the_child_once(tmp_path, fake_host):
    """The terminal already sends Ctrl-C to the child (same process group): run must not send it again."""
    import fcntl
    import termios

    ready = tmp_path / "ready"
    master, slave = pty.openpty()

    def take_terminal() -> None:  # in the new session: make the pty its controlling terminal
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    process = subprocess.Popen(
        otel_joules_command("run", "--exporter", "none", "--no-status", "--", sys.executable, "-c", COUNT_SIGINT_CHILD, str(ready)),
        env=run_env(tmp_path, fake_host), stdin=slave, stdout=slave, stderr=slave, start_new_session=True, preexec_fn=take_terminal,
    )
    os.close(slave)
    output = b""
    try:
        deadline = time.monotonic() + 20
        while not ready.exists():
            assert process.poll() is None and time.monotonic() < deadline, "the child never started"
            time.sleep(0.02)
        os.write(master, b"\x03")  # Ctrl-C, as typed
        while True:
            ready_fds, _, _ = select.select([master], [], [], 20)
            if not ready_fds:
                break
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
    finally:
        os.close(master)
        if process.poll() is None:
            process.wait(timeout=20)
    assert process.returncode == 51, output.decode(errors="replace")


def test_sdk_disabled_still_measures_but_exports_nothing(otlp_grpc_receiver, tmp_path, fake_host):
    env = run_env(tmp_path, fake_host, otlp_grpc_receiver, OTEL_SDK_DISABLED="true")
    result = run_cli(["--", *advance_command(fake_host)], env)
    assert result.returncode == 0, result.stderr
    assert "3.5 J" in result.stderr
    assert "not exported (OTEL_SDK_DISABLED=true)" in result.stderr
    assert otlp_grpc_receiver.requests == []
