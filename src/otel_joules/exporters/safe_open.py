"""Opening the files otel-joules writes, never through a symbolic link planted at the path.

Every file the package writes goes through this module: the span exporters' files, the
pyJoules CSV, the carbontracker logs, the report's plot, the PDF report and the rule files
of ``otel-joules setup-access --install``. A symbolic
link at the path is refused (``O_NOFOLLOW``), so a link planted where an output is
expected (``spans.jsonl -> ~/.bashrc``) cannot make a process append to, or overwrite, the
file it points to; the error names the link and says what to do. A file created here is
created with ``O_EXCL`` (a link or file appearing at the path meanwhile is never
followed) and mode ``0o664`` minus the umask: never world-writable, whatever the umask.

Only the last part of the path is checked: folders above it may be links (a home on
another disk, ``/var/run -> /run``), as whoever can replace such a folder can already
write into it.
"""

from __future__ import annotations

import errno
import os

#: Mode of the files created here, before the umask: no write permission for others.
CREATE_MODE = 0o664

_BASE_FLAGS = os.O_CLOEXEC | os.O_NOFOLLOW | getattr(os, "O_NOCTTY", 0)


class SymlinkRefusedError(OSError):
    """The path to write is a symbolic link: refused (``errno`` ELOOP; ``strerror`` says what to do)."""


def refuse_symlink(path: str | os.PathLike[str]) -> None:
    """Raise :class:`SymlinkRefusedError` if ``path`` is a symbolic link (checked before reading a file to append to)."""
    if os.path.islink(path):
        raise _refused(os.fspath(path))


def _refused(path: str) -> SymlinkRefusedError:
    try:
        target = f" (to {os.readlink(path)!r})"
    except OSError:
        target = ""
    return SymlinkRefusedError(
        errno.ELOOP,
        f"{path!r} is a symbolic link{target}: refused, so that a link planted there cannot make otel-joules write "
        "into another file; remove the link, or give the path of the file itself",
    )


def _open(path: str, flags: int) -> int:
    try:
        return os.open(path, flags | _BASE_FLAGS, CREATE_MODE)
    except OSError as exc:
        # O_NOFOLLOW fails with ELOOP on a link (EMLINK on some BSDs).
        if exc.errno in (errno.ELOOP, errno.EMLINK) and os.path.islink(path):
            raise _refused(path) from None
        raise


def open_append(path: str | os.PathLike[str], *, read: bool = False) -> int:
    """A descriptor appending to ``path`` (``O_APPEND``; also readable with ``read``), created if missing.

    Raises:
        SymlinkRefusedError: ``path`` is a symbolic link.
        OSError: it cannot be opened or created.
    """
    name = os.fspath(path)
    access = (os.O_RDWR if read else os.O_WRONLY) | os.O_APPEND
    for _ in range(3):
        try:
            return _open(name, access)
        except FileNotFoundError:
            pass
        try:
            return _open(name, access | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            continue  # created meanwhile: open what is there now (refused if a link)
    return _open(name, access)


def create_new(path: str | os.PathLike[str]) -> int:
    """A descriptor writing to a new file at ``path`` (``O_EXCL``).

    Raises:
        FileExistsError: something (a file or a link) is already at ``path``.
        OSError: it cannot be created.
    """
    return _open(os.fspath(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL)


def open_replace(path: str | os.PathLike[str]) -> int:
    """A descriptor writing ``path`` from its start (an existing regular file is emptied), created if missing.

    Raises:
        SymlinkRefusedError: ``path`` is a symbolic link.
        OSError: it cannot be opened or created.
    """
    name = os.fspath(path)
    for _ in range(3):
        try:
            return _open(name, os.O_WRONLY | os.O_TRUNC)
        except FileNotFoundError:
            pass
        try:
            return create_new(name)
        except FileExistsError:
            continue
    return _open(name, os.O_WRONLY | os.O_TRUNC)
