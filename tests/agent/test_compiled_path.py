"""A meter reading through ``otel-joules agent`` gets the same span attributes on the compiled path as on its reference.

The compiled attribute builder (otel_joules.meter._fastsnap.span_attributes) answers for two snapshots that both
found the agent there: the standby estimates left out, ``energy.agent.domains`` set. Every other case (the agent
away at either end, a loss or a return in between) is the reference's. The meters are real, read through a real
agent on a fake root-only powercap tree; the snapshots given to the builders are built by hand, over every case.
"""

from __future__ import annotations

import os
import random
import shutil
import time
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_joules import EnergySpanProcessor
from otel_joules.attribution.shares import SpanAttribution
from otel_joules.config import Settings
from otel_joules.meter import EnergyMeter
from otel_joules.meter.fastpath import COMPILED
from otel_joules.meter.meter import EnergySnapshot
from otel_joules.meter.outages import Outage
from otel_joules.semconv import ENERGY_AGENT_DOMAINS, KIND_CPU, KIND_MEMORY
from otel_joules.tracing.attributes import MeterAttributes, span_attributes
from otel_joules.meter.interval import Interval
from tests.agent._support import agent_socket, root_only_tree, start_agent, stop
from tests.fakes.powercap import ConstantPower

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv"),
    pytest.mark.skipif(COMPILED is None, reason="otel_joules.meter._fastsnap is not built here (no C compiler)"),
]


class _ThroughAgent(NamedTuple):
    """A fake root-only tree read through a real agent by two meters: the compiled path's (True) and the reference's."""

    tree: Any
    sock: Path
    meters: dict[bool, EnergyMeter]
    agents: list[Any]  # every agent process started on ``sock``, stopped by the fixture


@pytest.fixture
def through_agent(tmp_path: Path):  # type: ignore[no-untyped-def]
    tree = root_only_tree(tmp_path)
    sock = agent_socket(tmp_path)
    setup = _ThroughAgent(tree, sock, {}, [start_agent(tmp_path, tree, sock)])
    try:
        for fast in (True, False):
            settings = Settings(sysfs_root=tree.sysfs_root, agent_socket=str(sock), fast_path=fast)
            setup.meters[fast] = EnergyMeter(settings=settings, gpus=[], sample=False)
        yield setup
    finally:
        for meter in setup.meters.values():
            meter.close()
        for agent in setup.agents:
            stop(agent)


def _outage(rng: random.Random, count: int, away: bool) -> Outage:
    returned = tuple(rng.uniform(0, 1e3) if rng.random() < 0.5 else None for _ in range(count))
    return Outage(away, rng.choice([0.0, rng.uniform(0, 5)]), returned)


def test_both_paths_build_the_same_attributes_over_every_outage_case(through_agent: _ThroughAgent) -> None:
    meters = through_agent.meters
    fast, reference = (MeterAttributes(meters[f], (KIND_CPU, KIND_MEMORY)) for f in (True, False))
    meter = meters[True]
    count = len(meter.domains)
    assert meter.agent_domain_ids and meter.standby_domain_ids
    assert fast.direct is not None and reference.direct is None  # the standby estimates' band stays out
    rng = random.Random(37)
    compiled_answers = 0
    for case in range(3000):
        t0 = rng.randrange(0, 10**15)
        t1 = t0 + rng.choice([0, rng.randrange(1, 10**6), rng.randrange(1, 10**11)])
        a = tuple(None if rng.random() < 0.1 else rng.uniform(0, 1e6) for _ in range(count))
        b = tuple(None if x is None or rng.random() < 0.05 else x + rng.expovariate(1.0) * rng.choice([1e-6, 1, 1e3])
                  for x in a)
        ends = rng.choice(["there", "there", "there", "away", "loss", "return", "no outage"])
        away = {"there": (False, False), "away": (True, True), "loss": (False, True), "return": (True, False)}
        if ends == "no outage":
            outages = (None, _outage(rng, count, False)) if rng.random() < 0.5 else (_outage(rng, count, False), None)
        else:
            outages = tuple(_outage(rng, count, side) for side in away[ends])
        missing = (0,) if rng.random() < 0.05 else ()
        start = EnergySnapshot(t0, a, (), (), (), outages[0])
        end = EnergySnapshot(t1, b, (), missing, (), outages[1])
        attribution = None if rng.random() < 0.3 else SpanAttribution(
            rng.random(), rng.random() * 1e-3, rng.random() * 10, rng.random(), rng.random() / 3, rng.random() / 7,
            "capacity", "learned",
        )
        compiled = COMPILED.span_attributes(fast._spec, start, end, attribution)  # noqa: SLF001
        compiled_answers += compiled is not NotImplemented
        if ends != "there" or missing:
            assert compiled is NotImplemented, (case, ends)
        # The span path's entry point, through the plan's direct call, and the plan's method: both as the reference.
        interval = Interval(meter, None, None, start, end, None, None, 0, 0, False)
        want = reference.span_attributes(start, end, attribution)
        for got in (fast.span_attributes(start, end, attribution), span_attributes(interval, attribution)):
            assert got == want, (case, ends, start, end, attribution)
            if want is not None:
                assert list(got.items()) == list(want.items())  # same keys in the same order
                assert [type(v) for v in got.values()] == [type(v) for v in want.values()]
        if ends == "there" and want is not None and ENERGY_AGENT_DOMAINS in want:
            assert not any(f"energy.{d}.joules" in want for d in meter.standby_domain_ids)
    assert compiled_answers > 1000  # the compiled builder answered the common case itself


def _span_attributes(meter: EnergyMeter, tree) -> dict:  # type: ignore[no-untyped-def]
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.add_span_processor(EnergySpanProcessor(meter))
    with provider.get_tracer("t").start_as_current_span("work"):
        tree.zones["package_0"].advance_joules(12.5)
        time.sleep(0.3)  # past two of the agent's pushes: the end reads the advanced counter
    (span,) = exporter.get_finished_spans()
    return dict(span.attributes)


def test_spans_through_the_agent_get_the_same_attributes_on_both_paths(through_agent: _ThroughAgent) -> None:
    tree, meters = through_agent.tree, through_agent.meters
    fast = _span_attributes(meters[True], tree)
    reference = _span_attributes(meters[False], tree)
    assert list(fast) == list(reference)
    assert fast[ENERGY_AGENT_DOMAINS] == reference[ENERGY_AGENT_DOMAINS] == tuple(meters[True].agent_domain_ids)
    for attributes in (fast, reference):
        assert attributes["energy.package_0.joules"] == pytest.approx(12.5)
        assert attributes["energy.source"] == "measured"
        assert not any(f"energy.{d}.joules" in attributes for d in meters[True].standby_domain_ids)


def _both(meters: dict[bool, EnergyMeter]) -> tuple[EnergySnapshot, EnergySnapshot]:
    """A snapshot of each meter from the same reading of the agent (taken again while a new one came in between)."""
    agent = [i for i, d in enumerate(meters[True].domains) if d.via_agent]
    for _ in range(20):
        fast, reference, again = meters[True].snapshot(), meters[False].snapshot(), meters[True].snapshot()
        if [fast[1][i] for i in agent] == [again[1][i] for i in agent]:
            return fast, reference
    raise AssertionError("the agent's readings changed between every pair of snapshots")


def _assert_same(fast: EnergySnapshot, reference: EnergySnapshot, meter: EnergyMeter) -> None:
    """The same snapshot but for the standby estimates' values while they grow (each meter's own CPU time)."""
    standby = set(meter.plan.standby)
    assert [j is None for j in fast[1]] == [j is None for j in reference[1]], (fast, reference)
    assert [j for i, j in enumerate(fast[1]) if i not in standby] == [j for i, j in enumerate(reference[1]) if i not in standby]
    assert (fast[2], fast[3], fast[4]) == (reference[2], reference[3], reference[4])
    assert fast.outage is not None and reference.outage is not None
    assert fast.outage.away == reference.outage.away
    assert fast.outage.returned == reference.outage.returned


def test_both_paths_take_the_same_snapshots_through_a_loss_and_a_return_of_the_agent(
    tmp_path: Path, through_agent: _ThroughAgent
) -> None:
    tree, meters, agents = through_agent.tree, through_agent.meters, through_agent.agents
    meter = meters[True]
    assert type(meter.snapshot).__name__ == "method" and meter.snapshot.__func__ is COMPILED.snapshot  # type: ignore[attr-defined]
    # A live counter (a still one for a second means a lost agent) that moves only every 0.2 s: two snapshots
    # microseconds apart almost always read the same reading.
    with ConstantPower(tree, {"package_0": 5.0, "dram_0": 1.25}, period_s=0.2):
        first = _both(meters)
        assert not first[0].outage.away
        time.sleep(0.5)
        there = _both(meters)  # the compiled common case: the agent there at both ends
        _assert_same(*there, meter)
        assert there[0][1][meter.domain_index("package_0")] > first[0][1][meter.domain_index("package_0")]
        stop(agents[0])
        time.sleep(0.3)
        lost = _both(meters)  # a loss: Outages.update
        _assert_same(*lost, meter)
        assert lost[0].outage.away
        time.sleep(0.3)
        away = _both(meters)
        _assert_same(*away, meter)
        assert away[0].outage.away and away[0].outage.away_s > lost[0].outage.away_s
        agents.append(start_agent(tmp_path, tree, through_agent.sock, stderr_name="agent2.err"))
        time.sleep(0.8)  # past the links' next try to reconnect (every 0.5 s)
        back = _both(meters)  # a return: bridged, measured on
        _assert_same(*back, meter)
        assert not back[0].outage.away and back[0].outage.returned[meter.domain_index("package_0")] is not None
        time.sleep(0.3)
        after = _both(meters)  # the common case again, with the outage carried
        _assert_same(*after, meter)
        assert after[0].outage is back[0].outage or after[0].outage == back[0].outage
    # Across the outage, bridged by the agent's counters: the same joules on both paths, measured.
    measured = [meters[fast].measure(first[k], after[k]) for k, fast in enumerate((True, False))]
    assert measured[0].joules_by_domain == measured[1].joules_by_domain
    assert measured[0].source == measured[1].source == "measured"
    assert measured[0].joules_by_domain["package_0"] > 5.0
