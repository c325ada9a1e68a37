"""benchmarks/span_overhead.py: its floor processor measures what it claims, and the whole run reports every mode.

Timing figures are the benchmark's to judge, not a test's (the machines are noisy): these tests
check what was measured, never how fast.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from benchmarks import span_counters, span_overhead, span_pieces
from otel_joules.config import Settings
from otel_joules.meter.fastpath import COMPILED
from otel_joules.sensors import rapl
from tests.fakes.powercap import make_powercap


def test_floor_sets_each_key_from_the_counters_and_the_thread_clock_read_at_both_ends(tmp_path: Path) -> None:
    tree = make_powercap(tmp_path / "sys", "four_domains")
    channels = rapl.discover(Settings(sysfs_root=tree.sysfs_root)).channels
    fds = [channel.pread_fd for channel in channels]
    clock_s = iter([10.0, 10.25])
    keys = [f"floor.{i}" for i in range(7)]
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.add_span_processor(span_overhead.FloorProcessor(fds, lambda: next(clock_s), keys))  # type: ignore[arg-type]

    with provider.get_tracer("t").start_as_current_span("span"):
        for i, zone in enumerate(tree.zones.values()):
            zone.advance_uj(1000 * (i + 1))

    (span,) = exporter.get_finished_spans()
    # The four counters' differences in discovery order, then the clock's, then the template's zeros.
    by_domain = {channel.domain.id: span.attributes[key] for channel, key in zip(channels, keys)}
    assert by_domain == {domain_id: 1000 * (i + 1) for i, domain_id in enumerate(tree.zones)}
    assert span.attributes[keys[4]] == pytest.approx(0.25)
    assert [span.attributes[key] for key in keys[5:]] == [0.0, 0.0]
    for channel in channels:
        channel.close()


def test_cached_floor_reads_only_the_thread_clock(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    clock_s = iter([1.0, 3.0])
    processor = span_overhead.FloorProcessor([], lambda: next(clock_s), ["a", "b"])
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")

    with tracer.start_as_current_span("measured"):
        pass
    processor.enabled = False
    with tracer.start_as_current_span("bare"):
        pass

    measured, bare = exporter.get_finished_spans()
    assert dict(measured.attributes) == {"a": 2.0, "b": 0.0}
    assert dict(bare.attributes) == {}


def test_a_short_run_reports_every_mode_beside_its_floor(capsys: pytest.CaptureFixture[str]) -> None:
    assert span_overhead.main(["--spans", "420", "--memory-spans", "200", "--no-accuracy", "--json"]) == 0

    result = json.loads(capsys.readouterr().out)
    for mode in ("exact", "exact_no_attribution", "cached", "floor_exact", "floor_cached"):
        timing = result[mode]
        assert timing["bare_us"] > 0 and timing["instrumented_us"] > 0
        assert timing["ratio"] == pytest.approx(timing["instrumented_us"] / timing["bare_us"])
    # The floors set as many attributes as the exact mode does: 4 RAPL domains and a GPU, with shares
    # (inclusive, self, per kind, dynamic and dynamic self, the baseline's origin).
    # energy.domain_kinds included, and energy.platform.domain: the tree's psys is read beside its package.
    assert result["pieces"]["attributes_count"] == 20
    assert result["domains"] == "4 RAPL + 1 GPU"
    # Both span paths where the extension is built, the compiled one first (the top-level figures are its).
    assert result["paths"] == (["compiled", "python"] if COMPILED is not None else ["python"])
    assert result["exact"] == result[result["paths"][0]]["exact"]
    # The exact mode against its floor in the same interleaved batches (issue 37's ratio).
    against = result["exact"]["against_floor"]
    assert against["ratio"] == pytest.approx(against["exact_us"] / against["floor_us"])
    assert against["exact_ratio"] == pytest.approx(against["exact_us"] / against["bare_us"]) and against["floor_us"] > 0
    for path in result["paths"]:
        itemized = result[path]["exact"]["itemized"]
        assert set(itemized["items_us"]) == set(span_pieces.ITEMS)
        assert all(value > 0 for value in itemized["items_us"].values()), itemized
        assert itemized["itemized_us"] == pytest.approx(sum(itemized["items_us"].values()))


def test_a_short_run_through_a_real_agent_reads_the_agent_and_names_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert span_overhead.main(["--spans", "420", "--memory-spans", "200", "--no-accuracy", "--no-gpu", "--source", "agent",
                               "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["source"] == "agent"
    # The meter a user's discovery gives: the agent's zones and the standby estimates that stand in while it is away.
    assert result["domains"] == "4 RAPL through the agent + 2 standby estimates"
    # One attribute more than direct reads (4 RAPL domains and the shares): energy.agent.domains.
    assert result["pieces"]["attributes_count"] == 19  # energy.domain_kinds and energy.platform.domain included


def test_the_coarsened_counter_reports_the_value_of_its_last_push() -> None:
    import time

    channel = span_counters.CoarsenedClockChannel(watts=50.0, interval_s=0.05, phase_s=0.0)
    push_uj = 50.0 * 0.05 * 1e6
    values = []
    end = time.monotonic() + 0.2
    while time.monotonic() < end:
        values.append(channel.read_uj())
    steps = sorted({b - a for a, b in zip(values, values[1:])} - {0})
    # Only whole pushes of the interval's energy (several at once if this loop was descheduled), every 50 ms.
    assert steps and all(step % push_uj == 0 for step in steps), steps
    assert (values[-1] - values[0]) / push_uj <= 5


def test_the_synchronize_mode_times_the_exact_mode_with_and_without_it(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    assert span_overhead.main(["--spans", "420", "--synchronize", "torch", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["synchronize"] == "torch"
    assert result["exact_us"] > 0 and result["exact_synchronized_us"] > 0
    assert result["synchronize_us_per_span"] == pytest.approx(result["exact_synchronized_us"] - result["exact_us"])
    assert result["ratio"] == pytest.approx(result["exact_synchronized_us"] / result["exact_us"])
