"""The environments' settings and the factory they select (``--bench-env host|docker``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.errors import ConfigError
from ..core.options import HOST_GPU, Option
from ..sandbox.limits import DEFAULT_MEMORY_LIMIT
from ..sandbox.options import limits_from, private_paths
from .base import EnvFactory
from .docker import DEFAULT_IMAGE, DEFAULT_NETWORK, DockerFactory
from .host import HOST_NETWORKS, HostFactory

ENV_KINDS = ("host", "docker")
DEFAULT_ENV_MEMORY = 8 << 30

ENV_OPTIONS = (
    Option(
        "env",
        "--bench-env",
        kind="choice",
        choices=ENV_KINDS,
        default=None,
        ini="agentbench_env",
        help="where agent commands and tool code run: host (a sandboxed workspace on this machine) or "
        "docker (one container per item through the Docker SDK; DOCKER_HOST selects a remote engine). "
        "Default: the benchmark's choice (docker where a real model's agent must not reach the answers, "
        "host otherwise).",
        free_on_resume=True,
    ),
    Option(
        "docker_image",
        "--bench-docker-image",
        default=DEFAULT_IMAGE,
        ini="agentbench_docker_image",
        help=f"image of the Docker environment (default {DEFAULT_IMAGE}, pulled when missing).",
    ),
    Option(
        "docker_network",
        "--bench-docker-network",
        default=DEFAULT_NETWORK,
        ini="agentbench_docker_network",
        help="network mode of the containers: bridge (default), none, host or a network name.",
    ),
    Option(
        "gpus",
        "--bench-gpus",
        ini="agentbench_gpus",
        help="GPUs for items that need one: all, or comma-separated device ids. Without it such items are skipped.",
        hosts=HOST_GPU,
    ),
    Option(
        "env_memory",
        "--bench-env-memory",
        kind="size",
        default=DEFAULT_ENV_MEMORY,
        ini="agentbench_env_memory",
        help="memory limit of an environment (docker mem_limit; address-space limit of a host command), e.g. 8g.",
    ),
    Option(
        "host_network",
        "--bench-host-network",
        kind="choice",
        choices=HOST_NETWORKS,
        default="user",
        ini="agentbench_host_network",
        help="network of the isolated host environment's commands, in a network namespace of their own: user "
        "(default; outbound access through slirp4netns, none to this machine's loopback listeners or "
        "abstract unix sockets) or none (no network).",
    ),
    Option(
        "keep_workspaces",
        "--bench-keep-workspaces",
        kind="bool",
        default=False,
        ini="agentbench_keep_workspaces",
        help="keep each item's workspace folder after the run (its path is in the record).",
        free_on_resume=True,
    ),
)


@dataclass(frozen=True)
class EnvOptions:
    """The environments' settings, typed (``view(EnvOptions, opts)``); one field per option of ENV_OPTIONS."""

    env: str | None
    docker_image: str
    docker_network: str
    gpus: str | None
    env_memory: int
    host_network: str
    keep_workspaces: bool


def env_settings(opts: Mapping[str, Any], default: str = "host") -> dict[str, Any]:
    """The environment part of resolved settings, as plain values (for records and reports); ``default``
    is the environment when ``--bench-env`` is not given (the benchmark's choice)."""
    return {
        "env": opts["env"] or default,
        "docker_image": opts["docker_image"],
        "docker_network": opts["docker_network"],
        "gpus": opts["gpus"] or None,
        "memory": opts["env_memory"],
        "keep_workspaces": bool(opts["keep_workspaces"]),
        "host_network": opts.get("host_network") or "user",
    }


def build_env(opts: Mapping[str, Any], default: str = "host") -> EnvFactory:
    """The environment factory selected by ``env`` (``default`` when it is not given).

    Tool scripts on the host run like scoring scripts: with the sandbox's ``executor`` and
    ``memory_limit`` when ``opts`` has them (the sandbox's defaults otherwise)."""
    try:
        settings = env_settings(opts, default)
    except KeyError as missing:
        raise ConfigError(f"environment settings lack {missing}; resolve ENV_OPTIONS before build_env") from None
    if settings["env"] == "docker":
        return DockerFactory(
            image=settings["docker_image"],
            network=settings["docker_network"],
            gpus=settings["gpus"],
            keep_workspaces=settings["keep_workspaces"],
            memory=settings["memory"],
        )
    if settings["env"] != "host":
        raise ConfigError(
            f"unknown environment {settings['env']!r} (--bench-env / agentbench_env); valid: {', '.join(ENV_KINDS)}"
        )
    python = limits_from(opts, timeout=1.0).memory if "memory_limit" in opts else DEFAULT_MEMORY_LIMIT
    return HostFactory(
        keep_workspaces=settings["keep_workspaces"],
        gpus=settings["gpus"],
        memory=settings["memory"],
        executor=opts.get("executor", "fork"),
        python_memory=python,
        hidden=private_paths(opts),
        network=settings["host_network"],
    )
