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
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

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
        fields = stat[stat.rfind(b")") + 2 :].split()
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
    return stat[stat.rfind(b")") + 2 :][:1] != b"Z"


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


def end_namespace_peers(spare: Iterable[int] = (), timeout: float = 5.0) -> None:
    """Kill every other process of the caller's PID namespace and return once none is running.

    Only for a process in a run's own PID namespace (the script at its exit, the subprocess launcher):
    there ``kill(-1)`` reaches exactly the run's processes (never the namespace's init, never the
    caller); anywhere else it would reach every process of the user. ``spare``: pids to leave alone (a
    traced script stopped in its exit). Zombies count as gone: they cannot write anything any more."""
    keep = {1, os.getpid(), *spare}
    deadline = time.monotonic() + timeout
    while True:
        alive = set(proc_table()) - keep  # (the table leaves zombies out)
        if not alive or time.monotonic() >= deadline:
            return
        if spare:
            kill_pids(alive)
        else:
            try:
                os.kill(-1, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.001)


PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make the caller a child subreaper: whatever its descendants orphan (a double fork, ``setsid``) is
    re-parented to it rather than to the machine's init, so ``end_descendants`` finds it. False: no prctl here."""
    import ctypes  # why: only the launchers of unisolated scripts need the C library

    try:
        return int(ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def end_descendants(timeout: float = 5.0) -> None:
    """Kill every descendant of the caller (a subreaper, see ``become_subreaper``) and reap them, so none is
    alive, nor left as a zombie, when the caller's run is reported (without isolation: no PID namespace ends the
    run's processes). Loops until none is found, so a process forking while it is killed is caught too."""
    me = os.getpid()
    deadline = time.monotonic() + timeout
    while True:
        victims = descendants(me)  # (zombies are not in it: they are reaped below)
        kill_pids(victims)
        children_left = reap_children()
        if (not victims and not children_left) or time.monotonic() >= deadline:
            return
        time.sleep(0.001)


def reap_children() -> bool:
    """Reap every child that has ended; whether any child is left."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


PTRACE_TRACEME = 0
PTRACE_CONT = 7
PTRACE_SETOPTIONS = 0x4200
PTRACE_GETSIGINFO = 0x4202
PTRACE_O_TRACEEXEC = 0x10
PTRACE_O_TRACEEXIT = 0x40
PTRACE_O_EXITKILL = 0x100000
PTRACE_EVENT_EXIT = 6
STOP_SIGNALS = (signal.SIGSTOP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU)


def _ptrace(request: int, pid: int, data: int = 0, addr: object = None) -> int:
    import ctypes  # why: only the launcher of a traced script needs the C library

    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.restype = ctypes.c_long
    return int(libc.ptrace(ctypes.c_long(request), ctypes.c_long(pid), addr, ctypes.c_void_p(data)))


def trace_me() -> bool:
    """In a child, before it runs the script: let its parent stop it at its exit (False: no ptrace here)."""
    return _ptrace(PTRACE_TRACEME, 0) == 0


def _group_stop(pid: int) -> bool:
    import ctypes  # why: a siginfo buffer for PTRACE_GETSIGINFO (which fails for a group-stop)

    info = ctypes.create_string_buffer(128)
    return _ptrace(PTRACE_GETSIGINFO, pid, ctypes.addressof(info)) != 0


def continue_traced(pid: int, status: int, first: bool, end_others: Callable[[], object]) -> None:
    """Let the traced script ``pid`` go on from the stop ``status`` (as ``waitpid`` gives it, or waitid's
    ``si_status`` shifted by 8). ``first``: the stop right after ``trace_me`` (its options are set then);
    at its exit stop ``end_others()`` runs first; an ordinary signal is handed on, a stop signal is not."""
    sig, event = (status >> 8) & 0xFF, status >> 16
    deliver = 0
    if first:
        _ptrace(PTRACE_SETOPTIONS, pid, PTRACE_O_TRACEEXIT | PTRACE_O_TRACEEXEC | PTRACE_O_EXITKILL)
    elif event == PTRACE_EVENT_EXIT:
        end_others()
    elif event == 0 and not (sig in STOP_SIGNALS and _group_stop(pid)):
        deliver = sig
    _ptrace(PTRACE_CONT, pid, deliver)


def namespace_of(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def end_namespace_of(init: int, spare: Iterable[int] = (), timeout: float = 5.0) -> None:
    """From outside: kill every process of the PID namespace whose init is ``init`` (but the init and
    ``spare``) and return once none is running."""
    space = namespace_of(init)
    keep = {init, *spare}
    deadline = time.monotonic() + timeout
    while space is not None:
        alive = {pid for pid in proc_table() if pid not in keep and namespace_of(pid) == space}
        if not alive or time.monotonic() >= deadline:
            return
        kill_pids(alive)
        time.sleep(0.001)


def wait_ending_namespace(pid: int) -> int:
    """Wait for the traced script ``pid`` (see ``trace_me``) like ``waitpid``; the wait status.

    The script stops at the start of its exit, while it is still alive: every other process of the
    run's PID namespace is killed and gone (``end_namespace_peers``) before it is let go, so nothing
    it started can write after it ended. (Should a kernel not stop a script killed by SIGKILL, the rest
    is killed right after.) Signals reach the script as without tracing; a stop signal does not stop it."""
    first = True
    while True:
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:  # (cannot happen: it is our child) never report a clean exit we did not see
            end_namespace_peers()
            return signal.SIGKILL
        if not os.WIFSTOPPED(status):
            end_namespace_peers()
            return status
        # (the first stop is the one after the script's execve: from then on its exit stops it)
        continue_traced(pid, status, first, lambda: end_namespace_peers(spare=[pid]))
        first = False


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
