"""A symbolic link planted at a file exporter's path is refused, never written through (issue 24, item 6).

Each file exporter (CSV, JSON lines, OTLP/JSON) is checked with a link to a file in the
test's folder: that file must stay byte for byte as it was, at construction and when the
link is planted while the exporter runs (after log rotation moved its file away), where the
records are kept in memory with one error saying so and written once the link is gone.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path
from typing import Any, Callable

import pytest
from opentelemetry.sdk.trace.export import SpanExportResult

from otel_joules.exporters import CsvSpanExporter, JsonLinesSpanExporter
from otel_joules.exporters.errors import ExporterPathError

from tests.helpers.known_spans import plain_spans

LOGGER = "otel_joules.exporters"
SECRET = b"# a file the exporter must never touch\nexport PATH=/usr/bin\n"


def _otlp_file(path: Path) -> Any:
    pytest.importorskip("opentelemetry.exporter.otlp.json.common")
    from otel_joules.exporters.otlp_file_exporter import OtlpFileSpanExporter

    return OtlpFileSpanExporter(path)


EXPORTERS: dict[str, Callable[[Path], Any]] = {
    "csv": CsvSpanExporter,
    "jsonl": JsonLinesSpanExporter,
    "otlp-file": _otlp_file,
}


@pytest.fixture
def target(tmp_path: Path) -> Path:
    secret = tmp_path / "bashrc"
    secret.write_bytes(SECRET)
    return secret


@pytest.mark.parametrize("kind", EXPORTERS)
def test_link_at_the_path_is_refused_at_construction(kind: str, tmp_path: Path, target: Path) -> None:
    link = tmp_path / "spans.out"
    link.symlink_to(target)
    with pytest.raises(ExporterPathError) as caught:
        EXPORTERS[kind](link)
    message = str(caught.value)
    assert "\n" not in message
    assert f"{str(link)!r} is a symbolic link (to {str(target)!r})" in message and "remove the link" in message
    assert target.read_bytes() == SECRET
    assert link.is_symlink()


@pytest.mark.parametrize("kind", EXPORTERS)
def test_dangling_link_is_refused_and_creates_nothing(kind: str, tmp_path: Path) -> None:
    link = tmp_path / "spans.out"
    link.symlink_to(tmp_path / "created-through-the-link")
    with pytest.raises(ExporterPathError, match="is a symbolic link"):
        EXPORTERS[kind](link)
    assert not (tmp_path / "created-through-the-link").exists()


@pytest.mark.parametrize("kind", EXPORTERS)
def test_link_planted_while_running_keeps_the_records_and_says_so_once(
    kind: str, tmp_path: Path, target: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "spans.out"
    exporter = EXPORTERS[kind](path)
    a, b, c = plain_spans(3)
    assert exporter.export([a]) is SpanExportResult.SUCCESS
    path.rename(tmp_path / "spans.out.1")  # rotated away ...
    path.symlink_to(target)  # ... and a link planted in its place
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert exporter.export([b]) is SpanExportResult.FAILURE
        assert exporter.export([c]) is SpanExportResult.FAILURE
    assert target.read_bytes() == SECRET
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, errors
    assert "is a symbolic link" in errors[0] and "kept in memory" in errors[0]
    assert "written to a new file at that path" in errors[0] and "after the link is removed" in errors[0]
    assert exporter.pending_spans == 2
    path.unlink()
    assert exporter.force_flush() is True
    exporter.shutdown()
    assert not path.is_symlink() and path.is_file()
    written = path.read_text()
    assert "s1" in written and "s2" in written and "s0" not in written
    assert target.read_bytes() == SECRET


@pytest.mark.parametrize("kind", EXPORTERS)
def test_created_file_is_never_world_writable(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "spans.out"
    old = os.umask(0)
    try:
        exporter = EXPORTERS[kind](path)
    finally:
        os.umask(old)
    exporter.shutdown()
    assert stat.S_IMODE(path.stat().st_mode) & 0o002 == 0


def test_folder_given_through_a_link_still_works(tmp_path: Path) -> None:
    # Only the last part of the path is checked: a linked folder is an ordinary setup.
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "linked").symlink_to(real, target_is_directory=True)
    exporter = JsonLinesSpanExporter(tmp_path / "linked" / "spans.jsonl")
    assert exporter.export(plain_spans(1)) is SpanExportResult.SUCCESS
    exporter.shutdown()
    assert (real / "spans.jsonl").read_text().count("\n") == 1
