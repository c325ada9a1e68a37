"""Which rank of a multi-rank job this process is (torchrun, Slurm), for the training spans.

torchrun sets ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE`` in every worker; Slurm sets
``SLURM_PROCID``, ``SLURM_LOCALID`` and ``SLURM_NTASKS`` in every task (torchrun's win where
both are set). :class:`~otel_joules.tracing.EnergySpanProcessor` puts them on every span it
measures, and the trainer callbacks on theirs, as ``training.rank``, ``training.local_rank`` and
``training.world_size``, so the ranks' spans are told apart in any export, CSV and JSON lines
included, with no resource detector configured (the resource's ``service.instance.id`` tells the
processes apart too, where the exporter keeps the resource). Outside such a launcher nothing is added.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

from otel_joules.semconv import TRAINING_LOCAL_RANK, TRAINING_RANK, TRAINING_WORLD_SIZE

_VARIABLES = (
    (TRAINING_RANK, ("RANK", "SLURM_PROCID")),
    (TRAINING_LOCAL_RANK, ("LOCAL_RANK", "SLURM_LOCALID")),
    (TRAINING_WORLD_SIZE, ("WORLD_SIZE", "SLURM_NTASKS")),
)


@dataclass(frozen=True)
class JobRank:
    """This process's place in its job; every field None outside a multi-process launcher."""

    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None

    @property
    def is_main(self) -> bool:
        """Rank 0, or not part of a multi-rank job."""
        return not self.rank

    def span_attributes(self) -> dict[str, int]:
        """``training.rank`` and friends, those that are known."""
        values = (self.rank, self.local_rank, self.world_size)
        return {name: value for (name, _), value in zip(_VARIABLES, values) if value is not None}


def job_rank(env: Mapping[str, str] | None = None) -> JobRank:
    """The rank from torchrun's or Slurm's variables (a value that is not an integer is ignored)."""
    env = os.environ if env is None else env
    found: list[int | None] = []
    for _, names in _VARIABLES:
        value = None
        for name in names:
            try:
                value = int(env.get(name, "").strip())
                break
            except ValueError:
                continue
        found.append(value)
    return JobRank(*found)
