"""The sandbox's settings: how scoring children run, their memory limit, and whether isolation is required."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ..core.errors import ConfigError
from ..core.options import Option, given_settings, view
from ..core.run_options import RUN_OPTIONS, RunOptions

if TYPE_CHECKING:
    from .isolation import Isolation
    from .limits import Limits

# why here, not in executors.py: the plugin declares this option in every pytest run, which must not import the
# executors (the fork server, containment, isolation) unless a benchmark runs
EXECUTORS = ("fork", "subprocess")

SANDBOX_OPTIONS = (
    Option(
        "executor",
        "--bench-executor",
        kind="choice",
        choices=EXECUTORS,
        default="fork",
        ini="agentbench_executor",
        help="how scoring scripts run: fork (default; a warm fork server) or subprocess "
        "(a fresh interpreter per step).",
        free_on_resume=True,
        shown=False,
    ),
    Option(
        "memory_limit",
        "--bench-memory-limit",
        kind="float",
        default=4.0,
        minimum=0,
        exclusive_minimum=True,
        ini="agentbench_memory_limit",
        metavar="GIB",
        help="address-space limit of each child process in GiB (default 4).",
        free_on_resume=True,
        shown=False,
    ),
    Option(
        "require_isolation",
        "--bench-require-isolation",
        kind="bool",
        default=False,
        ini="agentbench_require_isolation",
        help="refuse to run when this machine cannot isolate the children that run model code "
        "(bubblewrap and user namespaces, or root); without it such a run says 'isolation: none'.",
    ),
)


@dataclass(frozen=True)
class SandboxOptions:
    """The sandbox's settings, typed (``view(SandboxOptions, opts)``); one field per option of SANDBOX_OPTIONS."""

    OPTIONS: ClassVar[tuple[Option, ...]] = SANDBOX_OPTIONS
    executor: str
    memory_limit: float
    require_isolation: bool


def private_folders(opts: Mapping[str, Any]) -> dict[str, str]:
    """Folder -> the flag that names it, for the run's folders that children must not see: the options declared
    ``private`` (the data dir, the cache and the reports: targets, checksum stamps, cached data, reports).

    Plain-Python settings that name none of them (a partial mapping) hide nothing: only the folders given."""
    settings = given_settings(opts, RunOptions)
    run = view(RunOptions, settings)
    return {str(getattr(run, o.name)): o.flag for o in RUN_OPTIONS if o.private and settings.get(o.name)}


def private_paths(opts: Mapping[str, Any]) -> tuple[str, ...]:
    """The folders of the run that children must not see (``private_folders``)."""
    return tuple(private_folders(opts))


def limits_from(opts: Mapping[str, Any], timeout: float) -> Limits:
    """The limits of one child run under the settings ``opts`` (resolved, or a plain mapping of the sandbox's and
    the run's options: the ones it lacks take their defaults) and a wall-clock ``timeout``.

    The run's private folders (``private_paths``) are hidden from the child when it is isolated."""
    from .limits import GiB, Limits  # why: declaring the options must not import the sandbox's runtime

    settings = given_settings(opts, SandboxOptions, RunOptions)
    sandbox = view(SandboxOptions, settings)
    return Limits(timeout=timeout, memory=int(sandbox.memory_limit * GiB), hidden=private_paths(settings))


def isolation_from(opts: Mapping[str, Any]) -> Isolation:
    """How children are isolated on this machine; a ConfigError when isolation is required and impossible."""
    from .isolation import probe  # why: declaring the options must not import the sandbox's runtime

    found = probe()
    if not found.complete and view(SandboxOptions, opts).require_isolation:
        raise ConfigError(
            f"--bench-require-isolation: this machine cannot isolate the children that run model code: "
            f"{found.shortfall()}"
        )
    return found
