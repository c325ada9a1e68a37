"""``otel-joules report`` reads archives written before the renames as it reads today's.

Spans were once written with ``training.epoch`` / ``training.epochs`` (now ``training.epoch.number`` /
``training.epochs.count``: no name is also a namespace) and with ``energy.domain_kinds`` as one
space-separated string (now a string array). The same spans are written through the real file
exporters once with the former names and once with today's; the report of each must number the epochs
by their recorded numbers (a run resumed at epoch 2), split the energy by the recorded kinds (a domain
id the id rules do not know), and come out the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_joules.exporters import CsvSpanExporter, JsonLinesSpanExporter, OtlpFileSpanExporter, ParquetSpanExporter
from otel_joules.report import build_report
from otel_joules.semconv import (
    ENERGY_DOMAIN_KINDS,
    ENERGY_JOULES,
    ENERGY_SOURCE,
    FORMER_ATTRIBUTE_NAMES,
    SPAN_EPOCH,
    SPAN_TRAINING,
    TRAINING_EPOCH_INTERRUPTED,
    TRAINING_EPOCH_NUMBER,
    TRAINING_EPOCHS_COUNT,
    domain_joules_key,
)

T0 = 1_700_000_000_000_000_000  # span times, ns
_FORMER = {current: former for former, current in FORMER_ATTRIBUTE_NAMES.items()}


def _parquet(path: Path) -> ParquetSpanExporter:
    pytest.importorskip("pyarrow", reason="the Parquet exporter needs pyarrow (pip install -e '.[parquet]')")
    path.parent.mkdir(parents=True, exist_ok=True)
    return ParquetSpanExporter(path)


EXPORTERS: dict[str, Callable[[Path], Any]] = {
    "csv": lambda folder: CsvSpanExporter(folder / "spans.csv"),
    "jsonl": lambda folder: JsonLinesSpanExporter(folder / "spans.jsonl"),
    "otlp": lambda folder: OtlpFileSpanExporter(folder / "spans.otlp.jsonl"),
    "parquet": lambda folder: _parquet(folder / "parquet" / "spans.parquet"),
}


def _write(folder: Path, form: str, *, former: bool) -> None:
    """A training resumed at epoch 2: epochs 2 (100 J: 70 on soc-0, 30 on dram_0) and 3 (200 J, interrupted), 300 J
    in all; soc-0 is a domain id the report's id rules do not know: only ``energy.domain_kinds`` makes it cpu."""
    folder.mkdir(parents=True, exist_ok=True)
    name = (lambda key: _FORMER.get(key, key)) if former else (lambda key: key)
    kinds: object = "soc-0:cpu dram_0:memory" if former else ("soc-0:cpu", "dram_0:memory")
    provider = TracerProvider(resource=Resource.create({"service.name": "trainer"}))
    provider.add_span_processor(SimpleSpanProcessor(EXPORTERS[form](folder)))
    tracer = provider.get_tracer("test")
    root = tracer.start_span(
        SPAN_TRAINING, context=otel_context.Context(), start_time=T0, attributes={name(TRAINING_EPOCHS_COUNT): 2}
    )
    parent = trace.set_span_in_context(root, otel_context.Context())
    for number, (start_s, end_s, soc, dram, extra) in {
        2: (0, 1, 70.0, 30.0, {}),
        3: (1, 3, 150.0, 50.0, {TRAINING_EPOCH_INTERRUPTED: True}),
    }.items():
        attributes = {
            name(TRAINING_EPOCH_NUMBER): number,
            ENERGY_JOULES: soc + dram,
            ENERGY_SOURCE: "measured",
            domain_joules_key("soc-0"): soc,
            domain_joules_key("dram_0"): dram,
            ENERGY_DOMAIN_KINDS: kinds,
            **extra,
        }
        epoch = tracer.start_span(SPAN_EPOCH, context=parent, start_time=T0 + int(start_s * 1e9), attributes=attributes)
        epoch.end(end_time=T0 + int(end_s * 1e9))
    root.set_attributes({ENERGY_JOULES: 300.0, domain_joules_key("soc-0"): 220.0, domain_joules_key("dram_0"): 80.0,
                         ENERGY_DOMAIN_KINDS: kinds})  # type: ignore[dict-item]
    root.end(end_time=T0 + 3 * 1_000_000_000)
    provider.shutdown()


def _summary(folder: Path) -> list[tuple[Any, ...]]:
    report = build_report([folder])
    assert report.skipped == ()
    return [
        (run.joules, tuple((e.epoch, e.joules, tuple((p.kind, p.joules) for p in e.parts)) for e in run.epochs),
         tuple((p.kind, p.joules) for p in run.parts))
        for run in report.runs
    ]


@pytest.mark.parametrize("form", sorted(EXPORTERS))
def test_an_archive_with_the_former_names_reads_as_one_with_todays(tmp_path: Path, form: str) -> None:
    _write(tmp_path / "former", form, former=True)
    _write(tmp_path / "current", form, former=False)
    former = _summary(tmp_path / "former")
    assert former == [
        (
            300.0,
            ((2, 100.0, (("cpu", 70.0), ("memory", 30.0))), (3, 200.0, (("cpu", 150.0), ("memory", 50.0)))),
            (("cpu", 220.0), ("memory", 80.0)),
        )
    ]
    assert _summary(tmp_path / "current") == former
