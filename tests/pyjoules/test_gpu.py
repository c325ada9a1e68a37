"""GPU energy in microjoules next to RAPL's, through the real pynvml and the stand-in NVML library.

pyJoules 0.5.1 printed NVML's millijoules next to RAPL's microjoules. Each child process
builds a fake powercap tree and sees the stand-in GPUs; the expected GPU energy is the
stand-in's power x the sample's duration.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.fakes.nvml import FakeCard, FakeNvml, run_python, uuid_for

MEASURE = r"""
import json, sys, tempfile, time, warnings
from pathlib import Path
import otel_joules
from tests.fakes.powercap import make_powercap
from otel_joules.pyjoules.energy_meter import measure_energy
from otel_joules.pyjoules.device.rapl_device import RaplPackageDomain
from otel_joules.pyjoules.device.nvidia_device import NvidiaGPUDomain
from otel_joules.pyjoules.handler import EnergyHandler
pc = make_powercap(Path(tempfile.mkdtemp(dir=".")) / "sys", "one_socket")
otel_joules.get_energy_meter(sysfs_root=pc.sysfs_root, sample=False)
DOMAINS = None
handler = EnergyHandler()

@measure_energy(handler=handler, domains=DOMAINS)
def work():
    pc.zones["package_0"].advance_joules(1.5)
    time.sleep(0.3)

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    work()
samples = [{"energy": s.energy, "duration": s.duration} for t in handler.traces for s in t]
print(json.dumps({"samples": samples, "warnings": [str(w.message) for w in caught]}))
"""


def measure(tmp_path: Path, fake: FakeNvml | None, domains: str = "None", **kwargs: object) -> dict:
    return run_python(MEASURE.replace("DOMAINS = None", f"DOMAINS = {domains}"), fake, tmp_path, **kwargs).data  # type: ignore[arg-type]


def test_gpu_microjoules_next_to_rapl_microjoules(tmp_path: Path) -> None:
    card = FakeCard(uuid=uuid_for(0), watts=100, energy_start_mj=987_654_321)
    out = measure(tmp_path, FakeNvml(cards=[card], update_ms=1, epoch_monotonic_s=time.monotonic()))
    assert out["warnings"] == []
    (sample,) = out["samples"]
    energy = sample["energy"]
    assert list(energy) == ["package_0", "dram_0", "core_0", "uncore_0", "nvidia_gpu_0"]
    assert energy["package_0"] == 1_500_000.0
    # 100 W for the sample's duration, in microjoules (mJ would be 1000 times less).
    expected_uj = 100 * sample["duration"] * 1e6
    assert energy["nvidia_gpu_0"] == pytest.approx(expected_uj, rel=0.03)
    assert energy["nvidia_gpu_0"] % 1000 == 0  # NVML counts whole millijoules
    assert energy["nvidia_gpu_0"] < 987_654_321  # a difference, not the counter since driver load


def test_default_gpus_are_those_of_cuda_visible_devices_by_nvml_index(tmp_path: Path) -> None:
    cards = [
        FakeCard(uuid=uuid_for(0), watts=100),
        FakeCard(uuid=uuid_for(1), watts=300, pci="00000000:08:00.0"),
    ]
    fake = FakeNvml(cards=cards, update_ms=1, epoch_monotonic_s=time.monotonic())
    out = measure(tmp_path, fake, env={"CUDA_VISIBLE_DEVICES": "1"})
    (sample,) = out["samples"]
    assert [d for d in sample["energy"] if d.startswith("nvidia")] == ["nvidia_gpu_1"]
    assert sample["energy"]["nvidia_gpu_1"] == pytest.approx(300 * sample["duration"] * 1e6, rel=0.03)


def test_explicit_gpu_is_the_nvml_index(tmp_path: Path) -> None:
    cards = [
        FakeCard(uuid=uuid_for(0), watts=100),
        FakeCard(uuid=uuid_for(1), watts=300, pci="00000000:08:00.0"),
    ]
    fake = FakeNvml(cards=cards, update_ms=1, epoch_monotonic_s=time.monotonic())
    out = measure(tmp_path, fake, "[NvidiaGPUDomain(1), RaplPackageDomain(0)]")
    (sample,) = out["samples"]
    # Grouped by device in first-seen order, as pyJoules does.
    assert list(sample["energy"]) == ["nvidia_gpu_1", "package_0"]
    assert sample["energy"]["nvidia_gpu_1"] == pytest.approx(300 * sample["duration"] * 1e6, rel=0.03)
    # A GPU this process may not use is left out, with the reason and the remedy.
    hidden = measure(tmp_path, fake, "[NvidiaGPUDomain(0), RaplPackageDomain(0)]", env={"CUDA_VISIBLE_DEVICES": "1"})
    assert [list(s["energy"]) for s in hidden["samples"]] == [["package_0"]]
    (warning,) = hidden["warnings"]
    assert "left out: nvidia_gpu_0: " in warning and "not visible to this process: CUDA_VISIBLE_DEVICES='1'" in warning


def test_no_driver_measures_rapl_and_says_why_for_the_gpu(tmp_path: Path) -> None:
    out = measure(tmp_path, None, "[RaplPackageDomain(0), NvidiaGPUDomain(0)]", no_library=True)
    assert [s["energy"] for s in out["samples"]] == [{"package_0": 1_500_000.0}]
    (warning,) = out["warnings"]
    assert "nvidia_gpu_0: libnvidia-ml.so.1 was not found" in warning
    default = measure(tmp_path, None, no_library=True)
    assert list(default["samples"][0]["energy"]) == ["package_0", "dram_0", "core_0", "uncore_0"]
    assert default["warnings"] == []


# The advice a GPU that cannot be measured gets works when followed.

ADVICE_MEASURE = r"""
import json, os, tempfile, warnings
from pathlib import Path
import otel_joules
from tests.fakes.powercap import make_powercap
from otel_joules.pyjoules.energy_meter import measure_energy
from otel_joules.pyjoules.device.nvidia_device import NvidiaGPUDomain
from otel_joules.pyjoules.handler import EnergyHandler
pc = make_powercap(Path(tempfile.mkdtemp(dir=".")) / "sys", "one_socket")
os.environ["OTEL_JOULES_SYSFS_ROOT"] = pc.sysfs_root
SETUP = None
handler = EnergyHandler()

@measure_energy(handler=handler, domains=[NvidiaGPUDomain(INDEX)])
def work():
    pass

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    work()
print(json.dumps({"domains": [list(s.energy) for t in handler.traces for s in t],
                  "warnings": [str(w.message) for w in caught]}))
"""


def _measure_advised(tmp_path: Path, fake: FakeNvml, index: int, setup: str = "None", **env: str) -> dict:
    code = ADVICE_MEASURE.replace("INDEX", str(index)).replace("SETUP = None", setup)
    return run_python(code, fake, tmp_path, env=env).data  # type: ignore[no-any-return]


@pytest.fixture
def two_gpus() -> FakeNvml:
    cards = [FakeCard(uuid=uuid_for(0), watts=100), FakeCard(uuid=uuid_for(1), watts=300, pci="00000000:08:00.0")]
    return FakeNvml(cards=cards, update_ms=1, epoch_monotonic_s=time.monotonic())


def test_a_gpu_that_does_not_exist_is_not_advised_as_gpus_5(tmp_path: Path, two_gpus: FakeNvml) -> None:
    out = _measure_advised(tmp_path, two_gpus, 5)
    (warning,) = out["warnings"]
    assert "get_energy_meter(gpus=[5" not in warning  # which would raise: there is no GPU 5
    assert "there is no GPU with NVML index 5 on this machine (NVML indices here: 0, 1" in warning
    # Followed: one of those indices is measured, without a warning.
    followed = _measure_advised(tmp_path, two_gpus, 1)
    assert followed["warnings"] == [] and followed["domains"] == [["nvidia_gpu_1"]]


def test_a_gpu_left_out_of_the_shared_meter_gets_advice_that_works(tmp_path: Path, two_gpus: FakeNvml) -> None:
    setup = "otel_joules.get_energy_meter(gpus=[0])"
    out = _measure_advised(tmp_path, two_gpus, 1, setup)
    (warning,) = out["warnings"]
    assert "nvidia_gpu_1: not selected: gpus=[0] (to fix: add it to gpus= to measure it)" in warning
    followed = _measure_advised(tmp_path, two_gpus, 1, "otel_joules.get_energy_meter(gpus=[0, 1])")
    assert followed["warnings"] == [] and followed["domains"] == [["nvidia_gpu_1"]]


def test_a_gpu_hidden_by_cuda_visible_devices_advice_works(tmp_path: Path, two_gpus: FakeNvml) -> None:
    out = _measure_advised(tmp_path, two_gpus, 0, CUDA_VISIBLE_DEVICES="1")
    (warning,) = out["warnings"]
    assert "unset CUDA_VISIBLE_DEVICES or list this GPU in it" in warning
    listed = _measure_advised(tmp_path, two_gpus, 0, CUDA_VISIBLE_DEVICES="1,0")
    assert listed["warnings"] == [] and listed["domains"] == [["nvidia_gpu_0"]]
