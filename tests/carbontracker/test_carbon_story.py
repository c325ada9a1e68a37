"""CarbonTracker tells one carbon story: each consumption block says which energy its CO2eq is of, with the PUE and the
intensity (and its source) used, in the console and both logs; the process's share is a separate line with its own
grams at the same PUE and intensity; the training span carries the same PUE and intensity with its grams."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from carbontracker import parser as carbontracker_parser
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_joules import EnergyMeter
from otel_joules.carbontracker.logs import CO2EQ_BASIS_LOG_PREFIX, PROCESS_SHARE_LOG_PREFIX
from otel_joules.carbontracker.tracker import CarbonTracker
from otel_joules.semconv import (
    CARBON_INTENSITY_GCO2EQ_PER_KWH,
    CARBON_INTENSITY_SOURCE,
    CARBON_PUE,
    ENERGY_CO2EQ_GRAMS,
    ENERGY_JOULES,
    SPAN_TRAINING,
)
from tests.fakes.powercap import make_powercap

PUE = 1.2
INTENSITY = 250.0
J_PER_KWH = 3.6e6
#: How far grams computed from the printed kWh (12 decimals, carbontracker's precision) may be from the grams printed.
_PRINTED = 1e-12 * INTENSITY + 1e-12

_BLOCK = re.compile(
    r"(?P<kind>Predicted|Actual) consumption for (?P<epochs>\d+) epoch\(s\):\n\tTime:\t[^\n]*\n\tEnergy:\t(?P<kwh>\S+) kWh\n"
    r"\tCO2eq:\t(?P<grams>\S+) g\n(?:\t[^\n]*\n)*?CarbonTracker: (?P<basis>CO2eq above is of [^\n]*)\n"
)
_SHARE = re.compile(rf"{re.escape(PROCESS_SHARE_LOG_PREFIX)}(?P<kwh>\S+) kWh, (?P<grams>\S+) g CO2eq at the same PUE and intensity")


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    monkeypatch.delenv("OTEL_JOULES_COUNTRY", raising=False)
    pc = make_powercap(tmp_path / "sys", "one_socket")
    spans = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "trainer"}))
    provider.add_span_processor(SimpleSpanProcessor(spans))
    tracker = CarbonTracker(
        epochs=3,
        log_dir=tmp_path / "logs",
        meter=EnergyMeter(sysfs_root=pc.sysfs_root, gpus=[], sample=False),
        intensity_gco2eq_per_kwh=INTENSITY,
        pue=PUE,
        tracer_provider=provider,
        verbose=1,
    )
    for _ in range(2):
        tracker.epoch_start()
        pc.zones["package_0"].advance_joules(360.0)
        time.sleep(0.01)
        tracker.epoch_end()
    tracker.stop()
    provider.shutdown()
    (output_log,) = (tmp_path / "logs").glob("*_carbontracker_output.log")
    (standard_log,) = (tmp_path / "logs").glob("*_carbontracker.log")
    return {
        "console": capsys.readouterr().out,
        "output_log": output_log.read_text(encoding="utf-8"),
        "standard_log": standard_log.read_text(encoding="utf-8"),
        "spans": spans.get_finished_spans(),
        "log_dir": tmp_path / "logs",
    }


def _without_log_prefixes(text: str) -> str:
    return re.sub(r"(?m)^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} - ", "", text)


@pytest.mark.parametrize("where", ["console", "output_log"])
def test_each_block_says_which_energy_its_co2eq_is_of_with_pue_and_intensity(run: dict, where: str) -> None:
    blocks = {m["kind"]: m for m in _BLOCK.finditer(_without_log_prefixes(run[where]))}
    assert set(blocks) == {"Predicted", "Actual"}, run[where]
    assert blocks["Predicted"]["basis"].startswith(
        f"{CO2EQ_BASIS_LOG_PREFIX}the host's interval energy of the epochs measured, scaled to 3 epoch(s) "
    )
    assert blocks["Actual"]["basis"].startswith(f"{CO2EQ_BASIS_LOG_PREFIX}the host's interval energy during the epochs ")
    for block in blocks.values():
        assert f"x PUE {PUE:g}, at {INTENSITY:.2f} gCO2eq/kWh (explicit: " in block["basis"]
        # The grams printed are the kWh printed (PUE included) at the intensity named: one story.
        assert float(block["grams"]) == pytest.approx(float(block["kwh"]) * INTENSITY, abs=_PRINTED)
    # 2 epochs of 360 J at PUE 1.2: the block is the host's energy, not a share.
    assert float(blocks["Actual"]["kwh"]) == pytest.approx(720.0 * PUE / J_PER_KWH, rel=1e-6)


def test_the_standard_log_names_the_basis_too(run: dict) -> None:
    lines = [l for l in run["standard_log"].splitlines() if CO2EQ_BASIS_LOG_PREFIX in l]
    assert len(lines) == 2 and all(f"x PUE {PUE:g}, at {INTENSITY:.2f} gCO2eq/kWh (explicit: " in l for l in lines)


def test_the_share_line_has_its_own_grams_at_the_same_pue_and_intensity(run: dict) -> None:
    match = _SHARE.search(run["output_log"])
    assert match, run["output_log"]
    assert float(match["grams"]) == pytest.approx(float(match["kwh"]) * INTENSITY, abs=_PRINTED)
    assert _SHARE.search(run["console"])


def test_the_training_span_carries_the_same_pue_and_intensity(run: dict) -> None:
    (training,) = [s for s in run["spans"] if s.name == SPAN_TRAINING]
    attributes = training.attributes
    assert (attributes[CARBON_PUE], attributes[CARBON_INTENSITY_GCO2EQ_PER_KWH]) == (PUE, INTENSITY)
    assert attributes[CARBON_INTENSITY_SOURCE] == "explicit"
    assert attributes[ENERGY_CO2EQ_GRAMS] == pytest.approx(attributes[ENERGY_JOULES] * PUE / J_PER_KWH * INTENSITY)


def test_carbontrackers_own_parser_still_reads_the_logs(run: dict) -> None:
    """The basis and share lines are extra: carbontracker 2.4.7's parser reads the blocks as before."""
    (parsed,) = carbontracker_parser.parse_all_logs(str(run["log_dir"]))
    blocks = {m["kind"]: m for m in _BLOCK.finditer(_without_log_prefixes(run["output_log"]))}
    assert parsed["actual"]["energy (kWh)"] == pytest.approx(float(blocks["Actual"]["kwh"]))
    assert parsed["actual"]["co2eq (g)"] == pytest.approx(float(blocks["Actual"]["grams"]))
    assert parsed["pred"]["co2eq (g)"] == pytest.approx(float(blocks["Predicted"]["grams"]))
