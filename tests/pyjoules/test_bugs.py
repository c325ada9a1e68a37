"""pyJoules 0.5.1 bugs that must not come back, one regression test each.

(The CSV header check, the unwritable path and the flush at exit are in
tests/pyjoules/test_handlers.py; the GPU's millijoules in tests/pyjoules/test_gpu.py.)
"""

from __future__ import annotations

import logging
import sys
import threading
import traceback
import warnings
from pathlib import Path

import pytest

import otel_joules
from otel_joules.meter.meter import EnergyMeter as CoreEnergyMeter
from otel_joules.pyjoules.device.rapl_device import RaplPackageDomain
from otel_joules.pyjoules.energy_meter import EnergyContext, measure_energy
from otel_joules.pyjoules.energy_trace import EnergyTrace
from otel_joules.pyjoules.exception import DomainTypeError, HandlerTypeError, PyJoulesWarning
from otel_joules.pyjoules.handler import EnergyHandler
from otel_joules.pyjoules.handler.pandas_handler import PandasHandler

from tests.fakes.powercap import FakePowercap


def energies(handler: EnergyHandler, domain: str = "package_0") -> list[float]:
    return [sample.energy[domain] for trace in handler.traces for sample in trace]


def test_context_with_100_000_records(powercap: FakePowercap, shared_meter: CoreEnergyMeter) -> None:
    # pyJoules built the trace recursively and raised RecursionError past ~1,000 points.
    assert sys.getrecursionlimit() < 100_000
    handler = PandasHandler()
    with EnergyContext(handler=handler, domains=[RaplPackageDomain(0)], start_tag="t0") as ctx:
        for i in range(1, 100_001):
            if i % 1000 == 0:
                powercap.zones["package_0"].advance_uj(7)
            ctx.record(tag=f"t{i}")
    frame = handler.get_dataframe()
    assert len(frame) == 100_001
    assert frame["tag"].iloc[-1] == "t100000"
    # Every advance lands in the segment recorded right after it.
    assert frame["package_0"].sum() == 700.0
    assert frame["package_0"].iloc[999] == 7.0 and frame["package_0"].iloc[1000] == 0.0


def test_nothing_measurable_function_still_runs_with_one_warning(tmp_path: Path) -> None:
    # No RAPL (empty sysfs), no estimator, no GPU: pyJoules ran the function, then raised TypeError.
    (tmp_path / "empty").mkdir()
    otel_joules.get_energy_meter(sysfs_root=str(tmp_path / "empty"), gpus=[], estimate=False, sample=False)
    handler = EnergyHandler()

    @measure_energy(handler=handler)
    def work(x: int) -> int:
        return x + 1

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert [work(i) for i in range(3)] == [1, 2, 3]
    assert len(caught) == 1
    warning = caught[0]
    assert warning.category is PyJoulesWarning
    assert warning.filename == __file__  # it points at the caller
    message = str(warning.message)
    assert message.startswith("otel_joules.pyjoules: test_nothing_measurable_function_still_runs_with_one_warning.<locals>.work() runs unmeasured")
    assert f"RAPL: {tmp_path / 'empty' / 'class' / 'powercap'} does not exist" in message
    assert handler.traces == []


def test_nothing_measurable_context_still_runs(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    otel_joules.get_energy_meter(sysfs_root=str(tmp_path / "empty"), gpus=[], estimate=False, sample=False)
    handler = EnergyHandler()
    ran = []
    with pytest.warns(PyJoulesWarning, match="the EnergyContext block runs unmeasured") as caught:
        with EnergyContext(handler=handler) as ctx:
            ctx.record(tag="bar")
            ran.append(True)
    assert len(caught) == 1 and ran == [True] and handler.traces == []


def test_only_missing_domains_requested(shared_meter: CoreEnergyMeter) -> None:
    handler = EnergyHandler()

    @measure_energy(handler=handler, domains=[RaplPackageDomain(5)])
    def work() -> str:
        return "ran"

    with pytest.warns(PyJoulesWarning, match=r"runs unmeasured.*package_5: this machine has no such domain") as caught:
        assert work() == "ran" and work() == "ran"
    assert len(caught) == 1 and handler.traces == []


def test_a_bad_setting_is_said_once_and_the_function_still_runs(monkeypatch: pytest.MonkeyPatch, powercap, caplog) -> None:
    # A bad variable is not an error (issue 13): the default is used and the call is measured.
    monkeypatch.setenv("OTEL_JOULES_SYSFS_ROOT", powercap.sysfs_root)
    monkeypatch.setenv("OTEL_JOULES_CPU_TDP_WATTS", "lots")
    handler = EnergyHandler()
    with caplog.at_level(logging.WARNING, logger="otel_joules"):
        assert measure_energy(handler=handler)(lambda: 7)() == 7
        assert measure_energy(handler=handler)(lambda: 8)() == 8
    assert [r.getMessage() for r in caplog.records] == [
        "otel-joules: OTEL_JOULES_CPU_TDP_WATTS='lots' is not a number; using the default 85 instead"
    ]
    assert len(handler.traces) == 2


def test_not_a_domain_or_handler_is_refused_when_decorating() -> None:
    with pytest.raises(DomainTypeError, match=r"domains entry 'package_0' is not a domain; use RaplPackageDomain\(0\)"):
        measure_energy(domains=["package_0"])  # type: ignore[list-item]
    with pytest.raises(DomainTypeError, match="must be a list of domains"):
        EnergyContext(domains=RaplPackageDomain(0))  # type: ignore[arg-type]
    with pytest.raises(HandlerTypeError, match=r"handler='result.csv' is not an energy handler.*CSVHandler\('result.csv'\)"):
        measure_energy(handler="result.csv")  # type: ignore[arg-type]
    with pytest.raises(HandlerTypeError):
        EnergyContext(handler=None)  # type: ignore[arg-type]


class Boom(Exception):
    pass


def test_exception_propagates_unchanged_and_the_measurement_is_handled(powercap: FakePowercap, shared_meter: CoreEnergyMeter) -> None:
    handler = EnergyHandler()
    raised = Boom("inside")

    @measure_energy(handler=handler)
    def work() -> None:
        powercap.zones["package_0"].advance_joules(0.75)
        raise raised

    with pytest.raises(Boom) as info:
        work()
    assert info.value is raised
    assert traceback.extract_tb(info.value.__traceback__)[-1].line == "raise raised"
    assert energies(handler) == [750_000.0]
    assert handler.traces[0][0].tag == "work"


def test_exception_in_a_context_block(powercap: FakePowercap, shared_meter: CoreEnergyMeter) -> None:
    handler = EnergyHandler()
    with pytest.raises(Boom):
        with EnergyContext(handler=handler, domains=[RaplPackageDomain(0)]) as ctx:
            powercap.zones["package_0"].advance_uj(1)
            ctx.record(tag="second")
            powercap.zones["package_0"].advance_uj(2)
            raise Boom()
    assert [(s.tag, s.energy["package_0"]) for s in handler.traces[0]] == [("start", 1.0), ("second", 2.0)]


def test_calls_in_several_threads_at_once(powercap: FakePowercap, shared_meter: CoreEnergyMeter) -> None:
    # pyJoules shared one meter per function: overlapping calls raised StateIsNotFinalError
    # or mixed up each other's points.
    threads_n = 8
    entered = threading.Barrier(threads_n)
    advanced = threading.Barrier(threads_n)
    handler = EnergyHandler()

    @measure_energy(handler=handler, domains=[RaplPackageDomain(0)])
    def work(i: int) -> int:
        entered.wait(timeout=10)
        if i == 0:
            powercap.zones["package_0"].advance_joules(1)
        advanced.wait(timeout=10)
        return i * 10

    results: dict[int, int] = {}
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = work(i)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    assert results == {i: i * 10 for i in range(threads_n)}
    # Every call was running while the joule was spent: each sees all of it.
    assert energies(handler) == [1_000_000.0] * threads_n


def test_recursive_calls(powercap: FakePowercap, shared_meter: CoreEnergyMeter) -> None:
    handler = EnergyHandler()

    @measure_energy(handler=handler, domains=[RaplPackageDomain(0)])
    def countdown(n: int) -> int:
        powercap.zones["package_0"].advance_joules(1)
        return n if n == 0 else countdown(n - 1) + 1

    assert countdown(2) == 2
    # Innermost call ends first; each outer call includes the inner ones.
    assert energies(handler) == [1_000_000.0, 2_000_000.0, 3_000_000.0]


def test_a_failing_handler_cannot_replace_the_result(shared_meter: CoreEnergyMeter, caplog: pytest.LogCaptureFixture) -> None:
    class Broken(EnergyHandler):
        def process(self, trace: EnergyTrace) -> None:
            raise RuntimeError("disk on fire")

    with caplog.at_level(logging.ERROR, logger="otel_joules.pyjoules"):
        assert measure_energy(handler=Broken())(lambda: "value")() == "value"
    assert "the handler" in caplog.text and "failed on the measurement of <lambda>()" in caplog.text
    assert "disk on fire" in caplog.text


def test_handler_subclass_written_for_pyjoules_without_base_init(powercap: FakePowercap, shared_meter: CoreEnergyMeter) -> None:
    class Legacy(EnergyHandler):
        def __init__(self) -> None:  # pyJoules-era code that never called EnergyHandler.__init__
            self.traces = []

    handler = Legacy()
    measure_energy(handler=handler, domains=[RaplPackageDomain(0)])(lambda: powercap.zones["package_0"].advance_uj(5))()
    assert energies(handler) == [5.0]
