"""Benchmarks of otel-joules, run from the repository root as modules (``python -m benchmarks.span_overhead``).

A package so that a benchmark can borrow the test suite's fakes (``tests.fakes``) and the
tests can import a benchmark's generators (``benchmarks.report_large_file``) by their
names, without editing ``sys.path``.
"""
