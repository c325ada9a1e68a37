"""Waiting for queued accelerator work before a measurement boundary (``synchronize=``).

CUDA (and ROCm through torch), JAX and CuPy run kernels asynchronously: a span or epoch that
ends when Python returns has not waited for the GPU work it queued, so that energy lands in
whichever span is open when the kernels run. A *synchronizer* waits for the device's queued
work; the trainer callbacks call one at epoch (and step) boundaries, and
``otel_joules.instrument(synchronize=...)`` at every span's start and end.

It stalls the host until the device is idle, so pipelines that overlap host and device work
lose that overlap at every boundary: on for epochs, off by default for plain spans
(``benchmarks/span_overhead.py --synchronize`` measures its cost per span).

Options (:func:`resolve_synchronizer`):

=================  ==========================================================================
``None``/``"none"``  no synchronisation
``"torch"``        ``torch.cuda.synchronize()`` when CUDA (or ROCm) is initialised in this
                   process; skipped otherwise (CPU-only torch, or no tensor put on a GPU yet)
``"jax"``          blocks on a value put on JAX's default device; skipped on the CPU backend
``"cupy"``         ``cupy.cuda.get_current_stream().synchronize()``
``"auto"``         ``"torch"`` when torch is already imported, else none (the callbacks' default)
a callable         called with no arguments (your own stream, several devices, ...)
=================  ==========================================================================

The framework is imported only when a synchronizer is first called, never by otel-joules
itself: a ``"torch"`` synchronizer in a process that never imports torch costs nothing.
A synchronizer that raises is logged once and then skipped; the measurement goes on.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Callable, Union

from otel_joules.errors import ConfigurationError

_log = logging.getLogger("otel_joules")

#: What ``synchronize=`` accepts besides a callable.
SYNC_CHOICES = ("none", "auto", "torch", "jax", "cupy")

Synchronize = Union[None, str, Callable[[], Any]]


def _torch_sync() -> None:
    torch = sys.modules.get("torch")
    if torch is None:
        import torch  # noqa: PLC0415 - the user asked for torch: imported on first use only
    cuda = torch.cuda
    # is_initialized(): CUDA in use by this process; False on CPU-only builds and machines
    # and before the first tensor reaches a GPU (nothing queued then), without starting CUDA.
    if cuda.is_initialized():
        cuda.synchronize()


def _auto_sync() -> None:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _jax_sync() -> None:
    import jax  # noqa: PLC0415 - on first use only

    if jax.default_backend() != "cpu":
        jax.device_put(0.0).block_until_ready()


def _cupy_sync() -> None:
    import cupy  # noqa: PLC0415 - on first use only

    cupy.cuda.get_current_stream().synchronize()


_BY_NAME: dict[str, Callable[[], None]] = {"torch": _torch_sync, "auto": _auto_sync, "jax": _jax_sync, "cupy": _cupy_sync}


class GuardedSynchronizer:
    """Calls a synchronizer; one that raises is logged once and skipped from then on.

    What :func:`resolve_synchronizer` returns for a ``synchronize=`` option.
    """

    __slots__ = ("_call", "_name")

    def __init__(self, call: Callable[[], Any], name: str) -> None:
        self._call: Callable[[], Any] | None = call
        self._name = name

    def __call__(self) -> None:
        call = self._call
        if call is None:
            return
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - a failing synchronizer must not fail the measurement
            self._call = None
            _log.warning(
                "otel-joules: synchronize=%s failed (%s: %s); measuring on without waiting for the device",
                self._name, type(exc).__name__, exc,
            )

    def __repr__(self) -> str:
        return f"<synchronize {self._name}>"


def resolve_synchronizer(option: Synchronize) -> Callable[[], None] | None:
    """The synchronizer for ``option`` (see the module docstring), or None for no synchronisation.

    Raises:
        ConfigurationError: ``option`` is neither one of :data:`SYNC_CHOICES` nor callable.
    """
    if option is None or option is False:
        return None
    if callable(option):
        return GuardedSynchronizer(option, getattr(option, "__qualname__", repr(option)))
    if isinstance(option, str):
        name = option.strip().lower()
        if name in ("", "none", "off", "false"):
            return None
        if name in _BY_NAME:
            return GuardedSynchronizer(_BY_NAME[name], name)
    raise ConfigurationError(
        f"synchronize={option!r} is not one of {', '.join(SYNC_CHOICES)} or a callable; "
        "pass e.g. synchronize='torch' to wait for CUDA work at span boundaries"
    )
