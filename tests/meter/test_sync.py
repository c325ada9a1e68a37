"""synchronize=: a synchronizer runs before every span's opening and closing snapshot; on the CPU torch's is skipped.

The callable is a real one that records where in the span's life it ran (it reads the fake
counter, the way a device's last kernels would still move it), not a stand-in for our code.
"""

from __future__ import annotations

import logging
import sys

import pytest

import otel_joules
from otel_joules import EnergyMeter
from otel_joules.errors import ConfigurationError
from otel_joules.meter.sync import resolve_synchronizer
from otel_joules.tracing import EnergySpanProcessor

from tests.fakes.powercap import FakePowercap


def test_a_callable_runs_at_both_boundaries_and_its_work_is_inside_the_span(powercap: FakePowercap, tracer_provider, span_exporter) -> None:
    calls: list[str] = []
    package = powercap.zones["package_0"]

    def finish_device_work() -> None:
        # Queued work still running when the span's code returned: it is the span's only when
        # the closing snapshot waits for it.
        calls.append("sync")
        if len(calls) == 2:
            package.advance_joules(3.0)

    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False)
    tracer_provider.add_span_processor(EnergySpanProcessor(meter, attribution=False, synchronize=finish_device_work))
    with tracer_provider.get_tracer("t").start_as_current_span("kernel-launch"):
        package.advance_joules(1.0)
    (span,) = span_exporter.get_finished_spans()
    assert calls == ["sync", "sync"]
    assert span.attributes["energy.package_0.joules"] == pytest.approx(4.0)


def test_off_by_default_the_late_work_is_not_the_spans(powercap: FakePowercap, tracer_provider, span_exporter) -> None:
    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False)
    tracer_provider.add_span_processor(EnergySpanProcessor(meter, attribution=False))
    with tracer_provider.get_tracer("t").start_as_current_span("kernel-launch"):
        powercap.zones["package_0"].advance_joules(1.0)
    powercap.zones["package_0"].advance_joules(3.0)  # the device finishes after the span ended
    (span,) = span_exporter.get_finished_spans()
    assert span.attributes["energy.package_0.joules"] == pytest.approx(1.0)


def test_instrument_takes_the_option(powercap: FakePowercap, tracer_provider, span_exporter) -> None:
    calls = []
    handle = otel_joules.instrument(tracer_provider, sysfs_root=powercap.sysfs_root, gpus=[], metrics_enabled=False,
                                    synchronize=lambda: calls.append(1))
    try:
        with tracer_provider.get_tracer("t").start_as_current_span("a"):
            with tracer_provider.get_tracer("t").start_as_current_span("b"):
                pass
    finally:
        handle.uninstrument()
    assert len(calls) == 4


def test_a_bad_option_is_one_clear_error() -> None:
    with pytest.raises(ConfigurationError, match="synchronize='tensorflow' is not one of none, auto, torch, jax, cupy"):
        resolve_synchronizer("tensorflow")
    assert resolve_synchronizer(None) is None and resolve_synchronizer("none") is None


def test_a_failing_synchronizer_is_said_once_and_skipped(caplog) -> None:
    calls = []

    def broken() -> None:
        calls.append(1)
        raise RuntimeError("CUDA error: an illegal memory access")

    sync = resolve_synchronizer(broken)
    with caplog.at_level(logging.WARNING, logger="otel_joules"):
        sync()
        sync()
    assert len(calls) == 1
    assert [r.getMessage() for r in caplog.records if "synchronize" in r.getMessage()] == [
        "otel-joules: synchronize=test_a_failing_synchronizer_is_said_once_and_skipped.<locals>.broken failed "
        "(RuntimeError: CUDA error: an illegal memory access); measuring on without waiting for the device"
    ]


def test_torch_on_the_cpu_is_skipped_cleanly() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: benchmarks/gpu_check.py checks the real synchronisation")
    for name in ("torch", "auto"):
        sync = resolve_synchronizer(name)
        sync()  # no CUDA initialised: nothing to wait for, nothing raised or logged
    assert not torch.cuda.is_initialized()


def test_auto_without_torch_imported_does_not_import_it(tmp_path) -> None:
    import subprocess

    script = "import sys; from otel_joules.meter.sync import resolve_synchronizer as r; r('auto')(); print('torch' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert run.stdout.strip() == "False", run.stderr
