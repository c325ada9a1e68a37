"""A program instrumented through the front door (``otel_joules.instrument()``), run as an unprivileged uid.

    python span_child.py OUT --spans N --span-s S [--gap-s G] [--until PATH]

Writes one JSON line per span to OUT as it ends (name, duration, energy attributes) and flushes,
so a test can follow it live. With ``--until`` it runs spans until that file exists (at most
``--spans``). No logging is configured: what otel-joules says reaches stderr by itself or not at all.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

import otel_joules


class LineExporter(SpanExporter):
    def __init__(self, path: str) -> None:
        self._out = open(path, "a", buffering=1)

    def export(self, spans):  # type: ignore[no-untyped-def]
        for span in spans:
            attributes = dict(span.attributes or {})
            self._out.write(json.dumps({
                "name": span.name,
                "duration_s": (span.end_time - span.start_time) / 1e9,
                "joules": attributes.get("energy.joules"),
                "source": attributes.get("energy.source"),
                "estimated_s": attributes.get("energy.estimated_s"),
                "agent_domains": list(attributes.get("energy.agent.domains", ())),
                "domains": sorted(k for k in attributes if k.endswith(".joules") and k.count(".") == 2),
                "domain_joules": {k: v for k, v in attributes.items() if k.endswith(".joules") and k.count(".") == 2},
            }) + "\n")
        return SpanExportResult.SUCCESS


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--spans", type=int, default=3)
    parser.add_argument("--span-s", type=float, default=1.0)
    parser.add_argument("--gap-s", type=float, default=0.0)
    parser.add_argument("--until")
    args = parser.parse_args()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(LineExporter(args.out)))
    otel_joules.instrument(tracer_provider=provider, metrics_enabled=False)
    tracer = provider.get_tracer("agent-test")
    for i in range(args.spans):
        if args.until and os.path.exists(args.until):
            break
        with tracer.start_as_current_span(f"span_{i}"):
            time.sleep(args.span_s)
        time.sleep(args.gap_s)
    provider.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
