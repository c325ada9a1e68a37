"""Two ranks under torchrun (gloo, CPU) with the Lightning callback: their spans are told apart, the job is one run.

Rank 1's epochs join rank 0's ``training`` span (its context broadcast over torch.distributed), so
``otel-joules report`` sees one trace: the ranks' shares add, the host's energy is counted once, and
the shares together do not exceed it. The fake powercap tree draws constant power for both ranks.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("pytorch_lightning")

from otel_joules.report import build_report  # noqa: E402

from tests.fakes.powercap import ConstantPower, FakePowercap  # noqa: E402
from tests.helpers.processes import clean_env  # noqa: E402

WATTS = {"package_0": 40.0, "dram_0": 10.0}

RANK_SCRIPT = """
import os, sys
import torch, pytorch_lightning as pl
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from otel_joules.exporters import JsonLinesSpanExporter
from otel_joules.integrations.lightning import EnergyCallback

out, sysfs = sys.argv[1], sys.argv[2]

class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.layer(x), y)
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

torch.manual_seed(0)
x, y = torch.randn(256, 32), torch.randint(0, 2, (256,))
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16)
import otel_joules
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(JsonLinesSpanExporter(f"{out}/spans_{os.environ['RANK']}.jsonl")))
otel_joules.instrument(provider, sysfs_root=sysfs, gpus=[], metrics_enabled=False)  # the spans' shares
callback = EnergyCallback(tracer_provider=provider, sysfs_root=sysfs, gpus=[], intensity_gco2eq_per_kwh=100.0,
                          verbose=0, log_dir=f"{out}/logs")
trainer = pl.Trainer(max_epochs=2, accelerator="cpu", devices=2, strategy="ddp", logger=False, callbacks=[callback],
                     enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
trainer.fit(Tiny(), data)
provider.shutdown()
"""


def _spans(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_two_torchrun_ranks_are_told_apart_and_counted_once(tmp_path: Path, powercap: FakePowercap) -> None:
    script = tmp_path / "train.py"
    script.write_text(RANK_SCRIPT)
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    env = clean_env(tmp_path)
    with ConstantPower(powercap, WATTS):
        run = subprocess.run(
            [torchrun, "--standalone", "--nproc_per_node", "2", str(script), str(tmp_path), powercap.sysfs_root],
            env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path, stdin=subprocess.DEVNULL,
        )
    assert run.returncode == 0, run.stderr[-4000:]
    rank0, rank1 = _spans(tmp_path / "spans_0.jsonl"), _spans(tmp_path / "spans_1.jsonl")
    # Told apart: every span names its rank; rank 1 has no training span of its own.
    assert {s["attributes"]["training.rank"] for s in rank0} == {0}
    assert {s["attributes"]["training.rank"] for s in rank1} == {1}
    assert all(s["attributes"]["training.world_size"] == 2 for s in rank0 + rank1)
    (training,) = [s for s in rank0 if s["name"] == "training"]
    assert sorted(s["name"] for s in rank1) == ["epoch", "epoch"]
    # One trace: rank 1's epochs are children of rank 0's training span.
    assert {s["trace_id"] for s in rank0 + rank1} == {training["trace_id"]}
    assert all(s["parent_span_id"] == training["span_id"] for s in rank0 + rank1 if s["name"] == "epoch")
    # Only rank 0 writes carbontracker logs (one pair) and makes the prediction.
    assert len(list((tmp_path / "logs").glob("*_carbontracker.log"))) == 1

    report = build_report([str(tmp_path / "spans_0.jsonl"), str(tmp_path / "spans_1.jsonl"), str(tmp_path / "logs")])
    (run,) = report.runs  # the log pair names the trace: counted once, from the spans
    host_j = training["attributes"]["energy.joules"]
    shares = [training["attributes"]["energy.attributed.joules"]] + [
        s["attributes"]["energy.attributed.joules"] for s in rank1
    ]
    assert run.energy_basis == "attributed share"
    assert run.joules == pytest.approx(sum(shares))  # the ranks' shares add...
    assert run.host_interval_joules == pytest.approx(host_j)  # ...the host's energy is not summed over ranks
    assert 0 < run.joules <= host_j
    assert [e.epoch for e in run.epochs] == [1, 2]
    for epoch in run.epochs:
        by_rank = [s["attributes"]["energy.attributed.joules"] for s in rank0 + rank1
                   if s["name"] == "epoch" and s["attributes"]["training.epoch.number"] == epoch.epoch]
        assert len(by_rank) == 2 and epoch.joules == pytest.approx(sum(by_rank))
