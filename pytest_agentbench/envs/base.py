"""The environment interface: where an agent's commands and a tool's code run.

An *environment factory* is the value of the ``bench_env`` fixture (one per pytest process). Its
``start(workspace, needs_gpu=..., name=...)`` returns an *environment* that works on a prepared
workspace folder: the host environment works on that folder itself, the Docker environment copies it
into a container. ``start(..., workdir=PATH)`` asks for the workspace at ``PATH`` inside the
environment (the container's folder; the isolated host environment binds the item's folder there in
its sandbox, each item in its own mount namespace); the environment's ``workdir`` says where it
really is. The agent's commands start there, ``read_file``/``write_file`` take paths relative to it
(or absolute inside the environment), ``copy_out`` brings the workspace back, and ``stop`` ends
everything (the workspace folder too, unless ``--bench-set=keep_workspaces=true``).

A new environment subclasses ``Environment`` and ``EnvFactory``; a user can also override ``bench_env``
with any object that has the factory's ``start``/``run_python``/``close`` and returns something with
the ``Environment`` methods.
"""

from __future__ import annotations

import errno
import os
import posixpath
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.trees import remove_tree
from ..sandbox.isolation import under
from ..sandbox.result import ExecResult
from .copyout import CopyOut
from .defaults import DEFAULT_COPY_OUT_CAP

DEFAULT_OUTPUT_LIMIT = 16 * 1024  # bytes of a stream kept for the caller: half head, half tail
DEFAULT_OUTPUT_CAP = 1 << 30  # a command's files (its output included) may not grow past this (RLIMIT_FSIZE)
MAX_FILE_READ = 64 << 20  # read_file refuses bigger files: they are never meant for a model
# where ``start(..., blocked_hosts=)`` points a name in the environment's /etc/hosts: the unspecified addresses,
# which lead to no machine outside the environment (a connection goes to its own loopback, or fails)
BLOCKED_ADDRESSES = ("0.0.0.0", "::")


HOST_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}))*")


def check_host_names(names: Sequence[str]) -> tuple[str, ...]:
    """``names`` when each is a plain DNS name (they become /etc/hosts lines); ValueError naming the first that
    is not."""
    for name in names:
        if not isinstance(name, str) or not HOST_NAME.fullmatch(name):
            raise ValueError(f"cannot block host name {name!r}: not a DNS name (letters, digits, '-' and '.')")
    return tuple(names)


def blocked_hosts_lines(names: Sequence[str]) -> str:
    """The /etc/hosts lines that make ``names`` resolve to ``BLOCKED_ADDRESSES`` only."""
    return "".join(f"{address}\t{name}\n" for name in check_host_names(names) for address in BLOCKED_ADDRESSES)


class EnvError(Exception):
    """The environment could not be started or used (no engine, a missing image, ...): an env_error.

    ``unplaced``: what this host lacked that another may have (``"gpu"``); the record says so and
    ``--bench-resume`` runs the item again (on a run with such a host)."""

    def __init__(self, *args: object, unplaced: str = "") -> None:
        super().__init__(*args)
        self.unplaced = unplaced


class EnvSkip(Exception):
    """The item cannot run in this environment by configuration (a GPU capsule without --bench-set gpus)."""


def python_result(result: ExecResult) -> dict[str, Any]:
    """A tool run as the model sees it: the same keys and statuses on every environment."""
    status = "timeout" if result.timed_out else ("ok" if result.exit_code == 0 else "error")
    out = {"status": status, "exit_code": result.exit_code, "stdout": result.stdout, "stderr": result.stderr}
    if result.text_repaired:  # undecodable bytes of the output, shown as U+FFFD (counted in the item's record)
        out["text_repaired"] = result.text_repaired
    return out


class Environment(ABC):
    kind: str = "?"
    workdir: str = ""  # where commands start, as the environment sees it
    workdir_note: str = ""  # why ``workdir`` is not the one ``start`` asked for (empty when it is)

    def __init__(
        self, workspace: Path, *, keep_workspace: bool = False, name: str = "", copy_cap: int = DEFAULT_COPY_OUT_CAP
    ) -> None:
        self.workspace = Path(workspace)
        self.keep_workspace = keep_workspace
        self.name = name
        self.copy_cap = copy_cap  # most bytes copy_out brings home (apparent size of regular files)
        self.copied: CopyOut | None = None  # what the last copy_out brought and left out
        self.stopped = False
        self.released = False

    @abstractmethod
    def run(self, command: str, timeout: float) -> ExecResult:
        """Run ``command`` with bash in the workspace root; never raises for the command's own failure."""

    @abstractmethod
    def read_file(self, path: str) -> bytes:
        """The bytes of ``path`` (relative to the workspace root, or absolute in the environment)."""

    @abstractmethod
    def write_file(self, path: str, data: bytes | str) -> None:
        """Create or replace ``path`` (parents created)."""

    @abstractmethod
    def copy_out(self, dest_dir: Path) -> Path:
        """Make ``dest_dir`` hold the environment's workspace, within ``copy_cap``; returns ``dest_dir``.

        With the workspace the environment was started from as ``dest_dir`` this refreshes it (the host
        environment already works there, so it only removes what a copy would leave out). ``copied`` then says
        what came and what was left out (``envs.copyout``: special files, links out of the tree or in a loop,
        files past the cap); bad entries never raise."""

    @abstractmethod
    def run_python(self, source: str, timeout: float) -> dict[str, Any]:
        """Run ``source`` as ``main.py`` in a fresh folder; ``{status, exit_code, stdout, stderr}``."""

    def _release(self) -> None:
        """Kill what is running and free the environment's resources (subclasses)."""

    def end_processes(self) -> None:
        """End every process of the environment (and free its resources), keeping the workspace's files: what
        is read from them afterwards cannot change under the reader. Idempotent."""
        if self.released:
            return
        self.released = True
        self._release()

    def end_commands(self) -> None:
        """End every process the environment's commands started, keeping what reads the workspace afterwards
        can use (an environment whose commands run as another user keeps more: see Docker's). Idempotent."""
        self.end_processes()

    def stop(self) -> None:
        """End every process of the environment and remove the workspace unless it is kept. Idempotent."""
        if self.stopped:
            return
        self.stopped = True
        try:
            self.end_processes()
        finally:
            if not self.keep_workspace:
                remove_tree(self.workspace)

    def __enter__(self) -> Environment:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


@dataclass(frozen=True)
class PathView:
    """How an environment's own paths map onto this machine, for reading and writing its files from outside.

    ``mounts``: (path in the environment, host folder, writable) for every folder mounted elsewhere;
    ``unreachable``: environment paths whose host counterpart must not be read from outside (masked in
    the environment, or the environment's own kernel file systems); ``visible``: the host folders the
    environment sees at their own paths, read-only (None: all of this machine). Any other absolute path
    under ``visible`` is this machine's own path, seen read-only; the rest does not exist there."""

    workdir: str
    mounts: tuple[tuple[str, Path, bool], ...]
    unreachable: tuple[str, ...] = ()
    visible: tuple[str, ...] | None = None

    def mount_of(self, env_path: str) -> tuple[str, Path, bool] | None:
        found = [m for m in self.mounts if under(env_path, [m[0]])]
        return max(found, key=lambda m: len(m[0])) if found else None

    def host(self, env_path: str, shown: str) -> Path:
        """The host path of the (symlink-free, normalized) ``env_path``; ``shown`` names it in errors."""
        mount = self.mount_of(env_path)
        if mount is not None:
            inner, folder, _ = mount
            rest = env_path[len(inner) :].lstrip("/")
            return folder / rest if rest else folder
        if under(env_path, self.unreachable):
            raise PermissionError(
                f"{shown!r} cannot be read from outside the environment; copy it into "
                f"{self.workdir} with a command first"
            )
        if self.visible is not None and not under(env_path, self.visible):
            raise PermissionError(f"{shown!r} is not in the environment")
        return Path(env_path)

    def from_a_mount(self, host_path: Path) -> bool:
        """Whether ``host_path`` (as ``host`` returned it) lies in one of the environment's own folders."""
        return under(str(host_path), [str(folder) for _, folder, _ in self.mounts])

    def writable(self, env_path: str) -> bool:
        mount = self.mount_of(env_path)
        return mount is not None and mount[2]


MAX_LINK_HOPS = 40  # as the kernel's ELOOP limit


def resolve_inside(root: Path, path: str, view: PathView | None = None, *, write: bool = False) -> Path:
    """The host path of ``path`` as the environment names it (relative paths from its working folder).

    Without ``view`` the environment sees this machine's paths: relative paths are taken from ``root``,
    absolute ones are used as they are. With a ``view`` the path is resolved as inside the environment:
    symbolic links are followed in the environment's namespace (an absolute link target is an
    environment path, so a link the agent planted cannot lead the controller to a host file), then
    mapped to the host; ``write`` refuses paths outside the environment's writable folders."""
    if view is None:
        given = Path(path)
        return given if given.is_absolute() else root / given
    text = str(path)
    pending = [p for p in posixpath.join(view.workdir, text).split("/") if p not in ("", ".")]
    resolved, hops = "/", 0
    while pending:
        name = pending.pop(0)
        if name == "..":
            resolved = posixpath.dirname(resolved)
            continue
        candidate = posixpath.join(resolved, name)
        try:
            host = view.host(candidate, text)
        except PermissionError:  # masked: an empty folder in the environment (or the way to a mount in it)
            resolved = candidate
            continue
        if host.is_symlink():
            hops += 1
            if hops > MAX_LINK_HOPS:
                raise OSError(errno.ELOOP, f"too many symbolic links resolving {text!r} in the environment")
            target = os.readlink(host)
            pending = [p for p in target.split("/") if p not in ("", ".")] + pending
            if target.startswith("/"):
                resolved = "/"
            continue
        resolved = candidate
    if write and not view.writable(resolved):
        raise PermissionError(f"{text!r} is not in a writable folder of the environment ({view.workdir} is)")
    return view.host(resolved, text)


def check_timeout(timeout: float) -> float:
    try:
        value = float(timeout)
    except (TypeError, ValueError):
        raise ValueError(f"command timeout must be a number of seconds, got {timeout!r}") from None
    if not value > 0:
        raise ValueError(f"command timeout must be positive, got {timeout!r}")
    return value


class EnvFactory(ABC):
    """The ``bench_env`` value: starts one environment per item, runs tool scripts, cleans up at the end."""

    kind: str = "?"

    @abstractmethod
    def start(
        self, workspace: Path, *, needs_gpu: bool = False, name: str = "", workdir: str | None = None
    ) -> Environment:
        """An environment working on ``workspace``; ``EnvSkip`` when it cannot run such an item.
        ``workdir``: the absolute path the workspace should have inside the environment (None: the
        environment's own choice); ``Environment.workdir`` says where it really is."""

    @abstractmethod
    def run_python(self, source: str, timeout: float) -> dict[str, Any]:
        """Run one tool script (a model's code) as ``main.py`` in a fresh folder:
        ``{status: ok|error|timeout, exit_code, stdout, stderr}``, the same on every environment."""

    def describe_isolation(self) -> str:
        """How the environment keeps the agent's commands from the controller, for the run's header and
        reports: e.g. ``bwrap (...)``, ``docker container`` or ``none (why)``."""
        return "none (this environment does not say)"

    def close(self) -> None:
        """Release what the factory keeps between items (e.g. a container started ahead for the next call)."""
