"""The plugin's per-command time limit for an external agent, held inside the agent's own sandbox or container.

``python3 command_limit.py SECONDS LOG ARGV...`` starts ARGV (the agent) in a process group of its own and
stays its parent, as the same user in the same namespaces: it gives the agent nothing it did not have. It holds
itself against the agent, which could signal it: the agent starts under a seccomp filter (``Guard``) that
refuses every signal aimed at this process, its group or every process, ``ptrace`` and pidfd signals; this
process is not dumpable (its memory is closed to the agent's user); should it end anyway, the agent ends with
it (the kernel's parent-death signal). Every ``POLL`` seconds it reads ``/proc`` (the sandbox's own PID
namespace, or the container's) and ends each *command* older than SECONDS.

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
import struct
import sys
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (the environment's Python may be older than the subscripted built-ins)
    Table = dict[int, tuple[int, int, float]]  # pid -> (parent pid, process group, start since boot)
    # BPF instructions (code, jump if true, jump if false, k), a label first where jumps go to one: a jump is a
    # label, or 0 (the next instruction)
    Program = list[tuple[object, ...]]

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
        self.ended: set[tuple[int, float]] = set()  # (pid, start) of each command ended
        self.doomed: dict[tuple[int, float], float] = {}  # (pid, start) of each process of one -> when it gets KILL

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
        self.ended.add((root, table[root][2]))
        for pid in tree:
            self.doomed[(pid, table[pid][2])] = when

    def record(self, entry: dict[str, object]) -> None:
        try:
            with open(self.log, "a") as handle:
                handle.write(json.dumps(entry) + "\n")
        except OSError:
            pass


def prctl(name: str, option: int, *args: object) -> None:
    """``prctl(option, *args)`` (``name`` for the error); OSError when it fails. ImportError where the image's
    Python lacks ``ctypes``."""
    import ctypes  # why: only here, and an image may lack it

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, *args, *(0,) * (4 - len(args))) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({name}) failed")


def become_subreaper() -> None:
    """Orphaned commands stay under this process (so they stay commands) instead of going to the sandbox's init."""
    try:
        prctl("PR_SET_CHILD_SUBREAPER", 36, 1)
    except (ImportError, OSError, AttributeError):
        pass  # (then no subreaper)


def keep_out() -> None:
    """Make this process not dumpable: a process of its user (the agent) then cannot open its memory
    (``/proc/PID/mem``, ``process_vm_writev``) nor its descriptors, as ptrace's own checks refuse it. (The
    agent's exec makes it dumpable again.)"""
    try:
        prctl("PR_SET_DUMPABLE", 4, 0)
    except (ImportError, OSError, AttributeError):
        pass  # (without ctypes the agent does not start either)


def exit_code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def die_with(parent: int) -> None:
    """Have the kernel kill this process when ``parent`` ends (the parent-death signal): should the supervisor
    end (the agent's filter refuses it the kill; the kernel, for memory, or a process outside may not), the agent
    ends with it instead of running on free of the limit. Without ``ctypes`` (an image may lack it) the agent does
    not start: the limit would not hold."""
    prctl("PR_SET_PDEATHSIG", 1, signal.SIGKILL)
    if os.getppid() != parent:  # it ended before the signal was set
        os._exit(137)


# The system calls the agent may not aim at this process, per machine: (seccomp's arch, numbers by name)
ARCHES = {
    "x86_64": (0xC000003E, {"kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129,
                            "rt_tgsigqueueinfo": 297, "ptrace": 101, "setpgid": 109, "fcntl": 72,
                            "pidfd_open": 434, "pidfd_send_signal": 424}),
    "aarch64": (0xC00000B7, {"kill": 129, "tkill": 130, "tgkill": 131, "rt_sigqueueinfo": 138,
                             "rt_tgsigqueueinfo": 240, "ptrace": 117, "setpgid": 154, "fcntl": 25,
                             "pidfd_open": 434, "pidfd_send_signal": 424}),
}  # fmt: skip
X32_BIT = 0x40000000  # x86_64's x32 calls: the same arch, other numbers
F_SETSIG = 10
# classic BPF, as seccomp runs it
LOAD_WORD = 0x20  # BPF_LD | BPF_W | BPF_ABS
JUMP_EQUAL = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
JUMP_AT_LEAST = 0x35  # BPF_JMP | BPF_JGE | BPF_K
RETURN = 0x06  # BPF_RET | BPF_K
ALLOW = 0x7FFF0000
REFUSE = 0x00050000 | 1  # SECCOMP_RET_ERRNO | EPERM
KILL = 0x80000000  # SECCOMP_RET_KILL_PROCESS
NR, ARCH = 0, 4  # offsets in seccomp_data


def argument(index: int) -> int:
    """The offset of the low 32 bits of argument ``index`` in seccomp_data (both machines are little-endian).
    Only those are compared: the kernel takes a pid, a signal or an fcntl command as a 32-bit int and drops the
    high bits, so a caller could set them to slip past a 64-bit comparison."""
    return 16 + 8 * index


class Guard:
    """The seccomp filter the agent, and everything it starts, runs under: it cannot stop, kill or trace this
    process, which holds its per-command limit. Refused with EPERM: ``kill``, ``tkill``, ``tgkill``,
    ``rt_sigqueueinfo`` and ``rt_tgsigqueueinfo`` aimed at this process, its process group or every process
    (-1); joining this process's group (``setpgid``), where ``kill(0)`` would reach it; ``fcntl(F_SETSIG)`` (a
    file's owner can be sent any signal, stop included, when it is ready); ``pidfd_open`` of this process;
    ``pidfd_send_signal`` and ``ptrace`` wholly (a pidfd also comes from opening ``/proc/PID``). A call of
    another ABI (32-bit, x32) ends the caller: its numbers are not these."""

    def __init__(self, me: int, group: int) -> None:
        machine = os.uname().machine
        if machine not in ARCHES or struct.calcsize("P") != 8:
            sys.stderr.write(
                f"command_limit.py: cannot start the agent: no seccomp filter for this machine ({machine}, "
                f"{8 * struct.calcsize('P')}-bit python3); the per-command time limit needs x86_64 or aarch64\n"
            )
            raise SystemExit(127)
        self.arch, self.numbers = ARCHES[machine]
        self.x32 = machine == "x86_64"
        self.me = me
        self.group = group

    def program(self) -> bytes:
        mine = [self.me, -self.group & 0xFFFFFFFF, 0xFFFFFFFF]  # this process, its group, every process (-1)
        numbers = self.numbers
        code: Program = [(LOAD_WORD, 0, 0, ARCH), (JUMP_EQUAL, 0, "end", self.arch), (LOAD_WORD, 0, 0, NR)]
        if self.x32:
            code.append((JUMP_AT_LEAST, "end", 0, X32_BIT))
        branches = {"pid": ["kill", "tkill", "rt_sigqueueinfo", "pidfd_open"],
                    "pids": ["tgkill", "rt_tgsigqueueinfo"], "refuse": ["ptrace", "pidfd_send_signal"],
                    "group": ["setpgid"], "fcntl": ["fcntl"]}  # fmt: skip
        for label, names in branches.items():
            code += [(JUMP_EQUAL, label, 0, numbers[name]) for name in names]
        code.append((RETURN, 0, 0, ALLOW))
        code += self.refuse_if("pid", (0, mine))
        code += self.refuse_if("pids", (0, mine), (1, [self.me]))  # (tgkill: the thread group, then the thread)
        code += self.refuse_if("group", (1, [self.group]))
        code += self.refuse_if("fcntl", (1, [F_SETSIG]))
        code += [("refuse", RETURN, 0, 0, REFUSE), ("end", RETURN, 0, 0, KILL)]
        return assemble(code)

    @staticmethod
    def refuse_if(label: str, *checks: tuple[int, list[int]]) -> Program:
        """From ``label``: refuse the call when, for one of ``checks`` (argument index, values), that argument is
        one of the values; else allow it."""
        code: Program = []
        for index, values in checks:
            code.append((LOAD_WORD, 0, 0, argument(index)))
            code += [(JUMP_EQUAL, "refuse", 0, value) for value in values]
        code[0] = (label, *code[0])
        return code + [(RETURN, 0, 0, ALLOW)]

    def install(self) -> None:
        """Install the filter on this process (the agent's, before it starts): irreversible, inherited by every
        process it starts. Needs no privilege, only no_new_privs (Docker's default profile and bubblewrap allow
        it); failing, the agent does not start."""
        import ctypes  # why: only in the agent's child

        code = self.program()
        buffer = ctypes.create_string_buffer(code, len(code))

        class Fprog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

        prog = Fprog(len(code) // 8, ctypes.cast(buffer, ctypes.c_void_p))
        prctl("PR_SET_NO_NEW_PRIVS", 38, 1)
        prctl("PR_SET_SECCOMP", 22, 2, ctypes.byref(prog))  # SECCOMP_MODE_FILTER


def assemble(code: Program) -> bytes:
    """Pack ``code`` as sock_filter structs; an instruction given as ``(label, ...)`` is where jumps to that
    label go (classic BPF jumps forward only, by a count of instructions)."""
    labels: dict[str, int] = {}
    plain: list[tuple[object, ...]] = []
    for instruction in code:
        if isinstance(instruction[0], str):
            labels[instruction[0]] = len(plain)
            instruction = instruction[1:]
        plain.append(instruction)

    def offset(target: object, at: int) -> int:
        return 0 if target == 0 else labels[str(target)] - at - 1

    return b"".join(
        struct.pack("=HBBI", op, offset(yes, at), offset(no, at), k) for at, (op, yes, no, k) in enumerate(plain)
    )


def start(argv: list[str]) -> int:
    me = os.getpid()
    guard = Guard(me, os.getpgrp())  # (made here: an unknown machine is refused before anything starts)
    pid = os.fork()
    if pid == 0:
        try:
            os.setpgid(0, 0)
            die_with(me)
            guard.install()
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
    keep_out()
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
