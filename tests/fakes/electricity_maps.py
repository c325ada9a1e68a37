"""A local Electricity Maps service on 127.0.0.1, for tests of the live carbon-intensity path."""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
from typing import Iterator


@contextlib.contextmanager
def electricity_maps_server(gco2eq_per_kwh: float = 321) -> Iterator[tuple[str, list[str]]]:
    """Serve ``/v3/carbon-intensity/latest`` answering ``gco2eq_per_kwh`` for zone DE.

    Yields the service root URL and the list of ``auth-token`` headers received.
    """
    tokens: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            tokens.append(self.headers.get("auth-token", ""))
            body = json.dumps({"zone": "DE", "carbonIntensity": gco2eq_per_kwh, "datetime": "2024-05-01T10:00:00Z"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", tokens
    finally:
        server.shutdown()
        server.server_close()
