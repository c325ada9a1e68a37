"""Which implementation of the span path's per-span arithmetic runs: compiled or the pure-Python reference.

:mod:`otel_joules.meter._fastsnap` is a C extension built at install where a C compiler is found
(``setup.py``; optional, so an install without one goes on). It does what pure-Python code does, with the
same results float for float: the common case of the meter's counter loop
(:func:`otel_joules.meter.meter.read_counters`), of :meth:`EnergyMeter.snapshot
<otel_joules.meter.meter.EnergyMeter.snapshot>` around it and of an interval's two ends
(:func:`otel_joules.meter.interval.open_interval`, :func:`~otel_joules.meter.interval.close_interval`;
these three bound to each meter on the compiled path), and a span's attribute dict from two snapshots
(:meth:`otel_joules.tracing.attributes.MeterAttributes.span_attributes`). The Python code is the
reference: every case the C code does not handle itself (wraps, restarts, jumps, failing or off-path
channels, stale or missing domains, stated times, standby estimates) calls it or returns to it. The span
ledger's twin is its own extension, :mod:`otel_joules.attribution._fastledger`, on the same switch.
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
