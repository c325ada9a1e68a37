"""The systemd unit that runs the agent with only what it needs."""

from __future__ import annotations

import os

from otel_joules.agent.setup import DEFAULT_MIN_INTERVAL_MS
from otel_joules.config import DEFAULT_AGENT_SOCKET

#: The dedicated user the printed systemd unit switches to once the counters and the socket are open.
DEFAULT_AGENT_USER = "otel-joules-agent"


def systemd_unit(
    group: str,
    socket_path: str = DEFAULT_AGENT_SOCKET,
    min_interval_ms: float = DEFAULT_MIN_INTERVAL_MS,
    executable: str = "otel-joules",
    protect_home: str = "yes",
    user: str = DEFAULT_AGENT_USER,
    bmc_config: str | None = None,
) -> str:
    """A systemd unit running the agent with only what it needs: root only to open the counters, then ``user``.

    ``executable`` is ExecStart's command (an absolute path: systemd does not search a venv's bin), already
    quoted for systemd; ``protect_home`` is ``read-only`` where that command lives under /home, /root or
    /run/user, which ``yes`` would hide from the service. ``bmc_config``: the BMC file (already quoted), read by
    the agent; the service then reaches the network (the BMC is on it), over IPv4 and IPv6 only.
    """
    runtime = os.path.dirname(socket_path)
    runtime_directory = runtime[len("/run/") :] if runtime.startswith("/run/") else None
    lines = [
        "# /etc/systemd/system/otel-joules-agent.service",
        "# Enable: sudo systemctl daemon-reload && sudo systemctl enable --now otel-joules-agent",
        f"# Users: sudo groupadd --system {group}; sudo usermod -aG {group} USER (then log in again)",
        f"# Agent: sudo useradd --system --no-create-home --shell /usr/sbin/nologin {user}",
        "[Unit]",
        "Description=otel-joules agent: RAPL energy counters for the group " + group,
        "After=systemd-udevd.service",
        "",
        "[Service]",
        "Type=simple",
        f"ExecStart={executable} agent --socket {socket_path} --group {group} --min-interval-ms {min_interval_ms:g} --user {user}"
        + (f" --bmc-config {bmc_config}" if bmc_config else ""),
        "Environment=PYTHONDONTWRITEBYTECODE=1",
        # Opening root-only counters, giving the socket to the group, switching to --user; none is kept once set up.
        "CapabilityBoundingSet=CAP_DAC_READ_SEARCH CAP_CHOWN CAP_FOWNER CAP_SETUID CAP_SETGID",
        "AmbientCapabilities=",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        f"ProtectHome={protect_home}",
        "PrivateTmp=yes",
        # The BMC is reached over the network; without one the agent needs none.
        "PrivateNetwork=no" if bmc_config else "PrivateNetwork=yes",
        "ProtectKernelTunables=yes",
        "ProtectKernelModules=yes",
        "ProtectControlGroups=yes",
        "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6" if bmc_config else "RestrictAddressFamilies=AF_UNIX",
        "RestrictNamespaces=yes",
        "LockPersonality=yes",
        "SystemCallArchitectures=native",
        "Restart=on-failure",
    ]
    if runtime_directory:
        # Preserved across restarts: a container that mounts the directory (never the socket file) sees the new socket.
        lines += [f"RuntimeDirectory={runtime_directory}", "RuntimeDirectoryMode=0755", "RuntimeDirectoryPreserve=yes"]
    else:
        lines += [f"ReadWritePaths={runtime}"]
    lines += ["", "[Install]", "WantedBy=multi-user.target", ""]
    return "\n".join(lines)
