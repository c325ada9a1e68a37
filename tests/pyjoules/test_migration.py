"""Migration: pyJoules README examples run with only the import prefix changed.

Each snippet is the README's, with ``pyJoules.`` replaced by ``otel_joules.pyjoules.``
and nothing else; it runs in a child process on a two-socket fake powercap tree
(``OTEL_JOULES_SYSFS_ROOT``) with one stand-in GPU at 100 W. The counters of the fake
tree do not move, so RAPL domains read exactly 0.0; the GPU reads its power x time.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.fakes.nvml import FakeCard, FakeNvml, build_library, subprocess_env, uuid_for
from tests.fakes.powercap import make_powercap

README_DECORATOR = """
import time
from pyJoules.energy_meter import measure_energy

@measure_energy
def foo():
    time.sleep(0.05)

foo()
"""

README_DOMAINS = """
import time
from pyJoules.energy_meter import measure_energy
from pyJoules.device.rapl_device import RaplPackageDomain
from pyJoules.device.nvidia_device import NvidiaGPUDomain

@measure_energy(domains=[RaplPackageDomain(1), NvidiaGPUDomain(0)])
def foo():
    time.sleep(0.05)

foo()
"""

README_CSV = """
import time
from pyJoules.energy_meter import measure_energy
from pyJoules.handler.csv_handler import CSVHandler

csv_handler = CSVHandler('result.csv')

@measure_energy(handler=csv_handler)
def foo():
    time.sleep(0.001)

for _ in range(100):
    foo()

csv_handler.save_data()
"""

README_CONTEXT = """
import time
from pyJoules.energy_meter import EnergyContext
from pyJoules.device.rapl_device import RaplPackageDomain
from pyJoules.device.nvidia_device import NvidiaGPUDomain
from pyJoules.handler.csv_handler import CSVHandler

def foo():
    time.sleep(0.05)

def bar():
    time.sleep(0.05)

csv_handler = CSVHandler('result.csv')

with EnergyContext(handler=csv_handler, domains=[RaplPackageDomain(1), NvidiaGPUDomain(0)], start_tag='foo') as ctx:
    foo()
    ctx.record(tag='bar')
    bar()

csv_handler.save_data()
"""

NUMBER = r"([0-9.e+-]+)"


def migrated(snippet: str) -> str:
    script = textwrap.dedent(snippet)
    assert "from pyJoules." in script
    return script.replace("from pyJoules.", "from otel_joules.pyjoules.")


def run_snippet(tmp_path: Path, snippet: str) -> tuple[str, Path]:
    pc = make_powercap(tmp_path / "sys", "two_sockets")
    work = tmp_path / "work"
    work.mkdir()
    fake = FakeNvml(cards=[FakeCard(uuid=uuid_for(0), watts=100)], update_ms=1, epoch_monotonic_s=time.monotonic())
    env = subprocess_env(fake.write(tmp_path / "fake_nvml.conf"), build_library(), {"OTEL_JOULES_SYSFS_ROOT": pc.sysfs_root})
    proc = subprocess.run([sys.executable, "-c", migrated(snippet)], env=env, cwd=work, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "Warning" not in proc.stderr, proc.stderr
    return proc.stdout, work


def assert_gpu_microjoules(duration: str, value: str) -> None:
    # 100 W in microjoules; NVML's millijoules would be 1000 times less.
    assert float(value) == pytest.approx(100 * float(duration) * 1e6, rel=0.1)


def test_readme_decorator(tmp_path: Path) -> None:
    stdout, _ = run_snippet(tmp_path, README_DECORATOR)
    match = re.fullmatch(
        rf"begin timestamp : {NUMBER}; tag : foo; duration : {NUMBER}; package_0 : 0.0; package_1 : 0.0; dram_0 : 0.0; "
        rf"dram_1 : 0.0; core_0 : 0.0; core_1 : 0.0; nvidia_gpu_0 : {NUMBER}; psys : 0.0\n",
        stdout,
    )
    assert match, stdout
    timestamp, duration, gpu = match.groups()
    assert abs(float(timestamp) - time.time()) < 60
    assert float(duration) >= 0.05
    assert_gpu_microjoules(duration, gpu)


def test_readme_domains(tmp_path: Path) -> None:
    stdout, _ = run_snippet(tmp_path, README_DOMAINS)
    match = re.fullmatch(
        rf"begin timestamp : {NUMBER}; tag : foo; duration : {NUMBER}; package_1 : 0.0; nvidia_gpu_0 : {NUMBER}\n", stdout
    )
    assert match, stdout
    assert_gpu_microjoules(match.group(2), match.group(3))


def test_readme_csv(tmp_path: Path) -> None:
    stdout, work = run_snippet(tmp_path, README_CSV)
    assert stdout == ""
    lines = (work / "result.csv").read_text().splitlines()
    assert lines[0] == "timestamp;tag;duration;package_0;package_1;dram_0;dram_1;core_0;core_1;nvidia_gpu_0;psys;energy.below_resolution"
    assert len(lines) == 101
    for line in lines[1:]:
        timestamp, tag, duration, *energy = line.split(";")
        assert tag == "foo" and float(duration) >= 0.001
        assert energy[:6] == ["0.0"] * 6 and energy[7] == "0.0"
        assert float(energy[6]) % 1000 == 0  # whole NVML millijoules, as microjoules


def test_readme_context(tmp_path: Path) -> None:
    _, work = run_snippet(tmp_path, README_CONTEXT)
    header, *rows = (work / "result.csv").read_text().splitlines()
    assert header == "timestamp;tag;duration;package_1;nvidia_gpu_0;energy.below_resolution"
    assert [row.split(";")[1] for row in rows] == ["foo", "bar"]
    for row in rows:
        _, _, duration, package_1, gpu, _below_resolution = row.split(";")
        assert package_1 == "0.0"
        assert_gpu_microjoules(duration, gpu)
