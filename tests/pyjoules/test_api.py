"""Every public name of pyJoules 0.5.1's modules exists under the ``otel_joules.pyjoules`` prefix.

The lists were read from pyJoules 0.5.1's modules (classes and functions defined or
imported there). Left out on purpose: ``energy_meter.TraceGenerator``, pyJoules'
internal recursive trace builder -- the cause of its RecursionError.
"""

from __future__ import annotations

import importlib
import inspect

import pytest

PYJOULES_0_5_1 = {
    "energy_meter": [
        "Device", "DeviceFactory", "Domain", "EnergyContext", "EnergyHandler", "EnergyMeter", "EnergyMeterNotStartedError",
        "EnergyMeterNotStoppedError", "EnergySample", "EnergyState", "EnergyTrace", "NoNextStateException", "PrintHandler",
        "PyJoulesException", "SampleNotFoundError", "StateIsNotFinalError", "measure_energy",
    ],
    "energy_trace": ["EnergySample", "EnergyTrace"],
    "device": ["Device", "DeviceFactory", "Domain", "NotConfiguredDeviceException"],
    "device.rapl_device": [
        "Device", "Domain", "NoSuchDeviceError", "NotConfiguredDeviceException", "RaplCoreDomain", "RaplDevice", "RaplDomain",
        "RaplDramDomain", "RaplPackageDomain", "RaplUncoreDomain",
    ],
    "device.nvidia_device": [
        "Device", "Domain", "GPUDoesNotSupportEnergyMonitoringError", "NoSuchDeviceError", "NvidiaGPUDevice", "NvidiaGPUDomain",
        "PyJoulesException",
    ],
    "device.device_factory": ["Device", "DeviceFactory", "Domain", "NoSuchDeviceError", "NvidiaGPUDevice", "RaplDevice"],
    "exception": ["NoSuchDeviceError", "NoSuchDomainError", "PyJoulesException"],
    "handler": ["EnergyHandler", "PrintHandler", "UnconsistantSamplesError"],
    "handler.csv_handler": ["CSVHandler", "EnergyHandler"],
    "handler.pandas_handler": [
        "EnergyHandler", "EnergySample", "EnergyTrace", "NoSampleProcessedError", "PandasHandler", "UnconsistantSamplesError",
        "trace_to_dataframe",
    ],
    "handler.mongo_handler": ["EnergyHandler", "EnergySample", "MongoHandler", "MongoInitError", "sample_to_dict", "trace_to_dict"],
    "handler.print_handler": ["EnergyHandler", "EnergyTrace", "PrintHandler"],
}


@pytest.mark.parametrize("module", sorted(PYJOULES_0_5_1))
def test_pyjoules_names_exist(module: str) -> None:
    ours = importlib.import_module(f"otel_joules.pyjoules.{module}")
    missing = [name for name in PYJOULES_0_5_1[module] if not hasattr(ours, name)]
    assert missing == []


def test_signatures_match_pyjoules() -> None:
    from otel_joules.pyjoules.energy_meter import EnergyContext, EnergyMeter, measure_energy
    from otel_joules.pyjoules.energy_trace import EnergySample
    from otel_joules.pyjoules.handler.csv_handler import CSVHandler
    from otel_joules.pyjoules.handler.mongo_handler import MongoHandler

    def names(obj: object) -> list[str]:
        return [p for p in inspect.signature(obj).parameters if p != "self"]  # type: ignore[arg-type]

    assert names(measure_energy) == ["func", "handler", "domains"]
    assert names(EnergyContext) == ["handler", "domains", "start_tag"]
    assert inspect.signature(EnergyContext).parameters["start_tag"].default == "start"
    assert names(EnergyMeter) == ["devices", "default_tag"]
    # pyJoules' four, then our flag with a default (a pyJoules caller's positional call is unchanged).
    assert names(EnergySample) == ["timestamp", "tag", "duration", "energy", "below_resolution"]
    assert inspect.signature(EnergySample).parameters["below_resolution"].default is False
    assert names(CSVHandler) == ["filename"]
    mongo = inspect.signature(MongoHandler).parameters
    assert list(mongo)[:5] == ["uri", "database_name", "collection_name", "connected_timeout", "trace_name_prefix"]
    assert mongo["connected_timeout"].default == 30000 and mongo["trace_name_prefix"].default == "trace_"
