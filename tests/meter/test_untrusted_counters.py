"""Counters that misbehave (issue 24): moves the power bound rules out, counters being retried.

On the fake powercap tree with a realistic power bound (100 W, where the other tests' zones
declare 1 MW so they can advance instantly), read through real spans: a TracerProvider with
an EnergySpanProcessor, as an instrumented program has.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_joules import EnergyMeter, EnergySpanProcessor

from tests.fakes.powercap import FakePowercap, make_powercap

#: A realistic package bound: 100 W (``constraint_0_max_power_uw``).
BOUND_UW = 100_000_000
#: One step of the workload: 10 ms at 36.7 W on the package.
STEP_S = 0.01
PACKAGE_J_PER_STEP = 0.367


class _Traced:
    """A meter on ``powercap`` behind a tracer provider with the energy processor; the finished spans by name."""

    def __init__(self, powercap: FakePowercap) -> None:
        self.meter = EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False)
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.provider.add_span_processor(EnergySpanProcessor(self.meter, attribution=False))
        self.tracer = self.provider.get_tracer("test")

    def spans(self, name: str) -> list[dict[str, object]]:
        return [dict(s.attributes) for s in self.exporter.get_finished_spans() if s.name == name]

    def close(self) -> None:
        self.provider.shutdown()
        self.meter.close()


@pytest.fixture
def realistic(tmp_path: Path) -> FakePowercap:
    return make_powercap(tmp_path / "sys", "amd", max_power_uw=BOUND_UW)


def _warnings(caplog: pytest.LogCaptureFixture, word: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "otel_joules" and r.levelno >= logging.WARNING and word in r.getMessage()
    ]


def _step(traced: _Traced, powercap: FakePowercap, package_j: float = PACKAGE_J_PER_STEP) -> None:
    """One 10 ms step of work in its own span: the package spends ``package_j`` meanwhile."""
    with traced.tracer.start_as_current_span("step"):
        powercap.zones["package_0"].advance_joules(package_j)
        time.sleep(STEP_S)


# --- Item 2: a counter that jumps forward is not energy ------------------------------------------


def test_a_forward_jump_beyond_the_power_bound_is_rejected_flagged_and_said_once(realistic, caplog) -> None:
    # 100 steps of 0.367 J (36.7 J in ~1 s at 36.7 W) inside one job span; after the 50th, the counter
    # jumps by +50 kJ between two reads ~1 ms apart (a counter fault: 50 MW for a 100 W zone), and once
    # more by +20 kJ later on. On the old code the job read 70,036.7 J and nothing was said.
    package = realistic.zones["package_0"]
    traced = _Traced(realistic)
    try:
        with caplog.at_level(logging.WARNING, logger="otel_joules"):
            with traced.tracer.start_as_current_span("job"):
                for i in range(100):
                    _step(traced, realistic)
                    if i == 49:
                        with traced.tracer.start_as_current_span("jump"):
                            package.advance_uj(50_000_000_000)
                            time.sleep(0.001)
                    if i == 79:
                        with traced.tracer.start_as_current_span("jump"):
                            package.advance_uj(20_000_000_000)
                            time.sleep(0.001)
            cumulative_j = traced.meter.snapshot().joules[traced.meter.domain_index("package_0")]
        (job,) = traced.spans("job")
        jumps = traced.spans("jump")
        steps = traced.spans("step")
    finally:
        traced.close()
    true_j = 100 * PACKAGE_J_PER_STEP
    print(f"job span: {job['energy.joules']:.1f} J, true {true_j:.1f} J")
    # The jumps count as no energy; everything else counts, after them as before (the counter is re-based).
    assert job["energy.joules"] == pytest.approx(true_j, abs=1e-6)
    assert cumulative_j == pytest.approx(true_j, abs=1e-6)  # the meter's own total: every consumer's answer
    assert [s["energy.package_0.joules"] for s in jumps] == [0.0, 0.0]
    assert all(s["energy.package_0.rejected_jump"] is True for s in jumps)
    assert job["energy.package_0.rejected_jump"] is True  # its interval holds them
    assert all("energy.package_0.rejected_jump" not in s for s in steps)
    assert [s["energy.package_0.joules"] for s in steps] == pytest.approx([PACKAGE_J_PER_STEP] * 100, abs=1e-6)
    (message,) = _warnings(caplog, "package_0")  # the first jump is said; the second is not said again
    assert "jumped by +50000.0 J" in message and "100 W bound" in message
    assert "energy.package_0.rejected_jump" in message


def test_a_forward_move_that_fits_the_bound_over_the_time_between_reads_is_energy(realistic, caplog) -> None:
    # 30 J after 0.2 s at a 100 W bound: 150 W, within its 2x tolerance (PL2 bursts): energy, not a jump.
    package = realistic.zones["package_0"]
    traced = _Traced(realistic)
    try:
        with caplog.at_level(logging.WARNING, logger="otel_joules"):
            with traced.tracer.start_as_current_span("burst"):
                time.sleep(0.2)
                package.advance_joules(30.0)
        (burst,) = traced.spans("burst")
    finally:
        traced.close()
    assert burst["energy.package_0.joules"] == 30.0
    assert "energy.package_0.rejected_jump" not in burst
    assert not _warnings(caplog, "package_0")


def test_a_backward_jump_that_is_neither_a_wrap_nor_a_restart_is_rejected(tmp_path: Path, caplog) -> None:
    # 5,000 J -> 3,000 J within a few ms at 100 W: a wrap would mean 259 kJ, a restart from 0 3 kJ, and the
    # bound allows about 1 J. The old code took it for a wrap and counted 260,143 J.
    pc = make_powercap(tmp_path, "amd", start_uj=5_000_000_000, max_power_uw=BOUND_UW)
    package = pc.zones["package_0"]
    traced = _Traced(pc)
    try:
        with caplog.at_level(logging.WARNING, logger="otel_joules"):
            with traced.tracer.start_as_current_span("fault"):
                package.total_uj = 3_000_000_000
                package.write()
            with traced.tracer.start_as_current_span("after"):
                package.advance_joules(0.5)
        (fault,) = traced.spans("fault")
        (after,) = traced.spans("after")
    finally:
        traced.close()
    print(f"fault span: {fault['energy.package_0.joules']:.1f} J")
    assert fault["energy.package_0.joules"] == 0.0 and fault["energy.package_0.rejected_jump"] is True
    assert after["energy.package_0.joules"] == 0.5  # counted on from the new value
    (message,) = _warnings(caplog, "package_0")
    assert "jumped by -2000.0 J" in message


# --- Item 3: spans during a counter's retry say what they leave out -------------------------------


def test_spans_during_a_retried_counter_are_flagged_partial_and_it_is_said_at_the_first_failed_read(
    tmp_path: Path, caplog
) -> None:
    # The package spends 0.4 J and DRAM 0.235 J per 20 ms span (DRAM: 37% of energy.joules). DRAM's
    # energy_uj then reads empty for ~0.5 s: retried at 50, 150, 350 and 750 ms. On the old code the ~25
    # spans meanwhile read 37% less, as "measured", and the first word came when DRAM read again.
    pc = make_powercap(tmp_path / "sys", "one_socket", max_power_uw=BOUND_UW)
    package, dram = pc.zones["package_0"], pc.zones["dram_0"]
    traced = _Traced(pc)
    said_by_first_faulty_span: list[str] = []
    try:
        with caplog.at_level(logging.WARNING, logger="otel_joules"):
            with traced.tracer.start_as_current_span("job"):
                for _ in range(10):
                    with traced.tracer.start_as_current_span("healthy"):
                        package.advance_joules(0.4)
                        dram.advance_joules(0.235)
                        time.sleep(0.02)
                dram.write_raw("")  # the zone vanished
                broken_until = time.monotonic() + 0.5
                while time.monotonic() < broken_until:
                    with traced.tracer.start_as_current_span("during"):
                        package.advance_joules(0.4)
                        dram.total_uj += 235_000  # spent, but the file stays empty
                        time.sleep(0.02)
                    if not said_by_first_faulty_span:
                        said_by_first_faulty_span = _warnings(caplog, "dram_0") or ["nothing"]
                dram.write()  # readable again, its counter holding the gap's energy
                while "energy.dram_0.joules" not in (traced.spans("after") or [{}])[-1]:
                    with traced.tracer.start_as_current_span("after"):
                        package.advance_joules(0.4)
                        dram.advance_joules(0.235)
                        time.sleep(0.02)
    finally:
        traced.close()
    healthy, during, after = traced.spans("healthy"), traced.spans("during"), traced.spans("after")
    (job,) = traced.spans("job")
    left_out = [s for s in during + after if "energy.dram_0.joules" not in s]
    print(
        f"healthy spans: {healthy[0]['energy.joules']:.3f} J {healthy[0]['energy.source']}; "
        f"{len(left_out)} spans without DRAM: {left_out[0]['energy.joules']:.3f} J {left_out[0]['energy.source']}"
    )
    assert len(left_out) >= 10
    for span in left_out:
        assert span["energy.joules"] == pytest.approx(0.4, abs=1e-9)  # the package alone, as before
        assert span["energy.dram_0.missing"] is True
        assert span["energy.source"] == "partial"
    for span in healthy + [s for s in during + after if "energy.dram_0.joules" in s]:
        assert "energy.dram_0.missing" not in span and span["energy.source"] == "measured"
    # The job's ends were read while DRAM was healthy: complete, the gap included (the counter is cumulative).
    assert job["energy.source"] == "measured" and "energy.dram_0.missing" not in job
    spans_with_dram = len(healthy) + len(during) + len(after)
    assert job["energy.dram_0.joules"] == pytest.approx(0.235 * spans_with_dram, abs=1e-6)
    # Said at the first failed read, before the first span during the fault had ended: what spans carry.
    (retrying,) = said_by_first_faulty_span
    assert "retrying" in retrying and "energy.dram_0.missing = true" in retrying and "'partial'" in retrying
    retrying_again, back = _warnings(caplog, "dram_0")
    assert retrying_again == retrying and "reads again" in back

