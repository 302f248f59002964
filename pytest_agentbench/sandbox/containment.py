"""What a run of model code can see and keep: one rule, one table, one way in.

The rule (``RULE``): *a run of model code shares no memory, process, writable file, container or kernel
state with a run of another (model, task, attempt), and sees no reference answer.* A run is one scoring child,
one tool call (``code_interpreter``) or one agent command; ``RunIdentity`` is the (model, task, attempt) it
belongs to.

``KINDS`` is the declarative table, one ``RunKind`` per kind of run: what it can see (read-only, writable and
masked paths), its network, its user and how long what it writes lives (per call or per item). ``docs/security.md``
carries the same table (``security_rows``; a test compares the two). A kind whose run does not yet meet the whole
rule says so in ``gap``: the table describes what happens, not what should.

The modules that run model code ask this module for their sandbox, never build one themselves
(``tests/test_architecture.py`` checks it): ``sandbox_argv`` gives the bwrap command line of a kind's sandbox
process (the fork server, the fresh-interpreter launcher, the host environment's holder and commands) from the
layout the table allows it, ``enter_run`` makes a forked child's private mounts and drops its privileges, and
``container_options`` gives a Docker container's containment options (user, read-only root, mounts, tmpfs,
network). This module is a thin layer over the primitives in ``isolation.py`` (bubblewrap, namespaces, the
child's fresh mounts); their docstrings say how each guarantee is made.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .isolation import SYSTEM_TOPS, Isolation, bwrap_argv, enter_child

RULE = (
    "A run of model code shares no memory, process, writable file, container or kernel state with a run of "
    "another (model, task, attempt), and sees no reference answer."
)

PER_CALL = "per call"
PER_ITEM = "per item"

SYSTEM = "system folders (" + ", ".join("/" + top for top in SYSTEM_TOPS) + "; those the machine has)"
PYTHON = "Python, its installed packages and this package"
# a scoring child may run a grading environment's interpreter instead: its venv is shown, even in the cache
SCORING_PYTHON = (
    "Python (the running one, or the grading environment's venv, --bench-set grading_envs, also where it lies in "
    "the cache), its installed packages and this package's source"
)
PRIVATE_TMP = "its own /tmp and /dev/shm (tmpfs, size-capped), holding a copy of its work folder"
MASKED = (
    "the data dir, the cache and the reports (--bench-data-dir, --bench-cache-dir, --bench-report-dir)",
    "the controller's home folders",
    "the checksum key (in the cache, or $AGENTBENCH_SECRET_FILE)",
)
SANDBOX_USER = "uid 65534, no capabilities, no_new_privs"
# the kernel surfaces: what the kernel keeps per user, the system calls, the environment
OWN_USER_NAMESPACE = (
    "its own, made for the run (uid 65534 in it; keyrings, message-queue and inotify counts start empty and "
    "die with it); where the machine allows none, the isolation line says so and --bench-require-isolation "
    "refuses the run"
)
SECCOMP_FILTER = (
    "libseccomp filter (sandbox/syscalls.py): what Docker's default profile refuses (keyrings, bpf, perf, "
    "userfaultfd, ptrace, mounts and namespaces, io_uring, modules, clocks, personality flags) fails with EPERM"
)
ALLOWLISTED_ENV = (
    "allowlist (limits.passes_to_children): PATH, LANG/LANGUAGE/LC_*, HOME and TMPDIR (its own /tmp), thread "
    "counts, PYTHONUNBUFFERED, MPLBACKEND/PYTHONHASHSEED/PYTHONDONTWRITEBYTECODE, this package's folder on "
    "PYTHONPATH, plus what the benchmark declares"
)


@dataclass(frozen=True)
class RunIdentity:
    """The run a piece of model code belongs to: what it may share (its own earlier writes of the same item) is
    bounded by this; a run of another identity shares nothing with it."""

    model: str
    task: str
    attempt: int = 0

    def describe(self) -> str:
        return f"{self.model} / {self.task} / attempt {self.attempt}"


@dataclass(frozen=True)
class RunKind:
    """One kind of run of model code, as the table declares it.

    ``what``: scoring, tool call or agent command; ``where``: host, Docker or Slurm node; ``layout``: the
    ``bwrap_argv`` arguments its sandbox process may be given (bwrap kinds; empty for Docker); ``network_allowed``:
    whether its sandbox may keep a network (the host commands' own per-item namespace); ``gap``: what of
    ``RULE`` it does not meet yet (empty: it meets it). The kernel surfaces, denied by default: ``user_namespace``
    (what the kernel keeps per user), ``seccomp`` (the system calls refused), ``environment`` (what it
    inherits)."""

    name: str
    what: str
    where: str
    read_only: tuple[str, ...]
    writable: tuple[str, ...]
    masked: tuple[str, ...]
    network: str
    user: str
    lifetime: str
    how: str
    layout: frozenset[str] = frozenset()
    network_allowed: bool = False
    gap: str = ""
    docker: tuple[tuple[str, Any], ...] = ()  # Docker kinds: the ``docker run`` options containment sets
    user_namespace: str = OWN_USER_NAMESPACE
    seccomp: str = SECCOMP_FILTER
    environment: str = ALLOWLISTED_ENV

    @property
    def bwrap(self) -> bool:
        return bool(self.layout)


SCORING_FORK = "scoring-fork"
SCORING_SUBPROCESS = "scoring-subprocess"
TOOL_CALL_HOST = "tool-call-host"
TOOL_CALL_DOCKER = "tool-call-docker"
AGENT_COMMAND_HOST = "agent-command-host"
AGENT_COMMAND_DOCKER = "agent-command-docker"
EXTERNAL_AGENT_DOCKER = "external-agent-docker"
SLURM_NODE = "slurm-node"


def host_script(name: str, what: str, how: str, gap: str = "", other_python: bool = False) -> RunKind:
    """A kind of run that is one Python script on this machine's sandbox executors (scoring, host tool calls);
    ``other_python``: its sandbox may run another interpreter than the running one (a grading environment)."""
    return RunKind(
        name,
        what,
        "host",
        read_only=(SYSTEM, SCORING_PYTHON if other_python else PYTHON),
        writable=(PRIVATE_TMP,),
        masked=MASKED,
        network="none (own network namespace)",
        user=SANDBOX_USER,
        lifetime=PER_CALL,
        how=how,
        layout=frozenset({"writable", "python"} if other_python else {"writable"}),
        gap=gap,
    )


# Docker runs keep the engine's own kernel surfaces: its default seccomp profile, the container's namespaces
DOCKER_USER_NAMESPACE = (
    "the engine's (a container is its own IPC namespace; per-uid state such as keyrings is closed by the profile)"
)
DOCKER_SECCOMP = "Docker's default profile"
# what an external agent starts under in its container or sandbox (command_limit.Guard)
LIMIT_FILTER = "the per-command limit's own filter: no signal, ptrace or pidfd signal aimed at its supervisor (EPERM)"
DOCKER_ENV = "the image's, plus what the harness sets (none of the controller's)"

# what a Docker tool call's container is given beyond its network (the tool call's row of the table)
TOOL_CALL_CONTAINER: tuple[tuple[str, Any], ...] = (
    ("read_only", True),
    ("tmpfs", {"/tmp": "rw,exec,nosuid,nodev,size=1g,mode=1777"}),
    ("cap_drop", ["ALL"]),
    ("security_opt", ["no-new-privileges"]),
)

# an external agent's container (--bench-agent in Docker): its commands are never root nor can become it
AGENT_USER = "65534:65534"
EXTERNAL_AGENT_CONTAINER: tuple[tuple[str, Any], ...] = (("security_opt", ["no-new-privileges"]),)
# the item's metering proxy: a unix socket in a folder of this machine (mode 0700), bound read-only here in the
# container, where only root (the forwarder to the container's loopback) can open it
PROXY_MOUNT = "/run/agentbench-proxy"

KINDS: dict[str, RunKind] = {
    kind.name: kind
    for kind in (
        host_script(
            SCORING_FORK,
            "scoring",
            "a child forked from the worker's fork server (one bwrap sandbox per interpreter), in fresh PID, mount "
            "and IPC namespaces",
            other_python=True,
        ),
        host_script(
            SCORING_SUBPROCESS, "scoring", "a fresh interpreter in a bwrap sandbox of its own", other_python=True
        ),
        host_script(
            TOOL_CALL_HOST,
            "tool call",
            "the scoring executor's sandbox (--bench-set executor), a fresh folder per call",
        ),
        RunKind(
            TOOL_CALL_DOCKER,
            "tool call",
            "Docker",
            read_only=("the image's whole file system",),
            writable=("a private 1 GiB tmpfs /tmp (the call's folder and home)", "its own /dev/shm"),
            masked=(),
            network="--bench-set docker_network",
            user="uid 65534 (docker exec --user), no capabilities, no-new-privileges",
            lifetime=PER_CALL,
            how="a fresh container per call, removed after it; the next call starts when it is gone",
            gap="with a network other than none, calls of other workers running at the same time share it",
            docker=TOOL_CALL_CONTAINER,
            user_namespace=DOCKER_USER_NAMESPACE,
            seccomp=DOCKER_SECCOMP,
            environment=DOCKER_ENV,
        ),
        RunKind(
            AGENT_COMMAND_HOST,
            "agent command",
            "host",
            read_only=(SYSTEM, PYTHON, "an external agent's install (--bench-agent), outside the workspace"),
            writable=(
                "the item's workspace (at its path, or at --bench-set workspace_root)",
                "the item's own home and /tmp",
            ),
            masked=(
                *MASKED,
                "the workspace's host path when it is relocated",
                "the capsule store, extraction cache and preinstalled folder",
            ),
            network="the item's own network namespace (--bench-set host_network: user or none)",
            user=SANDBOX_USER,
            lifetime=PER_ITEM,
            how="a bwrap sandbox per command, joined to the item's PID and network namespaces",
            layout=frozenset({"writable", "readable", "tmp", "hidden", "devices", "relocated", "pidns_fd", "info_fd"}),
            network_allowed=True,
            seccomp=f"{SECCOMP_FILTER}; an external agent (--bench-agent) adds {LIMIT_FILTER}",
        ),
        RunKind(
            AGENT_COMMAND_DOCKER,
            "agent command",
            "Docker",
            read_only=(),
            writable=("the whole container file system (the workspace copied in)",),
            masked=(),
            network="--bench-set docker_network",
            user="the image's user (root in the default image)",
            lifetime=PER_ITEM,
            how="docker exec in the item's own container; inputs preinstalled in the image are copied into the "
            "workspace and then deleted before the agent's first command",
            user_namespace=DOCKER_USER_NAMESPACE,
            seccomp=DOCKER_SECCOMP,
            environment=DOCKER_ENV,
        ),
        RunKind(
            EXTERNAL_AGENT_DOCKER,
            "external agent",
            "Docker",
            read_only=(
                "the image with the agent's layer (root's files: the agent's install, the system)",
                "the item's metering proxy, on the container's loopback only",
            ),
            writable=(
                "the whole container file system where its user may write: the item's workspace (given to it), "
                "/tmp and its home (the image's and the layer's files are root's)",
            ),
            masked=("the proxy's socket folder (root's, mode 0700)",),
            network="--bench-set docker_network (the proxy is reached on the loopback, also with none)",
            user=f"uid {AGENT_USER.split(':')[0]} (docker exec --user), no-new-privileges",
            lifetime=PER_ITEM,
            how="docker exec in the item's own container, made from the task image plus the agent's layer; the "
            "proxy's unix socket is bind-mounted read-only and relayed to 127.0.0.1 by a root forwarder; its commands "
            "held to the per-command limit by its parent in the container (limited_agent), which the agent cannot "
            "stop, signal nor trace",
            docker=EXTERNAL_AGENT_CONTAINER,
            user_namespace=DOCKER_USER_NAMESPACE,
            seccomp=f"{DOCKER_SECCOMP}, plus {LIMIT_FILTER}",
            environment=DOCKER_ENV,
        ),
        RunKind(
            SLURM_NODE,
            "any",
            "Slurm node",
            read_only=(SYSTEM, PYTHON),
            writable=(PRIVATE_TMP, "agent commands: the item's workspace, home and /tmp"),
            masked=MASKED,
            network="as on the host, per kind",
            user=SANDBOX_USER,
            lifetime="as on the host, per kind",
            how="the task's worker runs on the node and uses the host kinds' sandboxes there",
            user_namespace="as on the host: " + OWN_USER_NAMESPACE + " (the node's self-test refuses a node without)",
        ),
    )
}


def kind_of(name: str) -> RunKind:
    if name not in KINDS:
        raise ValueError(f"unknown kind of run {name!r}; the kinds are {', '.join(KINDS)}")
    return KINDS[name]


def sandbox_argv(kind: str, isolation: Isolation, *, network: bool = False, **layout: Any) -> list[str]:
    """The bwrap command line of ``kind``'s sandbox process (its command follows). ``layout`` takes the
    ``isolation.bwrap_argv`` arguments the table allows the kind (``RunKind.layout``); anything else, or a network
    for a kind the table gives none, is refused: the caller cannot widen what its runs see."""
    run = kind_of(kind)
    if not run.bwrap:
        raise ValueError(f"a {run.what} in {run.where} ({kind}) has no bwrap sandbox")
    extra = sorted(set(layout) - run.layout)
    if extra:
        raise ValueError(
            f"the sandbox of {kind} takes no {', '.join(extra)} (allowed: {', '.join(sorted(run.layout))})"
        )
    if network and not run.network_allowed:
        raise ValueError(f"the sandbox of {kind} has no network ({run.network})")
    python = layout.pop("python", None)  # an ``interpreter.Python``: its folders instead of the running one's
    if python is not None:
        layout["python"] = (python.needed, python.links)
    return bwrap_argv(isolation, network=network, **layout)


def enter_run(
    kind: str,
    mode: str,
    *,
    work: str | os.PathLike[str],
    disk: int | None,
    hidden: Sequence[str] = (),
    bind: Sequence[str] = (".stdout", ".stderr"),
) -> list[str]:
    """In a forked child of ``kind``'s sandbox process, before any model code: its own mounts (a fresh /tmp with
    its work folder, the masks), then no privileges, its own user namespace and the seccomp filter
    (``isolation.enter_child``; returns what of those the machine did not allow)."""
    if kind_of(kind).lifetime != PER_CALL:
        raise ValueError(f"{kind} is not a per-call run of a forked child")
    return enter_child(mode, work=work, disk=disk, hidden=hidden, bind=bind)


def container_options(kind: str, *, network: str, proxy_folder: str | None = None) -> dict[str, Any]:
    """The containment options of a Docker container running ``kind`` (``docker run`` keyword arguments): its
    network, and the read-only root, tmpfs and privileges the table gives it (``RunKind.docker``).
    ``proxy_folder``: the host folder of the item's proxy socket, bound read-only at ``PROXY_MOUNT`` (an
    external agent's container only)."""
    run = kind_of(kind)
    if run.where != "Docker":
        raise ValueError(f"{kind} does not run in Docker")
    options: dict[str, Any] = {"network_mode": network, **dict(run.docker)}
    if proxy_folder is not None:
        if kind != EXTERNAL_AGENT_DOCKER:
            raise ValueError(f"a container of {kind} has no metering proxy")
        options["volumes"] = {proxy_folder: {"bind": PROXY_MOUNT, "mode": "ro"}}
    return options


COMMAND_LIMIT = Path(__file__).with_name("command_limit.py")
NO_PYTHON = (
    "the plugin's per-command time limit (--bench-set agent_command_timeout) needs python3 in the agent's environment "
    "(on its PATH); use an image that has it"
)


def limited_agent(script: str, *, seconds: float, log_file: str) -> str:
    """The bash command that runs an external agent's bash ``script`` under the plugin's per-command time limit:
    ``command_limit.py``, run with the environment's ``python3`` in the agent's own sandbox or container, as its
    user, is the agent's parent and ends every command of it older than ``seconds``, saying so in ``log_file``
    (JSON lines). It starts nothing but the agent, and has no right the agent lacks; the agent starts under a
    seccomp filter of its own that keeps it from stopping, signalling or tracing it."""
    # the program comes in a variable it takes out of its environment, so that neither the agent's environment
    # nor the process list the model may read holds it
    run = 'import os; exec(os.environ.pop("AGENTBENCH_COMMAND_LIMIT"))'
    argv = ["python3", "-c", run, f"{seconds:g}", log_file, "bash", "-c", script]
    check = f"command -v python3 >/dev/null || {{ echo {shlex.quote(NO_PYTHON)} >&2; exit 127; }}\n"
    program = f"export AGENTBENCH_COMMAND_LIMIT={shlex.quote(COMMAND_LIMIT.read_text())}\n"
    return f"{check}{program}exec {shlex.join(argv)}\n"


def command_user(kind: str) -> str | None:
    """The user a Docker container's commands of ``kind`` run as (``docker exec --user``); None: the image's."""
    return AGENT_USER if kind == EXTERNAL_AGENT_DOCKER else None


SECURITY_COLUMNS = (
    "Run",
    "Where",
    "Read-only",
    "Writable",
    "Masked",
    "Network",
    "User",
    "Lifetime",
    "User namespace",
    "Seccomp",
    "Environment",
    "Not met yet",
)


def security_rows(kinds: Iterable[RunKind] | None = None) -> list[str]:
    """The table's rows as ``docs/security.md`` shows them (markdown, one line per kind)."""
    rows = [
        "| " + " | ".join(SECURITY_COLUMNS) + " |",
        "|" + "|".join("---" for _ in SECURITY_COLUMNS) + "|",
    ]
    for run in KINDS.values() if kinds is None else kinds:
        cells = (
            f"{run.what} ({run.name})",
            run.where,
            "; ".join(run.read_only) or "-",
            "; ".join(run.writable) or "-",
            "; ".join(run.masked) or "-",
            run.network,
            run.user,
            run.lifetime,
            run.user_namespace,
            run.seccomp,
            run.environment,
            run.gap or "-",
        )
        rows.append("| " + " | ".join(cells) + " |")
    return rows
