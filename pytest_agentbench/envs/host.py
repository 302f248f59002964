"""The host environment: commands run with bash in the workspace folder on this machine.

Every command runs in its own process group under rlimits (address space, CPU time, file size)
and, where ``/sys/fs/cgroup/pids`` is writable, in the environment's pids cgroup, which caps the
number of processes and lists every one of them, so ``stop`` kills background jobs too. A command
past its timeout is killed with its whole group and its descendants. Output goes to files outside
the workspace and only its head and tail are read back.

Where the machine can isolate (``sandbox.isolation.probe()``), the environment is also a sandbox
against the agent: all its commands share one PID namespace (made by a small bwrap "holder" when
the environment starts, so background jobs live on between commands and die at ``stop``), and each
command runs in a bwrap sandbox joined to it, as uid 65534 without capabilities, with a read-only
view of the file system except the workspace and the environment's private home and /tmp, without
sight of the run's private folders (data dir, cache, reports) or of any process outside the
environment. The environment has its own network namespace (``--bench-set host_network``): ``user`` (default)
gives outbound access through a user-mode network stack (slirp4netns, its mapping of the gateway to this
machine's loopback turned off), so agents can install packages but reach none of this machine's loopback
listeners nor its abstract unix sockets (those belong to a network namespace); ``none`` gives only the
namespace's own loopback. Started with ``workdir=PATH`` (CORE-Bench's
``--bench-set workspace_root``), the sandboxes see the item's own host folder at ``PATH`` (and only
there): each sandbox has its own mount namespace, so items running at once at the same ``PATH`` never
share a folder. Without isolation the commands run as the same user, see the whole file system and
work in the host folder itself (``workdir_note`` says that ``PATH`` was not applied);
``--bench-env=docker`` isolates too.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..core.data import secret_path
from ..core.errors import ConfigError
from ..core.trees import remove_tree
from ..sandbox.containment import AGENT_COMMAND_HOST, sandbox_argv
from ..sandbox.executors import run_python
from ..sandbox.isolation import (
    CLONE_NEWNS,
    MOUNT_RACE_TRIES,
    MS_REC,
    MS_SLAVE,
    SANDBOX_UID,
    Isolation,
    check_relocation_target,
    give_to_sandbox_user,
    mount_race,
    private_homes,
    probe,
    sandbox_visible_folders,
    under,
)
from ..sandbox.jail import ProcessJail, group_members, kill_group, kill_tree, proc_table
from ..sandbox.limits import DEFAULT_MEMORY_LIMIT, Limits, child_env, package_parent
from ..sandbox.result import ExecResult
from ..sandbox.workdir import read_output
from .base import (
    DEFAULT_OUTPUT_CAP,
    DEFAULT_OUTPUT_LIMIT,
    MAX_FILE_READ,
    EnvError,
    EnvFactory,
    Environment,
    EnvSkip,
    PathView,
    blocked_hosts_lines,
    check_timeout,
    python_result,
    resolve_inside,
)
from .copyout import copy_tree, prune_tree
from .defaults import DEFAULT_COPY_OUT_CAP, HOST_NETWORKS

DEFAULT_MEMORY = 8 << 30  # RLIMIT_AS of a command: generous, agents install and run real code
DEFAULT_PROCESSES = 1024
KERNEL_FOLDERS = ("/proc", "/sys", "/dev")  # the sandbox's own: the controller's are not what the agent saw

USER_NETWORK_STACK = "slirp4netns"
USER_NETWORK_HINT = "install it, e.g. apt-get install -y slirp4netns, or pass --bench-set=host_network=none"
SLIRP_DNS = "10.0.2.3"  # slirp4netns's resolver address in the namespace (its gateway 10.0.2.2 maps to nothing here)

# Between the plugin and bash: joins the cgroup, applies the rlimits, then becomes bash (no preexec_fn
# in a threaded pytest process); under isolation it becomes bwrap, which starts INNER in the sandbox.
LAUNCHER = r"""
import json, os, sys
spec = json.loads(sys.argv[1])
from pytest_agentbench.sandbox.limits import enter_jail
enter_jail(spec)
if spec.get("netns_fd") is not None:  # the environment's network namespace (bwrap has no option to join one)
    from pytest_agentbench.sandbox.isolation import CLONE_NEWNET, CLONE_NEWUSER, setns
    if spec.get("userns_fd") is not None:  # (a user: first its user namespace, which owns the network's)
        setns(spec["userns_fd"], CLONE_NEWUSER)
        os.close(spec["userns_fd"])
    setns(spec["netns_fd"], CLONE_NEWNET)
    os.close(spec["netns_fd"])
if spec.get("sandbox"):
    argv = spec["sandbox"] + [sys.executable, "-S", "-c", spec["inner"], json.dumps(spec)]
    os.execv(argv[0], argv)
os.chdir(spec["cwd"])
os.execve(spec["bash"], ["bash", "-c", spec["command"]], spec["env"])
"""
# Between the plugin and slirp4netns: a mount namespace of its own whose mounts take this machine's changes but
# send none back. Why: --enable-sandbox makes only "/" private before it detaches the old root, so run as root
# (in this machine's user namespace) its detaching unmounts, on this machine, every mount below a shared one:
# under Docker's /var/lib/docker, every running container's file system as the engine sees it (its archive
# API then answers 404 for a running container). Not allowed to make the namespace (not root), slirp4netns
# makes its own inside a user namespace, where those mounts arrive as slaves already: nothing to do then.
# argv: CLONE_NEWNS, the propagation flags, then slirp4netns's argv. No package import: it starts fast.
NETWORK_LAUNCHER = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(int(sys.argv[1])) == 0:
    if libc.mount(None, b"/", None, ctypes.c_ulong(int(sys.argv[2])), None) != 0:
        sys.exit("cannot make the mounts of its namespace slaves: " + os.strerror(ctypes.get_errno()))
os.execv(sys.argv[3], sys.argv[3:])
"""
# Between the plugin and a socket in the environment's network namespace: joins it (a user: its user namespace
# first, which a threaded process such as the plugin may not do), listens on its loopback and hands the socket
# back over the channel; the plugin serves it (a socket stays in the namespace it was made in).
LISTENER_LAUNCHER = r"""
import json, socket, sys
spec = json.loads(sys.argv[1])
from pytest_agentbench.sandbox.isolation import CLONE_NEWNET, CLONE_NEWUSER, setns
if spec.get("userns_fd") is not None:
    setns(spec["userns_fd"], CLONE_NEWUSER)
setns(spec["netns_fd"], CLONE_NEWNET)
listener = socket.create_server(("127.0.0.1", 0))
socket.send_fds(socket.socket(fileno=spec["channel_fd"]), [b"L"], [listener.fileno()])
"""
# In the command's bwrap sandbox: give up every privilege, then become bash.
INNER = r"""
import json, os, sys
spec = json.loads(sys.argv[1])
from pytest_agentbench.sandbox.isolation import drop_privileges
drop_privileges(spec["isolation"])
os.chdir(spec["cwd"])
os.execve(spec["bash"], ["bash", "-c", spec["command"]], spec["env"])
"""


def machine_hosts() -> str:
    """This machine's /etc/hosts (a sandbox's starts from it), ending in a newline; empty when it has none."""
    try:
        text = Path("/etc/hosts").read_text(errors="replace")
    except OSError:
        return ""
    return text if not text or text.endswith("\n") else text + "\n"


def world_readable(path: Path) -> bool:
    return bool(path.stat().st_mode & stat.S_IROTH)


def _bash() -> str:
    path = shutil.which("bash")
    if not path:
        raise EnvError("the host environment needs bash on PATH; install bash or use --bench-env=docker")
    return path


class HostEnvironment(Environment):
    kind = "host"

    def __init__(
        self,
        workspace: Path,
        *,
        keep_workspace: bool = False,
        name: str = "",
        memory: int | None = DEFAULT_MEMORY,
        processes: int | None = DEFAULT_PROCESSES,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        gpus: str | None = None,
        executor: str = "fork",
        python_memory: int | None = DEFAULT_MEMORY_LIMIT,
        isolation: Isolation | None = None,
        hidden: Sequence[str] = (),
        workdir: str | None = None,
        network: str = "user",
        copy_cap: int = DEFAULT_COPY_OUT_CAP,
        blocked_hosts: Sequence[str] = (),
        readable: Sequence[str] = (),
    ) -> None:
        """``workdir``: where the commands see the workspace (None: at its host path); applied under
        isolation only, else ``workdir_note`` says why not. ``network`` (isolated only): ``user`` or ``none``
        (see ``HOST_NETWORKS``). ``blocked_hosts`` (isolated only): names the sandboxes' /etc/hosts maps to
        ``BLOCKED_ADDRESSES``. ``readable`` (isolated only): host folders the commands see read-only at their
        own path (an external agent's install)."""
        super().__init__(workspace, keep_workspace=keep_workspace, name=name, copy_cap=copy_cap)
        if not self.workspace.is_dir():
            raise EnvError(f"workspace {self.workspace} is not a folder; prepare it before starting the environment")
        self.workspace = self.workspace.resolve()
        self.isolation = probe() if isolation is None else isolation
        self.workdir = str(self.workspace)
        relocated = bool(workdir) and self.isolation.active and workdir != self.workdir
        if relocated:
            try:
                self.workdir = check_relocation_target(str(workdir))
            except ValueError as exc:
                raise EnvError(f"cannot start the host environment with its workspace at {workdir}: {exc}") from None
        elif workdir and workdir != self.workdir:
            self.workdir_note = (
                f"{workdir} not applied: without isolation ({self.isolation.why}) the host "
                f"environment cannot remap paths, so commands ran in the item's own folder "
                f"{self.workdir}"
            )
        self.memory, self.processes = memory, processes
        self.executor, self.python_memory = executor, python_memory
        self.output_limit, self.output_cap = output_limit, output_cap
        self.bash = _bash()
        # outside the workspace: the agent must not see (or fill) its own output files
        self.private = Path(tempfile.mkdtemp(prefix="agentbench-host-"))
        for sub in ("home", "tmp", "out"):
            (self.private / sub).mkdir()
        # isolated, the private tmp folder is the sandbox's /tmp (its host path does not exist there)
        tmpdir = "/tmp" if self.isolation.active else str(self.private / "tmp")
        extra = {"HOME": str(self.private / "home"), "TMPDIR": tmpdir}
        if gpus and gpus != "all":
            extra["CUDA_VISIBLE_DEVICES"] = gpus
        self.env = child_env(extra)
        self.jail = ProcessJail(Limits(processes=processes))
        self.leaders: list[int] = []
        self.count = 0
        self.hidden = tuple(str(p) for p in hidden)
        self.holder: Holder | None = None
        self.view: PathView | None = None
        if self.isolation.active:
            self.view = self._sandbox_view(relocated)
            try:
                self.holder = Holder(
                    self.isolation,
                    workspace=self.workspace,
                    private=self.private,
                    hidden=hidden,
                    gpus=gpus,
                    workdir=self.workdir if relocated else None,
                    network=network,
                    blocked_hosts=blocked_hosts,
                    readable=readable,
                )
            except BaseException:
                self._release()
                raise

    def _sandbox_view(self, relocated: bool) -> PathView:
        """The sandbox's paths as the controller finds them (for read_file/write_file)."""
        home, tmp = self.private / "home", self.private / "tmp"
        unreachable = [
            *KERNEL_FOLDERS,
            *private_homes(),
            str(secret_path()),
            *(os.path.realpath(p) for p in self.hidden),
        ]
        if relocated:  # masked in the sandbox where it would be visible
            unreachable.append(str(self.workspace))
        return PathView(
            workdir=self.workdir,
            mounts=((self.workdir, self.workspace, True), ("/tmp", tmp, True), (str(home), home, True)),
            unreachable=tuple(unreachable),
            visible=tuple(sandbox_visible_folders()),
        )

    # ---------------------------------------------------------------- commands

    def _limits(self, timeout: float) -> Limits:
        # CPU seconds over all cores, so a parallel job is not stopped before its wall-clock timeout
        return Limits(
            timeout=timeout,
            memory=self.memory,
            cpu=timeout * (os.cpu_count() or 1),
            processes=self.processes,
            output=self.output_limit,
            output_cap=self.output_cap,
        )

    def run(self, command: str, timeout: float) -> ExecResult:
        for attempt in range(MOUNT_RACE_TRIES):
            result = self._run(command, timeout, cwd=self.workdir)
            # bwrap failed before the command started (a mount vanished under it): the command never ran
            if not (self.holder is not None and result.exit_code == 1 and mount_race(result.stderr)):
                break
            time.sleep(0.2 * (attempt + 1))
        return result

    def _run(self, command: str, timeout: float, cwd: str) -> ExecResult:
        if self.stopped:
            raise EnvError(f"environment {self.name or self.workspace} is stopped")
        timeout = check_timeout(timeout)
        self.count += 1
        out, err = self.private / "out" / f"{self.count}.out", self.private / "out" / f"{self.count}.err"
        spec: dict[str, Any] = {
            "limits": asdict(self._limits(timeout)),
            "env": self.env,
            "command": command,
            "bash": self.bash,
            "cwd": str(cwd),
            "cgroup": str(self.jail.cgroup) if self.jail.cgroup else "",
        }
        if self.holder is not None:
            spec.update(
                sandbox=self.holder.command_prefix(),
                inner=INNER,
                isolation=self.isolation.mode,
                netns_fd=self.holder.netns_fd,
                userns_fd=self.holder.userns_fd,
            )
        launcher_env = dict(self.env, PYTHONPATH=package_parent())
        started = time.monotonic()
        with open(out, "wb") as out_fh, open(err, "wb") as err_fh:
            proc = subprocess.Popen(
                [sys.executable, "-S", "-c", LAUNCHER, json.dumps(spec)],
                stdin=subprocess.DEVNULL,
                stdout=out_fh,
                stderr=err_fh,
                env=launcher_env,
                start_new_session=True,
                pass_fds=self.holder.fds if self.holder else (),
            )
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
        stdout, out_size, out_repaired = read_output(out, self.output_limit)
        stderr, err_size, err_repaired = read_output(err, self.output_limit)
        for path in (out, err):  # a background job may still write to them; unlinking is fine
            path.unlink(missing_ok=True)
        return ExecResult(
            exit_code=None if timed_out else proc.returncode,
            stdout=stdout,
            stderr=stderr,
            timed_out=timed_out,
            duration=duration,
            stdout_bytes=out_size,
            stderr_bytes=err_size,
            text_repaired=out_repaired + err_repaired,
        )

    def run_python(self, source: str, timeout: float) -> dict[str, Any]:
        """A tool script in the sandbox, as the factory runs it (a fresh folder, not the workspace)."""
        return run_tool_script(source, timeout, executor=self.executor, memory=self.python_memory, hidden=self.hidden)

    def loopback_listener(self) -> socket.socket:
        """A TCP socket listening on 127.0.0.1 as the environment's commands see it: isolated, the loopback of
        the item's own network namespace (nothing else of this machine reaches it, nor it anything of this
        machine's loopback); without isolation, this machine's loopback (the commands run as this user)."""
        if self.holder is None or self.holder.netns_fd is None:
            return socket.create_server(("127.0.0.1", 0))
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        fds = [fd for fd in (self.holder.netns_fd, self.holder.userns_fd, theirs.fileno()) if fd is not None]
        spec = {"netns_fd": self.holder.netns_fd, "userns_fd": self.holder.userns_fd, "channel_fd": theirs.fileno()}
        with mine, theirs:
            proc = subprocess.run(
                [sys.executable, "-S", "-c", LISTENER_LAUNCHER, json.dumps(spec)],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                env=dict(self.env, PYTHONPATH=package_parent()),
                pass_fds=fds,
                timeout=60,
            )
            if proc.returncode != 0:
                problem = proc.stderr.decode(errors="replace").strip()[-500:]
                raise EnvError(f"cannot listen in the host environment's network namespace: {problem}")
            _, received, _, _ = socket.recv_fds(mine, 1, 1)
        if not received:
            raise EnvError("cannot listen in the host environment's network namespace: no socket came back")
        return socket.socket(fileno=received[0])

    # ---------------------------------------------------------------- files

    # Paths are the environment's (relative ones from ``workdir``), resolved as the sandbox sees them; the
    # final open does not follow a link, so a link swapped in after the resolution cannot redirect it.

    def read_file(self, path: str) -> bytes:
        target = resolve_inside(self.workspace, path, self.view)
        if not target.is_file():
            raise FileNotFoundError(f"no file {path!r} in the environment (looked at {target})")
        if self.view is not None and not self.view.from_a_mount(target) and not world_readable(target):
            # the controller may be root; the agent's commands (uid 65534) could not read it
            raise PermissionError(f"{path!r} cannot be read in the environment (permission denied)")
        if target.stat().st_size > MAX_FILE_READ:
            raise ValueError(f"{path!r} is larger than {MAX_FILE_READ >> 20} MB; read a part of it with bash")
        with open(os.open(target, os.O_RDONLY | os.O_NOFOLLOW), "rb") as fh:
            return fh.read(MAX_FILE_READ + 1)[:MAX_FILE_READ]

    def write_file(self, path: str, data: bytes | str) -> None:
        target = resolve_inside(self.workspace, path, self.view, write=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644), "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
        if self.holder is not None and self.isolation.mode == "root":  # the agent (uid 65534) may change it
            give_to_sandbox_user(target)

    def copy_out(self, dest_dir: Path) -> Path:
        """Within ``copy_cap`` (see ``envs.copyout``); ``copied`` says what came and what was left out. Into
        the workspace itself nothing is copied: what a copy would leave out is removed there."""
        dest = Path(dest_dir)
        if dest.exists() and dest.resolve() == self.workspace:
            self.copied = prune_tree(self.workspace, self.copy_cap)  # the host environment works in place
        else:
            self.copied = copy_tree(self.workspace, dest, self.copy_cap)
        return dest

    # ---------------------------------------------------------------- the end

    def _release(self) -> None:
        if self.holder is not None:  # its PID namespace holds every process of the environment
            self.holder.close()
        if self.jail.cgroup is not None:
            self.jail.kill_members()
        else:
            # background jobs stay in their command's process group (unless they setsid away)
            table = proc_table()
            for leader in self.leaders:
                if group_members(leader, table):
                    kill_group(leader)
        self.jail.close()
        remove_tree(self.private)


class Holder:
    """The PID, network (and, for a user, user) namespaces of one isolated host environment.

    A bwrap sandbox running ``sleep infinity``: every command's sandbox joins its namespaces, so
    background jobs outlive their command, and ``close`` (killing it) ends them all at once. Every
    sandbox (the holder's and each command's) has its own mount namespace with the same layout: the
    workspace at its host path, or at ``workdir`` when given. The network namespace is the holder's own
    (bwrap --unshare-net): with ``network="user"`` a slirp4netns process gives it outbound access (see
    ``UserNetwork``); with ``"none"`` it has only its own loopback."""

    def __init__(
        self,
        isolation: Isolation,
        *,
        workspace: Path,
        private: Path,
        hidden: Sequence[str],
        gpus: str | None,
        workdir: str | None = None,
        network: str = "user",
        blocked_hosts: Sequence[str] = (),
        readable: Sequence[str] = (),
    ) -> None:
        if network not in HOST_NETWORKS:
            raise EnvError(
                f"unknown host network {network!r} (--bench-set host_network); valid: {', '.join(HOST_NETWORKS)}"
            )
        self.isolation = isolation
        self.network = network
        self.user_network: UserNetwork | None = None
        self.netns_fd: int | None = None
        self.userns_fd: int | None = None
        if isolation.mode == "root":  # commands run as uid 65534: the workspace and private folders become theirs
            for folder in (workspace, private / "home", private / "tmp"):
                give_to_sandbox_user(folder)
        devices = sorted(glob.glob("/dev/nvidia*") + glob.glob("/dev/dri")) if gpus else []
        writable = [str(private / "home")] + ([] if workdir else [str(workspace)])
        self.layout: dict[str, Any] = dict(
            writable=writable,
            readable=[str(path) for path in readable],
            tmp=str(private / "tmp"),
            hidden=list(hidden),
            devices=devices,
            relocated=[(str(workspace), workdir)] if workdir else [],
        )
        self.resolver = private / "resolv.conf"  # the commands' resolver: slirp4netns's, not this machine's
        self.resolver.write_text(f"nameserver {SLIRP_DNS}\n")
        self.resolver.chmod(0o644)
        self.hosts = private / "hosts"  # this machine's, plus the names the commands must not resolve
        self.hosts.write_text(machine_hosts() + blocked_hosts_lines(blocked_hosts))
        self.hosts.chmod(0o644)
        self.fds: list[int] = []
        for attempt in range(MOUNT_RACE_TRIES):
            problem = self._start()
            if problem is None:  # every command's sandbox: the same layout, in the holder's namespaces
                try:
                    if network == "user":
                        self.user_network = UserNetwork(self.sandbox_pid)
                    # network=True: the command's bwrap keeps the network namespace its launcher joined, the
                    # holder's. A user's launcher has joined the holder's user namespace first (to be allowed
                    # into its network namespace), as its uid 0: there bwrap runs as it does for root.
                    prefix = self._argv(
                        pidns_fd=self.fds[0], network=True, isolation=dataclasses.replace(isolation, mode="root")
                    )
                    binds = ["--ro-bind", str(self.resolver), "/etc/resolv.conf"]
                    if os.path.isfile("/etc/hosts") and not os.path.islink("/etc/hosts"):  # (a mount point of bwrap)
                        binds += ["--ro-bind", str(self.hosts), "/etc/hosts"]
                    self.prefix = prefix[:-2] + binds + prefix[-2:]
                except BaseException:
                    self.close()
                    raise
                return
            if not mount_race(problem) or attempt == MOUNT_RACE_TRIES - 1:
                raise EnvError(f"could not start the isolated host environment: {problem}")
            time.sleep(0.2 * (attempt + 1))  # a mount vanished while bwrap copied the table: try again

    def _argv(
        self,
        network: bool = False,
        isolation: Isolation | None = None,
        pidns_fd: int | None = None,
        info_fd: int | None = None,
    ) -> list[str]:
        try:
            return sandbox_argv(
                AGENT_COMMAND_HOST,
                isolation or self.isolation,
                network=network,
                pidns_fd=pidns_fd,
                info_fd=info_fd,
                **self.layout,
            )
        except ValueError as exc:  # a layout the sandbox cannot have (e.g. a folder it cannot list)
            raise EnvError(f"cannot start the isolated host environment: {exc}") from None

    def _start(self) -> str | None:
        """Start the holder's sandbox; None, or why it failed (bwrap's own message first)."""
        read, write = os.pipe()
        try:
            self.proc = subprocess.Popen(
                self._argv(info_fd=write) + [shutil.which("sleep") or "/bin/sleep", "infinity"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=[write],
                start_new_session=True,
            )
        except BaseException:
            os.close(read)
            raise
        finally:
            os.close(write)
        try:
            with os.fdopen(read, "rb") as fh:
                info = json.loads(fh.read() or b"{}")
            child = info["child-pid"]
            self.fds = [os.open(f"/proc/{child}/ns/pid", os.O_RDONLY), os.open(f"/proc/{child}/ns/net", os.O_RDONLY)]
            self.netns_fd, self.sandbox_pid = self.fds[1], child
            if self.isolation.mode == "userns":
                self.fds.append(os.open(f"/proc/{child}/ns/user", os.O_RDONLY))
                self.userns_fd = self.fds[2]
        except (OSError, KeyError, ValueError) as exc:
            self.proc.kill()
            _, err = self.proc.communicate()
            for fd in self.fds:
                os.close(fd)
            self.fds = []
            return f"{err.decode(errors='replace').strip()[-500:]} ({type(exc).__name__}: {exc})"
        return None

    def command_prefix(self) -> list[str]:
        """The bwrap command line of one command: the holder's namespaces, the same file system view."""
        return self.prefix

    def close(self) -> None:
        kill_group(self.proc.pid)
        self.proc.kill()
        self.proc.wait()
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        if self.user_network is not None:
            self.user_network.close()
            self.user_network = None
        for fd in self.fds:
            os.close(fd)
        self.fds = []
        self.netns_fd = self.userns_fd = None


class UserNetwork:
    """slirp4netns serving the network namespace of the process ``pid``: a tap device with a default route
    through a user-mode TCP/IP stack in this machine's namespace, so connections leave as ordinary sockets of
    the machine. ``--disable-host-loopback``: its gateway address (10.0.2.2) does not lead to this machine's
    loopback. It ends when its exit pipe closes (``close``, or the controller's end)."""

    def __init__(self, pid: int, timeout: float = 30.0) -> None:
        program = shutil.which(USER_NETWORK_STACK)
        if program is None:
            raise EnvError(f"the host environment's outbound network needs {USER_NETWORK_STACK}: {USER_NETWORK_HINT}")
        ready_read, ready_write = os.pipe()
        self.exit_read, exit_write = os.pipe()
        self.exit_write: int | None = exit_write  # None once closed
        try:
            self.proc = subprocess.Popen(
                # --enable-sandbox: it runs in a mount namespace of its own, without capabilities but binding ports;
                # the launcher first puts it in one whose mounts are slaves (see NETWORK_LAUNCHER)
                [
                    *(sys.executable, "-S", "-c", NETWORK_LAUNCHER, str(CLONE_NEWNS), str(MS_REC | MS_SLAVE)),
                    program,
                    "--configure",
                    "--mtu=65520",
                    "--disable-host-loopback",
                    "--enable-sandbox",
                    f"--ready-fd={ready_write}",
                    f"--exit-fd={self.exit_read}",
                    str(pid),
                    "tap0",
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=[ready_write, self.exit_read],
                start_new_session=True,
            )
        finally:
            os.close(ready_write)
            os.close(self.exit_read)
        with os.fdopen(ready_read, "rb") as fh:  # "1" once the device is configured; EOF if it failed
            ready = fh.read(1)
        if ready != b"1":
            self.close()
            raise EnvError(
                f"{USER_NETWORK_STACK} could not give the host environment its network: "
                f"{self.error or 'no reason given'}"
            )

    def close(self) -> None:
        if self.exit_write is not None:
            os.close(self.exit_write)  # asks it to exit
            self.exit_write = None
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.error = self.proc.stderr.read().decode(errors="replace").strip()[-500:] if self.proc.stderr else ""
        if self.proc.stderr is not None:
            self.proc.stderr.close()


def check_host_network(network: str, isolation: Isolation, needed: bool = True) -> None:
    """Refuse a run whose host environment needs the user-mode network stack when it is not installed
    (``needed``: a real model runs; the oracle runs no command)."""
    if network == "user" and needed and isolation.active and shutil.which(USER_NETWORK_STACK) is None:
        raise ConfigError(
            f"--bench-set=host_network=user: the host environment's outbound network needs "
            f"{USER_NETWORK_STACK}, which is not installed; {USER_NETWORK_HINT}"
        )


def describe_host_network(network: str) -> str:
    """The network part of the host environment's isolation line."""
    if network == "none":
        return "own network namespace without network"
    return (
        f"own network namespace, outbound through {USER_NETWORK_STACK} (no way to this machine's loopback "
        f"or abstract sockets)"
    )


def run_tool_script(
    source: str, timeout: float, *, executor: str, memory: int | None, hidden: Sequence[str] = ()
) -> dict[str, Any]:
    """One tool script (a model's code) under the sandbox's executor and limits."""
    limits = Limits(timeout=check_timeout(timeout), memory=memory, hidden=tuple(hidden))
    result = run_python(source, limits=limits, executor=executor)
    return python_result(result)


def with_extra_masks(hidden: Sequence[str], extra: Sequence[str]) -> tuple[str, ...]:
    """``hidden`` and the folders of ``extra`` not already inside one of them (a mask inside a mask could not be
    made: the outer one is an empty read-only folder)."""
    out = list(hidden)
    for path in (str(p) for p in extra):
        real = os.path.realpath(path)
        if not under(real, [os.path.realpath(p) for p in out]):
            out = [p for p in out if not under(os.path.realpath(p), [real])] + [path]
    return tuple(out)


class HostFactory(EnvFactory):
    """The ``bench_env`` value for ``--bench-env=host``."""

    kind = "host"

    def __init__(
        self,
        *,
        keep_workspaces: bool = False,
        gpus: str | None = None,
        memory: int | None = DEFAULT_MEMORY,
        executor: str = "fork",
        python_memory: int | None = DEFAULT_MEMORY_LIMIT,
        hidden: Sequence[str] = (),
        isolation: Isolation | None = None,
        network: str = "user",
        copy_cap: int = DEFAULT_COPY_OUT_CAP,
    ) -> None:
        """``hidden``: folders no command or tool script may see (the data dir, the cache, the reports);
        ``network``: the isolated commands' network, ``user`` or ``none`` (``HOST_NETWORKS``); ``copy_cap``:
        most bytes ``copy_out`` keeps of a workspace."""
        self.copy_cap = copy_cap
        if network not in HOST_NETWORKS:
            raise ConfigError(
                f"unknown host network {network!r} (--bench-set host_network); valid: {', '.join(HOST_NETWORKS)}"
            )
        self.network = network
        self.keep_workspaces = keep_workspaces
        self.gpus = gpus
        self.memory = memory
        self.executor, self.python_memory = executor, python_memory
        self.hidden = tuple(str(p) for p in hidden)
        self.isolation = probe() if isolation is None else isolation

    def start(
        self,
        workspace: Path,
        *,
        needs_gpu: bool = False,
        name: str = "",
        workdir: str | None = None,
        hidden: Sequence[str] = (),
        blocked_hosts: Sequence[str] = (),
        readable: Sequence[str] = (),
    ) -> HostEnvironment:
        """``workdir``: where the commands see the item's own folder ``workspace`` (isolated: bound there in
        the item's sandboxes, so concurrent items never share a host path; without isolation not applied,
        the environment's ``workdir_note`` says so). ``hidden``: this item's folders masked besides the
        factory's (a benchmark's copies of what the item must not see); ``blocked_hosts``: names its
        /etc/hosts maps to ``BLOCKED_ADDRESSES`` (isolated only); ``readable``: host folders its commands see
        read-only (an external agent's install; isolated only)."""
        if needs_gpu and not self.gpus:
            raise EnvSkip(
                "needs a GPU and --bench-set gpus is not set (pass --bench-set=gpus=all or device ids to run it)"
            )
        return HostEnvironment(
            workspace,
            keep_workspace=self.keep_workspaces,
            name=name,
            gpus=self.gpus,
            memory=self.memory,
            executor=self.executor,
            python_memory=self.python_memory,
            isolation=self.isolation,
            hidden=with_extra_masks(self.hidden, hidden),
            workdir=workdir,
            network=self.network,
            copy_cap=self.copy_cap,
            blocked_hosts=blocked_hosts,
            readable=readable,
        )

    def describe_isolation(self) -> str:
        if not self.isolation.active:
            return self.isolation.describe()
        how = "privileged" if self.isolation.mode == "root" else "user namespace"
        return (
            f"bwrap ({how}): uid {SANDBOX_UID}, no capabilities, system folders only (read-only) and the "
            f"workspace, one PID namespace per item, data dir, cache and reports hidden, "
            f"{describe_host_network(self.network)}"
        )

    def run_python(self, source: str, timeout: float) -> dict[str, Any]:
        """A tool script on the host: the sandbox's executor and memory limit, like a scoring script."""
        return run_tool_script(source, timeout, executor=self.executor, memory=self.python_memory, hidden=self.hidden)
