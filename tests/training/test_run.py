"""otel_joules.training: the training-run model (spans, per-epoch measurement, prediction) without the shim."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from tests.fakes.powercap import FakePowercap, make_powercap

from otel_joules import EnergyMeter
from otel_joules.carbon import CarbonIntensity
from otel_joules.carbon.refresh import RefreshingIntensity
from otel_joules.semconv import (
    CARBON_INTENSITY_GCO2EQ_PER_KWH,
    CARBON_PUE,
    ENERGY_CO2EQ_GRAMS,
    ENERGY_JOULES,
    ENERGY_KWH,
    EVENT_TRAINING_PREDICTION,
    SPAN_EPOCH,
    SPAN_TRAINING,
    TRAINING_EARLY_STOP,
    TRAINING_EPOCH_NUMBER,
    TRAINING_EPOCH_INTERRUPTED,
    TRAINING_EPOCHS_COUNT,
    TRAINING_EPOCHS_PLANNED,
)
from otel_joules.training import DeviceSelection, SimulatedDevice, TrainingRun

PACKAGE_J, CORE_J, DRAM_J = 60.0, 30.0, 15.0
EPOCH_J = PACKAGE_J + DRAM_J  # core is inside the package: not added
PUE = 1.5
INTENSITY = CarbonIntensity(gco2eq_per_kwh=200.0, source="explicit", region=None, year=None, detail="given")


def _spend(pc: FakePowercap) -> None:
    pc.zones["package_0"].advance_joules(PACKAGE_J)
    pc.zones["core_0"].advance_joules(CORE_J)
    pc.zones["dram_0"].advance_joules(DRAM_J)


@pytest.fixture
def powercap(tmp_path: Path) -> FakePowercap:
    return make_powercap(tmp_path)


def _run(pc: FakePowercap, exporter: InMemorySpanExporter, sims: tuple[SimulatedDevice, ...] = ()) -> TrainingRun:
    meter = EnergyMeter(sysfs_root=pc.sysfs_root, gpus=[], sample=False)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    selection = DeviceSelection.select(meter, ("gpu", "cpu"), sims)
    return TrainingRun(meter, selection, RefreshingIntensity(INTENSITY), PUE, provider, 4, "test")


def test_selection_groups_domains_into_components(powercap: FakePowercap) -> None:
    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False)
    selection = DeviceSelection.select(meter, ("gpu", "cpu"))
    assert selection.devices == {"cpu": ("cpu:0", "dram:0")}
    assert selection.missing == ("gpu",)
    assert "core_0" in selection.domain_ids  # kept as detail on the spans
    assert selection.component_by_domain_id == {"package_0": "cpu", "dram_0": "cpu"}
    simulated = DeviceSelection.select(meter, ("cpu",), (SimulatedDevice("sim_cpu", "cpu", "Xeon (simulated)", 10.0),))
    assert simulated.domains == () and simulated.devices == {"cpu": ("Xeon (simulated)",)}
    assert simulated.estimated_domain_ids() == ["sim_cpu"]


def test_epochs_are_child_spans_with_energy_and_carbon(powercap: FakePowercap) -> None:
    exporter = InMemorySpanExporter()
    run = _run(powercap, exporter)
    assert run.start_epoch() is True
    _spend(powercap)
    result, _ = run.end_epoch()
    assert run.start_epoch() is False
    _spend(powercap)
    run.end_epoch()
    assert result.energy_joules == pytest.approx(EPOCH_J)
    assert result.co2eq_grams == pytest.approx(EPOCH_J / 3.6e6 * PUE * 200.0)
    actual = run.actual()
    assert (actual.kind, actual.epochs) == ("actual", 2)
    assert actual.energy_kwh == pytest.approx(2 * EPOCH_J * PUE / 3.6e6)
    run.end(run.snapshot(), early_stop=False, actual=actual)
    spans = {(s.name, s.attributes.get(TRAINING_EPOCH_NUMBER)): s for s in exporter.get_finished_spans()}
    root = spans[(SPAN_TRAINING, None)]
    first = spans[(SPAN_EPOCH, 1)]
    assert first.parent.span_id == root.context.span_id
    assert first.attributes[ENERGY_JOULES] == pytest.approx(EPOCH_J)
    assert first.attributes[ENERGY_CO2EQ_GRAMS] == pytest.approx(result.co2eq_grams)
    assert (first.attributes[CARBON_INTENSITY_GCO2EQ_PER_KWH], first.attributes[CARBON_PUE]) == (200.0, PUE)
    assert root.attributes[TRAINING_EPOCHS_PLANNED] == 4
    assert (root.attributes[TRAINING_EPOCHS_COUNT], root.attributes[TRAINING_EARLY_STOP]) == (2, False)
    assert root.attributes[ENERGY_JOULES] == pytest.approx(2 * EPOCH_J)
    assert run.trace_id == format(root.context.trace_id, "032x")
    assert [s.name for s in run.spans] == [SPAN_EPOCH, SPAN_EPOCH, SPAN_TRAINING]


def test_prediction_scales_the_mean_epoch_and_is_an_event(powercap: FakePowercap) -> None:
    exporter = InMemorySpanExporter()
    run = _run(powercap, exporter)
    run.start_epoch()
    _spend(powercap)
    run.end_epoch()
    predicted = run.predict(4)
    assert (predicted.kind, predicted.epochs) == ("predicted", 4)
    assert predicted.energy_joules == pytest.approx(4 * EPOCH_J)
    assert predicted.co2eq_grams == pytest.approx(4 * EPOCH_J / 3.6e6 * PUE * 200.0)
    run.end(run.snapshot(), early_stop=True)
    (root,) = [s for s in exporter.get_finished_spans() if s.name == SPAN_TRAINING]
    (event,) = [e for e in root.events if e.name == EVENT_TRAINING_PREDICTION]
    assert event.attributes[TRAINING_EPOCHS_COUNT] == 4
    assert event.attributes[ENERGY_KWH] == pytest.approx(predicted.energy_kwh)


def test_an_abandoned_epoch_is_interrupted_and_in_error(powercap: FakePowercap) -> None:
    exporter = InMemorySpanExporter()
    run = _run(powercap, exporter)
    run.start_epoch()
    run.abandon_epoch("epoch_end() failed: boom")
    run.end(None, early_stop=True, error="epoch_end() failed: boom")
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert spans[SPAN_EPOCH].attributes[TRAINING_EPOCH_INTERRUPTED] is True
    assert ENERGY_JOULES not in spans[SPAN_EPOCH].attributes  # nothing measured, nothing made up
    assert spans[SPAN_EPOCH].status.status_code is StatusCode.ERROR
    assert spans[SPAN_TRAINING].status.status_code is StatusCode.ERROR
    assert not run.epoch_open


def test_the_runs_carbon_wins_over_instrument_carbon_on_the_same_provider(powercap: FakePowercap) -> None:
    # instrument() with its own intensity on the provider the run uses: its carbon hook runs on the
    # run's spans (they end through its processor), yet the run's intensity and PUE are what the spans
    # say, as its console, logs and result do; the processor still adds the span's share.
    import otel_joules
    from otel_joules.semconv import ENERGY_ATTRIBUTED_JOULES

    exporter = InMemorySpanExporter()
    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    handle = otel_joules.instrument(provider, meter=meter, carbon_intensity=999.0, metrics_enabled=False)
    try:
        selection = DeviceSelection.select(meter, ("gpu", "cpu"))
        run = TrainingRun(meter, selection, RefreshingIntensity(INTENSITY), PUE, provider, 4, "test")
        run.start_epoch()
        _spend(powercap)
        result, _ = run.end_epoch()
        run.end(run.snapshot(), early_stop=False)
    finally:
        handle.uninstrument()
    epoch = next(s for s in exporter.get_finished_spans() if s.name == SPAN_EPOCH)
    assert (epoch.attributes[CARBON_INTENSITY_GCO2EQ_PER_KWH], epoch.attributes[CARBON_PUE]) == (200.0, PUE)
    assert epoch.attributes[ENERGY_CO2EQ_GRAMS] == pytest.approx(result.co2eq_grams)
    assert epoch.attributes[ENERGY_JOULES] == pytest.approx(EPOCH_J)
    assert ENERGY_ATTRIBUTED_JOULES in epoch.attributes


def test_simulated_devices_carry_their_kind_and_the_report_reads_it(powercap: FakePowercap) -> None:
    """Issue 37: a simulated device's kind is exported (``energy.domain_kinds``), so the report splits its energy
    by that kind and never by its id: this one is named against every id convention and still counts as GPU."""
    from otel_joules.report.energy_parts import span_parts
    from otel_joules.report.model import SpanRow
    from otel_joules.semconv import ENERGY_DOMAIN_KINDS
    from otel_joules.sensors.base import parse_domain_kinds

    exporter = InMemorySpanExporter()
    run = _run(powercap, exporter, (SimulatedDevice("accelerator", "gpu", "A100 (simulated)", 50.0),))
    run.start_epoch()
    _spend(powercap)
    result, _ = run.end_epoch()
    (epoch,) = [s for s in exporter.get_finished_spans() if s.name == SPAN_EPOCH]
    kinds = parse_domain_kinds(epoch.attributes[ENERGY_DOMAIN_KINDS])
    assert kinds == {"package_0": "cpu", "dram_0": "memory", "accelerator": "gpu"}
    row = SpanRow(
        trace_id="0" * 32, span_id="1" * 16, parent_span_id=None, name=epoch.name, start_unix_nano=epoch.start_time,
        end_unix_nano=epoch.end_time, service_name=None, attributes=dict(epoch.attributes), source="memory",
    )
    parts = span_parts(row, result.energy_joules, attributed=False)
    assert parts["gpu"][0] == pytest.approx(result.joules_by_domain["accelerator"])
    assert parts["gpu"][0] > 0
    assert (parts["cpu"][0], parts["memory"][0]) == (pytest.approx(PACKAGE_J), pytest.approx(DRAM_J))
    assert "other" not in parts
