"""One containment primitive (``sandbox/containment.py``): the rule, the table of kinds of run, the one way in.

1. Architecture, read from the source with ``ast``: only ``sandbox/isolation.py`` (the primitives) and
   ``sandbox/containment.py`` build a sandbox (``bwrap_argv``, ``enter_child``, the ``bwrap`` program); every
   place in the package that starts a process, forks, or runs a command in a container is declared here, as
   running model code (then its sandbox comes from a containment entry point, checked) or not (with why). A new
   way of starting model code fails the test until it is declared and asks containment for its sandbox. Each
   rule is also run on a made-up package with known breaches, so a rule that reads nothing fails.
2. The table against the code: the kinds' declared read-only and masked paths against the sandbox's real
   command line, and the table's refusals (a layout or a network the kind is not given).
3. ``docs/security.md`` shows the table as ``security_rows`` gives it, row for row.
"""

from __future__ import annotations

import ast
import os
import shutil
from pathlib import Path

import pytest

from pytest_agentbench.core.data import secret_path
from pytest_agentbench.sandbox import containment
from pytest_agentbench.sandbox.isolation import SYSTEM_TOPS, Isolation, needed_paths, system_folders, under

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "pytest_agentbench"
SECURITY_DOC = REPO / "docs" / "security.md"

# the modules that may build a sandbox themselves: the primitives, and the one layer over them
SANDBOX_BUILDERS = ("sandbox/isolation.py", "sandbox/containment.py")
BUILDING = ("bwrap_argv", "enter_child")
ENTRY_POINTS = ("sandbox_argv", "enter_run", "container_options")

# Every process start, fork and container command in the package that runs model code: (module, function) ->
# the function (same module) whose sandbox it runs in, which must call a containment entry point.
MODEL_CODE_STARTS = {
    ("sandbox/executors.py", "SubprocessExecutor.run_once"): "SubprocessExecutor.run_once",
    ("sandbox/forkserver.py", "ForkServer._start_once"): "ForkServer._start_once",
    ("sandbox/forkserver.py", "serve"): "_child",
    ("envs/host.py", "HostEnvironment._run"): "Holder._argv",
    ("envs/host.py", "Holder._start"): "Holder._argv",
    ("envs/docker.py", "DockerEnvironment._exec"): "DockerFactory.start",
    ("envs/docker.py", "DockerEnvironment.run"): "DockerFactory.start",
    ("envs/docker.py", "DockerFactory.start"): "DockerFactory.start",
    ("envs/docker.py", "start_call_container"): "call_container_options",
    ("envs/docker.py", "CallContainer._exec"): "call_container_options",
    ("envs/docker.py", "CallContainer.run_source"): "call_container_options",
}
# ... and those that run none (what they run instead)
OTHER_STARTS = {
    ("sandbox/isolation.py", "_probe"): "the isolation probe's own self-test code (the primitive itself)",
    ("sandbox/isolation.py", "self_test"): "the probe's child, inside the probe's sandbox (the primitive itself)",
    ("sandbox/isolation.py", "RunNamespace.__init__"): "`sleep`, the init of a run's PID namespace",
    ("envs/host.py", "UserNetwork.__init__"): "slirp4netns, the item's network stack, outside the sandbox",
    ("envs/docker.py", "DockerEnvironment.put_workspace"): "mkdir of the workspace before any command",
    ("envs/docker.py", "DockerEnvironment.remove_paths"): "rm of preinstalled inputs, before any agent command",
    ("envs/docker.py", "start_nested_daemon"): "the nested dockerd of a --bench-set=docker_dind=true container",
    ("envs/docker.py", "DockerEnvironment.give_to_user"): "chown of the workspace to the agent's user, before it runs",
    ("envs/docker.py", "DockerEnvironment.loopback_listener"): "the proxy's forwarder (root, this package's code)",
    ("envs/docker.py", "LayerBuild.__enter__"): "the container building an agent's image layer (no network)",
    ("envs/docker.py", "LayerBuild.run"): "an agent's install in its layer's build container, before any item",
    ("benchmarks/agent_layers.py", "wheelhouse"): "pip download of an external agent's wheels for its image layer",
    ("sandbox/integrity.py", "run_bounded"): "a bounded copy of this process for trusted comparisons",
    ("cli/tasks.py", "resume"): "pytest (the session)",
    ("cli/tasks.py", "become_session"): "pytest (the session)",
    ("pytest_plugin/provenance.py", "git_commit"): "git, for the run's provenance",
    ("pytest_plugin/distribution/remote.py", "ssh_effective_config"): "ssh -G, to read a remote host's settings",
    ("backends/slurm/commands.py", "run"): "sbatch, squeue, scontrol, scancel",
    ("core/host.py", "gpus"): "nvidia-smi -L",
    ("sandbox/interpreter.py", "describe"): "another interpreter telling its own folders (this package's code only)",
    ("benchmarks/scicode/gradingenvs.py", "build"): "venv and pip (or uv), building a grading environment",
    ("benchmarks/agents.py", "run_install_step"): "venv and pip or npm, installing an external agent (--bench-agent)",
    ("envs/host.py", "HostEnvironment.loopback_listener"): "a socket made in the item's network namespace, handed back",
    ("sandbox/command_limit.py", "start"): "an external agent, from inside the sandbox or container its environment "
    "made for it (envs/host.py, envs/docker.py): the per-command limit's supervisor is its parent there",
}
PROCESS_CALLS = {
    ("subprocess", "Popen"),
    ("subprocess", "run"),
    ("subprocess", "call"),
    ("subprocess", "check_call"),
    ("subprocess", "check_output"),
    ("os", "fork"),
    ("os", "forkpty"),
    ("os", "posix_spawn"),
    ("os", "posix_spawnp"),
    *(("os", name) for name in ("execv", "execve", "execvp", "execvpe", "execl", "execle", "execlp", "spawnv")),
}
CONTAINER_CALLS = ("exec_run", "exec_create", "exec_start")  # (and ``containers.run``/``containers.create``)


def call_name(node: ast.Call) -> tuple[str, str] | None:
    """(owner, name) of a call ``owner.name(...)`` or (``""``, name) of ``name(...)``."""
    func = node.func
    if isinstance(func, ast.Name):
        return "", func.id
    if isinstance(func, ast.Attribute):
        owner = func.value
        if isinstance(owner, ast.Name):
            return owner.id, func.attr
        if isinstance(owner, ast.Attribute):
            return owner.attr, func.attr
        return "?", func.attr
    return None


def is_start(node: ast.Call) -> bool:
    name = call_name(node)
    if name is None:
        return False
    if name in PROCESS_CALLS:
        return True
    return name[1] in CONTAINER_CALLS or name in (("containers", "run"), ("containers", "create"))


class Scan(ast.NodeVisitor):
    """Every call of one module, with the qualified name of the function it is in."""

    def __init__(self) -> None:
        self.scope: list[str] = []
        self.calls: list[tuple[str, ast.Call]] = []

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_Call(self, node: ast.Call) -> None:
        self.calls.append((".".join(self.scope) or "<module>", node))
        self.generic_visit(node)


def scan(folder: Path) -> dict[str, list[tuple[str, ast.Call]]]:
    out = {}
    for path in sorted(folder.rglob("*.py")):
        visitor = Scan()
        visitor.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        out[path.relative_to(folder).as_posix()] = visitor.calls
    return out


def is_bwrap(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and os.path.basename(node.value) == "bwrap"


def calls_bwrap(node: ast.Call) -> bool:
    """``which("bwrap")``, or a process started with ``["bwrap", ...]``."""
    name = call_name(node)
    if name is not None and name[1] == "which":
        return any(is_bwrap(arg) for arg in node.args)
    first = node.args[0] if node.args else None
    return is_start(node) and isinstance(first, (ast.List, ast.Tuple)) and bool(first.elts) and is_bwrap(first.elts[0])


def sandbox_builders_elsewhere(calls: dict[str, list[tuple[str, ast.Call]]]) -> list[str]:
    found = []
    for module, module_calls in calls.items():
        if module in SANDBOX_BUILDERS:
            continue
        for function, node in module_calls:
            name = call_name(node)
            uses_bwrap = calls_bwrap(node)
            if (name and name[1] in BUILDING) or uses_bwrap:
                found.append(f"{module}:{node.lineno} ({function}) builds a sandbox itself")
    return found


def undeclared_starts(calls: dict[str, list[tuple[str, ast.Call]]]) -> list[str]:
    declared = {*MODEL_CODE_STARTS, *OTHER_STARTS}
    return sorted(
        f"{module}:{node.lineno} ({function}) starts a process or a container command: declare it"
        for module, module_calls in calls.items()
        for function, node in module_calls
        if is_start(node) and (module, function) not in declared
    )


def unasked_sandboxes(calls: dict[str, list[tuple[str, ast.Call]]]) -> list[str]:
    """Model-code starts whose declared sandbox function asks containment for nothing."""
    out = []
    for (module, function), sandbox in MODEL_CODE_STARTS.items():
        asked = {
            call_name(node)[1]  # type: ignore[index]
            for where, node in calls.get(module, [])
            if where == sandbox and call_name(node) is not None
        }
        if not asked & set(ENTRY_POINTS):
            out.append(f"{module} {function}: its sandbox ({sandbox}) calls none of {', '.join(ENTRY_POINTS)}")
    return out


def stale_declarations(calls: dict[str, list[tuple[str, ast.Call]]]) -> list[str]:
    starts = {(module, function) for module, mc in calls.items() for function, node in mc if is_start(node)}
    return sorted(f"{m} {f} is declared but starts nothing" for m, f in {*MODEL_CODE_STARTS, *OTHER_STARTS} - starts)


@pytest.fixture(scope="module")
def calls() -> dict[str, list[tuple[str, ast.Call]]]:
    """The package's calls, read once by the tests that need them (not at collection)."""
    return scan(PACKAGE)


def test_the_package_is_read(calls):
    assert len(calls) > 100 and sum(len(c) for c in calls.values()) > 5000


def test_only_the_primitives_and_containment_build_a_sandbox(calls):
    assert sandbox_builders_elsewhere(calls) == []


def test_every_process_start_is_declared_and_model_code_asks_containment(calls):
    assert undeclared_starts(calls) == []
    assert unasked_sandboxes(calls) == []
    assert stale_declarations(calls) == []


MADE_UP = {
    # builds its own sandbox
    "sandbox/executors.py": "from .isolation import bwrap_argv\n"
    "class SubprocessExecutor:\n"
    "    def run_once(self):\n"
    "        import subprocess\n"
    "        subprocess.Popen(bwrap_argv(None) + ['python'])\n",
    # a new way of running model code, undeclared
    "envs/cloud.py": "import subprocess\ndef run(cmd):\n    subprocess.run(['ssh', 'x', cmd])\n",
    # calls bwrap by name
    "envs/lxc.py": "import shutil\ndef find():\n    return shutil.which('bwrap')\n",
}


def test_the_rules_find_known_breaches_in_a_made_up_package(tmp_path):
    for rel, text in MADE_UP.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    calls = scan(tmp_path)
    assert sandbox_builders_elsewhere(calls) == [
        "envs/lxc.py:3 (find) builds a sandbox itself",
        "sandbox/executors.py:5 (SubprocessExecutor.run_once) builds a sandbox itself",
    ]
    assert undeclared_starts(calls) == ["envs/cloud.py:3 (run) starts a process or a container command: declare it"]
    assert any(line.startswith("sandbox/executors.py SubprocessExecutor.run_once") for line in unasked_sandboxes(calls))


# ---------------------------------------------------------------- the table against the code

BWRAP = Isolation("userns", "", shutil.which("bwrap") or "/usr/bin/bwrap")


def bound(argv: list[str], option: str) -> list[tuple[str, str]]:
    return [(argv[i + 1], argv[i + 2]) for i, arg in enumerate(argv[:-2]) if arg == option]


@pytest.mark.parametrize("kind", [k.name for k in containment.KINDS.values() if k.bwrap])
def test_a_kinds_sandbox_shows_what_the_table_declares(kind, tmp_path):
    """Read-only: the system folders the table names and Python, nothing else; writable: only what the caller
    gave; masked: the checksum key wherever it lies in sight, the home folders replaced."""
    run = containment.kind_of(kind)
    for top in SYSTEM_TOPS:
        assert f"/{top}" in containment.SYSTEM, top  # the table names every system folder the sandbox shows
    python = containment.SCORING_PYTHON if "python" in run.layout else containment.PYTHON
    # (the host agent command may also show an external agent's install, read-only, when the caller names one)
    assert run.read_only[:2] == (containment.SYSTEM, python)
    work = tmp_path / "work"
    work.mkdir()
    argv = containment.sandbox_argv(kind, BWRAP, writable=[str(work)])
    read_only = [source for source, _ in bound(argv, "--ro-bind") + bound(argv, "--ro-bind-try")]
    allowed = [*system_folders(), *needed_paths(), "/dev/null", os.path.realpath("/etc/resolv.conf")]
    assert [path for path in read_only if not under(path, allowed)] == []
    assert [source for source, _ in bound(argv, "--bind")] == [str(work)]
    if under(str(secret_path()), system_folders()):
        assert str(secret_path()) in [target for _, target in bound(argv, "--ro-bind")]


@pytest.mark.parametrize("kind", [containment.SCORING_FORK, containment.SCORING_SUBPROCESS])
def test_a_scoring_sandbox_of_another_interpreter_shows_that_ones_folders(kind, tmp_path):
    """A grading environment's venv (here: folders standing for one, inside a cache folder) is bound read-only
    in its sandbox, and the running interpreter's own folders outside the system folders are not shown."""
    from pytest_agentbench.sandbox.interpreter import Python

    cache = tmp_path / "cache"
    venv = cache / "grading-envs" / "x-0123"
    (venv / "lib").mkdir(parents=True)
    other = Python(str(venv / "bin" / "python"), (str(venv),), ((str(venv / "bin" / "python"), "python3"),))
    work = tmp_path / "work"
    work.mkdir()
    argv = containment.sandbox_argv(kind, BWRAP, writable=[str(work)], python=other)
    read_only = [source for source, _ in bound(argv, "--ro-bind")]
    assert str(venv) in read_only
    assert [
        p for p in needed_paths() if p not in other.needed and p in read_only and not under(p, system_folders())
    ] == []
    with pytest.raises(ValueError, match="takes no python"):
        containment.sandbox_argv(containment.AGENT_COMMAND_HOST, BWRAP, python=other)


def test_the_table_refuses_what_it_does_not_give(tmp_path):
    with pytest.raises(ValueError, match="has no network"):
        containment.sandbox_argv(containment.SCORING_SUBPROCESS, BWRAP, network=True, writable=[str(tmp_path)])
    with pytest.raises(ValueError, match="takes no relocated"):
        containment.sandbox_argv(containment.SCORING_FORK, BWRAP, relocated=[(str(tmp_path), "/capsule")])
    with pytest.raises(ValueError, match="has no bwrap sandbox"):
        containment.sandbox_argv(containment.TOOL_CALL_DOCKER, BWRAP)
    with pytest.raises(ValueError, match="does not run in Docker"):
        containment.container_options(containment.SCORING_FORK, network="none")
    with pytest.raises(ValueError, match="unknown kind of run"):
        containment.kind_of("scoring")


def test_every_kind_of_run_the_rule_names_has_an_entry():
    """Scoring, tool call and agent command; host, Docker and a Slurm node."""
    pairs = {(k.what, k.where) for k in containment.KINDS.values()}
    for what in ("scoring", "tool call", "agent command"):
        assert (what, "host") in pairs
    for what in ("tool call", "agent command"):
        assert (what, "Docker") in pairs
    assert any(k.where == "Slurm node" for k in containment.KINDS.values())
    assert all(k.lifetime for k in containment.KINDS.values())


# ---------------------------------------------------------------- the docs


def test_security_doc_states_the_rule_and_shows_the_table_row_for_row():
    text = SECURITY_DOC.read_text()
    head = text[: text.index("\n## ", text.index("\n## ") + 1)]  # the first section
    assert containment.RULE in " ".join(head.split()), "the rule, word for word, in the first section"
    table = [line for line in text.splitlines() if line.startswith("| ") and "(" in line.split("|")[1]]
    rows = containment.security_rows()
    assert table == rows[2:], "docs/security.md's table of runs is not containment.security_rows()"
    assert rows[0] in text.splitlines() and rows[1] in text.splitlines()


@pytest.mark.parametrize("kind", [k.name for k in containment.KINDS.values() if k.where == "Docker"])
def test_a_containers_options_are_what_the_table_declares(kind):
    """The user, root file system and tmpfs a container gets agree with the kind's row: a row that says the
    image's user and a writable root gets neither ``user`` nor ``read_only``, and the other way round."""
    run = containment.kind_of(kind)
    options = containment.container_options(kind, network="none")
    assert options["network_mode"] == "none"
    # a container of the image's user, or one whose runs exec as another (the tool call's uid 65534, by exec)
    assert ("user" in options) == (not run.user.startswith(("the image's user", "uid 65534"))), (run.user, options)
    whole_root_writable = any(w.startswith("the whole container file system") for w in run.writable)
    assert bool(options.get("read_only")) == (not whole_root_writable), (run.writable, options)
    assert ("tmpfs" in options) == any("tmpfs" in w for w in run.writable), (run.writable, options)
