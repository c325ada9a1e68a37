"""The Lightning callback: a real Lightning Trainer on a tiny model, on the CPU, over a fake powercap tree at constant power."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pl = pytest.importorskip("pytorch_lightning")

from otel_joules import EnergyMeter  # noqa: E402
from otel_joules.integrations.lightning import EnergyCallback  # noqa: E402

from tests.fakes.powercap import ConstantPower, FakePowercap  # noqa: E402

WATTS = {"package_0": 40.0, "dram_0": 10.0}
TOTAL_W = sum(WATTS.values())


class _Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


#: Samples per epoch, 8 per batch: enough steps that an epoch lasts far longer than the fake
#: tree's 5 ms update (a 20 ms run of 64 samples was off by 10% on a quiet box).
SAMPLES = 1024
BATCHES_PER_EPOCH = SAMPLES // 8


def _data() -> "torch.utils.data.DataLoader":
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, 16, generator=generator)
    y = torch.randint(0, 2, (SAMPLES,), generator=generator)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)


def _fit(tmp_path: Path, callback: EnergyCallback, epochs: int) -> None:
    trainer = pl.Trainer(
        max_epochs=epochs, accelerator="cpu", devices=1, callbacks=[callback], logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(tmp_path),
    )
    trainer.fit(_Tiny(), _data())


def test_one_callback_gives_a_training_span_with_epochs_within_5_percent(
    tmp_path: Path, powercap: FakePowercap, tracer_provider, span_exporter
) -> None:
    callback = EnergyCallback(
        meter=EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False), tracer_provider=tracer_provider,
        intensity_gco2eq_per_kwh=100.0, verbose=0, step_spans=True, step_span_every=64,
    )
    assert isinstance(callback, pl.Callback)
    with ConstantPower(powercap, WATTS):
        _fit(tmp_path, callback, epochs=3)
    spans = span_exporter.get_finished_spans()
    (training,) = [s for s in spans if s.name == "training"]
    epochs = sorted((s for s in spans if s.name == "epoch"), key=lambda s: s.attributes["training.epoch.number"])
    assert [s.attributes["training.epoch.number"] for s in epochs] == [1, 2, 3]
    assert all(s.parent.span_id == training.context.span_id for s in epochs)
    assert training.attributes["training.epochs.planned"] == 3
    truth_j = TOTAL_W * (training.end_time - training.start_time) / 1e9
    assert training.attributes["energy.joules"] == pytest.approx(truth_j, rel=0.05)
    assert [e.name for e in training.events] == ["training.prediction"]
    # Global steps 1..3 x BATCHES_PER_EPOCH: every 64th from 1 gets a span.
    steps = sorted(s.attributes["training.step"] for s in spans if s.name == "step")
    assert steps == list(range(1, 3 * BATCHES_PER_EPOCH + 1, 64))
    assert callback.energy.tracker.result.actual.epochs == 3


def test_with_instrument_on_the_same_provider_the_runs_measurement_is_kept(
    tmp_path: Path, powercap: FakePowercap, tracer_provider, span_exporter
) -> None:
    # instrument()'s processor takes the run's measurement (its components) instead of its own.
    import otel_joules

    handle = otel_joules.instrument(tracer_provider, sysfs_root=powercap.sysfs_root, gpus=[], metrics_enabled=False)
    try:
        callback = EnergyCallback(
            meter=EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False), components="cpu",
            tracer_provider=tracer_provider, intensity_gco2eq_per_kwh=100.0, verbose=0,
        )
        with ConstantPower(powercap, WATTS):
            _fit(tmp_path, callback, epochs=2)
    finally:
        handle.uninstrument()
    spans = span_exporter.get_finished_spans()
    (training,) = [s for s in spans if s.name == "training"]
    assert training.attributes["energy.joules"] == pytest.approx(
        TOTAL_W * (training.end_time - training.start_time) / 1e9, rel=0.05
    )
    assert training.attributes["carbon.pue"] == 1.58  # the run's, not instrument()'s default 1.0
    assert "energy.attributed.joules" in training.attributes


ZERO_CODE_APP = """
import torch, pytorch_lightning as pl
from otel_joules.integrations.lightning import EnergyCallback

class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(16, 2)
    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.layer(x), y)
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

x, y = torch.randn(1024, 16), torch.randint(0, 2, (1024,))  # epochs far longer than the tree's 5 ms update
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
trainer = pl.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False, callbacks=[EnergyCallback(verbose=0)])
trainer.fit(Tiny(), data)
print("trained")
"""


def test_under_zero_code_the_spans_reach_the_sdks_exporter(tmp_path: Path, powercap: FakePowercap) -> None:
    import subprocess
    import sys

    from tests.fakes.otlp_receiver import OTLPGrpcReceiver
    from tests.helpers.processes import clean_env, opentelemetry_instrument

    app = tmp_path / "app.py"
    app.write_text(ZERO_CODE_APP)
    with OTLPGrpcReceiver() as receiver, ConstantPower(powercap, WATTS):
        env = clean_env(tmp_path, {"OTEL_JOULES_SYSFS_ROOT": powercap.sysfs_root, "OTEL_SERVICE_NAME": "trainer",
                                   **receiver.env()})
        run = subprocess.run([opentelemetry_instrument(), sys.executable, str(app)], env=env, capture_output=True,
                             text=True, timeout=180, stdin=subprocess.DEVNULL, cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        (training,) = receiver.wait_for_spans(name="training")
        epochs = receiver.wait_for_spans(2, name="epoch")
    assert sorted(s.attributes["training.epoch.number"] for s in epochs) == [1, 2]
    assert all(s.parent_span_id == training.span_id for s in epochs)
    assert training.attributes["energy.joules"] == pytest.approx(TOTAL_W * training.duration_ns / 1e9, rel=0.05)
    assert training.resource_attributes["service.name"] == "trainer"
