"""Finding and killing the processes of one run: its process group, its descendants, its pids cgroup.

The cgroup (``/sys/fs/cgroup/pids/agentbench/<id>``, cgroup v1, when writable) caps the number of
tasks with ``pids.max`` and lists every member, including those that left the process group with
``setsid()``. Without it the process limit falls back to ``RLIMIT_NPROC`` (non-root) or to polling
``/proc`` every ``POLL_INTERVAL`` seconds (root).
"""
from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path
from typing import Iterable, Sequence

from .limits import Limits

POLL_INTERVAL = 0.05  # seconds between /proc scans when no cgroup can count processes
PIDS_CGROUP_ROOT = Path("/sys/fs/cgroup/pids")


def proc_table() -> dict[int, tuple[int, int]]:
    """pid -> (ppid, pgid) for every live process, read from /proc."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if fields[0] == b"Z":
            continue
        table[int(name)] = (int(fields[1]), int(fields[2]))
    return table


def is_live(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:][:1] != b"Z"


def descendants(root: int, table: dict[int, tuple[int, int]] | None = None) -> set[int]:
    """Every live process below ``root`` (children, grandchildren, ...)."""
    table = proc_table() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def group_members(pgid: int, table: dict[int, tuple[int, int]] | None = None) -> set[int]:
    table = proc_table() if table is None else table
    return {pid for pid, (_, group) in table.items() if group == pgid}


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_pids(pids: Iterable[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def kill_tree(leader: int) -> None:
    """Kill the process group of ``leader`` (not yet reaped, so its id cannot be reused) and its descendants."""
    for _ in range(20):
        table = proc_table()
        victims = group_members(leader, table) | descendants(leader, table)
        victims.discard(os.getpid())
        kill_group(leader)
        if not victims:
            return
        kill_pids(victims)
        time.sleep(0.005)


class ProcessJail:
    """The processes of one run: its process group, its descendants and, when possible, a pids cgroup."""

    def __init__(self, limits: Limits, *, cgroup: Path | None | bool = True):
        """``cgroup``: True makes a new cgroup when possible; a path adopts an existing one; None means none."""
        self.limits = limits
        self.cgroup: Path | None = self._make_cgroup(limits) if cgroup is True else (cgroup or None)

    @staticmethod
    def _make_cgroup(limits: Limits) -> Path | None:
        if not (PIDS_CGROUP_ROOT / "cgroup.procs").exists():
            return None
        path = PIDS_CGROUP_ROOT / "agentbench" / uuid.uuid4().hex
        try:
            path.mkdir(parents=True)
            (path / "pids.max").write_text(str(limits.processes) if limits.processes else "max")
        except OSError:
            try:
                path.rmdir()
            except OSError:
                pass
            return None
        return path

    @property
    def counts_processes(self) -> bool:
        """True when the kernel enforces the process limit (cgroup or RLIMIT_NPROC), so no polling."""
        return self.cgroup is not None or os.getuid() != 0 or not self.limits.processes

    def join(self, pid: int | None = None) -> None:
        """Put ``pid`` (default: the calling process, in the child) into the run's cgroup."""
        if self.cgroup is not None:
            (self.cgroup / "cgroup.procs").write_text(str(pid or os.getpid()))

    def members(self) -> set[int]:
        if self.cgroup is None:
            return set()
        try:
            return {int(p) for p in (self.cgroup / "cgroup.procs").read_text().split()}
        except OSError:
            return set()

    def hit_process_limit(self) -> bool:
        if self.cgroup is None:
            return False
        try:
            events = (self.cgroup / "pids.events").read_text()
        except OSError:
            return False
        return any(line.split()[-1] != "0" for line in events.splitlines() if line.startswith("max"))

    def too_many_processes(self, leader: int) -> bool:
        """Polling fallback: the leader, its group and its descendants counted through /proc."""
        if not self.limits.processes:
            return False
        table = proc_table()
        count = len(group_members(leader, table) | descendants(leader, table) | {leader})
        return count > self.limits.processes

    def kill_members(self) -> None:
        """Kill every live member of the cgroup (a no-op without one)."""
        for _ in range(50):
            alive = {pid for pid in self.members() if is_live(pid)} - {os.getpid()}
            if not alive:
                return
            kill_pids(alive)
            time.sleep(0.005)

    def kill_all(self, leader: int, extra_roots: Sequence[int] = ()) -> None:
        """Kill the group, the descendants of ``leader`` (and of ``extra_roots``) and the cgroup members."""
        if self.cgroup is not None:  # the cgroup lists every process of the run: no /proc scan needed
            for _ in range(20):
                kill_group(leader)
                victims = {pid for pid in self.members() if is_live(pid)} - {os.getpid()}
                if not victims:
                    break
                kill_pids(victims)
                time.sleep(0.002)
            if not extra_roots:
                return
        for _ in range(20):
            table = proc_table()
            victims = group_members(leader, table) | descendants(leader, table) | self.members()
            for root in extra_roots:
                victims |= descendants(root, table)
            if leader in table:
                victims.add(leader)
            victims.discard(os.getpid())
            if not victims:
                return
            kill_group(leader)
            kill_pids(victims)
            time.sleep(0.002)

    def close(self) -> None:
        if self.cgroup is None:
            return
        for _ in range(50):  # a killed task leaves the cgroup once it is reaped
            try:
                self.cgroup.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                kill_pids(self.members())
                time.sleep(0.01)
