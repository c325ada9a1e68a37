"""The estimator's CPU model is chosen from the machine: cpuinfo's CPU, DMI's or cpuinfo's hypervisor, the cloud.

Each machine is a cpuinfo and a DMI tree written in temp dirs as the kernel lays them out (tests/fakes/machine.py),
read through the procfs and sysfs roots the way the library reads the host's. The figures asserted are Cloud
Carbon Footprint's, from the shipped data file: a wrong row, a wrong architecture or a wrong choice of model
changes them.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import psutil
import pytest

from otel_joules import EnergyMeter
from otel_joules.config import Settings
from otel_joules.sensors import cpu_power, estimator
from otel_joules.sensors.cpu_power import Machine, architecture_of, detect_machine, power_model

from tests.fakes.machine import GUEST_FLAGS, write_cpuinfo, write_dmi


def _machine(tmp_path: Path, cpus: int, model_name: str | None, flags: str | None = None, cpu_part: str | None = None, **dmi: str) -> Machine:
    kwargs = {} if flags is None else {"flags": flags}
    write_cpuinfo(tmp_path / "proc", cpus, model_name, cpu_part=cpu_part, **kwargs)
    if dmi:
        write_dmi(tmp_path / "sys", **dmi)
    return detect_machine(str(tmp_path / "sys"), str(tmp_path / "proc"))


def test_the_data_file_holds_cloud_carbon_footprints_figures_and_names_its_source() -> None:
    rows = cpu_power.reference()
    # AwsFootprintEstimationConstants.ts: MIN/MAX_WATTS_BY_COMPUTE_PROCESSOR and the fleet average.
    assert (rows["cascade_lake"].min_watts, rows["cascade_lake"].max_watts) == (0.64, 3.97)
    assert (rows["amd_epyc_2nd_gen"].min_watts, rows["amd_epyc_2nd_gen"].max_watts) == (0.47, 1.69)
    assert (rows["aws"].min_watts, rows["aws"].max_watts) == (0.74, 3.5)
    assert all(0 < r.min_watts < r.max_watts for r in rows.values())
    with open(Path(cpu_power.__file__).parent / "data" / cpu_power.REFERENCE_FILE, encoding="utf-8") as f:
        text = f.read()
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert any("Apache License 2.0" in line for line in header) and any("cloud-carbon-footprint" in line for line in header)
    data = list(csv.DictReader(io.StringIO("".join(line + "\n" for line in text.splitlines() if not line.startswith("#")))))
    assert len(data) == len(rows)


def test_an_aws_instance_with_a_known_cpu_gets_its_architectures_figures_per_vcpu(tmp_path: Path) -> None:
    machine = _machine(tmp_path, 2, "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz", GUEST_FLAGS,
                       sys_vendor="Amazon EC2", product_name="m5.large", board_vendor="Amazon EC2")
    assert (machine.virtual, machine.provider) == (True, "aws")
    assert machine.evidence == "DMI sys_vendor 'Amazon EC2'"
    model = power_model(machine, 2, 85.0)
    assert model.source == "ccf:cascade_lake"
    assert (model.idle_watts_per_cpu, model.busy_watts_per_cpu) == (0.64, 3.97)
    # One of two vCPUs busy: 2 x 0.64 + 3.97 - 0.64 = 4.61 W, where 85 W / 2 charged 42.5 W for that vCPU alone.
    assert model.watts(2, 1.0) == pytest.approx(4.61)
    assert (model.low_factor, model.high_factor) == (cpu_power.HELD_OUT_LOW_RATIO, cpu_power.HELD_OUT_HIGH_RATIO)


def test_a_vm_that_hides_the_cpu_generation_gets_its_familys_mean_and_a_band_over_the_family(tmp_path: Path) -> None:
    # What a KVM guest here shows: "AMD EPYC", the hypervisor flag, no DMI.
    machine = _machine(tmp_path, 2, "AMD EPYC", GUEST_FLAGS)
    assert (machine.virtual, machine.provider, machine.evidence) == (True, None, "the hypervisor flag in cpuinfo")
    model = power_model(machine, 2, 85.0)
    assert model.source == "ccf:amd_epyc"
    epycs = [cpu_power.reference()[k] for k in ("amd_epyc_1st_gen", "amd_epyc_2nd_gen", "amd_epyc_3rd_gen")]
    assert model.idle_watts_per_cpu == pytest.approx(sum(r.min_watts for r in epycs) / 3)
    assert model.busy_watts_per_cpu == pytest.approx(sum(r.max_watts for r in epycs) / 3)
    # Every generation it may be lies inside the band, at idle and at full load.
    for row in epycs:
        assert model.idle_watts_per_cpu * model.low_factor <= row.min_watts <= model.idle_watts_per_cpu * model.high_factor
        assert model.busy_watts_per_cpu * model.low_factor <= row.max_watts <= model.busy_watts_per_cpu * model.high_factor
    assert model.low_factor < cpu_power.HELD_OUT_LOW_RATIO and model.high_factor > cpu_power.HELD_OUT_HIGH_RATIO


def test_a_cloud_named_by_dmi_with_an_unknown_cpu_gets_the_clouds_fleet_figures(tmp_path: Path) -> None:
    machine = _machine(tmp_path, 4, "Intel(R) Xeon(R) CPU @ 2.20GHz", GUEST_FLAGS,
                       sys_vendor="Google", product_name="Google Compute Engine")
    assert machine.provider == "gcp"
    model = power_model(machine, 4, 85.0)
    assert model.source == "ccf:gcp"
    assert (model.idle_watts_per_cpu, model.busy_watts_per_cpu) == (0.68, 4.11)


def test_bare_metal_with_a_known_cpu_keeps_a_tdp_model_at_its_architectures_idle_ratio(tmp_path: Path) -> None:
    machine = _machine(tmp_path, 40, "Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz", sys_vendor="Dell Inc.", product_name="PowerEdge R740")
    assert (machine.virtual, machine.provider) == (False, None)
    model = power_model(machine, 40, 150.0)
    assert model.source == "tdp:skylake"
    assert model.busy_watts_per_cpu == pytest.approx(150.0 / 40)
    assert model.idle_watts_per_cpu == pytest.approx(150.0 / 40 * 0.65 / 4.26)
    # The band also holds Cloud Carbon Footprint's per-thread Skylake figures.
    assert model.idle_watts_per_cpu * model.low_factor <= 0.65 <= model.idle_watts_per_cpu * model.high_factor
    assert "150 W TDP over 40 logical CPUs" in model.description


def test_nothing_readable_means_every_architecture_is_a_candidate(tmp_path: Path) -> None:
    machine = detect_machine(str(tmp_path / "no-sys"), str(tmp_path / "no-proc"))
    assert machine == Machine("", "", False, None, "no hypervisor found")
    model = power_model(machine, 8, 85.0)
    assert model.source == "ccf:any"
    rows = [r for r in cpu_power.reference().values() if r.kind == "architecture"]
    assert min(r.min_watts for r in rows) >= model.idle_watts_per_cpu * model.low_factor
    assert max(r.max_watts for r in rows) <= model.busy_watts_per_cpu * model.high_factor


def test_an_arm_neoverse_n1_is_read_from_its_part_number(tmp_path: Path) -> None:
    machine = _machine(tmp_path, 2, None, cpu_part="0xd0c", sys_vendor="Amazon EC2")
    assert power_model(machine, 2, 85.0).source == "ccf:aws_graviton2"


@pytest.mark.parametrize(
    ("name", "architecture"),
    [
        ("Intel(R) Xeon(R) Platinum 8175M CPU @ 2.50GHz", "skylake"),
        ("Intel(R) Xeon(R) Platinum 8275CL CPU @ 3.00GHz", "cascade_lake"),
        ("Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", None),  # Ice Lake: no reference figures
        ("Intel(R) Xeon(R) CPU E5-2686 v4 @ 2.30GHz", "broadwell"),
        ("Intel(R) Xeon(R) CPU E5-2676 v3 @ 2.40GHz", "haswell"),
        ("Intel(R) Xeon(R) CPU E5-2670 v2 @ 2.50GHz", "ivy_bridge"),
        ("Intel(R) Xeon(R) CPU E5-2670 0 @ 2.60GHz", "sandy_bridge"),
        ("Intel(R) Xeon(R) CPU E3-1230 v3 @ 3.30GHz", "haswell"),
        ("Intel(R) Xeon(R) E-2288G CPU @ 3.70GHz", "coffee_lake"),
        ("Intel(R) Core(TM) i7-8700 CPU @ 3.20GHz", "coffee_lake"),
        ("Intel(R) Core(TM) i7-1165G7 @ 2.80GHz", None),
        ("AMD EPYC 7571", "amd_epyc_1st_gen"),
        ("AMD EPYC 7R32", "amd_epyc_2nd_gen"),
        ("AMD EPYC 7R13 Processor", "amd_epyc_3rd_gen"),
        ("AMD EPYC 9R14", None),
        ("Intel Xeon Processor (Cascadelake)", "cascade_lake"),
        ("AMD EPYC-Rome Processor", "amd_epyc_2nd_gen"),
    ],
)
def test_architectures_from_model_names(name: str, architecture: str | None) -> None:
    assert architecture_of(name)[0] == architecture


def test_the_estimator_reads_the_machine_through_the_configured_roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Through the meter, as instrument() builds it: the CPU estimate's domain names its model and carries its band.
    write_cpuinfo(tmp_path / "proc", 2, "AMD EPYC 7R32", GUEST_FLAGS)
    write_dmi(tmp_path / "sys", sys_vendor="Amazon EC2", product_name="c5a.large")
    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: 2)
    meter = EnergyMeter(sysfs_root=str(tmp_path / "sys"), procfs_root=str(tmp_path / "proc"), gpus=[], sample=False)
    try:
        cpu = next(d for d in meter.domains if d.id == "cpu_estimate")
    finally:
        meter.close()
    assert cpu.estimate_source == "ccf:amd_epyc_2nd_gen"
    assert cpu.estimate_band == (cpu_power.HELD_OUT_LOW_RATIO, cpu_power.HELD_OUT_HIGH_RATIO)
    assert "0.47..1.69 W per vCPU" in cpu.covers and "DMI sys_vendor 'Amazon EC2'" in cpu.covers
    (tmp_path / "meminfo").write_text("MemTotal:        4194304 kB\n")
    found = estimator.discover(Settings(sysfs_root=str(tmp_path / "sys"), procfs_root=str(tmp_path / "proc")), meminfo_path=str(tmp_path / "meminfo"))
    assert [c.domain.estimate_source for c in found.channels][0] == "ccf:amd_epyc_2nd_gen"
