"""pyJoules, as a drop-in: change the import prefix ``pyJoules`` to ``otel_joules.pyjoules``.

::

    from otel_joules.pyjoules.energy_meter import measure_energy
    from otel_joules.pyjoules.handler.csv_handler import CSVHandler

Same modules, names and outputs as pyJoules 0.5.1 (:mod:`.energy_meter`,
:mod:`.energy_trace`, :mod:`.device`, :mod:`.handler`, :mod:`.exception`), measured by
the core :class:`otel_joules.EnergyMeter`: every domain in microjoules (the GPU
included), wrap-around corrected, GPUs chosen as CUDA sees them, and an OpenTelemetry
span per measurement when an SDK tracer provider is configured. See
:mod:`.energy_meter` for the pyJoules bugs fixed.
"""

from otel_joules._version import __version__

#: The pyJoules release whose API this package reproduces.
PYJOULES_API_VERSION = "0.5.1"

__all__ = ["PYJOULES_API_VERSION", "__version__"]
