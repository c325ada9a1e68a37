"""DataFrameSpanExporter: one row per span, typed columns, every energy.* and carbon.* attribute."""

from __future__ import annotations

import math

import pandas as pd
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExportResult

from otel_joules.exporters import CORE_FIELDS, DataFrameSpanExporter

from tests.helpers.known_spans import (
    CHILD_NAME,
    CHILD_SPAN_ID,
    ROOT_SPAN_ID,
    T0_NS,
    TRACE_ID,
    emit_plain,
    emit_run,
    emit_train_and_epoch,
    make_provider,
)


def test_columns_and_values() -> None:
    exporter = DataFrameSpanExporter()
    provider = make_provider(SimpleSpanProcessor(exporter))
    emit_train_and_epoch(provider)
    provider.shutdown()
    frame = exporter.dataframe()
    assert list(frame.columns) == [
        *CORE_FIELDS,
        "energy.below_resolution",
        "energy.co2eq.grams",
        "energy.core_0.joules",
        "energy.domains",
        "energy.dram_0.joules",
        "energy.joules",
        "energy.nvidia_gpu_0.joules",
        "energy.package_0.joules",
        "energy.samples",
        "energy.source",
        "energy.watts",    "host.name",
        "slurm.job.id",
    ]
    assert frame["host.name"].tolist() == ["node-7", "node-7"]
    child, root = frame.iloc[0], frame.iloc[1]
    assert (child["name"], child["trace_id"], child["span_id"], child["parent_span_id"]) == (
        CHILD_NAME,
        TRACE_ID,
        CHILD_SPAN_ID,
        ROOT_SPAN_ID,
    )
    assert root["parent_span_id"] is None
    assert root["start_time"] == pd.Timestamp(T0_NS, unit="ns", tz="UTC")
    assert child["end_time"] == pd.Timestamp("2023-11-14T22:13:20.260000000Z")
    assert child["start_time_unix_nano"] == T0_NS + 250_000_000
    assert root["duration_s"] == 1.5 and child["duration_s"] == 0.01
    assert root["service_name"] == "svc"
    assert frame["energy.joules"].tolist() == [0.125, 12.5]
    assert frame["energy.below_resolution"].tolist() == [True, False]  # False, not None: the root's 12.5 J is exact
    assert frame["energy.joules"].sum() == 12.625
    assert root["energy.package_0.joules"] == 10.0 and math.isnan(child["energy.package_0.joules"])
    assert math.isnan(root["energy.nvidia_gpu_0.joules"])
    assert frame["energy.source"].tolist() == ["estimate", "measured"]
    assert frame["energy.samples"].tolist()[0] == 3.0
    assert child["energy.domains"] == ("nvidia_gpu_0",)
    assert str(frame["start_time"].dtype) == "datetime64[ns, UTC]"
    assert str(frame["energy.joules"].dtype) == "float64"


def test_empty_dataframe_has_the_core_columns() -> None:
    frame = DataFrameSpanExporter().dataframe()
    assert list(frame.columns) == list(CORE_FIELDS) and len(frame) == 0


def test_batch_processor_clear_and_shutdown() -> None:
    exporter = DataFrameSpanExporter()
    provider = make_provider(BatchSpanProcessor(exporter, schedule_delay_millis=60_000))
    for index in range(3):
        emit_plain(provider, f"step{index}", offset_s=index, joules=float(index))
    assert len(exporter.dataframe()) == 0  # still in the batch processor
    assert provider.force_flush()
    assert exporter.dataframe()["name"].tolist() == ["step0", "step1", "step2"]
    exporter.clear()
    assert len(exporter.dataframe()) == 0
    emit_plain(provider, "after-clear", offset_s=9, joules=4.0)
    provider.shutdown()
    frame = exporter.dataframe()
    assert frame["name"].tolist() == ["after-clear"] and frame["energy.joules"].tolist() == [4.0]
    assert exporter.force_flush() is True
    assert exporter.export([]) is SpanExportResult.FAILURE
    assert len(exporter.records) == 1  # collected data stays readable after shutdown


def test_carbon_attributes_get_columns_of_their_own() -> None:
    exporter = DataFrameSpanExporter()
    provider = make_provider(SimpleSpanProcessor(exporter))
    emit_run(provider)
    emit_plain(provider, "no-carbon", offset_s=10, joules=1.0)
    provider.shutdown()
    frame = exporter.dataframe()
    assert list(frame.columns) == [
        *CORE_FIELDS,
        "carbon.intensity.gco2eq_per_kwh",
        "carbon.intensity.source",
        "carbon.pue",
        "energy.below_resolution",  # on every span with energy, even where none is below resolution
        "energy.co2eq.grams",
        "energy.core_0.joules",
        "energy.dram_0.joules",
        "energy.joules",
        "energy.package_0.joules",
        "energy.source",
        "energy.watts",
        "host.name",
        "slurm.job.id",
    ]
    assert frame["energy.below_resolution"].tolist() == [False, False]
    assert frame["carbon.pue"].dtype == "float64"
    assert frame["carbon.pue"].iloc[0] == 1.2 and math.isnan(frame["carbon.pue"].iloc[1])
    assert frame["carbon.intensity.gco2eq_per_kwh"].iloc[0] == 300.0
    source = frame["carbon.intensity.source"]
    assert source.iloc[0] == "explicit" and pd.isna(source.iloc[1])  # NaN or None, as pandas holds missing text
