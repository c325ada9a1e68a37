"""The vocabulary is defined once (otel_joules.semconv) and the documentation's tables (README.md, docs/*.md) say the same.

- every span attribute, span/event name and metric name/attribute in semconv is in the documentation's
  vocabulary tables, and every dotted name in those tables is in semconv (``energy.<domain>.joules``
  style names as the ``domain_*_key`` patterns);
- no other module of the package defines a string constant equal to one of semconv's values, and
  none imports a semconv name under another name (``import X as Y``), so one search finds where a
  name is born.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from otel_joules import semconv
from tests.helpers.docs import documentation_text

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "otel_joules"

#: Files allowed to define or alias vocabulary names: none.
_NOT_YET_CONVERTED: set[str] = set()

#: First header cell of the README tables that list names of the vocabulary.
VOCABULARY_TABLES = {"attribute", "span or event", "domain", "metric", "metric attribute"}
#: Semconv constants that are not names but prefixes or values of an attribute.
_NOT_NAMES = re.compile(r"^(.*_NAMESPACE|EXPORTED_ATTRIBUTE_PREFIXES|SOURCE_.*|KIND_.*|ATTRIBUTION_.*|ATTRIBUTED_KIND_KEYS)$")
#: Resource attributes: the README names them in prose (where it explains grouping), not in a table.
_RESOURCE_ATTRIBUTES = {semconv.HOST_NAME, semconv.HOST_ID, semconv.SERVICE_NAME, semconv.SERVICE_INSTANCE_ID}
_DOMAIN_KEYS = (
    semconv.domain_joules_key,
    semconv.domain_method_key,
    semconv.domain_stale_key,
    semconv.domain_missing_key,
    semconv.domain_rejected_jump_key,
)
#: A backticked token that looks like an attribute or metric name: lowercase dotted words
#: (``<domain>`` placeholders allowed).
_DOTTED = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_<>]+)+$")
_BACKTICKED = re.compile(r"`([^`]+)`")


def _string_constants() -> dict[str, str]:
    return {name: value for name, value in vars(semconv).items() if name.isupper() and not name.startswith("_") and isinstance(value, str)}


def _vocabulary_names() -> set[str]:
    """Every name a user or backend sees: attributes, span/event names, metric names and attributes."""
    return {value for name, value in _string_constants().items() if not _NOT_NAMES.match(name)}


def _readme_tables() -> dict[str, list[list[str]]]:
    """The documentation's (README.md and docs/*.md) Markdown tables by their first header cell (lowercase), as rows of cells."""
    tables: dict[str, list[list[str]]] = {}
    rows: list[list[str]] = []
    for line in [*documentation_text().splitlines(), ""]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
            continue
        if len(rows) >= 2:
            # rows[1] is the |---| separator.
            tables.setdefault(rows[0][0].lower(), []).extend(rows[2:])
        rows = []
    return tables


def _vocabulary_tokens() -> set[str]:
    tables = _readme_tables()
    missing = VOCABULARY_TABLES - set(tables)
    assert not missing, f"the documentation has no table headed {sorted(missing)}"
    return {
        token
        for header in VOCABULARY_TABLES
        for row in tables[header]
        for cell in row
        for token in _BACKTICKED.findall(cell)
    }


def _readme_prose_tokens() -> set[str]:
    """Every backticked token of the documentation outside fenced code blocks (whose ``` would pair wrongly)."""
    tokens: set[str] = set()
    fenced = False
    for line in documentation_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            tokens.update(_BACKTICKED.findall(line))
    return tokens


def _is_domain_key(token: str) -> bool:
    """``energy.<domain>.joules``, ``energy.package_0.joules``, ...: one of the domain_*_key patterns."""
    for key in _DOMAIN_KEYS:
        prefix, suffix = key("\0").split("\0")
        if token.startswith(prefix) and token.endswith(suffix):
            domain = token[len(prefix) : len(token) - len(suffix)]
            if domain and "." not in domain:
                return True
    return False


def test_every_semconv_name_is_in_the_readme_tables() -> None:
    tokens = _vocabulary_tokens()
    readme = _readme_prose_tokens()
    missing = sorted(
        value
        for value in _vocabulary_names()
        if value not in (readme if value in _RESOURCE_ATTRIBUTES else tokens)
    )
    assert not missing, f"semconv names missing from the documentation's tables: {missing}"
    templates = [key("<domain>") for key in _DOMAIN_KEYS]
    assert set(templates) <= tokens, f"the documentation's tables lack the per-domain names {templates}"
    assert {"cpu_estimate", "memory_estimate"} <= tokens


def test_every_dotted_name_in_the_readme_tables_is_in_semconv() -> None:
    names = _vocabulary_names()
    unknown = sorted(
        token
        for token in _vocabulary_tokens()
        if _DOTTED.match(token) and token not in names and not _is_domain_key(token)
    )
    assert not unknown, f"documented names not defined in otel_joules.semconv: {unknown}"


def test_the_readme_check_catches_an_unknown_name() -> None:
    # The check above is not vacuous: a made-up name fails it, a domain key passes.
    assert _DOTTED.match("energy.made_up.grams") and not _is_domain_key("energy.made_up.grams")
    assert _is_domain_key("energy.<domain>.stale") and _is_domain_key("energy.nvidia_gpu_0.joules")
    assert not _is_domain_key("energy.attributed.cpu.joules.x")


def _modules() -> list[tuple[str, ast.Module]]:
    modules = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative == "semconv.py" or relative in _NOT_YET_CONVERTED:
            continue
        modules.append((relative, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))))
    return modules


def test_not_yet_converted_files_exist() -> None:
    # A stale entry would silently exempt nothing; a moved file must leave the set.
    assert all((PACKAGE / relative).is_file() for relative in _NOT_YET_CONVERTED)


def test_no_module_redefines_a_semconv_value() -> None:
    values: dict[str, list[str]] = {}
    for name, value in _string_constants().items():
        values.setdefault(value, []).append(name)
    for prefix in semconv.EXPORTED_ATTRIBUTE_PREFIXES:
        values.setdefault(prefix, []).append("EXPORTED_ATTRIBUTE_PREFIXES")
    found = []
    for relative, module in _modules():
        for node in ast.walk(module):
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            if isinstance(value, ast.Constant) and isinstance(value.value, str) and value.value in values:
                for target in targets:
                    if isinstance(target, (ast.Name, ast.Attribute)):
                        found.append(
                            f"{relative}:{node.lineno} {ast.unparse(target)} = {value.value!r}"
                            f" (semconv.{'/'.join(values[value.value])})"
                        )
    assert not found, "import these from otel_joules.semconv instead:\n" + "\n".join(found)


def _docstrings(module: ast.Module) -> set[int]:
    """ids of the docstring constants of a module and its classes and functions (prose may name names)."""
    found = set()
    for node in ast.walk(module):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def test_no_module_spells_out_a_semconv_name_in_code() -> None:
    # Not just definitions: a literal "energy.joules" anywhere in code (a dict key, a call argument)
    # is a second spelling of the name. The energy.source values are common words and are left
    # to the definition check above.
    names = {value for value in _vocabulary_names() if "." in value}
    found = [
        f"{relative}:{node.lineno} {node.value!r}"
        for relative, module in _modules()
        for docstrings in [_docstrings(module)]
        for node in ast.walk(module)
        if isinstance(node, ast.Constant) and node.value in names and id(node) not in docstrings
    ]
    assert not found, "use the otel_joules.semconv constant instead of the literal:\n" + "\n".join(found)


def test_no_module_aliases_a_semconv_name() -> None:
    found = [
        f"{relative}:{node.lineno} {alias.name} as {alias.asname}"
        for relative, module in _modules()
        for node in ast.walk(module)
        if isinstance(node, ast.ImportFrom) and node.module == "otel_joules.semconv"
        for alias in node.names
        if alias.asname is not None and alias.asname != alias.name
    ]
    assert not found, "import semconv names under their own names:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "name", ["domain_joules_key", "domain_method_key", "domain_stale_key", "domain_missing_key", "domain_rejected_jump_key"]
)
def test_domain_keys_are_energy_names(name: str) -> None:
    key = getattr(semconv, name)("package_0")
    assert key.startswith(semconv.ENERGY_NAMESPACE) and key.startswith(semconv.EXPORTED_ATTRIBUTE_PREFIXES)
