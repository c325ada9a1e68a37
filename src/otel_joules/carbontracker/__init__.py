"""carbontracker compatibility layer: change the import prefix ``carbontracker`` to ``otel_joules.carbontracker``.

Submodules:

- :mod:`otel_joules.carbontracker.tracker`: ``CarbonTracker(epochs, ...)`` with
  ``epoch_start()``, ``epoch_end()`` and ``stop()``, measured by the otel-joules meter: a
  ``training`` span with one ``epoch`` child per epoch, carbon on each, results returned.
  It is the core's :class:`~otel_joules.training.tracker.TrainingTracker` (which the trainer
  callbacks drive too) under carbontracker's name: the spans, measurement, prediction, the
  argument checks, console and log messages and the result and error types are all
  :mod:`otel_joules.training`'s.
- :mod:`otel_joules.carbontracker.logs`: the carbontracker-format log writer
  (:mod:`otel_joules.training.logwrite`) and its formatters, under carbontracker's module path:
  carbontracker's own parser reads our logs and gets our values.
- :mod:`otel_joules.carbontracker.parser`: ``parse_all_logs``, ``parse_logs``,
  ``get_consumption``, ``aggregate_consumption``, ``print_aggregate`` with carbontracker's
  return shapes, reading logs written by carbontracker and by otel-joules, without
  carbontracker's parser bugs (the reading itself is core's, :mod:`otel_joules.training.logread`); also its helpers ``get_all_logs``, ``get_devices``,
  ``get_epoch_durations``, ``get_avg_power_usages``, ``get_most_recent_logs``.
- :mod:`otel_joules.carbontracker.report`: ``generate_report_from_log(log_file, output_pdf)``,
  a one-page PDF with the sections of carbontracker's report (matplotlib).
- :mod:`otel_joules.carbontracker.cli`: carbontracker's command line
  (``python -m otel_joules.carbontracker.cli``, same arguments), run through ``otel-joules run``'s
  child-process machinery.

This package module imports nothing on purpose: ``import otel_joules.carbontracker.parser``
must stay cheap and must not start measuring anything.
"""
