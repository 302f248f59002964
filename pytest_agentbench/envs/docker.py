"""The Docker environment: one container per workspace, driven only through the ``docker`` SDK.

The engine is the one ``docker.from_env()`` finds, so ``DOCKER_HOST`` (``tcp://...``,
``ssh://user@host``) puts the containers on another machine while pytest runs here: the way to
scale a run of agent items out is a big engine host plus ``-n`` workers pointing at it. Files move
through the engine's archive API, so no shared file system is needed.

Each container runs ``sleep <lifetime>`` under the engine's init with ``auto_remove``, so even a
worker killed with SIGKILL leaves no container past its lifetime; it is labelled ``agentbench=1``
plus the host and pid of its creator, and a factory removes the containers of dead creators on
this host when it first connects. Normal paths remove it in ``stop()``; ``atexit`` and a SIGTERM
handler cover the rest.

Commands run as ``bash`` scripts in ``/capsule`` in their own process group (job control), with
their output in files inside the container of which only the head and tail are read back; a
command past its timeout has its group killed.

An external agent's container (``sandbox.containment.EXTERNAL_AGENT_DOCKER``) is made from the agent's image
layer over the task image (``LayerBuild``, built once and kept under a tag); its commands run as the kind's user
once the workspace is given to it, and the item's metering proxy reaches it as a unix socket bound into the
container, relayed to the container's loopback by a root forwarder (``loopback_listener``).

Tool scripts (``DockerFactory.run_python``: SciCode's ``code_interpreter``) run in a container of their own
per call, as uid 65534 on a read-only root file system, removed after the call (``FreshCalls``).
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import io
import os
import posixpath
import shlex
import signal
import socket
import tarfile
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from types import FrameType, ModuleType
from typing import IO, TYPE_CHECKING, Any, cast

from ..core.data import OFFLINE_ENV, offline
from ..core.io import trim_parts
from ..core.text import decode
from ..core.trees import TreeBounds, TreePastBound, remove_tree
from ..sandbox.containment import (
    AGENT_COMMAND_DOCKER,
    EXTERNAL_AGENT_DOCKER,
    PROXY_MOUNT,
    TOOL_CALL_DOCKER,
    command_user,
    container_options,
)
from ..sandbox.jail import namespace_of
from ..sandbox.result import ExecResult
from .base import (
    BLOCKED_ADDRESSES,
    DEFAULT_OUTPUT_CAP,
    DEFAULT_OUTPUT_LIMIT,
    MAX_FILE_READ,
    EnvError,
    EnvFactory,
    Environment,
    EnvSkip,
    check_host_names,
    check_timeout,
    python_result,
)
from .copyout import CopyOut, check_links
from .defaults import DEFAULT_COPY_OUT_CAP, DEFAULT_IMAGE, DEFAULT_NETWORK

DEFAULT_MEMORY = 8 << 30  # bytes (the engine also takes "8g")
DEFAULT_CPUS = 2.0
DEFAULT_PIDS = 1024
DEFAULT_LIFETIME = 24 * 3600.0  # seconds a container may live if nobody removes it (a killed worker)
WORKDIR = "/capsule"
PRIVATE = "/tmp/.agentbench"  # command scripts and output files, outside the workspace
LABEL = "agentbench"
AGENT_HOME = "/tmp/agentbench-home"  # the home of a container's commands when they run as a user of their own
PROXY_SOCKET = "proxy.sock"  # in the proxy's folder (PROXY_MOUNT in the container)
PROXY_PORT = 41427  # where the forwarder listens on the container's loopback (free: it starts before any command)
FORWARD_WAIT = 60.0  # seconds for the forwarder to listen
# The forwarder (root, in the container): 127.0.0.1:PORT relayed to the proxy's unix socket. It listens before it
# forks away, so its exit code says it listens; the agent's user can neither end it nor open the socket itself.
FORWARDER = r"""
import os, socket, sys, threading
path, port = sys.argv[1], int(sys.argv[2])
if not os.path.exists(path):
    sys.exit(f"no proxy socket at {path} in the container (is the engine on this machine?)")
server = socket.create_server(("127.0.0.1", port))
if os.fork():
    os._exit(0)
os.setsid()
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)

def copy(source, sink):
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    try:
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass

def relay(conn):
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        conn.close()
        return
    back = threading.Thread(target=copy, args=(upstream, conn), daemon=True)
    back.start()
    copy(conn, upstream)
    back.join()
    conn.close()
    upstream.close()

while True:
    conn, _ = server.accept()
    threading.Thread(target=relay, args=(conn,), daemon=True).start()
"""
PYTHON_ENV = {"MPLBACKEND": "Agg", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1"}

if TYPE_CHECKING:  # the SDK is imported only when a run uses Docker
    from docker import DockerClient
    from docker.models.containers import Container
    from docker.models.containers import ExecResult as DockerExecResult

_LIVE: dict[str, Container] = {}  # container id -> container, for atexit and signal cleanup
_LIVE_LOCK = threading.Lock()
_HOOKS_INSTALLED = False


def _docker() -> ModuleType:
    try:
        import docker  # why: the SDK is heavy and only --bench-env=docker needs it
    except ImportError:
        raise EnvError("--bench-env=docker needs the docker Python package: pip install docker") from None
    return docker


def _id(container: Container) -> str:
    # every container the engine created or listed has an id; the SDK's types allow a model without one
    return str(container.id)


def _output_bytes(result: DockerExecResult) -> bytes:
    """The output of a non-streamed ``exec_run``: bytes, or None when empty (its type also allows a stream)."""
    return result.output if isinstance(result.output, bytes) else b""


def _remove_container(container: Container) -> None:
    """Kill and remove; tolerate a container that auto-removal is already taking away."""
    docker = _docker()
    try:
        container.remove(force=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:
        if getattr(exc, "status_code", None) not in (404, 409):
            raise
    for _ in range(100):  # removal is asynchronous when auto_remove races with us
        try:
            container.reload()
        except docker.errors.NotFound:
            break
        time.sleep(0.05)
    with _LIVE_LOCK:
        _LIVE.pop(_id(container), None)


def remove_live_containers() -> None:
    with _LIVE_LOCK:
        containers = list(_LIVE.values())
    for container in containers:
        try:
            _remove_container(container)
        except Exception:  # at exit: best effort, the lifetime and the stale sweep catch the rest
            pass


def _on_terminate(signum: int, frame: FrameType | None) -> None:
    # SIGTERM would end the process without running finally blocks or atexit; make it an exit
    remove_live_containers()
    raise SystemExit(128 + signum)


def _install_exit_hooks() -> None:
    global _HOOKS_INSTALLED
    if _HOOKS_INSTALLED:
        return
    _HOOKS_INSTALLED = True
    atexit.register(remove_live_containers)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) is signal.SIG_DFL:
                signal.signal(sig, _on_terminate)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def pid_namespace() -> str:
    """This process's PID namespace (``pid:[4026531836]``), or "" where /proc does not say."""
    return namespace_of(os.getpid()) or ""


def remove_stale_containers(client: DockerClient) -> list[str]:
    """Remove the labelled containers whose creator on this host is dead; returns their ids. Only a creator in
    this process's PID namespace can be judged: seen from another (a sandbox, a container sharing the engine),
    a live creator's pid names no process here, and its containers would be removed under it."""
    removed: list[str] = []
    filters: dict[str, str | list[str] | bool] = {"label": [f"{LABEL}=1", f"{LABEL}.host={socket.gethostname()}"]}
    here = pid_namespace()
    # ignore_removed: a container another process removes between the listing and its inspection is gone, not
    # an error of this start
    for container in client.containers.list(all=True, filters=filters, ignore_removed=True):
        if container.labels.get(f"{LABEL}.pidns", here) != here:
            continue
        try:
            pid = int(container.labels.get(f"{LABEL}.pid", "0"))
        except ValueError:
            pid = 0
        if pid and _pid_alive(pid) and pid != 1:
            continue
        _remove_container(container)
        removed.append(_id(container))
    return removed


def _tar_bytes(files: dict[str, bytes], dirs: tuple[str, ...] = ()) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in dirs:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, int(time.time())
            tar.addfile(info)
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def output_report(base: str, limit: int) -> str:
    """Shell that prints the sizes of a command's two output files, then the head and tail of each (all when it
    has at most ``limit`` bytes), and removes them: a 100 MB output never leaves the container."""
    half = limit // 2
    return (
        f"so=$(wc -c < {base}.out 2>/dev/null || echo 0); se=$(wc -c < {base}.err 2>/dev/null || echo 0); "
        f'echo "$so $se"; '
        f"for f in {base}.out {base}.err; do s=$(wc -c < $f 2>/dev/null || echo 0); "
        f'if [ "$s" -le {limit} ]; then cat $f 2>/dev/null; else head -c {half} $f; tail -c {half} $f; fi; done; '
        f"rm -f {base}.out {base}.err {base}.sh {base}.pid"
    )


class DockerEnvironment(Environment):
    kind = "docker"
    workdir = WORKDIR

    def __init__(
        self,
        client: DockerClient,
        container: Container,
        workspace: Path,
        *,
        keep_workspace: bool = False,
        name: str = "",
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        workdir: str = WORKDIR,
        copy_cap: int = DEFAULT_COPY_OUT_CAP,
    ) -> None:
        super().__init__(workspace, keep_workspace=keep_workspace, name=name, copy_cap=copy_cap)
        self.workdir = workdir  # the workspace inside the container (CORE-Bench: --bench-set workspace_root)
        self.client = client
        self.container = container
        self.output_limit = output_limit
        self.output_cap = output_cap
        self.count = 0
        self.user: str | None = None  # the user of its commands (containment.command_user); None: the image's
        self.proxy: tuple[str, socket.socket] | None = None  # an external agent's: the socket's folder, listener
        self.loopback_address: tuple[str, int] | None = None  # where the commands reach the proxy, once relayed

    # ---------------------------------------------------------------- plumbing

    def _check(self) -> None:
        if self.stopped:
            raise EnvError(f"environment {self.name or self.container.short_id} is stopped")

    def _exec(self, argv: list[str], *, environment: dict[str, str] | None = None) -> tuple[int | None, bytes]:
        result = self.container.exec_run(
            argv, workdir=self.workdir, environment=self._environment(environment), demux=False, user=self.user or ""
        )
        return result.exit_code, _output_bytes(result)

    def _environment(self, environment: dict[str, str] | None) -> dict[str, str] | None:
        """A command's variables: with a user of its own, its home too (the image knows no home for it)."""
        if self.user is None:
            return environment
        return {"HOME": AGENT_HOME, **(environment or {})}

    def _container_path(self, path: str) -> str:
        posix = PurePosixPath(path)
        return str(posix if posix.is_absolute() else PurePosixPath(self.workdir) / posix)

    # ---------------------------------------------------------------- commands

    def run(self, command: str, timeout: float, *, environment: dict[str, str] | None = None) -> ExecResult:
        self._check()
        timeout = check_timeout(timeout)
        self.count += 1
        base = f"{PRIVATE}/{self.count}"
        self.container.put_archive("/tmp", _tar_bytes({f".agentbench/{self.count}.sh": command.encode()}))
        blocks = max(1, self.output_cap // 512)
        # job control gives the command its own process group (= its pid), killable as a whole
        outer = (
            f"set -m; ulimit -f {blocks}; /bin/bash {base}.sh >{base}.out 2>{base}.err </dev/null & "
            f"echo $! >{base}.pid; wait $!"
        )
        api = self.client.api
        exec_id = api.exec_create(
            self.container.id,
            ["/bin/bash", "-c", outer],
            workdir=self.workdir,
            environment=self._environment(environment),
            user=self.user or "",
        )["Id"]
        started = time.monotonic()
        api.exec_start(exec_id, detach=True)
        timed_out = False
        try:
            info = self._wait_exec(exec_id, started + timeout)
            if info is None:
                timed_out = True
                self._exec(["/bin/bash", "-c", f"kill -KILL -- -$(cat {base}.pid) 2>/dev/null; true"])
                info = self._wait_exec(exec_id, time.monotonic() + 10) or {"ExitCode": None}
        except BaseException:  # Ctrl-C while waiting: kill the command before leaving
            try:
                self._exec(["/bin/bash", "-c", f"kill -KILL -- -$(cat {base}.pid) 2>/dev/null; true"])
            except Exception:
                pass
            raise
        duration = time.monotonic() - started
        stdout, out_size, stderr, err_size, repaired = self._read_outputs(base)
        return ExecResult(
            exit_code=None if timed_out else info.get("ExitCode"),
            stdout=stdout,
            stderr=stderr,
            timed_out=timed_out,
            duration=duration,
            stdout_bytes=out_size,
            stderr_bytes=err_size,
            text_repaired=repaired,
        )

    def _wait_exec(self, exec_id: str, deadline: float) -> dict[str, Any] | None:
        """The exec's final state, or None at the deadline."""
        delay = 0.005
        while True:
            info = self.client.api.exec_inspect(exec_id)
            if not info.get("Running"):
                return info
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            time.sleep(min(delay, left))
            delay = min(delay * 1.5, 0.25)

    def _read_outputs(self, base: str) -> tuple[str, int, str, int, int]:
        """Head and tail of both streams in one exec; a 100 MB output never leaves the container. Last: how many
        characters of the kept bytes were not UTF-8 and became U+FFFD (the record's ``text_repaired``)."""
        _, output = self._exec(["/bin/sh", "-c", output_report(base, self.output_limit)])
        return self._parse_outputs(output)

    def _parse_outputs(self, output: bytes) -> tuple[str, int, str, int, int]:
        """What ``output_report`` printed, as ``_read_outputs`` returns it."""
        limit, half = self.output_limit, self.output_limit // 2
        first, _, rest = output.partition(b"\n")
        try:
            out_size, err_size = (int(x) for x in first.split())
        except ValueError:
            raise EnvError(
                f"could not read a command's output in container {self.container.short_id}: {output[:200]!r}"
            ) from None
        texts, repaired = [], 0
        for size in (out_size, err_size):
            taken = size if size <= limit else 2 * half
            chunk, rest = rest[:taken], rest[taken:]
            head, tail = (chunk, b"") if size <= limit else (chunk[:half], chunk[half:])
            texts.append(trim_parts(head, tail, size))
            repaired += decode(head)[1] + decode(tail)[1]
        return texts[0], out_size, texts[1], err_size, repaired

    def run_python(self, source: str, timeout: float) -> dict[str, Any]:
        """``source`` as ``main.py`` in a fresh folder with python3, as the host sandbox runs it."""
        self._check()
        self.count += 1
        folder = f"{PRIVATE}/py{self.count}"
        self.container.put_archive("/tmp", _tar_bytes({f".agentbench/py{self.count}/main.py": source.encode()}))
        result = self.run(f"cd {folder} && exec python3 main.py", timeout, environment=PYTHON_ENV)
        self._exec(["/bin/rm", "-rf", folder])
        # the folder is per run; "." makes the output the same as the host sandbox's
        for attr in ("stdout", "stderr"):
            text = getattr(result, attr).replace(folder + "/", "./").replace(folder, ".")
            setattr(result, attr, text)
        return python_result(result)

    # ---------------------------------------------------------------- files

    def read_file(self, path: str) -> bytes:
        self._check()
        docker = _docker()
        target = self._container_path(path)
        try:
            stream, stat = self.container.get_archive(target)
        except docker.errors.NotFound:
            raise FileNotFoundError(f"no file {path!r} in the environment (looked at {target})") from None
        if (stat or {}).get("size", 0) > MAX_FILE_READ:
            raise ValueError(f"{path!r} is larger than {MAX_FILE_READ >> 20} MB; read a part of it with bash")
        buffer = io.BytesIO()
        for chunk in stream:
            buffer.write(chunk)
            if buffer.tell() > MAX_FILE_READ + (1 << 20):
                raise ValueError(f"{path!r} is larger than {MAX_FILE_READ >> 20} MB; read a part of it with bash")
        buffer.seek(0)
        with tarfile.open(fileobj=buffer) as tar:
            member = next((m for m in tar.getmembers() if m.isfile()), None)
            if member is None:
                raise FileNotFoundError(f"{path!r} is not a regular file in the environment")
            extracted = tar.extractfile(member)
            assert extracted is not None  # a regular file's member always has its data
            return extracted.read()

    def write_file(self, path: str, data: bytes | str) -> None:
        self._check()
        target = PurePosixPath(self._container_path(path))
        code, output = self._exec(["mkdir", "-p", str(target.parent)])
        if code != 0:
            raise OSError(f"cannot create {target.parent} in the container: {output[:200]!r}")
        payload = data.encode() if isinstance(data, str) else data
        self.container.put_archive(str(target.parent), _tar_bytes({target.name: payload}))

    def put_workspace(self) -> None:
        """Copy the host workspace into ``/capsule`` (streamed through a temporary tar file)."""
        with tempfile.TemporaryFile(prefix="agentbench-put-") as fh:
            with tarfile.open(fileobj=fh, mode="w") as tar:
                for child in sorted(self.workspace.iterdir()):
                    tar.add(child, arcname=child.name)
            fh.seek(0)
            # why: the engine makes the working dir when the container starts, but one run of the suite found it
            # missing at this point under load (404 "Could not find the file"); made here, it is always there
            made = self.container.exec_run(["mkdir", "-p", self.workdir], workdir="/")  # not in the dir it makes
            if made.exit_code != 0:
                raise EnvError(
                    f"cannot create {self.workdir} in container {self.container.short_id}: "
                    f"{_output_bytes(made)[:200]!r}"
                )
            if not self.container.put_archive(self.workdir, fh):
                raise EnvError(f"copying the workspace into container {self.container.short_id} failed")
        self.container.put_archive("/tmp", _tar_bytes({}, dirs=(".agentbench",)))

    def copy_out(self, dest_dir: Path) -> Path:
        """Stream the workspace out into ``dest_dir`` (emptied first when it is the start workspace), within
        ``copy_cap`` (``envs.copyout``; ``copied`` says what came and what was left out).

        The archive comes from untrusted code and is never stored whole: it is read as a stream, each
        member extracted with tarfile's ``data`` filter (which refuses absolute paths, ``..`` and links
        leading outside), special files and files past the cap left out. A file larger than the whole cap is
        never asked for (the folders on its way come entry by entry), so a 20 GB sparse file costs nothing;
        the workspace's top-level files come first, so no folder can crowd out ``report.json``."""
        self._check()
        dest = Path(dest_dir)
        if dest.exists() and dest.resolve() == self.workspace.resolve():
            for child in dest.iterdir():
                remove_tree(child)
        dest.mkdir(parents=True, exist_ok=True)
        record = CopyOut(self.copy_cap)
        self.copied = record
        # files left out below the cap are read past in the stream: at most that much again as the cap
        reader = _Budgeted(self.copy_cap * 2 + (1 << 20))
        try:
            for path in self._plan(record):
                if path.endswith("/"):
                    (dest / path).mkdir(parents=True, exist_ok=True)
                else:
                    self._extract_part(path, dest, record, reader)
        except _ReadLimit:
            record.stopped = (
                f"stopped after reading {reader.total} bytes of the workspace's archives (twice the cap of "
                f"{self.copy_cap} bytes): the files after that point were not copied"
            )
        except TreePastBound as exc:  # as the walk of a workspace on this machine ends (envs.copyout)
            record.past_bound = record.stopped = f"the workspace is not walked to its end: {exc}"
        check_links(dest, record)
        return dest

    def _listing(self, *argv: str) -> list[list[str]] | None:
        """The sections of what a ``find -print0`` script prints, an empty name ending each (names are never
        empty), as paths relative to the workspace; None when the script fails."""
        code, output = self._exec(["/bin/sh", "-c", *argv])
        if code != 0:
            return None
        sections: list[list[str]] = [[]]
        for name in output.split(b"\0")[:-1]:
            if not name:
                sections.append([])
            elif name.startswith(b"./"):
                sections[-1].append(os.fsdecode(name[2:]).lstrip("/"))
        return sections[:-1]

    def _plan(self, record: CopyOut) -> list[str]:
        """The workspace's paths (relative) to fetch as one archive each, in order; a trailing ``/``: a folder that
        is only made, its entries being in the list. Files past the whole cap and sockets (which the engine's
        archives drop without a word) are named in ``record`` and left out."""
        found = self._listing(
            f'find . -mindepth 1 -type f -size +{self.copy_cap}c -print0 && printf "\\0" && '
            'find . -mindepth 1 -type s -print0 && printf "\\0"'
        )
        if found is None or len(found) < 2:
            return [""]  # no find here: the whole tree in one archive
        huge, sockets = set(found[0]), set(found[1])
        for name in sorted(sockets):
            record.skip(name, "a socket: special files are not copied")
        opened = {""} | {str(PurePosixPath(p).parent) for p in huge} - {"."}
        opened |= {str(a) for p in list(opened) for a in PurePosixPath(p).parents if str(a) != "."}
        folders = sorted(opened)
        script = 'for d; do find "./$d" -mindepth 1 -maxdepth 1 {} -print0 || exit 1; printf "\\0"; done'
        listed = self._listing(script.format("! -type d"), "sh", *folders)
        subfolders = self._listing(script.format("-type d"), "sh", *folders)
        if listed is None or subfolders is None or len(listed) != len(folders) or len(subfolders) != len(folders):
            return [""]
        children = {f: (sorted(listed[i]), sorted(subfolders[i])) for i, f in enumerate(folders)}
        plan: list[str] = []
        self._expand("", children, huge, sockets, record, plan)
        return plan

    def _expand(
        self,
        folder: str,
        children: dict[str, tuple[list[str], list[str]]],
        huge: set[str],
        sockets: set[str],
        record: CopyOut,
        plan: list[str],
    ) -> None:
        """``plan`` gets ``folder``'s entries: its files first (report.json before any subfolder's files), then its
        subfolders, each as one archive unless a file past the cap lies in it. Depth first with a stack of its
        own: the folders on the way to a huge file may be nested thousands deep."""
        stack: list[tuple[str, bool]] = [(folder, True)]  # (path, expanded) in the order they go in the plan
        while stack:
            folder, expanded = stack.pop()
            if not expanded:
                plan.append(folder)
                continue
            if folder:
                plan.append(folder + "/")
            files, subfolders = children.get(folder, ([], []))
            for rel in files:
                if rel in huge:
                    record.over_cap(rel, self._size(rel))
                elif rel not in sockets:  # (named already)
                    plan.append(rel)
            stack.extend((rel, rel in children) for rel in reversed(subfolders))

    def _size(self, rel: str) -> int:
        """The apparent size of a file, from the archive's stat header alone (its data is never read)."""
        try:
            stream, info = self.container.get_archive(f"{self.workdir.rstrip('/')}/{rel}")
        except _docker().errors.APIError:
            return self.copy_cap + 1
        closer = getattr(stream, "close", None)
        if closer is not None:
            closer()
        return int((info or {}).get("size", self.copy_cap + 1))

    def _extract_part(self, rel: str, dest: Path, record: CopyOut, reader: _Budgeted) -> None:
        """The archive of ``rel`` (the whole workspace for ``""``) extracted into ``dest`` within the cap."""
        docker = _docker()
        path = f"{self.workdir.rstrip('/')}/{rel}" if rel else self.workdir
        try:
            stream, _ = self.container.get_archive(path)
        except docker.errors.APIError as exc:  # a link loop, or removed meanwhile by a background job
            record.skip(rel, f"not copied: {getattr(exc, 'explanation', None) or exc}")
            return
        parent = str(PurePosixPath(rel).parent) if rel else None
        try:
            _extract_members(stream, dest, parent, record, reader)
        except tarfile.TarError as exc:
            record.skip(rel or ".", f"its archive could not be read to the end: {exc}")
        finally:
            closer = getattr(stream, "close", None)
            if closer is not None:
                closer()

    def remove_paths(self, paths: Sequence[str]) -> None:
        """Delete ``paths`` (absolute, in the container) as root, before the agent's first command: inputs the
        image holds beside the workspace copied from them. Deleted, files of the image's layers cannot be read
        back from inside: the container may not mount (unless privileged, which is not isolated anyway).
        EnvError naming what remains when one cannot be deleted (a volume mounted there, a read-only file
        system)."""
        self._check()
        for path in paths:
            if not str(path).startswith("/") or ".." in PurePosixPath(path).parts or str(PurePosixPath(path)) == "/":
                raise ValueError(f"remove_paths takes absolute paths below / without '..', got {path!r}")
        quoted = " ".join(shlex.quote(str(PurePosixPath(p))) for p in paths)
        script = (
            f"rm -rf -- {quoted} 2>&1; for p in {quoted}; do "
            f'if [ -e "$p" ] || [ -L "$p" ]; then echo "left: $p"; fi; done'
        )
        made = self.container.exec_run(["/bin/sh", "-c", script], user="root", workdir="/")
        said = _output_bytes(made).decode(errors="replace")
        if made.exit_code != 0 or "left: " in said:
            raise EnvError(
                f"cannot delete {', '.join(paths)} in container {self.container.short_id} (the agent would reach "
                f"it): {said.strip()[-500:]}"
            )

    # ---------------------------------------------------------------- an external agent's

    def give_to_user(self, user: str) -> None:
        """From now on every command runs as ``user``: the workspace, the commands' folder and a home are given
        to it (as root, before any of its commands)."""
        folders = " ".join(shlex.quote(f) for f in (self.workdir, PRIVATE, AGENT_HOME))
        made = self.container.exec_run(
            ["/bin/sh", "-c", f"mkdir -p {folders} && chown -R {shlex.quote(user)} {folders}"], user="0", workdir="/"
        )
        if made.exit_code != 0:
            raise EnvError(
                f"cannot give the workspace to user {user} in container {self.container.short_id}: "
                f"{_output_bytes(made)[-300:]!r}"
            )
        self.user = user

    def end_commands(self) -> None:
        """End every process of the commands' user (all of them when it is the image's: the container goes),
        keeping the container and its files for what is read afterwards (a proxy that stopped serving ends the
        agent so)."""
        if self.user is None:
            self.end_processes()
            return
        with contextlib.suppress(Exception):  # (a container already gone has no processes left)
            self._exec(["/bin/sh", "-c", "kill -KILL -1 2>/dev/null; true"])

    def loopback_listener(self) -> socket.socket:
        """The listening socket of the item's metering proxy: a unix socket of this machine, bound read-only into
        the container, where a root forwarder relays ``loopback_address`` (127.0.0.1 of the container) to it.
        Nothing else reaches it: the socket's folder is root's (0700) on both sides."""
        if self.proxy is None:
            raise EnvError("this container was started without a metering proxy (start it for an external agent)")
        self._check()
        made = self.container.exec_run(
            ["python3", "-c", FORWARDER, f"{PROXY_MOUNT}/{PROXY_SOCKET}", str(PROXY_PORT)], user="0", workdir="/"
        )
        if made.exit_code != 0:
            raise EnvError(
                f"cannot relay the metering proxy into container {self.container.short_id} (the image needs "
                f"python3 for it): {_output_bytes(made).decode(errors='replace').strip()[-500:]}"
            )
        self.loopback_address = ("127.0.0.1", PROXY_PORT)
        return self.proxy[1]

    # ---------------------------------------------------------------- the end

    def _release(self) -> None:
        try:
            _remove_container(self.container)
        finally:
            if self.proxy is not None:
                folder, listener = self.proxy
                listener.close()
                remove_tree(Path(folder))


class _ReadLimit(Exception):
    """The archives of one copy_out carried more than their reader allows."""


class _Budgeted:
    """Reads the engine's archive streams as one file, counting every byte; ``_ReadLimit`` past ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit, self.total = limit, 0
        self.chunks: Any = iter(())
        self.pending = bytearray()

    def start(self, stream: Any) -> _Budgeted:
        self.chunks, self.pending = iter(stream), bytearray()
        return self

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self.pending) < size:
            chunk = next(self.chunks, None)
            if chunk is None:
                break
            self.total += len(chunk)
            if self.total > self.limit:
                raise _ReadLimit
            self.pending += chunk
        if size < 0:
            size = len(self.pending)
        out = bytes(self.pending[:size])
        del self.pending[:size]  # cheap at the front of a bytearray
        return out


def _leaves_tree(name: str, target: str) -> bool:
    """Whether a link at ``name`` to ``target`` leads outside the tree (an absolute target always does: it is
    a path in the container)."""
    if posixpath.isabs(target):
        return True
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
    return joined == ".." or joined.startswith("../")


def past_bound(parts: tuple[str, ...], name: str, bounds: TreeBounds) -> None:
    """``TreePastBound`` for an archive member the walk of the copied tree (``core.trees.walk_tree``) could not
    reach: extracting it costs a lookup per folder on its way (the ``data`` filter resolves its path), so a
    tree nested thousands deep would take the controller minutes, and it would never be judged."""
    if len(parts) > bounds.depth:
        raise TreePastBound("nested folders", bounds.depth, name)
    if len(name) > bounds.path:
        raise TreePastBound("characters of path", bounds.path, name)


def _extract_members(stream: Any, dest: Path, parent: str | None, record: CopyOut, reader: _Budgeted) -> None:
    """Extract one archive stream into ``dest`` within ``record``'s cap; what is left out is named there. The
    members' names are relative to ``parent`` (None: the archive of the whole workspace, its folder first).
    ``TreePastBound`` at the first member past ``record``'s bounds."""
    with tarfile.open(fileobj=cast(IO[bytes], reader.start(stream)), mode="r|") as tar:
        for member in tar:
            parts = PurePosixPath(member.name).parts
            if parent is None:
                parts = parts[1:]  # the workspace folder's own name
            elif parent != ".":
                parts = (*PurePosixPath(parent).parts, *parts)
            if not parts:
                continue
            member.name = str(PurePosixPath(*parts))
            past_bound(parts, member.name, record.bounds)
            if not (member.isdir() or member.isfile() or member.issym() or member.islnk()):
                record.skip(member.name, "a FIFO or device: special files are not copied")
                continue
            if member.issym() and _leaves_tree(member.name, member.linkname):
                record.skip(member.name, "a symbolic link leading outside the workspace: not copied")
                continue
            if member.isfile() and not record.admit(member.size):
                record.over_cap(member.name, member.size)
                continue  # its data is read past, within the reader's limit
            try:
                tar.extract(member, dest, filter="data")
            except (tarfile.FilterError, tarfile.StreamError, OSError) as exc:  # StreamError: a hard link to a
                record.skip(member.name, f"not copied: {exc}")  # file left out (a stream cannot go back to it)


NESTED_DOCKERD = (
    "dockerd --bridge=none --iptables=false --ip-masq=false --storage-driver=vfs "
    f">{PRIVATE}/dockerd.log 2>&1 </dev/null"
)
NESTED_WAIT = 60.0  # seconds for the nested daemon to answer


# Linux capabilities 0..37 by bit number, as the engine names them (newer ones are unknown to older engines)
CAPABILITIES = (
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
)
NESTED_SECURITY = ("seccomp=unconfined", "apparmor=unconfined")
# cgroup v1 hierarchies are mounted read-only in an unprivileged container: mount them again writable
WRITABLE_CGROUPS = r"""
for d in /sys/fs/cgroup/*/; do
  n=$(basename "$d"); [ -L "/sys/fs/cgroup/$n" ] && continue
  opts=$(awk -v m="/sys/fs/cgroup/$n" '$2==m && $3=="cgroup" {print $4}' /proc/mounts | tr , '
'          | grep -vE '^(ro|rw|nosuid|nodev|noexec|relatime)$' | paste -sd, -)
  [ -n "$opts" ] || continue
  umount "/sys/fs/cgroup/$n" && mount -t cgroup -o "rw,nosuid,nodev,noexec,$opts" cgroup "/sys/fs/cgroup/$n"
done
"""


def engine_capabilities() -> list[str]:
    """Every capability a container may get from an engine that refuses ``--privileged`` because its own
    bounding set lacks some: for a local engine (no DOCKER_HOST) the ones in this machine's bounding set."""
    if os.environ.get("DOCKER_HOST", "unix://").startswith("unix://"):
        try:
            line = next(
                entry for entry in Path("/proc/self/status").read_text().splitlines() if entry.startswith("CapBnd:")
            )
            bits = int(line.split()[1], 16)
            return [name for bit, name in enumerate(CAPABILITIES) if bits >> bit & 1]
        except (OSError, StopIteration, ValueError):
            pass
    return list(CAPABILITIES)


def start_nested_daemon(env: DockerEnvironment, wait: float = NESTED_WAIT, *, writable_cgroups: bool = False) -> None:
    """Start dockerd inside ``env``'s (privileged) container with the flags the outer engine needs here
    (no bridge, no iptables) and the vfs storage driver, which works nested; wait until ``docker info``
    answers. EnvError (with the daemon's log) when the image has no dockerd or it does not come up.
    ``writable_cgroups``: remount the cgroup hierarchies writable first (a container not --privileged)."""
    code, _ = env._exec(["/bin/sh", "-c", "command -v dockerd && command -v docker"])
    if code != 0:
        raise EnvError(
            f"--bench-set=docker_dind=true: the image has no dockerd/docker client (install docker.io in it); "
            f"container {env.container.short_id}"
        )
    if writable_cgroups:
        code, output = env._exec(["/bin/bash", "-c", WRITABLE_CGROUPS])
        if code != 0:
            raise EnvError(
                f"--bench-set=docker_dind=true: could not make the cgroups writable in container "
                f"{env.container.short_id}: {output.decode(errors='replace')[-500:]}"
            )
    api = env.client.api
    exec_id = api.exec_create(env.container.id, ["/bin/sh", "-c", f"mkdir -p {PRIVATE}; exec {NESTED_DOCKERD}"])["Id"]
    api.exec_start(exec_id, detach=True)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if env._exec(["docker", "info"])[0] == 0:
            return
        if not api.exec_inspect(exec_id).get("Running"):
            break
        time.sleep(0.25)
    _, log = env._exec(["/bin/sh", "-c", f"tail -n 15 {PRIVATE}/dockerd.log"])
    raise EnvError(
        f"--bench-set=docker_dind=true: the nested Docker daemon did not answer within {wait:g} s (does the engine "
        f"allow privileged containers?); its log: {log.decode(errors='replace').strip()[-1500:]}"
    )


# ---- tool scripts (EnvFactory.run_python): a fresh container per call ------------------------------------
#
# Why a container per call: a tool script is a model's code, and what one call leaves (a daemon, a `.pth` file in
# site-packages, a file in /tmp or the home folder) must not be there for the next call, which may be another
# step, problem, attempt or model. A call's container has a read-only root file system, a tmpfs /tmp that holds
# the call's folder and home, no capabilities and no_new_privs; its main process (root's `sleep` under the
# engine's init) cannot be signalled by the call's code, which runs as CALL_USER through `docker exec`. The
# container is removed after the call, which kills every process it started. Cost kept off a call's path: the
# next call's container is started ahead (a spare nobody has used), and a finished call's container is removed in
# the background; a call waits for the removals of the calls before it, so no process of an earlier call is alive
# while its code runs.

CALL_USER = "65534:65534"  # nobody: the tool's code is never root
CALL_FOLDER = f"{PRIVATE}/py"  # the script's folder (main.py); "." in what the model is shown
CALL_HOME = f"{PRIVATE}/home"
CALL_OUTPUT = f"{PRIVATE}/call"  # .out, .err and .pid of the script
CALL_CHUNK = 96 * 1024  # base64 characters per argument (the kernel takes at most 128 KiB per argument)
CALL_ARGUMENTS = 8  # arguments of source per exec: well under the kernel's 2 MiB for all of them
CALL_STREAM_TIMEOUT = 7 * 24 * 3600  # seconds: never in practice (a call's own deadline is kept by the caller)
CALL_APPEND = f'mkdir -p {CALL_FOLDER} && printf %s "$@" | base64 -d >>{CALL_FOLDER}/main.py'


def call_container_options(factory: DockerFactory) -> dict[str, Any]:
    """The ``containers.run`` keywords of a tool call's container (the factory's network and limits)."""
    kwargs: dict[str, Any] = {
        **container_options(TOOL_CALL_DOCKER, network=factory.network),  # what the call can see and keep
        "labels": {
            LABEL: "1",
            f"{LABEL}.host": socket.gethostname(),
            f"{LABEL}.pid": str(os.getpid()),
            f"{LABEL}.pidns": pid_namespace(),
            f"{LABEL}.name": "tool call",
        },
        "working_dir": "/tmp",
        "init": True,
        "auto_remove": True,
        "detach": True,
    }
    return {**kwargs, **factory.resource_limits()}


def start_call_container(factory: DockerFactory) -> Container:
    """A new, unused container for one tool call (EnvError when the engine refuses it)."""
    client = factory.client()
    factory._ensure_image(client)
    try:
        container: Container = client.containers.run(
            factory.image, ["sleep", str(int(factory.lifetime))], **call_container_options(factory)
        )
    except _docker().errors.APIError as exc:
        factory._remove_unstarted(client)
        raise EnvError(f"starting a container for a tool script from {factory.image!r} failed: {exc}") from None
    with _LIVE_LOCK:
        _LIVE[_id(container)] = container
    return container


def source_groups(source: str) -> list[list[str]]:
    """``source`` as base64 arguments, grouped per exec (base64: any text passes, NUL included)."""
    encoded = base64.b64encode(source.encode()).decode("ascii")
    chunks = [encoded[i : i + CALL_CHUNK] for i in range(0, len(encoded), CALL_CHUNK)] or [""]
    return [chunks[i : i + CALL_ARGUMENTS] for i in range(0, len(chunks), CALL_ARGUMENTS)]


class CallContainer(DockerEnvironment):
    """One tool call's container, seen as an environment only for its exec plumbing: every exec runs as
    CALL_USER in /tmp; no workspace is copied in or out (``workspace`` names the call's folder and is never
    touched on this machine)."""

    def __init__(self, client: DockerClient, container: Container) -> None:
        super().__init__(client, container, Path(CALL_FOLDER), keep_workspace=True, name="tool call", workdir="/tmp")

    def _exec(self, argv: list[str], *, environment: dict[str, str] | None = None) -> tuple[int | None, bytes]:
        result = self.container.exec_run(
            argv, workdir=self.workdir, environment=environment, demux=False, user=CALL_USER
        )
        return result.exit_code, _output_bytes(result)

    def run_source(self, source: str, timeout: float, streams: DockerClient) -> ExecResult:
        """``source`` as ``main.py`` in the call's folder with python3, output capped as ``run``'s. One exec runs
        it and then prints its exit code and ``output_report``, read through ``streams`` (a client whose socket
        never times out: the deadline is ``timeout``, kept here)."""
        *first, last = source_groups(source)
        for group in first:  # a script too long for one exec's arguments: the rest comes with the run
            code, output = self._exec(["/bin/sh", "-c", CALL_APPEND, "sh", *group])
            if code != 0:
                raise EnvError(f"cannot write a tool script in container {self.container.short_id}: {output[:200]!r}")
        base, blocks = CALL_OUTPUT, max(1, self.output_cap // 512)
        outer = (
            f"set -m; mkdir -p {CALL_HOME} && {{ {CALL_APPEND}; }} 2>{base}.err || exit 125; cd {CALL_FOLDER}; "
            f"ulimit -f {blocks}; python3 main.py >{base}.out 2>{base}.err </dev/null & echo $! >{base}.pid; "
            f"wait $!; printf '%s ' $?; {output_report(base, self.output_limit)}"
        )
        api = streams.api
        exec_id = api.exec_create(
            self.container.id,
            ["/bin/bash", "-c", outer, "bash", *last],
            stderr=False,
            workdir="/tmp",
            environment={**PYTHON_ENV, "HOME": CALL_HOME},
            user=CALL_USER,
        )["Id"]
        started = time.monotonic()
        report = StreamReader(api.exec_start(exec_id, stream=True), 4 * self.output_limit + 4096)
        timed_out = not report.done.wait(timeout)
        if timed_out:  # every process of the call (CALL_USER's, daemons too); the container's own are root's
            self._exec(["/bin/sh", "-c", "kill -KILL -1 2>/dev/null; true"])
            report.done.wait(10)
        duration = time.monotonic() - started
        code_text, _, rest = bytes(report.data).partition(b" ")
        exit_code = None if timed_out else int(code_text) if code_text.isdigit() else None
        if timed_out or exit_code is None:  # (the script's processes may have killed the reporting shell)
            stdout, out_size, stderr, err_size, repaired = self._read_outputs(base)
            exit_code = None if timed_out else api.exec_inspect(exec_id).get("ExitCode")
        else:
            stdout, out_size, stderr, err_size, repaired = self._parse_outputs(rest)
        # the folder is per call; "." makes the output the same as the host sandbox's
        stdout, stderr = (t.replace(CALL_FOLDER + "/", "./").replace(CALL_FOLDER, ".") for t in (stdout, stderr))
        return ExecResult(
            exit_code=exit_code,
            stdout=stdout,
            stderr=stderr,
            timed_out=timed_out,
            duration=duration,
            stdout_bytes=out_size,
            stderr_bytes=err_size,
            text_repaired=repaired,
        )


class StreamReader:
    """Reads an exec's output stream to its end in a thread of its own (at most ``cap`` bytes kept); ``done`` is
    set at the end."""

    def __init__(self, stream: Any, cap: int) -> None:
        self.data = bytearray()
        self.done = threading.Event()
        self.cap = cap
        threading.Thread(target=self.read, args=(stream,), name="agentbench-tool-output", daemon=True).start()

    def read(self, stream: Any) -> None:
        try:
            for chunk in stream:
                if len(self.data) < self.cap:
                    self.data += chunk[: self.cap - len(self.data)]
        except Exception:  # (the container went away under the stream: what was read is all there is)
            pass
        finally:
            self.done.set()


class FreshCalls:
    """A factory's tool calls, each in a container of its own (see the section's comment)."""

    def __init__(self, factory: DockerFactory) -> None:
        self.factory = factory
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="agentbench-tool-containers")
        self.spare: Future[Container] | None = None
        self.removals: list[tuple[Container, Future[None]]] = []
        self._streams: DockerClient | None = None

    def streams(self) -> DockerClient:
        """A client of the factory's engine for reading a call's output: its socket never times out (the
        client's default gives up after 60 s of silence, and a call may be silent for longer)."""
        with self.lock:
            if self._streams is None:
                self.factory.client()  # (reachable, and the stale containers swept)
                self._streams = _docker().from_env(timeout=CALL_STREAM_TIMEOUT)
            return self._streams

    def run_python(self, source: str, timeout: float) -> dict[str, Any]:
        timeout = check_timeout(timeout)
        self.wait_for_removals()
        container = self.take()
        try:
            result = CallContainer(self.factory.client(), container).run_source(source, timeout, self.streams())
        except BaseException:
            with contextlib.suppress(Exception):  # (still listed for the exit hooks if this fails)
                _remove_container(container)
            raise
        self.retire(container)
        return python_result(result)

    def take(self) -> Container:
        """An unused container (the spare, else a new one); a new spare is started for the next call."""
        with self.lock:
            spare, self.spare = self.spare, None
        container = None
        if spare is not None:
            try:
                container = spare.result()
            except Exception:  # (a spare that failed to start: try once more now, with its error if it fails)
                container = None
        if container is None:
            container = start_call_container(self.factory)
        with self.lock:
            if self.spare is None:
                self.spare = self.pool.submit(start_call_container, self.factory)
        return container

    def retire(self, container: Container) -> None:
        with self.lock:
            self.removals.append((container, self.pool.submit(_remove_container, container)))

    def wait_for_removals(self) -> None:
        """Until every earlier call's container is gone (one whose removal failed is removed again here; if that
        fails too, EnvError, and the next call tries again)."""
        with self.lock:
            pending, self.removals = self.removals, []
        for number, (container, future) in enumerate(pending):
            try:
                future.result()
            except Exception:
                try:
                    _remove_container(container)
                except Exception as exc:
                    with self.lock:
                        self.removals.extend((c, f) for c, f in pending[number:])
                    raise EnvError(f"the container of an earlier tool call could not be removed: {exc}") from None

    def close(self) -> None:
        with self.lock:
            spare, self.spare = self.spare, None
        if spare is not None:
            try:
                _remove_container(spare.result())
            except Exception:  # (never started: nothing to remove)
                pass
        try:
            self.wait_for_removals()
        finally:
            self.pool.shutdown(wait=True)


def proxy_socket() -> tuple[str, socket.socket]:
    """A new folder (0700) of this machine holding a listening unix socket, for an item's metering proxy; EnvError
    when the engine is elsewhere (DOCKER_HOST), where the folder cannot be bound into the container."""
    host = os.environ.get("DOCKER_HOST", "")
    if host and not host.startswith("unix://"):
        raise EnvError(
            f"an external agent (--bench-agent) in Docker needs the engine on this machine, which binds its metering "
            f"proxy's socket into the container; DOCKER_HOST is {host}: unset it, or use --bench-env=host"
        )
    folder = tempfile.mkdtemp(prefix="agentbench-proxy-")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(os.path.join(folder, PROXY_SOCKET))
        listener.listen(64)
    except OSError:
        listener.close()
        remove_tree(Path(folder))
        raise
    return folder, listener


class DockerFactory(EnvFactory):
    """The ``bench_env`` value for ``--bench-env=docker``; connects to the engine on first use."""

    kind = "docker"

    def __init__(
        self,
        *,
        image: str = DEFAULT_IMAGE,
        network: str = DEFAULT_NETWORK,
        gpus: str | None = None,
        keep_workspaces: bool = False,
        memory: int | str | None = DEFAULT_MEMORY,
        cpus: float | None = DEFAULT_CPUS,
        pids: int | None = DEFAULT_PIDS,
        lifetime: float = DEFAULT_LIFETIME,
        copy_cap: int = DEFAULT_COPY_OUT_CAP,
    ) -> None:
        self.image, self.network, self.gpus = image, network, gpus
        self.copy_cap = copy_cap
        self.keep_workspaces = keep_workspaces
        self.memory, self.cpus, self.pids, self.lifetime = memory, cpus, pids, lifetime
        self._client: DockerClient | None = None
        self._image_ready = False
        self._lock = threading.Lock()
        self._calls: FreshCalls | None = None

    def client(self) -> DockerClient:
        with self._lock:
            if self._client is None:
                docker = _docker()
                where = os.environ.get("DOCKER_HOST") or "the local socket (set DOCKER_HOST for another engine)"
                try:
                    client = docker.from_env()
                    client.ping()
                except Exception as exc:
                    raise EnvError(
                        f"cannot reach a Docker engine at {where}: {exc}. Start dockerd (or Docker "
                        "Desktop), fix DOCKER_HOST, or use --bench-env=host"
                    ) from None
                _install_exit_hooks()
                remove_stale_containers(client)
                self._client = client
            return self._client

    def ensure_image(self) -> None:
        """EnvError unless the engine is reachable and has the image or can pull it (a check before any item)."""
        self._ensure_image(self.client())

    def _ensure_image(self, client: DockerClient) -> None:
        if self._image_ready:
            return
        docker = _docker()
        try:
            client.images.get(self.image)
        except docker.errors.ImageNotFound:
            if offline():  # downloads are off: an image is a download too
                raise EnvError(
                    f"docker image {self.image!r} is not on the engine and pulls are off (${OFFLINE_ENV}): load it "
                    f"(`docker load -i IMAGE.tar`) or build it (`docker build -t {self.image} .`) on the engine, or "
                    "choose one it has with --bench-set docker_image"
                ) from None
            try:
                client.images.pull(self.image)
            except docker.errors.APIError as exc:
                raise EnvError(
                    f"docker image {self.image!r} is not on the engine and pulling it failed: {exc}. "
                    "Pull or build it there, or choose another with --bench-set docker_image"
                ) from None
        self._image_ready = True

    def _device_requests(self, needs_gpu: bool) -> list[Any]:
        if not needs_gpu or not self.gpus:  # (start refuses an item that needs a GPU without --bench-set gpus)
            return []
        types = _docker().types
        if self.gpus == "all":
            return [types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
        return [
            types.DeviceRequest(
                device_ids=[g.strip() for g in self.gpus.split(",") if g.strip()], capabilities=[["gpu"]]
            )
        ]

    def start(
        self,
        workspace: Path,
        *,
        needs_gpu: bool = False,
        name: str = "",
        lifetime: float | None = None,
        workdir: str | None = None,
        nested_docker: bool = False,
        kind: str = AGENT_COMMAND_DOCKER,
        blocked_hosts: Sequence[str] = (),
        image: str | None = None,
    ) -> DockerEnvironment:
        """``workdir``: where the workspace goes in the container (default /capsule). ``nested_docker``: a
        privileged container running its own dockerd (see ``start_nested_daemon``); not isolated. ``kind``: the
        kind of run it is for (``sandbox.containment.KINDS``), which gives its containment options.
        ``blocked_hosts``: names the container's /etc/hosts maps to ``BLOCKED_ADDRESSES`` (name resolution
        only: a root agent may edit the file, and an address found otherwise is not stopped). ``image``: another
        image than the factory's (an external agent's layer over it). An external agent's container
        (``EXTERNAL_AGENT_DOCKER``) gets its metering proxy's socket (``loopback_listener``) and runs its commands
        as the kind's user."""
        workdir = workdir or WORKDIR
        image = image or self.image
        if needs_gpu and not self.gpus:
            raise EnvSkip(
                "needs a GPU and --bench-set gpus is not set (pass --bench-set=gpus=all or device ids to run it)"
            )
        workspace = Path(workspace)
        if not workspace.is_dir():
            raise EnvError(f"workspace {workspace} is not a folder; prepare it before starting the environment")
        client = self.client()
        self._ensure_image(client)
        docker = _docker()
        proxy = proxy_socket() if kind == EXTERNAL_AGENT_DOCKER else None
        labels = {
            LABEL: "1",
            f"{LABEL}.host": socket.gethostname(),
            f"{LABEL}.pid": str(os.getpid()),
            f"{LABEL}.pidns": pid_namespace(),
            f"{LABEL}.name": name[:200],
        }
        kwargs: dict[str, Any] = {
            # what the container's runs can see and keep
            **container_options(kind, network=self.network, proxy_folder=proxy[0] if proxy else None),
            "labels": labels,
            "working_dir": workdir,
            "init": True,
            "auto_remove": True,
            "detach": True,
        }
        kwargs.update(self.resource_limits())
        requests = self._device_requests(needs_gpu)
        if requests:
            kwargs["device_requests"] = requests
        if nested_docker:
            kwargs["privileged"] = True
        if blocked_hosts and not self.network.startswith("container:"):  # (that mode shares another's /etc/hosts)
            kwargs["extra_hosts"] = [f"{n}:{a}" for n in check_host_names(blocked_hosts) for a in BLOCKED_ADDRESSES]
        seconds = int(lifetime or self.lifetime)
        reduced = False  # nested Docker with every capability the engine has instead of --privileged
        try:
            try:
                container = client.containers.run(image, ["sleep", str(seconds)], **kwargs)
            except docker.errors.APIError as exc:
                self._remove_unstarted(client)
                why = str(getattr(exc, "explanation", None) or exc)
                if not (nested_docker and "apply caps" in why):
                    raise
                # the engine cannot grant every capability (its own bounding set lacks some): the same
                # privileges minus those, with the cgroups made writable inside before dockerd starts
                kwargs.pop("privileged")
                kwargs.update(cap_add=engine_capabilities(), security_opt=list(NESTED_SECURITY))
                reduced = True
                container = client.containers.run(image, ["sleep", str(seconds)], **kwargs)
        except docker.errors.APIError as exc:
            self._remove_unstarted(client)
            if proxy is not None:
                proxy[1].close()
                remove_tree(Path(proxy[0]))
            if nested_docker:
                raise EnvError(
                    f"the Docker engine refused a privileged container from {self.image!r}, which "
                    f"--bench-set=docker_dind=true needs for the nested Docker daemon: "
                    f"{getattr(exc, 'explanation', None) or exc}"
                ) from None
            raise EnvError(f"starting a container from {image!r} failed: {exc}") from None
        with _LIVE_LOCK:
            _LIVE[_id(container)] = container
        env = DockerEnvironment(
            client,
            container,
            workspace,
            keep_workspace=self.keep_workspaces,
            name=name,
            workdir=workdir,
            copy_cap=self.copy_cap,
        )
        env.proxy = proxy
        try:
            env.put_workspace()
            user = command_user(kind)
            if user is not None:
                env.give_to_user(user)
            if nested_docker:
                start_nested_daemon(env, writable_cgroups=reduced)
        except BaseException:
            env.stop()
            raise
        return env

    @staticmethod
    def _remove_unstarted(client: DockerClient) -> None:
        """A container the engine created but could not start is not removed by run(): remove it here."""
        for left in client.containers.list(
            all=True, filters={"label": [f"{LABEL}.pid={os.getpid()}"], "status": "created"}, ignore_removed=True
        ):
            _remove_container(left)

    def run_python(self, source: str, timeout: float) -> dict[str, Any]:
        """A tool script in Docker: a fresh container per call, as CALL_USER (see ``FreshCalls``)."""
        with self._lock:
            if self._calls is None:
                self._calls = FreshCalls(self)
            calls = self._calls
        return calls.run_python(source, timeout)

    def resource_limits(self) -> dict[str, Any]:
        """The ``containers.run`` keywords of the memory, CPU and process limits every container gets."""
        limits: dict[str, Any] = {}
        if self.memory:
            limits["mem_limit"] = self.memory
        if self.cpus:
            limits["nano_cpus"] = int(float(self.cpus) * 1e9)
        if self.pids:
            limits["pids_limit"] = int(self.pids)
        return limits

    def describe_isolation(self) -> str:
        network = "no network" if self.network == "none" else f"network {self.network}"
        return f"docker container ({network}; the engine's isolation)"

    def close(self) -> None:
        with self._lock:
            calls, self._calls = self._calls, None
        if calls is not None:
            calls.close()


# ---- image layers: something installed over the factory's image once, kept on the engine under a tag ---------


class LayerBuild:
    """A build of an image layer over the factory's image: a container of it with no network, in which files of
    this machine are put and scripts run as root, committed as ``tag`` (``repository:tag``). What it installs is
    fetched beforehand on this machine (its registries, certificates and proxies), so no build needs the engine
    to reach anything. Used as a context manager: the container is removed on every way out."""

    def __init__(self, factory: DockerFactory, tag: str) -> None:
        self.factory, self.tag = factory, tag
        self.container: Container | None = None

    def __enter__(self) -> LayerBuild:
        client = self.factory.client()
        self.factory._ensure_image(client)
        labels = {
            LABEL: "1",
            f"{LABEL}.host": socket.gethostname(),
            f"{LABEL}.pid": str(os.getpid()),
            f"{LABEL}.pidns": pid_namespace(),
            f"{LABEL}.name": f"layer {self.tag}"[:200],
        }
        try:
            container = client.containers.run(
                self.factory.image,
                ["sleep", str(int(self.factory.lifetime))],
                network_mode="none",
                user="0",
                labels=labels,
                init=True,
                detach=True,
            )
        except _docker().errors.APIError as exc:
            self.factory._remove_unstarted(client)
            raise EnvError(
                f"starting a container from {self.factory.image!r} to build {self.tag} failed: {exc}"
            ) from None
        with _LIVE_LOCK:
            _LIVE[_id(container)] = container
        self.container = container
        return self

    def __exit__(self, *exc: Any) -> None:
        container, self.container = self.container, None
        if container is not None:
            try:
                _remove_container(container)
            except Exception:  # (a slow removal of a large build; the engine ends it, the stale sweep else)
                pass

    def _running(self) -> Container:
        if self.container is None:
            raise EnvError(f"the build of {self.tag} is not running")
        return self.container

    def run(self, script: str) -> tuple[int | None, str]:
        """``script`` with bash as root in /: its exit code and its output (the last 4000 characters)."""
        made = self._running().exec_run(["/bin/sh", "-c", script], user="0", workdir="/", demux=False)
        return made.exit_code, _output_bytes(made).decode(errors="replace")[-4000:]

    def put_folder(self, source: Path, target: str) -> None:
        """The folder ``source`` of this machine as ``target`` in the container (made; root's, modes kept)."""
        container = self._running()
        code, said = self.run(f"mkdir -p {shlex.quote(target)}")
        if code != 0:
            raise EnvError(f"cannot make {target} in the build of {self.tag}: {said}")
        with tempfile.TemporaryFile(prefix="agentbench-layer-") as fh:
            with tarfile.open(fileobj=fh, mode="w") as tar:
                for child in sorted(Path(source).iterdir()):
                    tar.add(child, arcname=child.name, filter=_as_root)
            fh.seek(0)
            if not container.put_archive(target, fh):
                raise EnvError(f"copying {source} into the build of {self.tag} failed")

    def commit(self, labels: dict[str, str]) -> str:
        """The container as the image ``tag`` (the base image's command kept, ``labels`` added); its id."""
        container = self._running()
        client = self.factory.client()
        base = client.images.get(self.factory.image)
        repository, _, tag = self.tag.rpartition(":")
        kept = base.attrs.get("Config") or {}
        config = {
            "Labels": {**labels, f"{LABEL}.pid": "", f"{LABEL}.name": ""},
            "Cmd": kept.get("Cmd"),
            "User": kept.get("User") or "",  # (the build ran as root)
        }
        image = container.commit(repository=repository, tag=tag, conf=config)
        return str(image.id)


def _as_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def layer_image(factory: DockerFactory, tag: str) -> Any:
    """The image ``tag`` on the factory's engine, or None."""
    try:
        return factory.client().images.get(tag)
    except _docker().errors.ImageNotFound:
        return None
