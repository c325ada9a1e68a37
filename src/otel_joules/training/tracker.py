"""A monitored training run: the tracker both carbontracker's API and the trainer callbacks drive.

:class:`TrainingTracker` takes carbontracker's constructor arguments (checked in
:mod:`~otel_joules.training.options`), builds or borrows a meter, chooses the devices
(:mod:`~otel_joules.training.devices`) and runs a :class:`~otel_joules.training.run.TrainingRun`
(the ``training`` and ``epoch`` spans, the measurement, the prediction) through its states
(ready -> running -> finished, or failed). It says what happens on the console and, with
``log_dir``, in carbontracker-format log files (:mod:`~otel_joules.training.console`,
:mod:`~otel_joules.training.logwrite`) that ``otel-joules report`` and carbontracker's own
parser read; prints the prediction after ``epochs_before_pred`` epochs and the actual
consumption after ``monitor_epochs`` epochs or at :meth:`TrainingTracker.stop`; and routes
failures through ``ignore_errors``. Its results and errors are in
:mod:`~otel_joules.training.outcome`.

:class:`otel_joules.carbontracker.tracker.CarbonTracker` is this class under carbontracker's
name (its module docstring says what matches carbontracker 2.4.7 and what differs on purpose);
the trainer callbacks (:mod:`otel_joules.integrations.session`) drive it from trainer events.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any, ClassVar, Mapping, Sequence, TextIO

from otel_joules._fork import register_fork_hook
from otel_joules.carbon.providers import LiveProvider
from otel_joules.carbon.units import validate_pue
from otel_joules.meter.meter import EnergyMeter, EnergySnapshot
from otel_joules.meter.notice import announce_estimates
from otel_joules.training.console import TrackerOutput
from otel_joules.training.devices import DeviceSelection
from otel_joules.training.logwrite import (
    CARBONTRACKER_PUE,
    DEFAULT_DECIMAL_PRECISION,
    CarbonTrackerLogWriter,
)
from otel_joules.training.options import (
    DEFAULT_UPDATE_INTERVAL_SECONDS,
    check_api_keys,
    check_epochs,
    check_output_arguments,
    check_providers,
    ignored_sim_arguments,
    parse_components,
    providers_for_api_keys,
    resolve_intensity,
    simulated_devices,
)
from otel_joules.training.outcome import (
    CarbonTrackerError,
    NoComponentsError,
    TrackerReadout,
    TrackerResult,
    TrainingCancelledError,
)
from otel_joules.training.results import Consumption
from otel_joules.training.run import TrainingRun, default_tracer_provider

#: The instrumentation scope of the tracker's spans (a wrapper under another name sets its own).
INSTRUMENTATION_SCOPE = "otel_joules.training"


class TrainingTracker(TrackerReadout):
    """Track and predict the energy and carbon of a training loop (see the module docstring).

    What the caller can read (:attr:`result`, :attr:`actual`, :attr:`spans`, ...) is
    inherited from :class:`~otel_joules.training.outcome.TrackerReadout`.

    Args:
        epochs: Total epochs of the training loop (>= 0; 0, e.g. a resumed training with
            none left: no prediction, every epoch run is measured until :meth:`stop`).
        epochs_before_pred: Epochs to measure before printing the prediction for all
            ``epochs``; ``-1``: after all epochs; ``0``: no prediction.
        monitor_epochs: Epochs to measure; the actual consumption is reported when reached.
            ``-1``: all ``epochs``. Must not be 0 or below ``epochs_before_pred``.
        update_interval: carbontracker's power polling interval (s). Validated (> 0) and
            otherwise unused: energy comes from counters, nothing is polled.
        interpretable: Also print CO2eq as equivalents (km by car, ...).
        stop_and_confirm: After the prediction, ask on standard input whether to continue.
            Without a terminal on stdin, training continues and the console says so.
        ignore_errors: True: a failure stops monitoring and training goes on. False: it
            raises :class:`CarbonTrackerError` in the training thread.
        components: ``"all"``, ``"gpu"``, ``"cpu"`` or ``"gpu,cpu"``.
        devices_by_pid: Measure only GPUs running a process of this process tree.
        log_dir: Directory for carbontracker-format logs; None: no files.
        log_file_prefix: Put in front of the log file names.
        verbose: 0: no console output (errors are still printed to stderr); >= 1: print.
        decimal_precision: Decimals of the printed kWh, g and equivalents.
        api_keys: carbontracker's ``{"electricitymaps": KEY}`` (zone from ``country`` or
            ``OTEL_JOULES_COUNTRY``); ``"carbonintensityGB"`` and ``"energidataservice"``
            keys select those (keyless) services.
        sim_cpu, sim_cpu_tdp, sim_cpu_util, sim_gpu, sim_gpu_watts, sim_gpu_util: Simulated
            components (see the module docstring); the numbers without their name are
            ignored, as by carbontracker, and the console says so.
        pue: Power usage effectiveness applied to kWh and CO2eq (carbontracker's 1.58).
        intensity_gco2eq_per_kwh: Use this carbon intensity (wins over everything).
        country: ISO 3166 code for the offline yearly average (else ``OTEL_JOULES_COUNTRY``).
        intensity_providers: Live providers to ask (see :mod:`otel_joules.carbon.providers`),
            refreshed in the background every 900 s; added to those ``api_keys`` selects.
        tracer_provider: Where the spans go (default: the global SDK provider, else a
            private one).
        meter: Use this meter (its domains filtered by ``components``); the tracker
            does not close it. Default: a meter of its own, closed when monitoring ends.
        sysfs_root: Where sysfs is mounted, for the tracker's own meter.
        gpus: GPUs to measure (NVML indices or UUIDs), for the tracker's own meter.
        stdin: Where ``stop_and_confirm`` reads the answer (default ``sys.stdin``).
        parent_span_context: No ``training`` span of its own: the epochs are children of
            this span context (the trainer callbacks' ranks above 0 join rank 0's run).
        span_attributes: Attributes for every span of the run (the callbacks' rank).

    Raises:
        ConfigurationError: an argument is invalid (always raised, whatever ``ignore_errors``).
        CarbonTrackerError: nothing can be measured or the logs cannot be written, and
            ``ignore_errors`` is False.
    """

    #: The instrumentation scope of the run's spans.
    scope: ClassVar[str] = INSTRUMENTATION_SCOPE

    def __init__(
        self,
        epochs: int,
        epochs_before_pred: int = 1,
        monitor_epochs: int = -1,
        update_interval: float = DEFAULT_UPDATE_INTERVAL_SECONDS,
        interpretable: bool = True,
        stop_and_confirm: bool = False,
        ignore_errors: bool = False,
        components: str = "all",
        devices_by_pid: bool = False,
        log_dir: str | Path | None = None,
        log_file_prefix: str = "",
        verbose: int = 1,
        decimal_precision: int = DEFAULT_DECIMAL_PRECISION,
        api_keys: Mapping[str, str] | None = None,
        sim_cpu: str | None = None,
        sim_cpu_tdp: float | None = None,
        sim_cpu_util: float | None = None,
        sim_gpu: str | None = None,
        sim_gpu_watts: float | None = None,
        sim_gpu_util: float | None = None,
        *,
        pue: float = CARBONTRACKER_PUE,
        intensity_gco2eq_per_kwh: float | None = None,
        country: str | None = None,
        intensity_providers: Sequence[LiveProvider] = (),
        tracer_provider: Any = None,
        meter: EnergyMeter | None = None,
        sysfs_root: str | None = None,
        gpus: Sequence[int | str] | None = None,
        stdin: TextIO | None = None,
        parent_span_context: Any = None,
        span_attributes: Mapping[str, Any] | None = None,
    ) -> None:
        # -- arguments: programming errors, raised whatever ignore_errors says
        plan = check_epochs(epochs, epochs_before_pred, monitor_epochs)
        check_output_arguments(update_interval, verbose, decimal_precision, log_file_prefix, log_dir)
        check_api_keys(api_keys)
        self._component_names = parse_components(components)
        self._all_requested = "all" in [part.strip().lower() for part in components.split(",")]
        self._sims = tuple(
            sim
            for sim in simulated_devices(sim_cpu, sim_cpu_tdp, sim_cpu_util, sim_gpu, sim_gpu_watts, sim_gpu_util)
            if sim.component in self._component_names
        )
        self.pue = validate_pue(pue)
        self._extra_providers = check_providers(list(intensity_providers))
        self._country = country
        self._intensity = resolve_intensity(intensity_gco2eq_per_kwh, country, api_keys, self._extra_providers)

        # -- carbontracker's attributes, as it names them
        self.epochs = int(epochs)
        self.epochs_before_pred = int(epochs_before_pred)
        self.monitor_epochs = plan.monitor
        self.update_interval = update_interval
        self.interpretable = bool(interpretable)
        self.stop_and_confirm = bool(stop_and_confirm)
        self.ignore_errors = bool(ignore_errors)
        self.components = components
        self.devices_by_pid = bool(devices_by_pid)
        self.log_dir = log_dir
        self.log_file_prefix = log_file_prefix
        self.verbose = int(verbose)
        self.decimal_precision = int(decimal_precision)
        self.api_keys = api_keys
        self._plan = plan
        self._stdin = stdin
        self._ignored_sim = ignored_sim_arguments(sim_cpu, sim_cpu_tdp, sim_cpu_util, sim_gpu, sim_gpu_watts, sim_gpu_util)

        # -- state
        self._lock = threading.RLock()
        # Held across counter reads and log writes (a training thread's epoch_end): renewed in
        # a forked child (a DataLoader worker) so its own calls and exit never wait on it.
        register_fork_hook(self, "_new_lock")
        self._state = "ready"  # ready -> running -> finished (or failed)
        self._actual: Consumption | None = None
        self._predicted: Consumption | None = None
        self._early_stop = False
        self._error: str | None = None
        self._out = TrackerOutput(None, self.verbose, self.decimal_precision, self.interpretable)
        self._meter: EnergyMeter | None = None
        self._owns_meter = meter is None
        self._run: TrainingRun | None = None
        self._tracer_provider = tracer_provider if tracer_provider is not None else default_tracer_provider()
        self._parent_span_context = parent_span_context
        self._span_attributes = span_attributes
        self._start(meter, sysfs_root, gpus)

    # -- setup --------------------------------------------------------------------------

    def _start(self, meter: EnergyMeter | None, sysfs_root: str | None, gpus: Sequence[int | str] | None) -> None:
        """Open the logs and the meter, choose the devices, write the header (failures go through ignore_errors)."""
        try:
            if self.log_dir is not None:
                self._out.writer = CarbonTrackerLogWriter(self.log_dir, self.log_file_prefix)
            self._meter = meter if meter is not None else self._build_meter(sysfs_root, gpus)
            selection = DeviceSelection.select(self._meter, self._component_names, self._sims)
            if not selection.devices or (selection.missing and not self._all_requested):
                reasons = "; ".join(f"{u.what}: {u.reason}" for u in self._meter.unavailable) or "no sensor found"
                raise NoComponentsError(
                    f"cannot measure component(s) {', '.join(selection.missing)} here ({reasons}). "
                    "Run `otel-joules devices` to see what this machine exposes, or choose other components."
                )
            self._run = TrainingRun(
                self._meter,
                selection,
                self._intensity,
                self.pue,
                self._tracer_provider,
                self.epochs,
                self.scope,
                parent=self._parent_span_context,
                span_attributes=self._span_attributes,
            )
            self._out.header(
                selection.devices,
                self.pue,
                self._ignored_sim,
                selection.measured_domain_ids(),
                selection.estimated_domain_ids(),
                selection.has_estimates(),
                self._intensity.current(),
            )
            self._intensity.start()
        except Exception as exc:  # noqa: BLE001 - routed through ignore_errors
            self._fail(exc, "starting the tracker")

    def _build_meter(self, sysfs_root: str | None, gpus: Sequence[int | str] | None) -> EnergyMeter:
        simulated = {sim.component for sim in self._sims}
        measured = [name for name in self._component_names if name not in simulated]
        meter = EnergyMeter(
            sysfs_root=sysfs_root,
            gpus=gpus if "gpu" in measured else [],
            devices_by_pid=self.devices_by_pid,
            host="cpu" in measured,
        )
        announce_estimates(meter)
        return meter

    def _new_lock(self) -> None:
        self._lock = threading.RLock()

    # -- public API -------------------------------------------------------------------------

    def epoch_start(self) -> None:
        """Start measuring an epoch. Call at the beginning of each epoch of the training loop."""
        with self._lock:
            if self._state not in ("ready", "running"):
                return
            try:
                self._epoch_start_locked()
            except Exception as exc:  # noqa: BLE001 - routed through ignore_errors
                self._fail(exc, "epoch_start()")

    def epoch_end(self) -> None:
        """Stop measuring the current epoch; prints the prediction or actual consumption when due.

        Raises:
            CarbonTrackerError: a failure, with ``ignore_errors=False``.
            TrainingCancelledError: the user answered ``n`` to ``stop_and_confirm``.
        """
        with self._lock:
            if self._state != "running":
                if self._state == "ready":
                    self._fail(
                        CarbonTrackerError("epoch_end() was called before any epoch_start(); call epoch_start() first"),
                        "epoch_end()",
                    )
                return
            try:
                self._epoch_end_locked()
            except TrainingCancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - routed through ignore_errors
                self._fail(exc, "epoch_end()")

    def stop(self) -> TrackerResult:
        """End monitoring now (e.g. on early stopping) and report the actual consumption.

        An epoch still open is measured and counted (``interrupted=True``). After all
        ``monitor_epochs`` were measured this only returns the result. Idempotent.

        Returns:
            The :class:`TrackerResult` (also :attr:`result`).
        """
        with self._lock:
            if self._state in ("ready", "running"):
                try:
                    self._stop_locked()
                except Exception as exc:  # noqa: BLE001 - routed through ignore_errors
                    self._fail(exc, "stop()")
            return self.result

    @property
    def root_span_context(self) -> Any:
        """The ``training`` span's context once the first epoch started (None before, or with ``parent_span_context``)."""
        return None if self._run is None else self._run.root_span_context

    def step_start(self, step: int) -> None:
        """Start a ``step`` span (``training.step`` = ``step``) inside the open epoch; not in carbontracker.

        For callers that sample steps (the trainer callbacks' ``step_spans``): measured like
        an epoch, between two snapshots, and never part of the consumption. Nothing happens
        outside an epoch or once monitoring ended.
        """
        with self._lock:
            if self._state == "running" and self._run is not None:
                try:
                    self._run.start_step(step)
                except Exception as exc:  # noqa: BLE001 - routed through ignore_errors
                    self._fail(exc, "step_start()")

    def step_end(self) -> None:
        """Measure and end the span :meth:`step_start` opened (nothing when none is open)."""
        with self._lock:
            if self._state == "running" and self._run is not None:
                try:
                    self._run.end_step()
                except Exception as exc:  # noqa: BLE001 - routed through ignore_errors
                    self._fail(exc, "step_end()")

    def set_api_keys(self, api_keys: Mapping[str, str] | None) -> None:
        """Use these carbontracker API keys from now on, as carbontracker's ``set_api_keys``.

        ``{"electricitymaps": KEY}`` (zone from ``country``/``OTEL_JOULES_COUNTRY``),
        ``"carbonintensityGB"`` or ``"energidataservice"`` select live carbon-intensity
        services; they replace those the constructor's ``api_keys`` selected (providers
        given as ``intensity_providers`` stay). The intensity is fetched now, in the
        background, and every 900 s; epochs measured before keep the intensity they had.

        Raises:
            ConfigurationError: ``api_keys`` is not a dict or names an unknown service.
        """
        check_api_keys(api_keys)
        self.api_keys = api_keys
        self._intensity.set_providers(providers_for_api_keys(api_keys, self._country, self._extra_providers))

    def __enter__(self) -> "TrainingTracker":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- epochs -------------------------------------------------------------------------------

    def _epoch_start_locked(self) -> None:
        run = self._run
        assert run is not None
        if run.epoch_open:
            raise CarbonTrackerError(
                f"epoch_start() was called while epoch {run.epoch} is still running; call epoch_end() first"
            )
        if run.start_epoch():
            self._state = "running"
            assert run.trace_id is not None
            self._out.trace_id(run.trace_id)

    def _close_epoch(self, *, interrupted: bool) -> EnergySnapshot:
        """Measure and end the open epoch, say so; the closing snapshot."""
        assert self._run is not None
        result, end = self._run.end_epoch(interrupted=interrupted)
        self._out.epoch(result)
        return end

    def _epoch_end_locked(self) -> None:
        run = self._run
        assert run is not None
        if not run.epoch_open:
            raise CarbonTrackerError(
                f"epoch_end() was called twice for epoch {run.epoch}; call epoch_start() at the start of each epoch"
            )
        end = self._close_epoch(interrupted=False)
        pred_after = self._plan.pred_after
        if run.epoch == pred_after and pred_after > 0:
            intensity = self._intensity.current()  # one reading for the figures and the text
            self._predicted = run.predict(self.epochs, intensity)
            self._out.prediction(self._predicted, intensity, self.epochs)
            if self.stop_and_confirm and not self._out.confirm(self._stdin):
                self._out.info("Session ended by user.")
                self._out.output("Quitting...")
                self._finish(end, early_stop=True)
                raise TrainingCancelledError(
                    f"training stopped at the user's request after {run.epoch} epoch(s); the actual "
                    "consumption was reported and is in tracker.result"
                )
        if run.epoch >= self._plan.monitor_limit:
            self._finish(end, early_stop=False)

    def _stop_locked(self) -> None:
        assert self._run is not None
        if self._run.epoch_open:
            end: EnergySnapshot | None = self._close_epoch(interrupted=True)
        else:
            end = self._run.snapshot() if self._meter is not None else None
        if self.epochs == 0 and self._plan.monitor_limit == sys.maxsize:
            # Nothing was planned, so stop() is the normal end, not an interruption.
            self._finish(end, early_stop=False)
            return
        if self._out.writer is not None:
            self._out.writer.write_early_stop(self.monitor_epochs)
        self._finish(end, early_stop=True)

    # -- the end ----------------------------------------------------------------------------

    def _finish(self, end: EnergySnapshot | None, *, early_stop: bool) -> None:
        """Report the actual consumption, end the root span and release the meter."""
        run = self._run
        assert run is not None
        self._early_stop = early_stop
        actual = self._actual = run.actual()
        selection = run.selection
        self._out.actual(
            actual,
            None if self.epochs_before_pred == 0 else actual.epochs,
            self._intensity.current(),
            self._intensity.values(),
            selection.estimated_domain_ids(),
            selection.measured_domain_ids(),
        )
        share_joules = run.process_share_joules(actual.energy_joules)
        if share_joules is not None:
            share_kwh = run.accounting().kwh(share_joules)
            # At the intensity the actual block's grams used (the epochs' energy-weighted one): the same story.
            self._out.share(share_kwh, share_kwh * actual.intensity_gco2eq_per_kwh)
        run.end(end, early_stop=early_stop, actual=actual)
        self._out.finished()
        self._state = "finished"
        self._release()

    def _release(self) -> None:
        self._intensity.stop()
        meter, self._meter = self._meter, None
        if meter is not None and self._owns_meter:
            # Its attributor's thread ends now, not at its next tick when it finds the meter closed.
            if self._run is not None:
                self._run.close_attribution()
            meter.close()

    def _fail(self, exc: BaseException, where: str) -> None:
        """A failure: end what is open, keep what was measured, then raise or carry on."""
        message = f"{where} failed: {type(exc).__name__}: {exc}"
        self._error = message
        self._out.failure(exc, self.ignore_errors)
        run = self._run
        try:
            end = run.snapshot() if run is not None and self._meter is not None else None
        except Exception:  # noqa: BLE001 - the meter may be what failed
            end = None
        try:
            if run is not None:
                run.abandon_epoch(message)
                if run.results:
                    self._actual = run.actual()
                run.end(end, early_stop=True, actual=self._actual, error=message)
        except Exception:  # noqa: BLE001 - cleaning up must not hide the original failure
            pass
        self._state = "failed"
        self._release()
        if not self.ignore_errors:
            error_type = type(exc) if isinstance(exc, CarbonTrackerError) else CarbonTrackerError
            raise error_type(
                f"energy monitoring {message}. Training was interrupted (ignore_errors=False); pass "
                "ignore_errors=True to keep training without monitoring when this happens. What was measured "
                "before is in tracker.result."
            ) from exc
