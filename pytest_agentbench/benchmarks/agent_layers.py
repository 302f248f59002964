"""External agents in Docker: each agent installed as an image layer over the task image.

A layer is built once per (task image, agent, version) and kept on the engine under a tag that names the three
(``layer_tag``), so a later run finds it and needs no registry (with ``$AGENTBENCH_OFFLINE`` a missing layer is an
error naming the fix). What goes into the layer is fetched on this machine, with its own registry settings,
certificates and proxies, and the build container has no network:

* ``mini-swe-agent``: the wheels of the pinned release and its dependencies for the image's Python (its version,
  C library and machine, asked of the image), downloaded with this machine's pip, then installed offline into a
  venv of the image's own ``python3`` with a pip wheel among them (the image needs no pip, no network);
* ``codex``: the npm package installed on this machine (``agents.install_npm_agent``); only its native binary
  folder (a static executable) goes into the layer, so the image needs no Node (the npm package's Node shim only
  finds and starts that binary, which the plugin starts itself);
* ``command``: no layer; the command must be in the image.

Everything in the layer is root's: the agent, which runs as another user, cannot change its own install.
"""

from __future__ import annotations

import fcntl
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..core.data import OFFLINE_ENV, offline
from ..envs import EnvError
from ..envs.docker import DockerFactory, LayerBuild, layer_image
from . import agents

LAYER_REPOSITORY = "agentbench-agent"
LAYER_ROOT = "/opt/agentbench"  # in the layer: one folder per agent and version
WHEELS = "/tmp/agentbench-wheels"  # in the build container only
DOWNLOAD_TIMEOUT = 1800.0
MIN_PYTHON = (3, 10)  # mini-swe-agent's own requirement
# the image's Python, C library and machine, as pip's platform tags need them
PROBE = (
    "python3 -c 'import json, platform, sys; "
    'print(json.dumps({"python": list(sys.version_info[:2]), "libc": list(platform.libc_ver()), '
    '"machine": platform.machine()}))\''
)


def layer_tag(image: str, image_id: str, choice: agents.AgentChoice) -> str:
    """``agentbench-agent:NAME-VERSION--IMAGE-ID12``: the agent, its version and the task image (its name and the
    first 12 digits of its id, so a task image rebuilt under the same name gets a layer of its own)."""
    base = re.sub(r"[^a-z0-9_.-]+", "-", image.lower()).strip(".-")[:60]
    short = image_id.split(":")[-1][:12]
    version = re.sub(r"[^A-Za-z0-9_.-]+", "-", choice.version or "")
    return f"{LAYER_REPOSITORY}:{choice.name}-{version}--{base}-{short}"[: len(LAYER_REPOSITORY) + 129]


def agent_folder(choice: agents.AgentChoice) -> str:
    """The agent's folder in its layer."""
    return f"{LAYER_ROOT}/{choice.name}-{choice.version}"


def ensure_layer(factory: DockerFactory, agent: agents.ExternalAgent, cache_dir: Path) -> str | None:
    """The tag of the agent's layer over the factory's image, built when the engine does not have it (None: the
    ``command`` agent, which has none); the agent is pointed at its install in the layer.
    ``agents.AgentInstallError`` when it cannot be had (offline, a registry or build failing)."""
    choice = agent.choice
    if choice.name == agents.COMMAND:
        return None
    try:
        factory.ensure_image()
        base = factory.client().images.get(factory.image)
        tag = layer_tag(factory.image, str(base.id), choice)
        if layer_image(factory, tag) is None:
            with build_lock(cache_dir, choice, tag):
                if layer_image(factory, tag) is None:
                    if offline():
                        raise agents.AgentInstallError(
                            f"its image layer {tag} over {factory.image} is not on the Docker engine and installs are "
                            f"off (${OFFLINE_ENV}): run once without ${OFFLINE_ENV} to build it (or `docker load` it "
                            "there)"
                        )
                    build_layer(factory, agent, cache_dir, tag)
    except EnvError as exc:
        raise agents.AgentInstallError(f"building its image layer over {factory.image} failed: {exc}") from None
    point_at_layer(agent)
    return tag


def point_at_layer(agent: agents.ExternalAgent) -> None:
    """The agent's install as the layer has it (paths in the container)."""
    folder = agent_folder(agent.choice)
    if agent.choice.name == agents.MINI_SWE_AGENT:
        agent.install_dir = Path(f"{folder}/venv")
    elif agent.choice.name == agents.CODEX:
        agent.extra["binary"] = f"{folder}/bin/codex"


class build_lock:  # noqa: N801 (a context manager read as a phrase)
    """One build of a layer at a time among this machine's processes sharing the cache (xdist workers)."""

    def __init__(self, cache_dir: Path, choice: agents.AgentChoice, tag: str) -> None:
        folder = agents.install_folder(cache_dir, choice).parent
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f".layer-{tag.replace(':', '_').replace('/', '_')}.lock"

    def __enter__(self) -> build_lock:
        self.handle = open(self.path, "w")  # noqa: SIM115 (closed in __exit__)
        fcntl.flock(self.handle, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.handle.close()


def build_layer(factory: DockerFactory, agent: agents.ExternalAgent, cache_dir: Path, tag: str) -> None:
    """Build ``tag``: the agent installed over the factory's image (see the module's text)."""
    choice = agent.choice
    labels = {
        "agentbench.layer.agent": choice.name,
        "agentbench.layer.version": str(choice.version),
        "agentbench.layer.base": factory.image,
    }
    with LayerBuild(factory, tag) as build:
        if choice.name == agents.MINI_SWE_AGENT:
            install_mini(build, choice, cache_dir)
        elif choice.name == agents.CODEX:
            install_codex(build, agent, cache_dir, factory)
        else:
            raise agents.AgentInstallError(f"no image layer is known for the {choice.name} agent")
        build.commit(labels)


def probe_python(build: LayerBuild) -> dict[str, Any]:
    """The image's Python version, C library and machine; AgentInstallError when it has no fitting python3."""
    code, said = build.run(PROBE)
    try:
        found = json.loads(said.strip().splitlines()[-1]) if code == 0 else None
    except (ValueError, IndexError):
        found = None
    if not isinstance(found, dict):
        raise agents.AgentInstallError(
            f"the task image has no working python3, which mini-swe-agent needs (choose an image with Python >= "
            f"{'.'.join(map(str, MIN_PYTHON))}): {said.strip()[-300:]}"
        )
    if tuple(found["python"]) < MIN_PYTHON:
        raise agents.AgentInstallError(
            f"the task image's python3 is {'.'.join(map(str, found['python']))}; mini-swe-agent needs >= "
            f"{'.'.join(map(str, MIN_PYTHON))} (choose another image with --bench-set docker_image)"
        )
    if found["libc"][0] != "glibc":
        raise agents.AgentInstallError(
            f"the task image's C library is {found['libc'][0] or 'unknown'}; the agent's wheels are fetched for "
            "glibc images only (choose a Debian, Ubuntu or similar image)"
        )
    return found


def platforms(libc: str, machine: str) -> list[str]:
    """pip's platform tags of a glibc ``libc`` version on ``machine``, newest first."""
    major, minor = (int(x) for x in libc.split(".")[:2])
    tags = [f"manylinux_{major}_{m}_{machine}" for m in range(minor, 4, -1)]
    legacy = {"manylinux2014": 17, "manylinux2010": 12, "manylinux1": 5}
    return tags + [f"{name}_{machine}" for name, needs in legacy.items() if major == 2 and minor >= needs]


def wheelhouse(cache_dir: Path, choice: agents.AgentChoice, found: dict[str, Any]) -> Path:
    """The wheels of the agent (and pip) for the image's Python, downloaded once into the agents' folder with
    this machine's pip (its index, certificates, proxies and constraints)."""
    python = "".join(map(str, found["python"]))
    libc, machine = found["libc"][1], found["machine"]
    folder = agents.install_folder(cache_dir, choice).parent / "wheels" / f"{choice.name}-{choice.version}-cp{python}"
    folder = folder.with_name(f"{folder.name}-{machine}-glibc{libc}")
    marker = folder / "downloaded.json"
    if marker.is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q", "--dest", str(folder)]
    argv += ["--only-binary=:all:", "--implementation", "cp", "--python-version", ".".join(map(str, found["python"]))]
    argv += ["--abi", f"cp{python}", "--abi", "abi3", "--abi", "none"]
    for tag in platforms(libc, machine):
        argv += ["--platform", tag]
    argv += [f"mini-swe-agent=={choice.version}", "pip"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise agents.AgentInstallError(f"downloading mini-swe-agent=={choice.version} failed: {exc}") from None
    if done.returncode != 0:
        raise agents.AgentInstallError(
            f"downloading mini-swe-agent=={choice.version} for Python {'.'.join(map(str, found['python']))} on "
            f"{machine} failed (exit {done.returncode}): {done.stderr.strip()[-800:]}; check the package "
            "registry (pip's index) is reachable"
        )
    marker.write_text(json.dumps({"python": found["python"], "libc": found["libc"], "machine": machine}))
    return folder


def install_mini(build: LayerBuild, choice: agents.AgentChoice, cache_dir: Path) -> None:
    """mini-swe-agent in a venv of the image's python3, installed offline from this machine's download."""
    found = probe_python(build)
    build.put_folder(wheelhouse(cache_dir, choice, found), WHEELS)
    venv = f"{agent_folder(choice)}/venv"
    code, said = build.run(
        f"python3 -m venv --without-pip {venv} && pip=$(ls {WHEELS}/pip-*.whl | head -n 1) && "
        f'{venv}/bin/python "$pip/pip" install --disable-pip-version-check -q --no-index --find-links {WHEELS} '
        f"mini-swe-agent=={choice.version} && {venv}/bin/mini --help >/dev/null && rm -rf {WHEELS}"
    )
    if code != 0:
        raise agents.AgentInstallError(
            f"installing mini-swe-agent=={choice.version} in the image failed: {said[-800:]}"
        )


def install_codex(build: LayerBuild, agent: agents.ExternalAgent, cache_dir: Path, factory: DockerFactory) -> None:
    """Codex's native binary folder from this machine's npm install, for the engine's machine."""
    agent.install(cache_dir)
    binary = agent.binary()  # type: ignore[attr-defined]  # (a CodexAgent)
    platform_folder = binary.parent.parent  # vendor/<target triple>/ holds bin/ and what the binary calls
    engine = str(factory.client().info().get("Architecture") or "")
    if engine and not platform_folder.name.startswith(engine):
        raise agents.AgentInstallError(
            f"the Docker engine runs {engine} but this machine's npm install of codex has {platform_folder.name}; "
            "build the layer on a machine of the engine's architecture"
        )
    folder = agent_folder(agent.choice)
    build.put_folder(platform_folder, folder)
    code, said = build.run(f"chmod -R a+rX {folder} && {folder}/bin/codex --version")
    if code != 0:
        raise agents.AgentInstallError(f"codex {agent.choice.version} does not start in the image: {said[-800:]}")
