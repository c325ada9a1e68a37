"""Ranks of a multi-rank job told apart on every measured span, from torchrun's or Slurm's variables, with no resource detector."""

from __future__ import annotations

import pytest

from otel_joules import EnergyMeter
from otel_joules.tracing import EnergySpanProcessor
from otel_joules.tracing.ranks import JobRank, job_rank

from tests.fakes.powercap import FakePowercap

RANK_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS")


@pytest.fixture(autouse=True)
def _no_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def _span_attributes(pc: FakePowercap, tracer_provider, span_exporter) -> dict:
    meter = EnergyMeter(sysfs_root=pc.sysfs_root, gpus=[], sample=False)
    tracer_provider.add_span_processor(EnergySpanProcessor(meter, attribution=False))
    with tracer_provider.get_tracer("t").start_as_current_span("forward"):
        pass
    (span,) = span_exporter.get_finished_spans()
    return dict(span.attributes)


def test_under_torchrun_every_span_names_its_rank(monkeypatch, powercap, tracer_provider, span_exporter) -> None:
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    attributes = _span_attributes(powercap, tracer_provider, span_exporter)
    assert (attributes["training.rank"], attributes["training.local_rank"], attributes["training.world_size"]) == (3, 1, 4)
    assert "energy.joules" in attributes


def test_outside_a_launcher_nothing_is_added(powercap, tracer_provider, span_exporter) -> None:
    assert not [k for k in _span_attributes(powercap, tracer_provider, span_exporter) if k.startswith("training.")]


def test_slurm_when_torchrun_is_absent_and_junk_is_ignored() -> None:
    assert job_rank({"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NTASKS": "8"}) == JobRank(5, 1, 8)
    assert job_rank({"RANK": "2", "SLURM_PROCID": "5"}).rank == 2  # torchrun's wins
    assert job_rank({"RANK": "two", "SLURM_PROCID": "5"}).rank == 5
    assert job_rank({}) == JobRank() and JobRank().is_main and not JobRank(rank=1).is_main
