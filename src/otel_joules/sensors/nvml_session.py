"""NVML's lifecycle in this process: initialisation, shutdown at exit, fork, and what its errors mean.

One :class:`NvmlSession` per process (:func:`default_session`) initialises NVML on first
use (NVML's init is reference-counted; the session holds one reference) and shuts it down
at interpreter exit. NVML state is not valid after ``fork()``: the session notices it runs
in a new process and initialises again, and its :attr:`NvmlSession.generation` tells
channels their handles are stale. NVML's error codes are mapped here to messages that say
what is wrong and what to do (:class:`NvmlUnavailableError`).

The channels and the discovery of GPUs are in :mod:`otel_joules.sensors.nvml`.
"""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from types import ModuleType
from typing import Callable

from otel_joules.errors import SensorUnavailableError

# NVML return codes (nvml.h); kept here so the mapping does not depend on the binding's version.
_NVML_ERROR_UNINITIALIZED = 1
_NVML_ERROR_NOT_SUPPORTED = 3
_NVML_ERROR_NO_PERMISSION = 4
_NVML_ERROR_NOT_FOUND = 6
_NVML_ERROR_DRIVER_NOT_LOADED = 9
_NVML_ERROR_LIBRARY_NOT_FOUND = 12
_NVML_ERROR_FUNCTION_NOT_FOUND = 13
_NVML_ERROR_GPU_IS_LOST = 15
_NVML_ERROR_RESET_REQUIRED = 16
_NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
_NVML_ERROR_GPU_NOT_FOUND = 28
#: Codes after which a GPU does not come back without a reset.
_LOST_CODES = frozenset({_NVML_ERROR_GPU_IS_LOST, _NVML_ERROR_RESET_REQUIRED, _NVML_ERROR_GPU_NOT_FOUND})


class NvmlUnavailableError(SensorUnavailableError):
    """NVML cannot be used in this process; ``reason`` and ``remedy`` are for the user."""

    def __init__(self, reason: str, remedy: str = "") -> None:
        super().__init__(f"{reason}; {remedy}" if remedy else reason)
        self.reason = reason
        self.remedy = remedy


def _import_pynvml() -> ModuleType:
    import pynvml

    return pynvml


def _error_code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def _describe_nvml_error(exc: BaseException) -> str:
    code = _error_code(exc)
    try:
        text = str(exc)
    except Exception:  # str() of an NVMLError calls into the library, which may be gone
        text = type(exc).__name__
    return f"{text} (NVML error {code})" if code is not None else f"{type(exc).__name__}: {text}"


def _init_failure(exc: BaseException) -> NvmlUnavailableError:
    code = _error_code(exc)
    if code == _NVML_ERROR_LIBRARY_NOT_FOUND:
        return NvmlUnavailableError(
            "libnvidia-ml.so.1 was not found: no NVIDIA driver is installed, or its library is not on the loader path",
            "install the NVIDIA driver; in a container, start it with the NVIDIA container toolkit (--gpus all)",
        )
    if code == _NVML_ERROR_DRIVER_NOT_LOADED:
        return NvmlUnavailableError(
            "the NVIDIA kernel driver is not loaded (NVML: Driver Not Loaded)",
            "load the driver; `nvidia-smi` must work before GPUs can be measured",
        )
    if code == _NVML_ERROR_NO_PERMISSION:
        return NvmlUnavailableError(
            "no permission to use NVML (NVML: Insufficient Permissions)",
            "give this user access to /dev/nvidia*",
        )
    if code in (_NVML_ERROR_LIB_RM_VERSION_MISMATCH, _NVML_ERROR_FUNCTION_NOT_FOUND):
        return NvmlUnavailableError(
            f"the NVML library does not match the driver or the binding: {_describe_nvml_error(exc)}",
            "reboot after a driver update, or update nvidia-ml-py",
        )
    return NvmlUnavailableError(f"NVML could not be initialised: {_describe_nvml_error(exc)}", "check `nvidia-smi`")


def _forget_after_fork(ref: "weakref.ref[NvmlSession]") -> None:
    session = ref()
    if session is not None:
        session._after_fork_in_child()


def _shutdown_at_exit(ref: "weakref.ref[NvmlSession]") -> None:
    session = ref()
    if session is not None:
        session.shutdown()


class NvmlSession:
    """NVML's initialisation in this process: the explicit registry behind every NVML channel.

    :meth:`acquire` initialises NVML once (NVML's init is reference-counted; we hold one
    reference) and registers :meth:`shutdown` to run at interpreter exit. After
    ``fork()`` the child's first :meth:`acquire` initialises again, and :attr:`generation`
    changes so channels know their handles are stale.
    """

    def __init__(self, loader: Callable[[], ModuleType] = _import_pynvml) -> None:
        self._loader = loader
        self._lock = threading.Lock()
        self._nvml: ModuleType | None = None
        # The pid that holds our NVML reference; another pid means we are a forked child.
        self._initialised_pid: int | None = None
        self._generation = 0
        self._atexit_registered = False
        ref = weakref.ref(self)
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=lambda: _forget_after_fork(ref))

    @property
    def generation(self) -> int:
        """Increments at every initialisation; a handle from another generation is stale."""
        return self._generation

    @property
    def initialised(self) -> bool:
        """True when this process holds an NVML reference."""
        return self._initialised_pid == os.getpid()

    def acquire(self) -> ModuleType:
        """Initialise NVML in this process if needed; return the ``pynvml`` module.

        Raises:
            NvmlUnavailableError: no binding, library, driver or permission.
        """
        pid = os.getpid()
        if self._initialised_pid == pid and self._nvml is not None:
            return self._nvml
        with self._lock:
            if self._initialised_pid == pid and self._nvml is not None:
                return self._nvml
            try:
                nvml = self._loader()
            except ImportError:
                raise NvmlUnavailableError(
                    "the pynvml module is not installed", "pip install nvidia-ml-py (not the old `pynvml` package)"
                ) from None
            try:
                nvml.nvmlInit()
            except Exception as exc:  # NVMLError, or anything a broken library throws
                raise _init_failure(exc) from None
            self._nvml = nvml
            self._initialised_pid = pid
            self._generation += 1
            if not self._atexit_registered:
                atexit.register(_shutdown_at_exit, weakref.ref(self))
                self._atexit_registered = True
            return nvml

    def shutdown(self) -> None:
        """Release this process's NVML reference (at exit; safe to call more than once).

        A channel read after this (a daemon sampler still running during interpreter exit)
        initialises NVML again rather than fail; the process is ending anyway.
        """
        with self._lock:
            if self._initialised_pid != os.getpid() or self._nvml is None:
                return
            nvml = self._nvml
            self._initialised_pid = None
            try:
                nvml.nvmlShutdown()
            except Exception:
                # Nothing useful can be done about a failing shutdown at exit.
                pass

    def _after_fork_in_child(self) -> None:
        # The parent's NVML reference is not ours to release, and the lock may have been
        # held by a parent thread at fork time.
        self._lock = threading.Lock()
        self._initialised_pid = None


class DefaultSessionProvider:
    """Holds the one process-wide :class:`NvmlSession`, created on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._session: NvmlSession | None = None
        if hasattr(os, "register_at_fork"):
            # A parent thread may hold the lock at fork time; the child gets a fresh one.
            os.register_at_fork(after_in_child=self._new_lock)

    def _new_lock(self) -> None:
        self._lock = threading.Lock()

    def get(self) -> NvmlSession:
        with self._lock:
            if self._session is None:
                self._session = NvmlSession()
            return self._session


_PROVIDER = DefaultSessionProvider()


def default_session() -> NvmlSession:
    """The process-wide NVML session every channel uses unless given another."""
    return _PROVIDER.get()


def gpu_indices(session: NvmlSession | None = None) -> list[int] | None:
    """The NVML indices of every GPU on this machine (whatever the process may use); None when NVML cannot say.

    For messages that name an index the user may pass (``gpus=[...]``, ``NvidiaGPUDomain(i)``).
    """
    try:
        nvml = (default_session() if session is None else session).acquire()
        return list(range(int(nvml.nvmlDeviceGetCount())))
    except Exception:  # noqa: BLE001 - only for advice: an unusable NVML says nothing
        return None
