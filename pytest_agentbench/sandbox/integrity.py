"""What a verdict relies on besides its own comparisons: how a child's run ended, and a bounded process
for trusted work on untrusted data.

``run_failure`` reads what the executor observed about a child (its exit status, a limit it hit, the
executor dying under it); nothing the child prints or writes can make it say "ended normally".
``run_bounded`` runs a trusted function (the parent's comparisons on the operands a child sent, which
may be huge arrays, or deep structures, built to make comparing them slow) in a short-lived forked
process with a time limit and a memory budget, and hands back only small JSON reports.

There is no completion token and no tamper guard inside the child any more: whatever runs in the
child's process can read or defeat them, so they never proved anything, and since the comparisons run
in the parent there is nothing left in the child for them to protect.
"""

from __future__ import annotations

import json
import math
import os
import resource
import select
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from .result import ExecResult
from .workdir import EXECUTOR_DIED

REPORT_BYTES = 1 << 20  # most bytes of reports a bounded process may hand back
KILL_GRACE = 1.0  # seconds a bounded process gets past its time limit before it is killed


def run_failure(result: ExecResult) -> str | None:
    """Why a child's run did not end normally (None: it exited with status 0 within its limits)."""
    if result.limit:
        return f"{result.limit} limit hit"
    if executor_died(result):
        return "generated code killed the process running it (its parent)"
    if result.exit_code != 0:
        return f"script failed with exit code {result.exit_code}"
    return None


def executor_died(result: ExecResult) -> bool:
    """Whether the executor itself reported that it died under the run: its marker as the last line of
    stderr of a run without an exit status. (A child can print the marker, but it cannot end without an
    exit status and without a limit: then it was killed by whoever ran it.)"""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    return result.exit_code is None and not result.limit and bool(lines) and lines[-1].startswith(EXECUTOR_DIED)


@dataclass(frozen=True)
class Bounded:
    """How a bounded run ended: ``ended`` is "ok" (``result`` holds what the work returned), "time",
    "memory", "error" (``why`` says which exception), "signal N" or "exit N"."""

    ended: str
    result: Any = None
    reports: tuple[dict[str, Any], ...] = ()
    why: str = ""


def run_bounded(
    work: Callable[[Callable[[dict[str, Any]], None]], Any], *, timeout: float, memory: int | None
) -> Bounded:
    """Run ``work(report)`` in a forked copy of this process, at most ``timeout`` seconds (wall and CPU) and
    ``memory`` more bytes of address space than this process has now; ``report(dict)`` hands a small
    JSON-able progress report back, and so does ``work``'s return value.

    Only for trusted code (it runs with this process's files and sockets): the copy's standard streams
    go to /dev/null, it never returns into the caller, and it is killed when it runs over."""
    budget = None if memory is None else _address_space() + int(memory)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the bounded copy: never returns
        os.close(read_end)
        _run_copy(work, write_end, timeout, budget)
    os.close(write_end)
    try:
        data, finished = _collect(read_end, pid, time.monotonic() + timeout + KILL_GRACE)
    finally:
        os.close(read_end)
        status = _reap(pid)
    return _bounded_from(data, finished, status)


def _address_space() -> int:
    """Bytes of address space this process uses now."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _run_copy(
    work: Callable[[Callable[[dict[str, Any]], None]], Any], fd: int, timeout: float, budget: int | None
) -> NoReturn:
    code = 0
    try:
        for number in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
            signal.signal(number, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDWR)
        for std in (0, 1, 2):  # this process may talk to its controller over its standard streams
            os.dup2(null, std)
        sys.stdout = sys.stderr = open(os.devnull, "w")  # and they may be replaced (pytest's capture)
        cpu = math.ceil(timeout) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        if budget is not None:
            resource.setrlimit(resource.RLIMIT_AS, (budget, budget))
        result = work(lambda report: _send(fd, report))
        _send(fd, {"result": result})
    except MemoryError:
        code = 3
        _send(fd, {"ended": "memory"})
    except BaseException as exc:  # noqa: BLE001 - reported, never raised into the caller's copy
        code = 4
        _send(fd, {"ended": "error", "why": f"{type(exc).__name__}: {exc}"[:500]})
    finally:
        os._exit(code)


def _send(fd: int, report: dict[str, Any]) -> None:
    try:
        data = (json.dumps(report) + "\n").encode()
    except MemoryError:
        data = b'{"ended": "memory"}\n'
    while data:
        data = data[os.write(fd, data) :]


def _collect(fd: int, pid: int, deadline: float) -> tuple[bytes, bool]:
    """The bytes the copy wrote until it closed its end (True) or ran past ``deadline`` (False: killed)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            os.kill(pid, signal.SIGKILL)
            return b"".join(chunks), False
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks), True
        if size < REPORT_BYTES:
            chunks.append(chunk[: REPORT_BYTES - size])
            size += len(chunk)


def _reap(pid: int) -> int:
    """Wait for the copy (its wait status); kill it when it does not end by itself within the grace period."""
    deadline = time.monotonic() + KILL_GRACE
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            return os.waitpid(pid, 0)[1]
        time.sleep(0.002)


def _bounded_from(data: bytes, finished: bool, status: int) -> Bounded:
    reports = []
    for line in data.decode(errors="replace").splitlines():
        try:
            report = json.loads(line)
        except ValueError:
            continue
        if isinstance(report, dict):
            reports.append(report)
    progress = tuple(r for r in reports if "result" not in r and "ended" not in r)
    if not finished:
        return Bounded("time", reports=progress)
    for report in reports:
        if "result" in report:
            return Bounded("ok", result=report["result"], reports=progress)
        if report.get("ended") in ("memory", "error"):
            return Bounded(report["ended"], reports=progress, why=str(report.get("why", "")))
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        return Bounded("time" if number == signal.SIGXCPU else f"signal {number}", reports=progress)
    return Bounded(f"exit {os.waitstatus_to_exitcode(status)}", reports=progress)
