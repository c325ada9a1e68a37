"""The ``otel-joules`` command line (see :mod:`otel_joules.cli.main`)."""
