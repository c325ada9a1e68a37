"""otel-joules report --engine spark: the same report as DuckDB's on the same files, in Spark's local mode.

One local Spark session (``local[2]``) for the module: starting the JVM takes 10-30 s. Skipped,
with the reason, where pyspark or Java is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from benchmarks.report_scale import write_archive
from otel_joules.exporters import CsvSpanExporter, JsonLinesSpanExporter
from otel_joules.report import build_report, report_dict

from tests.helpers.known_spans import emit_run, emit_train_and_epoch, make_provider
from tests.helpers.processes import REPO, clean_env, otel_joules_command
from tests.report.test_sql_dialect import csv_verdicts, verdicts

pytest.importorskip("pyspark", reason="the Spark engine needs pyspark: pip install -e '.[spark]'")
pytest.importorskip("duckdb", reason="the Spark engine is compared with the DuckDB one: pip install -e '.[report]'")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("the Spark engine needs Java 17+ (java on PATH or JAVA_HOME)", allow_module_level=True)


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    from otel_joules.report.spark_engine import spark_session

    session = spark_session()
    yield session
    session.stop()


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """JSON lines and OTLP/JSON of known sums, our CSV and Parquet, and a JSON-lines file torn mid-line."""
    pytest.importorskip("opentelemetry.exporter.otlp.json.common", reason="the OTLP/JSON part needs the otlp-file extra")
    root = tmp_path_factory.mktemp("mixed")
    write_archive(root / "archive", 0.02, otlp_share=0.5, otlp_batch_spans=8)
    exporters = [CsvSpanExporter(root / "spans.csv"), JsonLinesSpanExporter(root / "torn.jsonl")]
    try:
        from otel_joules.exporters import ParquetSpanExporter

        exporters.append(ParquetSpanExporter(root / "spans.parquet"))
    except ImportError:
        pass
    provider = make_provider(*(SimpleSpanProcessor(e) for e in exporters), trace_id="5" * 32)
    emit_train_and_epoch(provider)
    emit_run(make_provider(*(SimpleSpanProcessor(e) for e in exporters[:1]), trace_id="6" * 32))
    provider.shutdown()
    exporters[0].shutdown()
    with (root / "torn.jsonl").open("a") as handle:
        handle.write('{"name":"half-written","trace_id":"')  # a writer killed mid-line
    return root


def test_spark_gives_the_duckdb_report_on_every_format(mixed: Path, spark: object) -> None:
    duckdb_report = build_report([mixed])
    spark_report = build_report([mixed], engine="spark", spark_session=spark)
    assert len(duckdb_report.runs) > 10
    assert spark_report.total_joules == duckdb_report.total_joules
    assert spark_report.host_interval_joules == duckdb_report.host_interval_joules
    assert report_dict(spark_report) == report_dict(duckdb_report)
    # The torn line was read by the Python reader for both engines, with its reason.
    assert any(s.path.startswith(str(mixed / "torn.jsonl")) for s in spark_report.skipped)
    if list(mixed.glob("*.parquet")):
        assert any(path.endswith(".parquet") for path in spark_report.files_read)


def test_a_hadoop_uri_is_read_by_spark_itself(mixed: Path, spark: object) -> None:
    folder = mixed / "archive" / "jsonl"
    local = build_report([folder])
    uri = build_report([folder.as_uri()], engine="spark", spark_session=spark)
    assert uri.total_joules == local.total_joules and len(uri.runs) == len(local.runs)


def test_the_cli_takes_engine_spark(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    provider = make_provider(SimpleSpanProcessor(JsonLinesSpanExporter(path)))
    emit_run(provider)
    provider.shutdown()
    env = clean_env(tmp_path)
    result = subprocess.run(
        otel_joules_command("report", "--engine", "spark", "--json", str(path)),
        env=env, cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout)["totals"]["energy_joules"] == 3.5


def test_spark_sql_judges_records_as_the_python_reader(tmp_path: Path, spark: object) -> None:
    from otel_joules.report.spark_engine import SparkSpanStore
    from otel_joules.report.sql import FORMAT_JSONL

    with SparkSpanStore(spark) as store:
        assert verdicts(store, tmp_path, FORMAT_JSONL, "spark") == []
        (tmp_path / "csv").mkdir()
        assert csv_verdicts(store, tmp_path / "csv", "spark") == []


def test_spark_walks_nest_as_duckdb_and_the_rules(tmp_path: Path, spark: object) -> None:
    # Parent loops, a span's own parent, grandparents and inherited ranks: the walks both engines render from one
    # definition (report.sql.traces.walks), bounded round a loop each its own way.
    from tests.report.test_nesting import EXPECTED, SPANS

    path = tmp_path / "nest.jsonl"
    path.write_text("".join(json.dumps(span) + "\n" for span in SPANS), encoding="utf-8")
    spark_report = build_report([path], engine="spark", spark_session=spark)
    found = {
        int(run.run_id, 16): (run.joules, run.host_interval_joules, run.energy_basis, run.spans_counted)
        for run in spark_report.runs
    }
    assert found == EXPECTED
    assert report_dict(spark_report) == report_dict(build_report([path]))


def test_a_local_session_has_the_driver_heap_the_report_needs(spark: object) -> None:
    # Spark's own 1g ran out planning the report's statements on a 2-core CI box: a local session asks for more.
    from otel_joules.report.spark_engine import DEFAULT_DRIVER_MEMORY

    assert spark.sparkContext.getConf().get("spark.driver.memory") == DEFAULT_DRIVER_MEMORY == "2g"  # type: ignore[attr-defined]
