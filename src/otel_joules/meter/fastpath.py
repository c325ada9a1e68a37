"""Which implementation of the span path's per-span arithmetic runs: compiled or the pure-Python reference.

:mod:`otel_joules.meter._fastsnap` is a C extension built at install where a C compiler is found
(``setup.py``; optional, so an install without one goes on). It does what two pure-Python functions do,
with the same results float for float: the common case of the meter's counter loop
(:func:`otel_joules.meter.meter.read_counters`) and a span's attribute dict from two snapshots
(:meth:`otel_joules.tracing.attributes.MeterAttributes.span_attributes`). The Python code is the
reference: every case the C code does not handle itself (wraps, restarts, jumps, failing or off-path
channels, stale or missing domains) calls it or returns to it.
"""

from __future__ import annotations

from types import ModuleType

from otel_joules.config import Settings

try:
    from otel_joules.meter import _fastsnap
except ImportError:  # built without a C compiler: the pure-Python path
    _fastsnap = None  # type: ignore[assignment]

#: The compiled module, or None where it was not built.
COMPILED: ModuleType | None = _fastsnap


def use_compiled(settings: Settings) -> bool:
    """Whether a meter with these settings takes the compiled path: built, and ``OTEL_JOULES_FAST_PATH`` not false."""
    return COMPILED is not None and settings.fast_path
