"""The platform's power from a BMC (Redfish, IPMI DCMI), against servers no one here wrote, on 127.0.0.1.

Redfish: sushy-tools' static emulator serving our mockups (tests/fakes/redfish_mockups), and an HTTP-level fake
for a counter that moves (tests/fakes/redfish_http.py). IPMI: pyghmi's BMC server answering DCMI Get Power
Reading (tests/fakes/dcmi_bmc.py), checked against Debian's ipmitool where it is installed.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import statistics
import subprocess
import time
from pathlib import Path

import pytest

from otel_joules import EnergyMeter
from otel_joules.config import Settings
from otel_joules.errors import ConfigurationError
from otel_joules.sensors import bmc
from otel_joules.sensors.base import Method
from otel_joules.sensors.bmc_reading import BmcError
from otel_joules.sensors.redfish import RedfishReader
from tests.fakes.bmc_servers import bmc_file, dcmi_bmc, redfish_fake, sushy_static
from tests.fakes.powercap import make_powercap
from tests.helpers.processes import closed_port

pytest.importorskip("pyghmi")

IPMI_USER, IPMI_PASSWORD = "admin", "ipmi-Secret-7731"
REDFISH_USER, REDFISH_PASSWORD = "monitor", "redfish-Secret-9412"
#: sushy-static's mockups: the Power resource's PowerConsumedWatts, EnvironmentMetrics' PowerWatts.
POWER_CONTROL_WATTS, ENVIRONMENT_WATTS = 344.0, 374.0
POLL_S = 0.1
WINDOW_S = 10.0


def _watts(meter: EnergyMeter, window_s: float) -> dict[str, float]:
    """Each domain's mean power over ``window_s`` of the meter's own snapshots."""
    first = meter.snapshot()
    time.sleep(window_s)
    last = meter.snapshot()
    measured = meter.measure(first, last)
    return {domain: joules / measured.duration_s for domain, joules in measured.joules_by_domain.items()}


def test_redfish_and_ipmi_power_are_within_1_percent_of_truth_over_10_s(tmp_path) -> None:
    with sushy_static("power-control") as url, dcmi_bmc(250, IPMI_USER, IPMI_PASSWORD) as port:
        path = bmc_file(
            tmp_path / "bmc.toml",
            f'poll_interval_s = {POLL_S}\n[redfish]\nurl = "{url}"\n'
            f'[ipmi]\nhost = "127.0.0.1"\nport = {port}\nusername = "{IPMI_USER}"\npassword = "{IPMI_PASSWORD}"\n',
        )
        channels = bmc.discover(path).channels
        assert [c.domain.id for c in channels] == ["bmc_redfish", "bmc_ipmi"]
        assert all(c.domain.method is Method.POWER_INTEGRATION and c.domain.kind == "platform" for c in channels)
        assert channels[0].domain.source == "BMC (Redfish, /redfish/v1/Chassis/1U/Power)"  # past a chassis without readings
        meter = EnergyMeter(channels=channels, settings=Settings(), sample=True)
        try:
            watts = _watts(meter, WINDOW_S)
        finally:
            meter.close()
    assert watts["bmc_redfish"] == pytest.approx(POWER_CONTROL_WATTS, rel=0.01)
    assert watts["bmc_ipmi"] == pytest.approx(250.0, rel=0.01)


def test_a_redfish_energy_counter_is_counted_and_within_1_percent_over_10_s(tmp_path) -> None:
    with redfish_fake(420.0, user=REDFISH_USER, password=REDFISH_PASSWORD) as url:
        path = bmc_file(
            tmp_path / "bmc.toml",
            f'poll_interval_s = 0.5\n[redfish]\nurl = "{url}"\nusername = "{REDFISH_USER}"\npassword = "{REDFISH_PASSWORD}"\n',
        )
        (channel,) = bmc.discover(path).channels
        assert channel.domain.method is Method.COUNTER
        assert channel.domain.source.endswith("/redfish/v1/Chassis/Box/EnvironmentMetrics)")
        meter = EnergyMeter(channels=[channel], settings=Settings(), sample=True)
        try:
            # Half-second polls: carried forward from the latest poll, the counter is not a poll behind at either end.
            watts = _watts(meter, WINDOW_S)
        finally:
            meter.close()
    assert watts["bmc_redfish"] == pytest.approx(420.0, rel=0.01)


def test_environment_metrics_is_read_before_the_deprecated_power_resource() -> None:
    with sushy_static("environment-metrics") as url:
        reader = RedfishReader(url, None, None, None, 2.0)
        reading = reader.read()
    assert reading.power_watts == ENVIRONMENT_WATTS and reading.energy_joules is None
    assert reader.resource == "/redfish/v1/Chassis/Blade/EnvironmentMetrics"


def test_a_named_chassis_is_the_one_read_and_one_without_readings_says_so() -> None:
    with sushy_static("power-control") as url:
        assert RedfishReader(url, None, None, "1U", 2.0).read().power_watts == POWER_CONTROL_WATTS
        with pytest.raises(BmcError, match="no chassis power reading found .*EnvironmentMetrics or Power"):
            RedfishReader(url, None, None, "Enclosure", 2.0).read()
        with pytest.raises(BmcError, match="no chassis 'Rack' in /redfish/v1/Chassis"):
            RedfishReader(url, None, None, "Rack", 2.0).read()


def test_wrong_redfish_credentials_are_an_error_that_never_names_them() -> None:
    with redfish_fake(100.0, user=REDFISH_USER, password=REDFISH_PASSWORD) as url:
        with pytest.raises(BmcError) as caught:
            RedfishReader(url, REDFISH_USER, "not-the-password", None, 2.0).read()
    assert "HTTP 401" in str(caught.value)
    assert "not-the-password" not in str(caught.value) and REDFISH_USER not in str(caught.value)


@pytest.mark.skipif(shutil.which("ipmitool") is None, reason="ipmitool is not installed (Debian: apt-get install ipmitool)")
def test_ipmitool_reads_the_same_power_from_the_dcmi_bmc() -> None:
    with dcmi_bmc(287, IPMI_USER, IPMI_PASSWORD) as port:
        # -E: the password from IPMI_PASSWORD, not from the command line.
        result = subprocess.run(
            ["ipmitool", "-I", "lanplus", "-H", "127.0.0.1", "-p", str(port), "-U", IPMI_USER, "-E", "dcmi", "power", "reading"],
            env={**os.environ, "IPMI_PASSWORD": IPMI_PASSWORD},
            capture_output=True,
            text=True,
            timeout=60,
        )
        from otel_joules.sensors.ipmi import IpmiReader

        reader = IpmiReader("127.0.0.1", port, IPMI_USER, IPMI_PASSWORD, 2.0)
        ours = reader.read()
        reader.close()
    assert result.returncode == 0, result.stderr
    theirs = re.search(r"Instantaneous power reading:\s+(\d+) Watts", result.stdout)
    assert theirs is not None, result.stdout
    assert float(theirs.group(1)) == ours.power_watts == 287.0
    assert "activated" in result.stdout


# -- a BMC that is slow, dead or talks garbage --------------------------------------------------------------


def _said(caplog: pytest.LogCaptureFixture, domain_id: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if "gave no reading" in r.getMessage() and domain_id in r.getMessage()]


@pytest.mark.parametrize("kind", ["redfish-slow", "redfish-garbage", "redfish-refused", "ipmi-silent", "ipmi-garbage"])
def test_a_slow_dead_or_garbled_bmc_is_said_once_and_never_waited_for(tmp_path, caplog, kind) -> None:
    caplog.set_level(logging.INFO, logger="otel_joules")
    protocol, mode = kind.split("-")
    if protocol == "redfish":
        server = redfish_fake(300.0, mode=mode) if mode != "refused" else None
        url = f"http://127.0.0.1:{closed_port()}" if server is None else None
    else:
        server = dcmi_bmc(300, IPMI_USER, IPMI_PASSWORD, mode=mode)
    with server if server is not None else _nothing(url) as address:
        if protocol == "redfish":
            text = f'poll_interval_s = 0.1\ntimeout_s = 0.3\n[redfish]\nurl = "{address}"\n'
        else:
            text = (f'poll_interval_s = 0.1\ntimeout_s = 0.3\n[ipmi]\nhost = "127.0.0.1"\nport = {address}\n'
                    f'username = "{IPMI_USER}"\npassword = "{IPMI_PASSWORD}"\n')
        (channel,) = bmc.discover(bmc_file(tmp_path / "bmc.toml", text)).channels
        assert channel.read_uj() == 0  # the integral's origin
        reads_s = []
        deadline = time.monotonic() + 2.5  # many polls, each failing
        while time.monotonic() < deadline:
            start = time.perf_counter()
            value = channel.read_uj()
            reads_s.append(time.perf_counter() - start)
            assert value is None  # away: left out, never read as zero
            time.sleep(0.01)
        channel.close()
    assert max(reads_s) < 0.005, max(reads_s)  # never waits for the BMC
    said = _said(caplog, channel.domain.id)
    assert len(said) == 1, said
    assert IPMI_PASSWORD not in caplog.text


class _nothing:
    """A context giving ``value``: an address where nothing listens."""

    def __init__(self, value: str | None) -> None:
        self.value = value

    def __enter__(self) -> str | None:
        return self.value

    def __exit__(self, *exc: object) -> None:
        return None


def test_a_dead_bmc_does_not_slow_the_meters_snapshots(tmp_path) -> None:
    tree = make_powercap(tmp_path / "sys")
    settings = Settings(sysfs_root=tree.sysfs_root)

    def snapshot_s(meter: EnergyMeter) -> float:
        samples = []
        for _ in range(300):
            start = time.perf_counter()
            meter.snapshot()
            samples.append(time.perf_counter() - start)
        return statistics.median(samples)

    from otel_joules.sensors import rapl

    plain = EnergyMeter(channels=rapl.discover(settings).channels, settings=settings, sample=False)
    without_s = snapshot_s(plain)
    plain.close()
    with redfish_fake(300.0, mode="slow") as url:
        path = bmc_file(tmp_path / "bmc.toml", f'poll_interval_s = 0.1\ntimeout_s = 1.0\n[redfish]\nurl = "{url}"\n')
        channels = rapl.discover(settings).channels + bmc.discover(path).channels
        meter = EnergyMeter(channels=channels, settings=settings, sample=False)
        with_s = snapshot_s(meter)
        meter.close()
    # Loosely: the BMC's request hangs for a second at a time, a snapshot takes microseconds either way.
    assert with_s < without_s * 3 + 0.0005, (with_s, without_s)


def test_a_bmc_that_stops_answering_is_left_out_and_not_integrated_over_the_gap(tmp_path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="otel_joules")
    with redfish_fake(200.0, mode="flaky") as url:
        # flaky: two good EnvironmentMetrics replies (the first is discovery's), then garbage.
        path = bmc_file(tmp_path / "bmc.toml", f'poll_interval_s = 0.2\ntimeout_s = 0.2\n[redfish]\nurl = "{url}"\n')
        (channel,) = bmc.discover(path).channels
        assert channel.domain.method is Method.COUNTER
        first = channel.read_uj()
        assert first is not None
        time.sleep(1.5)  # past the readings' age limit (two polls and a timeout)
        assert channel.read_uj() is None
        channel.close()
    assert len(_said(caplog, "bmc_redfish")) == 1
    assert "not JSON" in _said(caplog, "bmc_redfish")[0]


# -- the configuration file -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620])
def test_a_bmc_file_others_may_read_or_change_is_refused(tmp_path, mode) -> None:
    path = bmc_file(tmp_path / "bmc.toml", f'[ipmi]\nhost = "h"\nusername = "u"\npassword = "{IPMI_PASSWORD}"\n', mode)
    with pytest.raises(ConfigurationError, match=r"group or others may read or change it \(mode 0\d+\): `chmod 600 ") as caught:
        bmc.load_config(path)
    assert IPMI_PASSWORD not in str(caught.value)


def test_a_symlinked_bmc_file_is_refused(tmp_path) -> None:
    real = bmc_file(tmp_path / "real.toml", '[ipmi]\nhost = "h"\nusername = "u"\npassword = "p"\n')
    link = tmp_path / "link.toml"
    link.symlink_to(real)
    with pytest.raises(ConfigurationError, match="cannot be opened"):
        bmc.load_config(str(link))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("poll_interval_s = 1\n", r"no \[redfish\] or \[ipmi\] table"),
        (f'[redfish]\nurl = "https://root:{REDFISH_PASSWORD}@bmc"\n', "url holds a user or password"),
        ('[redfish]\nurl = "ftp://bmc"\n', r"url must be http\(s\)://HOST"),
        (f'[redfish]\nurl = "https://bmc"\nusername = "u"\npasword = "{REDFISH_PASSWORD}"\n', r"unknown key\(s\) pasword"),
        ('[redfish]\nurl = "https://bmc"\nusername = "u"\n', r"\[redfish\] password must be a non-empty string"),
        (f'poll_interval_s = 0\n[ipmi]\nhost = "h"\nusername = "u"\npassword = "{IPMI_PASSWORD}"\n', "poll_interval_s = 0 is not"),
        (f'[ipmi]\nhost = "h"\nport = 70000\nusername = "u"\npassword = "{IPMI_PASSWORD}"\n', "port must be a port number"),
        (f'[ipmi\npassword = "{IPMI_PASSWORD}"\n', "is not TOML"),
    ],
)
def test_a_bad_bmc_file_says_what_is_wrong_and_never_a_password(tmp_path, text, message) -> None:
    with pytest.raises(ConfigurationError, match=message) as caught:
        bmc.load_config(bmc_file(tmp_path / "bmc.toml", text))
    assert IPMI_PASSWORD not in str(caught.value) and REDFISH_PASSWORD not in str(caught.value)
