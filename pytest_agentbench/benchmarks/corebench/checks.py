"""What CORE-Bench checks before any item runs: every selected capsule can be had, and the agent's image exists.

Without these a missing capsule or an image that cannot be pulled costs each item its retries and ends as one
``env_error`` per item; found up front they are one usage error naming everything missing and the fix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...core.data import OFFLINE_ENV, offline
from ...core.errors import ConfigError
from ...core.options import view
from ...core.run_options import RunOptions
from ...envs import EnvError
from ...envs.docker import DockerFactory
from ...models.options import ORACLE, ModelOptions
from . import capsules, dataset
from .options import CoreBenchOptions

LISTED = 20  # capsule ids named in a message


def named(ids: Sequence[str]) -> str:
    return ", ".join(ids[:LISTED]) + (f", ... ({len(ids)} in all)" if len(ids) > LISTED else "")


def check_capsules(opts: Mapping[str, Any], capsule_ids: Sequence[str]) -> None:
    """ConfigError unless every capsule is in the store or (online) its download answers."""
    run, chosen = view(RunOptions, opts), view(CoreBenchOptions, opts).capsules_dir
    data_set = dataset.data_set(run.dataset)
    store = capsules.archive_store(
        Path(run.data_dir), Path(run.cache_dir), Path(chosen) if chosen else None, data_set.capsule_folder
    )
    published = data_set.capsule_url
    missing = [cid for cid in capsule_ids if not capsules.at_hand(cid, store)]
    if not missing:
        return
    where = (
        f"Put each in {store}/ as <capsule_id>.tar.gz "
        f"(from {capsules.capsule_base_url(published)}/<capsule_id>.tar.gz) or as an unpacked <capsule_id>/ folder, "
        "or point --bench-capsules-dir at a folder that has them"
    )
    if offline():
        raise ConfigError(
            f"CORE-Bench: {len(missing)} selected capsule(s) are not in {store} and downloads are off "
            f"(${OFFLINE_ENV}): {named(missing)}. {where}"
        )
    problems = {cid: capsules.download_problem(capsules.capsule_url(cid, published)) for cid in missing}
    failed = {cid: why for cid, why in problems.items() if why is not None}
    if failed:
        first = next(iter(failed.values()))
        raise ConfigError(
            f"CORE-Bench: {len(failed)} selected capsule(s) are not in {store} and cannot be downloaded "
            f"({first}): {named(list(failed))}. {where}"
        )


def check_image(env: Any) -> None:
    """ConfigError unless the Docker image the agent runs in is on the engine or can be pulled (when the run's
    environment is Docker)."""
    if not isinstance(env, DockerFactory):
        return
    try:
        env.ensure_image()
    except EnvError as exc:
        raise ConfigError(
            f"CORE-Bench: {exc} (for example `docker pull {env.image}`, or `docker build -t {env.image} .` "
            f"from your Dockerfile, or --bench-set=docker_image=IMAGE of one the engine has)"
        ) from None


def check_agent(opts: Mapping[str, Any], env: Any) -> None:
    """ConfigError unless the agent (--bench-agent) can run: a known agent, ``command`` with its command line, an
    external agent only in the environments that give it its metering proxy (host, docker), installed (in
    Docker: its image layer over the task image built, or found on the engine)."""
    from .. import agent_layers, agents  # why: only a run that names an agent needs them

    try:
        own = view(CoreBenchOptions, opts)
        choice = agents.parse_agent(own.agent, own.agent_command)
    except ValueError as exc:
        raise ConfigError(f"CORE-Bench: --bench-agent: {exc}") from None
    kind = getattr(env, "kind", None)
    if choice.external and kind not in (None, "host", "docker"):
        raise ConfigError(
            f"CORE-Bench: --bench-agent={choice.name} runs in the host or docker environment, not "
            f"--bench-env={kind}; pass --bench-env=host or --bench-env=docker"
        )
    if choice.external:  # once, before any item: an install can take minutes, which no item's time should pay
        try:
            if isinstance(env, DockerFactory):
                agent_layers.ensure_layer(env, agents.make_agent(choice), Path(view(RunOptions, opts).cache_dir))
            else:
                agents.make_agent(choice).install(Path(view(RunOptions, opts).cache_dir))
        except agents.AgentInstallError as exc:
            raise ConfigError(f"CORE-Bench: --bench-agent={choice.label()}: {exc}") from None


def check_selection(opts: Mapping[str, Any], capsule_ids: Sequence[str], env: Any) -> None:
    """Capsules first (no engine needed), then the image of the environment ``env`` (a factory, or None) when an
    agent runs in it (the oracle runs none)."""
    if not capsule_ids:
        return
    if not view(CoreBenchOptions, opts).preinstalled_input_dir:  # else the capsules are inside the image
        check_capsules(opts, capsule_ids)
    if view(ModelOptions, opts).model not in (None, "", ORACLE):
        check_image(env)  # (first: an agent's layer is built over the image)
        check_agent(opts, env)
