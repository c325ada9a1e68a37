"""Structure of the observability stack in ``collector/``.

The real programs run in ``tests/e2e/``: otelcol-joules with ``otelcol-config.yaml``
unchanged, Jaeger and Prometheus; every PromQL expression shipped returns labelled series
there (``tests/e2e/test_dashboards.py``), so nothing here re-implements the Collector.
What those tests cannot run is checked here for structure: compose (no container runtime),
Tempo and Grafana (AGPL: neither built nor run). Every file parses; the Collector's
pipelines only name components that are defined, and use every component defined;
connectors sit between two pipelines of types they support; the sum connector sums what
otel-joules sets, the way that adds up; with its ``${env:OTELCOL_*:-default}`` variables at
the defaults (which compose runs), the Collector reaches the compose services on the ports
they listen on; compose pins the versions the end-to-end tests run and mounts files that
exist at the paths their commands read; Grafana's data sources point at services and name
no service map nothing produces; the dashboard's panels say which path they need and its
TraceQL reads attributes otel-joules sets.

Each checker returns a list of problems. The tests run it on the real files (no
problem expected) and on broken copies (the specific problem expected), so every
check is shown to be able to fail.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator

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


#: Every panel's description starts with the path it needs (see collector/README.md).
PANEL_PATHS = ("Path: the Collector only", "Path: the Collector or a direct Prometheus scrape", "Path: Tempo")

#: Component types of the contrib distribution this configuration may use.
KNOWN_COMPONENT_TYPES = {
    "receivers": {"otlp", "otlpjsonfile"},
    "processors": {"batch", "transform", "deltatocumulative", "memory_limiter"},
    "exporters": {"otlp", "otlphttp", "prometheus", "prometheusremotewrite", "debug"},
    "connectors": {"sum", "forward", "servicegraph"},
}
#: (exporter pipeline type, receiver pipeline type) pairs each connector supports.
CONNECTOR_PIPELINE_PAIRS = {
    "sum": {("traces", "metrics"), ("metrics", "metrics"), ("logs", "metrics")},
    "forward": {("traces", "traces"), ("metrics", "metrics"), ("logs", "logs")},
    "servicegraph": {("traces", "metrics")},
}
PIPELINE_TYPES = {"traces", "metrics", "logs"}

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


def grouping_labels(expr: str) -> set[str] | None:
    """Labels the outermost aggregation keeps (``sum by (a, b) (...)``, ``sort_desc(sum by ...)``); None without one."""
    match = re.match(r"^\s*(?:sort_desc\(|sort\(|topk\(\s*\d+\s*,\s*)?\s*\w+\s+by\s*\(([^)]*)\)", expr)
    return {label.strip() for label in match.group(1).split(",")} if match else None


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
    #: otelcol-config.yaml with every ``${env:NAME:-default}`` at what compose gives the collector (its defaults).
    collector: dict[str, Any]
    #: otelcol-config.yaml as written.
    collector_text: str
    compose: dict[str, Any]
    prometheus: dict[str, Any]
    tempo: dict[str, Any]
    datasources: dict[str, Any]
    dashboard_providers: dict[str, Any]
    dashboards: dict[str, dict[str, Any]]
    #: builder-config.yaml: the otelcol-joules the end-to-end tests run.
    builder: dict[str, Any]
    #: ``name -> go.mod`` of tools/*/ (Jaeger, Prometheus, ... as the end-to-end tests run them).
    tool_modules: dict[str, str]


def load_yaml(path: Path) -> Any:
    """Parse one YAML file."""
    with path.open(encoding="utf-8") as handle:
        return yaml.safe_load(handle)


#: ``${env:NAME}`` or ``${env:NAME:-default}`` in the Collector's configuration.
ENV_REFERENCE = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _environment(service: dict[str, Any]) -> dict[str, str]:
    """A compose service's ``environment:`` (list or mapping form)."""
    environment = service.get("environment") or {}
    if isinstance(environment, list):
        return dict(str(item).split("=", 1) for item in environment if "=" in str(item))
    return {str(k): str(v) for k, v in environment.items()}


def resolve_env(text: str, environment: dict[str, str]) -> Any:
    """The Collector config with each variable set as ``environment`` sets it, or at its default."""
    return yaml.safe_load(ENV_REFERENCE.sub(lambda m: environment.get(m.group(1), m.group(2) or ""), text))


def load_stack(base_dir: Path = COLLECTOR_DIR) -> Stack:
    """Read the stack's files from ``base_dir``."""
    compose = load_yaml(base_dir / "compose.yaml")
    collector_text = (base_dir / "otelcol-config.yaml").read_text(encoding="utf-8")
    collector_service = _service_by_image(compose, "otel/opentelemetry-collector-contrib:")
    return Stack(
        base_dir=base_dir,
        collector=resolve_env(collector_text, _environment(collector_service[1]) if collector_service else {}),
        collector_text=collector_text,
        compose=compose,
        prometheus=load_yaml(base_dir / "prometheus.yml"),
        tempo=load_yaml(base_dir / "tempo.yaml"),
        datasources=load_yaml(base_dir / "grafana/provisioning/datasources/datasources.yaml"),
        dashboard_providers=load_yaml(base_dir / "grafana/provisioning/dashboards/dashboards.yaml"),
        dashboards={
            path.name: json.loads(path.read_text(encoding="utf-8"))
            for path in sorted((base_dir / "grafana/dashboards").glob("*.json"))
        },
        builder=load_yaml(base_dir / "builder-config.yaml"),
        tool_modules={path.parent.name: path.read_text(encoding="utf-8") for path in sorted(base_dir.glob("tools/*/go.mod"))},
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


# --- checks: dashboard, compose, cross-file -----------------------------------------


def _panels(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    result = []
    for panel in panels:
        result.append(panel)
        result.extend(_panels(panel.get("panels") or []))
    return result


def check_dashboards(stack: Stack) -> list[str]:
    """Panels say their path and use provisioned data sources; TraceQL reads attributes otel-joules sets.

    Whether each PromQL expression returns labelled series is what tests/e2e/test_dashboards.py
    runs on the real Collector and Prometheus.
    """
    problems: list[str] = []
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
                    if not promql_metric_names(expr):
                        problems.append(f"{where}: query {expr!r} selects no metric")
                    # A legend label must be one the query keeps (Grafana shows it empty otherwise).
                    kept = grouping_labels(expr)
                    for label in re.findall(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}", target.get("legendFormat") or ""):
                        if kept is not None and label not in kept:
                            problems.append(f"{where}: legend label {label!r} is not one the query groups by {sorted(kept)}")
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


#: The feature Prometheus must run with (otelcol-config.yaml, transform/start_time, says why).
PROMETHEUS_FEATURE = "created-timestamp-zero-ingestion"


def _module_version(go_mod: str, module: str) -> str | None:
    match = re.search(r"^\s*(?:require\s+)?" + re.escape(module) + r"\s+(v\S+)", go_mod, flags=re.M)
    return match.group(1) if match else None


def images_the_tests_run(stack: Stack) -> dict[str, str]:
    """``image -> tag`` of the releases the end-to-end tests run, from the modules build.sh builds them from.

    Jaeger v2.N is Go module v1.(N+63) (v2.0.0 = v1.63.0); Prometheus A.B.C is module v0.(100A+B).C.
    """
    tags = {"otel/opentelemetry-collector-contrib": str((stack.builder.get("dist") or {}).get("version", ""))}
    jaeger = _module_version(stack.tool_modules.get("jaeger", ""), "github.com/jaegertracing/jaeger")
    if jaeger and (match := re.fullmatch(r"v1\.(\d+)\.(\d+)", jaeger)):
        tags["jaegertracing/jaeger"] = f"2.{int(match.group(1)) - 63}.{match.group(2)}"
    prometheus = _module_version(stack.tool_modules.get("prometheus", ""), "github.com/prometheus/prometheus")
    if prometheus and (match := re.fullmatch(r"v0\.(\d+)\.(\d+)", prometheus)):
        tags["prom/prometheus"] = f"v{int(match.group(1)) // 100}.{int(match.group(1)) % 100}.{match.group(2)}"
    return tags


def check_tested_versions(stack: Stack) -> list[str]:
    """Compose runs the releases the end-to-end tests ran, and Prometheus with the feature the config needs."""
    problems: list[str] = []
    for image, tag in images_the_tests_run(stack).items():
        found = _service_by_image(stack.compose, image + ":")
        if found is None:
            continue
        name, service = found
        pinned = str(service.get("image")).split(":", 1)[1]
        if pinned != tag:
            problems.append(f"service {name!r} runs {image}:{pinned}, but the end-to-end tests run {tag}")
    for role in ("jaegertracing/jaeger", "prom/prometheus"):
        if role not in images_the_tests_run(stack):
            problems.append(f"no tools module says which {role} the end-to-end tests run")
    prometheus = _service_by_image(stack.compose, "prom/prometheus:")
    if prometheus:
        features = {f for value in [_flag(prometheus[1], "--enable-feature")] if value for f in value.split(",")}
        if PROMETHEUS_FEATURE not in features:
            problems.append(f"service {prometheus[0]!r} runs without --enable-feature={PROMETHEUS_FEATURE}: "
                            "increase() would never count a span counter's first sample")
    return problems


def _keys(value: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, value) inside parsed YAML."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield str(key), item
            yield from _keys(item)
    elif isinstance(value, list):
        for item in value:
            yield from _keys(item)


def service_graph_producers(stack: Stack) -> list[str]:
    """What makes ``traces_service_graph_*`` metrics: a servicegraph connector feeding the prometheus
    exporter, or Tempo's service-graphs processor writing to a Prometheus."""
    producers = []
    pipelines = (stack.collector.get("service") or {}).get("pipelines") or {}
    for connector in (stack.collector.get("connectors") or {}):
        if _kind(connector) != "servicegraph":
            continue
        if any(connector in (p or {}).get("receivers", []) and any(_kind(e) == "prometheus" for e in (p or {}).get("exporters", []))
               for p in pipelines.values()):
            producers.append(f"collector connector {connector}")
    generator = stack.tempo.get("metrics_generator") or {}
    processors = ((stack.tempo.get("overrides") or {}).get("defaults") or {}).get("metrics_generator", {}).get("processors") or []
    if "service-graphs" in processors and (generator.get("storage") or {}).get("remote_write"):
        producers.append("tempo service-graphs processor")
    return producers


def check_service_map(stack: Stack) -> list[str]:
    """No data source shows a service map unless something produces the metrics it reads."""
    problems: list[str] = []
    if service_graph_producers(stack):
        return problems
    for datasource in stack.datasources.get("datasources") or []:
        for key, _value in _keys(datasource):
            if key.lower().replace("_", "") in {"servicemap", "servicegraph"}:
                problems.append(f"data source {datasource.get('name')!r} sets {key}, but nothing produces "
                                "traces_service_graph_* metrics (no servicegraph connector, no Tempo service-graphs processor)")
    return problems


def env_variable_problems(collector_text: str, readme: str) -> list[str]:
    """Every ``${env:OTELCOL_*}`` has a default, listed in the config's header and collector/README.md's table."""
    problems = []
    header = "\n".join(line for line in collector_text.splitlines() if line.startswith("#"))
    table = {m.group(1): m.group(2) for m in re.finditer(r"^\| `([A-Z_]+)`[^|]*\|[^|]*\| `([^`]*)`", readme, flags=re.M)}
    for name, default in sorted(set(ENV_REFERENCE.findall(collector_text))):
        if not default:
            problems.append(f"${{env:{name}}} has no default: the config would not run unchanged without it")
        spellings = {name, name.replace("_HOST", "_HOST/PORT"), name.replace("_PORT", "_HOST/PORT")}
        if not any(re.search(r"\b" + re.escape(spelling) + r"(?![\w/])", header) for spelling in spellings):
            problems.append(f"{name} is not listed in otelcol-config.yaml's header")
        documented = table.get(name)
        if documented is None and name.startswith("OTELCOL_TELEMETRY_"):
            row = re.search(r"^\| `OTELCOL_TELEMETRY_HOST`, `OTELCOL_TELEMETRY_PORT` \|[^|]*\| `([^`]*)`, `([^`]*)`", readme, flags=re.M)
            documented = row and row.group(1 if name.endswith("HOST") else 2)
        if documented is None:
            problems.append(f"{name} is not in collector/README.md's table of variables")
        elif documented != default:
            problems.append(f"collector/README.md says {name} defaults to {documented!r}, the config to {default!r}")
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
        + check_tested_versions(stack)
        + check_service_map(stack)
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


def readme_traceql_problems(readme: str) -> list[str]:
    """TraceQL in the README's backticks reads span attributes otel-joules sets (Tempo is not run here)."""
    problems = []
    for query in re.findall(r"`(\{[^`]*\}[^`]*)`", readme):
        for scope, key in traceql_attributes(query):
            if scope == "span" and not is_library_span_attribute(key):
                problems.append(f"README TraceQL {query!r} reads span.{key}, which otel-joules does not set")
    return problems


def test_readme_traceql_reads_attributes_otel_joules_sets() -> None:
    readme = (COLLECTOR_DIR / "README.md").read_text(encoding="utf-8")
    assert "{ span.energy.joules > 100.0 }" in readme
    assert readme_traceql_problems(readme) == []
    problems = readme_traceql_problems(readme.replace("span.energy.watts >", "span.energy.power >"))
    assert any("reads span.energy.power" in p for p in problems), problems


def test_the_collector_variables_have_defaults_and_are_documented() -> None:
    readme = (COLLECTOR_DIR / "README.md").read_text(encoding="utf-8")
    text = load_stack().collector_text
    assert len(ENV_REFERENCE.findall(text)) >= 9
    assert env_variable_problems(text, readme) == []
    problems = env_variable_problems(text.replace("${env:OTELCOL_JAEGER_ENDPOINT:-jaeger:4317}", "${env:OTELCOL_JAEGER_ENDPOINT}")
                                     + "\nx: ${env:OTELCOL_NEW:-1}\n", readme.replace("| `0.0.0.0:8889` |", "| `0.0.0.0:9999` |"))
    assert any("OTELCOL_JAEGER_ENDPOINT} has no default" in p for p in problems), problems
    assert any("OTELCOL_NEW is not listed in otelcol-config.yaml's header" in p for p in problems), problems
    assert any("OTELCOL_NEW is not in collector/README.md's table" in p for p in problems), problems
    assert any("OTELCOL_PROMETHEUS_ENDPOINT defaults to '0.0.0.0:9999'" in p for p in problems), problems


def test_compose_sets_no_collector_variable_its_default_suits() -> None:
    """The defaults were chosen for compose: setting one there to its own default only hides a change."""
    stack = load_stack()
    defaults = dict(ENV_REFERENCE.findall(stack.collector_text))
    collector = _service_by_image(stack.compose, "otel/opentelemetry-collector-contrib:")
    assert collector is not None
    for name, value in _environment(collector[1]).items():
        assert defaults.get(name) != value, f"compose sets {name} to its default {value!r}"


def test_readme_and_compose_say_what_was_tested_and_what_not() -> None:
    readme = (COLLECTOR_DIR / "README.md").read_text(encoding="utf-8")
    compose = (COLLECTOR_DIR / "compose.yaml").read_text(encoding="utf-8")
    tags = images_the_tests_run(load_stack())
    for text in (readme, compose):
        assert f"otelcol-joules {tags['otel/opentelemetry-collector-contrib']}" in text
        assert f"Jaeger v{tags['jaegertracing/jaeger']}" in text
        assert f"Prometheus {tags['prom/prometheus'].lstrip('v')}" in text
        assert "AGPL" in text and "Tempo" in text and "Grafana" in text
        assert "no container runtime" in text.lower()
    assert "never started" not in readme and "No container runtime exists" not in readme


def test_tested_images_follow_the_modules() -> None:
    assert images_the_tests_run(load_stack()) == {"otel/opentelemetry-collector-contrib": "0.139.0",
                                           "jaegertracing/jaeger": "2.12.0", "prom/prometheus": "v3.5.0"}


@pytest.mark.parametrize(
    ("expr", "metrics", "kept"),
    [
        ("sum by (job) (rate(span_root_energy_joules_total[$__rate_interval]))", ["span_root_energy_joules_total"], {"job"}),
        ('hw_power_watts{hw_type="gpu", host_name=~"a.*"} / on(host_name) group_left hw_host_power_watts',
         ["hw_power_watts", "hw_host_power_watts"], None),
        ("sum(increase(hw_host_energy_joules_total[1h] offset 5m)) / 3.6e6", ["hw_host_energy_joules_total"], None),
        ('sort_desc(sum by (job, hw_type) (x_total{a="by (b)"})) > bool 1', ["x_total"], {"job", "hw_type"}),
    ],
)
def test_promql_scanner(expr: str, metrics: list[str], kept: set[str] | None) -> None:
    assert promql_metric_names(expr) == metrics
    assert grouping_labels(expr) == kept


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


def _collector_env(environment: dict[str, str]) -> Mutation:
    """Compose gives the collector these variables: the config is resolved with them."""
    def mutate(stack: Stack) -> Stack:
        compose = copy.deepcopy(stack.compose)
        compose["services"]["collector"]["environment"] = [f"{k}={v}" for k, v in environment.items()]
        return replace(stack, compose=compose, collector=resolve_env(stack.collector_text, environment))
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
    ("dashboard query selects no metric", _field("dashboards", lambda d: _first_panel_target(d).update(
        {"expr": "vector(1)"})), "query 'vector(1)' selects no metric"),
    ("dashboard legend label dropped by the query", _field("dashboards", lambda d: _first_panel_target(d).update(
        {"expr": "sum by (hw_id) (hw_host_power_watts)", "legendFormat": "{{hw_type}}"})),
     "legend label 'hw_type' is not one the query groups by ['hw_id']"),
    ("dashboard without hw.power", _field("dashboards", lambda d: [t.update({"expr": "hw_host_power_watts"})
                                                                    for p in _panels(next(iter(d.values()))["panels"])
                                                                    for t in p.get("targets", []) if "hw_power_watts" in t.get("expr", "")]),
     "no dashboard panel shows power per device"),
    ("dashboard unknown data source", _field("dashboards", lambda d: _first_panel_target(d).update(
        {"datasource": {"type": "prometheus", "uid": "mimir"}})), "uses data source 'mimir', which is not provisioned"),
    ("TraceQL foreign attribute", _field("dashboards", lambda d: _tempo_target(d).update(
        {"query": "{ span.energy.kwh > 1 }"})), "TraceQL reads span.energy.kwh"),
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
    ("service map nothing feeds", _field("datasources", lambda d: _datasource(d, "tempo").setdefault("jsonData", {}).update(
        {"serviceMap": {"datasourceUid": "prometheus"}})), "sets serviceMap, but nothing produces traces_service_graph_*"),
    ("collector image not the tested release", _field("compose", lambda c: c["services"]["collector"].update(
        {"image": "otel/opentelemetry-collector-contrib:0.140.0"})), "runs otel/opentelemetry-collector-contrib:0.140.0, but the end-to-end tests run 0.139.0"),
    ("jaeger image not the tested release", _field("compose", lambda c: c["services"]["jaeger"].update(
        {"image": "jaegertracing/jaeger:2.14.0"})), "runs jaegertracing/jaeger:2.14.0, but the end-to-end tests run 2.12.0"),
    ("prometheus image not the tested release", _field("compose", lambda c: c["services"]["prometheus"].update(
        {"image": "prom/prometheus:v3.7.0"})), "runs prom/prometheus:v3.7.0, but the end-to-end tests run v3.5.0"),
    ("jaeger module unknown", _field("tool_modules", lambda m: m.pop("jaeger")), "no tools module says which jaegertracing/jaeger"),
    ("prometheus without created timestamps", _field("compose", lambda c: c["services"]["prometheus"].update(
        {"command": [a for a in c["services"]["prometheus"]["command"] if not a.startswith("--enable-feature")]})),
     "runs without --enable-feature=created-timestamp-zero-ingestion"),
    ("collector pointed elsewhere by compose", _collector_env({"OTELCOL_JAEGER_ENDPOINT": "zipkin:9411"}),
     "exporter 'otlp/jaeger' sends to 'zipkin', which is not a compose service"),
]


def _datasource(datasources: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(d for d in datasources["datasources"] if d["type"] == kind)


def test_a_service_map_is_fine_once_something_produces_its_metrics() -> None:
    stack = load_stack()
    datasources = copy.deepcopy(stack.datasources)
    _datasource(datasources, "tempo")["jsonData"]["serviceMap"] = {"datasourceUid": "prometheus"}
    collector = copy.deepcopy(stack.collector)
    collector["connectors"]["servicegraph"] = {}
    collector["service"]["pipelines"]["traces"]["exporters"].append("servicegraph")
    collector["service"]["pipelines"]["metrics"]["receivers"].append("servicegraph")
    with_producer = replace(stack, datasources=datasources, collector=collector)
    assert service_graph_producers(with_producer) == ["collector connector servicegraph"]
    assert check_stack(with_producer) == []
    assert check_service_map(replace(stack, datasources=datasources)) != []


def test_the_provisioning_names_no_service_map() -> None:
    """Defect 5: nothing produces traces_service_graph_*, so no data source may point a service map anywhere."""
    stack = load_stack()
    assert service_graph_producers(stack) == []
    text = (COLLECTOR_DIR / "grafana/provisioning/datasources/datasources.yaml").read_text(encoding="utf-8")
    assert not any(key.lower() in {"servicemap", "service_map", "servicegraph"} for d in stack.datasources["datasources"]
                   for key, _ in _keys(d)), text


@pytest.mark.parametrize(("mutation", "expected"), [(m, e) for _, m, e in MUTATIONS], ids=[n for n, _, _ in MUTATIONS])
def test_checker_reports_a_broken_copy(mutation: Mutation, expected: str) -> None:
    problems = check_stack(mutation(load_stack()))
    assert any(expected in problem for problem in problems), problems


@pytest.mark.parametrize("relative", ["tempo.yaml", "grafana/provisioning/datasources/datasources.yaml"])
def test_checker_reports_a_mounted_file_that_is_missing(tmp_path: Path, relative: str) -> None:
    copy_dir = tmp_path / "collector"
    shutil.copytree(COLLECTOR_DIR, copy_dir, ignore=shutil.ignore_patterns("_build"))
    stack = load_stack(copy_dir)
    assert check_stack(stack) == []
    (copy_dir / relative).unlink()
    problems = check_compose(stack)
    assert any(Path(relative).name in p for p in problems), problems
