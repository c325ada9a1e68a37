"""Every number says what it is, and one run has one total: CarbonTracker runs read back by the report and the parser.

Real CarbonTracker runs on a fake powercap tree (measured), on an empty sysfs (the
estimator) and with a simulated GPU beside measured RAPL (mixed); their logs are read by
``otel-joules report`` (text and JSON) and by our ``parser.print_aggregate``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from otel_joules import EnergyMeter
from otel_joules.carbontracker import parser as our_parser
from otel_joules.carbontracker.tracker import CarbonTracker
from otel_joules.cli.main import main
from otel_joules.report import build_report, format_report
from otel_joules.sensors import rapl

from tests.fakes.powercap import FakePowercap

J_PER_KWH = 3.6e6


@pytest.fixture(autouse=True)
def _no_country(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_JOULES_COUNTRY", "OTEL_JOULES_CARBON_PROVIDERS", "OTEL_JOULES_ELECTRICITYMAPS_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def _estimating_meter(tmp_path: Path) -> EnergyMeter:
    empty = tmp_path / "empty-sys"
    empty.mkdir()
    return EnergyMeter(sysfs_root=str(empty), gpus=[], sample=False)


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        sum(i * i for i in range(2000))


def _estimated_run(tmp_path: Path, epochs: int = 3) -> CarbonTracker:
    # An intensity with more digits than the log's "Average carbon intensity ... 123.46"
    # line keeps: the report must not recompute the grams from that rounded figure.
    tracker = CarbonTracker(
        epochs=epochs,
        meter=_estimating_meter(tmp_path),
        intensity_gco2eq_per_kwh=123.4567,
        log_dir=tmp_path / "logs",
        verbose=0,
    )
    for _ in range(epochs):
        tracker.epoch_start()
        _busy(0.037)  # durations the log rounds to 0.01 s
        tracker.epoch_end()
    return tracker


def test_one_total_per_run_report_tracker_and_parser_agree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tracker = _estimated_run(tmp_path)
    actual = tracker.actual
    assert actual is not None
    report = build_report([tmp_path / "logs"])
    (run,) = report.runs
    kwh, grams, _ = our_parser.aggregate_consumption(tmp_path / "logs")

    # The parser's figures are the report's, exactly (both the logged total) ...
    assert run.energy_kwh == kwh and run.co2eq_grams == grams
    assert run.energy_basis == "logged total"
    # ... and the tracker's, to every digit anyone prints.
    assert f"{run.joules:.3f}" == f"{actual.energy_joules:.3f}"
    assert f"{run.energy_kwh:.12f}" == f"{actual.energy_kwh:.12f}"
    assert f"{run.co2eq_grams:.12f}" == f"{actual.co2eq_grams:.12f}"
    assert run.joules == pytest.approx(actual.energy_joules, rel=1e-6)
    # The epochs' power x rounded durations would have given another total: it is not used.
    recomputed = sum(e.joules for e in run.epochs)
    assert recomputed != pytest.approx(actual.energy_joules, rel=1e-4)
    assert any("rounded to 0.01 s" in note for note in run.notes)

    text = format_report(report)
    assert f"Total: {actual.energy_joules:.3f} J" in text
    printed = our_parser.print_aggregate(tmp_path / "logs")
    assert f"{actual.energy_kwh:.12f}" in printed
    capsys.readouterr()


def test_estimated_carbontracker_run_is_labelled_estimate_everywhere(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _estimated_run(tmp_path, epochs=2)
    logs = str(tmp_path / "logs")

    assert main(["report", "--json", logs]) == 0
    data = json.loads(capsys.readouterr().out)
    (run,) = data["runs"]
    assert run["energy_source"] == "estimate"
    assert [part["energy_source"] for part in run["energy_parts"]] == ["estimate"]
    assert run["energy_parts"][0]["kind"] == "cpu+memory"  # cpu (estimate), dram (estimate)
    assert sum(p["energy_joules"] for p in run["energy_parts"]) == pytest.approx(run["energy_joules"], rel=1e-12)

    assert main(["report", logs]) == 0
    out = capsys.readouterr().out
    header, _, row = out.splitlines()[2:5]
    assert header.split()[:3] == ["run", "kind", "source"]
    assert row.split()[3] == "estimate"
    assert "1 estimate" in out

    text = our_parser.print_aggregate(logs)
    assert "Measured by" not in text
    # Epochs of ~37 ms on the estimator: below its 0.1 s resolution, said after the provenance.
    assert "Estimated (not measured: no readable energy counter) by otel-joules. BELOW RESOLUTION: 1 run(s)" in text
    assert text in capsys.readouterr().out


def test_measured_run_says_measured_and_short_epochs_say_below_resolution(
    powercap: FakePowercap, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Counters that update once a minute, so every epoch here is below their resolution however loaded the box
    # (at RAPL's 1 ms an epoch of a busy box's few milliseconds is not).
    monkeypatch.setattr(rapl, "RAPL_UPDATE_PERIOD_S", 60.0)
    tracker = CarbonTracker(
        epochs=2,
        meter=EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False),
        intensity_gco2eq_per_kwh=100.0,
        log_dir=tmp_path / "logs",
    )
    for _ in range(2):
        tracker.epoch_start()
        powercap.zones["package_0"].advance_joules(60.0)
        powercap.zones["dram_0"].advance_joules(15.0)
        tracker.epoch_end()
    assert all(r.below_resolution for r in tracker.epoch_results)
    console = capsys.readouterr().out
    assert "BELOW RESOLUTION: epoch 1 lasted" in console and "quantised" in console
    assert "BELOW RESOLUTION: epoch 2" in tracker.result.std_log.read_text()
    # A measured run says so as plainly as an estimate does, at the start and under the consumption.
    assert "MEASURED by hardware energy counters: package_0, core_0, uncore_0, dram_0." in console
    assert "MEASURED by hardware energy counters: package_0" in tracker.result.std_log.read_text()
    assert "ESTIMATE" not in console
    assert "MEASURED by hardware energy counters: the consumption above (package_0" in tracker.result.output_log.read_text()

    (run,) = build_report([tmp_path / "logs"]).runs
    assert run.energy_source == "measured" and run.below_resolution
    assert run.joules == pytest.approx(150.0, abs=3.6e-6)  # the logged total (kWh to 12 decimals), though the log's durations read 0.00 s
    assert any("below resolution" in note for note in run.notes)
    assert main(["report", str(tmp_path / "logs")]) == 0
    assert "measured (below resolution)" in capsys.readouterr().out
    printed = our_parser.print_aggregate(tmp_path / "logs")
    assert "Measured by otel-joules." in printed
    assert printed.endswith("BELOW RESOLUTION: 1 run(s) had an epoch shorter than a counter's resolution, "
                            "so their figures are quantised, not exact.")


def test_simulated_gpu_beside_measured_cpu_is_mixed(powercap: FakePowercap, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tracker = CarbonTracker(
        epochs=1,
        meter=EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False),
        intensity_gco2eq_per_kwh=100.0,
        log_dir=tmp_path / "logs",
        sim_gpu="Fake A100",
        sim_gpu_watts=200.0,
        verbose=0,
    )
    tracker.epoch_start()
    powercap.zones["package_0"].advance_joules(60.0)
    time.sleep(0.05)
    tracker.epoch_end()
    (run,) = build_report([tmp_path / "logs"]).runs
    assert run.energy_source == "mixed"
    assert {p.kind: p.source for p in run.parts} == {"gpu": "estimate", "cpu+memory": "measured"}
    text = our_parser.print_aggregate(tmp_path / "logs")
    assert text.endswith("Partly estimated (1 of 1 run(s) include estimates) by otel-joules.")
    capsys.readouterr()


def test_a_span_below_resolution_is_labelled_in_the_table_json_and_plot_notes(tmp_path: Path) -> None:
    span = {
        "name": "true", "trace_id": "2" * 32, "span_id": "3" * 16, "parent_span_id": None,
        "start_time_unix_nano": 1_700_000_000_000_000_000, "end_time_unix_nano": 1_700_000_000_001_000_000,
        "service_name": "true",
        "attributes": {"energy.joules": 0.3, "energy.watts": 300.0, "energy.source": "measured",
                       "energy.package_0.joules": 0.3, "energy.below_resolution": True},
    }
    (tmp_path / "runs.jsonl").write_text(json.dumps(span) + "\n")
    report = build_report([tmp_path / "runs.jsonl"])
    (run,) = report.runs
    assert run.below_resolution and run.energy_source == "measured"
    text = format_report(report)
    assert "measured (below resolution)" in text.splitlines()[4]
    assert "1 run(s) below a counter's resolution (quantised)" in text
    assert any("quantised (below resolution)" in note for note in run.notes)


def test_tracker_spans_and_logs_count_once_and_the_epochs_total_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from otel_joules.exporters import JsonLinesSpanExporter

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesSpanExporter(tmp_path / "spans.jsonl")))
    tracker = CarbonTracker(
        epochs=2,
        meter=_estimating_meter(tmp_path),
        intensity_gco2eq_per_kwh=100.0,
        log_dir=tmp_path / "logs",
        tracer_provider=provider,
    )
    for _ in range(2):
        tracker.epoch_start()
        _busy(0.03)
        tracker.epoch_end()
        time.sleep(0.05)  # between epochs: inside the training span, not in carbontracker's total
    provider.shutdown()
    actual = tracker.actual
    assert actual is not None
    console = capsys.readouterr().out
    # The consumption block is carbontracker's format; the line right after it labels it.
    block_end = console.index("Actual consumption for 2 epoch(s):")
    assert "ESTIMATE, not a measurement: the consumption above includes estimates" in console[block_end:]

    report = build_report([tmp_path / "logs", tmp_path / "spans.jsonl"])
    (run,) = report.runs
    assert run.kind == "trace" and run.energy_source == "estimate"
    assert any(s.path.endswith("_carbontracker.log") for s in report.skipped)  # the same run, counted once
    assert any(f"the epochs add up to {actual.energy_joules:.3f} J (what carbontracker prints" in n for n in run.notes)


def test_the_trackers_share_is_logged_and_shown_beside_the_hosts_total(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The tracker's summary gives the host's consumption and, labelled, this process's share of it; the
    output log keeps the share, and the report shows it beside the total it counts (the host's, as logged)."""
    tracker = _estimated_run(tmp_path)
    output_log = tracker.result.output_log.read_text()
    (line,) = [l for l in output_log.splitlines() if "Of which this process's share:" in l]
    logged_share_kwh = float(line.split("share: ")[1].split()[0])
    (run,) = build_report([tmp_path / "logs"]).runs
    assert run.energy_basis == "logged total"
    assert run.process_share_joules == pytest.approx(logged_share_kwh * J_PER_KWH / run.pue, rel=1e-9)
    assert 0 < run.process_share_joules <= run.joules
    assert main(["report", "--json", str(tmp_path / "logs")]) == 0
    (data,) = json.loads(capsys.readouterr().out)["runs"]
    assert data["process_share_joules"] == pytest.approx(run.process_share_joules, rel=1e-12)
    assert main(["report", str(tmp_path / "logs")]) == 0
    assert f"this process's share of it (its CPU time's part, as logged) was {run.process_share_joules:.3f} J" in capsys.readouterr().out
    # carbontracker's own total is untouched by the extra line: one total per run.
    kwh, _, _ = our_parser.aggregate_consumption(tmp_path / "logs")
    assert kwh == run.energy_kwh


def test_the_platform_reading_is_the_one_the_span_names_never_one_guessed_from_an_id(tmp_path: Path) -> None:
    """Coverage compares the components with the reading ``energy.platform.domain`` names (the meter chose it by its
    sensor's breadth), whatever the ids: here a BMC's beside a narrower ACPI power meter. A span that names none
    gets no coverage, though it carries a ``power_meter_*`` reading: the report does not rank readings by id."""

    def span(trace: str, named: str | None) -> str:
        attributes = {
            "energy.joules": 30.0, "energy.watts": 30.0, "energy.source": "measured",
            "energy.domain_kinds": ["package_0:cpu"], "energy.package_0.joules": 30.0,
            "energy.bmc_redfish.joules": 60.0, "energy.power_meter_0.joules": 50.0,
        }
        if named is not None:
            attributes["energy.platform.domain"] = named
        return json.dumps({
            "name": "job", "trace_id": trace * 32, "span_id": "3" * 16, "parent_span_id": None,
            "start_time_unix_nano": 1_700_000_000_000_000_000, "end_time_unix_nano": 1_700_000_001_000_000_000,
            "service_name": "job", "attributes": attributes,
        }) + "\n"

    (tmp_path / "runs.jsonl").write_text(span("1", "bmc_redfish") + span("2", None) + span("4", "package_0"))
    runs = {run.run_id[0]: run for run in build_report([tmp_path / "runs.jsonl"]).runs}
    assert (runs["1"].platform, runs["1"].coverage) == (("bmc_redfish", 60.0), pytest.approx(0.5))
    assert runs["2"].platform is None and runs["2"].coverage is None
    assert runs["4"].platform is None  # a counted component is not a reading beside the components
