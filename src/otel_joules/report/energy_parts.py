"""A span's or epoch's energy split by kind (CPU, memory, GPU, other), each labelled measured or estimate.

Kinds come from the per-domain attributes (``energy.<domain>.joules``) or, for an
attributed share, the per-kind shares; what no kind covers is ``other``. A domain's kind is the
one the span's ``energy.domain_kinds`` gives it (the sensor's ``Domain.kind``; the platform, psys,
counts as CPU, as in attribution); a domain it does not list adds to no kind. Every span otel-joules
measures carries that attribute (a training run's simulated devices included). Only a span without
it, from an export written before spans carried it, is classified by its domain ids
(:func:`_kind_by_id`): those files cannot be rewritten, and their ids are the few that existed then.
A ``partial`` span
(a domain missing at its start or end) labels the domains it has by their methods, as a
``mixed`` one does; its ``partial`` label goes to the run (:func:`merge_sources`).
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

from otel_joules.attribution.shares import ATTRIBUTION_KIND
from otel_joules.report.model import EnergyPart, SpanRow
from otel_joules.semconv import (
    ATTRIBUTED_KIND_KEYS,
    ENERGY_DOMAIN_KINDS,
    ENERGY_PLATFORM_DOMAIN,
    ENERGY_SOURCE,
    KIND_CPU,
    KIND_GPU,
    KIND_MEMORY,
    SOURCE_ESTIMATE,
    SOURCE_MEASURED,
    SOURCE_MIXED,
    SOURCE_PARTIAL,
    domain_joules_key,
    domain_method_key,
    domain_missing_key,
)
from otel_joules.sensors.base import Method, parse_domain_kinds


# ``energy.<domain>.joules``: a domain id has no dot, which leaves out energy.joules and the
# per-kind and self shares (energy.attributed.joules itself matches as "attributed", a name
# no domain is named, so it adds to no kind).
_DOMAIN_JOULES_RE = re.compile(r"^energy\.([A-Za-z0-9_\-]+)\.joules$")
# ``energy.<domain>.missing``, from semconv's pattern.
_MISSING_PREFIX, _MISSING_SUFFIX = domain_missing_key("\0").split("\0")
_DOMAIN_MISSING_RE = re.compile(f"^{re.escape(_MISSING_PREFIX)}([A-Za-z0-9_\\-]+){re.escape(_MISSING_SUFFIX)}$")


def _kind_by_id(domain_id: str, has_package: bool) -> str | None:
    """The kind a domain adds to, by its id: only for old exports, whose spans lack ``energy.domain_kinds``.

    Such a file is all the report has, and the ids of that time (``package*``, ``dram*``, ``nvidia_gpu*``, the
    estimates, carbontracker's ``sim_*``) said their kind; a newer sensor's id is not guessed (its energy stays
    in ``other``), since every newer span carries the kinds. None for one inside another (core, uncore; psys
    beside a package) and for an id these rules do not know."""
    if domain_id.startswith(("core", "uncore")):
        return None
    if domain_id.startswith("psys"):
        return None if has_package else KIND_CPU
    if domain_id.startswith("package") or domain_id in ("cpu_estimate", "sim_cpu"):
        return KIND_CPU
    if domain_id.startswith("dram") or domain_id == "memory_estimate":
        return KIND_MEMORY
    if domain_id.startswith("nvidia_gpu") or domain_id == "sim_gpu":
        return KIND_GPU
    return None  # unknown: its energy stays in "other"


def merge_sources(sources: Iterable[str | None]) -> str | None:
    """One label for several: ``partial`` if one is (the sum is low whatever the others are), else the one they
    share, ``mixed`` if they differ, None if none is known."""
    known = {source for source in sources if source is not None}
    if not known:
        return None
    if SOURCE_PARTIAL in known:
        return SOURCE_PARTIAL
    return known.pop() if len(known) == 1 else SOURCE_MIXED


def _domain_source(span: SpanRow, domain_id: str) -> str | None:
    source = span.attributes.get(ENERGY_SOURCE)
    if source in (SOURCE_MEASURED, SOURCE_ESTIMATE):
        return str(source)
    if source in (SOURCE_MIXED, SOURCE_PARTIAL):
        method = span.attributes.get(domain_method_key(domain_id))
        return SOURCE_ESTIMATE if method == Method.ESTIMATE.value else SOURCE_MEASURED
    return None


def span_source(span: SpanRow) -> str | None:
    """The span's ``energy.source``, or None."""
    source = span.attributes.get(ENERGY_SOURCE)
    return str(source) if isinstance(source, str) and source else None


def missing_domains(span: SpanRow) -> list[str]:
    """The domains a span says it leaves out (``energy.<domain>.missing``), sorted."""
    return sorted(m.group(1) for key in span.attributes if (m := _DOMAIN_MISSING_RE.match(key)) and span.attributes[key] is True)


def platform_reading(span: SpanRow) -> tuple[str, float] | None:
    """(domain id, joules) of the whole-platform reading a span carries beside the components it counts (its
    ``energy.platform.domain``, which the meter chose as the broadest by its sensor's word), or None: a span
    without one, or whose reading of it is missing or is among the components it counts."""
    domain_id = span.attributes.get(ENERGY_PLATFORM_DOMAIN)
    if not isinstance(domain_id, str) or not domain_id:
        return None
    listed = parse_domain_kinds(span.attributes.get(ENERGY_DOMAIN_KINDS))
    if listed is None or domain_id in listed:
        return None
    value = span.number(domain_joules_key(domain_id))
    return None if value is None else (domain_id, value)


def span_parts(span: SpanRow, total: float, attributed: bool) -> dict[str, tuple[float, str | None]]:
    """``{kind: (joules, source)}`` of one span; what no kind covers is ``other``."""
    domains: dict[str, list[tuple[float, str | None]]] = {}
    ids = [m.group(1) for key in span.attributes if (m := _DOMAIN_JOULES_RE.match(key))]
    carried = span.attributes.get(ENERGY_DOMAIN_KINDS)
    listed = parse_domain_kinds(carried)
    has_package = listed is None and any(i.startswith("package") for i in ids)
    for domain_id in ids:
        if listed is not None:
            # The attribute lists exactly the domains that add to the total; the others are detail.
            kind = ATTRIBUTION_KIND.get(listed[domain_id]) if domain_id in listed else None
        else:
            kind = _kind_by_id(domain_id, has_package)
        value = span.number(domain_joules_key(domain_id))
        if kind is not None and value is not None:
            domains.setdefault(kind, []).append((value, _domain_source(span, domain_id)))
    parts: dict[str, tuple[float, str | None]] = {}
    for kind in ATTRIBUTED_KIND_KEYS:
        sources = [source for _, source in domains.get(kind, ())]
        if attributed:
            value = span.number(ATTRIBUTED_KIND_KEYS[kind])
        else:
            value = sum(j for j, _ in domains[kind]) if kind in domains else None
        if value is not None:
            parts[kind] = (value, merge_sources(sources) if sources else span_source(span))
    rest = total - sum(j for j, _ in parts.values())
    if abs(rest) > 1e-9 * max(abs(total), 1.0):
        parts["other"] = (rest, span_source(span))
    return parts


def sum_parts(per_span: Iterable[Mapping[str, tuple[float, str | None]]]) -> tuple[EnergyPart, ...]:
    """The parts of several spans or epochs added up by kind, in the report's order of kinds."""
    joules: dict[str, float] = {}
    sources: dict[str, list[str | None]] = {}
    for parts in per_span:
        for kind, (value, source) in parts.items():
            joules[kind] = joules.get(kind, 0.0) + value
            sources.setdefault(kind, []).append(source)
    order = [*ATTRIBUTED_KIND_KEYS, "cpu+memory", "other"]
    return tuple(
        EnergyPart(kind, joules[kind], merge_sources(sources[kind])) for kind in order if kind in joules
    )
