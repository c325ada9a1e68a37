"""An epoch span's ``training.epoch.number`` survives every file export, and the report numbers epochs by it.

The file exporters once kept only ``energy.*`` and ``carbon.*``: a CarbonTracker epoch
span lost its ``training.epoch`` in CSV and JSON lines, and ``otel-joules report`` of
such a file numbered the epochs by position (a run resumed at epoch 2 read as 1, 2).
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests.fakes.powercap import make_powercap

from otel_joules import EnergyMeter
from otel_joules.carbontracker.tracker import CarbonTracker
from otel_joules.cli.main import main
from otel_joules.exporters import CsvSpanExporter, DataFrameSpanExporter, JsonLinesSpanExporter
from otel_joules.exporters.mongo_exporter import span_document
from otel_joules.exporters.records import span_record
from otel_joules.report import build_report
from otel_joules.semconv import (
    ENERGY_JOULES,
    SPAN_EPOCH,
    SPAN_TRAINING,
    TRAINING_EPOCH_NUMBER,
    TRAINING_EPOCH_INTERRUPTED,
    TRAINING_EPOCHS_COUNT,
)

T0 = 1_700_000_000_000_000_000  # span times, ns


@pytest.fixture(autouse=True)
def _no_country(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_JOULES_COUNTRY", raising=False)


def _provider(*exporters: object) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": "trainer"}))
    for exporter in exporters:
        provider.add_span_processor(SimpleSpanProcessor(exporter))  # type: ignore[arg-type]
    return provider


def _write_resumed_training(provider: TracerProvider) -> None:
    """A training resumed at epoch 2: epoch spans 2 (100 J) and 3 (200 J, interrupted) under a 300 J root."""
    tracer = provider.get_tracer("test")
    root = tracer.start_span(
        SPAN_TRAINING, context=otel_context.Context(), start_time=T0, attributes={TRAINING_EPOCHS_COUNT: 2}
    )
    parent = trace.set_span_in_context(root, otel_context.Context())
    for number, (start_s, end_s, joules, extra) in {
        2: (0, 1, 100.0, {}),
        3: (1, 3, 200.0, {TRAINING_EPOCH_INTERRUPTED: True}),
    }.items():
        epoch = tracer.start_span(
            SPAN_EPOCH,
            context=parent,
            start_time=T0 + int(start_s * 1e9),
            # http.method: not ours, never exported by the file formats.
            attributes={TRAINING_EPOCH_NUMBER: number, ENERGY_JOULES: joules, "http.method": "GET", **extra},
        )
        epoch.end(end_time=T0 + int(end_s * 1e9))
    root.set_attribute(ENERGY_JOULES, 300.0)
    root.end(end_time=T0 + 3 * 1_000_000_000)


@pytest.fixture
def exports(tmp_path: Path) -> dict[str, Path]:
    paths = {"csv": tmp_path / "csv" / "spans.csv", "jsonl": tmp_path / "jsonl" / "spans.jsonl"}
    for path in paths.values():
        path.parent.mkdir()
    provider = _provider(CsvSpanExporter(paths["csv"]), JsonLinesSpanExporter(paths["jsonl"]))
    _write_resumed_training(provider)
    provider.shutdown()
    return paths


def _epoch_attributes(rows: list[dict]) -> dict[int, dict]:
    return {row[TRAINING_EPOCH_NUMBER]: row for row in rows if TRAINING_EPOCH_NUMBER in row}


def test_csv_keeps_training_epoch(exports: dict[str, Path]) -> None:
    with open(exports["csv"], newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    epochs = _epoch_attributes([json.loads(row["attributes"]) for row in rows if row["name"] == SPAN_EPOCH])
    assert sorted(epochs) == [2, 3]
    assert epochs[3][TRAINING_EPOCH_INTERRUPTED] is True and TRAINING_EPOCH_INTERRUPTED not in epochs[2]
    (root,) = [json.loads(row["attributes"]) for row in rows if row["name"] == SPAN_TRAINING]
    assert root[TRAINING_EPOCHS_COUNT] == 2
    assert not any("http.method" in row["attributes"] for row in rows)


def test_jsonl_keeps_training_epoch(exports: dict[str, Path]) -> None:
    records = [json.loads(line) for line in exports["jsonl"].read_text(encoding="utf-8").splitlines()]
    epochs = _epoch_attributes([r["attributes"] for r in records if r["name"] == SPAN_EPOCH])
    assert sorted(epochs) == [2, 3]
    assert all(isinstance(number, int) for number in epochs)
    assert not any("http.method" in r["attributes"] for r in records)


def test_dataframe_and_mongo_keep_training_epoch() -> None:
    pytest.importorskip("pandas")
    dataframe = DataFrameSpanExporter()
    memory = InMemorySpanExporter()
    provider = _provider(dataframe, memory)
    _write_resumed_training(provider)
    frame = dataframe.dataframe()
    assert sorted(frame[frame["name"] == SPAN_EPOCH][TRAINING_EPOCH_NUMBER].astype(int)) == [2, 3]
    epochs = [span for span in memory.get_finished_spans() if span.name == SPAN_EPOCH]
    provider.shutdown()
    documents = [span_document(span_record(span)) for span in epochs]
    # No name is also a namespace: every value sits at its own leaf, none under _value.
    assert sorted(d["attributes"]["training"]["epoch"]["number"] for d in documents) == [2, 3]
    interrupted = [d["attributes"]["training"]["epoch"].get("interrupted") for d in documents]
    assert sorted(interrupted, key=str) == [None, True]


@pytest.mark.parametrize("form", ["csv", "jsonl"])
def test_report_numbers_epochs_by_training_epoch(exports: dict[str, Path], form: str) -> None:
    (run,) = build_report([exports[form]]).runs
    assert [(e.epoch, e.joules) for e in run.epochs] == [(2, 100.0), (3, 200.0)]


def test_cli_report_json_numbers_epochs_by_training_epoch(
    exports: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(exports["csv"]), "--json"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert [e["epoch"] for e in run["epochs"]] == [2, 3]


def test_carbontracker_epoch_spans_keep_their_number_in_csv(tmp_path: Path) -> None:
    """End to end: the tracker's own epoch spans, exported to CSV, carry training.epoch.number 1..3."""
    pc = make_powercap(tmp_path / "sys", "one_socket")
    path = tmp_path / "spans.csv"
    provider = _provider(CsvSpanExporter(path))
    tracker = CarbonTracker(
        epochs=3,
        log_dir=tmp_path / "logs",
        meter=EnergyMeter(sysfs_root=pc.sysfs_root, gpus=[], sample=False),
        intensity_gco2eq_per_kwh=250.0,
        tracer_provider=provider,
        verbose=0,
    )
    for _ in range(3):
        tracker.epoch_start()
        pc.zones["package_0"].advance_joules(60.0)
        time.sleep(0.01)
        tracker.epoch_end()
    provider.shutdown()
    with open(path, newline="", encoding="utf-8") as handle:
        epochs = [json.loads(row["attributes"]) for row in csv.DictReader(handle) if row["name"] == SPAN_EPOCH]
    assert sorted(attributes[TRAINING_EPOCH_NUMBER] for attributes in epochs) == [1, 2, 3]
