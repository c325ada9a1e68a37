"""``otel-joules run`` charges a GPU only for the command's own processes on it, as spans are charged.

The GPUs are the NVML stand-in (tests/fakes/nvml.py) loaded by the real pynvml; the command's
processes put their own pids in the stand-in's process lists through files it reads at each call.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from tests.fakes.nvml import FakeCard, FakeNvml, build_library, uuid_for
from tests.fakes.powercap import make_powercap
from tests.helpers.processes import clean_env, otel_joules_command

GPU_LINE = re.compile(r"^  gpu      (\S+): (\S+ \S+) of (\S+ \S+) charged \((.*)\)$", re.M)


def _run(tmp_path: Path, cards: list[FakeCard], command: list[str], **extra: str) -> tuple[dict, str]:
    pc = make_powercap(tmp_path / "sys", "one_socket")
    config = FakeNvml(cards=cards, update_ms=1).write(tmp_path / "fake_nvml.conf")
    env = clean_env(tmp_path, {
        "OTEL_JOULES_SYSFS_ROOT": pc.sysfs_root,
        "LD_LIBRARY_PATH": str(build_library()),
        "FAKE_NVML_CONFIG": str(config),
        **extra,
    })
    env.pop("CUDA_VISIBLE_DEVICES", None)
    out = tmp_path / "run.jsonl"
    result = subprocess.run(otel_joules_command("run", "--exporter", f"jsonl:{out}", "--", *command), env=env,
                            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    return record["attributes"], result.stderr


def _gpu_lines(stderr: str) -> dict[str, tuple[str, str, str]]:
    return {m.group(1): (m.group(2), m.group(3), m.group(4)) for m in GPU_LINE.finditer(stderr)}


def test_cpu_only_command_is_charged_no_gpu_energy_and_told_why(tmp_path):
    """One GPU idle, one busy with another process (pid 1): the command used neither, so it gets 0 J of
    them, though both drew power during its run, and the summary says so for each."""
    cards = [FakeCard(uuid=uuid_for(0), watts=200.0),
             FakeCard(uuid=uuid_for(1), watts=100.0, pci="00000000:08:00.0", compute_pids=(1,))]
    attributes, stderr = _run(tmp_path, cards, ["sh", "-c", "sleep 0.6"])
    assert attributes["energy.nvidia_gpu_0.joules"] > 50  # 200 W for 0.6 s or more
    assert attributes["energy.nvidia_gpu_1.joules"] > 25
    assert attributes["energy.attributed.gpu.joules"] == 0.0
    assert attributes["energy.attributed.joules"] < attributes["energy.package_0.joules"] + 1e-9
    lines = _gpu_lines(stderr)
    assert lines["nvidia_gpu_0"][0] == "0 J"
    assert lines["nvidia_gpu_0"][2] == "no process of the command used it", stderr
    assert lines["nvidia_gpu_1"][0] == "0 J"
    assert lines["nvidia_gpu_1"][2] == "no process of the command used it; used only by other processes", stderr
    assert "plus its GPUs" not in stderr


def test_command_whose_grandchild_is_on_the_gpus_gets_their_energy_as_spans_share_it(tmp_path):
    """A grandchild of the command (found through /proc) lists itself alone on GPU 0 and beside pid 1 on
    GPU 1 at 25 % of its SM utilisation (pid 1: 75 %): the command gets GPU 0's energy while it was there,
    and a quarter of GPU 1's, as a span's GPU share is split."""
    pids, utilisation = tmp_path / "pids", tmp_path / "utilisation"
    cards = [FakeCard(uuid=uuid_for(0), watts=100.0, compute_pids_file=str(pids)),
             FakeCard(uuid=uuid_for(1), watts=300.0, pci="00000000:08:00.0", compute_pids=(1,),
                      compute_pids_file=str(pids), process_utilization_file=str(utilisation))]
    # The utilisation first: a read between the two writes must not find the pid without it (an equal split).
    inner = f'echo "$$:25,1:75" > {utilisation}; echo $$ > {pids}; sleep 1.5'
    # Two commands in the outer shell, so it forks the inner one rather than becoming it.
    attributes, stderr = _run(tmp_path, cards, ["sh", "-c", f"sh -c '{inner}'; true"])
    gpu0, gpu1 = attributes["energy.nvidia_gpu_0.joules"], attributes["energy.nvidia_gpu_1.joules"]
    assert gpu0 > 100 and gpu1 > 300  # 1.5 s at least
    charged = attributes["energy.attributed.gpu.joules"]
    # Before the grandchild lists itself (a period at most) the GPUs are idle, nobody's.
    assert 0.6 * (gpu0 + 0.25 * gpu1) <= charged <= gpu0 + 0.25 * gpu1 + 1e-6
    lines = _gpu_lines(stderr)
    assert "used by the command's processes alone" in lines["nvidia_gpu_0"][2], stderr
    assert "shared with other processes, as spans share a GPU" in lines["nvidia_gpu_1"][2], stderr


def test_under_the_dynamic_policy_a_commands_gpu_is_charged_its_energy_above_the_baseline(tmp_path):
    """The command alone on a 100 W GPU whose baseline is configured at 40 W: under dynamic it is charged the
    60 W above it, its share's GPU part and its summary line alike; the dynamic share counts it too."""
    pids = tmp_path / "pids"
    cards = [FakeCard(uuid=uuid_for(0), watts=100.0, compute_pids_file=str(pids))]
    attributes, stderr = _run(
        tmp_path, cards, ["sh", "-c", f"sh -c 'echo $$ > {pids}; sleep 1.2'; true"],
        OTEL_JOULES_ATTRIBUTION_POLICY="dynamic", OTEL_JOULES_STATIC_WATTS="nvidia_gpu_0=40",
    )
    gpu0 = attributes["energy.nvidia_gpu_0.joules"]
    charged = attributes["energy.attributed.gpu.joules"]
    assert attributes["energy.attribution"] == "cpu_time_share/dynamic"
    # Before the grandchild lists itself (a period at most) the GPU is idle, nobody's. (5% of slack above: each
    # period's static is 40 W x its seconds between snapshots, whose GPU reads are a counter update apart.)
    assert 0.6 * 0.6 * gpu0 <= charged <= 0.6 * gpu0 * 1.05
    assert attributes["energy.attributed.dynamic.joules"] >= charged - 1e-9
    charged_line = _gpu_lines(stderr)["nvidia_gpu_0"][0]
    assert charged_line.endswith(" J") and float(charged_line.split()[0]) == float(f"{charged:.4g}"), stderr
