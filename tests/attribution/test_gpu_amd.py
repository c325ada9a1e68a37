"""AMD GPU shares through the real ``amdsmi`` package and the stand-in ``libamd_smi.so``: amdsmi's process list and
each process's graphics-engine time reach the attribution of spans."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.attribution.test_gpu import CHILD
from tests.fakes.amdsmi import FakeAmdGpu, FakeAmdSmi, run_python, uuid_for

# The NVIDIA child, with the AMD GPUs the meter finds by itself (an explicit gpus= names NVIDIA GPUs).
AMD_CHILD = CHILD.replace("gpus=[0], ", "")


@pytest.mark.parametrize(
    ("kwargs", "fraction"),
    [
        ({"pids": ("self",)}, 1.0),  # used only by this process: all of it
        ({"pids": ("self", "999999"), "gfx_percent": ("self:75", "999999:25")}, 0.75),  # by graphics-engine time
        ({"pids": ("self", "999999")}, 0.5),  # no engine time moved: equal split
        ({"pids": ("999999",)}, 0.0),  # another process's GPU
        ({}, 0.0),  # nobody runs on it: idle, nobody's
    ],
)
def test_a_processs_share_of_an_amd_gpu(tmp_path: Path, kwargs: dict, fraction: float) -> None:
    assert AMD_CHILD != CHILD
    fake = FakeAmdSmi(gpus=[FakeAmdGpu(uuid=uuid_for(0), watts=100.0, **kwargs)], epoch_monotonic_s=time.monotonic())
    out = run_python(AMD_CHILD, fake, tmp_path).data
    assert out["fractions"] == [pytest.approx(fraction, abs=0.02)]
    # The process's GPU energy is its fraction of the GPU's (within the sampler's timing).
    assert out["process_gpu"] == pytest.approx(fraction * out["gpu_joules"], rel=0.1, abs=0.5)
