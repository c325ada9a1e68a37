"""``otel-joules setup-access --group G [--install]``: RAPL counters readable by one group (0440 root:G).

The route for single-user machines (the agent, ``otel-joules agent``, is the one for shared hosts):
a udev rule gives every ``energy_uj`` to the group at boot (udev replays ``add`` for every zone) and
whenever a zone appears later; a systemd-tmpfiles file is the alternative where udev rules are not
wanted (at boot, and again whenever ``systemd-tmpfiles --create`` runs).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from otel_joules.errors import ConfigurationError
from otel_joules.exporters.safe_open import create_new
from otel_joules.sensors.rapl import WORLD_READABLE_RISK

#: Where the two files go, relative to the root (``--root``, default ``/``).
UDEV_RULE_PATH = "etc/udev/rules.d/60-otel-joules-powercap.rules"
TMPFILES_PATH = "etc/tmpfiles.d/otel-joules-powercap.conf"
#: The mode given to every counter: owner and group read, nobody else.
COUNTER_MODE = "0440"
#: A group name udev and tmpfiles take verbatim (or a gid): nothing that could change the rule.
_GROUP = re.compile(r"^([a-z_][a-z0-9_-]{0,31}|[0-9]{1,10})$")
#: Zone directories: MSR and MMIO RAPL zones and sub-zones (the kernel's names, Intel and AMD alike).
_ZONE_GLOBS = ("intel-rapl:*", "intel-rapl:*/intel-rapl:*", "intel-rapl-mmio:*", "intel-rapl-mmio:*/intel-rapl-mmio:*")


def register(subparsers: Any) -> None:
    """Add the ``setup-access`` subcommand."""
    parser = subparsers.add_parser(
        "setup-access",
        help="make the RAPL counters readable by one group (0440 root:G), at boot and on hotplug",
        description=(
            "Print (or, with --install, write) a udev rule, and a systemd-tmpfiles alternative, giving every RAPL "
            "energy_uj to one group with mode 0440. " + WORLD_READABLE_RISK
        ),
    )
    parser.add_argument("--group", required=True, help="the group whose members may read the counters")
    parser.add_argument("--install", action="store_true", help="write both files (as root) instead of printing them")
    parser.add_argument("--root", default="/", help="install under this root instead of / (images, tests)")
    parser.set_defaults(handler=run)


def udev_rule(group: str) -> str:
    """The udev rule: every RAPL zone's ``energy_uj`` to ``root:group``, mode 0440, when the zone appears."""
    return (
        f"# otel-joules: RAPL energy counters readable by group {group} only ({COUNTER_MODE} root:{group}),\n"
        "# at boot (udev replays add for every zone) and whenever a zone appears (hotplug, module load).\n"
        f"# {WORLD_READABLE_RISK}\n"
        'SUBSYSTEM=="powercap", KERNEL=="intel-rapl*:*", ACTION=="add|change", '
        f'RUN+="/bin/chown root:{group} /sys%p/energy_uj", RUN+="/bin/chmod {COUNTER_MODE} /sys%p/energy_uj"\n'
    )


def tmpfiles_conf(group: str) -> str:
    """The systemd-tmpfiles alternative: the same ownership and mode, applied at boot."""
    lines = [
        f"# otel-joules: RAPL energy counters readable by group {group} only ({COUNTER_MODE} root:{group}), at boot.",
        "# A zone that appears later needs `systemd-tmpfiles --create` again (the udev rule covers that by itself).",
        f"# {WORLD_READABLE_RISK}",
    ]
    lines += [f"z /sys/class/powercap/{glob}/energy_uj {COUNTER_MODE} root {group} -" for glob in _ZONE_GLOBS]
    return "\n".join(lines) + "\n"


def join_instructions(group: str) -> str:
    """How to create the group and add a user to it."""
    return (
        f"Create the group once: sudo groupadd --system {group}\n"
        f"Add each user who measures: sudo usermod -aG {group} USER   (then log out and in again, or run `newgrp {group}`)\n"
    )


def run(args: argparse.Namespace) -> int:
    """Print the files and the instructions, or write the files."""
    group = args.group
    if not _GROUP.match(group):
        raise ConfigurationError(f"setup-access: {group!r} is not a group name or gid (letters, digits, _ and -)")
    files = ((UDEV_RULE_PATH, udev_rule(group)), (TMPFILES_PATH, tmpfiles_conf(group)))
    if not args.install:
        for path, text in files:
            print(f"# /{path}")
            print(text)
        print("Install both as root with: sudo otel-joules setup-access --group " + group + " --install")
        print(join_instructions(group), end="")
        return 0
    root = Path(args.root)
    for path, text in files:
        target = root / path
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(target.name + ".tmp")
            # Written as root: a link planted at the temporary name (or a stale file) is removed,
            # never written through; os.replace then swaps the target itself, not what a link there points to.
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            with os.fdopen(create_new(tmp), "w", encoding="utf-8") as handle:
                os.fchmod(handle.fileno(), 0o644)
                handle.write(text)
            os.replace(tmp, target)
        except OSError as exc:
            raise ConfigurationError(f"setup-access: cannot write {target}: {exc.strerror} (run it as root)") from None
        print(f"wrote {target}")
    if args.root == "/" and shutil.which("udevadm"):
        # Apply now as well: the rule alone would wait for the next boot or hotplug.
        for command in (["udevadm", "control", "--reload"], ["udevadm", "trigger", "--subsystem-match=powercap", "--action=change"]):
            subprocess.run(command, check=False, timeout=60)
        print("applied to the zones present now (udevadm trigger)")
    else:
        print("apply now: sudo udevadm control --reload && sudo udevadm trigger --subsystem-match=powercap --action=change")
    print(join_instructions(group), end="")
    return 0
