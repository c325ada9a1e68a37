"""carbontracker log files: reading one, pairing a directory's standard and output logs by name.

A run left out of a directory-wide result is reported with a :class:`SkippedLogWarning`
that says which file and why (carbontracker leaves such runs out silently).
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List

from otel_joules.training.logformat import (
    OUTPUT_LOG_SUFFIX,
    STD_LOG_SUFFIX,
    LogFilesNotFoundError,
    LogFormatError,
    LogReadError,
)


class SkippedLogWarning(UserWarning):
    """A log file or run was left out of a directory-wide result; the message says which and why."""


def warn_skipped(message: str) -> None:
    """Warn that a run was left out, pointing the warning at the caller's code, not at ours.

    "Ours" are the frames of every module that calls this function under this name (this one,
    the carbontracker-compatible parser): they import it, so it is in their globals.
    """
    frame = sys._getframe(0)
    level = 1
    while frame is not None and frame.f_globals.get("warn_skipped") is warn_skipped:
        frame = frame.f_back
        level += 1
    warnings.warn(SkippedLogWarning(message), stacklevel=level)


# ------------------------------------------------------------------------------ files


@dataclass(frozen=True)
class LogPair:
    """The standard and output log of one run, paired by their common name stem."""

    stem: str
    std_log: str
    output_log: str


def read_log_text(path: str) -> str:
    """A log file's text (undecodable bytes replaced); errors say which file and why."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise LogFilesNotFoundError(f"log file {path!r} does not exist") from None
    except IsADirectoryError:
        raise LogFilesNotFoundError(f"{path!r} is a directory, not a log file") from None
    except OSError as exc:
        raise LogReadError(f"cannot read log file {path!r}: {exc}") from exc
    if b"\x00" in data:
        raise LogFormatError(f"{path!r} holds binary data, not a carbontracker log")
    # carbontracker writes with the platform's default encoding; a stray non-UTF-8 byte
    # in a device name must not make the numbers unreadable.
    return data.decode("utf-8", errors="replace")


def check_log_dir(log_dir: str | os.PathLike[str]) -> str:
    """``log_dir`` as a string, or LogFilesNotFoundError unless it is a directory."""
    path = os.fspath(log_dir)
    if not os.path.isdir(path):
        raise LogFilesNotFoundError(
            f"log directory {path!r} does not exist or is not a directory; pass the log_dir the tracker wrote to"
        )
    return path


def find_log_pairs(log_dir: str | os.PathLike[str]) -> List[LogPair]:
    """The runs in ``log_dir``: standard and output logs with the same stem, sorted by name.

    A log without its counterpart, or an empty one, is left out with a
    :class:`SkippedLogWarning` (carbontracker leaves them out silently, and pairs the
    rest by position, which mixes runs up when one file is missing).

    Raises:
        LogFilesNotFoundError: ``log_dir`` is not a directory.
    """
    directory = check_log_dir(log_dir)
    std_logs: Dict[str, str] = {}
    output_logs: Dict[str, str] = {}
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            continue
        if name.endswith(OUTPUT_LOG_SUFFIX):
            output_logs[name[: -len(OUTPUT_LOG_SUFFIX)]] = path
        elif name.endswith(STD_LOG_SUFFIX):
            std_logs[name[: -len(STD_LOG_SUFFIX)]] = path
    pairs: List[LogPair] = []
    for stem in sorted(set(std_logs) | set(output_logs)):
        std, output = std_logs.get(stem), output_logs.get(stem)
        if std is None or output is None:
            present = std or output
            missing = f"{stem}{OUTPUT_LOG_SUFFIX}" if output is None else f"{stem}{STD_LOG_SUFFIX}"
            warn_skipped(f"skipped {present!r}: its counterpart {missing!r} is missing")
            continue
        empty = [path for path in (std, output) if os.path.getsize(path) == 0]
        if empty:
            warn_skipped(f"skipped the run {stem!r}: {empty[0]!r} is empty (the run wrote nothing yet)")
            continue
        pairs.append(LogPair(stem=stem, std_log=std, output_log=output))
    return pairs
