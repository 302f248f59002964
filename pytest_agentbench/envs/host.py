"""The host environment: commands run with bash in the workspace folder on this machine.

Every command runs in its own process group under rlimits (address space, CPU time, file size)
and, where ``/sys/fs/cgroup/pids`` is writable, in the environment's pids cgroup, which caps the
number of processes and lists every one of them, so ``stop`` kills background jobs too. A command
past its timeout is killed with its whole group and its descendants. Output goes to files outside
the workspace and only its head and tail are read back.

This is a sandbox against accidents, not against an adversary: the commands run as the same user,
see the whole file system and can install packages. Use ``--bench-env=docker`` for isolation.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..sandbox.executors import run_python
from ..sandbox.jail import ProcessJail, group_members, kill_group, kill_tree, proc_table
from ..sandbox.limits import DEFAULT_MEMORY_LIMIT, Limits, child_env, package_parent
from ..sandbox.result import ExecResult
from ..sandbox.workdir import read_trimmed
from .base import (DEFAULT_OUTPUT_CAP, DEFAULT_OUTPUT_LIMIT, MAX_FILE_READ, EnvError, EnvFactory, Environment,
                   EnvSkip, check_timeout, python_result, resolve_inside)

DEFAULT_MEMORY = 8 << 30  # RLIMIT_AS of a command: generous, agents install and run real code
DEFAULT_PROCESSES = 1024

# Between the plugin and bash: joins the cgroup, applies the rlimits, then becomes bash (no preexec_fn
# in a threaded pytest process).
_LAUNCHER = r"""
import json, os, sys
spec = json.loads(sys.argv[1])
from pytest_agentbench.sandbox.limits import enter_jail
enter_jail(spec)
os.chdir(spec["cwd"])
os.execve(spec["bash"], ["bash", "-c", spec["command"]], spec["env"])
"""


def _bash() -> str:
    path = shutil.which("bash")
    if not path:
        raise EnvError("the host environment needs bash on PATH; install bash or use --bench-env=docker")
    return path


class HostEnvironment(Environment):
    kind = "host"

    def __init__(self, workspace: Path, *, keep_workspace: bool = False, name: str = "",
                 memory: int | None = DEFAULT_MEMORY, processes: int | None = DEFAULT_PROCESSES,
                 output_limit: int = DEFAULT_OUTPUT_LIMIT, output_cap: int = DEFAULT_OUTPUT_CAP,
                 gpus: str | None = None, executor: str = "fork",
                 python_memory: int | None = DEFAULT_MEMORY_LIMIT) -> None:
        super().__init__(workspace, keep_workspace=keep_workspace, name=name)
        if not self.workspace.is_dir():
            raise EnvError(f"workspace {self.workspace} is not a folder; prepare it before starting the environment")
        self.workspace = self.workspace.resolve()
        self.workdir = str(self.workspace)
        self.memory, self.processes = memory, processes
        self.executor, self.python_memory = executor, python_memory
        self.output_limit, self.output_cap = output_limit, output_cap
        self.bash = _bash()
        # outside the workspace: the agent must not see (or fill) its own output files
        self.private = Path(tempfile.mkdtemp(prefix="agentbench-host-"))
        for sub in ("home", "tmp", "out"):
            (self.private / sub).mkdir()
        extra = {"HOME": str(self.private / "home"), "TMPDIR": str(self.private / "tmp")}
        if gpus and gpus != "all":
            extra["CUDA_VISIBLE_DEVICES"] = gpus
        self.env = child_env(extra)
        self.jail = ProcessJail(Limits(processes=processes))
        self.leaders: list[int] = []
        self.count = 0

    # ---------------------------------------------------------------- commands

    def _limits(self, timeout: float) -> Limits:
        # CPU seconds over all cores, so a parallel job is not stopped before its wall-clock timeout
        return Limits(timeout=timeout, memory=self.memory, cpu=timeout * (os.cpu_count() or 1),
                              processes=self.processes, output=self.output_limit, output_cap=self.output_cap)

    def run(self, command: str, timeout: float) -> ExecResult:
        return self._run(command, timeout, cwd=self.workspace)

    def _run(self, command: str, timeout: float, cwd: Path) -> ExecResult:
        if self.stopped:
            raise EnvError(f"environment {self.name or self.workspace} is stopped")
        timeout = check_timeout(timeout)
        self.count += 1
        out, err = self.private / "out" / f"{self.count}.out", self.private / "out" / f"{self.count}.err"
        spec = json.dumps({"limits": asdict(self._limits(timeout)), "env": self.env, "command": command,
                           "bash": self.bash, "cwd": str(cwd),
                           "cgroup": str(self.jail.cgroup) if self.jail.cgroup else ""})
        launcher_env = dict(self.env, PYTHONPATH=package_parent())
        started = time.monotonic()
        with open(out, "wb") as out_fh, open(err, "wb") as err_fh:
            proc = subprocess.Popen([sys.executable, "-S", "-c", _LAUNCHER, spec], stdin=subprocess.DEVNULL,
                                    stdout=out_fh, stderr=err_fh, env=launcher_env, start_new_session=True)
        self.leaders.append(proc.pid)
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_tree(proc.pid)
            proc.wait()
        except BaseException:  # Ctrl-C while waiting: the command must not outlive us
            kill_tree(proc.pid)
            proc.wait()
            raise
        duration = time.monotonic() - started
        stdout, out_size = read_trimmed(out, self.output_limit)
        stderr, err_size = read_trimmed(err, self.output_limit)
        for path in (out, err):  # a background job may still write to them; unlinking is fine
            path.unlink(missing_ok=True)
        return ExecResult(exit_code=None if timed_out else proc.returncode, stdout=stdout, stderr=stderr,
                          timed_out=timed_out, duration=duration, stdout_bytes=out_size, stderr_bytes=err_size)

    def run_python(self, source: str, timeout: float) -> dict[str, Any]:
        """A tool script in the sandbox, as the factory runs it (a fresh folder, not the workspace)."""
        return run_tool_script(source, timeout, executor=self.executor, memory=self.python_memory)

    # ---------------------------------------------------------------- files

    def read_file(self, path: str) -> bytes:
        target = resolve_inside(self.workspace, path)
        if not target.is_file():
            raise FileNotFoundError(f"no file {path!r} in the environment (looked at {target})")
        if target.stat().st_size > MAX_FILE_READ:
            raise ValueError(f"{path!r} is larger than {MAX_FILE_READ >> 20} MB; read a part of it with bash")
        return target.read_bytes()

    def write_file(self, path: str, data: bytes | str) -> None:
        target = resolve_inside(self.workspace, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data.encode() if isinstance(data, str) else data)

    def copy_out(self, dest_dir: Path) -> Path:
        dest = Path(dest_dir)
        if dest.exists() and dest.resolve() == self.workspace:
            return dest  # the host environment works in place
        shutil.copytree(self.workspace, dest, symlinks=True, dirs_exist_ok=True)
        return dest

    # ---------------------------------------------------------------- the end

    def _release(self) -> None:
        if self.jail.cgroup is not None:
            self.jail.kill_members()
        else:
            # background jobs stay in their command's process group (unless they setsid away)
            table = proc_table()
            for leader in self.leaders:
                if group_members(leader, table):
                    kill_group(leader)
        self.jail.close()
        shutil.rmtree(self.private, ignore_errors=True)


def run_tool_script(source: str, timeout: float, *, executor: str, memory: int | None) -> dict[str, Any]:
    """One tool script (a model's code) under the sandbox's executor and limits."""
    result = run_python(source, limits=Limits(timeout=check_timeout(timeout), memory=memory), executor=executor)
    return python_result(result)


class HostFactory(EnvFactory):
    """The ``bench_env`` value for ``--bench-env=host``."""

    kind = "host"

    def __init__(self, *, keep_workspaces: bool = False, gpus: str | None = None,
                 memory: int | None = DEFAULT_MEMORY, executor: str = "fork",
                 python_memory: int | None = DEFAULT_MEMORY_LIMIT) -> None:
        self.keep_workspaces = keep_workspaces
        self.gpus = gpus
        self.memory = memory
        self.executor, self.python_memory = executor, python_memory

    def start(self, workspace: Path, *, needs_gpu: bool = False, name: str = "") -> HostEnvironment:
        if needs_gpu and not self.gpus:
            raise EnvSkip("needs a GPU and --bench-gpus is not set (pass --bench-gpus=all or device ids to run it)")
        return HostEnvironment(workspace, keep_workspace=self.keep_workspaces, name=name, gpus=self.gpus,
                               memory=self.memory, executor=self.executor, python_memory=self.python_memory)

    def run_python(self, source: str, timeout: float) -> dict[str, Any]:
        """A tool script on the host: the sandbox's executor and memory limit, like a scoring script."""
        return run_tool_script(source, timeout, executor=self.executor, memory=self.python_memory)

