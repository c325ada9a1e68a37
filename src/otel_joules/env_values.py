"""How one environment variable's value is read: parsed, or reported once as bad and a default used.

:mod:`otel_joules.config` names every variable and reads each through these (and re-exports
:func:`report_bad_value` and :func:`forget_reported_values`). A bad value is said once per
process, naming the variable, the problem and what is used instead, as the OpenTelemetry
specification asks: a setting never makes ``instrument()`` raise.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Mapping

_log = logging.getLogger("otel_joules")

#: What a flag variable takes for true, and for false (either case).
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


class ReportedProblems:
    """Which bad values were already reported, so each is said once per process, not per read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: set[tuple[str, str, str]] = set()

    def warn(self, name: str, raw: str, problem: str, default: str) -> None:
        """Warn that ``name=raw`` is unusable (``problem``) and ``default`` is used, unless already said."""
        with self._lock:
            if (name, raw, problem) in self._seen:
                return
            self._seen.add((name, raw, problem))
        _log.warning("otel-joules: %s=%r %s; using %s instead", name, raw[:80], problem, default)

    def forget(self) -> None:
        """Report every value again from now on (tests start each case afresh)."""
        with self._lock:
            self._seen.clear()

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()


_REPORTED = ReportedProblems()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_REPORTED._after_fork_in_child)


def report_bad_value(name: str, raw: str, problem: str, default: str) -> None:
    """Say once per process that ``name=raw`` is unusable (``problem``) and ``default`` is used.

    For layers that validate a variable's value against data only they have (the carbon
    table's country codes), so every bad setting is reported the same way.
    """
    _REPORTED.warn(name, raw, problem, default)


def forget_reported_values() -> None:
    """Forget which bad values were reported, so each is reported again (for tests)."""
    _REPORTED.forget()


def read_text(env: Mapping[str, str], name: str) -> str | None:
    """The variable ``name`` of ``env``, stripped; None when unset or blank."""
    raw = env.get(name)
    return raw.strip() if raw is not None and raw.strip() else None


def read_absolute_path(env: Mapping[str, str], name: str, default: str) -> str:
    """The variable ``name`` as an absolute path; ``default`` when unset, or (reported once) when not one."""
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    value = raw.strip()
    if not os.path.isabs(value) or "\x00" in value:
        report_bad_value(name, raw, "is not an absolute path", f"the default {default}")
        return default
    return value


def read_choice(
    env: Mapping[str, str], name: str, choices: tuple[str, ...], default: str | None, *, upper: bool = False, meaning: str = ""
) -> str | None:
    """The variable ``name`` as one of ``choices`` (``upper``: compared in upper case, else lower); ``default``
    when unset, or (reported once, saying ``meaning`` or the default is used) when not one of them."""
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    value = raw.strip().upper() if upper else raw.strip().lower()
    if value in choices:
        return value
    report_bad_value(name, raw, f"is not one of {', '.join(choices)}", meaning or repr(default))
    return default


def read_flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    """The variable ``name`` as true or false (:data:`TRUE_WORDS`, :data:`FALSE_WORDS`); ``default`` when unset,
    or (reported once) when neither."""
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    value = raw.strip().lower()
    if value in TRUE_WORDS:
        return True
    if value in FALSE_WORDS:
        return False
    report_bad_value(name, raw, "is not true or false", str(default).lower())
    return default
