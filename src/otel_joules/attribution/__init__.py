"""Attribution: the part of the host's energy that is this process's, and each span's.

Data flow: the meter's snapshots and procfs CPU times (:mod:`.procfs`) go into an
:class:`Attributor` (:mod:`.model`), whose sampler keeps the host's busy-time history;
the span processor and the metric instruments read shares from it. Replace the model by
giving the processor another object with ``open_span``/``close_span``.
"""

from otel_joules.attribution.model import (
    HISTORY_PERIOD_S,
    HISTORY_S,
    KINDS,
    Attributor,
    AttributionRegistry,
    HistorySample,
    SpanAttribution,
    SpanShare,
    attributor_for,
    command_attribution,
    kind_of,
    share_of_cpu_time,
)
from otel_joules.attribution.procfs import CpuClocks, HostCpuTimes, ProcfsReadError, read_host_cpu_times

__all__ = [
    "HISTORY_PERIOD_S",
    "HISTORY_S",
    "KINDS",
    "Attributor",
    "AttributionRegistry",
    "CpuClocks",
    "HistorySample",
    "HostCpuTimes",
    "ProcfsReadError",
    "SpanAttribution",
    "SpanShare",
    "attributor_for",
    "command_attribution",
    "kind_of",
    "read_host_cpu_times",
    "share_of_cpu_time",
]
