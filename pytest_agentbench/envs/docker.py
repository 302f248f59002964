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
"""

from __future__ import annotations

import atexit
import io
import os
import shutil
import signal
import socket
import tarfile
import tempfile
import threading
import time
from pathlib import Path, PurePosixPath
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Any

from ..core.io import trim_parts
from ..core.text import decode
from ..sandbox.jail import namespace_of
from ..sandbox.result import ExecResult
from .base import (
    DEFAULT_OUTPUT_CAP,
    DEFAULT_OUTPUT_LIMIT,
    MAX_FILE_READ,
    EnvError,
    EnvFactory,
    Environment,
    EnvSkip,
    check_timeout,
    python_result,
)

DEFAULT_IMAGE = "python:3.12-bookworm"
DEFAULT_NETWORK = "bridge"
DEFAULT_MEMORY = 8 << 30  # bytes (the engine also takes "8g")
DEFAULT_CPUS = 2.0
DEFAULT_PIDS = 1024
DEFAULT_LIFETIME = 24 * 3600.0  # seconds a container may live if nobody removes it (a killed worker)
WORKDIR = "/capsule"
PRIVATE = "/tmp/.agentbench"  # command scripts and output files, outside the workspace
LABEL = "agentbench"
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
    for container in client.containers.list(all=True, filters=filters):
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
    ) -> None:
        super().__init__(workspace, keep_workspace=keep_workspace, name=name)
        self.workdir = workdir  # the workspace inside the container (CORE-Bench: --bench-workspace-root)
        self.client = client
        self.container = container
        self.output_limit = output_limit
        self.output_cap = output_cap
        self.count = 0

    # ---------------------------------------------------------------- plumbing

    def _check(self) -> None:
        if self.stopped:
            raise EnvError(f"environment {self.name or self.container.short_id} is stopped")

    def _exec(self, argv: list[str], *, environment: dict[str, str] | None = None) -> tuple[int | None, bytes]:
        result = self.container.exec_run(argv, workdir=self.workdir, environment=environment, demux=False)
        return result.exit_code, _output_bytes(result)

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
            self.container.id, ["/bin/bash", "-c", outer], workdir=self.workdir, environment=environment
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
        limit, half = self.output_limit, self.output_limit // 2
        script = (
            f"so=$(wc -c < {base}.out 2>/dev/null || echo 0); se=$(wc -c < {base}.err 2>/dev/null || echo 0); "
            f'echo "$so $se"; '
            f"for f in {base}.out {base}.err; do s=$(wc -c < $f 2>/dev/null || echo 0); "
            f'if [ "$s" -le {limit} ]; then cat $f 2>/dev/null; else head -c {half} $f; tail -c {half} $f; fi; done; '
            f"rm -f {base}.out {base}.err {base}.sh {base}.pid"
        )
        _, output = self._exec(["/bin/sh", "-c", script])
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
        """Stream ``/capsule`` out into ``dest_dir`` (emptied first when it is the start workspace).

        The archive comes from untrusted code: members are extracted with tarfile's ``data`` filter,
        which refuses absolute paths, ``..`` and links leading outside; such members are skipped."""
        self._check()
        dest = Path(dest_dir)
        if dest.exists() and dest.resolve() == self.workspace.resolve():
            for child in dest.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)
        dest.mkdir(parents=True, exist_ok=True)
        stream, _ = self.container.get_archive(self.workdir)
        self.skipped_members: list[str] = []
        with tempfile.TemporaryFile(prefix="agentbench-get-") as fh:
            for chunk in stream:
                fh.write(chunk)
            fh.seek(0)
            with tarfile.open(fileobj=fh) as tar:
                top = PurePosixPath(self.workdir).name
                for member in tar:
                    parts = PurePosixPath(member.name).parts
                    if not parts or parts[0] != top or len(parts) == 1:
                        continue
                    member.name = str(PurePosixPath(*parts[1:]))
                    try:
                        tar.extract(member, dest, filter="data")
                    except (tarfile.FilterError, OSError) as exc:
                        self.skipped_members.append(f"{member.name}: {exc}")
        return dest

    # ---------------------------------------------------------------- the end

    def _release(self) -> None:
        _remove_container(self.container)


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
            f"--bench-docker-dind: the image has no dockerd/docker client (install docker.io in it); "
            f"container {env.container.short_id}"
        )
    if writable_cgroups:
        code, output = env._exec(["/bin/bash", "-c", WRITABLE_CGROUPS])
        if code != 0:
            raise EnvError(
                f"--bench-docker-dind: could not make the cgroups writable in container "
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
        f"--bench-docker-dind: the nested Docker daemon did not answer within {wait:g} s (does the engine "
        f"allow privileged containers?); its log: {log.decode(errors='replace').strip()[-1500:]}"
    )


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
    ) -> None:
        self.image, self.network, self.gpus = image, network, gpus
        self.keep_workspaces = keep_workspaces
        self.memory, self.cpus, self.pids, self.lifetime = memory, cpus, pids, lifetime
        self._client: DockerClient | None = None
        self._image_ready = False
        self._lock = threading.Lock()
        self._python_env: DockerEnvironment | None = None

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

    def _ensure_image(self, client: DockerClient) -> None:
        if self._image_ready:
            return
        docker = _docker()
        try:
            client.images.get(self.image)
        except docker.errors.ImageNotFound:
            try:
                client.images.pull(self.image)
            except docker.errors.APIError as exc:
                raise EnvError(
                    f"docker image {self.image!r} is not on the engine and pulling it failed: {exc}. "
                    "Pull or build it there, or choose another with --bench-docker-image"
                ) from None
        self._image_ready = True

    def _device_requests(self, needs_gpu: bool) -> list[Any]:
        if not needs_gpu or not self.gpus:  # (start refuses an item that needs a GPU without --bench-gpus)
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
    ) -> DockerEnvironment:
        """``workdir``: where the workspace goes in the container (default /capsule). ``nested_docker``: a
        privileged container running its own dockerd (see ``start_nested_daemon``); not isolated."""
        workdir = workdir or WORKDIR
        if needs_gpu and not self.gpus:
            raise EnvSkip("needs a GPU and --bench-gpus is not set (pass --bench-gpus=all or device ids to run it)")
        workspace = Path(workspace)
        if not workspace.is_dir():
            raise EnvError(f"workspace {workspace} is not a folder; prepare it before starting the environment")
        client = self.client()
        self._ensure_image(client)
        docker = _docker()
        labels = {
            LABEL: "1",
            f"{LABEL}.host": socket.gethostname(),
            f"{LABEL}.pid": str(os.getpid()),
            f"{LABEL}.pidns": pid_namespace(),
            f"{LABEL}.name": name[:200],
        }
        kwargs: dict[str, Any] = {
            "network_mode": self.network,
            "labels": labels,
            "working_dir": workdir,
            "init": True,
            "auto_remove": True,
            "detach": True,
        }
        if self.memory:
            kwargs["mem_limit"] = self.memory
        if self.cpus:
            kwargs["nano_cpus"] = int(float(self.cpus) * 1e9)
        if self.pids:
            kwargs["pids_limit"] = int(self.pids)
        requests = self._device_requests(needs_gpu)
        if requests:
            kwargs["device_requests"] = requests
        if nested_docker:
            kwargs["privileged"] = True
        seconds = int(lifetime or self.lifetime)
        reduced = False  # nested Docker with every capability the engine has instead of --privileged
        try:
            try:
                container = client.containers.run(self.image, ["sleep", str(seconds)], **kwargs)
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
                container = client.containers.run(self.image, ["sleep", str(seconds)], **kwargs)
        except docker.errors.APIError as exc:
            self._remove_unstarted(client)
            if nested_docker:
                raise EnvError(
                    f"the Docker engine refused a privileged container from {self.image!r}, which "
                    f"--bench-docker-dind needs for the nested Docker daemon: "
                    f"{getattr(exc, 'explanation', None) or exc}"
                ) from None
            raise EnvError(f"starting a container from {self.image!r} failed: {exc}") from None
        with _LIVE_LOCK:
            _LIVE[_id(container)] = container
        env = DockerEnvironment(
            client, container, workspace, keep_workspace=self.keep_workspaces, name=name, workdir=workdir
        )
        try:
            env.put_workspace()
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
            all=True, filters={"label": [f"{LABEL}.pid={os.getpid()}"], "status": "created"}
        ):
            _remove_container(left)

    def run_python(self, source: str, timeout: float) -> dict[str, Any]:
        """A tool script in Docker: one long-lived container per process, a fresh folder per run."""
        if self._python_env is None or self._python_env.stopped:
            self._python_env = self.start(Path(tempfile.mkdtemp(prefix="agentbench-python-")), name="python")
        return self._python_env.run_python(source, timeout)

    def describe_isolation(self) -> str:
        network = "no network" if self.network == "none" else f"network {self.network}"
        return f"docker container ({network}; the engine's isolation)"

    def close(self) -> None:
        if self._python_env is not None:
            self._python_env.stop()
            self._python_env = None
