"""Environments where agent commands and tool code run (``--bench-env host|docker``).

``build_env(config)`` gives the value of the ``bench_env`` fixture: a factory whose
``start(workspace, needs_gpu=False, name="")`` returns an ``Environment`` (see ``base.py``) and
whose ``run_python(source, timeout)`` runs one SciCode tool script.
"""
from __future__ import annotations

from typing import Any

from .base import CommandResult, EnvError, Environment, EnvSkip  # noqa: F401 (the public API)

ENV_KINDS = ("host", "docker")

# flag, dest, ini key, default, help
ENV_OPTIONS = [
    ("--bench-env", "bench_env", "agentbench_env", "host",
     "where agent commands and tool code run: host (a sandboxed workspace on this machine, default) or "
     "docker (one container per item through the Docker SDK; DOCKER_HOST selects a remote engine)."),
    ("--bench-docker-image", "bench_docker_image", "agentbench_docker_image", "python:3.12-bookworm",
     "image of the Docker environment (default python:3.12-bookworm, pulled when missing)."),
    ("--bench-docker-network", "bench_docker_network", "agentbench_docker_network", "bridge",
     "network mode of the containers: bridge (default), none, host or a network name."),
    ("--bench-gpus", "bench_gpus", "agentbench_gpus", "",
     "GPUs for capsules that need one: all, or comma-separated device ids. Without it such items are skipped."),
    ("--bench-env-memory", "bench_env_memory", "agentbench_env_memory", "8g",
     "memory limit of an environment (docker mem_limit; address-space limit of a host command), e.g. 8g."),
]


def _option_names(parser) -> set[str]:
    group = parser.getgroup("agentbench")
    return {name for opt in group.options for name in opt.names()}


def add_env_options(parser) -> None:
    """Register the environment options; safe to call more than once (it adds them only once)."""
    if "--bench-env" in _option_names(parser):
        return
    group = parser.getgroup("agentbench")
    for flag, dest, ini, default, help_text in ENV_OPTIONS:
        choices = ENV_KINDS if dest == "bench_env" else None
        group.addoption(flag, dest=dest, default=None, choices=choices, help=help_text)
        parser.addini(ini, help=help_text, default=default)
    group.addoption("--bench-keep-workspaces", dest="bench_keep_workspaces", action="store_true", default=False,
                    help="keep each item's workspace folder after the run (its path is in the record).")


def _setting(config, dest: str, ini: str, default: Any) -> Any:
    value = config.getoption(dest, None)
    if value is None:
        try:
            value = config.getini(ini)
        except ValueError:  # options not registered (a plugin that did not call add_env_options)
            value = None
    return value if value not in (None, "") else default


def parse_memory(text: str) -> int:
    """``8g``, ``512m``, ``1073741824`` -> bytes."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    raw = str(text).strip().lower().removesuffix("b")
    try:
        if raw and raw[-1] in units:
            return int(float(raw[:-1]) * units[raw[-1]])
        return int(raw)
    except ValueError:
        raise ValueError(f"--bench-env-memory {text!r} is not a size; write e.g. 8g or 512m") from None


def env_settings(config) -> dict[str, Any]:
    kind = _setting(config, "bench_env", "agentbench_env", "host")
    if kind not in ENV_KINDS:
        raise ValueError(f"unknown environment {kind!r} (--bench-env / agentbench_env); valid: {', '.join(ENV_KINDS)}")
    memory = _setting(config, "bench_env_memory", "agentbench_env_memory", "8g")
    parse_memory(memory)
    return {
        "env": kind,
        "docker_image": _setting(config, "bench_docker_image", "agentbench_docker_image", "python:3.12-bookworm"),
        "docker_network": _setting(config, "bench_docker_network", "agentbench_docker_network", "bridge"),
        "gpus": _setting(config, "bench_gpus", "agentbench_gpus", "") or None,
        "memory": memory,
        "keep_workspaces": bool(config.getoption("bench_keep_workspaces", False)),
    }


def build_env(config):
    """The environment factory selected by ``--bench-env`` (host unless told otherwise)."""
    try:
        settings = env_settings(config)
    except ValueError as exc:
        import pytest

        raise pytest.UsageError(f"agentbench: {exc}") from None
    if settings["env"] == "docker":
        from .docker import DockerFactory

        return DockerFactory(image=settings["docker_image"], network=settings["docker_network"],
                             gpus=settings["gpus"], keep_workspaces=settings["keep_workspaces"],
                             memory=settings["memory"])
    from .host import HostFactory

    return HostFactory(keep_workspaces=settings["keep_workspaces"], gpus=settings["gpus"],
                       memory=parse_memory(settings["memory"]))
