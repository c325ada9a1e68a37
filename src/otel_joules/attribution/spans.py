"""The span path: each thread's ledger of CPU time and the joules its leaf spans accrue.

:meth:`SpanLedger.open_span` and :meth:`SpanLedger.close_span` run at every span start and
end, so they only read the calling thread's CPU clock and add to its ledger (the
integral trick: O(1) per event however many spans are open); CPU time is priced by the
:class:`~.history.PriceHistory` the span ledger holds (the periods it was spent in, the forecast
after the latest sample: read from its published view, without a lock), GPU energy is spread
over the open leaf spans at each period's power, and a span's :class:`SpanShare` is capped at
what the host spent during it. The rules are in :mod:`otel_joules.attribution.model`'s docstring.
"""

from __future__ import annotations

import threading
import time
import weakref
from types import MethodType

from otel_joules.attribution._ledger import _fastledger, _Ledger, _new_lock, _ShareFields, _SpanLedgerFields
from otel_joules.attribution._prices import _gpu_joules_at
from otel_joules.attribution.history import PriceHistory
from otel_joules.attribution.shares import SpanAttribution
from otel_joules.meter.energy import spent_joules
from otel_joules.meter.meter import EnergySnapshot
from otel_joules.semconv import KIND_CPU, KIND_MEMORY

_new_tuple = tuple.__new__


class SpanShare(_ShareFields):  # type: ignore[misc,valid-type]
    """Per-span bookkeeping between ``open_span`` and ``close_span`` (touched under its ledger's lock).

    Its numbers are :class:`~otel_joules.attribution._ledger._ShareFields`' (C fields where the extension is
    built); ``*dynamic*`` is the span's dynamic energy (CPU-side, memory and GPU together), beside the policy's
    per-kind joules.
    """

    __slots__ = ()

    def __init__(self, ledger: _Ledger, parent: "SpanShare | None", cpu0: float, memory0: float, dynamic0: float) -> None:
        self.ledger = ledger
        self.parent = parent
        self.cpu0 = cpu0
        self.memory0 = memory0
        self.dynamic0 = dynamic0

    def abandon(self, _ref: object = None) -> None:
        """Close the share of a span that was dropped without ``end()`` (a weakref callback)."""
        if not self.ended:
            try:
                self.ledger.owner.close_span(self)
            except Exception:  # noqa: BLE001 - runs inside the garbage collector: never raise
                pass


class SpanLedger(_SpanLedgerFields):  # type: ignore[misc,valid-type]
    """Opens and closes spans' shares on the calling thread's ledger, priced by a :class:`PriceHistory`.

    Owns the per-thread ledgers of open spans (the idle back-off asks :meth:`spans_open`) and the
    process's GPU energy spread over the open leaf spans. Takes no lock the sampler thread takes: the
    prices come from the history's published view, and the GPU section's lock is the span threads' own.

    :meth:`open_span` and :meth:`close_span` run at every span's start and end. With ``compiled`` and the C
    extension built (:mod:`otel_joules.attribution._fastledger`), this ledger's ``open_span`` and ``close_span``
    are that extension's twins of the two methods, bound to it: the same steps on the same attributes under the
    same locks, float for float. The methods below are the reference: they run where it is not built or not
    chosen (``OTEL_JOULES_FAST_PATH=false``), and the compiled ones call them for a thread's first span.

    Args:
        prices: Where CPU time's prices and the process's GPU watts come from.
        compiled: Take the compiled twins where they are built (the meter's ``fast_path``).
    """

    def __init__(self, prices: PriceHistory, *, compiled: bool = False) -> None:
        self.prices = prices
        #: Whether this ledger's span methods are the compiled twins.
        self.compiled = compiled and _fastledger is not None
        if self.compiled:
            # Instance attributes, found before the class's methods: the processor calls them with no frame between.
            self.open_span = MethodType(_fastledger.open_span, self)  # type: ignore[method-assign]
            self.close_span = MethodType(_fastledger.close_span, self)  # type: ignore[method-assign]
        # Capped per span (_cap). GPUs are not: their share is power x time, not a price per CPU
        # second that could lag.
        self._cpu_indices = prices.kind_indices[KIND_CPU]
        self._memory_indices = prices.kind_indices[KIND_MEMORY]
        # The CPU-side share carries the platform's energy beyond the components' (.uncovered): its cap too.
        self._uncovered = prices.uncovered_positions
        self.has_gpu = prices.has_gpu
        self._generation = 0
        self._reset()

    def _reset(self) -> None:
        self._local = threading.local()
        #: Weak references to every thread's ledger, under their lock: the open spans.
        self._ledgers: list[weakref.ref[_Ledger]] = []
        self._ledgers_alive = 0
        self._ledgers_lock = threading.Lock()
        # The GPU accounts are shared by every thread's leaves; only span events take this lock.
        self._gpu_lock = _new_lock()
        self._gpu_acc_j = 0.0
        self._gpu_dynamic_acc_j = 0.0
        #: The process's cumulative GPU joules (the policy's, the dynamic ones) credited so far.
        self._gpu_seen_j, self._gpu_seen_dynamic_j = _gpu_joules_at(self.prices.view.rates, time.monotonic_ns())
        self._gpu_leaves = 0

    def after_fork_in_child(self) -> None:
        """Start the ledgers afresh in a forked child: spans opened before the fork (their ledgers'
        generation) end without attribution, their threads do not exist here."""
        self._generation += 1
        self._reset()

    def spans_open(self) -> bool:
        """Whether a span is open on any thread (a thread with an open span has a leaf on its ledger)."""
        with self._ledgers_lock:
            ledgers = self._prune_ledgers()
        return any(ledger.leaves for ledger in ledgers)

    def _register_ledger(self, ledger: _Ledger) -> None:
        """Keep a new thread's ledger in view of :meth:`spans_open` (once per thread; threads that ended are pruned)."""
        with self._ledgers_lock:
            self._ledgers.append(weakref.ref(ledger))
            if len(self._ledgers) > 2 * self._ledgers_alive + 16:
                self._prune_ledgers()

    def _prune_ledgers(self) -> list[_Ledger]:
        """The live ledgers; forget those of threads that ended (``_ledgers_lock`` held)."""
        ledgers = [ledger for ledger in (ref() for ref in self._ledgers) if ledger is not None]
        self._ledgers[:] = [weakref.ref(ledger) for ledger in ledgers]
        self._ledgers_alive = len(ledgers)
        return ledgers

    def _advance(self, ledger: _Ledger, now_ns: int, snapshot: EnergySnapshot | None = None) -> None:
        """Credit the thread's CPU time since its last event to its leaf spans (ledger lock held).

        ``snapshot``: the counters read now (a span's closing snapshot), for :meth:`first_forecast`."""
        try:
            cpu_s = ledger.clock()
        except (OSError, ValueError):
            cpu_s = ledger.cpu_s  # the thread has exited: it spends nothing more
        leaves = ledger.leaves
        if leaves:
            delta = cpu_s - ledger.cpu_s
            if delta > 0:
                rates = self.prices.view.rates
                if not rates[0]:
                    rates = self.prices.first_forecast(snapshot)
                per_leaf = delta / leaves
                if ledger.t_ns >= rates[0]:
                    ledger.acc_cpu_j += per_leaf * rates[1]
                    ledger.acc_memory_j += per_leaf * rates[2]
                    ledger.acc_dynamic_j += per_leaf * rates[4]
                else:
                    r_cpu, r_memory, r_dynamic = self.prices.price(ledger.t_ns, now_ns)
                    ledger.acc_cpu_j += per_leaf * r_cpu
                    ledger.acc_memory_j += per_leaf * r_memory
                    ledger.acc_dynamic_j += per_leaf * r_dynamic
        ledger.cpu_s = cpu_s
        ledger.t_ns = now_ns

    def _credit_gpu_locked(self, now_ns: int) -> None:
        """Spread the process's GPU energy since the last event over the open leaf spans (``_gpu_lock`` held).

        The published prices give the process's cumulative GPU joules at any instant, each sampler
        period at its own watts: the difference since the last event is the energy to spread. A new
        price published after the last event can put that event's total a little high; the next
        events then credit nothing until the total passes it, so nothing is credited twice.
        """
        gpu_j, gpu_dynamic_j = _gpu_joules_at(self.prices.view.rates, now_ns)
        leaves = self._gpu_leaves
        if gpu_j > self._gpu_seen_j:
            if leaves:
                self._gpu_acc_j += (gpu_j - self._gpu_seen_j) / leaves
            self._gpu_seen_j = gpu_j
        if gpu_dynamic_j > self._gpu_seen_dynamic_j:
            if leaves:
                self._gpu_dynamic_acc_j += (gpu_dynamic_j - self._gpu_seen_dynamic_j) / leaves
            self._gpu_seen_dynamic_j = gpu_dynamic_j

    def open_span(self, parent: SpanShare | None = None) -> SpanShare:
        """Start attributing to a new span on the calling thread, a child of ``parent`` if that is local."""
        try:
            ledger = self._local.ledger
        except AttributeError:
            ledger = self._local.ledger = _Ledger(self.prices.clocks.thread_clock(), self._generation, self)
            self._register_ledger(ledger)
            self.prices.ensure_sampling()
        now_ns = time.monotonic_ns()
        off_parent: SpanShare | None = None  # the parent this span stops being a leaf
        with ledger.lock:
            if ledger.leaves or parent is not None:
                self._advance(ledger, now_ns)
                if parent is not None and parent.ledger is ledger and not parent.ended:
                    if parent.open_children == 0 and parent.leaf:
                        parent.own_cpu += ledger.acc_cpu_j - parent.cpu0
                        parent.own_memory += ledger.acc_memory_j - parent.memory0
                        parent.own_dynamic += ledger.acc_dynamic_j - parent.dynamic0
                        parent.leaf = False
                        ledger.leaves -= 1
                        off_parent = parent
                    parent.open_children += 1
            else:
                # No span open on this thread: only the clock's new origin matters.
                try:
                    ledger.cpu_s = ledger.clock()
                except (OSError, ValueError):
                    pass
                ledger.t_ns = now_ns
            share = SpanShare(ledger, parent, ledger.acc_cpu_j, ledger.acc_memory_j, ledger.acc_dynamic_j)
            ledger.leaves += 1
            if self.has_gpu:
                # One GPU-lock section per event: credit the time so far at the old leaf count, then
                # move the parent off the leaves and this span on.
                with self._gpu_lock:
                    self._credit_gpu_locked(now_ns)
                    acc_gpu_j, acc_gpu_dynamic_j = self._gpu_acc_j, self._gpu_dynamic_acc_j
                    if off_parent is not None:
                        off_parent.own_gpu += acc_gpu_j - off_parent.gpu0
                        off_parent.own_dynamic += acc_gpu_dynamic_j - off_parent.gpu_dynamic0
                    else:
                        self._gpu_leaves += 1
                    share.gpu0, share.gpu_dynamic0 = acc_gpu_j, acc_gpu_dynamic_j
        pace = self.prices.pace
        if pace.dozing:
            pace.wake()  # after the leaf is counted: the sampler either sees it or was dozing (SamplerPace.next_period_s)
        return share

    def close_span(
        self, share: SpanShare, start: EnergySnapshot | None = None, end: EnergySnapshot | None = None
    ) -> SpanAttribution | None:
        """Stop attributing to ``share``'s span and return what it was attributed (None if already closed).

        With the span's own snapshots (``start``, ``end``), neither its CPU-side nor its memory self
        share exceeds what the host spent of that kind during the span: prices lag the load by up
        to a sampler period, and a span right after a quiet period must still not be given more
        than the host spent.

        None too while ``/proc/stat`` cannot be read or reads implausibly (:attr:`PriceHistory.stat_fault`): the
        share would be priced at a forecast the sampler can no longer renew. The bookkeeping is
        done all the same, so the span's parent and siblings are unaffected.
        """
        ledger = share.ledger
        if share.ended or ledger.generation != self._generation:
            return None  # closed before, or opened before a fork: its thread does not exist here
        now_ns = time.monotonic_ns()
        parent = share.parent
        with ledger.lock:
            if share.ended:
                return None
            self._advance(ledger, now_ns, end)
            was_leaf = share.leaf
            if was_leaf:
                share.own_cpu += ledger.acc_cpu_j - share.cpu0
                share.own_memory += ledger.acc_memory_j - share.memory0
                share.own_dynamic += ledger.acc_dynamic_j - share.dynamic0
                share.leaf = False
                ledger.leaves -= 1
            share.ended = True
            if end is not None and start is not None:
                self._cap(share, start, end)
            # The parent, when open on this thread: it becomes a leaf again when this was its last open child.
            local = parent if parent is not None and parent.ledger is ledger and not parent.ended else None
            on_parent: SpanShare | None = None
            if local is not None:
                local.open_children -= 1
                if local.open_children == 0:
                    local.cpu0 = ledger.acc_cpu_j
                    local.memory0 = ledger.acc_memory_j
                    local.dynamic0 = ledger.acc_dynamic_j
                    local.leaf = True
                    ledger.leaves += 1
                    on_parent = local
            if self.has_gpu:
                # One GPU-lock section per event, as in open_span.
                with self._gpu_lock:
                    self._credit_gpu_locked(now_ns)
                    acc_gpu_j, acc_gpu_dynamic_j = self._gpu_acc_j, self._gpu_dynamic_acc_j
                    if was_leaf:
                        share.own_gpu += acc_gpu_j - share.gpu0
                        share.own_dynamic += acc_gpu_dynamic_j - share.gpu_dynamic0
                        self._gpu_leaves -= 1
                    if on_parent is not None:
                        on_parent.gpu0, on_parent.gpu_dynamic0 = acc_gpu_j, acc_gpu_dynamic_j
                        self._gpu_leaves += 1
            own = share.own_cpu + share.own_memory + share.own_gpu
            own_dynamic = share.own_dynamic
            cpu = share.own_cpu + share.child_cpu
            memory = share.own_memory + share.child_memory
            gpu = share.own_gpu + share.child_gpu
            dynamic = own_dynamic + share.child_dynamic
            if local is not None:
                local.child_cpu += cpu
                local.child_memory += memory
                local.child_gpu += gpu
                local.child_dynamic += dynamic
            if parent is not None and parent.ledger is ledger:
                parent = None  # credited above; a parent on another thread is credited below, under its ledger's lock
        if parent is not None and parent.ledger.generation == self._generation:
            with parent.ledger.lock:
                if not parent.ended:
                    parent.child_cpu += cpu
                    parent.child_memory += memory
                    parent.child_gpu += gpu
                    parent.child_dynamic += dynamic
        prices = self.prices
        if prices.stat_checks.fault:
            return None
        return _new_tuple(
            SpanAttribution, (cpu, memory, gpu, own, dynamic, own_dynamic, prices.attribution_label, prices.baseline_state)
        )

    def _cap(self, share: SpanShare, start: EnergySnapshot, end: EnergySnapshot) -> None:
        """Limit ``share``'s own CPU-side (with the platform's uncovered energy) and memory joules to what the host
        spent of each during the span, and its own dynamic joules to its own joules so far (the dynamic price
        never exceeds the policy's)."""
        cap = spent_joules(self._cpu_indices, start, end) - share.child_cpu
        if self._uncovered is not None:
            # The platform's reading lags its components (a power averaged over a second, a polled BMC): over one
            # short span it says little, so the uncovered part is bounded at the recent periods' power instead.
            cap += self.prices.uncovered_watts * max(0, end[0] - start[0]) / 1e9
        if share.own_cpu > cap:
            share.own_cpu = max(0.0, cap)
        cap = spent_joules(self._memory_indices, start, end) - share.child_memory
        if share.own_memory > cap:
            share.own_memory = max(0.0, cap)
        own = share.own_cpu + share.own_memory + share.own_gpu
        if share.own_dynamic > own:
            share.own_dynamic = own


if _fastledger is not None:
    _fastledger.bind(SpanShare, SpanAttribution)
