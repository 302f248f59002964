"""The fork-server executor: a warm parent with the benchmark's libraries imported, one child per script.

The client (``ForkServer``) starts the server lazily as a separate process in its own session, and talks
to it over a socketpair with length-prefixed pickles; a server runs one script at a time, so a process keeps
a pool of them (``ForkServerPool``: each pytest-xdist worker has its own), one per run in progress. The
server imports numpy, scipy, sympy, h5py and matplotlib (Agg) once and
never runs user code: for every request it forks a child, which leaves for its own session and
process group, joins the run's cgroup, chdirs into the run's temporary directory, points fds 0/1/2
at /dev/null and two output files, sets the rlimits and then runs the script as ``__main__``.
Because every child is forked from the same pristine server, nothing a child changes (a module
attribute, a global, a file) can be seen by the next one.

Every child starts with a copy of the server's memory, so the server never holds anything of a run: the
client makes the run's folder, writes the script and its files there and, after the run, reads its output
and collected files itself. The server gets only the folder's path, the names of the files to hand back,
the limits and the environment, and answers with how the run ended (exit status, time, limits hit). No
child finds another run's code, inputs or outputs (another model's, another attempt's, the oracle's) in its
own memory.

The server is a child subreaper, so anything a script leaves behind (even after ``setsid()``) is
re-parented to it and killed after the run. Under isolation the server also traces each child (ptrace,
exit stops only; signals pass through, a stop signal does not stop it): the child stops at the start of
its exit, still alive, and every other process of its PID namespace is killed and gone before it may
finish. So nothing a script started can write its files after it ended: what the server reads is the
script's own (a late writer can no longer tell the script ended before it is killed). A script that kills the server
(``os.getppid()`` is the
server) fails its run with ``EXECUTOR_DIED`` in stderr; the client kills what is left of the run and
starts a new server for the next request.
"""

from __future__ import annotations

import atexit
import builtins
import concurrent.futures
import contextlib
import ctypes
import importlib.machinery
import os
import pickle
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..core.trees import remove_tree
from . import syscalls
from .containment import SCORING_FORK, enter_run, sandbox_argv
from .interpreter import Python, executable_of
from .isolation import (
    MOUNT_RACE_TRIES,
    Isolation,
    RunNamespace,
    child_environment,
    make_non_dumpable,
    mount_race,
    needed_paths,
    probe,
)
from .jail import (
    POLL_INTERVAL,
    ProcessJail,
    continue_traced,
    descendants,
    end_namespace_of,
    end_namespace_peers,
    kill_group,
    kill_pids,
    reap_children,
    trace_me,
)
from .limits import Limits, apply_child_limits, child_env, package_parent
from .result import ExecResult
from .workdir import EXECUTOR_DIED, SCRIPT_NAME, collect_result, prepare_workdir, read_collected, read_trimmed

DEFAULT_PRELOAD = (
    "numpy",
    "scipy",
    "scipy.special",
    "scipy.integrate",
    "scipy.linalg",
    "scipy.sparse",
    "scipy.sparse.linalg",
    "scipy.optimize",
    "scipy.interpolate",
    "scipy.fft",
    "scipy.constants",
    "scipy.stats",
    "scipy.signal",
    "scipy.ndimage",
    "sympy",
    "h5py",
    "matplotlib",
    "matplotlib.pyplot",
)
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
_HEADER = struct.Struct("!Q")
_libc = ctypes.CDLL(None, use_errno=True)


# ---------------------------------------------------------------- wire format

# one pickled message between client and server: a small dict of plain values
Message = dict[str, Any]


def _send(sock: socket.socket, message: Message) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_HEADER.pack(len(data)) + data)


def _recv_exact(sock: socket.socket, size: int) -> bytes | None:
    chunks: list[bytes] = []
    missing = size
    while missing:
        chunk = sock.recv(min(missing, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        missing -= len(chunk)
    return b"".join(chunks)


def _recv(sock: socket.socket) -> Message | None:
    """The next message, or None when the other side has gone."""
    header = _recv_exact(sock, _HEADER.size)
    if header is None:
        return None
    body = _recv_exact(sock, _HEADER.unpack(header)[0])
    return None if body is None else pickle.loads(body)


# ---------------------------------------------------------------- server side


def serve(fd: int, preload: Sequence[str] = DEFAULT_PRELOAD, isolation: str | None = None) -> None:
    """Entry point of the server process; returns when the client closes its end.

    ``isolation`` is the mode of ``isolation.Isolation`` when the server runs in a bwrap sandbox
    (every child then gets its own PID, mount and IPC namespaces and drops its privileges)."""
    sock = socket.socket(fileno=fd)
    own_pidns = None
    if isolation:
        make_non_dumpable()  # children can neither read nor write our memory
        own_pidns = os.open("/proc/self/ns/pid", os.O_RDONLY)
        needed_paths()  # computed once here, not in every child
        syscalls.program()  # (the seccomp filter too: a child installs it, a prctl call)
    for name in preload:
        try:
            __import__(name)
        except Exception as exc:  # a missing optional library only costs speed in the child
            print(f"forkserver: could not preload {name}: {exc}", file=sys.stderr)
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    wake = _wake_on_children() if isolation else None
    _send(sock, {"ready": os.getpid()})
    while True:
        request = _recv(sock)
        if request is None:
            return
        work = Path(request["workdir"])
        try:
            limits = Limits(**request["limits"])
            jail = ProcessJail(limits)
        except (TypeError, ValueError, OSError) as exc:
            _send(sock, {"error": f"{type(exc).__name__}: {exc}"})
            continue
        _flush_std()
        try:
            space = RunNamespace(own_pidns) if own_pidns is not None else None
        except OSError as exc:
            jail.close()
            _send(sock, {"error": f"could not isolate the run: {exc}"})
            continue
        pid = os.fork()
        if pid == 0:
            if own_pidns is not None:
                os.close(own_pidns)  # the server's PID namespace: not the child's to hold
            if wake is not None:
                _stop_for_tracing(wake)
            _child(sock, request, work, jail, limits, isolation)  # never returns
        if space is not None:
            space.leave()
        _send(sock, {"started": pid, "cgroup": str(jail.cgroup or "")})
        ended = _supervise(sock, pid, jail, limits, space, wake)
        if ended is None:  # the client went away mid-run
            return
        _send(sock, {"ended": ended})


def _flush_std() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


def _wake_on_children() -> int:
    """A pipe that gets a byte whenever a child changes state (SIGCHLD): a traced child's stops, its exit."""
    read, write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    return read


def _stop_for_tracing(wake: int) -> None:
    """In the child, first: no part of the server's wake-up pipe, then traced by the server (stopped until
    it has set the tracing up), so its exit stops it while it is still alive (see ``_supervise``)."""
    os.close(signal.set_wakeup_fd(-1))
    os.close(wake)
    if trace_me():
        os.kill(os.getpid(), signal.SIGSTOP)


def _supervise(
    sock: socket.socket,
    pid: int,
    jail: ProcessJail,
    limits: Limits,
    space: RunNamespace | None,
    wake: int | None = None,
) -> Message | None:
    """Wait for the run's end (or its limits), kill what is left, and say how it ended (None: the client
    went away). What the run wrote is the client's to read: this process never reads it (see ``ForkServer``).

    Under isolation the child is traced: it stops at the start of its exit, still alive, and every other
    process of its PID namespace is killed and gone before it may finish, so nothing of the run can write
    after the script ended (should a kernel not stop a script killed by SIGKILL, the namespace's init is
    killed as soon as the exit is seen, and the files are read only once the namespace is gone)."""
    started = time.monotonic()
    deadline = started + limits.timeout
    timed_out = processes_hit = client_gone = False
    pidfd = os.pidfd_open(pid)
    watched: list[int | socket.socket] = [pidfd, sock] if wake is None else [pidfd, sock, wake]
    first_stop = True
    try:
        while True:
            step = deadline - time.monotonic()
            if not jail.counts_processes:
                step = min(step, POLL_INTERVAL)
            ready, _, _ = select.select(watched, [], [], max(0.0, step))
            if wake is not None and wake in ready:
                first_stop = _continue_stopped(pid, wake, first_stop, space)
            if pidfd in ready:
                break
            if sock in ready:  # the client only writes between runs: this is EOF, it died
                client_gone = True
                break
            if time.monotonic() >= deadline:
                timed_out = True
                break
            if not jail.counts_processes and jail.too_many_processes(pid):
                processes_hit = True
                break
    finally:
        os.close(pidfd)
    if space is not None:  # first the run's namespace (its init's end kills every process in it), then the rest
        kill_pids([space.init.pid])
    # orphans of the run were re-parented to this server (a subreaper): everything below us belongs to it.
    # Without a PID namespace the cgroup is not enough: an unisolated script runs as our user and may leave it.
    jail.kill_all(pid, extra_roots=[] if jail.cgroup and space is not None else [os.getpid()])
    status = _wait_exit(pid)  # before closing the namespace: its init waits for every pid in it to be freed
    if space is not None:
        _close_namespace(space)  # the namespace's init: everything still in the namespace dies with it
    reap_children()
    processes_hit = processes_hit or jail.hit_process_limit()
    jail.close()
    if client_gone:
        return None
    return {
        "exit_code": os.waitstatus_to_exitcode(status),
        "seconds": time.monotonic() - started,
        "timed_out": timed_out,
        "processes_hit": processes_hit,
    }


def _continue_stopped(pid: int, wake: int, first: bool, space: RunNamespace | None) -> bool:
    """Let the traced child go on from every stop it is in; whether its first stop is still to come."""
    try:
        while os.read(wake, 512):
            pass
    except BlockingIOError:
        pass
    while True:
        try:
            info = os.waitid(os.P_PID, pid, os.WSTOPPED | os.WNOHANG)  # stops only: its exit stays to be reaped
        except ChildProcessError:
            return first
        if info is None:
            return first
        init = space.init.pid if space is not None else None

        def end_others(init: int | None = init) -> None:  # called within this pass of the loop
            if init:
                end_namespace_of(init, spare=[pid])

        continue_traced(pid, info.si_status << 8, first, end_others)
        first = False


def _wait_exit(pid: int) -> int:
    """The killed child's exit status. A traced child may report a stop first, even its exit stop after
    SIGKILL: it is let go on (it would wait there for ever, and the namespace's init with it)."""
    while True:
        _, status = os.waitpid(pid, 0)
        if not os.WIFSTOPPED(status):
            return status
        continue_traced(pid, status, False, lambda: None)


def _close_namespace(space: RunNamespace) -> None:
    """Kill the run namespace's init and wait for its end, reaping our other children meanwhile: a process
    of the run made with clone(CLONE_PARENT) is our child, and the init's end waits until it is reaped."""
    space.init.kill()
    while space.init.poll() is None:
        reap_children()
        time.sleep(0.0005)


def _child(
    sock: socket.socket, request: Message, work: Path, jail: ProcessJail, limits: Limits, isolation: str | None
) -> None:
    """Runs in the forked child: isolate, limit, then run the script like ``python main.py`` would."""
    try:
        server = os.getppid()
        sock.close()
        os.setsid()
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the run dies with the server
        if os.getppid() != server and not isolation:  # (isolated, the server is out of sight: ppid 0)
            os._exit(125)
        jail.join()
        _redirect_fds(work)
        if isolation:
            if (
                isolation == "root"
            ):  # as root no RLIMIT_NPROC (the cgroup counts); as uid 65534 it would count every worker
                apply_child_limits(limits)
            enter_run(
                SCORING_FORK,
                isolation,
                work=work,
                disk=limits.disk,
                hidden=limits.hidden,
                bind=(".stdout", ".stderr", *request.get("collect", {})),
            )
            if isolation != "root":  # in its own user namespace RLIMIT_NPROC counts this run only
                apply_child_limits(limits)
        else:
            apply_child_limits(limits)
        os.chdir(work)
        os.environ.clear()
        os.environ.update(request["env"])
        script = str(work / SCRIPT_NAME)
        sys.argv[:] = [SCRIPT_NAME]
        sys.path[0] = str(work)
        _restore_signals()
        # The server's exit handlers are not the script's: matplotlib's removal of its temporary config
        # folder (a path the isolated child cannot see) would print a traceback into every run's stderr.
        atexit._clear()
        main = _fresh_main_module(script)
        source = (work / SCRIPT_NAME).read_bytes()
    except BaseException as exc:
        os.write(2, f"sandbox setup failed: {exc!r}\n".encode())
        os._exit(125)
    _run_as_main(source, script, main, own_namespace=bool(isolation))


def _redirect_fds(work: Path) -> None:
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(work / ".stdout", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    err = os.open(work / ".stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for fd, target in ((null, 0), (out, 1), (err, 2)):
        os.dup2(fd, target)
        os.close(fd)


def _restore_signals() -> None:
    # what a fresh interpreter starts with: SIGINT raises KeyboardInterrupt, SIGPIPE/SIGXFSZ ignored
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGCHLD, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def _fresh_main_module(script: str) -> types.ModuleType:
    main = types.ModuleType("__main__")
    main.__file__ = script
    # typeshed's ModuleType declares neither attribute, though every module run as a file has both
    main.__cached__ = None  # type: ignore[attr-defined]
    main.__builtins__ = builtins  # type: ignore[attr-defined]
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", script)
    main.__spec__ = None
    main.__package__ = None
    sys.modules["__main__"] = main
    return main


def _run_as_main(source: bytes, script: str, main: types.ModuleType, own_namespace: bool = False) -> None:
    """Execute the script, then exit the way CPython exits after running a file (never returns).

    ``own_namespace``: the script runs in the run's own PID namespace (isolation); before it exits, every
    other process of the run is killed and gone, so none outlives it to write after its end (the supervisor
    reads the run's files once it has exited; a script that leaves by ``os._exit`` or a signal skips this,
    and the supervisor kills the rest as soon as it sees the exit)."""
    code = 0
    interrupted = False
    try:
        compiled = compile(source, script, "exec", dont_inherit=True)
        exec(compiled, main.__dict__)
    except SystemExit as exc:
        code = _system_exit_code(exc)
    except BaseException as exc:
        tb = exc.__traceback__
        # drop our own frame (the exec call) so the traceback starts in the script, as for python main.py
        if tb is not None and tb.tb_frame.f_code is _run_as_main.__code__:
            tb = tb.tb_next
        exc.__traceback__ = tb  # CPython's excepthook prints the exception's own traceback
        interrupted = isinstance(exc, KeyboardInterrupt)
        try:
            sys.excepthook(type(exc), exc, tb)
        except BaseException:
            pass
        code = 1
    code = _finalize(code)
    if own_namespace:
        try:
            end_namespace_peers()
        except BaseException:  # (the script may have broken what it uses) never return into the server's code
            pass
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code)


def _system_exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    try:
        print(exc.code, file=sys.stderr)
    except BaseException:
        pass
    return 1


def _finalize(code: int) -> int:
    """Interpreter shutdown without tearing down the (large, inherited) heap: threads, atexit, flush."""
    try:
        threading._shutdown()  # type: ignore[attr-defined]  # private, so typeshed omits it; CPython's exit calls it
    except BaseException:
        pass
    try:
        atexit._run_exitfuncs()
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except BaseException:
            code = 120  # what CPython returns when flushing stdout fails at exit
    return code


# ---------------------------------------------------------------- client side


class ForkServerError(RuntimeError):
    pass


# bwrap's --die-with-parent is the kernel's parent-death signal, which fires when the *thread* that started the
# process ends: a server started by a chain's thread (a tool call) would die with that thread. One thread that
# lives as long as the process starts every server.
_SPAWNER = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentbench-forkserver-start")


def _on_starter_thread(start: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    """``start()`` (a process start) on the process's long-lived starter thread."""
    return _SPAWNER.submit(start).result()


class ForkServer:
    """Client of one fork server; ``run`` is serialised (one script at a time per server)."""

    kind = "fork"

    def __init__(
        self,
        preload: Sequence[str] = DEFAULT_PRELOAD,
        start_timeout: float = 300.0,
        isolation: Isolation | None = None,
        python: Python | None = None,
    ):
        """``isolation``: how children are isolated (default: what ``isolation.probe()`` finds here); ``python``:
        the interpreter the server (and so every child) runs, default the running one (a grading environment's
        runs this package's source from its path: the server imports only the standard library of it)."""
        self.python = python
        self.preload = tuple(preload)
        self.start_timeout = start_timeout
        self.isolation = probe() if isolation is None else isolation
        self.own_pids: frozenset[int] = frozenset()  # the server's own processes (bwrap's included)
        self._base: Path | None = None  # under isolation: the host folder the server keeps its runs in
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._log: Path | None = None
        self._lock = threading.Lock()
        self.restarts = 0
        atexit.register(self.close)

    @property
    def server_pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def start(self) -> None:
        with self._lock:
            self._ensure_started()

    def _ensure_started(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        for attempt in range(MOUNT_RACE_TRIES):
            try:
                self._start_once()
                return
            except ForkServerError as exc:
                log = str(exc).split("its log says:\n", 1)[-1]
                if attempt == MOUNT_RACE_TRIES - 1 or not mount_race(log):
                    raise
            time.sleep(0.2 * (attempt + 1))

    def _start_once(self) -> None:
        self._teardown()
        ours, theirs = socket.socketpair()
        fd, log = tempfile.mkstemp(prefix="agentbench-forkserver-", suffix=".log")
        self._log = Path(log)
        mode = self.isolation.mode if self.isolation.active else None
        code = (
            f"from pytest_agentbench.sandbox.forkserver import serve; "
            f"serve({theirs.fileno()}, {self.preload!r}, {mode!r})"
        )
        env = dict(child_env(), PYTHONPATH=package_parent())  # (the scripts get their own environment)
        argv = [executable_of(self.python), "-c", code]
        if mode:
            self._base = Path(tempfile.mkdtemp(prefix="agentbench-forkserver-"))
            env["TMPDIR"] = str(self._base)  # the runs' folders (output files) live here, outside the children's view
            argv = sandbox_argv(SCORING_FORK, self.isolation, writable=[str(self._base)], python=self.python) + argv
        try:
            self._proc = _on_starter_thread(
                lambda: subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    cwd="/" if mode else None,
                    stdout=fd,
                    stderr=fd,
                    pass_fds=[theirs.fileno()],
                    env=env,
                    start_new_session=True,
                )
            )
        finally:
            os.close(fd)
            theirs.close()
        self._sock = ours
        ours.settimeout(self.start_timeout)
        try:
            hello = _recv(ours)
        except OSError:
            hello = None
        if not hello or "ready" not in hello:
            log_text = read_trimmed(self._log, 4000)[0]
            self._teardown()
            raise ForkServerError(f"the fork server did not start; its log says:\n{log_text}")
        self.own_pids = frozenset({self._proc.pid} | descendants(self._proc.pid))

    def run(
        self,
        source: str,
        limits: Limits = Limits(),
        env: dict[str, str] | None = None,
        files: Mapping[str, bytes | str] | None = None,
        collect: Mapping[str, int] | None = None,
    ) -> ExecResult:
        if not isinstance(source, str):
            raise TypeError(f"source must be Python source text (str), got {type(source).__name__}")
        full_env = child_env(env)
        if self.isolation.active:
            full_env = child_environment(full_env)
        with self._lock:
            self._ensure_started()
            # The run's folder is made, filled and read here, never by the server: what one run was given and
            # wrote never enters the memory every later child is forked from.
            work = Path(tempfile.mkdtemp(prefix="agentbench-", dir=self._base))
            try:
                prepare_workdir(work, source, files, collect)
                return self._run_in(work, limits, full_env, dict(collect or {}))
            finally:
                remove_tree(work)

    def _run_in(self, work: Path, limits: Limits, env: dict[str, str], collect: dict[str, int]) -> ExecResult:
        # what the server gets: where the run's folder is, the names of the files it hands back, how to run it
        request = {"workdir": str(work), "limits": asdict(limits), "env": env, "collect": collect}
        started = time.monotonic()
        assert self._sock is not None
        self._sock.settimeout(limits.timeout + 60)  # the server enforces the limit; this is a backstop
        try:
            _send(self._sock, request)
            first = _recv(self._sock)
            if first is not None and "error" in first:
                raise ValueError(first["error"])
            second = _recv(self._sock) if first is not None else None
        except (OSError, EOFError, pickle.UnpicklingError):
            second = None
        if second is None:
            return self._recover(first, work, limits, started)
        ended = second["ended"]
        result = collect_result(
            work,
            limits,
            ended["exit_code"],
            time.monotonic() - ended["seconds"],  # the run's own duration, as the server timed it
            timed_out=ended["timed_out"],
            limit="processes" if ended["processes_hit"] and not ended["timed_out"] else None,
            processes_hit=ended["processes_hit"],
        )
        result.files = read_collected(work, collect)
        return result

    def _recover(self, started_msg: Message | None, work: Path, limits: Limits, started: float) -> ExecResult:
        """The server died (or hung) mid-run: kill what is left of the run, report a failed run, restart later."""
        self.restarts += 1
        pid = started_msg.get("started") if started_msg else None
        server_pid = self._proc.pid if self._proc else None
        base, self._base = self._base, None  # keep the run's folder until its output is read
        self._teardown()
        cgroup = Path(started_msg["cgroup"]) if started_msg and started_msg.get("cgroup") else None
        jail = ProcessJail(limits, cgroup=cgroup)
        if self.isolation.active:  # the run was in the server's PID namespace, which ended with the server
            jail.kill_members()
        elif pid:  # (the pid is the server's view; without isolation that is ours too)
            jail.kill_all(pid)
            if server_pid:
                jail.kill_all(server_pid)
        jail.close()
        result = ExecResult(exit_code=None, stdout="", stderr="", duration=time.monotonic() - started)
        if started_msg is not None and work.exists():
            result = collect_result(work, limits, None, started, timed_out=False)
            result.exit_code = None
        if base is not None:
            remove_tree(base)
        result.stderr += f"\n{EXECUTOR_DIED}: the fork server died during this run (did the script kill its parent?)\n"
        return result

    def _teardown(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._proc is not None:
            try:
                self._proc.wait(timeout=2)  # closing the socket asks it to exit
            except subprocess.TimeoutExpired:
                kill_group(self._proc.pid)
                kill_pids(descendants(self._proc.pid) | {self._proc.pid})
                self._proc.wait()
            self._proc = None
        if self._log is not None:
            self._log.unlink(missing_ok=True)
            self._log = None
        if self._base is not None:
            remove_tree(self._base)
            self._base = None
        self.own_pids = frozenset()

    def close(self) -> None:
        with self._lock:
            self._teardown()


class ForkServerPool:
    """The fork servers of one process and interpreter: a run takes an idle server or starts another, so runs
    at the same time (the ``code_interpreter`` calls of chains generated concurrently, beside the scoring) are
    not queued behind one server. The callers bound how many run at once (``--bench-set tool_concurrency``, one
    scoring run at a time), and so how many servers there are; each is kept for later runs, and each is the
    pristine server this module describes: no run's files or outputs enter any server's memory."""

    kind = "fork"

    def __init__(self, python: Python | None = None, isolation: Isolation | None = None) -> None:
        self.python = python
        self.isolation = probe() if isolation is None else isolation
        self._lock = threading.Lock()
        self._idle: list[ForkServer] = []  # the most recently used last: one caller keeps using one server
        self._servers: list[ForkServer] = []
        atexit.register(self.close)

    @contextlib.contextmanager
    def _borrowed(self) -> Iterator[ForkServer]:
        """An idle server (a new one when every server is busy), given back after the run."""
        with self._lock:
            if self._idle:
                server = self._idle.pop()
            else:
                server = ForkServer(isolation=self.isolation, python=self.python)
                self._servers.append(server)
        try:
            yield server
        finally:
            with self._lock:
                self._idle.append(server)

    def prestart(self) -> None:
        """Start one server now, unless the pool has one: the next run takes it (waiting for the end of its start
        when it is still under way). A start that fails is the next run's to report: it starts the server again."""
        with self._lock:
            if self._servers:
                return
            server = ForkServer(isolation=self.isolation, python=self.python)
            self._servers.append(server)
            self._idle.append(server)
        server.start()

    def run(
        self,
        source: str,
        limits: Limits = Limits(),
        env: dict[str, str] | None = None,
        files: Mapping[str, bytes | str] | None = None,
        collect: Mapping[str, int] | None = None,
    ) -> ExecResult:
        with self._borrowed() as server:
            return server.run(source, limits=limits, env=env, files=files, collect=collect)

    @property
    def servers(self) -> int:
        """How many servers the pool has started (the most runs it had at once)."""
        with self._lock:
            return len(self._servers)

    def close(self) -> None:
        with self._lock:
            servers, self._servers, self._idle = self._servers, [], []
        for server in servers:
            server.close()
