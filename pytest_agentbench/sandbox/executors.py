"""Running untrusted Python in a child process with hard limits.

Two executors share one contract (``run(source, limits=, env=, files=) -> ExecResult``):

* ``"fork"`` (default): a long-lived server per process, started lazily, with the benchmark's
  libraries already imported; every script runs in a child forked from that pristine server
  (see ``forkserver.py``). Nothing a child changes is visible to the next one.
* ``"subprocess"``: a fresh interpreter per script (slow but simple, the reference behaviour).

Both run the script as ``main.py`` in a fresh temporary directory, in a new session/process group,
with ``__name__ == "__main__"`` and ``sys.argv == ["main.py"]``; the temporary directory's path is
replaced by ``.`` in the captured output so both report the same text (``File "./main.py"``).

Limits (``Limits``, see ``limits.py``), enforced on every child:

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
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Mapping, Protocol

from .forkserver import ForkServer
from .jail import POLL_INTERVAL, ProcessJail
from .limits import GiB, Limits, MiB, child_env, package_parent
from .result import ExecResult
from .workdir import collect_result, prepare_workdir

__all__ = ["EXECUTORS", "Executor", "ExecResult", "ForkServer", "GiB", "Limits", "MiB", "SubprocessExecutor",
           "get_executor", "run_python"]

EXECUTORS = ("fork", "subprocess")


class Executor(Protocol):
    kind: str

    def run(self, source: str, limits: Limits = ..., env: dict[str, str] | None = None,
            files: Mapping[str, bytes | str] | None = None) -> ExecResult: ...


# A tiny launcher between the plugin and the script: it applies the limits (no preexec_fn in a threaded
# pytest), and it is the script's parent, so a script that kills its parent kills only the launcher.
LAUNCHER = r"""
import json, os, signal, sys
spec = json.loads(sys.argv[1])
from pytest_agentbench.sandbox.limits import enter_jail
enter_jail(spec)
pid = os.fork()
if pid == 0:
    os.execve(sys.executable, [sys.executable, "main.py"], spec["env"])
_, status = os.waitpid(pid, 0)
if os.WIFSIGNALED(status):
    sig = os.WTERMSIG(status)
    signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
os._exit(os.waitstatus_to_exitcode(status))
"""


class SubprocessExecutor:
    """A fresh ``python main.py`` per script."""

    kind = "subprocess"

    def run(self, source: str, limits: Limits = Limits(), env: dict[str, str] | None = None,
            files: Mapping[str, bytes | str] | None = None) -> ExecResult:
        full_env = child_env(env)
        with tempfile.TemporaryDirectory(prefix="agentbench-") as tmp:
            work = Path(tmp)
            prepare_workdir(work, source, files)
            jail = ProcessJail(limits)
            spec = json.dumps({"limits": asdict(limits), "env": full_env,
                               "cgroup": str(jail.cgroup) if jail.cgroup else ""})
            launcher_env = dict(full_env, PYTHONPATH=package_parent())
            started = time.monotonic()
            timed_out = processes_hit = False
            try:
                with open(work / ".stdout", "wb") as out, open(work / ".stderr", "wb") as err:
                    proc = subprocess.Popen([sys.executable, "-S", "-c", LAUNCHER, spec], cwd=work,
                                            stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                            env=launcher_env, start_new_session=True)
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
            finally:
                jail.close()
            result = collect_result(work, limits, proc.returncode, started, timed_out=timed_out,
                                    limit="processes" if processes_hit and not timed_out else None,
                                    processes_hit=processes_hit)
        return result


_EXECUTORS: dict[str, Executor] = {}


def get_executor(kind: str = "fork") -> Executor:
    """The executor of ``kind`` ("fork" or "subprocess"); one shared instance per process."""
    if kind not in EXECUTORS:
        raise ValueError(f"unknown executor {kind!r}; use 'fork' (default, fast) or 'subprocess'")
    pid_key = f"{kind}:{os.getpid()}"
    if pid_key not in _EXECUTORS:
        _EXECUTORS[pid_key] = ForkServer() if kind == "fork" else SubprocessExecutor()
    return _EXECUTORS[pid_key]


def run_python(source: str, *, limits: Limits = Limits(), env: dict[str, str] | None = None,
               files: Mapping[str, bytes | str] | None = None, executor: str = "fork") -> ExecResult:
    """Run ``source`` as ``main.py`` in a new temporary directory and process group, under ``limits``."""
    return get_executor(executor).run(source, limits=limits, env=env, files=files)
