"""amdsmi's lifecycle in this process: one :class:`AmdSmiSession` imports the ``amdsmi`` package on first use.

The base install does not include it (``pip install 'otel-joules[amd]'``). The session initialises amdsmi
for AMD GPUs, shuts it down at exit and initialises it again in a forked child, whose channels
(:mod:`otel_joules.sensors.amdsmi`) then find their handles again by UUID. Failures are an
:class:`AmdSmiUnavailableError` saying why and what to do.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import threading
import weakref
from types import ModuleType
from typing import Any, Callable

from otel_joules.config import ROCM_PATH
from otel_joules.errors import SensorUnavailableError

#: The remedy where the package is missing.
INSTALL_REMEDY = "pip install 'otel-joules[amd]' (the amdsmi package, matching your ROCm release)"

# amdsmi status codes (amdsmi.h), kept here so the mapping does not depend on the binding's version.
#: amdsmi's status for a reading a GPU does not support.
STATUS_NOT_SUPPORTED = 2
_STATUS_NO_PERM = 10
_STATUS_DRIVER_NOT_LOADED = 34


class AmdSmiUnavailableError(SensorUnavailableError):
    """amdsmi cannot be used in this process; ``reason`` and ``remedy`` are for the user.

    ``missing`` is True where the package or its library is absent (said only on a machine with an AMD GPU).
    """

    def __init__(self, reason: str, remedy: str = "", missing: bool = False) -> None:
        super().__init__(f"{reason}; {remedy}" if remedy else reason)
        self.reason = reason
        self.remedy = remedy
        self.missing = missing


def _import_amdsmi() -> ModuleType:
    # The binding prints to stdout when it cannot find its library: that line must not reach the user's output.
    with contextlib.redirect_stdout(io.StringIO()):
        import amdsmi
    return amdsmi


def error_code(exc: BaseException) -> int | None:
    """The amdsmi status code an amdsmi exception carries, or None."""
    get = getattr(exc, "get_error_code", None)
    try:
        code = get() if callable(get) else None
    except Exception:  # noqa: BLE001 - an odd exception object: no code
        return None
    return code if isinstance(code, int) else None


def describe_error(exc: BaseException) -> str:
    """An amdsmi exception as one line for the user, with its status code."""
    code = error_code(exc)
    text = " ".join(str(exc).split())
    return f"{text} (amdsmi status {code})" if code is not None and str(code) not in text else text or type(exc).__name__


class AmdSmiSession:
    """amdsmi's initialisation in this process (one per process, :func:`default_session`).

    :meth:`acquire` imports the package and initialises it for AMD GPUs once, registers the shutdown at exit,
    and after ``fork()`` initialises again in the child; :attr:`generation` then changes so channels know
    their handles are stale. A failed import is remembered: it is not retried.
    """

    def __init__(self, loader: Callable[[], ModuleType] = _import_amdsmi) -> None:
        self._loader = loader
        self._lock = threading.Lock()
        self._amdsmi: ModuleType | None = None
        self._import_failure: AmdSmiUnavailableError | None = None
        self._initialised_pid: int | None = None
        self._generation = 0
        self._atexit_registered = False

    @property
    def generation(self) -> int:
        """Increments at every initialisation; a handle from another generation is stale."""
        return self._generation

    def acquire(self) -> ModuleType:
        """Initialise amdsmi in this process if needed; return the ``amdsmi`` module.

        Raises:
            AmdSmiUnavailableError: no package, library, driver or permission.
        """
        pid = os.getpid()
        if self._initialised_pid == pid and self._amdsmi is not None:
            return self._amdsmi
        with self._lock:
            if self._initialised_pid == pid and self._amdsmi is not None:
                return self._amdsmi
            amdsmi = self._load()
            try:
                amdsmi.amdsmi_init(amdsmi.AmdSmiInitFlags.INIT_AMD_GPUS)
            except Exception as exc:  # AmdSmiLibraryException, or anything a broken library raises
                raise _init_failure(exc) from None
            self._amdsmi = amdsmi
            self._initialised_pid = pid
            self._generation += 1
            if not self._atexit_registered:
                atexit.register(_shutdown_at_exit, weakref.ref(self))
                self._atexit_registered = True
            return amdsmi

    def _load(self) -> ModuleType:
        if self._import_failure is not None:
            raise self._import_failure
        try:
            return self._loader()
        except ImportError:
            self._import_failure = AmdSmiUnavailableError("the amdsmi package is not installed", INSTALL_REMEDY, missing=True)
        except (KeyError, OSError, AttributeError) as exc:
            # KeyError: the binding found no libamd_smi.so; AttributeError: a library lacking a function it binds.
            self._import_failure = AmdSmiUnavailableError(
                f"the amdsmi package cannot load libamd_smi.so ({type(exc).__name__}: {exc})",
                f"install ROCm's amd-smi-lib, or set {ROCM_PATH} to the ROCm folder whose lib/ holds it; "
                "its release must match the amdsmi package's",
                missing=True,
            )
        raise self._import_failure

    def shutdown(self) -> None:
        """Release this process's amdsmi initialisation (at exit; safe to call more than once)."""
        with self._lock:
            if self._initialised_pid != os.getpid() or self._amdsmi is None:
                return
            amdsmi = self._amdsmi
            self._initialised_pid = None
            with contextlib.suppress(Exception):  # nothing useful can be done about a failing shutdown at exit
                amdsmi.amdsmi_shut_down()

    def handles(self) -> list[Any]:
        """The processor handles amdsmi lists now, in its order (the amdsmi indices)."""
        return list(self.acquire().amdsmi_get_processor_handles())

    def handle_by_uuid(self, uuid: str) -> Any | None:
        """The handle of the GPU with this UUID, or None where amdsmi no longer lists it."""
        amdsmi = self.acquire()
        for handle in self.handles():
            with contextlib.suppress(Exception):
                if str(amdsmi.amdsmi_get_gpu_device_uuid(handle)).lower() == uuid.lower():
                    return handle
        return None


def _init_failure(exc: BaseException) -> AmdSmiUnavailableError:
    code = error_code(exc)
    if code == _STATUS_DRIVER_NOT_LOADED:
        return AmdSmiUnavailableError("the amdgpu kernel driver is not loaded", "load amdgpu; `amd-smi list` must work first")
    if code == _STATUS_NO_PERM:
        return AmdSmiUnavailableError("no permission to use amdsmi", "add this user to the render and video groups")
    return AmdSmiUnavailableError(f"amdsmi could not be initialised: {describe_error(exc)}", "check `amd-smi list`")


def _shutdown_at_exit(ref: "weakref.ref[AmdSmiSession]") -> None:
    session = ref()
    if session is not None:
        session.shutdown()


_default_session: AmdSmiSession | None = None
_default_lock = threading.Lock()


def default_session() -> AmdSmiSession:
    """The process-wide :class:`AmdSmiSession`."""
    global _default_session
    with _default_lock:
        if _default_session is None:
            _default_session = AmdSmiSession()
        return _default_session
