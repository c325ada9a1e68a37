"""Energy callbacks for the trainers ML engineers use: Hugging Face ``transformers`` and Lightning.

- :mod:`otel_joules.integrations.transformers`: ``EnergyCallback``, a ``transformers.TrainerCallback``
  (``Trainer(..., callbacks=[EnergyCallback()])``);
- :mod:`otel_joules.integrations.lightning`: ``EnergyCallback``, a ``lightning.pytorch.Callback``
  (also a ``pytorch_lightning.Callback`` when that is what is installed).

Both drive the core's :class:`~otel_joules.training.tracker.TrainingTracker` (what
:class:`~otel_joules.carbontracker.tracker.CarbonTracker` wraps), with its settings:
one ``training`` root span with one ``epoch`` child per epoch (``training.epoch.number`` from 1), the
``training.prediction`` event, carbon intensity and PUE, and with ``log_dir`` the logs
``otel-joules report`` reads; optionally sampled ``step`` spans. The shared part is
:mod:`.session`. Nothing here is imported by ``import otel_joules``; each module imports its
framework when it is imported itself.
"""
