"""The span path's two implementations, for the test folders that run every test on both."""

from __future__ import annotations

import pytest

from otel_joules.config import OTEL_JOULES_FAST_PATH
from otel_joules.meter.fastpath import COMPILED

#: ``compiled``: otel_joules.meter._fastsnap; ``python``: the pure-Python reference.
SPAN_PATHS = ("compiled", "python")


@pytest.fixture(autouse=True, params=SPAN_PATHS)
def span_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test with ``OTEL_JOULES_FAST_PATH`` on and off (every meter built from the environment follows it,
    child processes too); the compiled run is skipped where the extension is not built."""
    if request.param == "compiled" and COMPILED is None:
        pytest.skip("otel_joules.meter._fastsnap is not built here: the pure-Python run covers this test")
    monkeypatch.setenv(OTEL_JOULES_FAST_PATH, "1" if request.param == "compiled" else "0")
    return request.param  # type: ignore[no-any-return]
