"""Fork safety for locks the package holds across I/O or in background threads.

A lock that a parent thread holds at the moment of ``os.fork()`` stays held forever in the
child (that thread does not exist there), so the child's first use of it, often in an exit
hook, hangs: a DataLoader-style worker that never exits. Everything that holds a lock across
I/O, or takes one in a background thread, re-creates it in the child, as the OpenTelemetry
SDK does for its processors.
"""

from __future__ import annotations

import os
import weakref


def register_fork_hook(target: object, method_name: str) -> None:
    """Call ``target.<method_name>()`` in the child after ``os.fork()``, without keeping ``target`` alive.

    Hooks cannot be unregistered; one whose target is gone does nothing.
    """
    if not hasattr(os, "register_at_fork"):
        return
    ref = weakref.ref(target)

    def hook() -> None:
        alive = ref()
        if alive is not None:
            getattr(alive, method_name)()

    os.register_at_fork(after_in_child=hook)
