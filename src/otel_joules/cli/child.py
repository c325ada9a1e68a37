"""Run a child command to its end: termination signals forwarded, a live status line on request.

Used by ``otel-joules run`` and by the carbontracker-style command line.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TextIO

from otel_joules.carbon.units import format_duration
from otel_joules.cli.summary import format_joules
from otel_joules.meter.meter import EnergyMeter

#: Exit codes of a shell for a command that cannot be run.
EXIT_NOT_FOUND = 127
EXIT_NOT_EXECUTABLE = 126

#: Signals a terminal sends to its whole foreground process group.
_TERMINAL_SIGNALS = (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
_FORWARDED_SIGNALS = (signal.SIGTERM,) + _TERMINAL_SIGNALS

_STATUS_PERIOD_S = 0.5


class SignalForwarder:
    """Forwards termination signals to the child while it runs.

    A terminal delivers SIGINT (Ctrl-C), SIGQUIT and SIGHUP to its whole foreground
    process group, child included; forwarding those again would interrupt the child's
    own clean-up. So they are forwarded only when this process is not in the terminal's
    foreground group (e.g. ``kill -INT`` from a script, or running in the background).
    SIGTERM never comes from a terminal and is always forwarded.
    """

    def __init__(self, process: subprocess.Popen[Any]) -> None:
        self._process = process
        self._previous: dict[int, Any] = {}
        self.received: list[int] = []

    def install(self) -> None:
        """Take over the signals (main thread only)."""
        for signum in _FORWARDED_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)

    def restore(self) -> None:
        """Give the signals back to their previous handlers."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        self.received.append(signum)
        if signum in _TERMINAL_SIGNALS and _in_terminal_foreground():
            return
        try:
            self._process.send_signal(signum)
        except (ProcessLookupError, OSError):
            pass  # it has just exited: nothing to forward to


def _in_terminal_foreground() -> bool:
    """True when our process group is the foreground group of our controlling terminal."""
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd):
                return os.tcgetpgrp(fd) == os.getpgrp()
        except OSError:
            continue
    return False


class StatusLine(threading.Thread):
    """Rewrites one line on standard error: elapsed time, current power, joules so far."""

    def __init__(self, meter: EnergyMeter, stream: TextIO, label: str) -> None:
        super().__init__(name="otel-joules-status", daemon=True)
        self._meter = meter
        self._stream = stream
        self._label = label
        self._stop_event = threading.Event()
        self._started_at = time.monotonic()

    def run(self) -> None:
        first = previous = self._meter.snapshot()
        while not self._stop_event.wait(_STATUS_PERIOD_S):
            current = self._meter.snapshot()
            now_w = self._meter.measure(previous, current)
            so_far = self._meter.measure(first, current)
            previous = current
            # An estimate says so here too, as everywhere else.
            label = "" if now_w.source == "measured" else f" {now_w.source}"
            power = f"{now_w.watts:.1f} W{label}" if now_w.joules_by_domain else "nothing measured in this process"
            text = f"otel-joules: {self._label} {format_duration(time.monotonic() - self._started_at)}, {power}, {format_joules(so_far.total_joules)}"
            self._write("\r\x1b[K" + text)

    def _write(self, text: str) -> None:
        try:
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError):
            self._stop_event.set()  # the terminal went away

    def stop(self) -> None:
        """Stop updating and clear the line."""
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout=2)
        self._write("\r\x1b[K")



def check_runnable(executable: str) -> tuple[int, str] | None:
    """``(exit code, message)`` when ``executable`` cannot be run, the way a shell reports it."""
    if os.sep in executable:
        if not os.path.exists(executable):
            return EXIT_NOT_FOUND, f"{executable}: no such file"
        if os.path.isdir(executable) or not os.access(executable, os.X_OK):
            return EXIT_NOT_EXECUTABLE, f"{executable}: not an executable file"
        return None
    if shutil.which(executable) is None:
        return EXIT_NOT_FOUND, f"{executable}: command not found on PATH"
    return None




@dataclass(frozen=True)
class ChildOutcome:
    """How a child process ended.

    Attributes:
        exit_code: Its exit code; 128 + N when killed by signal N; 127/126 when it could not start.
        signal_name: The signal that killed it (``SIGTERM``), or None.
        start_error: Why it could not start, or None.
    """

    exit_code: int
    signal_name: str | None = None
    start_error: str | None = None


def run_child(
    command: Sequence[str],
    env: dict[str, str],
    meter: EnergyMeter,
    label: str,
    show_status: bool,
    *,
    on_start: Callable[[int], None] | None = None,
) -> ChildOutcome:
    """Run ``command`` with ``env`` until it ends: signals forwarded, status line on request.

    Used by ``otel-joules run`` and by the carbontracker-style command line. ``on_start`` gets the child's pid once it runs.
    """
    try:
        process = subprocess.Popen(list(command), env=env)
    except OSError as exc:
        exit_code = EXIT_NOT_FOUND if isinstance(exc, FileNotFoundError) else EXIT_NOT_EXECUTABLE
        return ChildOutcome(exit_code, start_error=exc.strerror or str(exc))
    if on_start is not None:
        on_start(process.pid)
    exit_code, signal_name = _wait(process, meter, label, show_status)
    return ChildOutcome(exit_code, signal_name)



def _wait(process: subprocess.Popen[Any], meter: EnergyMeter, name: str, show_status: bool) -> tuple[int, str | None]:
    """Wait for the child, forwarding signals and showing the status line; return (exit code, signal name)."""
    forwarder = SignalForwarder(process)
    status = StatusLine(meter, sys.stderr, name) if show_status else None
    on_main_thread = threading.current_thread() is threading.main_thread()
    if on_main_thread:
        forwarder.install()
    try:
        if status is not None:
            status.start()
        returncode = _wait_uninterrupted(process.wait)
    finally:
        if status is not None:
            status.stop()
        if on_main_thread:
            forwarder.restore()
    if returncode < 0:
        signum = -returncode
        try:
            signal_name = signal.Signals(signum).name
        except ValueError:
            signal_name = f"signal {signum}"
        return 128 + signum, signal_name
    return returncode, None


def _wait_uninterrupted(wait: Callable[[], int]) -> int:
    # A KeyboardInterrupt can still arrive between installing handlers and waiting;
    # the child got the same Ctrl-C, so keep waiting for it.
    while True:
        try:
            return wait()
        except KeyboardInterrupt:
            continue
