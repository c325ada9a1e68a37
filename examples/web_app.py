"""A small web app whose requests are traced, each span carrying the energy it cost.

Standard library only (``http.server``) plus OpenTelemetry and otel-joules. Each request
is handled inside ``tracer.start_as_current_span(...)``; ``otel_joules.instrument()``
puts ``energy.joules`` (and per-domain joules, watts, source) on every span.

Run it:

``python examples/web_app.py --demo``
    serve on a free loopback port, send two requests to itself, print what each span
    measured, and exit.
``python examples/web_app.py --port 8000``
    serve until Ctrl-C; try ``curl 'http://127.0.0.1:8000/primes?limit=2000000'``.

Spans are printed one line each. To send them to a Collector instead, run the app
without code changes under ``opentelemetry-instrument`` (the otel-joules instrumentor
then adds the energy), or wrap it: ``otel-joules run -- python examples/web_app.py --demo``.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

import otel_joules

tracer = trace.get_tracer("examples.web_app")


def count_primes(limit: int) -> int:
    """How many primes are below ``limit`` (a sieve: a little CPU work per request)."""
    sieve = bytearray([1]) * max(limit, 2)
    sieve[0:2] = b"\x00\x00"
    for i in range(2, int(limit**0.5) + 1):
        if sieve[i]:
            sieve[i * i :: i] = bytearray(len(range(i * i, limit, i)))
    return sum(sieve)


class Handler(BaseHTTPRequestHandler):
    """``GET /primes?limit=N``: JSON with the number of primes below N."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        url = urlsplit(self.path)
        with tracer.start_as_current_span(f"GET {url.path}", kind=trace.SpanKind.SERVER) as span:
            span.set_attribute("http.request.method", "GET")
            span.set_attribute("url.path", url.path)
            if url.path != "/primes":
                self._reply(404, {"error": "try /primes?limit=100000"})
                span.set_attribute("http.response.status_code", 404)
                return
            try:
                limit = int(parse_qs(url.query).get("limit", ["100000"])[0])
            except ValueError:
                self._reply(400, {"error": "limit must be a whole number"})
                span.set_attribute("http.response.status_code", 400)
                return
            with tracer.start_as_current_span("count_primes"):
                primes = count_primes(min(max(limit, 2), 50_000_000))
            self._reply(200, {"limit": limit, "primes": primes})
            span.set_attribute("http.response.status_code", 200)

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
        pass  # the span lines say enough


def span_line(span: ReadableSpan) -> str:
    """One line per span: name, duration and the energy attributes."""
    attributes = span.attributes or {}
    duration_s = ((span.end_time or 0) - (span.start_time or 0)) / 1e9
    joules = attributes.get("energy.joules")
    energy = "no energy measured" if joules is None else f"energy.joules={joules!r} energy.source={attributes.get('energy.source')}"
    return f"span {span.name!r}: {duration_s:.4f} s, {energy}\n"


def setup_tracing() -> TracerProvider:
    """A tracer provider printing one line per span, with energy on every span."""
    provider = TracerProvider(resource=Resource.create({"service.name": "web-app-example"}))
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stdout, formatter=span_line)))
    trace.set_tracer_provider(provider)
    otel_joules.instrument()
    return provider


def demo(requests: list[str]) -> int:
    """Serve on a free loopback port, request each path, print the answers; 0 when all succeed."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    failures = 0
    try:
        for path in requests:
            url = f"http://127.0.0.1:{server.server_address[1]}{path}"
            with urllib.request.urlopen(url, timeout=30) as response:
                # One write per line: the server thread prints span lines at the same time.
                sys.stdout.write(f"GET {path} -> {response.status} {response.read().decode()}\n")
                sys.stdout.flush()
                failures += response.status != 200
    finally:
        server.shutdown()
        server.server_close()
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    """Parse the options and serve (or run the demo)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demo", action="store_true", help="serve two requests to itself, print their energy, exit")
    parser.add_argument("--port", type=int, default=8000, help="port to serve on (not with --demo)")
    args = parser.parse_args(argv)
    provider = setup_tracing()
    try:
        if args.demo:
            return demo(["/primes?limit=200000", "/primes?limit=400000"])
        server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
        print(f"serving on http://127.0.0.1:{args.port}/primes?limit=100000 (Ctrl-C stops)", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
        return 0
    finally:
        provider.shutdown()


if __name__ == "__main__":
    sys.exit(main())
