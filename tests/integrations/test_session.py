"""TrainerEnergy, what both callbacks share, driven without a framework: ranks, settings, a trainer without an epoch bound."""

from __future__ import annotations

from pathlib import Path

import pytest

from otel_joules import EnergyMeter
from otel_joules.errors import ConfigurationError
from otel_joules.integrations.session import TrainerEnergy

from tests.fakes.powercap import FakePowercap

RANK_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS")


@pytest.fixture(autouse=True)
def _no_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def _train(energy: TrainerEnergy, pc: FakePowercap, epochs: int, planned: int | None) -> None:
    energy.train_begin(planned)
    for _ in range(epochs):
        energy.epoch_begin()
        pc.zones["package_0"].advance_joules(10.0)
        energy.epoch_end()
    energy.train_end()


def _energy(pc: FakePowercap, tracer_provider, **settings) -> TrainerEnergy:
    return TrainerEnergy(meter=EnergyMeter(sysfs_root=pc.sysfs_root, gpus=[], sample=False),
                         tracer_provider=tracer_provider, intensity_gco2eq_per_kwh=100.0, **settings)


@pytest.mark.parametrize("all_ranks", [False, True])
def test_a_rank_above_zero_speaks_only_when_asked(all_ranks, monkeypatch, tmp_path: Path, powercap, tracer_provider,
                                                  span_exporter, capsys) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    energy = _energy(powercap, tracer_provider, log_dir=tmp_path / "logs", all_ranks=all_ranks)
    _train(energy, powercap, 2, planned=4)
    spans = span_exporter.get_finished_spans()
    epochs = [s for s in spans if s.name == "epoch"]
    assert len(epochs) == 2 and all(s.attributes["training.rank"] == 1 for s in spans)
    assert all(s.attributes["energy.joules"] == pytest.approx(10.0) for s in epochs)
    predictions = [e for s in spans for e in s.events if e.name == "training.prediction"]
    logs = list((tmp_path / "logs").glob("*_carbontracker.log")) if (tmp_path / "logs").exists() else []
    console = capsys.readouterr().out
    if all_ranks:
        assert len(predictions) == 1 and len(logs) == 1 and "CarbonTracker" in console
    else:
        # Rank 0 speaks for the job: no prediction, console output or logs here.
        assert predictions == [] and logs == [] and console == ""
    assert energy.tracker.result.actual.epochs == 2


def test_a_trainer_without_an_epoch_bound_measures_every_epoch(powercap, tracer_provider, span_exporter) -> None:
    energy = _energy(powercap, tracer_provider, verbose=0)
    _train(energy, powercap, 3, planned=-1)  # Lightning's max_epochs=-1
    (training,) = [s for s in span_exporter.get_finished_spans() if s.name == "training"]
    assert training.attributes["training.epochs.count"] == 3 and training.attributes["training.early_stop"] is False
    assert not training.events  # nothing planned, nothing predicted


def test_epochs_overrides_the_trainers(powercap, tracer_provider, span_exporter) -> None:
    energy = _energy(powercap, tracer_provider, verbose=0, epochs=5)
    _train(energy, powercap, 2, planned=2)
    (training,) = [s for s in span_exporter.get_finished_spans() if s.name == "training"]
    assert training.attributes["training.epochs.planned"] == 5 and training.attributes["training.early_stop"] is True


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"step_span_every": 0}, "step_span_every must be an integer >= 1"),
        ({"epochs": -1}, "epochs must be an integer >= 0"),
        ({"synchronize": "tensorflow"}, "synchronize='tensorflow' is not one of"),
    ],
)
def test_bad_settings_fail_before_training(settings, message) -> None:
    with pytest.raises(ConfigurationError, match=message):
        TrainerEnergy(**settings)


def test_the_callbacks_run_the_core_tracker_not_the_carbontracker_layer(tmp_path: Path, powercap, tracer_provider,
                                                                         span_exporter) -> None:
    """Issue 37: the callbacks drive the core's TrainingTracker (CarbonTracker wraps the same class): the same run,
    logs in carbontracker's format, and spans under the core's instrumentation scope."""
    from otel_joules.carbontracker.tracker import CarbonTracker
    from otel_joules.training.tracker import TrainingTracker

    energy = _energy(powercap, tracer_provider, log_dir=tmp_path / "logs", verbose=0)
    _train(energy, powercap, 2, planned=2)
    assert type(energy.tracker) is TrainingTracker and issubclass(CarbonTracker, TrainingTracker)
    assert energy.tracker.result.actual.epochs == 2
    assert len(list((tmp_path / "logs").glob("*_carbontracker.log"))) == 1
    scopes = {s.instrumentation_scope.name for s in span_exporter.get_finished_spans()}
    assert scopes == {"otel_joules.training"}
