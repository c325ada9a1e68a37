"""carbontracker compatibility layer: change the import prefix ``carbontracker`` to ``otel_joules.carbontracker``.

Submodules:

- :mod:`otel_joules.carbontracker.tracker`: ``CarbonTracker(epochs, ...)`` with
  ``epoch_start()``, ``epoch_end()`` and ``stop()``, measured by the otel-joules meter: a
  ``training`` span with one ``epoch`` child per epoch, carbon on each, results returned.
- :mod:`otel_joules.carbontracker.logs`: writes carbontracker-format log files (standard,
  output and error logs) and formats the consumption blocks the console shows, so that
  carbontracker's own parser reads our logs and gets our values.
- :mod:`otel_joules.carbontracker.parser`: ``parse_all_logs``, ``parse_logs``,
  ``get_consumption``, ``aggregate_consumption``, ``print_aggregate`` with carbontracker's
  return shapes, reading logs written by carbontracker and by otel-joules, without
  carbontracker's parser bugs.

This package module imports nothing on purpose: ``import otel_joules.carbontracker.parser``
must stay cheap and must not start measuring anything.
"""
