"""The documentation set: README.md, the front door, and the reference pages under docs/.

Tests that check what the documentation says (every attribute, setting or query documented) read the
whole set, wherever in it the text lives; tests of the README's own commands read README.md itself.
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers.processes import REPO

README = REPO / "README.md"
DOCS_DIR = REPO / "docs"


def documentation_files() -> list[Path]:
    """README.md, then every docs/*.md in name order."""
    return [README, *sorted(DOCS_DIR.glob("*.md"))]


def documentation_text() -> str:
    """Every documentation file's text, each ending in a blank line so no table runs into the next file's."""
    return "".join(path.read_text(encoding="utf-8").rstrip("\n") + "\n\n" for path in documentation_files())
