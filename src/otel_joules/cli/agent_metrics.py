"""``otel-joules agent``'s metrics: with an agent, it is the one publisher of its host's devices.

Processes that read through the agent publish only their ``process.*`` share
(:attr:`~otel_joules.metrics.instruments.EnergyMetrics.publishes_host`); the agent publishes the
host's ``hw.*`` (and ``energy.components``, ``energy.nested``, ``energy.missing``) once, over OTLP,
configured by the standard ``OTEL_EXPORTER_OTLP_*``, ``OTEL_METRICS_EXPORTER``,
``OTEL_METRIC_EXPORT_INTERVAL`` and ``OTEL_RESOURCE_ATTRIBUTES`` variables, with ``host.name`` and
``host.id`` on its resource. So ``sum(rate(hw_host_energy_joules_total))`` per host is the host,
whatever the number of instrumented processes.

This lives in the CLI layer, not in :mod:`otel_joules.agent`: the agent package reads sensors and
serves them, and imports no OpenTelemetry SDK (nothing more than that runs in the process that
opens root-only counters); the CLI is the one layer that may import both it and
:mod:`otel_joules.metrics`. The counters are opened here as root, like the agent's own, before the
agent drops its privileges.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass
from typing import Sequence

from opentelemetry.sdk.resources import Resource

from otel_joules.config import Settings
from otel_joules.delivery.destinations import SIGNAL_METRICS
from otel_joules.delivery.reachability import sdk_metrics_gate
from otel_joules.delivery.setup import Telemetry, build_resource, telemetry_from_env
from otel_joules.meter.meter import EnergyMeter
from otel_joules.metrics.instruments import EnergyMetrics
from otel_joules.sensors import amdsmi, hwmon, nvml, overlap, rapl
from otel_joules.sensors.base import Channel
from otel_joules.semconv import HOST_ID, HOST_NAME

_log = logging.getLogger("otel_joules")

#: ``service.name`` of the agent's metrics unless ``OTEL_SERVICE_NAME`` or ``OTEL_RESOURCE_ATTRIBUTES`` names one.
AGENT_SERVICE_NAME = "otel-joules-agent"
#: Where systemd and D-Bus keep the host's stable id (``host.id``, as the conventions ask for non-cloud hosts).
MACHINE_ID_PATHS = ("/etc/machine-id", "/var/lib/dbus/machine-id")


@dataclass
class HostMetrics:
    """The agent's running publisher: its meter over the host's counters, the instruments, the providers."""

    meter: EnergyMeter
    metrics: EnergyMetrics
    telemetry: Telemetry

    def close(self) -> None:
        """Export the last values, then close the exporters and the counters; never raises."""
        try:
            self.metrics.freeze()
        except Exception as exc:  # noqa: BLE001 - stopping the agent must not fail on its metrics
            _log.debug("otel-joules agent: the last metric reading failed: %s", exc)
        self.telemetry.shutdown()
        self.meter.close()


def machine_id() -> str | None:
    """The host's machine id, or None where no file holds one."""
    for path in MACHINE_ID_PATHS:
        try:
            with open(path, encoding="ascii") as f:
                value = f.read().strip()
        except (OSError, UnicodeDecodeError):
            continue
        if value:
            return value
    return None


def host_resource() -> Resource:
    """The agent's resource: ``host.name`` and ``host.id`` (the machine id, else the host name), under what the
    environment says (``OTEL_RESOURCE_ATTRIBUTES`` wins), ``service.name`` defaulting to :data:`AGENT_SERVICE_NAME`."""
    name = socket.gethostname()
    detected = Resource({HOST_NAME: name, HOST_ID: machine_id() or name})
    return detected.merge(build_resource(default_service_name=AGENT_SERVICE_NAME))


def open_host_channels(settings: Settings, platform: Sequence[Channel] = ()) -> list[Channel]:
    """Every RAPL zone, hwmon sensor and GPU of the host, and the BMC's platform readings ``platform`` (opened by the
    caller from the BMC file: :func:`otel_joules.sensors.bmc.discover`; closed with the others by whoever closes
    these channels), opened now (as root, before the agent drops its privileges), each device once by the rules an
    instrumented process applies (:mod:`otel_joules.sensors.overlap`): a package both RAPL and hwmon read is
    RAPL's, and whole-platform readings are ranked and left out of the components' total
    (:func:`~otel_joules.sensors.overlap.settle_platforms`): the broadest is the host's (``hw.host.*``).
    """
    channels: list[Channel] = list(rapl.discover(settings).channels)
    if not channels:
        return channels
    kept, _ = overlap.count_once(channels, hwmon.discover(settings).channels)
    channels += kept
    channels += nvml.discover_within(settings, gpus=None, devices_by_pid=False).discovery.channels
    channels += amdsmi.discover_within(settings, gpus=None, devices_by_pid=False).discovery.channels
    channels += platform
    overlap.settle_platforms(channels)
    return channels


def start_host_metrics(settings: Settings, platform: Sequence[Channel] = ()) -> HostMetrics | None:
    """Start publishing the host's devices (with the BMC's platform readings ``platform``, which the caller opened and
    closes); None where metrics are off (``OTEL_METRICS_EXPORTER=none``) or no RAPL zone can be read (the agent
    then refuses to start and says why)."""
    telemetry = telemetry_from_env(resource=host_resource())
    if telemetry.meter_provider is None:
        _log.warning(
            "otel-joules agent: OTEL_METRICS_EXPORTER is none: the host's hw.* metrics are not published%s",
            "; the BMC's reading is still served to the agent's clients that ask for it" if platform else "",
        )
        telemetry.shutdown()
        return None
    try:
        channels = open_host_channels(settings, platform)
    except Exception:
        telemetry.shutdown()
        raise
    if not channels:
        telemetry.shutdown()
        return None
    meter = EnergyMeter(channels=channels, settings=settings)
    # While the collector does not answer, nothing is exported (one warning says so) and nothing is lost:
    # the counters are cumulative.
    metrics = EnergyMetrics(meter, telemetry.meter_provider, attribution=False, gate=sdk_metrics_gate())
    _log.warning(
        "otel-joules agent: publishing the host's hw.* metrics (%s) to %s",
        ", ".join(d.id for d in meter.domains),
        ", ".join(str(d) for d in telemetry.destinations_for(SIGNAL_METRICS)),
    )
    return HostMetrics(meter, metrics, telemetry)
