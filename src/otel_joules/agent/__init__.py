"""``otel-joules agent``: a least-privilege root reader of RAPL counters for the members of one group.

Since Linux 5.10 ``energy_uj`` is readable only by root (the fix for CVE-2020-8694, PLATYPUS).
The agent opens the counters as root, gives up every privilege it no longer needs, and pushes
readings, coarsened in time, on a Unix socket (mode 0660) to peers whose credentials
(``SO_PEERCRED``) put them in its group. The library reads through it by itself
(:mod:`otel_joules.sensors.agent`); the wire protocol is :mod:`otel_joules.sensors.agent_protocol`.
"""

from otel_joules.agent.server import AgentServer, serve
from otel_joules.agent.setup import AgentSetupError
from otel_joules.agent.unit import systemd_unit

__all__ = ["AgentServer", "AgentSetupError", "serve", "systemd_unit"]
