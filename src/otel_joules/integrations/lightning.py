"""``EnergyCallback`` for Lightning's ``Trainer`` (imports ``lightning.pytorch`` or ``pytorch_lightning``).

::

    from otel_joules.integrations.lightning import EnergyCallback

    trainer = lightning.pytorch.Trainer(max_epochs=10, callbacks=[EnergyCallback(log_dir="logs")])
    trainer.fit(model, data)

The same spans, prediction, carbon and logs as the transformers callback
(:mod:`otel_joules.integrations.session` lists the keywords). The class is a
``lightning.pytorch.Callback`` and, when ``pytorch_lightning`` is installed too (or alone),
a ``pytorch_lightning.Callback``: either trainer accepts it. ``max_epochs`` is the run's
``epochs`` unless ``epochs=`` says otherwise (none, -1: no prediction).
"""

from __future__ import annotations

import importlib
from typing import Any

from otel_joules.integrations.session import TrainerEnergy


def _callback_bases() -> tuple[type, ...]:
    bases = []
    for module in ("lightning.pytorch", "pytorch_lightning"):
        try:
            bases.append(importlib.import_module(module).Callback)
        except ImportError:
            continue
    if not bases:
        # ModuleNotFoundError, as for any missing package: callers that skip absent extras catch that.
        raise ModuleNotFoundError(
            "otel_joules.integrations.lightning needs Lightning: pip install lightning (or pytorch-lightning)",
            name="lightning",
        )
    return tuple(bases)


class EnergyCallback(*_callback_bases()):  # type: ignore[misc]
    """A Lightning ``Callback`` measuring the training run's epochs (see the module docstring).

    Attributes:
        energy: The :class:`~otel_joules.integrations.session.TrainerEnergy` behind it; its
            ``tracker.result`` holds the actual and predicted consumption after training.
    """

    def __init__(self, **settings: Any) -> None:
        super().__init__()
        self.energy = TrainerEnergy(**settings)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        """Read the planned epochs."""
        self.energy.train_begin(trainer.max_epochs)

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        """Start the epoch's span."""
        self.energy.epoch_begin()

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        """End the epoch's span."""
        self.energy.epoch_end()

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        """Start a sampled step's span (``step_spans``)."""
        self.energy.step_begin(trainer.global_step)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        """End it."""
        self.energy.step_end()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        """Report the actual consumption and end the run's spans."""
        self.energy.train_end()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """Training failed: what was measured is reported (the open epoch as interrupted)."""
        self.energy.train_end()
