"""The attribution model: which part of the host's energy is this process's, and each span's.

Model ``cpu_time_share``; ``energy.attribution`` names it with the policy: ``cpu_time_share/capacity``.

* **Static and dynamic energy**: each sampler period, each domain's energy is split into static
  (its baseline watts x the period's seconds, never more than the period's energy) and dynamic
  (the rest). The baseline is learned from the history (a running least-squares fit of period
  power against busy cores), configured (``OTEL_JOULES_STATIC_WATTS``, ``instrument(static_watts=)``)
  or unknown (the history's lowest 1 s average power, an upper bound): :mod:`.baseline`.
* **Prices** per CPU second of a period, with *busy* = the host's busy CPU seconds (never fewer
  than this process's: ``/proc/stat``'s ticks may undercount, and this process is never given
  more than the host spent) and *capacity* = busy + idle seconds (:func:`.sampling.policy_prices`):

  - dynamic (CPU-side and memory alike): dynamic joules / busy. It does not depend on other
    processes' load: on a host whose power is static + k W per busy core, it is k per CPU second.
  - the policy's (``OTEL_JOULES_ATTRIBUTION_POLICY``, ``instrument(attribution_policy=)``):
    ``capacity`` (default): dynamic + static / capacity, for both kinds: a CPU second carries one
    core's share of the static power, and the static energy of idle capacity is nobody's;
    ``busy``: the whole bill to the work: CPU-side joules / busy, memory joules / capacity (DRAM
    power is mostly refresh and background); ``dynamic``: the dynamic price.

  No period's energy is priced into another's CPU time, so the shares stay conservative across
  load changes: per period, the shares of all processes plus the unattributed remainder
  (``energy.unattributed``: what the prices leave of the energy) are the host's energy.
* **The platform's uncovered energy**: where a whole-platform reading (an ACPI power meter, psys) is
  read beside the component counters, what it spends beyond them each period (never negative: a
  lagging reading's shortfall is made up first) is CPU-side static energy, so the policies share it
  as they share static energy and the shares plus the remainder add up to the platform: :mod:`.uncovered`.
* **GPUs**: the process's fraction of each GPU comes from NVML (:mod:`.gpu`); its dynamic share is
  (energy - static) x the fraction; its policy share is energy x the fraction under ``capacity`` and
  ``busy`` (the processes on a GPU hold all of it), the dynamic share under ``dynamic``.
* **Idle**: the energy of a period with fewer than :data:`MIN_BUSY_S` busy CPU seconds (two
  ticks: too few to tell who was busy), and what the prices leave in the others (idle capacity's
  static energy under ``capacity``, all static energy under ``dynamic``, idle capacity's memory
  energy under ``busy``), belong to no process and no span.
* **Spans**: a span's CPU seconds are those of the thread it started on while it is a *leaf*
  there (open with no open child span on that thread); when several spans are leaves on one
  thread at once (asyncio tasks), the thread's CPU time is split equally among them. Each
  span's CPU seconds are priced at the periods they were spent in (a forecast for time after the
  last sample, the average over the busy ones of the last :data:`RATE_WINDOW` periods: a span
  shorter than the period is priced at the recent average), and
  its CPU-side and memory self shares are capped at what the host spent of them during it, its
  dynamic self share at its self share. The ledger accrues the policy's and the dynamic price side by side.
* **GPUs within the process**: the GPU energy during a span is split equally among the leaf spans
  open at each moment (all threads), at the power of the latest sampler period (each period's
  power from the sample that ends it on).
* ``self`` joules are what a span accrued as a leaf; ``inclusive`` = self + the inclusive
  joules of its children that ended before it. Summed over all spans, ``self`` counts every
  joule once, whatever the nesting, concurrency or remote parents.

The sampler thread reads ``/proc/stat`` and the counters every :data:`HISTORY_PERIOD_S` (backing
off to :data:`~.sampling.IDLE_PERIOD_MAX_S` while the process is idle; the first span wakes it)
and keeps :data:`HISTORY_S` seconds of history; spans only read their thread's CPU clock. It
samples at multiples of its period on the monotonic clock, which every process on the host
shares: all processes' samplers split the host's time into the same periods at the same prices,
so their shares and the unattributed remainder add up period by period.

The span path never waits for the sampler: after every sample the sampler publishes the prices,
the samples and the summary as one immutable value, and spans read that.

Where each part lives: :mod:`.shares` (the kinds, :class:`SpanAttribution`, a whole command's
share), :mod:`.baseline` (the domains' idle baselines), :mod:`.uncovered` (a platform reading's energy beyond the components), :mod:`.sampling` (the sampler's constants,
its samples and the policies' prices), :mod:`.history` (:class:`~.history.PriceHistory`: the sampler
thread, the history, its static/dynamic split and prices, and what readers get from it),
:mod:`.spans` (:class:`~.spans.SpanLedger`: the span path), :mod:`.attributor` (the
:class:`Attributor` composing those two) and :mod:`.registry` (one attributor per meter). This
module holds the description only: each name is imported from where it is defined.
"""
