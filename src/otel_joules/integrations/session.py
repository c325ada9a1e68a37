"""What both trainer callbacks do, without the frameworks: the core's training tracker driven by trainer events.

:class:`TrainerEnergy` takes the tracker's settings, carbontracker's keywords (``epochs_before_pred``,
``components``, ``log_dir``, ``pue``, ``intensity_gco2eq_per_kwh``, ``tracer_provider``, ``meter``,
...; see :class:`~otel_joules.training.tracker.TrainingTracker`) and the callbacks' own:

- ``step_spans`` (default False): a ``step`` span (``training.step``) for every
  ``step_span_every``-th step (default 10: steps 1, 11, 21, ...), measured like an epoch;
- ``synchronize`` (default ``"auto"``: torch's CUDA/ROCm device when torch is in use): waits
  for queued device work before every epoch boundary (and sampled step boundary), so a
  boundary's snapshot is taken after the work it closes (:mod:`otel_joules.meter.sync`);
- ``all_ranks`` (default False): in a multi-rank job (torchrun, Slurm), ranks above 0 make
  no ``training`` span, prediction, console output or logs of their own; their ``epoch``
  spans join rank 0's ``training`` span (its context is broadcast through
  ``torch.distributed`` when it is initialised; otherwise each rank's run is a trace of its
  own). Every span carries ``training.rank``, ``training.local_rank`` and
  ``training.world_size``. True: every rank is a whole run of its own.

The tracker is created at the first epoch, for the trainer's planned epochs (``epochs=``
overrides; 0 when the trainer has no bound: no prediction, every epoch measured).
"""

from __future__ import annotations

import sys
from typing import Any

from opentelemetry.trace import SpanContext, TraceFlags

from otel_joules.errors import ConfigurationError
from otel_joules.meter.sync import Synchronize, resolve_synchronizer
from otel_joules.tracing.ranks import JobRank, job_rank
from otel_joules.training.tracker import TrainingTracker

#: With ``step_spans=True``, one step in this many gets a span.
DEFAULT_STEP_SPAN_EVERY = 10


def _distributed() -> Any:
    """``torch.distributed`` when a process group is up with more than one rank, else None (never imports torch)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist if dist.get_world_size() > 1 else None


class TrainerEnergy:
    """A :class:`~otel_joules.training.tracker.TrainingTracker` fed by a trainer's events (see the module docstring).

    Raises:
        ConfigurationError: a setting is invalid (checked here, before training starts).
    """

    def __init__(
        self,
        *,
        epochs: int | None = None,
        step_spans: bool = False,
        step_span_every: int = DEFAULT_STEP_SPAN_EVERY,
        synchronize: Synchronize = "auto",
        all_ranks: bool = False,
        **tracker_settings: Any,
    ) -> None:
        if isinstance(step_span_every, bool) or not isinstance(step_span_every, int) or step_span_every < 1:
            raise ConfigurationError(f"step_span_every must be an integer >= 1 (1: every step), got {step_span_every!r}")
        if epochs is not None and (isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 0):
            raise ConfigurationError(f"epochs must be an integer >= 0, got {epochs!r}")
        if "epochs" in tracker_settings:
            raise ConfigurationError("give epochs once")
        self.epochs = epochs
        self.step_spans = bool(step_spans)
        self.step_span_every = step_span_every
        self.synchronize = resolve_synchronizer(synchronize)
        self.all_ranks = bool(all_ranks)
        self._settings = tracker_settings
        self.rank: JobRank = job_rank()
        #: The tracker (created at the first epoch); its ``result``, ``spans``, ... are the run's.
        self.tracker: TrainingTracker | None = None
        self._planned = 0
        self._step_open = False

    @property
    def joins_rank_zero(self) -> bool:
        """This process is a rank above 0 whose epochs join rank 0's run."""
        return not self.rank.is_main and not self.all_ranks

    def _sync(self) -> None:
        if self.synchronize is not None:
            self.synchronize()

    # -- trainer events -------------------------------------------------------------------------

    def train_begin(self, planned_epochs: int | None) -> None:
        """The trainer starts: ``planned_epochs`` is its bound (None or below 1: none)."""
        self.rank = job_rank()
        planned = self.epochs if self.epochs is not None else planned_epochs
        self._planned = planned if isinstance(planned, int) and planned > 0 else 0

    def _create(self) -> TrainingTracker:
        settings = dict(self._settings)
        parent = None
        if self.joins_rank_zero:
            # Rank 0 speaks for the job: no prediction, console output or logs here.
            settings.update(epochs_before_pred=0, verbose=0, log_dir=None)
        dist = None if self.all_ranks or self.rank.rank is None else _distributed()
        if dist is not None and self.joins_rank_zero:
            parent = self._receive_root(dist)
        tracker = TrainingTracker(
            epochs=self._planned, parent_span_context=parent, span_attributes=self.rank.span_attributes(), **settings
        )
        return tracker

    def _receive_root(self, dist: Any) -> SpanContext | None:
        box: list[Any] = [None]
        dist.broadcast_object_list(box, src=0)
        if not box[0]:
            return None
        trace_id, span_id = box[0]
        return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))

    def _send_root(self, tracker: TrainingTracker) -> None:
        dist = None if self.all_ranks or self.rank.rank is None else _distributed()
        if dist is None:
            return
        context = tracker.root_span_context
        box = [(context.trace_id, context.span_id) if context is not None and context.is_valid else None]
        dist.broadcast_object_list(box, src=0)

    def epoch_begin(self) -> None:
        """An epoch starts (after the device finished what came before)."""
        self._sync()
        if self.tracker is None:
            self.tracker = self._create()
            self.tracker.epoch_start()
            if self.rank.is_main:
                self._send_root(self.tracker)
            return
        self.tracker.epoch_start()

    def epoch_end(self) -> None:
        """The epoch ends, once the device finished its work."""
        if self.tracker is None:
            return
        self._step_end()
        self._sync()
        self.tracker.epoch_end()

    def step_begin(self, completed_steps: int) -> None:
        """A step starts; ``completed_steps`` before it (the trainer's global step)."""
        number = completed_steps + 1
        if not self.step_spans or self.tracker is None or (number - 1) % self.step_span_every:
            return
        self._sync()
        self.tracker.step_start(number)
        self._step_open = True

    def step_end(self) -> None:
        """The step ends."""
        self._step_end()

    def _step_end(self) -> None:
        if self._step_open and self.tracker is not None:
            self._step_open = False
            self._sync()
            self.tracker.step_end()

    def train_end(self) -> None:
        """Training ended (also after an exception): the actual consumption is reported, the spans end."""
        if self.tracker is None:
            return
        self._step_end()
        self._sync()
        self.tracker.stop()
