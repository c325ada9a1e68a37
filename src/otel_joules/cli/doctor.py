"""``otel-joules doctor``: each route to measured energy, step by step: what holds and what to do.

The steps, in order: the RAPL counters read directly; the agent's socket (present, reachable,
admitting this user); the GPU libraries (NVML; amdsmi); the endpoints of the OTLP exporters the
``OTEL_*`` variables configure; the carbon intensity source. The verdict is the energy meter's
own (the one ``instrument()`` and ``run`` build, as ``otel-joules devices`` lists it): exit
status 0 when spans will carry measured energy, 1 when they will carry only estimates (or
nothing). ``--json`` gives the same as one object, for scripts.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import stat
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping, Sequence

from opentelemetry.sdk.environment_variables import OTEL_EXPORTER_OTLP_ENDPOINT

from otel_joules.carbon import LiveProvider, providers_from_env, resolve_carbon_intensity
from otel_joules.cli.devices import describe, spans_sources
from otel_joules.config import OTEL_JOULES_AGENT_SOCKET, OTEL_JOULES_COUNTRY, OTEL_JOULES_SYSFS_ROOT, Settings
from otel_joules.delivery.destinations import SIGNAL_METRICS, SIGNAL_TRACES, SIGNAL_VARIABLES, exporter_names, probe
from otel_joules.delivery.outcomes import PROBE_TIMEOUT_S
from otel_joules.delivery.reachability import sdk_otlp_targets
from otel_joules.errors import ConfigurationError
from otel_joules.meter.meter import EnergyMeter
from otel_joules.meter.notice import fallback_message
from otel_joules.sensors import rapl
from otel_joules.sensors.agent_connect import AgentUnavailable, group_of, join_group_remedy, subscribe
from otel_joules.sensors.amdsmi import WHAT as AMD_WHAT
from otel_joules.sensors.base import Unavailable
from otel_joules.semconv import KIND_GPU, VENDOR_AMD

#: A step's outcome: it holds; it fails (with what to do); a warning; facts only; not tried (an earlier step failed).
OK = "ok"
FAIL = "fail"
WARN = "warn"
INFO = "info"
SKIPPED = "skipped"
#: How each outcome is marked in the text output.
_MARKS = {OK: "ok", FAIL: "FAIL", WARN: "warn", INFO: "--", SKIPPED: "--"}

#: Exit statuses: spans will carry measured energy; only estimates (or nothing).
EXIT_MEASURED = 0
EXIT_ESTIMATES = 1

#: What to do when no agent answers on the socket.
START_AGENT_REMEDY = (
    "start the agent as root (`sudo otel-joules agent --group otel-joules`, or install the unit "
    "`otel-joules agent --print-systemd-unit` prints) and join its group; in a container, mount the host's socket "
    f"and point {OTEL_JOULES_AGENT_SOCKET} at it"
)


@dataclass(frozen=True)
class Check:
    """One step of one route: whether it holds and what to do.

    Attributes:
        step: Stable id of the step (``counters.direct``, ``agent.socket``, ``agent.reachable``,
            ``agent.admits``, ``gpu.nvml``, ``gpu.amdsmi``, ``exporter.traces``, ``exporter.metrics``,
            ``carbon.intensity``).
        status: :data:`OK`, :data:`FAIL`, :data:`WARN`, :data:`INFO` or :data:`SKIPPED`.
        detail: What holds (or why not), one line.
        remedy: What to do, or ``""``.
    """

    step: str
    status: str
    detail: str
    remedy: str = ""


def register(subparsers: Any) -> None:
    """Add the ``doctor`` subcommand."""
    parser = subparsers.add_parser(
        "doctor",
        help="check each route to measured energy, step by step, and say what to do",
        description=(
            "Check each route to measured energy (counters read directly, the otel-joules agent, the GPU libraries), "
            "the exporters' endpoints and the carbon intensity source; for each step, what holds and what to do. "
            "Exits 0 when spans will carry measured energy, 1 when only estimates."
        ),
    )
    parser.add_argument("--sysfs-root", help="where sysfs is mounted (default: $OTEL_JOULES_SYSFS_ROOT or /sys)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=run)


# --- the steps --------------------------------------------------------------------------


def counters_check(settings: Settings) -> Check:
    """Whether this user reads RAPL's ``energy_uj`` itself."""
    try:
        found = rapl.discover(settings)
    except OSError as exc:  # a sysfs root this user may not search
        return Check("counters.direct", FAIL, f"cannot look into {settings.sysfs_root}: {exc.strerror or exc}",
                     f"point {OTEL_JOULES_SYSFS_ROOT} (or --sysfs-root) at a sysfs this user may read")
    for channel in found.channels:
        channel.close()
    ids = [c.domain.id for c in found.channels]
    if ids:
        return Check("counters.direct", OK, f"RAPL counters readable directly: {', '.join(ids)}")
    return Check("counters.direct", FAIL, _reasons(found.unavailable), _remedies(found.unavailable))


def agent_checks(socket_path: str, needed: bool) -> list[Check]:
    """The agent's socket: present, reachable, admitting this user. ``needed``: the direct counters failed."""
    parent = os.path.dirname(socket_path) or "."
    if os.path.isdir(parent) and not os.access(parent, os.X_OK):
        return _hidden_directory(parent)
    if not os.path.lexists(socket_path):
        status, remedy = (FAIL, START_AGENT_REMEDY) if needed else (INFO, "")
        unneeded = "" if needed else " (not needed: the counters are readable directly)"
        return [
            Check("agent.socket", status, f"no agent socket at {socket_path}{unneeded}", remedy),
            _not_tried("agent.reachable", "agent.socket"),
            _not_tried("agent.admits", "agent.socket"),
        ]
    group = group_of(socket_path)
    present = Check("agent.socket", OK, f"{socket_path} exists ({_owner(socket_path, group)})")
    if not os.access(socket_path, os.R_OK | os.W_OK):
        # Connecting to a Unix socket needs write permission on it: the mode turns this user away.
        return [
            present,
            Check("agent.reachable", SKIPPED, "not tried: the socket's mode refuses this user"),
            Check("agent.admits", FAIL, f"the socket's mode refuses uid {os.getuid()} ({_membership(group)})",
                  join_group_remedy(group)),
        ]
    return [present, *_agent_answer(socket_path, group, needed)]


def _hidden_directory(parent: str) -> list[Check]:
    """The agent's runtime directory (0750, its group) turns this user away before the socket."""
    group = group_of(parent)
    return [
        Check("agent.socket", SKIPPED, f"cannot tell: this user may not look into {parent} ({_owner(parent, group)})"),
        _not_tried("agent.reachable", "agent.socket"),
        Check("agent.admits", FAIL, f"{parent} refuses uid {os.getuid()} ({_membership(group)})", join_group_remedy(group)),
    ]


def _agent_answer(socket_path: str, group: str | None, needed: bool) -> list[Check]:
    """Subscribe once, as the library does: whether an agent answers, and whether it admits this process."""
    try:
        sock, answer, _ = subscribe(socket_path)
    except AgentUnavailable as exc:
        if exc.remedy:  # the agent answered, and refused this process
            return [Check("agent.reachable", OK, "the agent answers"),
                    Check("agent.admits", FAIL, f"{exc.reason} ({_membership(group)})", exc.remedy)]
        return [Check("agent.reachable", FAIL, exc.reason, START_AGENT_REMEDY), _not_tried("agent.admits", "agent.reachable")]
    sock.close()
    zones = ", ".join(str(z.get("id")) for z in answer.get("zones", []) if isinstance(z, dict))
    unused = "" if needed else "; not used while the counters are readable directly"
    return [Check("agent.reachable", OK, "the agent answers"),
            Check("agent.admits", OK, f"the agent admits uid {os.getuid()} and serves {zones or 'no zone'}{unused}")]


def gpu_checks(report: dict[str, Any]) -> list[Check]:
    """NVML and amdsmi, from what the meter found."""
    measured = [d for d in report["domains"] if d["hw_type"] == KIND_GPU and d["source"] == "measured"]
    # Told apart by the sensor's hw.vendor, not by their ids.
    amd_gpus = [d["id"] for d in measured if d["hw_vendor"] == VENDOR_AMD]
    gpus = [d["id"] for d in measured if d["hw_vendor"] != VENDOR_AMD]
    problems = [u for u in report["unavailable"] if u["what"].startswith("nvidia_gpu")]
    if gpus:
        nvml = Check("gpu.nvml", OK if not problems else WARN, f"NVML measures {', '.join(gpus)}"
                     + "".join(f"; {u['what']}: {u['reason']}" for u in problems), _remedies_of(problems))
    else:
        reasons = "; ".join(u["reason"] for u in problems) or "NVML found no GPU"
        nvml = Check("gpu.nvml", INFO, f"no NVIDIA GPU measured: {reasons}", _remedies_of(problems))
    amd_problems = [u for u in report["unavailable"] if u["what"].startswith(AMD_WHAT)]
    said = "".join(f"; {u['what']}: {u['reason']}" for u in amd_problems)
    if amd_gpus:
        amd = Check("gpu.amdsmi", OK if not amd_problems else WARN, f"amdsmi measures {', '.join(amd_gpus)}{said}",
                    _remedies_of(amd_problems))
    elif amd_problems:
        amd = Check("gpu.amdsmi", WARN, f"no AMD GPU measured{said}", _remedies_of(amd_problems))
    elif importlib.util.find_spec("amdsmi") is None:
        amd = Check("gpu.amdsmi", INFO, "amdsmi is not installed, and sysfs shows no AMD GPU")
    else:
        amd = Check("gpu.amdsmi", INFO, "amdsmi found no AMD GPU")
    return [nvml, amd]


def exporter_checks(env: Mapping[str, str] | None = None) -> list[Check]:
    """Each signal's exporters from the ``OTEL_*`` variables: whether each OTLP endpoint accepts a connection."""
    checks = []
    for signal in (SIGNAL_TRACES, SIGNAL_METRICS):
        step = f"exporter.{signal}"
        variable = SIGNAL_VARIABLES[signal].exporter
        names = exporter_names(signal, env)
        if not names:
            checks.append(Check(step, INFO, f"{variable}=none: {signal} are not exported"))
            continue
        try:
            targets = sdk_otlp_targets(signal, env)
        except ConfigurationError as exc:
            checks.append(Check(step, FAIL, str(exc), "set the protocol to grpc or http/protobuf"))
            continue
        for target in targets:
            checks.append(_endpoint_check(step, target.exporter, target.endpoint, target.address))
        others = [name for name in names if name not in {t.exporter for t in targets}]
        if others:
            checks.append(Check(step, INFO, f"{signal} also go to {', '.join(others)} (nothing to check)"))
    return checks


def _endpoint_check(step: str, exporter: str, endpoint: str, address: tuple[str, int] | None) -> Check:
    if address is None:
        return Check(step, INFO, f"{exporter} sends to {endpoint}: a connection test would mislead (a proxy or a Unix socket)")
    reason = probe(address, PROBE_TIMEOUT_S)
    if reason is None:
        return Check(step, OK, f"{exporter} sends to {endpoint}, which accepts connections")
    return Check(
        step,
        WARN,
        f"{exporter} sends to {endpoint}: {reason}",
        f"start the collector there, point {OTEL_EXPORTER_OTLP_ENDPOINT} at one, or set the exporter variable to none; "
        "measurements are unaffected, but nothing reaches a backend",
    )


def carbon_check(providers: Sequence[LiveProvider] | None = None) -> Check:
    """Which carbon intensity spans get, and from where, asking the live providers once (default: those configured)."""
    try:
        providers = providers_from_env() if providers is None else providers
        intensity = resolve_carbon_intensity(None, None, providers)
    except ConfigurationError as exc:
        return Check("carbon.intensity", FAIL, str(exc), f"fix the setting it names ({OTEL_JOULES_COUNTRY} and friends)")
    detail = f"{intensity.gco2eq_per_kwh:g} gCO2eq/kWh ({intensity.source}: {intensity.detail})"
    if providers and intensity.source not in {p.source for p in providers}:
        return Check("carbon.intensity", WARN, f"no live provider answered; using {detail}",
                     "check the provider's key and network access (the warnings above say why each failed)")
    if intensity.source == "world_average":
        return Check("carbon.intensity", WARN, detail, f"set {OTEL_JOULES_COUNTRY} (an ISO 3166 code) for your grid's "
                     "yearly average, or a live provider (docs/carbon.md)")
    return Check("carbon.intensity", OK, detail)


def verdict(report: dict[str, Any]) -> tuple[int, str]:
    """The exit status and its sentence, from the meter's domains that add to the total."""
    sources = spans_sources(report)
    if "measured" in sources:
        mixed = " and estimated" if "estimate" in sources else ""
        return EXIT_MEASURED, f'spans will carry MEASURED{mixed.upper()} energy (energy.source = "{"mixed" if mixed else "measured"}")'
    if sources:
        return EXIT_ESTIMATES, 'spans will carry ESTIMATES only (energy.source = "estimate"): follow a FAIL step above'
    return EXIT_ESTIMATES, "nothing can be measured or estimated here: follow a FAIL step above"


# --- the command ------------------------------------------------------------------------


def examine(sysfs_root: str | None = None) -> dict[str, Any]:
    """Every step's check, the meter's domains and the verdict, as plain data (what ``--json`` prints)."""
    settings = Settings.from_env(sysfs_root=sysfs_root)
    counters = counters_check(settings)
    agent = agent_checks(settings.agent_socket, needed=counters.status != OK)
    if counters.status == FAIL and agent[-1].status == OK:
        # One route is enough: with the agent serving, the direct route's remedy is not needed.
        counters = Check(counters.step, INFO, f"{counters.detail}; not needed: the agent serves the counters")
    checks = [counters, *agent]
    try:
        with EnergyMeter(sysfs_root=sysfs_root, sample=False) as meter:
            devices = describe(meter)
            fallback = fallback_message(meter)
    except OSError as exc:
        # The verdict needs the meter; without one nothing is measured (the steps above say why).
        devices = {"sysfs_root": settings.sysfs_root, "domains": [],
                   "unavailable": [{"what": "energy meter", "reason": f"cannot start: {exc}", "remedy": ""}]}
        fallback = None
    checks += gpu_checks(devices)
    checks += exporter_checks()
    checks.append(carbon_check())
    status, sentence = verdict(devices)
    return {
        "exit_status": status,
        "measured": status == EXIT_MEASURED,
        "verdict": sentence,
        # What instrument(), zero-code and `run` will say once when they fall back (None: they measure).
        "fallback_message": fallback,
        "uid": os.getuid(),
        "agent_socket": settings.agent_socket,
        "checks": [asdict(c) for c in checks],
        "devices": devices,
    }


def run(args: argparse.Namespace) -> int:
    """Print every step and the verdict; exit 0 when energy will be measured, 1 when only estimated."""
    result = examine(args.sysfs_root)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print("\n".join(text_lines(result)))
    return int(result["exit_status"])


def text_lines(result: dict[str, Any]) -> list[str]:
    """The human form: one line per step, its remedy under it, the verdict last."""
    devices = result["devices"]
    lines = [
        f"otel-joules doctor (uid {result['uid']}; sysfs root: {devices['sysfs_root']}; "
        f"agent socket: {result['agent_socket']})",
        "",
    ]
    width = max(len(c["step"]) for c in result["checks"])
    for check in result["checks"]:
        lines.append(f"  {_MARKS[check['status']]:<4}  {check['step']:<{width}}  {check['detail']}")
        if check["remedy"]:
            lines.append(f"        {'':<{width}}  what to do: {check['remedy']}")
    lines += ["", f"Verdict: {result['verdict']}.", "`otel-joules devices` lists every domain."]
    return lines


# --- small helpers ----------------------------------------------------------------------


def _not_tried(step: str, after: str) -> Check:
    return Check(step, SKIPPED, f"not tried: {after} failed")


def _reasons(unavailable: Sequence[Unavailable]) -> str:
    return "; ".join(dict.fromkeys(f"{u.what}: {u.reason}" for u in unavailable)) or "no RAPL counter found"


def _remedies(unavailable: Sequence[Unavailable]) -> str:
    return " / ".join(dict.fromkeys(u.remedy for u in unavailable if u.remedy))


def _remedies_of(unavailable: Iterable[dict[str, Any]]) -> str:
    return " / ".join(dict.fromkeys(u["remedy"] for u in unavailable if u.get("remedy")))


def _owner(path: str, group: str | None) -> str:
    """``a socket, mode 0660, group G`` (or directory)."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        return f"cannot stat it: {exc.strerror}"
    kind = "a socket" if stat.S_ISSOCK(info.st_mode) else "a directory" if stat.S_ISDIR(info.st_mode) else "NOT a socket"
    return f"{kind}, mode {stat.S_IMODE(info.st_mode):04o}, group {group or info.st_gid}"


def _membership(group: str | None) -> str:
    """Whether this process is in ``group`` (a name or a gid), in words."""
    if group is None:
        return "its group is unknown"
    try:
        import grp

        gid = int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
    except (ImportError, KeyError, ValueError):
        return f"group {group}"
    member = gid == os.getgid() or gid in os.getgroups()
    return f"this process is {'in' if member else 'NOT in'} group {group}"
