"""The base package never imports a training framework: importing otel_joules and instrument() leave them unloaded."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

FRAMEWORKS = ("torch", "transformers", "lightning", "pytorch_lightning", "jax", "cupy")

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import otel_joules
    from opentelemetry.sdk.trace import TracerProvider
    provider = TracerProvider()
    handle = otel_joules.instrument(provider, metrics_enabled=False)
    with provider.get_tracer("t").start_as_current_span("s"):
        pass
    import otel_joules.integrations, otel_joules.integrations.session, otel_joules.meter.sync
    from otel_joules.carbontracker.tracker import CarbonTracker
    handle.uninstrument()
    print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {frameworks!r})))
    """
)


def test_importing_and_instrumenting_loads_no_framework(tmp_path) -> None:
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(frameworks=set(FRAMEWORKS))],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.splitlines()[-1]) == []
