"""The platform's power from an IPMI BMC: DCMI Get Power Reading over IPMI 2.0 (RMCP+), through ``pyghmi``.

The request (DCMI 1.5, as ipmitool's ``dcmi power reading`` sends it): NetFn ``0x2C`` (group extension), command
``0x02``, data ``DC 01 00 00`` (the DCMI group id, mode 1 = system power statistics, no attributes, reserved).
The reply after the completion code: ``DC``, then little-endian u16 current, minimum, maximum and average watts,
u32 timestamp (s), u32 statistics period (ms), and a state byte whose bit 6 says the measurement is active.

DCMI gives power only, never energy: the channel integrates it (``energy.method = power_integration``).
``pyghmi`` is the ``bmc`` extra; the client session is made in the poller's thread and remade after a failure.
"""

from __future__ import annotations

import struct
from typing import Any, Sequence

from otel_joules.errors import import_extra
from otel_joules.sensors.bmc_reading import MAX_PLATFORM_WATTS, BmcError, BmcReading

#: DCMI's NetFn (group extension) and Get Power Reading's command number.
DCMI_NETFN = 0x2C
DCMI_GET_POWER_READING = 0x02
#: The DCMI group extension id, first byte of every DCMI request and reply.
DCMI_GROUP_ID = 0xDC
#: Mode 1: system power statistics.
DCMI_MODE_SYSTEM_POWER = 0x01
#: The request's data bytes.
GET_POWER_READING_REQUEST = (DCMI_GROUP_ID, DCMI_MODE_SYSTEM_POWER, 0x00, 0x00)
#: The reply's data (completion code excluded): group id, 4 x u16 watts, u32 timestamp, u32 period ms, state.
_REPLY = struct.Struct("<BHHHHIIB")
#: Bit 6 of the state byte: the power measurement is active.
_MEASUREMENT_ACTIVE = 0x40
#: IPMI's default port (RMCP).
IPMI_PORT = 623
#: Tries per poll: pyghmi waits ``timeout`` for a reply before it sends the request again, so a lost UDP datagram
#: costs a quarter of the poll's timeout, not all of it.
TRIES_PER_POLL = 4


def parse_power_reading(code: int, data: Sequence[int]) -> BmcReading:
    """A Get Power Reading reply (completion code and data) as a reading of the current watts; BmcError for anything else."""
    if code != 0:
        raise BmcError(f"DCMI Get Power Reading: completion code 0x{code:02x}")
    if len(data) < _REPLY.size:
        raise BmcError(f"DCMI Get Power Reading: {len(data)} bytes, not the {_REPLY.size} of a reading")
    group, current, _minimum, _maximum, _average, _timestamp, _period_ms, state = _REPLY.unpack(bytes(data[: _REPLY.size]))
    if group != DCMI_GROUP_ID:
        raise BmcError(f"DCMI Get Power Reading: the reply starts 0x{group:02x}, not DCMI's 0x{DCMI_GROUP_ID:02x}")
    if not state & _MEASUREMENT_ACTIVE:
        raise BmcError("DCMI Get Power Reading: the BMC says its power measurement is not active")
    if current > MAX_PLATFORM_WATTS:
        raise BmcError(f"DCMI Get Power Reading: {current} W, more than any platform draws")
    return BmcReading(float(current), None)


class IpmiReader:
    """Reads the platform's current power by DCMI Get Power Reading.

    Args:
        host: The BMC's address.
        port: Its RMCP+ port.
        username: The IPMI user.
        password: Its password.
        timeout_s: The poll's timeout: pyghmi waits a :data:`TRIES_PER_POLL`-th of it for each try's reply.
    """

    def __init__(self, host: str, port: int, username: str, password: str, timeout_s: float) -> None:
        self.host = host
        self.port = port
        self._username = username
        self._password = password
        self._timeout_s = timeout_s
        self._command: Any = None
        # Imported now, so a missing extra is said when the agent starts, not at its first poll.
        self._pyghmi_command = import_extra("pyghmi.ipmi.command", "reading power from an IPMI BMC", "bmc")
        self._pyghmi_errors = import_extra("pyghmi.exceptions", "reading power from an IPMI BMC", "bmc")

    def read(self) -> BmcReading:
        """One reading; a failed session is dropped and made again at the next poll."""
        try:
            if self._command is None:
                self._command = self._pyghmi_command.Command(
                    bmc=self.host, userid=self._username, password=self._password, port=self.port, keepalive=False
                )
            reply = self._command.raw_command(
                netfn=DCMI_NETFN, command=DCMI_GET_POWER_READING, data=GET_POWER_READING_REQUEST,
                timeout=self._timeout_s / TRIES_PER_POLL,
            )
        except self._pyghmi_errors.IpmiException as exc:
            self._command = None
            raise BmcError(f"IPMI {self.host}:{self.port}: {exc}") from None
        if not isinstance(reply, dict):
            raise BmcError(f"IPMI {self.host}:{self.port}: no reply")
        if reply.get("error"):
            self._command = None
            raise BmcError(f"IPMI {self.host}:{self.port}: {reply['error']}")
        return parse_power_reading(int(reply.get("code", 0)), list(reply.get("data", ())))

    def close(self) -> None:
        """Log out of the BMC (best effort)."""
        command, self._command = self._command, None
        if command is not None:
            try:
                command.ipmi_session.logout()
            except Exception:  # noqa: BLE001 - a BMC gone away cannot be logged out of
                pass
