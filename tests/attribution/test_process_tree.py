"""``process_tree``: a command's child and its descendants, as ``otel-joules run`` matches them against NVML's lists."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from otel_joules.attribution.procfs import process_tree


def _stat(pid: int, parent: int) -> str:
    # The command name may hold spaces and ')' as real ones may.
    return f"{pid} (a b) c) S {parent} {pid} {pid} 0 -1 4194560 0 0 0 0 5 1 0 0 20 0 1 0 100 0 0\n"


def test_real_proc_finds_a_grandchild_and_nothing_else(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild"
    # Two commands: the outer shell forks the inner one rather than becoming it.
    child = subprocess.Popen(["sh", "-c", f"sh -c 'echo $$ > {pid_file}; sleep 30'; true"], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.01)
        grandchild = int(pid_file.read_text())
        tree = process_tree(child.pid)
        assert {child.pid, grandchild} <= tree
        assert 1 not in tree and len(tree) <= 3  # the shell, the inner shell, and sleep if not exec'd
    finally:
        os.killpg(child.pid, signal.SIGKILL)  # the whole tree, grandchild included
        child.wait()


def test_written_procfs_without_children_files_is_walked_by_parents(tmp_path: Path) -> None:
    for pid, parent in ((10, 1), (11, 10), (12, 11), (13, 1), (14, 13)):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(_stat(pid, parent))
    assert process_tree(10, str(tmp_path)) == {10, 11, 12}
    assert process_tree(99, str(tmp_path)) == {99}  # gone: only itself, as NVML may still list it
