"""pyJoules' exceptions (``pyJoules.exception``), rooted in otel-joules' own base class.

The names and constructor arguments are pyJoules 0.5.1's, so ``except NoSuchDomainError``
keeps working after the import prefix changes; unlike pyJoules', the messages say what is
wrong and what to do. :class:`PyJoulesWarning` is otel-joules' own: the adapter warns (once per
decorated function or context) where pyJoules crashed after the user's code had already run.
"""

from __future__ import annotations

from otel_joules.errors import ConfigurationError, OtelJoulesError


class PyJoulesException(OtelJoulesError):
    """Parent class of the pyJoules-compatible exceptions (an :class:`~otel_joules.OtelJoulesError`)."""


class NoSuchDomainError(PyJoulesException):
    """A domain was asked for that cannot be measured on this machine or by this meter.

    Args:
        domain_name: The domain asked for (the domain object, as pyJoules passes it).
        reason: Why it cannot be measured and what to do about it.
    """

    def __init__(self, domain_name: object, reason: str = "") -> None:
        message = f"{domain_name} cannot be measured here"
        super().__init__(f"{message}: {reason}" if reason else message)
        #: The domain that is not available (as given).
        self.domain_name = domain_name


class NoSuchDeviceError(PyJoulesException):
    """A device (RAPL, NVIDIA GPUs) has no measurable domain on this machine; the message says why."""


class DomainTypeError(PyJoulesException, ConfigurationError):
    """``domains=`` holds something that is not a pyJoules domain object; raised when decorating."""


class HandlerTypeError(PyJoulesException, ConfigurationError):
    """``handler=`` is not an energy handler (it has no ``process(trace)``); raised when decorating."""


class PyJoulesWarning(UserWarning):
    """Some or all requested domains cannot be measured: the code still runs, the message says why."""
