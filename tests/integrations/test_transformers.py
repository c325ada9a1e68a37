"""The transformers callback: a real Trainer on a tiny BERT built from a config, on the CPU, over a fake powercap tree.

The fake tree draws constant power (``ConstantPower``), so the truth of any span is watts x its
duration. No hub download: the model is built from a ``BertConfig``, the data is random.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # the Trainer needs it

from otel_joules import EnergyMeter  # noqa: E402
from otel_joules.carbontracker import parser  # noqa: E402
from otel_joules.integrations.transformers import EnergyCallback  # noqa: E402
from otel_joules.report import build_report  # noqa: E402

from tests.fakes.powercap import ConstantPower, FakePowercap  # noqa: E402

WATTS = {"package_0": 40.0, "dram_0": 10.0}
TOTAL_W = sum(WATTS.values())


class _Data(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 64, (n, 8), generator=generator)
        self.labels = torch.randint(0, 2, (n,), generator=generator)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


def _trainer(tmp_path: Path, callback: EnergyCallback, epochs: int = 2, samples: int = 160) -> "transformers.Trainer":
    """A Trainer of ``samples`` random sequences, 4 a step; the default makes epochs of ~0.5 s here,
    far longer than the fake tree's 5 ms update (32 samples: 0.1 s epochs, off by up to 3%)."""
    config = transformers.BertConfig(
        vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=16, num_labels=2,
    )
    model = transformers.BertForSequenceClassification(config)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), num_train_epochs=epochs, per_device_train_batch_size=4, report_to=[],
        save_strategy="no", logging_strategy="no", use_cpu=True, disable_tqdm=True, dataloader_num_workers=0,
    )
    return transformers.Trainer(model=model, args=args, train_dataset=_Data(samples), callbacks=[callback])


def _meter(pc: FakePowercap) -> EnergyMeter:
    return EnergyMeter(sysfs_root=pc.sysfs_root, gpus=[], sample=False)


def test_one_callback_gives_a_training_span_with_epochs_within_5_percent(
    tmp_path: Path, powercap: FakePowercap, tracer_provider, span_exporter
) -> None:
    callback = EnergyCallback(
        meter=_meter(powercap), tracer_provider=tracer_provider, intensity_gco2eq_per_kwh=100.0,
        log_dir=tmp_path / "logs", verbose=0,
    )
    with ConstantPower(powercap, WATTS):
        _trainer(tmp_path, callback).train()
    spans = span_exporter.get_finished_spans()
    (training,) = [s for s in spans if s.name == "training"]
    epochs = sorted((s for s in spans if s.name == "epoch"), key=lambda s: s.attributes["training.epoch.number"])
    assert [s.attributes["training.epoch.number"] for s in epochs] == [1, 2]
    assert all(s.parent.span_id == training.context.span_id for s in epochs)
    assert training.parent is None
    assert training.attributes["training.epochs.planned"] == 2 and training.attributes["training.epochs.count"] == 2
    # CarbonTracker's attributes: energy, carbon at its intensity and PUE.
    assert training.attributes["carbon.pue"] == 1.58
    assert training.attributes["carbon.intensity.gco2eq_per_kwh"] == pytest.approx(100.0)
    duration_s = (training.end_time - training.start_time) / 1e9
    truth_j = TOTAL_W * duration_s
    assert training.attributes["energy.joules"] == pytest.approx(truth_j, rel=0.05), (duration_s, truth_j)
    for span in epochs:
        epoch_truth = TOTAL_W * (span.end_time - span.start_time) / 1e9
        assert span.attributes["energy.joules"] == pytest.approx(epoch_truth, rel=0.05, abs=0.3)
    # The prediction after the first epoch, as CarbonTracker's default.
    (event,) = [e for e in training.events if e.name == "training.prediction"]
    assert event.attributes["training.epochs.count"] == 2
    # No step spans unless asked.
    assert not [s for s in spans if s.name == "step"]
    # The logs: carbontracker's format, read by otel-joules report (counted once with the spans: the trace id line).
    (entry,) = parser.parse_all_logs(tmp_path / "logs")
    assert entry["actual"]["epochs"] == 2
    report = build_report([str(tmp_path / "logs")])
    (run,) = report.runs
    assert run.joules == pytest.approx(sum(s.attributes["energy.joules"] for s in epochs), rel=1e-3)


def test_step_spans_are_sampled_children_of_their_epoch(tmp_path: Path, powercap: FakePowercap, tracer_provider, span_exporter) -> None:
    callback = EnergyCallback(
        meter=_meter(powercap), tracer_provider=tracer_provider, intensity_gco2eq_per_kwh=100.0, verbose=0,
        step_spans=True, step_span_every=3,
    )
    _trainer(tmp_path, callback, epochs=1, samples=32).train()  # 32 samples / 4 = 8 steps
    spans = span_exporter.get_finished_spans()
    (epoch,) = [s for s in spans if s.name == "epoch"]
    steps = [s for s in spans if s.name == "step"]
    assert [s.attributes["training.step"] for s in steps] == [1, 4, 7]
    assert all(s.parent.span_id == epoch.context.span_id for s in steps)
    assert all("energy.joules" in s.attributes for s in steps)


def test_synchronize_is_called_at_every_boundary(tmp_path: Path, powercap: FakePowercap, tracer_provider) -> None:
    calls: list[str] = []

    def record() -> None:  # stands for torch.cuda.synchronize on a GPU machine
        calls.append("sync")

    callback = EnergyCallback(
        meter=_meter(powercap), tracer_provider=tracer_provider, intensity_gco2eq_per_kwh=100.0, verbose=0,
        synchronize=record, step_spans=True, step_span_every=4,
    )
    _trainer(tmp_path, callback, epochs=1, samples=32).train()  # 8 steps
    # epoch start, steps 1 and 5 (start and end each), epoch end, stop.
    assert len(calls) == 1 + 2 * 2 + 1 + 1
