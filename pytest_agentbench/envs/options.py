"""The environments' settings and the factory they select (``--bench-env host|docker``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ..core.errors import ConfigError
from ..core.options import HOST_GPU, Option, given_settings, view
from ..core.run_options import RunOptions
from ..sandbox.options import SandboxOptions, limits_from, private_paths
from .defaults import DEFAULT_COPY_OUT_CAP, DEFAULT_IMAGE, DEFAULT_NETWORK, HOST_NETWORKS

if TYPE_CHECKING:
    from .base import EnvFactory


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
        shown=False,
    ),
    Option(
        "docker_network",
        "--bench-docker-network",
        default=DEFAULT_NETWORK,
        ini="agentbench_docker_network",
        help="network mode of the containers: bridge (default), none, host or a network name.",
        shown=False,
    ),
    Option(
        "gpus",
        "--bench-gpus",
        ini="agentbench_gpus",
        help="GPUs for items that need one: all, or comma-separated device ids. Without it such an item ends in "
        "env_error (counted in the score, as upstream counts it); deselect them with -m 'not gpu'.",
        hosts=HOST_GPU,
        shown=False,
    ),
    Option(
        "env_memory",
        "--bench-env-memory",
        kind="size",
        default=DEFAULT_ENV_MEMORY,
        ini="agentbench_env_memory",
        help="memory limit of an environment (docker mem_limit; address-space limit of a host command), e.g. 8g.",
        shown=False,
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
        shown=False,
    ),
    Option(
        "copy_out_cap",
        "--bench-copy-out-cap",
        kind="size",
        default=DEFAULT_COPY_OUT_CAP,
        ini="agentbench_copy_out_cap",
        help="most bytes of an item's workspace brought home after its agent ran, by apparent size (a sparse file "
        "counts as its length), e.g. 1g (default). Special files, links out of the workspace or in a loop and files "
        "past the cap are left out and named in the record's copy_out.",
        shown=False,
    ),
    Option(
        "keep_workspaces",
        "--bench-keep-workspaces",
        kind="bool",
        default=False,
        ini="agentbench_keep_workspaces",
        help="keep each item's workspace folder after the run (its path is in the record).",
        free_on_resume=True,
        shown=False,
    ),
)


@dataclass(frozen=True)
class EnvOptions:
    """The environments' settings, typed (``view(EnvOptions, opts)``); one field per option of ENV_OPTIONS."""

    OPTIONS: ClassVar[tuple[Option, ...]] = ENV_OPTIONS
    env: str | None
    docker_image: str
    docker_network: str
    gpus: str | None
    env_memory: int
    host_network: str
    copy_out_cap: int
    keep_workspaces: bool


def env_settings(opts: Mapping[str, Any], default: str = "host") -> dict[str, Any]:
    """The environment part of settings (resolved, or a plain mapping of ENV_OPTIONS: the ones it lacks take their
    defaults), as plain values (for records and reports); ``default`` is the environment when ``--bench-env`` is
    not given (the benchmark's choice)."""
    env = view(EnvOptions, opts)
    return {
        "env": env.env or default,
        "docker_image": env.docker_image,
        "docker_network": env.docker_network,
        "gpus": env.gpus or None,
        "memory": env.env_memory,
        "keep_workspaces": bool(env.keep_workspaces),
        "host_network": env.host_network or "user",
        "copy_out_cap": env.copy_out_cap,
    }


def build_env(opts: Mapping[str, Any], default: str = "host") -> EnvFactory:
    """The environment factory selected by ``env`` (``default`` when it is not given).

    ``opts`` are resolved settings or a plain mapping of the environments', the sandbox's and the run's options
    (the ones it lacks take their defaults). Tool scripts on the host run like scoring scripts: with the sandbox's
    ``executor`` and ``memory_limit``."""
    given = given_settings(opts, EnvOptions, SandboxOptions, RunOptions)
    settings = env_settings(given, default)
    if settings["env"] == "docker":
        from .docker import DockerFactory  # why: a run imports only the environment it uses

        return DockerFactory(
            image=settings["docker_image"],
            network=settings["docker_network"],
            gpus=settings["gpus"],
            keep_workspaces=settings["keep_workspaces"],
            memory=settings["memory"],
            copy_cap=settings["copy_out_cap"],
        )
    if settings["env"] != "host":
        raise ConfigError(
            f"unknown environment {settings['env']!r} (--bench-env / agentbench_env); valid: {', '.join(ENV_KINDS)}"
        )
    from .host import HostFactory  # why: a run imports only the environment it uses

    return HostFactory(
        keep_workspaces=settings["keep_workspaces"],
        gpus=settings["gpus"],
        memory=settings["memory"],
        executor=view(SandboxOptions, given).executor,
        python_memory=limits_from(given, timeout=1.0).memory,
        hidden=private_paths(given),
        network=settings["host_network"],
        copy_cap=settings["copy_out_cap"],
    )
