"""An IPMI 2.0 BMC on loopback that answers DCMI Get Power Reading: pyghmi's own BMC server (``pyghmi.ipmi.bmc.Bmc``)
with the DCMI command added in its raw-request handler, as a vendor's BMC would answer it.

Run as a child: ``python -m tests.fakes.dcmi_bmc`` with one JSON line on stdin, ``{"port", "user", "password",
"watts", "mode"}`` (the password never on a command line); it prints ``ready`` once it listens. ``mode``:
``watts`` answers ``watts`` as the current reading; ``garbage`` answers a reply that is not DCMI's; ``silent``
never answers the DCMI command (a BMC that times out).

pyghmi's server speaks cipher suite 3 only (HMAC-SHA1, HMAC-SHA1-96, AES-128: it lists only suite 3 to Get Channel
Cipher Suites) but accepts any proposal in the RMCP+ Open Session Request and then answers with SHA-1 anyway, which
a client that proposed suite 17 (SHA-256: pyghmi's own client, ipmitool 1.8.19) cannot verify. Here it refuses
other algorithms with status 0x11 ("invalid authentication algorithm", IPMI 2.0 table 13-15), as a suite-3-only
BMC does; both clients then propose suite 3.
"""

from __future__ import annotations

import json
import struct
import sys
import time

from pyghmi.ipmi.bmc import Bmc
from pyghmi.ipmi.private import serversession

#: RMCP+ status: invalid authentication algorithm.
INVALID_AUTHENTICATION_ALGORITHM = 0x11
#: RAKP-HMAC-SHA1, suite 3's authentication algorithm.
RAKP_HMAC_SHA1 = 0x01


class Suite3ServerSession(serversession.ServerSession):
    """pyghmi's server session, refusing an Open Session Request for anything but suite 3's algorithms."""

    def create_open_session_response(self, request):  # type: ignore[no-untyped-def]
        # Request: tag, privilege, 2 reserved, console session id (4), then the authentication payload
        # (type, 2 reserved, length, algorithm at byte 12, 3 reserved).
        if len(request) >= 13 and request[12] & 0x3F != RAKP_HMAC_SHA1:
            return bytearray([request[0], INVALID_AUTHENTICATION_ALGORITHM, 0, 0]) + request[4:8]
        return super().create_open_session_response(request)


serversession.ServerSession = Suite3ServerSession  # the class pyghmi's IpmiServer makes each session of

DCMI_NETFN, GET_POWER_READING, DCMI_GROUP_ID = 0x2C, 0x02, 0xDC


class DcmiBmc(Bmc):
    """pyghmi's BMC with DCMI Get Power Reading."""

    def __init__(self, authdata: dict[str, str], port: int, watts: int, mode: str) -> None:
        super().__init__(authdata, port=port, address="127.0.0.1")
        self.watts = watts
        self.mode = mode

    def handle_raw_request(self, request, session):  # type: ignore[no-untyped-def]
        if request["netfn"] == DCMI_NETFN and request["command"] == GET_POWER_READING:
            if self.mode == "silent":
                return None
            if self.mode == "garbage":
                return session.send_ipmi_response(data=[0x42, 0x01, 0x02], code=0)
            w = self.watts
            # DC, current/min/max/avg watts, timestamp, statistics period (ms), state (bit 6: active).
            reply = struct.pack("<BHHHHIIB", DCMI_GROUP_ID, w, w, w, w, int(time.time()), 1000, 0x40)
            return session.send_ipmi_response(data=list(reply), code=0)
        return super().handle_raw_request(request, session)


def main() -> None:
    """Serve until killed."""
    spec = json.loads(sys.stdin.readline())
    bmc = DcmiBmc({spec["user"]: spec["password"]}, spec["port"], spec.get("watts", 0), spec.get("mode", "watts"))
    print("ready", flush=True)
    bmc.listen()


if __name__ == "__main__":
    main()
