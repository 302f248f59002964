"""OS isolation of every child that runs model code: bubblewrap plus Linux namespaces.

What a child gets (both executors, tool scripts, and the host environment's commands):

* an unprivileged uid (``SANDBOX_UID``, 65534) with no capabilities, an empty bounding set and
  ``no_new_privs``; never root;
* a read-only view of the machine's system folders (``/usr``, ``/etc``, ``/opt``, ... see ``SYSTEM_TOPS``),
  the Python installation, its installed packages and this package, and nothing else: data folders
  (``/home``, ``/root``, ``/srv``, ``/var``, a checkout, a stray copy of the ground truth) do not exist
  there; paths the caller names (the data dir, the cache, the reports) are masked by empty folders
  wherever they would be visible; Python is visible wherever it is installed (a venv under /tmp, a home
  folder, /srv, reached through links): its folders are bound after every mount that could cover them
  (the private /tmp and /dev/shm, a mask it lies strictly inside) and the links on the way to them are
  made again (``python_links``), so nothing mounted later hides them; ``selftest.py`` checks it for real;
* a private, size-capped ``/tmp`` (tmpfs) holding its work folder (scoring and tool scripts; with ``$TMPDIR``
  elsewhere the work folder keeps its host path, on a folder of that tmpfs put over its parent), or the
  environment's workspace and private folders (host environment: on disk, no total cap); the host
  environment can also have its workspace at another path (CORE-Bench's workspace root): then the
  sandbox's root is a read-only tmpfs on which the machine's folders are bound again, read-only,
  around that path (``mirror_root``), and the workspace's own host path is masked;
* its own PID namespace: it sees only its own processes in ``/proc``, the process that forked it is
  out of sight (``getppid() == 0``) and everything left in the namespace dies with the run;
* no network (scoring and tool scripts) or the host's network (host environment commands);
* its own IPC namespace;
* its own user namespace (uid 65534 in it), so what the kernel keeps per user (keyrings, counts of message
  queues and inotify watches) starts empty and dies with the run; and a seccomp filter (``syscalls.py``,
  compiled by libseccomp) refusing at least what Docker's default profile refuses. Where the machine allows
  either not, ``drop_privileges`` says so and the probe's ``Isolation.missing`` carries it.

How: bubblewrap (``bwrap``) cannot wrap a forked child and Python 3.11 has no ``os.unshare``, so
a *sandbox process* (the fork server, the subprocess executor's launcher, or the host
environment's holder) runs inside one bwrap sandbox that keeps the privileges to build more
namespaces, and every child is further restricted through the C library before it runs any model
code: ``unshare`` of a mount and IPC namespace, a fresh tmpfs on ``/tmp`` and ``/dev/shm``, a
fresh ``/proc``, then the privileges are dropped. Two modes:

* ``root`` (the controller runs as root): bwrap runs privileged (no user namespace); the child
  drops to uid 65534 with ``setresuid``, which also clears its capabilities, then (as that user) enters a user
  namespace of its own mapping 65534 to itself.
* ``userns`` (an ordinary user): bwrap makes a user namespace in which the sandbox process is uid 0
  with capabilities (that only count inside it); the child enters a nested user namespace that
  maps uid 65534 to the user, and drops every capability.

The fork server itself is made non-dumpable, so a child can neither read nor write its memory;
a child cannot even name it (another PID namespace).

``probe()`` tries all of that once per process and says why isolation is impossible when it is
(no bwrap, no user namespaces, not Linux, turned off with ``AGENTBENCH_ISOLATION=off``).
"""

from __future__ import annotations

import ctypes
import functools
import os
import posixpath
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from . import syscalls
from .limits import Limits, apply_child_limits, join_cgroup, package_parent

SANDBOX_UID = 65534  # "nobody"
SANDBOX_GID = 65534
ISOLATION_ENV = "AGENTBENCH_ISOLATION"  # "off": run children without OS isolation (the probe says so)
PIDS_CGROUP_DIR = Path("/sys/fs/cgroup/pids/agentbench")

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_SLAVE = 1 << 19
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
LINUX_CAPABILITY_VERSION_3 = 0x20080522

LIBC = ctypes.CDLL(None, use_errno=True)


# ---------------------------------------------------------------- the C library, thinly


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    _check(LIBC.unshare(flags), "unshare")


def setns(fd: int, nstype: int) -> None:
    _check(LIBC.setns(fd, nstype), "setns")


def _c_string(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    result = LIBC.mount(_c_string(source), _c_string(target), _c_string(fstype), ctypes.c_ulong(flags), _c_string(data))
    _check(result, f"mount {target}")


def prctl(option: int, arg: int) -> None:
    _check(
        LIBC.prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)),
        f"prctl {option}",
    )


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_bounding_set() -> None:
    """Empty the capability bounding set (needs CAP_SETPCAP, so before the other sets are cleared)."""
    try:
        last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError):
        last = 40
    for cap in range(last + 1):
        LIBC.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(cap), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))


def clear_capabilities() -> None:
    """Empty the effective, permitted and inheritable capability sets of the calling thread."""
    header = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(LIBC.capset(ctypes.byref(header), ctypes.byref(data)), "capset")


# ---------------------------------------------------------------- can this machine isolate?


@dataclass(frozen=True)
class Isolation:
    """How children are isolated here: ``mode`` is "root", "userns" or "none" (then ``why`` says why)."""

    mode: str
    why: str = ""
    bwrap: str | None = None
    missing: tuple[str, ...] = ()  # kernel surfaces a child does not get here (user namespace, seccomp filter)

    @property
    def active(self) -> bool:
        return self.mode != "none"

    @property
    def complete(self) -> bool:
        """Isolated, with every kernel surface denied (what ``--bench-require-isolation`` asks)."""
        return self.active and not self.missing

    def shortfall(self) -> str:
        """Why the isolation here is not complete ("" when it is)."""
        return self.why if not self.active else "; ".join(self.missing)

    def describe(self) -> str:
        """One line for the run's header and summary: ``bwrap (...)`` or ``none (why)``."""
        if not self.active:
            return f"none ({self.why})"
        how = "privileged" if self.mode == "root" else "user namespace"
        kernel = (
            f"NOT MET: {'; '.join(self.missing)}"
            if self.missing
            else f"own user namespace per run, seccomp filter ({len(syscalls.DENIED)} calls and namespace flags "
            f"refused)"
        )
        return (
            f"bwrap ({how}): uid {SANDBOX_UID}, no capabilities, system folders only (read-only), "
            f"private /tmp, own PID namespace, no network for scripts, {kernel}"
        )


NO_ISOLATION = Isolation("none", "not requested")
_PROBED: dict[str, Isolation] = {}
_PROBING = threading.Lock()  # one probe when two threads ask at once (a fork server started in the background)


def probe(refresh: bool = False) -> Isolation:
    """Whether (and how) children can be isolated on this machine; tried for real once per process.

    ``$AGENTBENCH_ISOLATION=off`` is read at every call, not kept with the machine's answer: a process that runs
    several sessions (a notebook, pytester) gets each session's own setting."""
    turned_off = turned_off_by_environment()
    if turned_off is not None:
        return turned_off
    with _PROBING:
        if "result" in _PROBED and not refresh:
            return _PROBED["result"]
        _PROBED["result"] = result = _probe()
    return result


def turned_off_by_environment() -> Isolation | None:
    setting = os.environ.get(ISOLATION_ENV, "").strip().lower()
    if setting in ("off", "0", "no", "none", "false"):
        return Isolation("none", f"turned off with ${ISOLATION_ENV}={os.environ[ISOLATION_ENV]}")
    return None


def _probe() -> Isolation:
    if not sys.platform.startswith("linux"):
        return Isolation("none", f"needs Linux namespaces; this is {sys.platform}")
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return Isolation("none", "bubblewrap (bwrap) is not installed; install it, e.g. apt-get install bubblewrap")
    if shutil.which("sleep") is None:
        return Isolation("none", "no `sleep` program on PATH (the init of every child's PID namespace)")
    candidate = Isolation("root" if os.geteuid() == 0 else "userns", "", bwrap)
    code = "from pytest_agentbench.sandbox.isolation import self_test; self_test()"
    argv = bwrap_argv(candidate) + [sys.executable, "-S", "-c", code, candidate.mode]
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": package_parent()},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Isolation("none", f"bwrap could not be run: {exc}")
    answer = done.stdout.strip().splitlines()
    if done.returncode != 0 or not answer or answer[0] != "isolated":
        lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        reason = lines[-1] if lines else f"exit code {done.returncode}"
        hint = (
            ""
            if os.geteuid() == 0
            else " (are unprivileged user namespaces enabled? sysctl kernel.unprivileged_userns_clone / "
            "user.max_user_namespaces)"
        )
        return Isolation("none", f"bwrap cannot isolate here: {reason}{hint}")
    return Isolation(candidate.mode, "", bwrap, tuple(answer[1:]))


def self_test() -> None:
    """Run inside the probe's sandbox: make one child exactly as the executors do and check it."""
    mode = sys.argv[-1]
    parent_users = os.readlink("/proc/self/ns/user")
    own = os.open("/proc/self/ns/pid", os.O_RDONLY)
    space = RunNamespace(own)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            os.makedirs("/tmp/agentbench-probe/sub")
            Path("/tmp/agentbench-probe/sub/main.py").write_text("pass")
            missing = enter_child(mode, work="/tmp/agentbench-probe", disk=1 << 20, bind=())
            missing += measured_shortfalls(
                missing, parent_users, os.readlink("/proc/self/ns/user"), Path("/proc/self/status").read_text()
            )
            ok = (
                os.getuid() == SANDBOX_UID
                and os.getppid() == 0
                and Path("/tmp/agentbench-probe/sub/main.py").read_text() == "pass"
            )
            answer = "\n".join(["isolated", *missing]) if ok else f"uid {os.getuid()} ppid {os.getppid()}"
            os.write(write, answer.encode())
            os._exit(0)
        except BaseException as exc:  # report, never return into the caller's code
            os.write(write, f"child setup failed: {exc}".encode())
            os._exit(1)
    space.leave()
    os.close(write)
    answer = os.read(read, 1000).decode()
    os.waitpid(pid, 0)
    space.close()
    if not answer.startswith("isolated"):
        sys.exit(answer)
    print(answer)


def measured_shortfalls(reported: Sequence[str], parent_users: str, child_users: str, status: str) -> list[str]:
    """What the child measured of its own kernel surface and ``drop_privileges`` did not already report: a user
    namespace that is its parent's (``/proc/self/ns/user`` links), a seccomp mode other than filtering
    (``Seccomp:`` of ``/proc/self/status``). The ``isolation:`` line states what a child has, not what was asked."""
    found: list[str] = []
    said = " ".join(reported)
    if child_users == parent_users and "user namespace" not in said:
        found.append(f"no user namespace per run (measured: the child is in {child_users}, its parent's)")
    mode = next((line.split(":", 1)[1].strip() for line in status.splitlines() if line.startswith("Seccomp:")), "")
    if mode != "2" and "seccomp" not in said:
        found.append(f"no seccomp filter (measured: Seccomp: {mode or 'not reported'} in /proc/self/status)")
    return found


# ---------------------------------------------------------------- the sandbox process (bwrap)


def private_homes() -> list[str]:
    """The controller's home folders: hidden from children (keys, tokens, shell history)."""
    homes = []
    for home in ("/root", os.path.expanduser("~")):
        real = os.path.realpath(home)
        if real not in ("/", "") and os.path.isdir(real) and real not in homes:
            homes.append(real)
    return homes


def under(path: str, roots: Iterable[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


# The top-level folders that hold a machine's software: programs, libraries, configuration, the kernel's views.
# A sandbox sees these read-only and, of everything else, only what it needs to run Python and the folders its
# caller names: data folders (/home, /root, /srv, /mnt, /var, /run, a checkout or a copy of a benchmark's ground
# truth wherever it lies) are not there at all, so nothing depends on knowing where such copies are.
SYSTEM_TOPS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "opt", "sys", "nix", "snap")


def system_folders() -> list[str]:
    return ["/" + name for name in SYSTEM_TOPS]


def sandbox_visible_folders() -> list[str]:
    """The host folders a sandbox sees at their own paths (read-only): for the controller, reading a file the
    way a sandboxed agent would."""
    return [*(p for p in system_folders() if os.path.exists(p)), *needed_paths()]


def package_dir() -> str:
    """This package's own folder (not its parent: in a checkout that is the whole project)."""
    return os.path.join(package_parent(), "pytest_agentbench")


def pth_folders(site_dirs: Iterable[str]) -> set[str]:
    """Folders that ``.pth`` files in ``site_dirs`` put on ``sys.path`` (other packages installed in place)."""
    out: set[str] = set()
    for folder in site_dirs:
        try:
            names = [n for n in os.listdir(folder) if n.endswith(".pth")]
        except OSError:
            continue
        for name in names:
            try:
                lines = Path(folder, name).read_text(errors="replace").splitlines()
            except OSError:
                continue
            out.update(
                os.path.join(folder, line.strip())
                for line in lines
                if line.strip() and not line.startswith(("#", "import ", "import\t"))
            )
    return out


def venv_folder() -> str | None:
    """The virtual environment ``sys.executable`` belongs to (the folder with its ``pyvenv.cfg``), found as
    Python itself finds it: next to the executable or one folder up. Also in a ``python -S`` launcher, where
    ``sys.prefix`` is the base installation's (``site`` is what switches it to the venv)."""
    if not sys.executable:
        return None
    folder = os.path.dirname(os.path.abspath(sys.executable))
    for candidate in (folder, os.path.dirname(folder)):
        if os.path.isfile(os.path.join(candidate, "pyvenv.cfg")):
            return candidate
    return None


def site_folders() -> set[str]:
    import site  # why: only here; a -S launcher gets these paths from its spec (computed by its caller)

    return {*site.getsitepackages(), site.getusersitepackages()}


def spelled_python_paths() -> list[str]:
    """The paths by which Python and its packages are reached, as spelt (links not resolved): the interpreter,
    its prefixes, the site folders, what their ``.pth`` files add and ``$PYTHONPATH``. A fresh interpreter in a
    sandbox finds its prefix and site folders from its own spelt path, so each of these must resolve there too."""
    site_dirs = site_folders()
    paths = [
        sys.executable,
        sys.prefix,
        sys.exec_prefix,
        sys.base_prefix,
        venv_folder() or "",
        *sorted(site_dirs),
        *sorted(pth_folders(site_dirs)),
        *os.environ.get("PYTHONPATH", "").split(os.pathsep),
    ]
    out: list[str] = []
    for path in paths:
        if path and os.path.isabs(path) and os.path.normpath(path) not in out:
            out.append(os.path.normpath(path))
    return out


def links_on_the_way(path: str, limit: int = 40) -> list[tuple[str, str]]:
    """Every symbolic link met while resolving the absolute ``path`` (as ``realpath`` does): (where the link is,
    with real folders above it; what it says). Made again in a sandbox, they let the same spelling resolve there."""
    found: list[tuple[str, str]] = []
    current, todo = "/", list(PurePosixPath(path).parts[1:])
    while todo:
        name = todo.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, name)
        if not os.path.islink(candidate):
            current = candidate
            continue
        if len(found) >= limit:  # a loop of links: realpath gives up the same way
            break
        target = os.readlink(candidate)
        found.append((candidate, target))
        if target.startswith("/"):
            current = "/"
        todo = [*PurePosixPath(target).parts[1 if target.startswith("/") else 0 :], *todo]
    return found


@functools.lru_cache(maxsize=1)
def python_links() -> list[tuple[str, str]]:
    """The symbolic links on the way to Python and its packages (``spelled_python_paths``): a venv reached
    through a linked folder, ``/opt/py -> /srv/python``. A sandbox makes each again where the machine's folder
    holding it is not visible whole (a folder under /tmp, a home, /srv)."""
    out: list[tuple[str, str]] = []
    for path in spelled_python_paths():
        for link in links_on_the_way(path):
            if link not in out:
                out.append(link)
    return out


@functools.lru_cache(maxsize=1)
def needed_paths() -> list[str]:
    """What a child needs to run Python: the interpreter, its libraries, the installed packages and this package.

    Not every ``sys.path`` entry: the current folder and the folders pytest adds (rootdir, conftest folders)
    are a user's project, with its files, reports and perhaps keys; only installed locations are kept
    (site folders, what their ``.pth`` files add, ``$PYTHONPATH``)."""
    site_dirs = site_folders()
    installed = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        venv_folder() or "",
        os.path.dirname(os.path.realpath(sys.executable)),
        *site_dirs,
        *pth_folders(site_dirs),
        *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if os.path.isabs(p)),
    }
    real = {os.path.realpath(p) for p in installed if os.path.isabs(p) and os.path.isdir(p)}
    parent = os.path.realpath(package_parent())
    prefixes = [os.path.realpath(p) for p in (*site_dirs, sys.prefix, sys.base_prefix, sys.exec_prefix)]
    if not under(parent, prefixes):  # a checkout (a project, its reports, its cache), not an installed location:
        real = {p for p in real if not under(parent, [p])}  # of it and of every folder around it, only the package
    ordered = sorted(real | {os.path.realpath(package_dir())})
    out: list[str] = []
    for path in ordered:  # drop paths inside another kept path
        if not under(path, out):
            out.append(path)
    return out


def inside(path: str, roots: Iterable[str]) -> bool:
    """``path`` lies strictly below one of ``roots`` (not one of them)."""
    return any(path != root and under(path, [root]) for root in roots)


def bwrap_argv(
    iso: Isolation,
    *,
    network: bool = False,
    writable: Iterable[str] = (),
    readable: Iterable[str] = (),
    hidden: Iterable[str] = (),
    tmp: str | None = None,
    pidns_fd: int | None = None,
    userns_fd: int | None = None,
    info_fd: int | None = None,
    devices: Iterable[str] = (),
    relocated: Iterable[tuple[str, str]] = (),
    python: tuple[Sequence[str], Sequence[tuple[str, str]]] | None = None,
) -> list[str]:
    """The bwrap command line of a sandbox process (the command follows it).

    ``tmp``: a host folder mounted on ``/tmp`` (default: a tmpfs); ``writable``: host folders bound
    read-write at the same path, ``readable`` read-only; ``hidden``: paths masked by an empty folder
    (or /dev/null); ``pidns_fd``/``userns_fd``: join an existing sandbox's namespaces instead of making
    new ones; ``devices``: device files made visible (GPUs); ``relocated``: (host folder, sandbox path)
    pairs bound read-write at another path (the host path is then masked where it would be visible);
    ``python``: the folders and links of the interpreter the sandbox runs (``interpreter.Python``'s ``needed``
    and ``links``) when it is not the running one (default: ``needed_paths()`` and ``python_links()``).

    The sandbox's root is a read-only tmpfs holding the machine's system folders (``SYSTEM_TOPS``, read-only),
    what Python needs (``needed_paths``) and the folders named here; nothing else of the machine exists in it
    (see ``mirror_root``, which also makes the way to relocated paths)."""
    if not iso.active or not iso.bwrap:
        raise ValueError(f"no isolation here: {iso.why}")
    python_paths = needed_paths() if python is None else [str(path) for path in python[0]]
    python_pairs = python_links() if python is None else [(str(a), str(b)) for a, b in python[1]]
    relocated = [(str(source), check_relocation_target(target)) for source, target in relocated]
    targets = [target for _, target in relocated]
    homes = private_homes()
    replaced = [*homes, "/tmp"]  # folders that start empty in the sandbox: what a child needs is bound in again
    hidden = [os.path.realpath(path) for path in hidden]
    # a hidden folder on the way to a relocated one is emptied by the mirror (a mask would be read-only too soon)
    emptied = [path for path in hidden if any(under(target, [path]) for target in targets)]
    hidden = [path for path in hidden if path not in emptied]
    mirror, read_only_tops = mirror_root(targets, replaced, emptied)
    # bwrap's /dev/shm is root's 0755: POSIX shared memory (multiprocessing, joblib) would fail for uid 65534
    args = [iso.bwrap, *mirror, "--dev", "/dev", "--perms", "1777", "--size", str(SHM_SIZE), "--tmpfs", "/dev/shm"]
    for device in devices:
        args += ["--dev-bind-try", device, device]
    args += ["--tmpfs", "/tmp"] if tmp is None else ["--bind", tmp, "/tmp"]
    for home in homes:
        args += ["--tmpfs", home]
    system = [path for path in system_folders() if not under(path, replaced)]
    readable = [str(path) for path in readable]
    if network:  # the resolver's configuration may be a link into /run (systemd-resolved)
        resolver = os.path.realpath("/etc/resolv.conf")
        if os.path.isfile(resolver) and not under(resolver, system):
            readable.append(resolver)
    needed = [("--ro-bind", path, path) for path in python_paths if under(path, replaced) or not under(path, system)]
    shared = (
        [("--ro-bind", path, path) for path in readable]
        + [("--bind", str(path), str(path)) for path in writable]
        + [("--bind", source, target) for source, target in relocated]
    )
    whole = [*system, *(path for _, _, path in needed + shared)]  # (the folders visible with all they hold)
    links = [(link, text) for link, text in python_pairs if not under(link, whole)]
    if tmp is not None:  # /tmp is a host folder that outlives this sandbox: its links are made there, once
        make_links_in(tmp, [(link, text) for link, text in links if under(link, ["/tmp"])])
        links = [(link, text) for link, text in links if not under(link, ["/tmp"])]
    mount_points = [*(path for _, _, path in needed + shared), *(link for link, _ in links)]
    for parent in traversable_parents(mount_points, replaced, system):
        args += ["--perms", "0755", "--dir", parent]
    for kind, source, path in needed:  # after the tmpfs on /tmp and the homes: nothing mounted later covers them
        args += [kind, source, path]
    for link, text in links:  # (a venv reached through a linked folder: the interpreter's own spelling resolves)
        args += ["--symlink", text, link]
    from ..core.data import secret_path  # why: core.data pulls in urllib; launchers import this module with -S

    # a relocated folder is seen only where it was put, not also (read-only) at its host path
    visible_sources = [source for source, _ in relocated if not under(os.path.realpath(source), replaced)]
    # the key that signs checksum stamps: never visible to a child, wherever $AGENTBENCH_SECRET_FILE points
    # (its default place is the cache folder, a private folder hidden anyway; the file is the controller's,
    # mode 0600)
    seen = [*system, *(path for _, path, _ in needed), *(source for _, source, _ in shared)]
    masked = [
        path
        for path in [*hidden, *visible_sources, str(secret_path())]
        if not under(path, emptied) and under(os.path.realpath(path), seen)
    ]  # (the rest is not there)
    args += mask_args(masked)  # before the shared folders: those stay visible
    # Python inside a masked folder (a venv in the cache folder, the interpreter below a hidden /opt/data) is
    # bound again on top of the mask: only it, not the folder's other files (a mask on Python itself stays)
    masked_real = [os.path.realpath(path) for path in masked]
    for path in python_paths:
        if inside(path, masked_real):
            args += ["--ro-bind", path, path]
    for link, text in python_pairs:
        if inside(link, masked_real) and not under(link, python_paths):
            args += ["--symlink", text, link]
    for kind, source, path in shared:
        args += [kind, source, path]
    args += namespace_args(iso, network=network, pidns_fd=pidns_fd, userns_fd=userns_fd)
    for top in read_only_tops:  # last: every mount point in them is made (the mounts themselves keep their mode)
        args += ["--remount-ro", top]
    if info_fd is not None:
        args += ["--info-fd", str(info_fd)]
    return args + ["--die-with-parent", "--"]


def traversable_parents(mount_points: Iterable[str], replaced: list[str], system: list[str]) -> list[str]:
    """The missing parents of the mount points, which bwrap would make private (0700): made 0755 so uid 65534
    can pass through them."""
    parents: set[str] = set()
    for path in mount_points:
        parent = os.path.dirname(path)
        while parent != "/" and (under(parent, replaced) or not under(parent, system)) and parent not in replaced:
            parents.add(parent)
            parent = os.path.dirname(parent)
    return sorted(parents)


def namespace_args(iso: Isolation, *, network: bool, pidns_fd: int | None, userns_fd: int | None) -> list[str]:
    """The namespaces of a sandbox (new ones, or the sandbox's whose descriptors are given), its cgroup folder
    and its /proc."""
    args: list[str] = []
    if iso.mode == "root" and PIDS_CGROUP_DIR.is_dir():  # the sandbox process puts each run into its own cgroup
        args += ["--bind", str(PIDS_CGROUP_DIR), str(PIDS_CGROUP_DIR)]
    args += ["--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    args += ["--pidns", str(pidns_fd)] if pidns_fd is not None else ["--unshare-pid"]
    if not network:
        args += ["--unshare-net"]
    if iso.mode == "userns":
        args += ["--userns", str(userns_fd)] if userns_fd is not None else ["--unshare-user"]
        args += ["--uid", "0", "--gid", "0", "--cap-add", "ALL"]
    return args + ["--proc", "/proc"]


def make_links_in(folder: str, links: Iterable[tuple[str, str]]) -> None:
    """Make the ``/tmp`` links of ``links`` in ``folder``, the host folder a sandbox gets as its ``/tmp``: bwrap
    (0.8) cannot make a link that exists already, and the folder keeps them for the next sandbox. Called before
    any command runs there; still, nothing found there is followed (a link on the way: that link is left out)."""
    for link, text in links:
        here = folder
        for name in PurePosixPath(link).relative_to("/tmp").parts[:-1]:
            here = os.path.join(here, name)
            if not os.path.lexists(here):
                os.mkdir(here, 0o755)
            if os.path.islink(here) or not os.path.isdir(here):
                break
        else:
            if not os.path.lexists(os.path.join(here, os.path.basename(link))):
                os.symlink(text, os.path.join(here, os.path.basename(link)))


SHM_SIZE = 1 << 30  # a sandbox's /dev/shm (tmpfs: RAM that no rlimit counts)
NOT_FROM_HOST = ("proc", "dev", "tmp")  # top-level folders every sandbox makes afresh
NO_RELOCATION_UNDER = ("/proc", "/sys", "/dev")


def check_relocation_target(path: str) -> str:
    """A sandbox path a host folder may be bound at: absolute, normalized, below ``/``, outside the kernel's
    file systems, and with real folders (no symbolic links of this machine) on the way to it."""
    text = str(path)
    if not text.startswith("/") or posixpath.normpath(text) != text or text in ("/", "//"):
        raise ValueError(f"cannot put a folder at {text!r} in the sandbox: give a normalized absolute path below /")
    if under(text, NO_RELOCATION_UNDER):
        raise ValueError(
            f"cannot put a folder at {text} in the sandbox: /proc, /sys and /dev are the kernel's; "
            f"choose a path elsewhere"
        )
    parent = posixpath.dirname(text)
    while parent != "/":
        if os.path.islink(parent):
            raise ValueError(
                f"cannot put a folder at {text} in the sandbox: {parent} is a symbolic link on this "
                f"machine (to {os.readlink(parent)}); choose a path whose parents are real folders"
            )
        parent = posixpath.dirname(parent)
    return text


def mirror_root(
    targets: Sequence[str], replaced: Sequence[str], emptied: Sequence[str] = ()
) -> tuple[list[str], list[str]]:
    """bwrap arguments building the sandbox's (tmpfs) root, read-only: the machine's system folders
    (``SYSTEM_TOPS``) and nothing else of it, made around ``targets`` (sandbox paths other mounts will take;
    checked by ``check_relocation_target``).

    Every system folder on the way to a target gets its host entries bound read-only one by one (symbolic links
    made again), except the entry leading on to the target: ``/`` itself, and below it a tmpfs where the host
    has the folder; an empty folder where it has not, or where it is not a system folder. ``/proc``, ``/dev`` and
    ``/tmp`` are never taken from the
    host, nor are folders under ``replaced`` (they are mounted afresh later); folders in ``emptied`` (hidden
    ones) get none of their host entries. Returns the arguments and the tmpfs folders to remount read-only
    once every mount point in them is made."""
    on_the_way: dict[str, set[str]] = {"/": set()}
    for target in targets:
        parts = PurePosixPath(target).parts[1:]
        for depth, name in enumerate(parts):
            on_the_way.setdefault("/" + "/".join(parts[:depth]), set()).add(name)
    args: list[str] = []
    tops = ["/"]
    for level in sorted(on_the_way, key=lambda p: (len(PurePosixPath(p).parts), p)):
        skip = on_the_way[level] | (set(NOT_FROM_HOST) if level == "/" else set())
        if level != "/":
            if under(level, [*replaced, *("/" + n for n in NOT_FROM_HOST)]):
                continue  # made afresh later; bwrap makes the rest of the way to the mount point
            if not os.path.isdir(level) or not under(level, system_folders()):
                args += ["--perms", "0755", "--dir", level]  # (a data folder of the host shows none of its entries)
                continue
            args += ["--perms", "0755", "--tmpfs", level]
            tops.append(level)
            if level in emptied:
                continue
        try:
            names = sorted(os.listdir(level))
        except OSError as exc:
            raise ValueError(f"cannot rebuild {level} in the sandbox around {', '.join(targets)}: {exc}") from None
        for name in names:
            path = posixpath.join(level, name)
            if name in skip or path in replaced or (level == "/" and name not in SYSTEM_TOPS):
                continue
            if os.path.islink(path):
                args += ["--symlink", os.readlink(path), path]
            else:  # -try: an entry may vanish between the listing and bwrap
                args += ["--ro-bind-try", path, path]
    return args, tops


def mask_args(hidden: Iterable[str]) -> list[str]:
    args: list[str] = []
    for path in hidden:
        path = os.path.realpath(path)
        if os.path.isdir(path):
            args += ["--tmpfs", path, "--remount-ro", path]
        elif os.path.exists(path):
            args += ["--ro-bind", "/dev/null", path]
    return args


# ---------------------------------------------------------------- one run's namespaces (inside the sandbox)


class RunNamespace:
    """A fresh PID namespace for one run, made by the sandbox process before it forks the child.

    Its init (pid 1) is a ``sleep``, started through vfork+exec so it costs no copy of a large heap;
    the child forked next lands in the namespace as pid 2. ``leave`` makes later forks land in the
    sandbox process's own namespace again; ``close`` kills the init, and with it everything left."""

    def __init__(self, own_pidns: int) -> None:
        self.own = own_pidns
        unshare(CLONE_NEWPID)
        try:
            self.init = subprocess.Popen(
                [shutil.which("sleep") or "/bin/sleep", "infinity"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                close_fds=True,
            )
        except BaseException:
            self.leave()
            raise

    def leave(self) -> None:
        setns(self.own, CLONE_NEWPID)

    def close(self) -> None:
        self.init.kill()
        self.init.wait()


FRESH_MOUNTS = ("/tmp", "/dev/shm")  # what every child gets afresh: anything of Python there is bound again
WORK_COVER = "/tmp/.agentbench-work"  # in a child's fresh /tmp: what it sees in place of the work folder's parent


def work_cover(work: str) -> str | None:
    """The host folder a child's fresh mounts must cover so that it has its own work folder and sees nothing
    else of the folder holding it: None when the work folder lies under the fresh ``/tmp`` or ``/dev/shm``;
    otherwise its parent (``$TMPDIR`` elsewhere: ``/var/tmp``, a node's scratch disk, a home folder), or the
    work folder itself when that parent is ``/``."""
    if under(work, FRESH_MOUNTS):
        return None
    parent = posixpath.dirname(work)
    return work if parent == "/" else parent


def enter_child(
    mode: str,
    *,
    work: str | os.PathLike[str],
    disk: int | None,
    hidden: Sequence[str] = (),
    bind: Sequence[str] = (".stdout", ".stderr"),
    needed: Sequence[str] | None = None,
    links: Sequence[Sequence[str]] | None = None,
    seccomp: bytes | None = None,
    filter_later: bool = False,
) -> list[str]:
    """In the child, before any model code: private mounts, the work folder, then no privileges, its own user
    namespace and the seccomp filter (``drop_privileges``, whose list of what the machine did not allow it
    returns).

    The work folder is made again at the same path inside the new private ``/tmp`` (a work folder elsewhere,
    with ``$TMPDIR`` outside ``/tmp``: on a folder of that ``/tmp`` put over its parent, ``work_cover``), with a
    copy of what the original holds, except the names in ``bind`` (the output files), which are bound there:
    the child sees the files its output goes to, as without isolation. ``needed``/``links``: Python's
    folders and the links on the way to them (``needed_paths``/``python_links``, the default; a ``-S``
    launcher gets its caller's, since it cannot tell a venv's site folders itself): those the fresh
    ``/tmp`` and ``/dev/shm`` or a mask of ``hidden`` would cover are bound (made) again on top."""
    needed = needed_paths() if needed is None else [str(path) for path in needed]
    pairs = python_links() if links is None else [(str(link), str(text)) for link, text in links]
    pairs = [(link, text) for link, text in pairs if not under(link, needed)]  # (those come with their folder)
    unshare(CLONE_NEWNS | CLONE_NEWIPC)
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    work = Path(work)
    cover = work_cover(str(work))
    fresh = [*FRESH_MOUNTS, *([cover] if cover else [])]
    masks = [os.path.realpath(path) for path in hidden]
    # opened in the new mount namespace, before /tmp is covered: the sources of the copy and the binds
    original = os.open(work, os.O_RDONLY | os.O_DIRECTORY)
    outputs = {name: os.open(work / name, os.O_PATH) for name in bind}
    keep = {
        path: os.open(path, os.O_PATH)
        for path in needed
        if (under(path, fresh) or inside(path, masks)) and os.path.exists(path)
    }
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    tmpfs_options = "mode=1777"
    if disk:
        tmpfs_options += f",size={int(disk)},nr_inodes={max(4096, int(disk) // 16384)}"
    mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, tmpfs_options)
    if os.path.isdir("/dev/shm"):
        mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, tmpfs_options)
    if cover:  # a folder of the fresh /tmp (so the disk cap counts it) over the host folder holding the work folder
        os.mkdir(WORK_COVER, 0o755)
        mount(WORK_COVER, cover, None, MS_BIND)
    # Python or the package under /tmp (a venv, a test's site folder) and the links to it, again: after the
    # fresh tmpfs, before the masks (a hidden folder that is Python's folder, or in it, stays hidden) ...
    _python_again(keep, pairs, lambda path: under(path, fresh) and not inside(path, masks))
    for real in masks:
        if os.path.isdir(real):
            mount("tmpfs", real, "tmpfs", MS_NOSUID | MS_NODEV, "size=4096,nr_inodes=64,mode=0555")
        elif os.path.exists(real):
            mount("/dev/null", real, None, MS_BIND)
    # ... and, after them, what lies strictly inside a hidden folder (a venv in the cache folder): only it
    _python_again(keep, pairs, lambda path: inside(path, masks))
    for fd in keep.values():
        os.close(fd)
    work.mkdir(parents=True, exist_ok=cover == str(work))
    _copy_tree(original, work, skip=set(bind))
    os.close(original)
    for name, fd in outputs.items():
        (work / name).touch()
        mount(f"/proc/self/fd/{fd}", str(work / name), None, MS_BIND)
        os.close(fd)
    if mode == "root":  # the copy is the child's (the bound output files stay ours)
        for root, dirs, names in os.walk(work):
            for name in (root, *(os.path.join(root, n) for n in dirs + names)):
                if root != str(work) or os.path.basename(name) not in bind:
                    os.lchown(name, SANDBOX_UID, SANDBOX_GID)
    return drop_privileges(mode, seccomp, filter_later=filter_later)


def _python_again(keep: Mapping[str, int], links: Sequence[tuple[str, str]], where: Callable[[str], bool]) -> None:
    """Bind the folders ``keep`` (path -> an O_PATH descriptor of it) and make the ``links`` for which
    ``where(path)`` holds, read-only, at their own paths (in a child's fresh mounts)."""
    for path, fd in keep.items():
        if where(path):
            os.makedirs(path, mode=0o755, exist_ok=True)
            mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
            mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
    for link, text in links:
        if where(link) and not os.path.lexists(link):
            os.makedirs(os.path.dirname(link), mode=0o755, exist_ok=True)
            os.symlink(text, link)


def enter_isolated_jail(spec: dict[str, Any]) -> None:
    """The isolated form of ``limits.enter_jail``, for a launcher running in a bwrap sandbox: join the
    run's cgroup, take on the rlimits, make the child's private mounts and drop the privileges."""
    mode, limits = spec["isolation"], Limits(**spec["limits"])
    join_cgroup(spec.get("cgroup"))
    if mode == "root":  # as root no RLIMIT_NPROC (the cgroup counts); as uid 65534 it would count every worker
        apply_child_limits(limits)
    enter_child(
        mode,
        work=spec["work"],
        disk=limits.disk,
        hidden=limits.hidden,
        bind=spec.get("bind", (".stdout", ".stderr")),
        needed=spec.get("needed"),
        links=spec.get("links"),
        # the launcher traces its script to end the run's other processes at the script's exit: the filter, which
        # refuses ptrace, goes on the script (after it asked to be traced), not on the launcher
        filter_later=bool(spec.get("filter_script")),
    )
    if mode != "root":  # in its own user namespace RLIMIT_NPROC counts this run only
        apply_child_limits(limits)
    os.chdir(spec["work"])
    # the script (same uid) must neither inherit the status pipe nor reach it through /proc/<launcher>/fd;
    # its execve makes it dumpable again
    if spec.get("status_fd") is not None:
        os.set_inheritable(spec["status_fd"], False)
    make_non_dumpable()


def _copy_tree(fd: int, dest: Path, skip: set[str]) -> None:
    for root, _dirs, names, root_fd in os.fwalk(".", dir_fd=fd):
        base = dest / root
        base.mkdir(parents=True, exist_ok=True)
        for name in names:
            if root == "." and name in skip:
                continue
            with (
                open(os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=root_fd), "rb") as src,
                open(base / name, "wb") as out,
            ):
                shutil.copyfileobj(src, out)


def drop_privileges(mode: str, seccomp: bytes | None = None, *, filter_later: bool = False) -> list[str]:
    """Become uid ``SANDBOX_UID`` of a user namespace of the run's own, with no capabilities and no way to gain
    any, behind the seccomp filter ``seccomp`` (default: ``syscalls.program()``, compiled here).

    The run's own user namespace: what the kernel keeps per user (keyrings, inotify and message-queue counts)
    is kept per user namespace, so it starts empty and dies with the run. Returns what could not be done on
    this machine (the probe reports it; the run's ``isolation:`` line says so)."""
    missing: list[str] = []
    if mode == "root":
        drop_bounding_set()
        os.setgroups([])
        os.setresgid(SANDBOX_GID, SANDBOX_GID, SANDBOX_GID)
        os.setresuid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)  # from uid 0: clears every capability
        prctl(PR_SET_DUMPABLE, 1)  # (the uid change made /proc/self root's: its id maps must be ours to write)
        try:  # as the unprivileged user: a namespace mapping that user to itself, and nothing else
            own_user_namespace(SANDBOX_UID, SANDBOX_GID)
        except OSError as exc:
            missing.append(f"no user namespace per run ({exc.strerror or exc}; runs share uid {SANDBOX_UID})")
    else:
        own_user_namespace(os.geteuid(), os.getegid())
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    prctl(PR_SET_DUMPABLE, 1)  # the child may inspect itself (/proc/self); nothing of ours is in it
    code = seccomp if seccomp is not None else syscalls.program()
    if code is None:
        missing.append(f"no seccomp filter ({syscalls.unavailable()})")
    elif not filter_later:  # later: a launcher that runs no model code filters the script it starts instead
        syscalls.install(code)
    return missing


def own_user_namespace(uid: int, gid: int) -> None:
    """Enter a new user namespace in which the caller (``uid``/``gid`` outside) is ``SANDBOX_UID``, then drop
    every capability it grants there."""
    unshare(CLONE_NEWUSER)  # nested: whatever it grants counts only inside it
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"{SANDBOX_UID} {uid} 1")
    Path("/proc/self/gid_map").write_text(f"{SANDBOX_GID} {gid} 1")
    drop_bounding_set()  # (a new user namespace starts with a full bounding set)
    clear_capabilities()


def give_to_sandbox_user(root: str | os.PathLike[str]) -> None:
    """Make a folder tree (or one file) the children's (root mode: they run as uid 65534 and must write there)."""
    if not os.path.isdir(root) or os.path.islink(root):  # (os.walk yields nothing for a file)
        try:
            os.lchown(root, SANDBOX_UID, SANDBOX_GID)
        except FileNotFoundError:
            pass
        return
    for folder, dirs, names in os.walk(root):
        for name in (folder, *(os.path.join(folder, n) for n in dirs + names)):
            try:
                os.lchown(name, SANDBOX_UID, SANDBOX_GID)
            except FileNotFoundError:
                pass


def make_non_dumpable() -> None:
    """For the sandbox process: no core dumps, no ptrace, /proc/<pid>/mem and environ closed to its children."""
    prctl(PR_SET_DUMPABLE, 0)


def child_environment(env: Mapping[str, str]) -> dict[str, str]:
    """A child's environment under isolation: its home and temporary folder are the private /tmp."""
    return {**env, "HOME": "/tmp", "TMPDIR": "/tmp"}


MOUNT_RACE_TRIES = 5


def mount_race(text: str) -> bool:
    """bwrap failed to remount a mount point that vanished while it copied the mount table (a container
    of the same machine's Docker engine stopping, for example): a passing race, worth another try."""
    return text.lstrip().startswith("bwrap: Can't") and "mount" in text.split("\n", 1)[0]
