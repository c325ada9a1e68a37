"""GPU joules through the real pynvml and the stand-in library: units, integration, lost GPUs, no driver.

Every expected value comes from the stand-in's power profile (:meth:`FakeCard.energy_joules`,
the exact integral of the power it reports), never from the code under test.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from otel_joules.sensors import nvml
from otel_joules.sensors.base import Method

from tests.fakes.nvml import FakeCard, FakeNvml, run_python, uuid_for

TWO_READS = r"""
import json, time
from otel_joules.sensors import nvml
found = nvml.discover()
def read_all():
    before = time.monotonic()
    values = [c.read_uj() for c in found.channels]
    return values, before, time.monotonic()
first, t0_before, t0_after = read_all()
time.sleep(0.6)
second, t1_before, t1_after = read_all()
print(json.dumps({"ids": [c.domain.id for c in found.channels], "methods": [c.domain.method.value for c in found.channels],
                  "first_uj": first, "second_uj": second, "t0": [t0_before, t0_after], "t1": [t1_before, t1_after]}))
"""


def assert_between_reads(card: FakeCard, out: dict, joules: float, epoch_s: float, update_s: float) -> None:
    """The reads happened somewhere inside their [before, after] brackets: the truth lies between these bounds.

    Power is positive, so the shortest possible interval gives the least energy and the
    longest the most; the counter may lag each end by up to one refresh period.
    """
    (t0_before, t0_after), (t1_before, t1_after) = out["t0"], out["t1"]
    least = card.energy_joules(t0_after - epoch_s, t1_before - epoch_s)
    most = card.energy_joules(t0_before - epoch_s, t1_after - epoch_s)
    slack = (card.watts + card.watts_amplitude) * update_s + 0.001
    assert least - slack <= joules <= most + slack, (least, joules, most)
    assert joules == pytest.approx(least, rel=0.05)  # and the bracket itself is tight


def test_counter_joules_equal_power_times_time_for_every_gpu(tmp_path: Path) -> None:
    # Two GPUs at 300 W and 100 W: 400 W together (carbontracker's average would say 200 W).
    cards = [
        FakeCard(uuid=uuid_for(0), watts=300, energy_start_mj=987_654_321),
        FakeCard(uuid=uuid_for(1), watts=100, pci="00000000:08:00.0", energy_start_mj=5_000),
    ]
    fake = FakeNvml(cards=cards, update_ms=1, epoch_monotonic_s=time.monotonic())
    out = run_python(TWO_READS, fake, tmp_path).data
    assert out["ids"] == ["nvidia_gpu_0", "nvidia_gpu_1"]
    assert out["methods"] == ["counter", "counter"]
    joules = [(b - a) / 1e6 for a, b in zip(out["first_uj"], out["second_uj"])]
    epoch = fake.epoch_monotonic_s
    assert epoch is not None
    for card, measured in zip(cards, joules):
        assert_between_reads(card, out, measured, epoch, 0.001)
    # Joules are watts x seconds, summed over GPUs.
    seconds = (out["t1"][0] + out["t1"][1] - out["t0"][0] - out["t0"][1]) / 2
    assert sum(joules) == pytest.approx(400 * seconds, rel=0.02)
    # The counter counts since driver load: the absolute value is the start plus what accrued, in uJ.
    first_j = out["first_uj"][0] / 1e6
    assert 987_654.321 + 300 * (out["t0"][0] - epoch - 0.001) - 0.001 <= first_j <= 987_654.321 + 300 * (out["t0"][1] - epoch) + 0.001


def test_millijoules_become_microjoules_exactly(tmp_path: Path) -> None:
    # A counter that never refreshes stays at its start value: the channel must report it x 1000.
    card = FakeCard(uuid=uuid_for(0), energy_start_mj=123_456_789)
    code = r"""
import json, pynvml
from otel_joules.sensors import nvml
channel = nvml.discover().channels[0]
handle = pynvml.nvmlDeviceGetHandleByIndex(0)
print(json.dumps({"uj": channel.read_uj(), "raw_mj": pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)}))
"""
    out = run_python(code, FakeNvml(cards=[card], update_ms=1e9), tmp_path).data
    assert out["raw_mj"] == 123_456_789
    assert out["uj"] == 123_456_789_000


def test_varying_power_counter_matches_its_integral(tmp_path: Path) -> None:
    card = FakeCard(uuid=uuid_for(0), watts=200, watts_amplitude=150, watts_period_s=0.5)
    fake = FakeNvml(cards=[card], update_ms=1, epoch_monotonic_s=time.monotonic())
    out = run_python(TWO_READS, fake, tmp_path).data
    measured_j = (out["second_uj"][0] - out["first_uj"][0]) / 1e6
    assert fake.epoch_monotonic_s is not None
    assert_between_reads(card, out, measured_j, fake.epoch_monotonic_s, 0.001)


INTEGRATE = r"""
import json, time
from otel_joules.sensors import nvml
found = nvml.discover()
channel = found.channels[0]
# What the meter's sampler does: a read at least every max_read_interval_s.
step = channel.max_read_interval_s
readings = []
for _ in range(11):
    readings.append((time.monotonic(), channel.read_uj()))
    time.sleep(step)
readings.append((time.monotonic(), channel.read_uj()))
print(json.dumps({"method": channel.domain.method.value, "step": step, "update_period_s": channel.domain.update_period_s,
                  "readings": readings}))
"""


@pytest.mark.parametrize(("watts", "amplitude"), [(150.0, 0.0), (150.0, 100.0)])
def test_pre_volta_power_integration_within_a_few_percent(tmp_path: Path, watts: float, amplitude: float) -> None:
    # No energy counter (pre-Volta): the power reading is integrated; the power swings by
    # +-100 W over 2 s, a realistic load change, sampled every 100 ms.
    card = FakeCard(name="Tesla P100-PCIE-16GB", uuid=uuid_for(0), cc="6.0", energy=False, watts=watts, watts_amplitude=amplitude, watts_period_s=2.0)
    fake = FakeNvml(cards=[card], epoch_monotonic_s=time.monotonic())
    out = run_python(INTEGRATE, fake, tmp_path).data
    assert out["method"] == Method.POWER_INTEGRATION.value
    assert out["step"] == nvml.POWER_SAMPLE_PERIOD_S == 0.1
    assert out["update_period_s"] == 0.1
    (t_first, uj_first), (t_last, uj_last) = out["readings"][0], out["readings"][-1]
    assert uj_first == 0
    truth_j = card.energy_joules(t_first - fake.epoch_monotonic_s, t_last - fake.epoch_monotonic_s)
    assert (uj_last - uj_first) / 1e6 == pytest.approx(truth_j, rel=0.03)
    # Cumulative: never decreases.
    values = [uj for _, uj in out["readings"]]
    assert values == sorted(values)


LOST = r"""
import json, time
from otel_joules.errors import DeviceLostError, SensorReadError
from otel_joules.sensors import nvml
found = nvml.discover()
def read_all():
    row = {}
    for c in found.channels:
        try:
            row[c.domain.id] = c.read_uj()
        except DeviceLostError as exc:
            row[c.domain.id] = "lost: " + str(exc)
        except SensorReadError as exc:
            row[c.domain.id] = "error: " + str(exc)
    return row, time.monotonic()
before, t0 = read_all()
time.sleep(0.6)
after, t1 = read_all()
again, t2 = read_all()
# Discovering again after the loss: the lost GPU is reported, the others still found.
later = nvml.discover()
print(json.dumps({"before": before, "after": after, "again": again, "t0": t0, "t1": t1,
                  "later": [c.domain.id for c in later.channels], "later_unavailable": [[u.what, u.reason] for u in later.unavailable]}))
"""


def test_gpu_lost_mid_run_drops_only_that_gpu(tmp_path: Path) -> None:
    cards = [
        FakeCard(uuid=uuid_for(0), watts=200, pci="00000000:01:00.0"),
        FakeCard(uuid=uuid_for(1), watts=100, pci="00000000:02:00.0", lost_after_s=0.3),
        FakeCard(uuid=uuid_for(2), watts=50, pci="00000000:03:00.0", energy=False, lost_after_s=0.3),
    ]
    # The epoch is the stand-in's first use, i.e. discovery: the two GPUs fail 0.3 s later, mid-run.
    out = run_python(LOST, FakeNvml(cards=cards, update_ms=1), tmp_path).data
    assert all(isinstance(v, int) for v in out["before"].values())
    assert isinstance(out["after"]["nvidia_gpu_0"], int)
    for lost in ("nvidia_gpu_1", "nvidia_gpu_2"):
        assert out["after"][lost].startswith("lost: ") and uuid_for(int(lost[-1])) in out["after"][lost]
        assert "GPU is lost" in out["after"][lost]
        assert out["again"][lost] == out["after"][lost]
    survivor_j = (out["again"]["nvidia_gpu_0"] - out["before"]["nvidia_gpu_0"]) / 1e6
    assert survivor_j == pytest.approx(200 * (out["t1"] - out["t0"]), rel=0.03)
    assert out["later"] == ["nvidia_gpu_0"]
    assert {what for what, _ in out["later_unavailable"]} == {"nvidia_gpu_1", "nvidia_gpu_2"}
    assert all("GPU is lost" in reason for _, reason in out["later_unavailable"])


NO_GPU = r"""
import json
import pynvml
from otel_joules.errors import ConfigurationError
from otel_joules.sensors import nvml
found = nvml.discover()
try:
    nvml.discover(gpus=[0])
    error = None
except ConfigurationError as exc:
    error = str(exc)
print(json.dumps({"channels": len(found.channels), "unavailable": [[u.what, u.reason, u.remedy] for u in found.unavailable],
                  "error": error, "empty_explicit": len(nvml.discover(gpus=[]).channels)}))
"""


def _no_gpu(tmp_path: Path, fake: FakeNvml | None, **kwargs: object) -> dict:
    out = run_python(NO_GPU, fake, tmp_path, **kwargs).data  # type: ignore[arg-type]
    assert out["channels"] == 0 and out["empty_explicit"] == 0
    assert len(out["unavailable"]) == 1 and out["unavailable"][0][0] == "nvidia_gpu"
    return out


def test_no_library_at_all(tmp_path: Path) -> None:
    import ctypes.util

    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("this machine has a real libnvidia-ml in the loader cache, which LD_LIBRARY_PATH cannot hide")
    out = _no_gpu(tmp_path, None, no_library=True)
    _, reason, remedy = out["unavailable"][0]
    assert "libnvidia-ml.so.1 was not found" in reason and "install the NVIDIA driver" in remedy
    assert "gpus=[0]" in out["error"] and "libnvidia-ml.so.1 was not found" in out["error"]


def test_driver_not_loaded(tmp_path: Path) -> None:
    # The library is there but the kernel driver is not (the stand-in without a config).
    out = _no_gpu(tmp_path, None)
    assert "driver is not loaded" in out["unavailable"][0][1]
    assert "driver is not loaded" in out["error"]


def test_no_permission(tmp_path: Path) -> None:
    out = _no_gpu(tmp_path, FakeNvml(cards=[FakeCard()], init_error=4))
    assert "no permission" in out["unavailable"][0][1] and "/dev/nvidia" in out["unavailable"][0][2]


def test_driver_without_gpus(tmp_path: Path) -> None:
    out = _no_gpu(tmp_path, FakeNvml(cards=[]))
    assert out["unavailable"][0][1] == "NVML found no GPU on this machine"
    assert "found no GPU" in out["error"]


def test_no_binding_installed() -> None:
    def missing() -> object:
        raise ImportError("No module named 'pynvml'")

    found = nvml.discover(session=nvml.NvmlSession(loader=missing))  # type: ignore[arg-type]
    assert found.channels == []
    assert [(u.what, u.reason) for u in found.unavailable] == [("nvidia_gpu", "the pynvml module is not installed")]
    assert "nvidia-ml-py" in found.unavailable[0].remedy
