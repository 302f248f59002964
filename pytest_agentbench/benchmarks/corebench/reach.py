"""What a CORE-Bench agent can reach: its prepared workspace and the system, no other copy of its capsule.

Every copy of a capsule but the workspace holds what the difficulty removes (results/, REPRODUCING.md, the run
scripts): the staged folder or tarball in the capsule store, the unpacked copy in the extraction cache, and
inputs preinstalled in the environment image. The agent must reach none of them:

* host environment: the store, the extraction cache, the capsule's own folder and the preinstalled folder are
  masked in every command's sandbox (as the data dir, the cache and the reports are), and preinstalled inputs
  are copied into the workspace by the controller, since the environment runs on this machine;
* Docker: the container holds only the uploaded workspace; preinstalled inputs are copied into the workspace
  inside the container and the preinstalled folder is then deleted as root before the agent's first command
  (the container may not mount anything, so the image's layers under it cannot be read back).

With the network on, the capsule's publication hosts answer nothing: Code Ocean (where the capsule and its
results are published) and the DOI resolvers that lead there are mapped to an unspecified address in the
environment's ``/etc/hosts`` (``envs.base.BLOCKED_ADDRESSES``), as other CORE-Bench harnesses block them. That
blocks name resolution through the system resolver only: an agent that finds an address by other means (its own
DNS query, an address it knows) is not stopped; ``--bench-set=docker_network=none`` / ``--bench-set=host_network=none``
give no network at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ...envs.base import HOST_NAME

# /etc/hosts has no wildcards: Code Ocean's names a capsule's page, its files and its API are served from
CODE_OCEAN_HOSTS = (
    "codeocean.com",
    "www.codeocean.com",
    "api.codeocean.com",
    "apps.codeocean.com",
    "files.codeocean.com",
    "help.codeocean.com",
    "docs.codeocean.com",
)
DOI_HOSTS = ("doi.org", "www.doi.org", "dx.doi.org", "hdl.handle.net")  # the resolvers (a DOI is a Handle)


def blocked_hosts(task: Mapping[str, Any]) -> tuple[str, ...]:
    """The host names no agent of ``task`` may resolve: Code Ocean's, the DOI resolvers and the host of the
    capsule's own DOI link (``capsule_doi``)."""
    names = [*CODE_OCEAN_HOSTS, *DOI_HOSTS]
    doi = task.get("capsule_doi")
    host = urlsplit(doi).hostname if isinstance(doi, str) and "://" in doi else None
    if host and HOST_NAME.fullmatch(host) and host not in names:
        names.append(host)
    return tuple(names)


def capsule_copies(*folders: Path | str | None) -> tuple[str, ...]:
    """The host folders holding copies of the capsule (store, extraction cache, the capsule's folder, the
    preinstalled folder) that the host environment must mask; the ones not given are left out."""
    out: list[str] = []
    for folder in folders:
        if folder is not None and str(folder) not in out:
            out.append(str(folder))
    return tuple(out)


def overlap(workspace_root: str, preinstalled: str | None) -> str | None:
    """Why the workspace root and the preinstalled folder cannot both be used (one inside the other: deleting
    the preinstalled folder would delete the workspace, or the copy would copy into itself); None when fine."""
    if not preinstalled:
        return None
    pairs: Iterable[tuple[str, str]] = ((workspace_root, preinstalled), (preinstalled, workspace_root))
    for inner, outer in pairs:
        if inner == outer or inner.startswith(outer.rstrip("/") + "/"):
            return (
                f"--bench-set workspace_root {workspace_root} and --bench-set preinstalled_input_dir {preinstalled} "
                f"overlap: once copied into the workspace, the preinstalled folder is out of the agent's reach "
                f"(deleted or masked); choose folders apart"
            )
    return None
