"""Structure of the observability stack in ``collector/``.

No container runtime exists where these tests run, so the stack is never started
here. What can be checked without one is checked: every file parses; the Collector's
pipelines only name components that are defined, and use every component defined;
connectors sit between two pipelines of types they support; the compose services
mount files that exist at the paths their commands read; hosts and ports agree
across files; the dashboard only queries metric and label names the Collector
produces from otel-joules' telemetry (translated the way the prometheus exporter
translates them).

Each checker returns a list of problems. The tests run it on the real files (no
problem expected) and on broken copies (the specific problem expected), so every
check is shown to be able to fail.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from tests.helpers.processes import REPO

COLLECTOR_DIR = REPO / "collector"

# --- otel-joules' telemetry contract (issue texts: names are a contract) -------------

#: Span attributes the library sets (doubles, except energy.source).
LIBRARY_SPAN_ATTRIBUTES = frozenset({
    "energy.joules", "energy.watts", "energy.source", "energy.co2eq.grams",
    "energy.attributed.joules", "energy.attributed.self.joules",
    "energy.attributed.co2eq.grams", "energy.attributed.self.co2eq.grams",
})
#: What the sum connector must add up: each span's own attributed share (it adds up
#: across spans); never the interval energy, which nested and concurrent spans overlap in.
SUMMED_SPAN_ATTRIBUTES = ("energy.attributed.self.joules", "energy.attributed.self.co2eq.grams")
NEVER_SUMMED_SPAN_ATTRIBUTES = frozenset({"energy.joules", "energy.co2eq.grams", "energy.attributed.joules",
                                          "energy.attributed.co2eq.grams"})
#: ``energy.<domain>.joules`` for every measured domain, e.g. energy.package_0.joules.
LIBRARY_DOMAIN_ATTRIBUTE = re.compile(r"^energy\.[a-z0-9_]+\.joules$")
#: Resource attributes a TraceQL query or a transform may rely on.
LIBRARY_RESOURCE_ATTRIBUTES = frozenset({"service.name", "host.name"})


@dataclass(frozen=True)
class InstrumentSpec:
    """One metric the library exports (hardware semantic conventions)."""

    name: str
    unit: str
    is_counter: bool
    attributes: tuple[str, ...]


_DEVICE_ATTRIBUTES = ("energy.method", "energy.source", "hw.id", "hw.name", "hw.parent", "hw.type")
_HOST_ATTRIBUTES = ("energy.source", "hw.id", "hw.name")
#: Checked against what otel_joules.metrics really exports (test_library_metrics_match_the_contract).
LIBRARY_METRICS = (
    InstrumentSpec("hw.energy", "J", True, _DEVICE_ATTRIBUTES),
    InstrumentSpec("hw.power", "W", False, _DEVICE_ATTRIBUTES),
    InstrumentSpec("hw.host.energy", "J", True, _HOST_ATTRIBUTES),
    InstrumentSpec("hw.host.power", "W", False, _HOST_ATTRIBUTES),
    # This process's share per hw.type (issue 9): what adds up across processes and hosts.
    InstrumentSpec("process.energy", "J", True, ("energy.source", "hw.type")),
    InstrumentSpec("process.power", "W", False, ("energy.source", "hw.type")),
)
#: Issue 9's per-process metrics (names fixed for this round); the dashboard has panels on them.
ISSUE_9_METRICS = (
    InstrumentSpec("process.energy", "J", True, ("energy.source", "hw.type")),
    InstrumentSpec("process.power", "W", False, ("energy.source", "hw.type")),
)
#: Every panel's description starts with the path it needs (see collector/README.md).
PANEL_PATHS = ("Path: the Collector only", "Path: the Collector or a direct Prometheus scrape", "Path: Tempo")

#: Component types of the contrib distribution this configuration may use.
KNOWN_COMPONENT_TYPES = {
    "receivers": {"otlp"},
    "processors": {"batch", "transform", "deltatocumulative", "memory_limiter"},
    "exporters": {"otlp", "otlphttp", "prometheus", "prometheusremotewrite", "debug"},
    "connectors": {"sum", "forward"},
}
#: (exporter pipeline type, receiver pipeline type) pairs each connector supports.
CONNECTOR_PIPELINE_PAIRS = {
    "sum": {("traces", "metrics"), ("metrics", "metrics"), ("logs", "metrics")},
    "forward": {("traces", "traces"), ("metrics", "metrics"), ("logs", "logs")},
}
PIPELINE_TYPES = {"traces", "metrics", "logs"}

# --- Prometheus translation (mirrors the prometheus exporter's normalizeName) --------

_UNIT_WORDS = {
    "d": "days", "h": "hours", "min": "minutes", "s": "seconds", "ms": "milliseconds",
    "us": "microseconds", "ns": "nanoseconds", "By": "bytes", "m": "meters", "V": "volts",
    "A": "amperes", "J": "joules", "W": "watts", "g": "grams", "Cel": "celsius",
    "Hz": "hertz", "1": "", "%": "percent",
}
_PER_UNIT_WORDS = {"s": "second", "m": "minute", "h": "hour", "d": "day", "w": "week", "mo": "month", "y": "year"}


def _tokens(text: str) -> list[str]:
    return [t for t in re.split(r"[^A-Za-z0-9]+", text) if t]


def prometheus_metric_name(name: str, unit: str, *, is_counter: bool, is_gauge: bool = False) -> str:
    """Name the Collector's prometheus exporter gives an OTel metric (default translation)."""
    tokens = _tokens(name)
    main, _, per = unit.partition("/")
    main = main.strip()
    if main and "{" not in main:
        word = "_".join(_tokens(_UNIT_WORDS.get(main, main)))
        if word and word not in tokens:
            tokens.append(word)
    per = per.strip()
    if per and "{" not in per:
        word = "_".join(_tokens(_PER_UNIT_WORDS.get(per, per)))
        if word and word not in tokens:
            tokens += ["per", word]
    if is_counter:
        tokens = [t for t in tokens if t != "total"] + ["total"]
    if unit == "1" and is_gauge:
        tokens = [t for t in tokens if t != "ratio"] + ["ratio"]
    result = "_".join(tokens)
    return "_" + result if result[:1].isdigit() else result


def prometheus_label_name(key: str) -> str:
    """Label name the exporter gives an attribute key (invalid characters become ``_``)."""
    label = re.sub(r"[^A-Za-z0-9_]", "_", key)
    return "key_" + label if label[:1].isdigit() else label


# --- PromQL / TraceQL scanning ------------------------------------------------------

_PROMQL_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
                    "group_left", "group_right", "inf", "nan"}
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)")


def promql_metric_names(expr: str) -> list[str]:
    """Metric names selected by a PromQL expression (function names, labels, numbers dropped)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)
    text = re.sub(r"\{[^{}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = _GROUPING.sub(" ", text)
    text = re.sub(r"\$\{[^}]*\}|\$\w+", " ", text)
    text = re.sub(r"\boffset\s+\S+", " ", text)
    text = re.sub(r"(?<![A-Za-z0-9_:])\d+(?:\.\d+)?(?:[eE][+-]?\d+)?", " ", text)
    names = []
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        rest = text[match.end():].lstrip()
        if rest.startswith("(") or match.group(0).lower() in _PROMQL_KEYWORDS:
            continue
        names.append(match.group(0))
    return names


def promql_label_names(expr: str) -> set[str]:
    """Label names a PromQL expression groups, joins or filters by."""
    labels: set[str] = set()
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)
    for group in _GROUPING.findall(re.sub(r"\{[^{}]*\}", " ", text)):
        labels.update(part.strip() for part in group.split(",") if part.strip())
    for block in re.findall(r"\{([^{}]*)\}", text):
        labels.update(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", block))
    return labels


def traceql_attributes(query: str) -> list[tuple[str, str]]:
    """(scope, attribute) pairs a TraceQL query reads, e.g. ("span", "energy.joules")."""
    return re.findall(r"\b(span|resource)\.([A-Za-z0-9_.]*[A-Za-z0-9_])", query)


def is_library_span_attribute(key: str) -> bool:
    """True for span attribute names otel-joules sets."""
    return key in LIBRARY_SPAN_ATTRIBUTES or bool(LIBRARY_DOMAIN_ATTRIBUTE.match(key))


# --- the stack as loaded from disk --------------------------------------------------


@dataclass(frozen=True)
class Stack:
    """Every file of the stack, parsed; ``base_dir`` is where compose paths resolve."""

    base_dir: Path
    collector: dict[str, Any]
    compose: dict[str, Any]
    prometheus: dict[str, Any]
    tempo: dict[str, Any]
    datasources: dict[str, Any]
    dashboard_providers: dict[str, Any]
    dashboards: dict[str, dict[str, Any]]


def load_yaml(path: Path) -> Any:
    """Parse one YAML file."""
    with path.open(encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def load_stack(base_dir: Path = COLLECTOR_DIR) -> Stack:
    """Read the stack's files from ``base_dir``."""
    return Stack(
        base_dir=base_dir,
        collector=load_yaml(base_dir / "otelcol-config.yaml"),
        compose=load_yaml(base_dir / "compose.yaml"),
        prometheus=load_yaml(base_dir / "prometheus.yml"),
        tempo=load_yaml(base_dir / "tempo.yaml"),
        datasources=load_yaml(base_dir / "grafana/provisioning/datasources/datasources.yaml"),
        dashboard_providers=load_yaml(base_dir / "grafana/provisioning/dashboards/dashboards.yaml"),
        dashboards={
            path.name: json.loads(path.read_text(encoding="utf-8"))
            for path in sorted((base_dir / "grafana/dashboards").glob("*.json"))
        },
    )


def _kind(component_id: str) -> str:
    return component_id.split("/", 1)[0]


def _host_port(endpoint: str) -> tuple[str, int | None]:
    endpoint = re.sub(r"^[a-z]+://", "", str(endpoint)).split("/", 1)[0]
    host, _, port = endpoint.rpartition(":")
    if not host:
        return port, None
    return host, int(port) if port.isdigit() else None


# --- checks: collector --------------------------------------------------------------


def check_pipelines(cfg: dict[str, Any]) -> list[str]:
    """Every named component defined, every defined component used, connectors bridging pipelines."""
    problems: list[str] = []
    defined = {section: dict(cfg.get(section) or {}) for section in ("receivers", "processors", "exporters", "connectors")}
    for section, components in defined.items():
        for component_id in components:
            if _kind(component_id) not in KNOWN_COMPONENT_TYPES[section]:
                problems.append(f"{section[:-1]} {component_id!r} has a type the configuration does not expect")
    for section in ("receivers", "exporters"):
        for clash in sorted(set(defined[section]) & set(defined["connectors"])):
            problems.append(f"{clash!r} is both a {section[:-1]} and a connector")

    pipelines = (cfg.get("service") or {}).get("pipelines") or {}
    if not pipelines:
        problems.append("service.pipelines is empty")
    used: dict[str, set[str]] = {section: set() for section in defined}
    connector_ends: dict[str, dict[str, set[str]]] = {c: {"exporter": set(), "receiver": set()} for c in defined["connectors"]}
    for pipeline_id, pipeline in pipelines.items():
        pipeline = pipeline or {}
        ptype = _kind(pipeline_id)
        if ptype not in PIPELINE_TYPES:
            problems.append(f"pipeline {pipeline_id!r} has unknown type {ptype!r}")
        for role, section in (("receivers", "receivers"), ("processors", "processors"), ("exporters", "exporters")):
            names = pipeline.get(role) or []
            if role != "processors" and not names:
                problems.append(f"pipeline {pipeline_id!r} has no {role}")
            for name in names:
                if name in defined[section]:
                    used[section].add(name)
                elif role != "processors" and name in defined["connectors"]:
                    used["connectors"].add(name)
                    connector_ends[name]["exporter" if role == "exporters" else "receiver"].add(ptype)
                else:
                    problems.append(f"pipeline {pipeline_id!r} names {role[:-1]} {name!r}, which is not defined")
    for section, components in defined.items():
        for component_id in components:
            if component_id not in used[section]:
                problems.append(f"{section[:-1]} {component_id!r} is defined but no pipeline uses it")
    for connector_id, ends in connector_ends.items():
        if not ends["exporter"] or not ends["receiver"]:
            problems.append(f"connector {connector_id!r} must be an exporter in one pipeline and a receiver in another")
            continue
        allowed = CONNECTOR_PIPELINE_PAIRS.get(_kind(connector_id), set())
        for exp_type in ends["exporter"]:
            if not any((exp_type, rec_type) in allowed for rec_type in ends["receiver"]):
                problems.append(f"connector {connector_id!r} cannot take {exp_type} into {sorted(ends['receiver'])}")
        for rec_type in ends["receiver"]:
            if not any((exp_type, rec_type) in allowed for exp_type in ends["exporter"]):
                problems.append(f"connector {connector_id!r} cannot produce {rec_type} from {sorted(ends['exporter'])}")
    return problems


def check_otlp_receiver(cfg: dict[str, Any]) -> list[str]:
    """OTLP on gRPC 4317 and HTTP 4318, on every interface (reachable from other containers)."""
    problems: list[str] = []
    protocols = (((cfg.get("receivers") or {}).get("otlp") or {}).get("protocols")) or {}
    for protocol, port in (("grpc", 4317), ("http", 4318)):
        endpoint = (protocols.get(protocol) or {}).get("endpoint")
        if endpoint is None:
            problems.append(f"otlp receiver has no {protocol} endpoint")
        elif _host_port(endpoint) != ("0.0.0.0", port):
            problems.append(f"otlp {protocol} endpoint is {endpoint!r}, expected 0.0.0.0:{port}")
    return problems


def _set_attribute_keys(statements: Any, scope: str) -> set[str]:
    """Attribute keys a transform's statements ``set(...)``."""
    text = json.dumps(statements)
    return set(re.findall(r'set\(\s*(?:' + scope + r'\.)?attributes\[\\"([^\\"]+)\\"\]', text))


def _pipelines_with(cfg: dict[str, Any], role: str, name: str) -> dict[str, dict[str, Any]]:
    pipelines = (cfg.get("service") or {}).get("pipelines") or {}
    return {pid: p for pid, p in pipelines.items() if name in ((p or {}).get(role) or [])}


def check_sum_connectors(cfg: dict[str, Any]) -> list[str]:
    """The sum connector reads otel-joules' span attributes, groups by keys that exist, one key per metric."""
    problems: list[str] = []
    connectors = cfg.get("connectors") or {}
    processors = cfg.get("processors") or {}
    sum_ids = [c for c in connectors if _kind(c) == "sum"]
    sources: set[str] = set()
    for connector_id in sum_ids:
        spans = (connectors[connector_id] or {}).get("spans") or {}
        if not spans:
            problems.append(f"connector {connector_id!r} defines no span metrics")
        feeding = _pipelines_with(cfg, "exporters", connector_id)
        for metric, info in spans.items():
            info = info or {}
            source = info.get("source_attribute")
            sources.add(source)
            if not source or not is_library_span_attribute(source):
                problems.append(f"sum metric {metric!r} sums {source!r}, which otel-joules does not set on spans")
            keys = [a.get("key") for a in info.get("attributes") or []]
            if len(keys) > 1:
                problems.append(f"sum metric {metric!r} groups by {len(keys)} keys; the connector would add each value {len(keys)} times")
            for key in keys:
                if is_library_span_attribute(key):
                    continue
                missing = [pid for pid, p in feeding.items()
                           if not any(key in _set_attribute_keys((processors.get(proc) or {}).get("trace_statements"), "span")
                                      for proc in (p.get("processors") or []) if _kind(proc) == "transform")]
                if missing or not feeding:
                    problems.append(f"sum metric {metric!r} groups by {key!r}, which no transform sets in {missing or 'any feeding pipeline'}")
            if source in NEVER_SUMMED_SPAN_ATTRIBUTES:
                problems.append(f"sum metric {metric!r} sums {source!r}: spans overlap in it, sum energy.attributed.self.* instead")
            for condition in info.get("conditions") or []:
                if "IsRootSpan" in condition or "parent_span_id" in condition:
                    problems.append(f"sum metric {metric!r} counts root spans only ({condition!r}): services whose spans "
                                    "have a remote parent would be dropped; count every span's own share")
                for key in re.findall(r'attributes\["([^"]+)"\]', condition):
                    if not is_library_span_attribute(key):
                        problems.append(f"sum metric {metric!r} condition reads {key!r}, which otel-joules does not set")
    for needed in SUMMED_SPAN_ATTRIBUTES:
        if needed not in sources:
            problems.append(f"no sum connector metric sums {needed!r}")
    return problems


def check_trace_destinations(cfg: dict[str, Any], compose: dict[str, Any], tempo: dict[str, Any]) -> list[str]:
    """Traces reach Jaeger and Tempo over OTLP, at ports those services listen on."""
    problems: list[str] = []
    exporters = cfg.get("exporters") or {}
    services = set((compose.get("services") or {}).keys())
    tempo_grpc = (((((tempo.get("distributor") or {}).get("receivers") or {}).get("otlp") or {}).get("protocols") or {}).get("grpc") or {}).get("endpoint")
    listening = {"jaeger": 4317, "tempo": _host_port(tempo_grpc)[1] if tempo_grpc else None}
    reached: set[str] = set()
    for pid, pipeline in ((cfg.get("service") or {}).get("pipelines") or {}).items():
        if _kind(pid) != "traces":
            continue
        for exporter_id in (pipeline or {}).get("exporters") or []:
            if _kind(exporter_id) != "otlp" or exporter_id not in exporters:
                continue
            host, port = _host_port((exporters[exporter_id] or {}).get("endpoint", ""))
            if host not in services:
                problems.append(f"exporter {exporter_id!r} sends to {host!r}, which is not a compose service")
            if host in listening and port != listening[host]:
                problems.append(f"exporter {exporter_id!r} sends to port {port}, but {host} listens for OTLP gRPC on {listening[host]}")
            reached.add(host)
    for backend in ("jaeger", "tempo"):
        if backend not in reached:
            problems.append(f"no traces pipeline exports to {backend}")
    return problems


def produced_prometheus_metrics(cfg: dict[str, Any]) -> dict[str, set[str]]:
    """Prometheus metric names the Collector exposes from otel-joules' telemetry, with their labels."""
    pipelines = (cfg.get("service") or {}).get("pipelines") or {}
    exporters = cfg.get("exporters") or {}
    processors = cfg.get("processors") or {}
    connectors = cfg.get("connectors") or {}
    produced: dict[str, set[str]] = {}
    for pid, pipeline in pipelines.items():
        pipeline = pipeline or {}
        if _kind(pid) != "metrics" or not any(_kind(e) == "prometheus" and e in exporters for e in pipeline.get("exporters") or []):
            continue
        labels = {"job", "instance"}
        for proc in pipeline.get("processors") or []:
            if _kind(proc) == "transform" and proc in processors:
                labels |= {prometheus_label_name(k) for k in _set_attribute_keys(processors[proc].get("metric_statements"), "datapoint")}
        for receiver in pipeline.get("receivers") or []:
            if _kind(receiver) == "otlp" and receiver in (cfg.get("receivers") or {}):
                # Resource attributes other than service.name / service.instance.id.
                produced["target_info"] = labels | {prometheus_label_name(k) for k in LIBRARY_RESOURCE_ATTRIBUTES - {"service.name"}}
                for spec in LIBRARY_METRICS + ISSUE_9_METRICS:
                    name = prometheus_metric_name(spec.name, spec.unit, is_counter=spec.is_counter, is_gauge=not spec.is_counter)
                    produced[name] = labels | {prometheus_label_name(a) for a in spec.attributes}
            elif _kind(receiver) == "sum" and receiver in connectors:
                for metric, info in ((connectors[receiver] or {}).get("spans") or {}).items():
                    keys = {prometheus_label_name(a["key"]) for a in (info or {}).get("attributes") or []}
                    produced[prometheus_metric_name(metric, "", is_counter=True)] = labels | keys
    return produced


# --- checks: dashboard, compose, cross-file -----------------------------------------


def _panels(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    result = []
    for panel in panels:
        result.append(panel)
        result.extend(_panels(panel.get("panels") or []))
    return result


def check_dashboards(stack: Stack) -> list[str]:
    """Dashboard queries use provisioned data sources, produced metrics and labels, library attributes."""
    problems: list[str] = []
    produced = produced_prometheus_metrics(stack.collector)
    datasource_types = {d["uid"]: d["type"] for d in stack.datasources.get("datasources") or []}
    if not stack.dashboards:
        problems.append("no dashboard JSON under grafana/dashboards")
    for file_name, dashboard in stack.dashboards.items():
        panels = _panels(dashboard.get("panels") or [])
        if not panels:
            problems.append(f"{file_name}: no panels")
        for panel in panels:
            if panel.get("targets") and not str(panel.get("description", "")).startswith(PANEL_PATHS):
                problems.append(f"{file_name}: panel {panel.get('title')!r} does not say which path it needs "
                                f"(its description starts with one of {PANEL_PATHS})")
            for target in panel.get("targets") or []:
                where = f"{file_name}: panel {panel.get('title')!r}"
                uid = (target.get("datasource") or panel.get("datasource") or {}).get("uid")
                dstype = datasource_types.get(uid)
                if dstype is None:
                    problems.append(f"{where} uses data source {uid!r}, which is not provisioned")
                elif dstype == "prometheus":
                    expr = target.get("expr") or ""
                    names = promql_metric_names(expr)
                    if not names:
                        problems.append(f"{where}: query {expr!r} selects no metric")
                    labels: set[str] = set()
                    for name in names:
                        if name not in produced:
                            problems.append(f"{where}: metric {name!r} is not produced by the collector")
                        labels |= produced.get(name, set())
                    used = promql_label_names(expr) | set(re.findall(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}", target.get("legendFormat") or ""))
                    for label in sorted(used - labels):
                        problems.append(f"{where}: label {label!r} is not on {names}")
                elif dstype == "tempo":
                    for scope, key in traceql_attributes(target.get("query") or ""):
                        if scope == "span" and not is_library_span_attribute(key):
                            problems.append(f"{where}: TraceQL reads span.{key}, which otel-joules does not set")
                        if scope == "resource" and key not in LIBRARY_RESOURCE_ATTRIBUTES:
                            problems.append(f"{where}: TraceQL reads resource.{key}, which is not expected")
    wanted = {
        "energy per service": lambda names: any(n.startswith("span_") and n.endswith("_joules_total") for n in names),
        "power per device": lambda names: "hw_power_watts" in names,
        "CO2eq": lambda names: any("co2eq_grams" in n for n in names),
    }
    all_names = [n for d in stack.dashboards.values() for p in _panels(d.get("panels") or [])
                 for t in p.get("targets") or [] for n in promql_metric_names(t.get("expr") or "")]
    for topic, present in wanted.items():
        if not present(all_names):
            problems.append(f"no dashboard panel shows {topic}")
    return problems


def _mounts(service: dict[str, Any]) -> list[tuple[str, str]]:
    mounts = []
    for volume in service.get("volumes") or []:
        if isinstance(volume, dict):
            mounts.append((str(volume.get("source", "")), str(volume.get("target", ""))))
        else:
            parts = str(volume).split(":")
            mounts.append((parts[0], parts[1] if len(parts) > 1 else parts[0]))
    return mounts


def _service_by_image(compose: dict[str, Any], image_prefix: str) -> tuple[str, dict[str, Any]] | None:
    """The service running ``image_prefix``; one that only overrides the entrypoint (an init job) comes last."""
    found = [(name, service or {}) for name, service in (compose.get("services") or {}).items()
             if str((service or {}).get("image", "")).startswith(image_prefix)]
    found.sort(key=lambda item: "entrypoint" in item[1])
    return found[0] if found else None


def _flag(service: dict[str, Any], flag: str) -> str | None:
    command = service.get("command") or []
    if isinstance(command, str):
        command = command.split()
    for arg in command:
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def _mounted_file(stack: Stack, service: dict[str, Any], container_path: str) -> Path | None:
    """The host file behind ``container_path`` in ``service``, or None when nothing mounts it."""
    for source, target in _mounts(service):
        if source.startswith((".", "/")):
            if target == container_path:
                return (stack.base_dir / source).resolve()
            if container_path.startswith(target.rstrip("/") + "/"):
                return (stack.base_dir / source / container_path[len(target.rstrip("/")) + 1:]).resolve()
    return None


REQUIRED_IMAGES = {
    "collector": "otel/opentelemetry-collector-contrib:",
    "jaeger": "jaegertracing/jaeger:",
    "tempo": "grafana/tempo:",
    "prometheus": "prom/prometheus:",
    "grafana": "grafana/grafana:",
}


def check_compose(stack: Stack) -> list[str]:
    """Services exist, images are pinned, mounted files exist where commands read them."""
    problems: list[str] = []
    compose = stack.compose
    services = compose.get("services") or {}
    named_volumes = set((compose.get("volumes") or {}).keys())
    for role, prefix in REQUIRED_IMAGES.items():
        if _service_by_image(compose, prefix) is None:
            problems.append(f"no compose service runs {prefix}<tag> ({role})")
    for name, service in services.items():
        service = service or {}
        image = str(service.get("image", ""))
        if ":" not in image or image.endswith(":latest"):
            problems.append(f"service {name!r} image {image!r} is not pinned to a version")
        for source, _target in _mounts(service):
            if source.startswith((".", "/")):
                if not (stack.base_dir / source).exists():
                    problems.append(f"service {name!r} mounts {source!r}, which does not exist")
            elif source not in named_volumes:
                problems.append(f"service {name!r} mounts volume {source!r}, which is not declared")
        depends = service.get("depends_on") or []
        for dependency in depends if isinstance(depends, list) else depends.keys():
            if dependency not in services:
                problems.append(f"service {name!r} depends on {dependency!r}, which is not a service")

    expected_configs = (
        ("otel/opentelemetry-collector-contrib:", "--config", "otelcol-config.yaml"),
        ("grafana/tempo:", "-config.file", "tempo.yaml"),
        ("prom/prometheus:", "--config.file", "prometheus.yml"),
    )
    for prefix, flag, file_name in expected_configs:
        found = _service_by_image(compose, prefix)
        if found is None:
            continue
        name, service = found
        path = _flag(service, flag)
        mounted = _mounted_file(stack, service, path) if path else None
        if mounted != (stack.base_dir / file_name).resolve():
            problems.append(f"service {name!r} reads {flag}={path!r}, which does not mount {file_name}")

    collector = _service_by_image(compose, "otel/opentelemetry-collector-contrib:")
    if collector:
        published = {str(p).rsplit(":", 1)[-1].split("/")[0] for p in collector[1].get("ports") or []}
        for port in ("4317", "4318"):
            if port not in published:
                problems.append(f"collector does not publish OTLP port {port}")

    grafana = _service_by_image(compose, "grafana/grafana:")
    if grafana:
        _, service = grafana
        for sub in ("datasources/datasources.yaml", "dashboards/dashboards.yaml"):
            host_file = _mounted_file(stack, service, "/etc/grafana/provisioning/" + sub)
            if host_file is None or not host_file.is_file():
                problems.append(f"grafana does not see provisioning file {sub}")
        for provider in stack.dashboard_providers.get("providers") or []:
            path = (provider.get("options") or {}).get("path", "")
            for dashboard in stack.dashboards:
                host_file = _mounted_file(stack, service, path.rstrip("/") + "/" + dashboard)
                if host_file is None or not host_file.is_file():
                    problems.append(f"dashboard provider path {path!r} does not hold {dashboard}")
    return problems


def check_cross_references(stack: Stack) -> list[str]:
    """Prometheus scrapes the exporter's port; Grafana's data sources point at services and their ports."""
    problems: list[str] = []
    services = set((stack.compose.get("services") or {}).keys())
    prom_endpoint = ((stack.collector.get("exporters") or {}).get("prometheus") or {}).get("endpoint")
    exporter_port = _host_port(prom_endpoint)[1] if prom_endpoint else None
    collector = _service_by_image(stack.compose, "otel/opentelemetry-collector-contrib:")
    targets = [t for job in stack.prometheus.get("scrape_configs") or [] for sc in job.get("static_configs") or []
               for t in sc.get("targets") or []]
    if not any(collector and _host_port(t) == (collector[0], exporter_port) for t in targets):
        problems.append(f"prometheus does not scrape the collector's prometheus exporter on port {exporter_port}; targets: {targets}")
    if not any(job.get("honor_labels") for job in stack.prometheus.get("scrape_configs") or []):
        problems.append("prometheus renames the exporter's job label (service.name) to exported_job: set honor_labels")
    tempo_port = (stack.tempo.get("server") or {}).get("http_listen_port", 3200)
    default_ports = {"prometheus": 9090, "tempo": tempo_port, "jaeger": 16686}
    types = set()
    for datasource in stack.datasources.get("datasources") or []:
        types.add(datasource.get("type"))
        host, port = _host_port(datasource.get("url", ""))
        if host not in services:
            problems.append(f"data source {datasource.get('name')!r} points at {host!r}, which is not a compose service")
        expected = default_ports.get(datasource.get("type"))
        if expected is not None and port != expected:
            problems.append(f"data source {datasource.get('name')!r} uses port {port}, the service listens on {expected}")
    for needed in ("prometheus", "tempo", "jaeger"):
        if needed not in types:
            problems.append(f"no {needed} data source is provisioned")
    return problems


def check_stack(stack: Stack) -> list[str]:
    """Every check, on every file."""
    return (
        check_pipelines(stack.collector)
        + check_otlp_receiver(stack.collector)
        + check_sum_connectors(stack.collector)
        + check_trace_destinations(stack.collector, stack.compose, stack.tempo)
        + check_dashboards(stack)
        + check_compose(stack)
        + check_cross_references(stack)
    )


# --- tests --------------------------------------------------------------------------


def test_every_yaml_and_json_file_under_collector_parses() -> None:
    files = sorted(p for p in COLLECTOR_DIR.rglob("*") if p.suffix in {".yaml", ".yml", ".json"})
    names = {p.relative_to(COLLECTOR_DIR).as_posix() for p in files}
    assert {"otelcol-config.yaml", "compose.yaml", "prometheus.yml", "tempo.yaml",
            "grafana/provisioning/datasources/datasources.yaml",
            "grafana/provisioning/dashboards/dashboards.yaml"} <= names
    for path in files:
        text = path.read_text(encoding="utf-8")
        parsed = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        assert isinstance(parsed, dict) and parsed, f"{path} is empty or not a mapping"


def test_the_real_stack_has_no_problem() -> None:
    assert check_stack(load_stack()) == []


def test_library_metrics_match_the_contract(powercap: Any) -> None:
    """The names, units, kinds and attribute keys the dashboard relies on are what the library exports."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import Gauge, InMemoryMetricReader, Sum

    from otel_joules import EnergyMeter
    from otel_joules.metrics.instruments import EnergyMetrics

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    EnergyMetrics(EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False), provider)
    powercap.zones["package_0"].advance_joules(3.0)
    time.sleep(0.6)  # power needs two snapshots further apart than the instruments' reuse window
    exported = set()
    for resource_metrics in reader.get_metrics_data().resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                is_counter = isinstance(metric.data, Sum) and metric.data.is_monotonic
                assert is_counter or isinstance(metric.data, Gauge), metric.name
                keys = sorted({k for point in metric.data.data_points for k in point.attributes})
                exported.add(InstrumentSpec(metric.name, metric.unit, is_counter, tuple(keys)))
    provider.shutdown()
    # Issue 9's process.* metrics may already be there; nothing else.
    assert set(LIBRARY_METRICS) <= exported <= set(LIBRARY_METRICS) | set(ISSUE_9_METRICS), exported


def test_the_collector_produces_the_metric_names_the_dashboard_needs() -> None:
    produced = produced_prometheus_metrics(load_stack().collector)
    assert produced["hw_power_watts"] >= {"hw_id", "hw_type", "hw_name", "hw_parent", "energy_source", "job", "instance"}
    assert produced["hw_energy_joules_total"] >= {"hw_id", "hw_type", "hw_name"}
    assert "hw_host_energy_joules_total" in produced and "hw_host_power_watts" in produced
    assert produced["process_energy_joules_total"] >= {"hw_type", "energy_source", "job", "instance"}
    assert produced["target_info"] >= {"job", "instance", "host_name"}
    assert produced["span_energy_attributed_self_joules_total"] >= {"job", "span_name"}
    assert produced["span_energy_attributed_self_co2eq_grams_total"] >= {"job", "span_name"}


def test_library_sets_the_attributes_the_collector_sums(powercap: Any) -> None:
    """What the connector sums is set by the library: CO2eq of the shares by instrument(carbon_intensity=...)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import otel_joules

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    handle = otel_joules.instrument(provider, metrics_enabled=False, carbon_intensity=100.0, sysfs_root=powercap.sysfs_root)
    try:
        with provider.get_tracer("t").start_as_current_span("s"):
            powercap.zones["package_0"].advance_joules(1.0)
    finally:
        handle.uninstrument()
        provider.shutdown()
    (finished,) = exporter.get_finished_spans()
    assert set(SUMMED_SPAN_ATTRIBUTES) <= set(finished.attributes)


def readme_query_problems(readme: str, produced: dict[str, set[str]]) -> list[str]:
    """PromQL in the README's ``promql`` blocks and TraceQL in backticks use produced names only."""
    problems = []
    for block in re.findall(r"```promql\n(.*?)```", readme, flags=re.S):
        for line in block.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            names = promql_metric_names(line)
            labels = set().union(*(produced.get(n, set()) for n in names)) if names else set()
            problems += [f"README query {line!r}: metric {n!r} is not produced" for n in names if n not in produced]
            problems += [f"README query {line!r}: label {label!r} is not on {names}" for label in sorted(promql_label_names(line) - labels)]
    for query in re.findall(r"`(\{[^`]*\}[^`]*)`", readme):
        for scope, key in traceql_attributes(query):
            if scope == "span" and not is_library_span_attribute(key):
                problems.append(f"README TraceQL {query!r} reads span.{key}, which otel-joules does not set")
    return problems


def test_readme_queries_use_names_the_stack_produces() -> None:
    readme = (COLLECTOR_DIR / "README.md").read_text(encoding="utf-8")
    produced = produced_prometheus_metrics(load_stack().collector)
    assert "```promql" in readme and "{ span.energy.joules > 100 }" in readme
    assert readme_query_problems(readme, produced) == []
    broken = readme.replace("hw_power_watts{energy_source", "hw_power_total{energy_source").replace("span.energy.watts >", "span.energy.power >")
    problems = readme_query_problems(broken, produced)
    assert any("metric 'hw_power_total' is not produced" in p for p in problems), problems
    assert any("reads span.energy.power" in p for p in problems), problems


def test_readme_says_the_stack_was_not_started_here() -> None:
    readme = (COLLECTOR_DIR / "README.md").read_text(encoding="utf-8")
    assert "No container runtime exists" in readme and "never started" in readme


@pytest.mark.parametrize(
    ("name", "unit", "is_counter", "is_gauge", "expected"),
    [
        # Known truths of the exporter's translation (its normalize_name tests follow these rules).
        ("hw.power", "W", False, True, "hw_power_watts"),
        ("hw.energy", "J", True, False, "hw_energy_joules_total"),
        ("hw.host.energy", "J", True, False, "hw_host_energy_joules_total"),
        ("span.energy.joules", "", True, False, "span_energy_joules_total"),
        ("energy.joules", "J", True, False, "energy_joules_total"),  # unit already in the name
        ("system.cpu.utilization", "1", False, True, "system_cpu_utilization_ratio"),
        ("requests.total", "", True, False, "requests_total"),
        ("network.io", "By/s", True, False, "network_io_bytes_per_second_total"),
        ("queue.size", "{items}", False, True, "queue_size"),
        ("2xx.responses", "", True, False, "_2xx_responses_total"),
    ],
)
def test_prometheus_metric_name_follows_the_exporter(name: str, unit: str, is_counter: bool, is_gauge: bool, expected: str) -> None:
    assert prometheus_metric_name(name, unit, is_counter=is_counter, is_gauge=is_gauge) == expected


@pytest.mark.parametrize(
    ("expr", "metrics", "labels"),
    [
        ("sum by (job) (rate(span_root_energy_joules_total[$__rate_interval]))", ["span_root_energy_joules_total"], {"job"}),
        ('hw_power_watts{hw_type="gpu", host_name=~"a.*"} / on(host_name) group_left hw_host_power_watts',
         ["hw_power_watts", "hw_host_power_watts"], {"hw_type", "host_name"}),
        ("sum(increase(hw_host_energy_joules_total[1h] offset 5m)) / 3.6e6", ["hw_host_energy_joules_total"], set()),
        ('sort_desc(sum without (instance) (x_total{a="by (b)"})) > bool 1', ["x_total"], {"instance", "a"}),
    ],
)
def test_promql_scanner(expr: str, metrics: list[str], labels: set[str]) -> None:
    assert promql_metric_names(expr) == metrics
    assert promql_label_names(expr) == labels


def test_traceql_scanner() -> None:
    assert traceql_attributes('{ span.energy.joules > 100 && resource.service.name = "x" }') == [
        ("span", "energy.joules"), ("resource", "service.name")]


# Broken copies: each mutation must make the checker report the named problem.

Mutation = Callable[[Stack], Stack]


def _collector(change: Callable[[dict[str, Any]], None]) -> Mutation:
    def mutate(stack: Stack) -> Stack:
        cfg = copy.deepcopy(stack.collector)
        change(cfg)
        return replace(stack, collector=cfg)
    return mutate


def _field(attr: str, change: Callable[[dict[str, Any]], None]) -> Mutation:
    def mutate(stack: Stack) -> Stack:
        data = copy.deepcopy(getattr(stack, attr))
        change(data)
        return replace(stack, **{attr: data})
    return mutate


def _pipelines(cfg: dict[str, Any]) -> dict[str, Any]:
    return cfg["service"]["pipelines"]


def _first_panel_target(dashboards: dict[str, Any]) -> dict[str, Any]:
    dashboard = next(iter(dashboards.values()))
    return next(t for p in _panels(dashboard["panels"]) for t in p.get("targets", []) if "expr" in t)


def _tempo_target(dashboards: dict[str, Any]) -> dict[str, Any]:
    dashboard = next(iter(dashboards.values()))
    return next(t for p in _panels(dashboard["panels"]) for t in p.get("targets", []) if t.get("queryType") == "traceql")


SELF_JOULES_METRIC = "span.energy.attributed.self.joules"

MUTATIONS: list[tuple[str, Mutation, str]] = [
    ("undefined exporter", _collector(lambda c: c["exporters"].pop("otlp/tempo")),
     "names exporter 'otlp/tempo', which is not defined"),
    ("undefined processor", _collector(lambda c: _pipelines(c)["traces"]["processors"].append("memory_limiter")),
     "names processor 'memory_limiter', which is not defined"),
    ("unused exporter", _collector(lambda c: c["exporters"].update({"debug": {}})),
     "exporter 'debug' is defined but no pipeline uses it"),
    ("unused processor", _collector(lambda c: c["processors"].update({"memory_limiter": {"check_interval": "1s"}})),
     "processor 'memory_limiter' is defined but no pipeline uses it"),
    ("unused receiver", _collector(lambda c: c["receivers"].update({"otlp/second": {}})),
     "receiver 'otlp/second' is defined but no pipeline uses it"),
    ("connector only exported to", _collector(lambda c: _pipelines(c)["metrics"]["receivers"].remove("sum")),
     "connector 'sum' must be an exporter in one pipeline and a receiver in another"),
    ("connector between wrong types", _collector(lambda c: _pipelines(c).update(
        {"logs/x": {"receivers": ["sum"], "exporters": ["debug"]}}) or c["exporters"].update({"debug": {}})),
     "connector 'sum' cannot produce logs"),
    ("unknown pipeline type", _collector(lambda c: _pipelines(c).update({"spans": _pipelines(c).pop("traces")})),
     "pipeline 'spans' has unknown type 'spans'"),
    ("receiver on localhost", _collector(lambda c: c["receivers"]["otlp"]["protocols"]["grpc"].update({"endpoint": "localhost:4317"})),
     "otlp grpc endpoint is 'localhost:4317'"),
    ("sum of a foreign attribute", _collector(lambda c: c["connectors"]["sum"]["spans"][SELF_JOULES_METRIC].update(
        {"source_attribute": "energy.kwh"})), "sums 'energy.kwh', which otel-joules does not set"),
    ("sum of interval energy", _collector(lambda c: c["connectors"]["sum"]["spans"][SELF_JOULES_METRIC].update(
        {"source_attribute": "energy.joules"})), "sums 'energy.joules': spans overlap in it"),
    ("root spans only", _collector(lambda c: c["connectors"]["sum"]["spans"][SELF_JOULES_METRIC]["conditions"].__setitem__(
        0, 'attributes["energy.attributed.self.joules"] != nil and IsRootSpan()')), "counts root spans only"),
    ("two grouping keys", _collector(lambda c: c["connectors"]["sum"]["spans"][SELF_JOULES_METRIC]["attributes"].append(
        {"key": "energy.source"})), "groups by 2 keys"),
    ("span.name never set", _collector(lambda c: c["processors"]["transform/span_name"]["trace_statements"][0].update(
        {"statements": ['set(attributes["operation"], name)']})), "groups by 'span.name', which no transform sets"),
    ("no co2 metric", _collector(lambda c: [c["connectors"]["sum"]["spans"].pop(m) for m in list(c["connectors"]["sum"]["spans"])
                                           if "co2eq" in m]), "no sum connector metric sums 'energy.attributed.self.co2eq.grams'"),
    ("tempo not exported to", _collector(lambda c: _pipelines(c)["traces"]["exporters"].remove("otlp/tempo")
                                          or c["exporters"].pop("otlp/tempo")), "no traces pipeline exports to tempo"),
    ("tempo on the wrong port", _collector(lambda c: c["exporters"]["otlp/tempo"].update({"endpoint": "tempo:4318"})),
     "sends to port 4318, but tempo listens for OTLP gRPC on 4317"),
    ("dashboard metric not produced", _field("dashboards", lambda d: _first_panel_target(d).update(
        {"expr": "sum(hw_power_total)"})), "metric 'hw_power_total' is not produced by the collector"),
    ("dashboard label not produced", _field("dashboards", lambda d: _first_panel_target(d).update(
        {"expr": "sum by (gpu_uuid) (hw_power_watts)"})), "label 'gpu_uuid' is not on ['hw_power_watts']"),
    ("dashboard legend label not produced", _field("dashboards", lambda d: _first_panel_target(d).update(
        {"expr": "hw_host_power_watts", "legendFormat": "{{hw_type}}"})), "label 'hw_type' is not on ['hw_host_power_watts']"),
    ("dashboard without hw.power", _field("dashboards", lambda d: [t.update({"expr": "hw_host_power_watts"})
                                                                    for p in _panels(next(iter(d.values()))["panels"])
                                                                    for t in p.get("targets", []) if "hw_power_watts" in t.get("expr", "")]),
     "no dashboard panel shows power per device"),
    ("dashboard unknown data source", _field("dashboards", lambda d: _first_panel_target(d).update(
        {"datasource": {"type": "prometheus", "uid": "mimir"}})), "uses data source 'mimir', which is not provisioned"),
    ("TraceQL foreign attribute", _field("dashboards", lambda d: _tempo_target(d).update(
        {"query": "{ span.energy.kwh > 1 }"})), "TraceQL reads span.energy.kwh"),
    ("host label taken from the metric instead of target_info", _field("dashboards", lambda d: _first_panel_target(d).update(
        {"expr": "sum by (host_name) (hw_power_watts)"})), "label 'host_name' is not on ['hw_power_watts']"),
    ("panel without its path", _field("dashboards", lambda d: next(p for p in _panels(next(iter(d.values()))["panels"])
                                                                   if p.get("targets")).update({"description": "Power."})),
     "does not say which path it needs"),
    ("image not pinned", _field("compose", lambda c: c["services"]["grafana"].update({"image": "grafana/grafana:latest"})),
     "image 'grafana/grafana:latest' is not pinned"),
    ("config read from elsewhere", _field("compose", lambda c: c["services"]["collector"].update(
        {"command": ["--config=/etc/otelcol/config.yaml"]})), "which does not mount otelcol-config.yaml"),
    ("undeclared volume", _field("compose", lambda c: c.pop("volumes")), "mounts volume 'tempo-data', which is not declared"),
    ("unknown dependency", _field("compose", lambda c: c["services"]["collector"].update({"depends_on": ["zipkin"]})),
     "depends on 'zipkin', which is not a service"),
    ("OTLP port not published", _field("compose", lambda c: c["services"]["collector"].update({"ports": ["4317:4317"]})),
     "collector does not publish OTLP port 4318"),
    ("no jaeger service", _field("compose", lambda c: c["services"].pop("jaeger")), "no compose service runs jaegertracing/jaeger"),
    ("dashboards not mounted where provisioned", _field("dashboard_providers", lambda p: p["providers"][0]["options"].update(
        {"path": "/etc/dashboards"})), "dashboard provider path '/etc/dashboards' does not hold"),
    ("scrape the wrong port", _field("prometheus", lambda p: p["scrape_configs"][0]["static_configs"][0].update(
        {"targets": ["collector:8888"]})), "prometheus does not scrape the collector's prometheus exporter on port 8889"),
    ("job label renamed", _field("prometheus", lambda p: p["scrape_configs"][0].pop("honor_labels")), "set honor_labels"),
    ("data source on a missing host", _field("datasources", lambda d: d["datasources"][0].update({"url": "http://victoria:8428"})),
     "points at 'victoria', which is not a compose service"),
    ("no jaeger data source", _field("datasources", lambda d: d.update(
        {"datasources": [x for x in d["datasources"] if x["type"] != "jaeger"]})), "no jaeger data source is provisioned"),
]


@pytest.mark.parametrize(("mutation", "expected"), [(m, e) for _, m, e in MUTATIONS], ids=[n for n, _, _ in MUTATIONS])
def test_checker_reports_a_broken_copy(mutation: Mutation, expected: str) -> None:
    problems = check_stack(mutation(load_stack()))
    assert any(expected in problem for problem in problems), problems


@pytest.mark.parametrize("relative", ["tempo.yaml", "grafana/provisioning/datasources/datasources.yaml"])
def test_checker_reports_a_mounted_file_that_is_missing(tmp_path: Path, relative: str) -> None:
    copy_dir = tmp_path / "collector"
    shutil.copytree(COLLECTOR_DIR, copy_dir)
    stack = load_stack(copy_dir)
    assert check_stack(stack) == []
    (copy_dir / relative).unlink()
    problems = check_compose(stack)
    assert any(Path(relative).name in p for p in problems), problems
