"""A Redfish service whose readings change, at the HTTP level (sushy-tools' emulators serve only static files).

Run as a child: ``python -m tests.fakes.redfish_http`` with one JSON line on stdin, ``{"watts", "mode", "user",
"password"}`` (the password never on a command line); it binds 127.0.0.1 on a free port and prints ``ready PORT``.
It serves the service root, ``/Chassis``, ``/Chassis/Box`` and ``/Chassis/Box/EnvironmentMetrics`` with
``PowerWatts`` = ``watts`` and ``EnergyJoules`` growing at exactly ``watts`` since the server started. ``mode``:
``energy`` (that), ``garbage`` (EnvironmentMetrics' body is not JSON), ``slow`` (EnvironmentMetrics answers after
60 s: a BMC that times out), ``flaky`` (the first two EnvironmentMetrics requests answer, then it is garbage).
With ``user``, requests without its HTTP Basic credentials get 401. With ``watts_file``, a power that changes:
``PowerWatts`` is the number that file holds at each request (``watts`` while it holds none) and there is no
``EnergyJoules`` (the reader integrates the power, as with a BMC that has no energy counter).
"""

from __future__ import annotations

import base64
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

START_S = time.monotonic()
SPEC: dict = {}
COUNT = {"metrics": 0}
LOCK = threading.Lock()


def _document(path: str) -> dict | None:
    root = "/redfish/v1"
    if path == root:
        return {"@odata.id": root, "Chassis": {"@odata.id": f"{root}/Chassis"}}
    if path == f"{root}/Chassis":
        return {"Members": [{"@odata.id": f"{root}/Chassis/Box"}], "Members@odata.count": 1}
    if path == f"{root}/Chassis/Box":
        return {"Id": "Box", "EnvironmentMetrics": {"@odata.id": f"{root}/Chassis/Box/EnvironmentMetrics"}}
    if path == f"{root}/Chassis/Box/EnvironmentMetrics":
        watts = SPEC["watts"]
        if SPEC.get("watts_file"):
            try:
                with open(SPEC["watts_file"]) as f:
                    watts = float(f.read())
            except (OSError, ValueError):
                pass
            return {"PowerWatts": {"Reading": watts}}
        return {
            "PowerWatts": {"Reading": watts},
            "EnergyJoules": {"Reading": watts * (time.monotonic() - START_S)},
        }
    return None


class Handler(BaseHTTPRequestHandler):
    """GET only, JSON bodies."""

    def log_message(self, format, *args):  # type: ignore[no-untyped-def]
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        user = SPEC.get("user")
        if user is not None:
            expected = "Basic " + base64.b64encode(f"{user}:{SPEC['password']}".encode()).decode()
            if self.headers.get("Authorization") != expected:
                self.send_response(401)
                self.end_headers()
                return
        path = self.path.rstrip("/")
        document = _document(path)
        if document is None:
            self.send_response(404)
            self.end_headers()
            return
        body = json.dumps(document).encode()
        if path.endswith("EnvironmentMetrics"):
            with LOCK:
                COUNT["metrics"] += 1
                count = COUNT["metrics"]
            mode = SPEC.get("mode", "energy")
            if mode == "slow":
                time.sleep(60)
            elif mode == "garbage" or (mode == "flaky" and count > 2):
                body = b"<html>503 Service Unavailable</html>"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def main() -> None:
    """Serve until killed."""
    SPEC.update(json.loads(sys.stdin.readline()))
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(f"ready {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
