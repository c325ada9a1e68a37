"""``otel-joules report``: one aggregate over carbontracker logs, CSV, JSON-lines and real OTLP JSON files.

Span files are written by the real exporters (ours and opentelemetry-exporter-otlp-json-file)
from spans with known energy attributes; carbontracker logs by our writer and by
carbontracker 2.4.7's own logging code. Every total is checked against the sum it must be.
"""

from __future__ import annotations

import base64
import json
import re
import sys
import time
from pathlib import Path

import pytest
from tests.helpers.carbontracker_oracle import carbontracker_logger, log_components, log_epoch
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from tests.fakes.powercap import make_powercap

from otel_joules import EnergyMeter
from otel_joules.carbon import lookup_country
from otel_joules.carbontracker.logs import CarbonTrackerLogWriter
from otel_joules.carbontracker.tracker import CarbonTracker
from otel_joules.cli.main import main
from otel_joules.exporters.csv_exporter import CsvSpanExporter
from otel_joules.exporters.jsonl_exporter import JsonLinesSpanExporter
from otel_joules.report import build_report, format_report, report_dict

J_PER_KWH = 3.6e6
T0 = 1_700_000_000_000_000_000  # span times, ns


@pytest.fixture(autouse=True)
def _no_country(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_JOULES_COUNTRY", raising=False)


def _provider(*exporters) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": "trainer"}))
    for exporter in exporters:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def _span(tracer, name: str, start_s: float, end_s: float, attributes: dict, parent=None):
    ctx = trace.set_span_in_context(parent, otel_context.Context()) if parent is not None else otel_context.Context()
    span = tracer.start_span(name, context=ctx, start_time=T0 + int(start_s * 1e9), attributes=attributes)
    return span


def _end(span, end_s: float) -> None:
    span.end(end_time=T0 + int(end_s * 1e9))


def write_trace_a(provider: TracerProvider) -> str:
    """training 1000 J (PUE 1.5, 300 g/kWh) > epochs 400 J and 500 J > a batch of 50 J: only 1000 J count."""
    tracer = provider.get_tracer("test")
    root = _span(tracer, "training", 0, 10, {
        "energy.joules": 1000.0, "carbon.pue": 1.5, "carbon.intensity.gco2eq_per_kwh": 300.0,
        "energy.co2eq.grams": 999.0, "energy.source": "measured",
    })
    epoch1 = _span(tracer, "epoch", 0, 4, {"energy.joules": 400.0, "training.epoch": 1}, parent=root)
    batch = _span(tracer, "batch", 1, 2, {"energy.joules": 50.0}, parent=epoch1)
    _end(batch, 2)
    _end(epoch1, 4)
    epoch2 = _span(tracer, "epoch", 4, 9, {"energy.joules": 500.0, "training.epoch": 2}, parent=root)
    _end(epoch2, 9)
    _end(root, 10)
    return format(root.get_span_context().trace_id, "032x")


def write_trace_b(provider: TracerProvider) -> str:
    """A root without energy and two sibling steps of 30 J and 70 J with recorded grams."""
    tracer = provider.get_tracer("test")
    root = _span(tracer, "job", 20, 30, {})
    for i, (joules, grams) in enumerate(((30.0, 0.002), (70.0, 0.003))):
        step = _span(tracer, "step", 20 + i, 21 + i, {"energy.joules": joules, "energy.co2eq.grams": grams}, parent=root)
        _end(step, 21 + i)
    _end(root, 30)
    return format(root.get_span_context().trace_id, "032x")


def write_trace_c(provider: TracerProvider) -> str:
    """One span of 360 J and nothing recorded about carbon."""
    span = _span(provider.get_tracer("test"), "inference", 40, 41, {"energy.joules": 360.0})
    _end(span, 41)
    return format(span.get_span_context().trace_id, "032x")


def write_our_log(log_dir: Path) -> None:
    """Our writer: epochs of 2 s at 150 W and 3 s at 100 W (600 J), PUE 1.58, 200 g/kWh."""
    writer = CarbonTrackerLogWriter(log_dir, clock=lambda: 1_700_000_000.0, run_id=7)
    writer.write_header({"cpu": ["cpu:0"]})
    writer.write_epoch(1, duration_seconds=2.0, power_watts={"cpu": 150.0})
    writer.write_epoch(2, duration_seconds=3.0, power_watts={"cpu": 100.0})
    writer.write_average_intensity(200.0)
    writer.write_consumption("actual", epochs=2, duration_seconds=5.0, energy_joules=600.0 * 1.58, co2eq_grams=0.05)


@pytest.fixture
def mixed(tmp_path: Path) -> dict:
    otlp = tmp_path / "otlp" / "traces.jsonl"
    otlp.parent.mkdir()
    a_provider = _provider(FileSpanExporter(str(otlp)))
    trace_a = write_trace_a(a_provider)
    a_provider.shutdown()
    b_provider = _provider(CsvSpanExporter(tmp_path / "spans.csv"))
    trace_b = write_trace_b(b_provider)
    b_provider.shutdown()
    c_provider = _provider(JsonLinesSpanExporter(tmp_path / "spans.jsonl"))
    trace_c = write_trace_c(c_provider)
    c_provider.shutdown()
    write_our_log(tmp_path / "logs")
    return {"root": tmp_path, "a": trace_a, "b": trace_b, "c": trace_c}


def _runs(report) -> dict:
    return {run.run_id: run for run in report.runs}


# ------------------------------------------------------------------------- totals


def test_mixed_inputs_add_up_exactly(mixed) -> None:
    root = mixed["root"]
    report = build_report([root / "otlp", root / "spans.csv", root / "spans.jsonl", root / "logs"])
    runs = _runs(report)
    assert report.skipped == ()
    assert len(report.runs) == 4

    a = runs[mixed["a"]]
    assert a.kind == "trace" and a.name == "training" and a.service_name == "trainer"
    assert a.joules == 1000.0 and a.spans_counted == 1  # not + 400 + 500 + 50
    assert (a.pue, a.pue_origin) == (1.5, "recorded")
    assert a.energy_kwh == pytest.approx(1000.0 * 1.5 / J_PER_KWH, rel=1e-12)
    assert (a.intensity_gco2eq_per_kwh, a.intensity_source) == (300.0, "recorded")
    assert a.co2eq_grams == pytest.approx(1000.0 * 1.5 / J_PER_KWH * 300.0, rel=1e-12)
    assert [(e.epoch, e.joules, e.duration_s) for e in a.epochs] == [(1, 400.0, 4.0), (2, 500.0, 5.0)]
    assert a.duration_s == 10.0
    assert a.energy_source == "measured"

    b = runs[mixed["b"]]
    assert b.name == "job" and b.joules == 100.0 and b.spans_counted == 2
    assert (b.pue, b.pue_origin) == (1.0, "default")
    assert b.intensity_source == "recorded co2eq"
    assert b.co2eq_grams == pytest.approx(0.005, rel=1e-12)
    assert any("2 top-level spans" in note for note in b.notes)

    c = runs[mixed["c"]]
    assert c.joules == 360.0
    assert (c.intensity_gco2eq_per_kwh, c.intensity_source) == (445.0, "world_average")
    assert c.co2eq_grams == pytest.approx(360.0 / J_PER_KWH * 445.0, rel=1e-12)

    (log,) = [run for run in report.runs if run.kind == "carbontracker"]
    assert log.name == "otel-joules"
    # One total per run: the tracker's logged actual consumption (kWh with PUE, to the 12
    # decimals it printed, and its grams), not a recomputation from the log's epochs.
    assert log.energy_basis == "logged total"
    assert log.energy_kwh == 0.000263333333
    assert log.joules == pytest.approx(0.000263333333 * J_PER_KWH / 1.58, rel=1e-15)
    assert log.joules == pytest.approx(600.0, rel=1e-8)
    assert [(e.epoch, e.duration_s, e.joules) for e in log.epochs] == [(1, 2.0, 300.0), (2, 3.0, 300.0)]
    assert (log.pue, log.pue_origin) == (1.58, "recorded")
    assert log.co2eq_grams == 0.05
    assert log.energy_source == "measured"
    assert log.duration_s == 5.0

    # Traces' shares and a carbontracker log's host energy are totalled apart: there is no one total.
    assert report.mixed_kinds
    assert report.total_joules is report.total_kwh is report.total_co2eq_grams is None and report.equivalents == ()
    traces, logs = report.totals
    assert (traces.kind, traces.runs, logs.kind, logs.runs) == ("trace", 3, "carbontracker", 1)
    assert traces.joules == pytest.approx(1000.0 + 100.0 + 360.0, rel=1e-12)
    assert logs.joules == log.joules
    assert traces.kwh == pytest.approx((1500.0 + 100.0 + 360.0) / J_PER_KWH, rel=1e-12)
    assert logs.kwh == 0.000263333333
    trace_grams = 1500.0 / J_PER_KWH * 300.0 + 0.005 + 360.0 / J_PER_KWH * 445.0
    assert traces.co2eq_grams == pytest.approx(trace_grams, rel=1e-12) and logs.co2eq_grams == 0.05
    car = [e for e in traces.equivalents if e.key == "km_by_car"][0]
    assert car.amount == pytest.approx(trace_grams / 106.8, rel=1e-12)


def test_a_trace_in_two_exports_counts_once(tmp_path) -> None:
    provider = _provider(FileSpanExporter(str(tmp_path / "otlp.json")), CsvSpanExporter(tmp_path / "spans.csv"))
    trace_a = write_trace_a(provider)
    provider.shutdown()
    report = build_report([tmp_path])
    (run,) = report.runs
    assert run.run_id == trace_a
    assert run.joules == 1000.0
    assert set(run.sources) == {str(tmp_path / "otlp.json"), str(tmp_path / "spans.csv")}
    # Both copies carry the carbon attributes; whichever is kept, they are used.
    assert run.intensity_source == "recorded" and run.pue == 1.5


def test_options_override_what_runs_recorded(mixed) -> None:
    root = mixed["root"]
    report = build_report([root], intensity_gco2eq_per_kwh=100.0)
    for run in report.runs:
        assert run.intensity_gco2eq_per_kwh == 100.0 and run.intensity_source == "explicit"
        assert run.co2eq_grams == pytest.approx(run.energy_kwh * 100.0, rel=1e-12)
    dk = lookup_country("DK")[0].gco2eq_per_kwh
    report = build_report([root], country="DK")
    assert {run.intensity_source for run in report.runs} == {"offline"}
    for totals in report.totals:
        assert totals.co2eq_grams == pytest.approx(totals.kwh * dk, rel=1e-12)
    report = build_report([root], pue=2.0)
    assert [t.kwh for t in report.totals] == pytest.approx([2.0 * 1460.0 / J_PER_KWH, 2.0 * 600.0 / J_PER_KWH], rel=1e-8)
    b = _runs(report)[mixed["b"]]
    # With another PUE the recorded grams no longer apply: the fallback intensity does.
    assert (b.intensity_source, b.co2eq_grams) == ("world_average", pytest.approx(200.0 / J_PER_KWH * 445.0))


def test_carbontrackers_own_logs_have_device_averages_summed(tmp_path) -> None:
    with carbontracker_logger(tmp_path / "ct", logger_id="5") as logger:
        log_components(logger, {"gpu": ["Tesla T4", "Tesla T4"], "cpu": ["cpu:0", "dram:0"]})
        # carbontracker 2.x: all samples of all devices in one list -> it logs their mean.
        log_epoch(logger, 1, 2.0, {"gpu": [300.0, 100.0, 300.0, 100.0], "cpu": [60.0, 20.0]})
        log_epoch(logger, 2, 1.0, {"gpu": [300.0, 100.0], "cpu": []})  # cpu: None
    std = next((tmp_path / "ct").glob("*_carbontracker.log")).read_text()
    assert "for gpu: 200.0" in std and "for cpu: 40.0" in std
    (run,) = build_report([tmp_path / "ct"]).runs
    assert run.name == "carbontracker"
    assert [e.joules for e in run.epochs] == [400.0 * 2.0 + 80.0 * 2.0, 400.0 * 1.0]
    assert run.joules == 1360.0
    assert run.intensity_source == "world_average"  # the log states no intensity
    assert run.co2eq_grams == pytest.approx(1360.0 * 1.58 / J_PER_KWH * 445.0, rel=1e-12)
    assert any("average over the devices of cpu, gpu" in note for note in run.notes)
    assert any("1 component-epoch(s) without a power value" in note for note in run.notes)


# ------------------------------------------------------------------ corrupt inputs


def test_corrupt_and_unknown_files_are_skipped_with_a_reason(tmp_path) -> None:
    provider = _provider(JsonLinesSpanExporter(tmp_path / "good.jsonl"))
    write_trace_c(provider)
    provider.shutdown()
    with open(tmp_path / "good.jsonl", "a") as handle:
        handle.write('{"name":"cut","trace_id":"ab')  # a writer killed mid-line
    (tmp_path / "notes.txt").write_text("hello\n")
    (tmp_path / "blob.bin").write_bytes(b"\x89\x00\x01binary")
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "otlp.json").write_text('{"resourceSpans": "oops"}\n')
    (tmp_path / "metrics.json").write_text('{"resourceMetrics": []}\n')
    (tmp_path / "bad.csv").write_text("name,trace_id\nx,y\n")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "1.1_2024-01-01T000000Z_carbontracker.log").write_text("2024-01-01 00:00:00 - Epoch 1:\n")
    (logs / "2.2_2024-01-01T000000Z_carbontracker.log").write_text(
        "2024-01-01 00:00:00 - carbontracker version 2.4.7\n2024-01-01 00:00:00 - Average power usage (W) for cpu: abc\n"
    )
    (logs / "2.2_2024-01-01T000000Z_carbontracker_output.log").write_text("2024-01-01 00:00:00 - CarbonTracker: x\n")

    report = build_report([tmp_path, tmp_path / "missing.csv"])
    (run,) = report.runs
    assert run.joules == 360.0
    reasons = {item.path: item.reason for item in report.skipped}
    assert "not valid JSON" in reasons[f"{tmp_path / 'good.jsonl'}:2"]
    assert "unknown format" in reasons[str(tmp_path / "notes.txt")]
    assert "binary" in reasons[str(tmp_path / "blob.bin")]
    assert "empty" in reasons[str(tmp_path / "empty.csv")]
    assert "resourceSpans is not a list" in reasons[f"{tmp_path / 'otlp.json'}:1"]
    assert "metrics or logs" in reasons[str(tmp_path / "metrics.json")]
    assert "unknown format" in reasons[str(tmp_path / "bad.csv")]
    assert "does not exist" in reasons[str(tmp_path / "missing.csv")]
    log_reasons = [item.reason for item in report.skipped if item.path in (str(logs), str(logs / "2.2_2024-01-01T000000Z_carbontracker.log"))]
    assert any("1.1_2024-01-01T000000Z_carbontracker_output.log" in r and "missing" in r for r in log_reasons)
    assert any("cannot read the power of 'cpu'" in r for r in log_reasons)


def test_many_bad_lines_are_counted_not_listed(tmp_path) -> None:
    lines = ['{"name":"a","trace_id":"%032x","span_id":"%016x","parent_span_id":null,"attributes":{"energy.joules":1.0}}' % (1, 1)]
    lines += ["{broken"] * 10
    (tmp_path / "spans.jsonl").write_text("\n".join(lines) + "\n")
    report = build_report([tmp_path])
    assert report.total_joules == 1.0
    assert len(report.skipped) == 4
    assert report.skipped[-1].reason == "7 more unreadable lines skipped"


def test_pretty_printed_otlp_document_with_base64_ids_and_odd_values(tmp_path) -> None:
    trace_id = bytes(range(16))
    document = {
        "resourceSpans": [{
            "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]},
            "scopeSpans": [{"spans": [{
                "traceId": base64.b64encode(trace_id).decode(),
                "spanId": base64.b64encode(bytes(range(8))).decode(),
                "name": "work",
                "startTimeUnixNano": "1700000000000000000",
                "endTimeUnixNano": "1700000002000000000",
                "attributes": [
                    {"key": "energy.joules", "value": {"doubleValue": 12}},
                    {"key": "energy.watts", "value": {"doubleValue": "NaN"}},
                    {"key": "training.epoch", "value": {"intValue": "3"}},
                    {"key": "tags", "value": {"arrayValue": {"values": [{"stringValue": "x"}]}}},
                ],
            }]}],
        }]
    }
    (tmp_path / "trace.json").write_text(json.dumps(document, indent=2))
    (run,) = build_report([tmp_path / "trace.json"]).runs
    assert run.run_id == trace_id.hex()
    assert run.joules == 12.0 and run.duration_s == 2.0 and run.service_name == "svc"


# ---------------------------------------------------------------- tracker end to end


def test_tracker_spans_and_logs_report_the_trackers_numbers(tmp_path) -> None:
    pc = make_powercap(tmp_path / "sys", "one_socket")
    (tmp_path / "out").mkdir()
    provider = _provider(FileSpanExporter(str(tmp_path / "out" / "otlp.jsonl")), CsvSpanExporter(tmp_path / "out" / "spans.csv"))
    tracker = CarbonTracker(
        epochs=3, log_dir=tmp_path / "out" / "logs", meter=EnergyMeter(sysfs_root=pc.sysfs_root, gpus=[], sample=False),
        intensity_gco2eq_per_kwh=250.0, tracer_provider=provider, verbose=0,
    )
    for _ in range(3):
        tracker.epoch_start()
        pc.zones["package_0"].advance_joules(60.0)
        pc.zones["dram_0"].advance_joules(15.0)
        time.sleep(0.1)
        tracker.epoch_end()
    provider.shutdown()
    actual = tracker.actual
    report = build_report([tmp_path / "out"])
    # The log names the trace: one training, counted once (from its spans).
    (span_run,) = report.runs
    assert span_run.kind == "trace" and span_run.run_id == tracker.result.trace_id
    (same,) = report.skipped
    assert same.path == str(tracker.result.std_log)
    assert same.reason == f"same training as trace {span_run.run_id}, whose spans are counted instead"
    (log_run,) = build_report([tmp_path / "out" / "logs"]).runs
    assert span_run.joules == pytest.approx(actual.energy_joules, rel=1e-12) == pytest.approx(225.0)
    assert span_run.energy_kwh == pytest.approx(actual.energy_kwh, rel=1e-12)
    assert span_run.co2eq_grams == pytest.approx(actual.co2eq_grams, rel=1e-12)
    assert [e.joules for e in span_run.epochs] == pytest.approx([75.0] * 3)
    assert [e.epoch for e in span_run.epochs] == [1, 2, 3]
    # The log states durations to 0.01 s: its energy is within that rounding (5 ms of 100 ms).
    assert log_run.joules == pytest.approx(225.0, rel=0.06)
    assert log_run.co2eq_grams == pytest.approx(log_run.joules * 1.58 / J_PER_KWH * 250.0, rel=1e-9)


# ------------------------------------------------------------------------------ CLI


def test_cli_text_and_json(mixed, capsys) -> None:
    root = mixed["root"]
    (root / "junk.txt").write_text("not a span\n")
    assert main(["report", str(root)]) == 0
    captured = capsys.readouterr()
    assert "otel-joules report: 4 run(s)" in captured.out
    # One line per kind, never their sum (2060 J).
    assert "2060.000" not in captured.out and "Total:" not in captured.out
    assert "  traces, 3 run(s): 1460.000 J" in captured.out and "  carbontracker logs, 1 run(s): 600.000 J" in captured.out
    assert "km travelled by car" in captured.out
    assert "topmost energy.attributed.joules" in captured.out and "interval energy" in captured.out
    assert f"skipped {root / 'junk.txt'}: unknown format" in captured.err

    assert main(["report", str(root), "--json", "--pue", "1.2"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data == report_dict(build_report([root], pue=1.2))
    assert data["totals"]["energy_joules"] is None and data["totals"]["energy_kwh"] is None
    by_kind = data["totals"]["by_kind"]
    assert by_kind["trace"]["energy_joules"] == pytest.approx(1460.0)
    assert by_kind["carbontracker"]["energy_kwh"] == pytest.approx(600.0 * 1.2 / J_PER_KWH, rel=1e-8)
    assert {run["kind"] for run in data["runs"]} == {"trace", "carbontracker"}
    assert data["skipped"] == [{"path": str(root / "junk.txt"), "reason": data["skipped"][0]["reason"]}]


def test_cli_nothing_readable_and_bad_options(tmp_path, capsys) -> None:
    (tmp_path / "junk.txt").write_text("x\n")
    for extra in ([], ["--json"]):
        assert main(["report", str(tmp_path), *extra]) == 1
        captured = capsys.readouterr()
        assert captured.out == ""  # no all-zero table or JSON
        assert f"skipped {tmp_path / 'junk.txt'}: unknown format" in captured.err
        assert "nothing to report: no readable run in the paths given (1 input(s) skipped" in captured.err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["report", str(empty)]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and f"no file found in {str(empty)!r}" in captured.err
    # The advice it prints works: the command it suggests gives a report.
    advice = "`otel-joules run --exporter jsonl:runs.jsonl -- CMD` then `otel-joules report runs.jsonl`"
    assert advice in captured.err
    for argv in (["--pue", "0.5"], ["--intensity", "-1"], ["--intensity", "5", "--country", "DK"], ["--pue", "x"]):
        with pytest.raises(SystemExit) as exited:
            main(["report", str(tmp_path), *argv])
        assert exited.value.code == 2
    capsys.readouterr()
    assert main(["report", str(tmp_path), "--country", "XX"]) == 2
    assert "XX" in capsys.readouterr().err


def test_cli_plot_is_a_real_png(mixed, tmp_path, capsys) -> None:
    from matplotlib import image

    target = tmp_path / "energy.png"
    assert main(["report", str(mixed["root"]), "--plot", str(target)]) == 0
    data = target.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = image.imread(str(target))
    assert pixels.shape[0] > 300 and pixels.shape[1] > 600
    assert pixels[..., :3].std() > 0.05  # something was drawn
    assert "plot written to" in capsys.readouterr().err


def test_cli_plot_without_matplotlib_says_what_to_install(mixed, tmp_path, capsys, monkeypatch) -> None:
    for name in ("matplotlib.backends.backend_agg", "matplotlib.figure", "matplotlib.ticker"):
        monkeypatch.setitem(sys.modules, name, None)
    assert main(["report", str(mixed["root"]), "--plot", str(tmp_path / "x.png")]) == 2
    assert "pip install 'otel-joules[plot]'" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_text_report_lists_runs_and_notes(mixed) -> None:
    report = build_report([mixed["root"]])
    text = format_report(report)
    # One duration form in every row (never 0.526s beside 0:00:02): H:MM:SS.mmm.
    assert len(re.findall(r"(?<![\d.:])\d+:\d\d:\d\d\.\d{3}(?![\d.])", text)) == len(report.runs) >= 2
    assert not re.search(r"\d\.\d+s\b", text)
    assert f"{mixed['a'][:12]} training (trainer)" in text
    assert "(otel-joules)" in text
    assert "2 top-level spans with energy summed" in text
    assert "* no PUE recorded and no --pue given: 1.0" in text


def test_report_skips_a_span_whose_grandparent_carries_energy(tmp_path) -> None:
    # training (100 J) > step (no energy attribute) > kernel (40 J): only the 100 J count,
    # the kernel's joules are inside the training span's.
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from otel_joules.exporters.jsonl_exporter import JsonLinesSpanExporter
    from otel_joules.report import build_report

    t0 = 1_700_000_000_000_000_000
    path = tmp_path / "spans.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesSpanExporter(path)))
    tracer = provider.get_tracer("test")

    def start(name: str, at_s: float, attributes: dict, parent=None):
        ctx = trace.set_span_in_context(parent, otel_context.Context()) if parent is not None else otel_context.Context()
        return tracer.start_span(name, context=ctx, start_time=t0 + int(at_s * 1e9), attributes=attributes)

    training = start("training", 0, {"energy.joules": 100.0})
    step = start("step", 1, {}, parent=training)
    kernel = start("kernel", 2, {"energy.joules": 40.0}, parent=step)
    for span, end_s in ((kernel, 3), (step, 4), (training, 5)):
        span.end(end_time=t0 + int(end_s * 1e9))
    provider.shutdown()

    (run,) = build_report([path]).runs
    assert (run.name, run.joules, run.spans_counted) == ("training", 100.0, 1)
