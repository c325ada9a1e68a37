"""``otel-joules agent``: serve RAPL counters to one group over a Unix socket (see :mod:`otel_joules.agent`)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any, Sequence

from otel_joules.agent import AgentSetupError, serve, systemd_unit
from otel_joules.agent.setup import DEFAULT_MIN_INTERVAL_MS
from otel_joules.agent.unit import DEFAULT_AGENT_USER
from otel_joules.config import DEFAULT_AGENT_SOCKET, OTEL_JOULES_BMC_CONFIG, bmc_config_path
from otel_joules.errors import ConfigurationError

if TYPE_CHECKING:
    from otel_joules.sensors.base import Channel


def register(subparsers: Any) -> None:
    """Add the ``agent`` subcommand."""
    parser = subparsers.add_parser(
        "agent",
        help="run as root: serve the root-only RAPL counters to the members of one group",
        description=(
            "Open the RAPL counters as root, drop every privilege, and push readings (no finer than "
            "--min-interval-ms) on a Unix socket (mode 0660) to members of --group only. Wherever it answers, the library "
            "reads through it by itself: the host's one reader of its counters and publisher of its devices."
        ),
    )
    parser.add_argument("--socket", default=DEFAULT_AGENT_SOCKET, help=f"the socket's path (default {DEFAULT_AGENT_SOCKET})")
    parser.add_argument("--group", default="otel-joules", help="the group (a name or a gid) whose members may read (default otel-joules)")
    parser.add_argument(
        "--min-interval-ms",
        type=float,
        default=DEFAULT_MIN_INTERVAL_MS,
        help=(
            f"time between readings, the finest any client gets (default {DEFAULT_MIN_INTERVAL_MS} ms; "
            "docs/measuring.md says why)"
        ),
    )
    parser.add_argument(
        "--user",
        help=f"switch to this user (a name or a uid) once the counters and the socket are open "
        f"(the printed unit uses {DEFAULT_AGENT_USER}); without it the agent stays uid 0 with no capabilities",
    )
    parser.add_argument("--sysfs-root", help="where sysfs is mounted (default: $OTEL_JOULES_SYSFS_ROOT or /sys)")
    parser.add_argument(
        "--bmc-config",
        help=(
            "the BMC file (TOML: Redfish or IPMI address and credentials, readable by the agent's user only; "
            f"docs/bmc.md): the platform's power goes to the host's metrics and, as joules only, to clients that ask "
            f"(default: ${OTEL_JOULES_BMC_CONFIG}, else none)"
        ),
    )
    parser.add_argument(
        "--print-systemd-unit",
        action="store_true",
        help="print a systemd unit running this installation's otel-joules (by its absolute path) as the agent, and exit",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Print the unit, or serve until SIGTERM."""
    if args.print_systemd_unit:
        command = installed_command()
        protect_home = protect_home_for(files_the_service_runs(command))
        sys.stdout.write(
            systemd_unit(
                args.group,
                args.socket,
                args.min_interval_ms,
                " ".join(map(systemd_word, command)),
                protect_home,
                user=args.user or DEFAULT_AGENT_USER,
                bmc_config=systemd_word(os.path.abspath(args.bmc_config)) if args.bmc_config else None,
            )
        )
        return 0
    from otel_joules.config import Settings

    # Not even bytecode caches from the metrics' imports: the agent writes nothing outside its runtime directory.
    sys.dont_write_bytecode = True
    from otel_joules.cli.agent_metrics import start_host_metrics
    from otel_joules.sensors import bmc

    settings = Settings.from_env(sysfs_root=args.sysfs_root)
    # Opened before serve() drops the privileges: the agent is its host's one publisher of hw.* metrics. The BMC
    # file is read here, as root, and its credentials stay in this process's pollers: one poller per BMC feeds
    # both the hw.* metrics and the readings served to clients (a channel of its own each, as each is read in
    # its own thread), and what is served is joules only.
    bmc_path = args.bmc_config or bmc_config_path()
    platform: list[Channel] = []
    host_metrics = None
    try:
        try:
            platform = list(bmc.discover(bmc_path).channels) if bmc_path else []
            host_metrics = start_host_metrics(settings, platform)
        except ConfigurationError as exc:
            raise ConfigurationError(f"agent: {exc}") from None
        served = [c.sharing_poller() if isinstance(c, bmc.BmcChannel) else c for c in platform]
        try:
            return serve(args.socket, args.group, args.min_interval_ms, args.user, settings, platform=served)
        except AgentSetupError as exc:
            raise ConfigurationError(f"agent: {exc}") from None
    finally:
        if host_metrics is not None:
            host_metrics.close()
        for channel in platform:
            channel.close()


#: Where systemd's ProtectHome=yes hides files from a service (read-only keeps them readable).
HOME_DIRECTORIES = ("/home", "/root", "/run/user")


def installed_command() -> list[str]:
    """The absolute command that runs this installation's ``otel-joules``: its console script beside this interpreter
    (a venv's or the system's bin), else this interpreter with ``-m`` (never a bare name systemd would not find)."""
    script = os.path.join(os.path.dirname(os.path.abspath(sys.executable)), "otel-joules")
    if os.path.isfile(script) and os.access(script, os.X_OK):
        return [script]
    return [os.path.abspath(sys.executable), "-m", "otel_joules.cli.main"]


def files_the_service_runs(command: Sequence[str]) -> list[str]:
    """The command, the interpreter behind its links and this installation's prefix: what the service must read."""
    paths = [command[0], os.path.realpath(command[0]), os.path.realpath(sys.executable), sys.prefix, sys.base_prefix]
    return [os.path.abspath(path) for path in paths]


def protect_home_for(paths: Sequence[str]) -> str:
    """``ProtectHome=``'s value for a service that must read ``paths``: ``read-only`` where one is under a home
    directory (a venv in /home, a pyenv interpreter in /root), else ``yes``."""
    under = any(path == home or path.startswith(home + "/") for path in paths for home in HOME_DIRECTORIES)
    return "read-only" if under else "yes"


def systemd_word(word: str) -> str:
    """``word`` quoted for an ExecStart= line: specifiers (%) and variables ($) escaped, quoted if it has spaces."""
    escaped = word.replace("%", "%%").replace("$", "$$")
    if any(c in escaped for c in " \t\"'\\;"):
        escaped = '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return escaped
