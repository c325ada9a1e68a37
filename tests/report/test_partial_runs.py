"""A run whose spans left a domain out (``energy.source = "partial"``) is labelled so by the report.

Real spans on a fake powercap tree whose DRAM counter fails a read while a trace runs, exported
by the JSON-lines exporter and read back by ``otel-joules report``'s builder.
"""

from __future__ import annotations

import json
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_joules import EnergyMeter, EnergySpanProcessor
from otel_joules.exporters.jsonl_exporter import JsonLinesSpanExporter
from otel_joules.report import build_report, format_report, report_dict

from tests.fakes.powercap import make_powercap


def test_a_run_with_a_partial_span_is_labelled_partial_and_names_what_was_left_out(tmp_path: Path) -> None:
    powercap = make_powercap(tmp_path / "sys", "one_socket")
    package, dram = powercap.zones["package_0"], powercap.zones["dram_0"]
    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesSpanExporter(tmp_path / "spans.jsonl")))
    provider.add_span_processor(EnergySpanProcessor(meter, attribution=False))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("healthy"):
        package.advance_joules(2.0)
        dram.advance_joules(1.0)
    dram.write_raw("")  # DRAM cannot be read when the next trace starts and ends
    with tracer.start_as_current_span("degraded"):
        package.advance_joules(2.0)
    provider.shutdown()
    meter.close()

    report = build_report([tmp_path / "spans.jsonl"])
    runs = {run.name: run for run in report.runs}
    assert runs["healthy"].energy_source == "measured" and runs["healthy"].joules == 3.0
    degraded = runs["degraded"]
    assert degraded.energy_source == "partial" and degraded.joules == 2.0
    (note,) = [n for n in degraded.notes if "left out" in n]
    assert "energy.dram_0.missing" in note and "low" in note
    # The package it has is still labelled by how it was obtained.
    assert [(p.kind, p.source) for p in degraded.parts] == [("cpu", "measured")]
    row = next(line for line in format_report(report).splitlines() if "degraded" in line and "trace" in line)
    assert " partial " in row
    assert json.loads(json.dumps(report_dict(report)))["runs"][1]["energy_source"] == "partial"
