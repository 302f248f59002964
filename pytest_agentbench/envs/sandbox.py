"""Running untrusted Python in a child process with hard limits.

Two executors share one contract (``run(source, limits=, env=, files=) -> ExecResult``):

* ``"fork"`` (default): a long-lived server per process, started lazily, with the benchmark's
  libraries already imported; every script runs in a child forked from that pristine server
  (see ``forkserver.py``). Nothing a child changes is visible to the next one.
* ``"subprocess"``: a fresh interpreter per script (slow but simple, the reference behaviour).

Both run the script as ``main.py`` in a fresh temporary directory, in a new session/process group,
with ``__name__ == "__main__"`` and ``sys.argv == ["main.py"]``; the temporary directory's path is
replaced by ``.`` in the captured output so both report the same text (``File "./main.py"``).

Limits (``Limits``), enforced on every child:

* wall time: the whole process group (and every process in the run's cgroup, see below) is killed;
* memory: ``RLIMIT_AS``; CPU: ``RLIMIT_CPU`` (SIGXCPU);
* processes: the run gets its own cgroup-v1 ``pids`` group with ``pids.max`` when
  ``/sys/fs/cgroup/pids`` is writable (root on most Linux hosts and VMs). The cgroup also lists
  every process of the run, so descendants that ``setsid()`` away from the process group are killed
  too. Without a writable cgroup: non-root uses ``RLIMIT_NPROC`` (per-user, so it is a fork-bomb
  ceiling rather than a quota); root (where ``RLIMIT_NPROC`` is ignored) falls back to polling
  ``/proc`` for the run's descendants every 50 ms and killing them over the limit, which is best
  effort: a process that double-forks and ``setsid()``s escapes both the group kill and the walk
  (the fork server is a child subreaper, so under it such orphans are still found and killed).
* output: stdout/stderr go to files; the head and the tail are kept (``Limits.output`` bytes), the
  full size is recorded (``stdout_bytes``); a stream reaching ``Limits.output_cap`` bytes stops the
  script (``RLIMIT_FSIZE``) and is reported as the ``"output"`` limit.

A limit hit is reported in ``ExecResult.limit`` (``"wall"``, ``"memory"``, ``"cpu"``,
``"processes"``, ``"output"``) and ``timed_out`` for the wall clock; it never raises.

``integrity_prelude`` / ``integrity_epilogue`` / ``integrity_check`` detect the usual ways generated
code fakes a pass (early exit, replaced comparison functions, tampered builtins). The threat model
is a model gaming the tests, not an adversary that introspects the scoring script: code that reads
its own source can find the completion token.
"""
from __future__ import annotations

import json
import os
import resource
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Mapping, Protocol, Sequence

GiB = 1 << 30
MiB = 1 << 20
DEFAULT_MEMORY_LIMIT = 4 * GiB
DEFAULT_OUTPUT_LIMIT = 64 * 1024  # bytes kept per stream, half from the head, half from the tail
DEFAULT_OUTPUT_CAP = 256 * MiB  # bytes a stream may reach before the script is stopped
DEFAULT_MAX_PROCESSES = 256
POLL_INTERVAL = 0.05  # seconds between /proc scans when no cgroup can count processes
LIMIT_NAMES = ("wall", "memory", "cpu", "processes", "output")
SCRIPT_NAME = "main.py"


@dataclass
class ExecResult:
    returncode: int | None
    stdout: str
    stderr: str
    duration: float
    timed_out: bool = False
    limit: str | None = None  # which limit ended the run: one of LIMIT_NAMES
    stdout_bytes: int = 0
    stderr_bytes: int = 0

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def output_trimmed(self) -> bool:
        return self.stdout_bytes > len(self.stdout.encode()) or self.stderr_bytes > len(self.stderr.encode())


@dataclass(frozen=True)
class Limits:
    timeout: float = 1800.0
    memory: int | None = DEFAULT_MEMORY_LIMIT
    cpu: float | None = None  # defaults to the wall-clock timeout
    processes: int | None = DEFAULT_MAX_PROCESSES
    output: int = DEFAULT_OUTPUT_LIMIT
    output_cap: int = DEFAULT_OUTPUT_CAP

    def __post_init__(self) -> None:
        if not self.timeout or self.timeout <= 0:
            raise ValueError(f"Limits.timeout must be a positive number of seconds, got {self.timeout!r}")
        if self.processes is not None and self.processes < 1:
            raise ValueError(f"Limits.processes must be at least 1 (or None), got {self.processes!r}")
        if self.output < 2:
            raise ValueError(f"Limits.output must be at least 2 bytes, got {self.output!r}")


def trim(data: bytes, limit: int) -> str:
    """Keep the head and the tail of a long output and say how much was dropped."""
    if len(data) <= limit:
        return data.decode("utf-8", "replace")
    half = limit // 2
    dropped = len(data) - 2 * half
    return (
        data[:half].decode("utf-8", "replace")
        + f"\n... [{dropped} bytes trimmed of {len(data)}] ...\n"
        + data[-half:].decode("utf-8", "replace")
    )


def read_trimmed(path: Path, limit: int) -> tuple[str, int]:
    """Read only the head and the tail of an output file (a flood may be hundreds of MB)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return "", 0
    with open(path, "rb") as fh:
        if size <= limit:
            return fh.read().decode("utf-8", "replace"), size
        half = limit // 2
        head = fh.read(half)
        fh.seek(size - half)
        tail = fh.read(half)
    dropped = size - 2 * half
    text = (head.decode("utf-8", "replace") + f"\n... [{dropped} bytes trimmed of {size}] ...\n"
            + tail.decode("utf-8", "replace"))
    return text, size


_read_trimmed = read_trimmed  # old private name, kept for callers of the first version


# ---------------------------------------------------------------- limits applied inside the child

def enter_jail(spec: dict) -> None:
    """In a launcher process: join the run's pids cgroup (when it has one), then take on its rlimits.

    ``spec`` is the launcher's JSON argument: ``cgroup`` (a folder or None) and ``limits`` (Limits fields).
    """
    if spec.get("cgroup"):
        with open(os.path.join(spec["cgroup"], "cgroup.procs"), "w") as fh:
            fh.write(str(os.getpid()))
    apply_child_limits(Limits(**spec["limits"]))


def apply_child_limits(limits: Limits) -> None:
    """Set the rlimits of the calling process (the child, before any untrusted code runs)."""
    if limits.memory:
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory, limits.memory))
    cpu = int(limits.cpu or limits.timeout) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
    if limits.processes and os.getuid() != 0:
        # RLIMIT_NPROC counts every process of the user, so it is a ceiling on a fork bomb, not a quota.
        soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
        want = limits.processes if hard == resource.RLIM_INFINITY else min(limits.processes, hard)
        resource.setrlimit(resource.RLIMIT_NPROC, (want, want))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.output_cap, limits.output_cap))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PYTEST_", "AGENTBENCH_"))}
    env.update({"MPLBACKEND": "Agg", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1",
                "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "1")})
    if extra:
        bad = [k for k, v in extra.items() if not isinstance(k, str) or not isinstance(v, str)]
        if bad:
            raise TypeError(f"env for the sandboxed script must map str to str; fix the entries {bad!r}")
        env.update(extra)
    return env


# ---------------------------------------------------------------- finding and killing a run's processes

def _proc_table() -> dict[int, tuple[int, int]]:
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


def _is_live(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:][:1] != b"Z"


def descendants(root: int, table: dict[int, tuple[int, int]] | None = None) -> set[int]:
    """Every live process below ``root`` (children, grandchildren, ...)."""
    table = _proc_table() if table is None else table
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
    table = _proc_table() if table is None else table
    return {pid for pid, (_, group) in table.items() if group == pgid}


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill(pids: Iterable[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


PIDS_CGROUP_ROOT = Path("/sys/fs/cgroup/pids")


class ProcessJail:
    """The processes of one run: its process group, its descendants and, when possible, a pids cgroup.

    The cgroup (``/sys/fs/cgroup/pids/agentbench/<id>``) caps the number of tasks with ``pids.max``
    and lists every member, including those that left the process group with ``setsid()``.
    """

    def __init__(self, limits: Limits):
        self.limits = limits
        self.cgroup: Path | None = self._make_cgroup(limits)

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

    def join(self) -> None:
        """Called in the child: put the calling process into the run's cgroup."""
        if self.cgroup is not None:
            (self.cgroup / "cgroup.procs").write_text(str(os.getpid()))

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
        table = _proc_table()
        count = len(group_members(leader, table) | descendants(leader, table) | {leader})
        return count > self.limits.processes

    def kill_all(self, leader: int, extra_roots: Sequence[int] = ()) -> None:
        """Kill the group, the descendants of ``leader`` (and of ``extra_roots``) and the cgroup members."""
        if self.cgroup is not None:  # the cgroup lists every process of the run: no /proc scan needed
            for _ in range(20):
                kill_group(leader)
                victims = {pid for pid in self.members() if _is_live(pid)} - {os.getpid()}
                if not victims:
                    break
                _kill(victims)
                time.sleep(0.002)
            if not extra_roots:
                return
        for _ in range(20):
            table = _proc_table()
            victims = group_members(leader, table) | descendants(leader, table) | self.members()
            for root in extra_roots:
                victims |= descendants(root, table)
            if leader in table:
                victims.add(leader)
            victims.discard(os.getpid())
            if not victims:
                return
            kill_group(leader)
            _kill(victims)
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
                _kill(self.members())
                time.sleep(0.01)


def classify(returncode: int | None, stderr: str, timed_out: bool, *, processes_hit: bool = False,
             output_hit: bool = False) -> str | None:
    if timed_out:
        return "wall"
    if returncode == 0:
        return None
    if returncode in (-signal.SIGXCPU, -signal.SIGKILL) and ("CPU" in stderr or returncode == -signal.SIGXCPU):
        return "cpu"
    if output_hit:
        return "output"
    if processes_hit:
        return "processes"
    if "MemoryError" in stderr or "Cannot allocate memory" in stderr or "std::bad_alloc" in stderr:
        return "memory"
    if "Resource temporarily unavailable" in stderr and ("fork" in stderr or "BlockingIOError" in stderr):
        return "processes"
    return None


def prepare_workdir(work: Path, source: str, files: Mapping[str, bytes | str] | None) -> Path:
    script = work / SCRIPT_NAME
    script.write_text(source)
    for name, content in (files or {}).items():
        target = (work / name).resolve()
        if work.resolve() not in target.parents:
            raise ValueError(f"file name {name!r} for the sandbox must stay inside its directory; use a relative path")
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            content = content.encode()
        target.write_bytes(content)
    return script


def collect_result(work: Path, limits: Limits, returncode: int | None, started: float, *, timed_out: bool,
                   limit: str | None = None, processes_hit: bool = False) -> ExecResult:
    """Read the output files of a finished run and build its ExecResult (shared by both executors)."""
    duration = time.monotonic() - started
    stdout, out_size = read_trimmed(work / ".stdout", limits.output)
    stderr, err_size = read_trimmed(work / ".stderr", limits.output)
    stdout, stderr = _hide_workdir(stdout, work), _hide_workdir(stderr, work)
    output_hit = max(out_size, err_size) >= limits.output_cap
    if limit is None:
        limit = classify(returncode, stderr, timed_out, processes_hit=processes_hit, output_hit=output_hit)
    return ExecResult(returncode=None if timed_out else returncode, stdout=stdout, stderr=stderr,
                      duration=duration, timed_out=timed_out, limit=limit,
                      stdout_bytes=out_size, stderr_bytes=err_size)


def _hide_workdir(text: str, work: Path) -> str:
    # the temporary directory is random; "." makes both executors (and reruns) print the same text
    for form in {str(work), os.path.realpath(work)}:
        text = text.replace(form + "/", "./").replace(form, ".")
    return text


# ---------------------------------------------------------------- executors

class Executor(Protocol):
    kind: str

    def run(self, source: str, limits: Limits = ..., env: dict[str, str] | None = None,
            files: Mapping[str, bytes | str] | None = None) -> ExecResult: ...


# A tiny launcher between the plugin and the script: it applies the limits (no preexec_fn in a threaded
# pytest), and it is the script's parent, so a script that kills its parent kills only the launcher.
_LAUNCHER = r"""
import json, os, signal, sys
spec = json.loads(sys.argv[1])
from pytest_agentbench.envs.sandbox import enter_jail
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
            launcher_env = dict(full_env, PYTHONPATH=_package_parent())
            started = time.monotonic()
            timed_out = processes_hit = False
            try:
                with open(work / ".stdout", "wb") as out, open(work / ".stderr", "wb") as err:
                    proc = subprocess.Popen([sys.executable, "-S", "-c", _LAUNCHER, spec], cwd=work,
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


def _package_parent() -> str:
    # the launcher runs with -S (fast start, no site), so it needs the package's location explicitly
    return str(Path(__file__).resolve().parents[2])


_EXECUTORS: dict[str, Executor] = {}


def get_executor(kind: str = "fork") -> Executor:
    """The executor of ``kind`` ("fork" or "subprocess"); one shared instance per process."""
    if kind not in ("fork", "subprocess"):
        raise ValueError(f"unknown executor {kind!r}; use 'fork' (default, fast) or 'subprocess'")
    pid_key = f"{kind}:{os.getpid()}"
    if pid_key not in _EXECUTORS:
        if kind == "fork":
            from .forkserver import ForkServer
            _EXECUTORS[pid_key] = ForkServer()
        else:
            _EXECUTORS[pid_key] = SubprocessExecutor()
    return _EXECUTORS[pid_key]


def run_python(source: str, *, limits: Limits = Limits(), env: dict[str, str] | None = None,
               files: Mapping[str, bytes | str] | None = None, executor: str = "fork") -> ExecResult:
    """Run ``source`` as ``main.py`` in a new temporary directory and process group, under ``limits``."""
    return get_executor(executor).run(source, limits=limits, env=env, files=files)


# ---------------------------------------------------------------- fake-pass detection

COMPLETION_PREFIX = "AGENTBENCH-COMPLETE"
TAMPER_PREFIX = "AGENTBENCH-TAMPERED:"
EXECUTOR_DIED = "AGENTBENCH-EXECUTOR-DIED"
_STASH = "__agentbench_integrity__"
DEFAULT_GUARDED_MODULES = ("numpy", "numpy.testing", "numpy.linalg", "math", "cmath")
DEFAULT_GUARDED_GLOBALS = {"np": "numpy", "numpy": "numpy", "math": "math"}


def new_token() -> str:
    return secrets.token_hex(16)


def integrity_prelude(guard_modules: Sequence[str] = DEFAULT_GUARDED_MODULES,
                      guard_globals: Mapping[str, str] = DEFAULT_GUARDED_GLOBALS) -> str:
    """Source to put at the very top of a scoring script, before any generated code.

    It records the genuine objects that the tests rely on: every attribute of ``guard_modules``
    (e.g. ``numpy.allclose``, a module of comparison helpers), the ``builtins`` namespace, the
    ``sys.modules`` entries, and the objects that global names in ``guard_globals`` (name -> dotted
    path, e.g. ``{"np": "numpy", "cmp_tuple_or_list": "my.cmp.cmp_tuple_or_list"}``) must still be
    bound to when the tests run. ``integrity_epilogue`` checks them after the tests.
    """
    spec = json.dumps({"modules": list(guard_modules), "globals": dict(guard_globals)})
    return f'''\
def _agentbench_capture(spec):
    import builtins, importlib, json, os, sys
    spec = json.loads(spec)
    modules = {{}}
    for name in spec["modules"]:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        modules[name] = (module, dict(vars(module)))
    def resolve(dotted):
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
            return obj
        raise ImportError(dotted)
    bound = {{}}
    for name, dotted in spec["globals"].items():
        try:
            bound[name] = (dotted, resolve(dotted))
        except (ImportError, AttributeError):
            pass
    return {{"modules": modules, "bound": bound, "builtins": dict(vars(builtins)), "builtins_module": builtins,
            "sys": sys, "sys_modules": {{n: m for n, m in sys.modules.items()}}, "write": os.write,
            "exit": os._exit, "flush": [sys.stdout.flush, sys.stderr.flush]}}
{_STASH} = _agentbench_capture({spec!r})
del _agentbench_capture
'''


def integrity_epilogue(token: str) -> str:
    """Source to put after the last test: verify nothing was replaced, then print the completion token.

    Printing the token is the script's last action, so a run that exits early (``sys.exit(0)``,
    ``os._exit(0)``, a killed parent) never shows it. On tampering it prints a reason to stderr and exits 3.
    """
    if not token or not token.isalnum():
        raise ValueError(f"completion token must be a non-empty alphanumeric string, got {token!r}")
    return f'''\
def _agentbench_verify(stash, scope):
    problems = []
    builtins = stash["builtins_module"]
    for name, (module, attrs) in stash["modules"].items():
        if stash["sys_modules"].get(name) is not stash["sys"].modules.get(name):
            problems.append("generated code replaced the module " + name + " in sys.modules")
        current = vars(module)
        for attr, value in attrs.items():
            if attr.startswith("__") or not callable(value):
                continue
            if current.get(attr) is not value:
                problems.append("generated code replaced " + name + "." + attr)
    for name, (dotted, value) in stash["bound"].items():
        if name in scope and scope[name] is not value:
            problems.append("generated code rebound " + name + " (expected " + dotted + ")")
    current = vars(builtins)
    for attr, value in stash["builtins"].items():
        if attr == "_":
            continue
        if current.get(attr) is not value:
            problems.append("generated code tampered with builtins." + attr)
    return problems

_agentbench_stash = globals()["{_STASH}"]
_agentbench_problems = _agentbench_verify(_agentbench_stash, globals())
for _agentbench_flush in _agentbench_stash["flush"]:
    try:
        _agentbench_flush()
    except Exception:
        pass
if _agentbench_problems:
    _agentbench_stash["write"](2, ("\\n{TAMPER_PREFIX} " + "; ".join(_agentbench_problems[:5]) + "\\n").encode())
    _agentbench_stash["exit"](3)
_agentbench_stash["write"](1, b"\\n{COMPLETION_PREFIX} {token}\\n")
'''


def integrity_check(result: ExecResult, token: str) -> str | None:
    """Why a scoring run is not a genuine pass (None when every test ran and nothing was tampered with)."""
    if result.limit:
        return f"{result.limit} limit hit"
    if EXECUTOR_DIED in result.stderr:
        return "generated code killed the process running it (its parent)"
    for line in reversed(result.stderr.splitlines()):
        if line.startswith(TAMPER_PREFIX):
            return line[len(TAMPER_PREFIX):].strip()
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    completed = bool(lines) and lines[-1].strip() == f"{COMPLETION_PREFIX} {token}"
    if result.returncode != 0:
        return f"script failed with exit code {result.returncode}"
    if not completed:
        return "exited before all tests ran"
    return None
