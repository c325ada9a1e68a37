"""Every test here runs on the compiled span path and on its pure-Python reference (tests.helpers.span_path)."""

from tests.helpers.span_path import span_path  # noqa: F401 - the autouse fixture, by import
