"""Which GPUs are measured: CUDA_VISIBLE_DEVICES in every form, CUDA_DEVICE_ORDER, devices_by_pid, explicit choice.

The machine used throughout (NVML numbers GPUs by PCI bus, as the real driver does):

    NVML 0  Tesla P100   cc 6.0  PCI 07   no energy counter (power only)
    NVML 1  A100         cc 8.0  PCI 3B
    NVML 2  Tesla T4     cc 7.5  PCI 5E
    NVML 3  A100         cc 8.0  PCI 86   MIG mode, two MIG devices

so CUDA's default fastest-first numbering is 0 -> NVML 1, 1 -> NVML 3, 2 -> NVML 2, 3 -> NVML 0,
while CUDA_DEVICE_ORDER=PCI_BUS_ID numbering equals NVML's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from otel_joules.errors import ConfigurationError
from otel_joules.sensors.gpu_selection import (
    GpuInfo,
    cuda_order,
    parse_cuda_visible_devices,
    pci_sort_key,
    select_by_pids,
    select_explicit,
    select_gpus,
)

from tests.fakes.nvml import FakeCard, FakeNvml, run_python, uuid_for

MIG_A = "MIG-5a1b2c3d-0000-1111-2222-333333333333"
MIG_B = "MIG-5a1b9999-0000-1111-2222-444444444444"

CARDS = [
    FakeCard(name="Tesla P100-PCIE-16GB", uuid=uuid_for(0), pci="00000000:07:00.0", cc="6.0", cores=3584, sm_clock_mhz=1328, energy=False, watts=90),
    FakeCard(name="NVIDIA A100-SXM4-40GB", uuid=uuid_for(1), pci="00000000:3B:00.0", cc="8.0", cores=6912, sm_clock_mhz=1410, watts=200),
    FakeCard(name="Tesla T4", uuid=uuid_for(2), pci="00000000:5E:00.0", cc="7.5", cores=2560, sm_clock_mhz=1590, watts=40),
    FakeCard(name="NVIDIA A100-SXM4-40GB", uuid=uuid_for(3), pci="00000000:86:00.0", cc="8.0", cores=6912, sm_clock_mhz=1410, watts=300, mig_uuids=(MIG_A, MIG_B)),
]

GPUS = [
    GpuInfo(i, c.uuid, c.name, c.pci, tuple(int(x) for x in c.cc.split(".")), c.cores, c.sm_clock_mhz, tuple(c.mig_uuids))  # type: ignore[arg-type]
    for i, c in enumerate(CARDS)
]


def cvd(value: str | None, order: str | None = None) -> tuple[int, ...]:
    return parse_cuda_visible_devices(value, GPUS, order).indices


# ---- pure selection logic --------------------------------------------------------------


def test_unset_means_every_gpu_and_empty_means_none() -> None:
    assert cvd(None) == (0, 1, 2, 3)
    empty = parse_cuda_visible_devices("", GPUS)
    assert empty.indices == ()
    assert len(empty.notes) == 4 and all("set and empty" in n.reason for n in empty.notes)
    assert cvd("   ") == ()


def test_indices_follow_cuda_device_order() -> None:
    assert [g.index for g in cuda_order(GPUS)] == [1, 3, 2, 0]
    assert [g.index for g in cuda_order(GPUS, "PCI_BUS_ID")] == [0, 1, 2, 3]
    assert [g.index for g in cuda_order(GPUS, "FASTEST_FIRST")] == [1, 3, 2, 0]
    assert cvd("0") == (1,)
    assert cvd("0", "PCI_BUS_ID") == (0,)
    assert cvd("3,0") == (0, 1)
    assert cvd("2,1", "pci_bus_id") == (2, 1)


def test_pci_order_is_numeric_not_nvml_index() -> None:
    # NVML's index order is not guaranteed to be the PCI order; PCI_BUS_ID must sort by bus id.
    shuffled = [GpuInfo(0, "GPU-b", "x", "00000000:AF:00.0"), GpuInfo(1, "GPU-a", "x", "00000000:1B:00.0")]
    assert [g.index for g in cuda_order(shuffled, "PCI_BUS_ID")] == [1, 0]
    assert pci_sort_key("0000:0A:00.0") < pci_sort_key("0000:10:00.0")


def test_fastest_first_uses_throughput_within_a_compute_capability() -> None:
    big = GpuInfo(0, "GPU-a", "RTX 3090", "00000000:01:00.0", (8, 6), 10496, 1695)
    small = GpuInfo(1, "GPU-b", "RTX 3060", "00000000:00:00.0", (8, 6), 3584, 1777)
    assert [g.index for g in cuda_order([small, big])] == [0, 1]
    twins = [GpuInfo(1, "GPU-b", "A", "00000000:81:00.0", (8, 0)), GpuInfo(0, "GPU-a", "A", "00000000:01:00.0", (8, 0))]
    assert [g.index for g in cuda_order(twins)] == [0, 1]


def test_uuid_entries_full_abbreviated_and_case_insensitive() -> None:
    assert cvd(uuid_for(2)) == (2,)
    assert cvd("GPU-00000002") == (2,)
    assert cvd(uuid_for(3).upper().replace("GPU-", "gpu-")) == (3,)
    assert cvd(f"GPU-00000002,{uuid_for(0)}") == (2, 0)


def test_ambiguous_or_unknown_uuid_ends_the_list() -> None:
    ambiguous = parse_cuda_visible_devices("GPU-0000000", GPUS)
    assert ambiguous.indices == ()
    assert "ambiguous" in ambiguous.notes[0].reason and uuid_for(0) in ambiguous.notes[0].reason
    unknown = parse_cuda_visible_devices("1,GPU-ffff,0", GPUS, "PCI_BUS_ID")
    assert unknown.indices == (1,)
    assert "matches no GPU" in unknown.notes[0].reason and "it and the 1 entry after it are ignored" in unknown.notes[0].reason


def test_invalid_entry_ends_the_list_as_in_cuda() -> None:
    assert cvd("0,7,1", "PCI_BUS_ID") == (0,)
    assert cvd("2,abc,0", "PCI_BUS_ID") == (2,)
    assert cvd("-1") == ()
    assert cvd(",0") == ()
    notes = parse_cuda_visible_devices("0,7,1", GPUS, "PCI_BUS_ID").notes
    assert notes[0].what == "CUDA_VISIBLE_DEVICES entry '7'" and "only 4 GPUs" in notes[0].reason
    excluded = {n.what.split()[0] for n in notes[1:]}
    assert excluded == {"nvidia_gpu_1", "nvidia_gpu_2", "nvidia_gpu_3"}


def test_mig_entries_map_to_the_parent_gpu_and_say_so() -> None:
    selection = parse_cuda_visible_devices(f"{MIG_A},{MIG_B}", GPUS)
    assert selection.indices == (3,)
    mig_notes = [n for n in selection.notes if n.what.startswith("MIG device")]
    assert len(mig_notes) == 2 and all("per physical GPU only" in n.reason and "nvidia_gpu_3" in n.reason for n in mig_notes)
    assert cvd("MIG-5a1b2") == (3,)
    assert cvd(f"MIG-{uuid_for(3)}/1/0") == (3,)  # the pre-R470 form
    assert cvd("MIG-5a1b") == (3,)  # ambiguous between two slices, but of the same GPU: measured once
    assert cvd("MIG-77") == ()


def test_duplicates_are_measured_once() -> None:
    assert cvd("0,0,GPU-00000001", "PCI_BUS_ID") == (0, 1)


def test_explicit_selection_by_index_uuid_and_string() -> None:
    assert select_explicit([2, 0], GPUS).indices == (2, 0)
    assert select_explicit("1, GPU-00000003", GPUS).indices == (1, 3)
    assert select_explicit(["0", MIG_B], GPUS).indices == (0, 3)
    assert select_explicit([], GPUS).indices == ()
    explicit = select_gpus(GPUS, requested=[2], env={"CUDA_VISIBLE_DEVICES": ""}, devices_by_pid=True)
    assert explicit.indices == (2,) and explicit.explicit


@pytest.mark.parametrize(
    ("requested", "message"),
    [([4], "no GPU with NVML index 4"), (["GPU-0000000"], "ambiguous"), (["GPU-ff"], "matches no GPU"), ([True], "not an NVML index"), (["x"], "neither")],
)
def test_explicit_selection_errors_name_the_available_gpus(requested: list, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as info:
        select_explicit(requested, GPUS)
    assert uuid_for(3) in str(info.value)


def test_devices_by_pid_keeps_gpus_running_a_process_of_the_tree() -> None:
    selection = select_by_pids(GPUS, {0: {11}, 1: {99, 12}, 2: "Not Supported (NVML error 3)", 3: set()}, tree_pids={11, 12})
    assert selection.indices == (0, 1)
    reasons = {n.what.split()[0]: n.reason for n in selection.notes}
    assert "cannot be read" in reasons["nvidia_gpu_2"]
    assert "NVML lists: none" in reasons["nvidia_gpu_3"]
    assert all("--pid=host" in n.remedy for n in selection.notes)


def test_select_gpus_reads_the_environment_it_is_given() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert select_gpus(GPUS, env=env).indices == (1,)
    assert select_gpus(GPUS, env={}).indices == (0, 1, 2, 3)
    assert select_gpus(GPUS, devices_by_pid=True, gpu_pids=lambda: {2: {5}}, tree_pids={5}).indices == (2,)


# ---- the same through the real pynvml and the stand-in library -------------------------


END_TO_END = r"""
import json
from otel_joules.errors import ConfigurationError
from otel_joules.sensors import nvml

cases = json.load(open("cases.json"))
out = {}
for name, case in cases.items():
    try:
        found = nvml.discover(None, gpus=case.get("gpus"), env=case.get("env"))
    except ConfigurationError as exc:
        out[name] = {"error": str(exc)}
        continue
    out[name] = {
        "domains": [c.domain.id for c in found.channels],
        "methods": [c.domain.method.value for c in found.channels],
        "hw_ids": [c.domain.hw_id for c in found.channels],
        "unavailable": [[u.what, u.reason] for u in found.unavailable],
    }
# And once through the process environment itself.
found = nvml.discover()
out["process_env"] = {"domains": [c.domain.id for c in found.channels]}
print(json.dumps(out))
"""


def test_selection_end_to_end_through_pynvml(tmp_path: Path) -> None:
    cases = {
        "unset": {"env": {}},
        "empty": {"env": {"CUDA_VISIBLE_DEVICES": ""}},
        "index_fastest_first": {"env": {"CUDA_VISIBLE_DEVICES": "0,3"}},
        "index_pci": {"env": {"CUDA_VISIBLE_DEVICES": "0,3", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}},
        "uuid_abbreviated": {"env": {"CUDA_VISIBLE_DEVICES": "GPU-00000002"}},
        "mig": {"env": {"CUDA_VISIBLE_DEVICES": MIG_B}},
        "invalid_ends": {"env": {"CUDA_VISIBLE_DEVICES": "2,bogus,0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}},
        "explicit_overrides": {"env": {"CUDA_VISIBLE_DEVICES": ""}, "gpus": [0, "GPU-00000003"]},
        "explicit_missing": {"env": {}, "gpus": [9]},
    }
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    result = run_python(END_TO_END, FakeNvml(cards=CARDS), tmp_path, env={"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}).data

    assert result["unset"]["domains"] == ["nvidia_gpu_0", "nvidia_gpu_1", "nvidia_gpu_2", "nvidia_gpu_3"]
    # The P100 has no energy counter: its power is integrated instead.
    assert result["unset"]["methods"] == ["power_integration", "counter", "counter", "counter"]
    assert result["unset"]["hw_ids"] == [uuid_for(i) for i in range(4)]
    assert result["empty"]["domains"] == []
    assert len(result["empty"]["unavailable"]) == 4
    assert result["index_fastest_first"]["domains"] == ["nvidia_gpu_0", "nvidia_gpu_1"]  # CUDA 0 = NVML 1, CUDA 3 = NVML 0
    assert result["index_pci"]["domains"] == ["nvidia_gpu_0", "nvidia_gpu_3"]
    assert result["uuid_abbreviated"]["domains"] == ["nvidia_gpu_2"]
    assert result["mig"]["domains"] == ["nvidia_gpu_3"]
    assert any("per physical GPU only" in reason for _, reason in result["mig"]["unavailable"])
    assert result["invalid_ends"]["domains"] == ["nvidia_gpu_2"]
    assert result["invalid_ends"]["unavailable"][0][0] == "CUDA_VISIBLE_DEVICES entry 'bogus'"
    assert result["explicit_overrides"]["domains"] == ["nvidia_gpu_0", "nvidia_gpu_3"]
    assert "no GPU with NVML index 9" in result["explicit_missing"]["error"]
    assert result["process_env"]["domains"] == ["nvidia_gpu_1"]


def test_explicit_gpu_that_cannot_be_measured_fails_at_configuration(tmp_path: Path) -> None:
    cards = [FakeCard(uuid=uuid_for(0)), FakeCard(uuid=uuid_for(1), name="GeForce GT 710", energy=False, power=False, pci="00000000:08:00.0")]
    code = r"""
import json
from otel_joules.errors import ConfigurationError
from otel_joules.sensors import nvml
default = nvml.discover()
try:
    nvml.discover(gpus=[1])
    error = None
except ConfigurationError as exc:
    error = str(exc)
print(json.dumps({"domains": [c.domain.id for c in default.channels],
                  "unavailable": [[u.what, u.reason] for u in default.unavailable], "error": error}))
"""
    result = run_python(code, FakeNvml(cards=cards), tmp_path).data
    # Not asked for: reported, and the other GPU is measured.
    assert result["domains"] == ["nvidia_gpu_0"]
    assert result["unavailable"] == [[f"nvidia_gpu_1 (GeForce GT 710, {uuid_for(1)})", "NVML supports neither its energy counter nor its power reading"]]
    # Asked for: an error at configuration time that says which GPU and why.
    assert "nvidia_gpu_1" in result["error"] and "neither its energy counter nor its power reading" in result["error"]


DEVICES_BY_PID = r"""
import json, os, subprocess, sys, time
from otel_joules.sensors import nvml

worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
try:
    with open("gpu1.pids", "w") as f:
        f.write(str(worker.pid))
    by_pid = nvml.discover(devices_by_pid=True)
    explicit = nvml.discover(gpus=[2], devices_by_pid=True)
finally:
    worker.kill()
    worker.wait()
print(json.dumps({
    "by_pid": [c.domain.id for c in by_pid.channels],
    "unavailable": [[u.what, u.reason, u.remedy] for u in by_pid.unavailable],
    "explicit": [c.domain.id for c in explicit.channels],
    "self": os.getpid(),
}))
"""


def test_devices_by_pid_through_pynvml(tmp_path: Path) -> None:
    cards = [
        FakeCard(uuid=uuid_for(0), pci="00000000:01:00.0", compute_pids=("self",)),  # this process
        FakeCard(uuid=uuid_for(1), pci="00000000:02:00.0", compute_pids_file=str(tmp_path / "gpu1.pids")),  # its child
        FakeCard(uuid=uuid_for(2), pci="00000000:03:00.0", compute_pids=(1,), graphics_pids=(2,)),  # someone else's
        FakeCard(uuid=uuid_for(3), pci="00000000:04:00.0", graphics_pids=("self",)),  # graphics context counts too
    ]
    # CUDA_VISIBLE_DEVICES would hide GPU 1; devices_by_pid replaces that rule.
    result = run_python(DEVICES_BY_PID, FakeNvml(cards=cards), tmp_path, env={"CUDA_VISIBLE_DEVICES": "0"}).data
    assert result["by_pid"] == ["nvidia_gpu_0", "nvidia_gpu_1", "nvidia_gpu_3"]
    assert len(result["unavailable"]) == 1
    what, reason, remedy = result["unavailable"][0]
    assert what.startswith("nvidia_gpu_2") and "NVML lists: 1, 2" in reason and "--pid=host" in remedy
    assert result["explicit"] == ["nvidia_gpu_2"]
