"""AMD GPUs through the real ``amdsmi`` package and the stand-in ``libamd_smi.so``: joules through wraps, integrated
power, which GPUs a ROCm job sees, partitions, and a missing library said only where an AMD GPU is present.

Every expected value comes from the stand-in's power profile (:meth:`FakeAmdGpu.energy_joules`), never from the
code under test.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.fakes.amdsmi import FakeAmdGpu, FakeAmdSmi, build_library, run_python, uuid_for, wrapper_path
from tests.fakes.amdsmi_stub.gen_stubs import bound_functions

RESOLUTION_UJ = 15.3

TEN_SECONDS = r"""
import json, os, time
import amdsmi as package
from otel_joules.meter.meter import EnergyMeter
os.makedirs("empty-sys", exist_ok=True)
meter = EnergyMeter(sysfs_root="empty-sys", estimate=False)
handle = package.amdsmi_get_processor_handles()[0]
def raw():
    return package.amdsmi_get_energy_count(handle)["energy_accumulator"]
t0 = time.monotonic(); a = meter.snapshot(); t0b = time.monotonic()
raw0 = raw()
time.sleep(10)
raw1 = raw()
t1 = time.monotonic(); b = meter.snapshot(); t1b = time.monotonic()
m = meter.measure(a, b)
print(json.dumps({"ids": [d.id for d in meter.domains], "methods": [d.method.value for d in meter.domains],
                  "joules": [m.joules_by_domain[d.id] for d in meter.domains], "t0": [t0, t0b], "t1": [t1, t1b], "raw": [raw0, raw1]}))
"""


def test_ten_seconds_within_one_percent_through_a_wrap_of_the_accumulator(tmp_path: Path) -> None:
    # GPU 0: a counter 3 s of energy short of 2**64 steps, so it wraps during the run; GPU 1: no accumulator,
    # its varying power integrated.
    start = (1 << 64) - int(150.0 * 3.0 * 1e6 / RESOLUTION_UJ)
    gpus = [
        FakeAmdGpu(uuid=uuid_for(0), watts=150.0, resolution_uj=RESOLUTION_UJ, energy_start_counts=start),
        FakeAmdGpu(uuid=uuid_for(1), watts=220.0, watts_amplitude=60.0, watts_period_s=2.0, energy=False, power_field="average"),
    ]
    fake = FakeAmdSmi(gpus=gpus, epoch_monotonic_s=time.monotonic())
    out = run_python(TEN_SECONDS, fake, tmp_path, timeout_s=90).data
    assert out["ids"] == ["amd_gpu_0", "amd_gpu_1"]
    assert out["methods"] == ["counter", "power_integration"]
    epoch = fake.epoch_monotonic_s
    assert epoch is not None
    for gpu, measured in zip(gpus, out["joules"]):
        truth = gpu.energy_joules((out["t0"][0] + out["t0"][1]) / 2 - epoch, (out["t1"][0] + out["t1"][1]) / 2 - epoch)
        assert truth > 1000
        assert measured == pytest.approx(truth, rel=0.01), (gpu.uuid, measured, truth)
    raw0, raw1 = out["raw"]
    assert raw1 < raw0  # the accumulator did wrap between the two snapshots


def discover_case(env: dict[str, str]) -> str:
    return f"""
found = amdsmi.discover(env={env!r})
results.append({{"ids": [c.domain.id for c in found.channels], "notes": [u.reason for u in found.unavailable]}})
"""


VISIBILITY_CASES = [
    ({}, ["amd_gpu_0", "amd_gpu_1", "amd_gpu_2"]),
    ({"ROCR_VISIBLE_DEVICES": "2,0"}, ["amd_gpu_0", "amd_gpu_2"]),
    ({"ROCR_VISIBLE_DEVICES": f"GPU-{uuid_for(1)}"}, ["amd_gpu_1"]),
    ({"ROCR_VISIBLE_DEVICES": uuid_for(2)[:12]}, ["amd_gpu_2"]),  # a UUID prefix without GPU-
    ({"ROCR_VISIBLE_DEVICES": "0,2", "HIP_VISIBLE_DEVICES": "1"}, ["amd_gpu_2"]),  # HIP indexes what ROCr left
    ({"HIP_VISIBLE_DEVICES": "1", "CUDA_VISIBLE_DEVICES": "0"}, ["amd_gpu_1"]),  # HIP's own wins over CUDA's
    ({"CUDA_VISIBLE_DEVICES": uuid_for(0)}, ["amd_gpu_0"]),  # HIP reads CUDA_VISIBLE_DEVICES when its own is unset
    ({"HIP_VISIBLE_DEVICES": ""}, []),
    ({"ROCR_VISIBLE_DEVICES": "1,7,0"}, ["amd_gpu_1"]),  # an invalid entry ends the list
]


def test_every_gpu_the_job_can_see_by_index_or_uuid(tmp_path: Path) -> None:
    gpus = [FakeAmdGpu(uuid=uuid_for(n), bdf=f"0000:{0x0c + n:02x}:00.0") for n in range(3)]
    code = "import json\nfrom otel_joules.sensors import amdsmi\nresults = []\n"
    code += "".join(discover_case(env) for env, _ in VISIBILITY_CASES)
    code += "print(json.dumps(results))\n"
    results = run_python(code, FakeAmdSmi(gpus=gpus), tmp_path).data
    for (env, expected), result in zip(VISIBILITY_CASES, results):
        assert result["ids"] == expected, (env, result)
    invalid = results[-1]["notes"]
    assert any("'7' is index 7" in note and "ignored" in note for note in invalid), invalid


def test_the_job_environment_decides_and_an_explicit_choice_overrides_it(tmp_path: Path) -> None:
    gpus = [FakeAmdGpu(uuid=uuid_for(n), bdf=f"0000:{0x0c + n:02x}:00.0") for n in range(2)]
    code = r"""
import json
from otel_joules.errors import ConfigurationError
from otel_joules.meter.meter import EnergyMeter
from otel_joules.sensors import amdsmi
import os
os.makedirs("empty-sys", exist_ok=True)
meter = EnergyMeter(sysfs_root="empty-sys", estimate=False)
chosen = [c.domain.id for c in amdsmi.discover(gpus="1").channels]
try:
    amdsmi.discover(gpus=["GPU-ffff"])
    error = None
except ConfigurationError as exc:
    error = str(exc)
print(json.dumps({"meter": [d.id for d in meter.domains], "chosen": chosen, "error": error}))
"""
    out = run_python(code, FakeAmdSmi(gpus=gpus), tmp_path, env={"ROCR_VISIBLE_DEVICES": f"GPU-{uuid_for(1)}"}).data
    assert out["meter"] == ["amd_gpu_1"]
    assert out["chosen"] == ["amd_gpu_1"]
    assert "matches no AMD GPU" in out["error"] and uuid_for(0) in out["error"]


def test_partitions_are_named_and_the_vendor_is_amd(tmp_path: Path) -> None:
    gpus = [FakeAmdGpu(uuid=uuid_for(0), compute_partition="CPX", memory_partition="NPS4"), FakeAmdGpu(uuid=uuid_for(1))]
    code = r"""
import json
from otel_joules.sensors import amdsmi
found = amdsmi.discover()
print(json.dumps([[c.domain.hw_name, c.domain.covers, c.domain.vendor, c.domain.kind, c.domain.hw_id] for c in found.channels]))
"""
    (first, second) = run_python(code, FakeAmdSmi(gpus=gpus), tmp_path).data
    assert first[0] == "AMD Instinct MI300X (CPX, NPS4)" and "partition mode CPX, NPS4" in first[1]
    assert second[0] == "AMD Instinct MI300X" and "partition" not in second[1]
    assert [first[2:], second[2:]] == [["AMD", "gpu", uuid_for(0)], ["AMD", "gpu", uuid_for(1)]]


def test_a_gpu_with_neither_reading_is_unavailable_with_the_reason(tmp_path: Path) -> None:
    gpus = [FakeAmdGpu(uuid=uuid_for(0), energy=False, power=False)]
    code = r"""
import json
from otel_joules.sensors import amdsmi
found = amdsmi.discover()
print(json.dumps({"channels": len(found.channels), "unavailable": [[u.what, u.reason] for u in found.unavailable]}))
"""
    out = run_python(code, FakeAmdSmi(gpus=gpus), tmp_path).data
    assert out["channels"] == 0
    assert out["unavailable"] == [[f"amd_gpu_0 (AMD Instinct MI300X, {uuid_for(0)})", "amdsmi supports neither its energy accumulator nor its power reading"]]


MISSING = r"""
import json, os
from otel_joules.sensors import amdsmi
from otel_joules.config import Settings
found = amdsmi.discover(Settings(sysfs_root="sys"))
print(json.dumps([[u.what, u.reason, u.remedy] for u in found.unavailable]))
"""


def amd_sysfs(root: Path, cards: int) -> None:
    for n in range(cards):
        device = root / "class" / "drm" / f"card{n}" / "device"
        device.mkdir(parents=True)
        (device / "vendor").write_text("0x1002\n")
        (root / "class" / "drm" / f"card{n}-DP-1").mkdir()


def test_a_missing_library_is_said_only_where_sysfs_shows_an_amd_gpu(tmp_path: Path) -> None:
    empty_rocm = tmp_path / "rocm"
    (empty_rocm / "lib").mkdir(parents=True)
    (tmp_path / "sys").mkdir()
    quiet = run_python(MISSING, None, tmp_path, env={"ROCM_PATH": str(empty_rocm)})
    assert quiet.data == []
    assert "Unable to find" not in quiet.stdout  # the binding's own print does not reach the user
    amd_sysfs(tmp_path / "sys", 2)
    said = run_python(MISSING, None, tmp_path, env={"ROCM_PATH": str(empty_rocm)})
    ((what, reason, remedy),) = said.data
    assert what == "amd_gpu"
    assert reason.startswith("2 AMD GPUs in sysfs, but the amdsmi package cannot load libamd_smi.so")
    assert "ROCM_PATH" in remedy


def test_the_stand_in_exports_every_function_the_binding_resolves(tmp_path: Path) -> None:
    names = bound_functions(wrapper_path().read_text())
    assert len(names) == 184  # amdsmi 7.0.2
    code = r"""
import ctypes, json, os
lib = ctypes.CDLL(os.path.join(os.environ["ROCM_PATH"], "lib", "libamd_smi.so"))
names = json.loads(os.environ["NAMES"])
print(json.dumps([n for n in names if not hasattr(lib, n)]))
"""
    import json

    assert run_python(code, None, tmp_path, env={"NAMES": json.dumps(names)}).data == []
    assert (build_library() / "lib" / "libamd_smi.so").exists()


FORKED = r"""
import json, os, time
from otel_joules.meter.meter import EnergyMeter
os.makedirs("empty-sys", exist_ok=True)
meter = EnergyMeter(sysfs_root="empty-sys", estimate=False)
a = meter.snapshot()
start = time.monotonic()
pid = os.fork()
if pid == 0:
    time.sleep(0.5)
    b = meter.snapshot()
    with open("child.json", "w") as out:
        json.dump({"joules": meter.measure(a, b).joules_by_domain.get("amd_gpu_0"), "seconds": time.monotonic() - start}, out)
    os._exit(0)
os.waitpid(pid, 0)
with open("child.json") as f:
    print(f.read())
"""


def test_a_forked_child_measures_the_gpu_through_its_own_amdsmi(tmp_path: Path) -> None:
    fake = FakeAmdSmi(gpus=[FakeAmdGpu(uuid=uuid_for(0), watts=100.0)])
    out = run_python(FORKED, fake, tmp_path).data
    assert out["joules"] is not None
    assert out["joules"] == pytest.approx(100.0 * out["seconds"], rel=0.05)


def test_devices_by_pid_selects_the_gpus_amdsmi_lists_this_process_on(tmp_path: Path) -> None:
    gpus = [
        FakeAmdGpu(uuid=uuid_for(0), pids=("999999",)),
        FakeAmdGpu(uuid=uuid_for(1), bdf="0000:0d:00.0", pids=("self", "999999")),
    ]
    code = r"""
import json
from otel_joules.sensors import amdsmi
found = amdsmi.discover(devices_by_pid=True, env={"ROCR_VISIBLE_DEVICES": "0"})
print(json.dumps({"ids": [c.domain.id for c in found.channels], "notes": [u.reason for u in found.unavailable]}))
"""
    out = run_python(code, FakeAmdSmi(gpus=gpus), tmp_path).data
    assert out["ids"] == ["amd_gpu_1"]  # devices_by_pid replaces the visibility variables
    assert out["notes"] == ["devices_by_pid: no process of this process tree runs on it (amdsmi lists: 999999)"]
