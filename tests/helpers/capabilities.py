"""What a test needs from the machine, in one place: ``needs("docker")`` returns what the capability gives
(the test image, the isolation, the hosts' info...) or ends the test. Locally a missing capability skips the
test with the reason and the set-up that provides it; under ``CI=true`` it fails the test, because CI must
have everything (.ci/run installs it before the tests).

Capabilities (the set-up that provides each one is named in its message):

- ``bwrap``: children that run model code can be isolated (bubblewrap + user namespaces); gives the
  ``Isolation``.
- ``slirp4netns``: the isolated host environment's commands can have outbound network.
- ``outbound-address``: a non-loopback IPv4 address of this machine (stands in for the internet); gives it.
- ``docker``: a reachable engine with the test image (.ci/docker-setup); gives the image name.
- ``docker-dind``: ``docker`` plus the nested-daemon image (.ci/docker-setup); gives that image's name.
- ``ssh``: an ssh client; gives its path.
- ``sshd``: the two loopback SSH worker hosts (.ci/ssh-setup) and an ssh client; gives the info .ci/ssh-setup
  wrote (a dict).
- ``slurm``: the two-node Slurm test cluster is up (.ci/slurm-setup); gives the info .ci/slurm-setup wrote (a
  dict: the state folder, each node's slurmd pid file and start command).
- ``chromium``: a Chromium to open report pages in; gives its path.
- ``dev-tool``: ``needs("dev-tool", "mypy")``: a tool of the ``test`` extra is installed; gives its module.
- ``compat-venv``: ``needs("compat-venv", PYTEST, XDIST)`` builds (or reuses) the venv of .ci/compat-venv;
  gives its python.
- ``mini-swe-agent``, ``codex``: the pinned agent is installed in ``$AGENTBENCH_AGENTS_DIR`` (default
  /tmp/agentbench-agents; .ci/agents installs both); gives that folder.
- ``grading-envs``: SciCode's built-in grading environments (2024, 2025) are built for this interpreter in
  ``$AGENTBENCH_GRADING_ENVS`` (default /tmp/agentbench-grading-envs; .ci/grading-envs builds them); gives that
  folder.

A test that finds a capability lacking only at run time (an engine that refuses privileged containers) calls
``missing(capability, problem)``, which decides skip or fail the same way.

No probe changes the machine: set-up scripts run as root in .ci/run (or by hand), never from a test.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import pytest

REPO = Path(__file__).resolve().parents[2]
SSH_INFO = Path(os.environ.get("AGENTBENCH_SSH_INFO", "/run/agentbench-ssh.json"))
SLURM_INFO = Path(os.environ.get("AGENTBENCH_SLURM_INFO", "/run/agentbench-slurm.json"))
SLURM_NODES = ("node1", "node2")
TEST_IMAGE_ENV = "AGENTBENCH_TEST_IMAGE"
DEFAULT_TEST_IMAGE = "agentbench-test:bookworm"
DIND_IMAGE = "agentbench-dind:bookworm"


class Lacking(Exception):
    """A probe's finding: the capability is not there, and why (with the set-up that provides it)."""


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def missing(capability: str, problem: str) -> NoReturn:
    """End the test for a lacking capability: fail under CI=true (CI must have it), skip elsewhere."""
    if in_ci():
        pytest.fail(f"CI=true and {capability} is missing: {problem}", pytrace=False)
    pytest.skip(f"{capability} is missing: {problem}")


def needs(capability: str, *args: str) -> Any:
    """What ``capability`` gives (see the module docstring), or the end of the test (see ``missing``)."""
    probe = PROBES.get(capability)
    if probe is None:
        raise ValueError(f"unknown capability {capability!r}; known: {', '.join(sorted(PROBES))}")
    try:
        return probe(*args)
    except Lacking as lack:
        missing(capability, str(lack))


# ---- the probes: each returns what the capability gives or raises Lacking -------------------------------
def isolation() -> Any:
    from pytest_agentbench.sandbox.isolation import probe

    found = probe()
    if not found.active:
        raise Lacking(f"this machine cannot isolate children (install bubblewrap): isolation {found.describe()}")
    return found


def slirp4netns() -> str:
    path = shutil.which("slirp4netns")
    if path is None:
        raise Lacking("slirp4netns is not installed (apt-get install -y slirp4netns)")
    return path


def outbound_address() -> str:
    from helpers.network_listeners import machine_addresses

    found = machine_addresses()
    if not found:
        raise Lacking("this machine has no non-loopback IPv4 address to stand in for the internet")
    return found[0]


def docker_image(image: str | None = None) -> str:
    image = image or os.environ.get(TEST_IMAGE_ENV, DEFAULT_TEST_IMAGE)
    try:
        import docker

        client = docker.from_env()
        client.ping()
    except Exception as exc:  # no SDK, no socket, engine down
        where = os.environ.get("DOCKER_HOST") or "the local socket"
        raise Lacking(
            f"no Docker engine reachable at {where} ({type(exc).__name__}); run .ci/docker-setup as root"
        ) from exc
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        raise Lacking(f"the test image {image} is not on the engine; build it with .ci/docker-setup") from None
    return image


def dind_image() -> str:
    docker_image()  # the engine and the test image first: their message names the engine
    return docker_image(DIND_IMAGE)


def ssh_client() -> str:
    path = shutil.which("ssh")
    if path is None:
        raise Lacking("no ssh client (apt-get install -y openssh-client)")
    return path


def ssh_hosts() -> dict:
    if not SSH_INFO.is_file():
        raise Lacking(f"no loopback SSH hosts: {SSH_INFO} is missing (run .ci/ssh-setup as root)")
    ssh_client()
    return json.loads(SSH_INFO.read_text())


def slurm_nodes_down() -> str | None:
    """Why the two test nodes are not both answering (sinfo's view), or None when they are."""
    try:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t %G"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"sinfo failed: {exc}"
    states = {line.split()[0]: line.split()[1] for line in out.splitlines() if line.split()}
    if all(states.get(n, "").startswith(("idle", "mix", "alloc", "comp")) for n in SLURM_NODES):
        return None
    return f"the two-node test cluster is not up (sinfo: {out.strip() or 'nothing'}; run .ci/slurm-setup as root)"


def slurm_cluster() -> dict:
    if shutil.which("sbatch") is None:
        raise Lacking("the Slurm commands are not installed (run .ci/slurm-setup as root)")
    problem = slurm_nodes_down()
    if problem:
        raise Lacking(problem)
    if not SLURM_INFO.is_file():
        raise Lacking(f"no Slurm test cluster info: {SLURM_INFO} is missing (run .ci/slurm-setup as root)")
    return json.loads(SLURM_INFO.read_text())


def chromium() -> str:
    from helpers.cdp import chromium_path

    path = chromium_path()
    if path is None:
        raise Lacking("Chromium is not installed: CI must `apt-get install chromium` for the report tests")
    return path


# (pytest, pytest-xdist) at the ends of the supported range: the floor of pyproject.toml's bounds and the newest
# releases, which constraints.txt pins for the suite itself (.ci/run builds the venvs of the pairs before the last)
COMPAT_MATRIX = [("8.0.0", "3.5.0"), ("9.2.0", "3.8.0")]


def compat_venv(pytest_version: str, xdist_version: str) -> str:
    built = subprocess.run(
        [str(REPO / ".ci" / "compat-venv"), pytest_version, xdist_version], capture_output=True, text=True, timeout=1200
    )
    if built.returncode != 0:
        raise Lacking(f"cannot build the pytest {pytest_version} / xdist {xdist_version} venv: {built.stderr[-1500:]}")
    return built.stdout.strip().splitlines()[-1]


GRADING_ENVS_ROOT = "/tmp/agentbench-grading-envs"  # .ci/grading-envs's default


def grading_envs() -> Path:
    """The folder holding the built-in grading environments, each built whole for this interpreter."""
    import sys

    from pytest_agentbench.benchmarks.scicode import gradingenvs

    root = Path(os.environ.get(gradingenvs.ROOT_ENV) or GRADING_ENVS_ROOT)
    base = os.path.realpath(sys.executable)
    for spec in gradingenvs.load_specs().values():
        digest = spec.digest(base, sys.version.split()[0])
        if not gradingenvs.finished(root / f"{spec.name}-{digest}", digest):
            raise Lacking(
                f"grading environment {spec.name} is not built in {root} for {sys.executable}: run "
                f".ci/grading-envs {sys.executable} (AGENTBENCH_GRADING_ENVS={root})"
            )
    return root


AGENTS_ROOT = "/tmp/agentbench-agents"


def installed_agent(name: str) -> Path:
    from pytest_agentbench.benchmarks import agents

    root = Path(os.environ.get(agents.AGENTS_DIR_ENV) or AGENTS_ROOT)
    folder = root / f"{name}-{agents.PINNED[name]}"
    if not (folder / "installed.json").is_file():
        raise Lacking(
            f"{name} {agents.PINNED[name]} is not installed in {root}: run .ci/agents (AGENTBENCH_AGENTS_DIR={root})"
        )
    return root


def dev_tool(module: str) -> str:
    """A development tool of the ``test`` extra (mypy, ruff), run as ``python -m MODULE``."""
    if importlib.util.find_spec(module) is None:
        raise Lacking(f"{module} is not installed: it is in the test extra (pip install -e '.[test]')")
    return module


PROBES: dict[str, Callable[..., Any]] = {
    "bwrap": isolation,
    "slirp4netns": slirp4netns,
    "outbound-address": outbound_address,
    "docker": docker_image,
    "docker-dind": dind_image,
    "ssh": ssh_client,
    "sshd": ssh_hosts,
    "slurm": slurm_cluster,
    "chromium": chromium,
    "compat-venv": compat_venv,
    "grading-envs": grading_envs,
    "dev-tool": dev_tool,
    "mini-swe-agent": lambda: installed_agent("mini-swe-agent"),
    "codex": lambda: installed_agent("codex"),
}
