"""Attribution: the part of the host's energy that is this process's, and each span's.

Data flow: the meter's snapshots and procfs CPU times (:mod:`.procfs`) go into an
:class:`Attributor` (:mod:`.attributor`; the model and its rules: :mod:`.model`), which composes
two objects. A :class:`PriceHistory` (:mod:`.history`; its constants and samples: :mod:`.sampling`)
runs the sampler thread, keeps the host's busy-time history, splits each period's energy into
static (the domains' baselines, :mod:`.baseline`) and dynamic, prices it under the policy and
publishes the prices for the span path; readers get this process's totals and past prices from it.
A :class:`SpanLedger` (:mod:`.spans`) credits each thread's CPU time to its leaf spans at those
prices, without a lock the sampler takes. The span processor and the metric instruments share one
attributor per meter (:mod:`.registry`) and read shares from it; :mod:`.shares` holds the kinds,
:class:`SpanAttribution` and a whole command's share (``otel-joules run``, its baselines:
:mod:`.command`). Replace the model by giving the processor another object with
``open_span``/``close_span``.
"""

from otel_joules.attribution.attributor import Attributor
from otel_joules.attribution.history import PriceHistory
from otel_joules.attribution.procfs import CpuClocks, HostCpuTimes, ProcfsReadError, read_host_cpu_times
from otel_joules.attribution.registry import AttributionRegistry, attributor_for
from otel_joules.attribution.sampling import HISTORY_PERIOD_S, HISTORY_S, HistorySample
from otel_joules.attribution.shares import ATTRIBUTION_KIND, KINDS, SpanAttribution, command_attribution, share_of_cpu_time
from otel_joules.attribution.spans import SpanLedger, SpanShare

__all__ = [
    "ATTRIBUTION_KIND",
    "HISTORY_PERIOD_S",
    "HISTORY_S",
    "KINDS",
    "Attributor",
    "AttributionRegistry",
    "CpuClocks",
    "HistorySample",
    "HostCpuTimes",
    "PriceHistory",
    "ProcfsReadError",
    "SpanAttribution",
    "SpanLedger",
    "SpanShare",
    "attributor_for",
    "command_attribution",
    "read_host_cpu_times",
    "share_of_cpu_time",
]
