"""Running untrusted Python in a child process with hard limits.

Two executors share one contract (``run(source, limits=, env=, files=) -> ExecResult``):

* ``"fork"`` (default): a long-lived server per process, started lazily, with the benchmark's
  libraries already imported; every script runs in a child forked from that pristine server
  (see ``forkserver.py``). Nothing a child changes is visible to the next one, and the server never
  reads what a run was given or wrote (this process does), so no child inherits another run's values.
* ``"subprocess"``: a fresh interpreter per script (slow but simple, the reference behaviour).

Both run the script as ``main.py`` in a fresh temporary directory, in a new session/process group,
with ``__name__ == "__main__"`` and ``sys.argv == ["main.py"]``; the temporary directory's path is
replaced by ``.`` in the captured output so both report the same text (``File "./main.py"``).

Limits (``Limits``, see ``limits.py``), enforced on every child:

* the end: under isolation the script stops at the start of its exit (traced by its launcher or by the
  fork server) until every other process of its run is killed and gone, so none can write the files the
  caller reads after the script ended (``jail.wait_ending_namespace``);
* wall time: the whole process group (and every process in the run's cgroup, see ``jail.py``) is killed;
* memory: ``RLIMIT_AS``; CPU: ``RLIMIT_CPU`` (SIGXCPU);
* processes: the run's own cgroup-v1 ``pids`` group with ``pids.max`` when ``/sys/fs/cgroup/pids`` is
  writable; otherwise ``RLIMIT_NPROC`` (non-root) or polling ``/proc`` (root, best effort);
* output: stdout/stderr go to files; the head and the tail are kept (``Limits.output`` bytes), the
  full size is recorded (``stdout_bytes``); a stream reaching ``Limits.output_cap`` bytes stops the
  script (``RLIMIT_FSIZE``) and is reported as the ``"output"`` limit.

A limit hit is reported in ``ExecResult.limit`` (``"wall"``, ``"memory"``, ``"cpu"``,
``"processes"``, ``"output"``) and ``timed_out`` for the wall clock; it never raises.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any, Protocol

from ..core.trees import scratch_folder
from .containment import SCORING_SUBPROCESS, sandbox_argv
from .forkserver import ForkServer, ForkServerPool
from .interpreter import Python, executable_of
from .isolation import (
    MOUNT_RACE_TRIES,
    Isolation,
    child_environment,
    mount_race,
    needed_paths,
    probe,
    python_links,
)
from .jail import POLL_INTERVAL, ProcessJail
from .limits import GiB, Limits, MiB, child_env, package_parent
from .options import EXECUTORS
from .result import ExecResult
from .workdir import collect_result, prepare_workdir, read_collected

__all__ = [
    "EXECUTORS",
    "Executor",
    "ExecResult",
    "ForkServer",
    "ForkServerPool",
    "GiB",
    "Limits",
    "MiB",
    "SubprocessExecutor",
    "get_executor",
    "run_python",
    "warm_executor",
]


class Executor(Protocol):
    kind: str

    def run(
        self,
        source: str,
        limits: Limits = ...,
        env: dict[str, str] | None = None,
        files: Mapping[str, bytes | str] | None = None,
        collect: Mapping[str, int] | None = None,
    ) -> ExecResult: ...


# A tiny launcher between the plugin and the script: it applies the limits (no preexec_fn in a threaded
# pytest), and it is the script's parent, so a script that kills its parent kills only the launcher.
# Under isolation it is alone with the script in bwrap's PID namespace and traces it: at the script's exit
# every other process of the run is killed and gone before the script may end (and the launcher with it).
LAUNCHER = r"""
import json, os, signal, sys
spec = json.loads(sys.argv[1])
if spec.get("isolation"):
    from pytest_agentbench.sandbox.isolation import enter_isolated_jail
    enter_isolated_jail(spec)
else:  # no PID namespace: a subreaper, so whatever the script orphans stays ours to end
    from pytest_agentbench.sandbox.limits import enter_jail
    from pytest_agentbench.sandbox.jail import become_subreaper, end_descendants
    enter_jail(spec)
    become_subreaper()
if spec.get("isolation"):  # alone in the run's PID namespace: its end ends every process of the run
    from pytest_agentbench.sandbox.jail import trace_me, wait_ending_namespace
    from pytest_agentbench.sandbox import syscalls
    code = syscalls.program()
pid = os.fork()
if pid == 0:
    if spec.get("isolation"):
        trace_me()
        if code is not None:  # after trace_me: the filter refuses ptrace, which the launcher's watch needs
            syscalls.install(code)
    os.execve(sys.executable, [sys.executable, "main.py"], spec["env"])
if spec.get("isolation"):
    status = wait_ending_namespace(pid)
else:
    _, status = os.waitpid(pid, 0)
    end_descendants()
if spec.get("status_fd") is not None:  # under bwrap our own exit status does not reach the executor as is
    os.write(spec["status_fd"], status.to_bytes(4, "little", signed=True))
if os.WIFSIGNALED(status):
    sig = os.WTERMSIG(status)
    if sig not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
os._exit(os.waitstatus_to_exitcode(status))
"""


class SubprocessExecutor:
    """A fresh ``python main.py`` per script (in a bwrap sandbox of its own when the machine can isolate);
    ``python``: another interpreter than the running one (a grading environment's)."""

    kind = "subprocess"

    def __init__(self, isolation: Isolation | None = None, python: Python | None = None) -> None:
        self.isolation = probe() if isolation is None else isolation
        self.python = python

    def run(
        self,
        source: str,
        limits: Limits = Limits(),
        env: dict[str, str] | None = None,
        files: Mapping[str, bytes | str] | None = None,
        collect: Mapping[str, int] | None = None,
    ) -> ExecResult:
        for attempt in range(MOUNT_RACE_TRIES):
            result = self.run_once(source, limits, env, files, collect)
            if not (self.isolation.active and result.exit_code == 1 and mount_race(result.stderr)):
                break
            time.sleep(0.2 * (attempt + 1))
        return result

    def run_once(
        self,
        source: str,
        limits: Limits,
        env: dict[str, str] | None,
        files: Mapping[str, bytes | str] | None,
        collect: Mapping[str, int] | None,
    ) -> ExecResult:
        isolated = self.isolation.active
        full_env = child_environment(child_env(env)) if isolated else child_env(env)
        # the package's own folder, as a fork server's children have it on sys.path (none of the user's PYTHONPATH)
        full_env = {"PYTHONPATH": package_parent(), **full_env}
        with scratch_folder("agentbench-") as work:
            prepare_workdir(work, source, files, collect)
            jail = ProcessJail(limits)
            status_read, status_write = os.pipe() if isolated else (None, None)
            spec: dict[str, Any] = {
                "limits": asdict(limits),
                "env": full_env,
                "cgroup": str(jail.cgroup) if jail.cgroup else "",
            }
            argv = [executable_of(self.python), "-S", "-c", LAUNCHER]
            if isolated:
                # Python's folders as this (fully started) interpreter knows them: the -S launcher cannot
                # tell a venv's site folders, and its child must find them under its fresh /tmp too
                spec.update(
                    isolation=self.isolation.mode,
                    filter_script=True,
                    work=str(work),
                    status_fd=status_write,
                    bind=[".stdout", ".stderr", *(collect or {})],
                    needed=needed_paths() if self.python is None else list(self.python.needed),
                    links=python_links() if self.python is None else list(self.python.links),
                )
                argv = sandbox_argv(SCORING_SUBPROCESS, self.isolation, writable=[str(work)], python=self.python) + argv
            launcher_env = dict(full_env, PYTHONPATH=package_parent())
            started = time.monotonic()
            timed_out = processes_hit = False
            try:
                with open(work / ".stdout", "wb") as out, open(work / ".stderr", "wb") as err:
                    proc = subprocess.Popen(
                        [*argv, json.dumps(spec)],
                        cwd="/" if isolated else work,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=err,
                        env=launcher_env,
                        start_new_session=True,
                        pass_fds=[] if status_write is None else [status_write],
                    )
                if status_write is not None:  # (isolated)
                    os.close(status_write)
                deadline = started + limits.timeout
                step = limits.timeout if jail.counts_processes else POLL_INTERVAL
                while True:
                    try:
                        proc.wait(timeout=max(0.0, min(step, deadline - time.monotonic())))
                        break
                    except subprocess.TimeoutExpired:
                        if time.monotonic() >= deadline:
                            timed_out = True
                            break
                        if jail.too_many_processes(proc.pid):
                            processes_hit = True
                            break
                jail.kill_all(proc.pid)  # also reaps anything the script left running
                proc.wait()
                processes_hit = processes_hit or jail.hit_process_limit()
                exit_code = proc.returncode
                if status_read is not None:  # (isolated)
                    status = os.read(status_read, 4)
                    if len(status) == 4:  # the script's own status, as the launcher saw it
                        exit_code = os.waitstatus_to_exitcode(int.from_bytes(status, "little", signed=True))
            finally:
                jail.close()
                if status_read is not None:
                    os.close(status_read)
            result = collect_result(
                work,
                limits,
                exit_code,
                started,
                timed_out=timed_out,
                limit="processes" if processes_hit and not timed_out else None,
                processes_hit=processes_hit,
            )
            result.files = read_collected(work, collect)
        return result


_EXECUTORS: dict[str, Executor] = {}
_MAKING = threading.Lock()  # one executor per kind and interpreter, also when threads ask at once


def get_executor(kind: str = "fork", python: Python | None = None) -> Executor:
    """The executor of ``kind`` ("fork" or "subprocess") running ``python`` (default: the running interpreter);
    one shared instance per process and interpreter (for "fork", a pool of fork servers, one per run at once)."""
    if kind not in EXECUTORS:
        raise ValueError(f"unknown executor {kind!r}; use 'fork' (default, fast) or 'subprocess'")
    pid_key = f"{kind}:{os.getpid()}" + ("" if python is None else f":{python.executable}")
    with _MAKING:
        if pid_key not in _EXECUTORS:
            _EXECUTORS[pid_key] = ForkServerPool(python=python) if kind == "fork" else SubprocessExecutor(python=python)
        return _EXECUTORS[pid_key]


def warm_executor(kind: str = "fork", python: Python | None = None) -> None:
    """Start what the executor ``kind`` keeps running (a fork server of ``python``) on a thread of its own, so that
    its start overlaps what the caller does meanwhile (a model generating the first answer to score); the first
    script takes the server, waiting for the end of its start when it must. The subprocess executor keeps nothing
    running. A start that fails is the first script's to report (it starts the server again)."""
    if kind == "fork":
        threading.Thread(target=_warm_pool, args=(python,), name="agentbench-forkserver-warm", daemon=True).start()


def _warm_pool(python: Python | None) -> None:
    try:
        pool = get_executor("fork", python)
        if isinstance(pool, ForkServerPool):
            pool.prestart()
    except Exception:  # noqa: BLE001 - the first script starts it again and reports why it cannot
        pass


def run_python(
    source: str,
    *,
    limits: Limits = Limits(),
    env: dict[str, str] | None = None,
    files: Mapping[str, bytes | str] | None = None,
    executor: str = "fork",
    collect: Mapping[str, int] | None = None,
    python: Python | None = None,
) -> ExecResult:
    """Run ``source`` as ``main.py`` in a new temporary directory and process group, under ``limits``,
    isolated from this machine where it can be (``isolation.probe``), by ``python`` (default: the running
    interpreter; ``interpreter.describe`` gives another).

    ``files`` (name -> content) are put next to it; ``collect`` (plain name -> cap in bytes) names files
    the script may write in its folder and that come back in ``ExecResult.files`` (at most cap + 1 bytes)."""
    return get_executor(executor, python).run(source, limits=limits, env=env, files=files, collect=collect)
