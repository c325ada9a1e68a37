"""``EnergyCallback`` for Hugging Face ``transformers``' ``Trainer`` (imports transformers).

::

    from otel_joules.integrations.transformers import EnergyCallback

    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[EnergyCallback(log_dir="logs")])
    trainer.train()

One ``training`` span with an ``epoch`` child per epoch, the prediction, carbon and logs as
:class:`~otel_joules.training.tracker.TrainingTracker` (also behind carbontracker's
``CarbonTracker``) makes them; every keyword is the tracker's or one of :mod:`otel_joules.integrations.session`'s (``step_spans``,
``step_span_every``, ``synchronize``, ``all_ranks``, ``epochs``). The Trainer's planned
``num_train_epochs`` is the run's ``epochs`` unless ``epochs=`` says otherwise.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from otel_joules.integrations.session import TrainerEnergy


class EnergyCallback(TrainerCallback):
    """A ``TrainerCallback`` measuring the training run's epochs (see the module docstring).

    Attributes:
        energy: The :class:`~otel_joules.integrations.session.TrainerEnergy` behind it; its
            ``tracker.result`` holds the actual and predicted consumption after training.
    """

    def __init__(self, **settings: Any) -> None:
        self.energy = TrainerEnergy(**settings)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Read the planned epochs."""
        epochs = getattr(state, "num_train_epochs", None) or getattr(args, "num_train_epochs", None)
        self.energy.train_begin(int(epochs) if epochs else None)

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Start the epoch's span."""
        self.energy.epoch_begin()

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """End the epoch's span."""
        self.energy.epoch_end()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Start a sampled step's span (``step_spans``)."""
        self.energy.step_begin(state.global_step)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """End it."""
        self.energy.step_end()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Report the actual consumption and end the run's spans."""
        self.energy.train_end()
