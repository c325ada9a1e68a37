"""Exceptions raised by otel-joules.

Every error the library raises on purpose derives from :class:`OtelJoulesError`, so
callers can catch one type. Errors that happen while a span is being measured are
never raised into the user's code: the affected domain is left out and retried, and
the fault is reported once as a warning (see :mod:`otel_joules.meter`).
"""

from __future__ import annotations

import importlib
from typing import Any


class OtelJoulesError(Exception):
    """Base class of every exception otel-joules raises."""


class ConfigurationError(OtelJoulesError, ValueError):
    """An option or environment variable has a value that cannot be used.

    Raised at configuration time (constructing a meter, calling ``instrument``),
    never from inside a span.
    """


class SensorUnavailableError(OtelJoulesError):
    """A sensor (RAPL zone, GPU) exists but cannot be used; the message says why and what to do."""


class SensorReadError(OtelJoulesError):
    """Reading a counter failed (the zone vanished, the GPU was lost, the value was garbage)."""


class DeviceLostError(SensorReadError):
    """A device stopped answering for good (e.g. NVML's GPU_IS_LOST)."""


class MissingExtraError(OtelJoulesError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


def import_extra(module: str, feature: str, extra: str) -> Any:
    """Import an optional dependency when a feature first needs it, or say in one line which extra installs it.

    Raises:
        MissingExtraError: ``module`` cannot be imported: "<feature> needs <module>, which is not installed:
            pip install 'otel-joules[<extra>]'".
    """
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtraError(
            f"{feature} needs {module.split('.')[0]}, which is not installed: pip install 'otel-joules[{extra}]'"
        ) from None
