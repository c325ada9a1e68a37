"""Every TraceQL query shipped compares a double attribute with a double literal.

Tempo (2.9) matches an integer literal only against integer columns and a float literal only
against float ones (grafana/tempo#4332): ``{ span.energy.joules > 100 }`` never matches,
because otel-joules sets ``energy.joules`` as a double; ``{ span.energy.joules > 100.0 }``
does. The same holds for an aggregate over a double attribute (``| sum(span.x) > 10000.0``),
and the other way round for the integer attributes (``process.pid``).

Which attributes are doubles comes from the span attribute table (docs/attributes.md) (doubles unless
marked ``(string)``, ``(bool)`` or ``(int)``; ``tests/test_semconv.py`` checks that table
against ``otel_joules.semconv``). The queries are found in every shipped file: the
dashboards, Grafana's provisioning, the Tempo configuration's comments, collector/README.md
and the documentation (README.md, docs/*.md).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

import pytest
import yaml

from otel_joules import semconv
from tests.helpers.docs import documentation_files, documentation_text
from tests.helpers.processes import REPO

COLLECTOR_DIR = REPO / "collector"

# --- which attributes are doubles -----------------------------------------------------------


@dataclass(frozen=True)
class AttributeTypes:
    """The span attribute names of README's table, by type; ``<domain>``-style names as patterns."""

    doubles: tuple[re.Pattern[str], ...]
    integers: tuple[re.Pattern[str], ...]

    def is_double(self, key: str) -> bool:
        return any(p.fullmatch(key) for p in self.doubles)

    def is_integer(self, key: str) -> bool:
        return any(p.fullmatch(key) for p in self.integers)


def _name_pattern(name: str) -> re.Pattern[str]:
    """``energy.<domain>.joules`` -> a pattern matching ``energy.package_0.joules``."""
    parts = re.split(r"<[^>]+>", name)
    return re.compile(r"[a-z0-9_]+".join(re.escape(part) for part in parts))


def attribute_types(readme: str) -> AttributeTypes:
    """The table under README's "Span attributes (doubles unless noted ...)": each first cell's names and type."""
    start = readme.index("Span attributes (doubles unless noted")
    table = re.search(r"(?:^\|.*\|\n)+", readme[start:], flags=re.M)
    assert table, "README.md has no span attribute table after 'Span attributes (doubles unless noted'"
    doubles, integers = [], []
    for row in table.group(0).splitlines()[2:]:
        cell = row.split("|")[1]
        marked = re.search(r"\((string|bool|int)\)", cell)
        for name in re.findall(r"`([^`]+)`", cell):
            if not name.startswith((semconv.ENERGY_NAMESPACE, semconv.CARBON_NAMESPACE, "process.", "training.")):
                continue
            if marked is None:
                doubles.append(_name_pattern(name))
            elif marked.group(1) == "int":
                integers.append(_name_pattern(name))
    return AttributeTypes(tuple(doubles), tuple(integers))


TYPES = attribute_types(documentation_text())


def test_the_attribute_table_is_read_as_the_semconv_module_defines() -> None:
    for key in (semconv.ENERGY_JOULES, semconv.ENERGY_WATTS, semconv.ENERGY_ATTRIBUTED_JOULES,
                semconv.ENERGY_ATTRIBUTED_SELF_JOULES, semconv.ENERGY_ATTRIBUTED_SELF_CO2EQ_GRAMS,
                semconv.CARBON_INTENSITY_GCO2EQ_PER_KWH, semconv.CARBON_PUE, semconv.domain_joules_key("nvidia_gpu_0")):
        assert TYPES.is_double(key), key
    for key in (semconv.ENERGY_SOURCE, semconv.ENERGY_BELOW_RESOLUTION, semconv.ENERGY_ATTRIBUTION,
                semconv.CARBON_INTENSITY_SOURCE, semconv.domain_method_key("nvidia_gpu_0"), semconv.PROCESS_PID):
        assert not TYPES.is_double(key), key
    assert TYPES.is_integer(semconv.PROCESS_PID) and TYPES.is_integer(semconv.TRAINING_EPOCH_NUMBER)


# --- the queries ----------------------------------------------------------------------------

#: A spanset (``{ span.x > 1.0 && ... }``, or ``{ }`` before a pipeline) and the pipeline after it.
_QUERY = re.compile(r"\{\s*(?:[^{}\n]*\b(?:span|resource|event|link)\.|\.)[^{}\n]*\}(?:\s*\|[^\n]*)?|\{\s*\}\s*\|[^\n]*")
_ATTRIBUTE = r"(?:(?:span|resource|event|link)\.|(?<![\w.])\.)(?P<{name}>[A-Za-z0-9_.]*[A-Za-z0-9_])"
_OPERATOR = r"(?:!=|>=|<=|=|>|<)"
_NUMBER = r"(?P<{name}>-?\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)(?![\w.])"
_AGGREGATE = r"(?:\b(?:sum|avg|min|max|quantile_over_time|sum_over_time|avg_over_time|min_over_time|max_over_time)\(\s*)"
#: ``attr OP literal``, ``literal OP attr``, ``sum(attr) OP literal``.
_COMPARISONS = (
    re.compile(_AGGREGATE + "?" + _ATTRIBUTE.format(name="key") + r"\s*\)?\s*" + _OPERATOR + r"\s*" + _NUMBER.format(name="literal")),
    re.compile(_NUMBER.format(name="literal") + r"\s*" + _OPERATOR + r"\s*" + _AGGREGATE + "?" + _ATTRIBUTE.format(name="key")),
)


def shipped_files() -> list[Path]:
    """Every file shipped that may hold a query: README.md, docs/*.md and collector/'s docs and configs (not the build output)."""
    files = documentation_files() + sorted(p for p in COLLECTOR_DIR.rglob("*")
                              if p.suffix in {".md", ".json", ".yaml", ".yml"} and "_build" not in p.relative_to(COLLECTOR_DIR).parts)
    return [p for p in files if p.is_file()]


def _strings(value: Any) -> Iterator[str]:
    """Every string inside parsed JSON or YAML."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _code(text: str) -> Iterator[str]:
    """Markdown code: every fenced block's lines and every inline code span (table pipes unescaped)."""
    text = text.replace("\\|", "|")
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M):
        yield from block.splitlines()
    yield from re.findall(r"`([^`\n]+)`", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M))


def candidate_texts(path: Path) -> Iterator[str]:
    """Where a query can be in a file: markdown's code; JSON's and YAML's strings, and code in YAML comments."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".md":
        yield from _code(text)
    elif path.suffix == ".json":
        yield from _strings(json.loads(text))
    else:
        yield from _strings(yaml.safe_load(text))
        for comment in re.findall(r"(?:^|\s)#(.*)$", text, flags=re.M):
            yield from _code(comment)


def traceql_queries(texts: Iterable[str]) -> list[str]:
    """Every TraceQL query in ``texts``."""
    return [m.group(0).strip() for text in texts for m in _QUERY.finditer(text)]


def query_problems(query: str, types: AttributeTypes = TYPES) -> list[str]:
    """An integer literal compared with a double attribute (or a double literal with an integer one)."""
    problems = []
    for pattern in _COMPARISONS:
        for match in pattern.finditer(query):
            key, literal = match.group("key"), match.group("literal")
            is_integer_literal = re.fullmatch(r"-?\d+", literal) is not None
            if types.is_double(key) and is_integer_literal:
                problems.append(f"{query!r}: {key} is a double, {literal} an integer literal: Tempo never matches "
                                f"them (grafana/tempo#4332); write {literal}.0")
            elif types.is_integer(key) and not is_integer_literal:
                problems.append(f"{query!r}: {key} is an integer, {literal} a double literal: Tempo never matches them")
    return problems


def shipped_queries() -> dict[str, list[str]]:
    """``file -> queries`` of every shipped file that holds any."""
    found = {}
    for path in shipped_files():
        queries = traceql_queries(candidate_texts(path))
        if queries:
            found[path.relative_to(REPO).as_posix()] = queries
    return found


def test_queries_are_found_where_they_are_shipped() -> None:
    found = shipped_queries()
    assert "collector/grafana/dashboards/otel-joules-energy.json" in found, found
    assert len(found.get("collector/README.md", [])) >= 8, found
    assert any("sum_over_time" in q for q in found.get("collector/tempo.yaml", [])), found
    # Nothing that merely looks like braces is taken for a query.
    assert not any(q.startswith("{}") or "batch" in q for queries in found.values() for q in queries), found


@pytest.mark.parametrize(("where", "query"), [pytest.param(w, q, id=f"{w}: {q}") for w, qs in shipped_queries().items() for q in qs])
def test_no_shipped_query_compares_a_double_attribute_with_an_integer(where: str, query: str) -> None:
    assert query_problems(query) == [], where


@pytest.mark.parametrize(
    ("query", "bad"),
    [
        ("{ span.energy.joules > 100 }", True),
        ("{ span.energy.joules > 100.0 }", False),
        ("{ .energy.watts >= 0 }", True),
        ("{ 100 < span.energy.joules }", True),
        ('{ resource.service.name = "x" && span.energy.nvidia_gpu_0.joules > 50 }', True),
        ("{ span.energy.attributed.self.joules > 0.0 } | sum(span.energy.attributed.self.joules) > 10000", True),
        ("{ span.energy.attributed.self.joules > 0.0 } | sum(span.energy.attributed.self.joules) > 10000.0", False),
        ("{ span.carbon.intensity.gco2eq_per_kwh > 300 }", True),
        ('{ span.energy.source = "estimate" }', False),
        ("{ span.process.exit.code != 0 }", False),
        ("{ span.process.exit.code != 0.0 }", True),
        ("{ span:duration > 100ms && span.energy.joules > 1e3 }", False),
    ],
)
def test_the_check_tells_integer_from_double_literals(query: str, bad: bool) -> None:
    assert traceql_queries(_code(f"| a | `{query.replace('|', chr(92) + '|')}` |")) == [query]
    assert bool(query_problems(query)) is bad, query_problems(query)
