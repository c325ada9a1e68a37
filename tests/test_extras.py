"""The light base install: every feature whose extra is missing says, in one line, which extra to install.

Each case runs in a child whose ``sitecustomize`` makes the extras' modules unimportable
(``sys.modules[name] = None``, so ``import pandas`` raises ImportError as in a venv without it),
then uses one feature: the message names the extra, and a CLI prints one line, no traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.processes import REPO, clean_env, otel_joules_command

#: The modules only extras install (and what they pull in, such as numpy).
EXTRA_MODULES = ("pandas", "numpy", "matplotlib", "pymongo", "pyarrow", "duckdb", "pyspark", "pyghmi", "amdsmi")

_BLOCKER = "import sys\nfor _name in {names!r}:\n    sys.modules[_name] = None\n"


def _env(tmp_path: Path, blocked: tuple[str, ...] = EXTRA_MODULES) -> dict[str, str]:
    site = tmp_path / "blocker"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(_BLOCKER.format(names=blocked))
    env = clean_env(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def _python(tmp_path: Path, code: str, blocked: tuple[str, ...] = EXTRA_MODULES) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], env=_env(tmp_path, blocked), cwd=tmp_path, capture_output=True, text=True, timeout=120
    )


def _raises_missing_extra(tmp_path: Path, setup: str, call: str, extra: str) -> str:
    """Run ``call`` after ``setup``; it must raise MissingExtraError (an ImportError) naming ``extra``."""
    code = (
        "import json\n"
        "from otel_joules.errors import MissingExtraError\n"
        f"{setup}\n"
        "try:\n"
        f"    {call}\n"
        "except MissingExtraError as exc:\n"
        "    print(json.dumps([str(exc), isinstance(exc, ImportError)]))\n"
        "else:\n"
        "    print(json.dumps(None))\n"
    )
    result = _python(tmp_path, code)
    assert result.returncode == 0, result.stderr
    message, is_import_error = json.loads(result.stdout)
    assert is_import_error
    assert f"pip install 'otel-joules[{extra}]'" in message and "\n" not in message
    return message


def test_the_blocker_really_blocks(tmp_path: Path) -> None:
    result = _python(tmp_path, "import pandas")
    assert result.returncode != 0 and "import of pandas halted" in result.stderr


def test_instrument_and_the_file_exporters_need_no_extra(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from opentelemetry import trace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from opentelemetry.sdk.trace.export import SimpleSpanProcessor\n"
        "import otel_joules\n"
        "from otel_joules.exporters import CsvSpanExporter, JsonLinesSpanExporter\n"
        "provider = TracerProvider()\n"
        "provider.add_span_processor(SimpleSpanProcessor(JsonLinesSpanExporter('spans.jsonl')))\n"
        "provider.add_span_processor(SimpleSpanProcessor(CsvSpanExporter('spans.csv')))\n"
        "trace.set_tracer_provider(provider)\n"
        "otel_joules.instrument()\n"
        "with trace.get_tracer('t').start_as_current_span('work'):\n"
        "    sum(range(100000))\n"
        "provider.shutdown()\n"
        f"print(sorted(m for m in {EXTRA_MODULES!r} if sys.modules.get(m) is not None))\n"
    )
    result = _python(tmp_path, code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
    assert '"energy.joules"' in (tmp_path / "spans.jsonl").read_text()


@pytest.mark.parametrize(
    ("setup", "call", "extra"),
    [
        (
            "from otel_joules.exporters import DataFrameSpanExporter\nexporter = DataFrameSpanExporter()",
            "exporter.dataframe()",
            "pandas",
        ),
        ("from otel_joules.exporters import ParquetSpanExporter", "ParquetSpanExporter('spans.parquet')", "parquet"),
        ("from otel_joules.exporters import MongoSpanExporter", "MongoSpanExporter('mongodb://127.0.0.1:1')", "mongo"),
        ("from otel_joules.pyjoules.handler.pandas_handler import PandasHandler", "PandasHandler()", "pandas"),
        (
            "from pathlib import Path\nfrom otel_joules.carbontracker import parser\n"
            "from otel_joules.carbontracker.logs import CarbonTrackerLogWriter\n"
            "Path('logs').mkdir()\n"
            "out = CarbonTrackerLogWriter(Path('logs'), '', pid=1, run_id=1, clock=lambda: 1767225600.0)\n"
            "out.write_header({'cpu': ['cpu:0']}, version='0.1.0')\n"
            "out.write_epoch(1, duration_seconds=1.0, power_watts={'cpu': 10.0})\n"
            "out.write_finished()",
            "parser.parse_logs('logs')",
            "pandas",
        ),
        ("from otel_joules.sensors.ipmi import IpmiReader", "IpmiReader('127.0.0.1', 623, 'u', 'p', 1.0)", "bmc"),
    ],
    ids=["dataframe", "parquet", "mongo-exporter", "pandas-handler", "carbontracker-parse-logs", "ipmi-bmc"],
)
def test_a_feature_without_its_extra_says_which_to_install(tmp_path: Path, setup: str, call: str, extra: str) -> None:
    _raises_missing_extra(tmp_path, setup, call, extra)


def test_the_mongo_handler_says_which_extra(tmp_path: Path) -> None:
    code = (
        "from otel_joules.pyjoules.handler.mongo_handler import MongoHandler, MongoInitError\n"
        "try:\n"
        "    MongoHandler('mongodb://127.0.0.1:1', 'db', 'c', connected_timeout=100)\n"
        "except MongoInitError as exc:\n"
        "    print(exc)\n"
    )
    result = _python(tmp_path, code)
    assert result.returncode == 0, result.stderr
    assert "pip install 'otel-joules[mongo]'" in result.stdout


def _cli(tmp_path: Path, *args: str, blocked: tuple[str, ...] = EXTRA_MODULES) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        otel_joules_command(*args), env=_env(tmp_path, blocked), cwd=tmp_path, capture_output=True, text=True, timeout=120
    )


def _one_line(result: subprocess.CompletedProcess[str], extra: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if f"otel-joules[{extra}]" in line]
    assert len(lines) == 1, result.stderr


def _jsonl_export(tmp_path: Path) -> Path:
    path = tmp_path / "spans.jsonl"
    record = {
        "name": "train", "trace_id": "1" * 32, "span_id": "2" * 16, "parent_span_id": None,
        "start_time": "2023-11-14T22:13:20.000000000Z", "end_time": "2023-11-14T22:13:21.000000000Z",
        "start_time_unix_nano": 1700000000000000000, "end_time_unix_nano": 1700000001000000000,
        "duration_s": 1.0, "service_name": "svc",
        "attributes": {"energy.joules": 2.0, "energy.source": "measured"},
    }
    path.write_text(json.dumps(record) + "\n")
    return path


def test_run_with_a_parquet_exporter_without_pyarrow_is_one_line(tmp_path: Path) -> None:
    _one_line(_cli(tmp_path, "run", "--exporter", "parquet:spans.parquet", "--", "true"), "parquet")


def test_report_without_duckdb_is_one_line(tmp_path: Path) -> None:
    _one_line(_cli(tmp_path, "report", str(_jsonl_export(tmp_path))), "report")


def test_report_plot_without_matplotlib_is_one_line(tmp_path: Path) -> None:
    pytest.importorskip("duckdb", reason="the report itself needs DuckDB (pip install -e '.[report]')")
    blocked = tuple(m for m in EXTRA_MODULES if m != "duckdb")
    result = _cli(tmp_path, "report", "--plot", "plot.png", str(_jsonl_export(tmp_path)), blocked=blocked)
    _one_line(result, "plot")


def test_report_engine_spark_without_pyspark_is_one_line(tmp_path: Path) -> None:
    _one_line(_cli(tmp_path, "report", "--engine", "spark", str(_jsonl_export(tmp_path))), "spark")


def test_an_amd_gpu_without_amdsmi_is_said_once_with_the_extra_to_install(tmp_path: Path) -> None:
    device = tmp_path / "sys" / "class" / "drm" / "card0" / "device"
    device.mkdir(parents=True)
    (device / "vendor").write_text("0x1002\n")
    code = (
        "import json\n"
        "from otel_joules.meter.meter import EnergyMeter\n"
        "meter = EnergyMeter(sysfs_root='sys', estimate=False)\n"
        "EnergyMeter(sysfs_root='sys', estimate=False).close()\n"
        "print(json.dumps([[u.what, u.reason, u.remedy] for u in meter.unavailable if u.what.startswith('amd_gpu')]))\n"
    )
    result = _python(tmp_path, code)
    assert result.returncode == 0, result.stderr
    ((what, reason, remedy),) = json.loads(result.stdout.splitlines()[-1])
    assert (what, reason) == ("amd_gpu", "1 AMD GPU in sysfs, but the amdsmi package is not installed")
    assert "pip install 'otel-joules[amd]'" in remedy
    # Said once for the process (two meters), in one line naming the extra.
    said = [line for line in result.stderr.splitlines() if "amdsmi" in line]
    assert len(said) == 1 and "pip install 'otel-joules[amd]'" in said[0], result.stderr
