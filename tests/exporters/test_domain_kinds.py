"""energy.domain_kinds survives every file export: CSV, JSON lines, OTLP/JSON and Parquet keep it, as an array (a
plural value), so the report classifies an exported span's domains by their kinds, not by their ids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_joules import EnergyMeter
from otel_joules.exporters import CsvSpanExporter, JsonLinesSpanExporter, OtlpFileSpanExporter, ParquetSpanExporter
from otel_joules.report.readers import read_inputs
from otel_joules.semconv import ENERGY_DOMAIN_KINDS
from otel_joules.meter.interval import Interval
from otel_joules.tracing.attributes import span_attributes

from tests.fakes.powercap import make_powercap
from tests.helpers.known_spans import make_provider


def _export_one_span(tmp_path: Path, exporter: object) -> list[str]:
    """One span with a real meter's attributes (fake powercap, two sockets and psys) through ``exporter``;
    returns the span's energy.domain_kinds."""
    pc = make_powercap(tmp_path / "sys", "two_sockets")
    meter = EnergyMeter(sysfs_root=pc.sysfs_root, gpus=[], sample=False)
    try:
        start = meter.snapshot()
        pc.zones["package_1"].advance_joules(3.0)
        attributes = span_attributes(Interval.of_measurement(meter.measure(start, meter.snapshot())), None)
    finally:
        meter.close()
    provider = make_provider(SimpleSpanProcessor(exporter))  # type: ignore[arg-type]
    provider.get_tracer("t").start_span("step", attributes=attributes).end()
    provider.shutdown()
    value = attributes[ENERGY_DOMAIN_KINDS]
    assert isinstance(value, tuple)
    return list(value)


@pytest.mark.parametrize(
    ("exporter_type", "name"),
    [(CsvSpanExporter, "spans.csv"), (JsonLinesSpanExporter, "spans.jsonl"), (OtlpFileSpanExporter, "spans.otlp.jsonl")],
)
def test_the_text_exports_keep_the_domain_kinds(tmp_path: Path, exporter_type: type, name: str) -> None:
    path = tmp_path / name
    written = _export_one_span(tmp_path, exporter_type(path))
    # psys beside the packages adds to no kind, core does not either: neither is listed.
    assert sorted(written) == ["dram_0:memory", "dram_1:memory", "package_0:cpu", "package_1:cpu"]
    (span,) = read_inputs([path]).spans
    assert list(span.attributes[ENERGY_DOMAIN_KINDS]) == written


def test_parquet_keeps_the_domain_kinds(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet", reason="the Parquet exporter needs pyarrow (pip install -e '.[parquet]')")
    folder = tmp_path / "parquet"
    folder.mkdir()
    written = _export_one_span(tmp_path, ParquetSpanExporter(folder / "spans.parquet"))
    (file,) = sorted(folder.glob("*.parquet"))
    (row,) = pq.read_table(file).to_pylist()
    assert json.loads(row["attributes"])[ENERGY_DOMAIN_KINDS] == written
