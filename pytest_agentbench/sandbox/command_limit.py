"""The plugin's per-command time limit for an external agent, held inside the agent's own sandbox or container.

``python3 command_limit.py SECONDS LOG ARGV...`` starts ARGV (the agent) in a process group of its own and
stays its parent, as the same user in the same namespaces: it gives the agent nothing it did not have. An agent
that kills it ends with it (the kernel's parent-death signal); one that stops it (SIGSTOP) is left to the
plugin's time limit for the whole run, held from outside. Every
``POLL`` seconds it reads ``/proc`` (the sandbox's own PID namespace, or the container's) and ends each
*command* older than SECONDS.

A command is a process the agent's runtime started in a process group of its own (mini-swe-agent runs every
shell command in a new session, Codex every exec in a new session on a terminal), with everything it starts; the
processes in the agent's own group are the agent. It is ended whole: TERM to each of its processes and process
groups, KILL ``GRACE`` seconds later to what is left; before that, a line saying so is written to its output
when that is a pipe or a terminal (the agent shows the model what a command printed), and a JSON line to LOG
(``{"command", "seconds", "limit"}``) for the item's record.

Started with the environment's own ``python3`` (3.7 or later), this file imports nothing of the package
(``containment.limited_agent`` gives it its source in a variable, which it takes out of its environment).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (the environment's Python may be older than the subscripted built-ins)
    Table = dict[int, tuple[int, int, float]]  # pid -> (parent pid, process group, start since boot)

POLL = 0.2
GRACE = 2.0
TOLD = "\n[agentbench] this command was ended by the plugin: it ran past the per-command time limit of {limit:g} s\n"


def processes() -> Table:
    """pid -> (parent pid, process group, start in seconds since boot), of every process this one can see."""
    ticks = os.sysconf("SC_CLK_TCK")
    found: Table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as handle:
                text = handle.read()
        except OSError:
            continue  # gone meanwhile
        fields = text[text.rindex(")") + 2 :].split()  # (the name in parentheses may hold anything)
        if fields[0] == "Z":
            continue  # a zombie waits to be reaped, it runs nothing
        found[int(name)] = (int(fields[1]), int(fields[2]), int(fields[19]) / ticks)
    return found


def uptime() -> float:
    with open("/proc/uptime") as handle:
        return float(handle.read().split()[0])


def subtree(table: Table, root: int) -> list[int]:
    """``root`` and every process under it."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found: list[int] = []
    todo = [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def commands(table: Table, me: int, agent: int) -> list[int]:
    """The commands running now: processes under this one, outside the agent's group, whose parent is in it
    (or is this one: an orphaned command, this process being the sandbox's subreaper)."""
    if agent not in table:
        return []
    group = table[agent][1]
    found: list[int] = []
    for pid in subtree(table, me):
        parent, pgid, _ = table[pid]
        if pid in (me, agent) or pgid == group:
            continue
        if parent == me or (parent in table and table[parent][1] == group):
            found.append(pid)
    return found


def command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace").strip()[:300]
    except OSError:
        return ""


def tell(pid: int, limit: float) -> None:
    """Write the line saying why into the command's standard output, when that is a pipe or a terminal (never a
    file: that would write over what the command saved)."""
    path = f"/proc/{pid}/fd/1"
    try:
        if not (stat.S_ISFIFO(os.stat(path).st_mode) or stat.S_ISCHR(os.stat(path).st_mode)):
            return
        out = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
        try:
            os.write(out, TOLD.format(limit=limit).encode())
        finally:
            os.close(out)
    except OSError:
        pass


def signal_all(pids: Iterable[int], groups: Iterable[int], sig: int) -> None:
    for pgid in groups:
        try:
            os.killpg(pgid, sig)
        except OSError:
            pass
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


class Limit:
    def __init__(self, limit: float, log: str, agent: int) -> None:
        self.limit = limit
        self.log = log
        self.agent = agent
        self.me = os.getpid()
        # (pid, start) of each command ended, and of each process of one, -> when it gets KILL
        self.ended: dict[tuple[int, float], float] = {}
        self.doomed: dict[tuple[int, float], float] = {}

    def check(self) -> None:
        table = processes()
        now = uptime()
        group = table[self.agent][1] if self.agent in table else None
        for pid in commands(table, self.me, self.agent):
            started = table[pid][2]
            if (pid, started) in self.ended or now - started < self.limit:
                continue
            self.end(table, pid, now - started, group)
        moment = time.monotonic()
        late = [key for key, when in self.doomed.items() if when <= moment]
        alive = [pid for pid, start in late if pid in table and table[pid][2] == start]
        signal_all(alive, (), signal.SIGKILL)
        for key in late:
            del self.doomed[key]

    def end(self, table: Table, root: int, seconds: float, group: int | None) -> None:
        tree = subtree(table, root)
        groups = {table[pid][1] for pid in tree} - {group, os.getpgrp(), 0}  # (0: this process's own group)
        self.record({"command": command_line(root), "seconds": round(seconds, 1), "limit": self.limit})
        tell(root, self.limit)
        signal_all(tree, groups, signal.SIGTERM)
        when = time.monotonic() + GRACE
        self.ended[(root, table[root][2])] = when
        for pid in tree:
            self.doomed[(pid, table[pid][2])] = when

    def record(self, entry: dict[str, object]) -> None:
        try:
            with open(self.log, "a") as handle:
                handle.write(json.dumps(entry) + "\n")
        except OSError:
            pass


def become_subreaper() -> None:
    """Orphaned commands stay under this process (so they stay commands) instead of going to the sandbox's init."""
    try:
        import ctypes  # why: only here, and an image may lack it (then no subreaper)

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (ImportError, OSError, AttributeError):
        pass


def exit_code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def die_with(parent: int) -> None:
    """Have the kernel kill this process when ``parent`` ends (the parent-death signal): an agent that kills its
    supervisor, which runs as its own user, ends with it instead of running on free of the limit. Without
    ``ctypes`` (an image may lack it) the agent does not start: the limit would not hold."""
    import ctypes  # why: only in the agent's child

    if ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0) != 0:  # PR_SET_PDEATHSIG
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # it ended before the signal was set
        os._exit(137)


def start(argv: list[str]) -> int:
    me = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            os.setpgid(0, 0)
            die_with(me)
            os.execvp(argv[0], argv)
        except BaseException as exc:  # (nothing of this may go on past a failed start)
            sys.stderr.write(f"command_limit.py: cannot start the agent: {exc}\n")
        finally:
            os._exit(127)
    return pid


def main(args: list[str]) -> int:
    if len(args) < 3:
        sys.stderr.write("usage: command_limit.py SECONDS LOG ARGV...\n")
        return 2
    become_subreaper()
    agent = start(args[2:])
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # ending this process ends the agent with it
        signal.signal(sig, lambda number, frame: signal_all([agent], [agent], number))
    limit = Limit(float(args[0]), args[1], agent)
    while True:
        while True:  # reap what ended: the agent, or orphans left to this process
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return 0
            if pid == 0:
                break
            if pid == agent:
                return exit_code(status)
        try:
            limit.check()
        except (OSError, ValueError, IndexError):
            pass  # a process that went away while it was read: seen again at the next look
        time.sleep(POLL)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
