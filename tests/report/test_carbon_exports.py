"""``otel-joules report`` on CSV and JSON-lines exports of an ``otel-joules run`` span: the
recorded ``carbon.pue`` and ``carbon.intensity.gco2eq_per_kwh`` are used, as for OTLP files.

Known truth: 3.5 J x PUE 1.2 = 4.2 J = 4.2 / 3.6e6 kWh; x 300 gCO2eq/kWh = 0.00035 g.
Without the carbon attributes the report would say PUE 1.0 (default) and 3.5 / 3.6e6 kWh.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_joules.cli.main import main
from otel_joules.exporters import CsvSpanExporter, JsonLinesSpanExporter

from tests.fakes.powercap import make_powercap
from tests.helpers.known_spans import RUN_NAME, TRACE_ID, emit_run, make_provider
from tests.helpers.processes import BUSY_THEN_ADVANCE, clean_env, otel_joules_command

JOULES = 3.5
PUE = 1.2
INTENSITY = 300.0
KWH = 4.2 / 3.6e6  # JOULES x PUE, in kWh
GRAMS = 0.00035  # KWH x INTENSITY


@pytest.fixture(autouse=True)
def _no_country(monkeypatch: pytest.MonkeyPatch) -> None:
    # The report's fallback intensity must not come from the environment running the tests.
    monkeypatch.delenv("OTEL_JOULES_COUNTRY", raising=False)


def _report_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["report", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _exports(tmp_path: Path) -> dict[str, Path]:
    """The run-style span exported to a CSV file and, separately, to a JSON-lines file."""
    paths = {"csv": tmp_path / "run.csv", "jsonl": tmp_path / "run.jsonl"}
    for kind, exporter in (("csv", CsvSpanExporter), ("jsonl", JsonLinesSpanExporter)):
        provider = make_provider(SimpleSpanProcessor(exporter(paths[kind])))
        emit_run(provider)
        provider.shutdown()
    return paths


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_report_uses_the_recorded_pue_and_intensity(tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    path = _exports(tmp_path)[kind]
    data = _report_json(capsys, str(path))
    (run,) = data["runs"]
    assert (run["run_id"], run["name"], run["sources"]) == (TRACE_ID, RUN_NAME, [str(path)])
    assert run["energy_joules"] == JOULES
    assert (run["pue"], run["pue_origin"]) == (PUE, "recorded")
    assert (run["intensity_gco2eq_per_kwh"], run["intensity_source"]) == (INTENSITY, "recorded")
    assert run["energy_kwh"] == pytest.approx(KWH, rel=1e-12)
    assert run["co2eq_grams"] == pytest.approx(GRAMS, rel=1e-12)
    assert data["totals"]["co2eq_grams"] == pytest.approx(GRAMS, rel=1e-12)

    assert main(["report", str(path)]) == 0
    text = capsys.readouterr().out
    assert "300.00 (recorded)" in text and "0.000350" in text
    assert "no PUE recorded" not in text


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_a_pue_option_still_uses_the_recorded_intensity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    # With another PUE the span's own grams no longer apply; its intensity still does
    # (without carbon.* in the file the report fell back to the world average here).
    path = _exports(tmp_path)[kind]
    (run,) = _report_json(capsys, str(path), "--pue", "2.0")["runs"]
    assert (run["pue"], run["pue_origin"]) == (2.0, "option")
    assert (run["intensity_gco2eq_per_kwh"], run["intensity_source"]) == (INTENSITY, "recorded")
    assert run["co2eq_grams"] == pytest.approx(7.0 / 3.6e6 * INTENSITY, rel=1e-12)  # 3.5 J x 2.0


def test_report_on_the_exports_of_a_real_otel_joules_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """End to end: ``otel-joules run --pue 1.2 --carbon-intensity 300`` on a fake RAPL host
    whose counters the command advances by 3 J (package) + 0.5 J (DRAM)."""
    pc = make_powercap(tmp_path / "sys", "one_socket")
    csv_path, jsonl_path = tmp_path / "run.csv", tmp_path / "run.jsonl"
    advance = [sys.executable, "-c", BUSY_THEN_ADVANCE,
               str(pc.zones["package_0"].path / "energy_uj"), "3000000",
               str(pc.zones["dram_0"].path / "energy_uj"), "500000"]
    result = subprocess.run(
        otel_joules_command("run", "--exporter", f"csv:{csv_path}", "--exporter", f"jsonl:{jsonl_path}",
                            "--pue", str(PUE), "--carbon-intensity", str(INTENSITY), "--", *advance),
        env=clean_env(tmp_path, {"OTEL_JOULES_SYSFS_ROOT": pc.sysfs_root}),
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr
    (record,) = [json.loads(line) for line in jsonl_path.read_text().splitlines()]
    assert record["attributes"]["carbon.pue"] == PUE
    assert record["attributes"]["carbon.intensity.gco2eq_per_kwh"] == INTENSITY
    assert record["attributes"]["carbon.intensity.source"] == "explicit"
    assert not any(key.startswith("process.") for key in record["attributes"])
    # The report sums the command's share (its CPU time's part of the host's energy), and shows
    # the host's 3.5 J beside it; the grams are the share's.
    share_joules = record["attributes"]["energy.attributed.joules"]
    assert 0 < share_joules <= JOULES and record["attributes"]["energy.joules"] == JOULES
    share_grams = share_joules / 3.6e6 * PUE * INTENSITY
    for path in (csv_path, jsonl_path):
        (run,) = _report_json(capsys, str(path))["runs"]
        assert run["run_id"] == record["trace_id"]
        assert run["energy_joules"] == pytest.approx(share_joules, rel=1e-12)
        assert (run["energy_basis"], run["host_interval_joules"]) == ("attributed share", JOULES)
        assert (run["pue"], run["pue_origin"]) == (PUE, "recorded")
        assert (run["intensity_gco2eq_per_kwh"], run["intensity_source"]) == (INTENSITY, "recorded")
        assert run["energy_kwh"] == pytest.approx(share_joules / 3.6e6 * PUE, rel=1e-12)  # kWh with PUE, as carbontracker
        assert run["co2eq_grams"] == pytest.approx(share_grams, rel=1e-12)
    # Both files hold the same span: given together, the run counts once.
    data = _report_json(capsys, str(csv_path), str(jsonl_path))
    assert len(data["runs"]) == 1 and data["totals"]["co2eq_grams"] == pytest.approx(share_grams, rel=1e-12)
