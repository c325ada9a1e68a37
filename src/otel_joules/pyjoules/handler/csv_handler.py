"""``CSVHandler``: samples appended to a ``;``-separated file, in pyJoules' format.

Format (pyJoules 0.5.1)::

    timestamp;tag;duration;package_0;dram_0;nvidia_gpu_0;energy.below_resolution
    1700000000.5;foo;0.25;1500000.0;250000.0;30000000.0;False

- Header ``timestamp;tag;duration;<domains>;energy.below_resolution``, domains in the order of
  the samples' ``energy`` (every domain seen in the samples being saved, first seen first);
  written only when the file is missing, empty or holds nothing but a header. The last column
  (not in pyJoules' format; readers that pick columns by name are unaffected) is ``True`` where
  the sample was shorter than a counter's update period, so its values are quantised (a short
  call often shows ``0.0``), as spans carry ``energy.below_resolution``. A file an older
  version wrote without that column is appended to in its own layout.
- ``save_data()`` with no sample to save (nothing measurable ran) still writes the header (the
  fixed columns, and the flag) to a missing or empty file, and warns once
  (:class:`~otel_joules.pyjoules.exception.PyJoulesWarning`), so the file the next line of a
  script opens exists and says it holds no row.
- One row per sample; numbers as Python's ``str``; energy in microjoules for every
  domain, the GPU included. A domain missing from one sample (its counter failed
  during the run) is an empty cell. UTF-8, rows end in ``\\n``. A cell containing
  ``;``, ``"`` or a line break (only possible in a tag) is quoted as in RFC 4180, so a
  tag cannot break the file (pyJoules writes it unquoted); every other cell is exactly as
  pyJoules writes it.

Fixed pyJoules bugs:

- Appending to a file whose header lists other domains raises
  :class:`CSVHeaderMismatchError` before anything is written (pyJoules appended rows
  under the wrong header). The same domains in another order are fine: rows follow the
  file's order.
- A path that cannot be written (missing folder, a folder, a read-only place, a symbolic
  link) raises :class:`CSVPathError` when the handler is created, not after the
  measurement. Checking creates no file. A link planted at the path later is refused by
  ``save_data()`` (the traces are kept): the file is never written through a link
  (:mod:`otel_joules.exporters.safe_open`), and a new one is never world-writable.
- Traces not yet saved are saved at interpreter exit. A failed save keeps them, so a
  later ``save_data()`` (or the exit) can write them; a failed write leaves the file as
  it was (it is truncated back).
"""

from __future__ import annotations

import csv
import io
import os
import stat
import warnings
from typing import Dict, List, Sequence

from otel_joules.errors import ConfigurationError
from otel_joules.exporters.records import utf8
from otel_joules.exporters.safe_open import SymlinkRefusedError, create_new, open_append, refuse_symlink
from otel_joules.pyjoules.energy_trace import EnergySample
from otel_joules.pyjoules.exception import PyJoulesException, PyJoulesWarning
from otel_joules.pyjoules.handler.handler import EnergyHandler
from otel_joules.semconv import ENERGY_BELOW_RESOLUTION

#: The fixed first columns.
BASE_COLUMNS = ("timestamp", "tag", "duration")
#: The last column: the sample is below the counters' resolution (the spans' attribute name).
BELOW_RESOLUTION_COLUMN = ENERGY_BELOW_RESOLUTION
# Far more than any header; small enough never to read a huge file whole.
_HEADER_READ_LIMIT = 1 << 16


class CSVPathError(PyJoulesException, ConfigurationError):
    """The CSV file cannot be created or written; raised when the handler is created."""


class CSVHeaderMismatchError(PyJoulesException, ConfigurationError):
    """The existing file's header lists other columns than the samples to append; nothing was written."""


class CSVWriteError(PyJoulesException, OSError):
    """Writing the rows failed (disk full, ...); the file is unchanged and the traces are kept."""


def domain_columns(samples: Sequence[EnergySample]) -> List[str]:
    """Every domain of ``samples``, in order of first appearance."""
    seen: Dict[str, None] = {}
    for sample in samples:
        for domain in sample.energy:
            seen.setdefault(domain, None)
    return list(seen)


def _csv_line(cells: Sequence[str]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, delimiter=";", lineterminator="\n", quoting=csv.QUOTE_MINIMAL).writerow(cells)
    return buffer.getvalue()


def format_rows(samples: Sequence[EnergySample], domains: Sequence[str], flagged: bool = True) -> str:
    """The rows :class:`CSVHandler` writes for ``samples`` under a header listing ``domains`` (then the flag,
    unless ``flagged`` is False: a file written without that column)."""
    lines = []
    for sample in samples:
        cells = [str(sample.timestamp), str(sample.tag), str(sample.duration)]
        cells += [str(sample.energy[d]) if d in sample.energy else "" for d in domains]
        if flagged:
            cells.append(str(bool(getattr(sample, "below_resolution", False))))
        lines.append(_csv_line(cells))
    return "".join(lines)


def check_writable(path: str) -> None:
    """Raise :class:`CSVPathError` unless ``path`` can be appended to (creating nothing; a link is refused)."""
    try:
        refuse_symlink(path)
        info = os.stat(path)
    except FileNotFoundError:
        info = None
    except SymlinkRefusedError as exc:
        raise CSVPathError(f"cannot use the CSV file: {exc.strerror}") from None
    except OSError as exc:
        raise CSVPathError(f"cannot use {path!r} for the CSV file: {exc.strerror}; choose a path you can write") from None
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise CSVPathError(f"{path!r} is a folder; give a file path such as {os.path.join(path, 'result.csv')!r}")
    try:
        if info is not None:
            os.close(open_append(path))
        else:
            os.close(create_new(path))
            os.unlink(path)
    except FileExistsError:
        return  # created by someone else meanwhile: it exists, save_data() checks it
    except OSError as exc:
        folder = os.path.dirname(os.path.abspath(path))
        hint = f" (the folder {folder!r} does not exist)" if not os.path.isdir(folder) else ""
        raise CSVPathError(
            f"cannot write the CSV file {path!r}: {exc.strerror}{hint}; choose a writable file path"
        ) from None


class CSVHandler(EnergyHandler):
    """Collects traces; :meth:`save_data` appends them to ``filename`` (format: module docstring).

    Args:
        filename: The CSV file; its folder must exist.

    Raises:
        CSVPathError: ``filename`` cannot be written.
    """

    flushes_at_exit = True

    def __init__(self, filename: "str | os.PathLike[str]") -> None:
        try:
            self._filename = os.fspath(filename)
        except TypeError:
            raise CSVPathError(f"filename={filename!r} must be a file path (str or os.PathLike)") from None
        check_writable(self._filename)
        super().__init__()
        self._warned_empty = False

    @property
    def filename(self) -> str:
        """The CSV file."""
        return self._filename

    def save_data(self) -> None:
        """Append every held sample to the file (with the header if the file is new or empty), then forget them.

        Raises:
            CSVHeaderMismatchError: the file's header lists other domains; nothing written, traces kept.
            CSVWriteError: writing failed; the file is unchanged, traces kept.
            CSVPathError: the file can no longer be opened; traces kept.
        """
        with self._lock:
            count = len(self.traces)
            samples = self._take_samples()
            self._append(samples)
            self._forget(count)
            if not samples:
                self._warn_nothing_saved()

    def _warn_nothing_saved(self) -> None:
        if self._warned_empty:
            return
        self._warned_empty = True
        warnings.warn(
            f"CSVHandler: save_data() had no measurement to save, so {self._filename!r} holds its header only: "
            "nothing measurable ran through this handler (the warning at the measured call says why)",
            PyJoulesWarning,
            stacklevel=4,
        )

    def _append(self, samples: List[EnergySample]) -> None:
        domains = domain_columns(samples)
        try:
            fd = open_append(self._filename, read=True)
        except SymlinkRefusedError as exc:
            raise CSVPathError(f"cannot open the CSV file: {exc.strerror}; the traces are kept") from None
        except OSError as exc:
            raise CSVPathError(f"cannot open the CSV file {self._filename!r}: {exc.strerror}; the traces are kept") from None
        try:
            size = os.fstat(fd).st_size
            head = os.pread(fd, _HEADER_READ_LIMIT, 0) if size else b""
            first_line, newline, rest = head.partition(b"\n")
            if not samples and size:
                return  # nothing to add to a file that has its header
            prefix = ""
            columns, flagged = domains, True
            if size:
                try:
                    columns, flagged = self._columns_of_existing(first_line, domains)
                except CSVHeaderMismatchError:
                    if not (newline and not rest and size == len(head)):
                        raise
                    size = 0  # a header without a row (an earlier save of nothing) gives way to these samples'
            if size == 0:
                os.ftruncate(fd, 0)
                prefix = _csv_line([*BASE_COLUMNS, *domains, BELOW_RESOLUTION_COLUMN])
            elif os.pread(fd, 1, size - 1) != b"\n":
                prefix = "\n"  # a writer was stopped mid-line: keep the new rows whole
            data = memoryview(utf8(prefix + format_rows(samples, columns, flagged)))
            try:
                # Unbuffered, looping on short writes: nothing is left in a Python buffer to fail later.
                while data:
                    data = data[os.write(fd, data):]
            except OSError as exc:
                try:
                    os.ftruncate(fd, size)
                except OSError:
                    pass
                raise CSVWriteError(
                    exc.errno, f"cannot append to {self._filename!r}: {exc.strerror}; the file is unchanged and the traces are kept"
                ) from None
        finally:
            os.close(fd)

    def _columns_of_existing(self, first_line: bytes, domains: List[str]) -> "tuple[List[str], bool]":
        """The file's domain columns in its order, and whether it has the below-resolution column."""
        text = first_line.decode("utf-8-sig", errors="replace").rstrip("\r\n")
        header = next(csv.reader([text], delimiter=";"), [])
        found = header[len(BASE_COLUMNS):]
        flagged = found[-1:] == [BELOW_RESOLUTION_COLUMN]
        if flagged:
            found = found[:-1]
        if tuple(header[: len(BASE_COLUMNS)]) == BASE_COLUMNS and len(set(found)) == len(found) and set(found) == set(domains):
            return found, flagged
        raise CSVHeaderMismatchError(
            f"{self._filename!r} starts with the header {text[:300]!r}, but the samples to append measure "
            f"{';'.join([*BASE_COLUMNS, *domains, BELOW_RESOLUTION_COLUMN])!r}; appending would put values under the wrong columns, so "
            "nothing was written and the traces are kept: save to a new file (CSVHandler('other.csv')) or measure "
            "the same domains as that file (domains=[...])"
        )
