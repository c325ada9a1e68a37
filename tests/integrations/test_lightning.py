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


def _data() -> "torch.utils.data.DataLoader":
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 16, generator=generator)
    y = torch.randint(0, 2, (64,), generator=generator)
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
        energy_meter=EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False), tracer_provider=tracer_provider,
        intensity_gco2eq_per_kwh=100.0, verbose=0, step_spans=True, step_span_every=4,
    )
    assert isinstance(callback, pl.Callback)
    with ConstantPower(powercap, WATTS):
        _fit(tmp_path, callback, epochs=3)
    spans = span_exporter.get_finished_spans()
    (training,) = [s for s in spans if s.name == "training"]
    epochs = sorted((s for s in spans if s.name == "epoch"), key=lambda s: s.attributes["training.epoch"])
    assert [s.attributes["training.epoch"] for s in epochs] == [1, 2, 3]
    assert all(s.parent.span_id == training.context.span_id for s in epochs)
    assert training.attributes["training.epochs.planned"] == 3
    truth_j = TOTAL_W * (training.end_time - training.start_time) / 1e9
    assert training.attributes["energy.joules"] == pytest.approx(truth_j, rel=0.05)
    assert [e.name for e in training.events] == ["training.prediction"]
    # 8 batches per epoch, global steps 1..24: every 4th from 1 gets a span.
    steps = sorted(s.attributes["training.step"] for s in spans if s.name == "step")
    assert steps == [1, 5, 9, 13, 17, 21]
    assert callback.energy.tracker.result.actual.epochs == 3
