"""The attribution model: which part of the host's energy is this process's, and each span's.

Model ``cpu_time_share`` (what ``energy.attribution`` names):

* **CPU-side domains** (RAPL package/psys, the CPU estimate): the host's energy is shared among
  the busy work of the host in proportion to CPU time, as Scaphandre does. The price of one CPU
  second spent in a sampler period is ``joules / max(host busy CPU seconds, this process's CPU
  seconds)`` of that period alone (the second term guards against ``/proc/stat``'s tick sampling
  undercounting, so this process is never given more than the host spent). No period's energy
  is priced into another's CPU time, so the shares stay conservative across load changes.
* **Memory** (RAPL dram, the memory estimate): shared by the same CPU time, but over the host's
  whole CPU capacity (busy + idle seconds): DRAM power is mostly refresh and background, not
  caused by whichever thread happens to run, so a lone busy thread on an idle host does not
  get all of it, and the price does not jump when the host's load does.
* **Idle**: the energy of a period with fewer than :data:`MIN_BUSY_S` busy CPU seconds (two
  ticks: too few to tell who was busy), and the idle CPU seconds' part of memory energy in the
  others, belong to no process and no span.
* **Spans**: a span's CPU seconds are those of the thread it started on while it is a *leaf*
  there (open with no open child span on that thread); when several spans are leaves on one
  thread at once (asyncio tasks), the thread's CPU time is split equally among them. Each
  span's CPU seconds are priced at the periods they were spent in (a forecast for time after the
  last sample, the average over the busy ones of the last :data:`RATE_WINDOW` periods: a span
  shorter than the period is priced at the recent average), and
  its CPU-side and memory self shares are capped at what the host spent of them during it.
* **GPUs**: the process's fraction of each GPU comes from NVML (:mod:`.gpu`); within the
  process, the GPU energy during a span is split equally among the leaf spans open at each
  moment (all threads), at the power of the latest sampler period.
* ``self`` joules are what a span accrued as a leaf; ``inclusive`` = self + the inclusive
  joules of its children that ended before it. Summed over all spans, ``self`` counts every
  joule once, whatever the nesting, concurrency or remote parents.

The sampler thread reads ``/proc/stat`` and the counters every :data:`HISTORY_PERIOD_S` (backing
off to :data:`~.sampling.IDLE_PERIOD_MAX_S` while the process is idle; the first span wakes it)
and keeps :data:`HISTORY_S` seconds of history; spans only read their thread's CPU clock.

Where each part lives: :mod:`.shares` (the kinds, :class:`SpanAttribution`, a whole command's
share), :mod:`.sampling` (the sampler thread, the history and its prices), :mod:`.history` (what
readers get from the history), :mod:`.spans` (the span path), :mod:`.attributor` (the
:class:`Attributor` built from those) and :mod:`.registry` (one attributor per meter). This
module keeps their names importable from where they were defined before.
"""

from __future__ import annotations

from otel_joules.attribution.attributor import Attributor
from otel_joules.attribution.registry import AttributionRegistry, attributor_for
from otel_joules.attribution.sampling import (
    HISTORY_PERIOD_S,
    HISTORY_S,
    MIN_BUSY_S,
    MIN_RATE_WINDOW_S,
    RATE_WINDOW,
    HistorySample,
)
from otel_joules.attribution.shares import (
    KINDS,
    SpanAttribution,
    command_attribution,
    kind_of,
    measured_kinds,
    share_of_cpu_time,
)
from otel_joules.attribution.spans import SpanShare

__all__ = [
    "Attributor",
    "AttributionRegistry",
    "HISTORY_PERIOD_S",
    "HISTORY_S",
    "HistorySample",
    "KINDS",
    "MIN_BUSY_S",
    "MIN_RATE_WINDOW_S",
    "RATE_WINDOW",
    "SpanAttribution",
    "SpanShare",
    "attributor_for",
    "command_attribution",
    "kind_of",
    "measured_kinds",
    "share_of_cpu_time",
]
