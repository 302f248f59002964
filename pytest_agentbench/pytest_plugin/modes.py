"""The run modes of a benchmark session, in one table (``MODES``): how this process takes part in the run decides
which checks run before the items, whether it writes and reports the run or sends its records on, and which
plugin runs its items. ``pytest_configure`` takes the first row that holds and follows it.

A run file listing several models or agents is not a row of its own: each row applies to each run's state (one
state per (model, agent) run, ``session.run_states``), except where the table refuses the combination.
``--collect-only`` is not one either: the rows run as for a run, and the checks and run loops themselves skip
what only scoring needs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from ..core.options import Settings
from .checks import before_items, node_checks
from .distribution.handshake import Role, role_of
from .run import BenchState
from .slurm import task_plugin


@dataclass(frozen=True)
class Situation:
    """What picks a session's row: the xdist role, the back-end, the several runs of a run file, the command's
    plugin (``run-task``'s packager, ``collect``'s collector)."""

    role: Role
    backend: str
    runs: tuple[str, ...]  # the names of a run file's several runs (models, agents), none picked; empty otherwise
    packaging: bool  # a ``run-task`` session
    collecting: bool  # a ``collect`` session

    @classmethod
    def of(cls, config: pytest.Config, opts: Settings, several: Mapping[str, Settings]) -> Situation:
        return cls(
            role=role_of(config),
            backend=str(opts["backend"]),
            runs=tuple(several),
            packaging=task_plugin(config, "TaskPackager") is not None,
            collecting=task_plugin(config, "PackageCollector") is not None,
        )


Checks = Callable[[pytest.Config, Settings, BenchState], None]
# The plugin that runs the session's items instead of pytest's own loop, and its name.
Engine = Callable[[pytest.Config, BenchState], tuple[Any, str]]


@dataclass(frozen=True)
class RunMode:
    """One row: ``when`` it applies; a ``refusal`` (the usage error's text) for a combination that cannot run;
    else the ``checks`` each state gets before any item, whether the process only ``sends`` its records (an xdist
    worker or a task: nothing of the run is written or reported here), whether the distribution controller
    drives xdist (``distributes``), and the ``engine`` that runs the items (None: pytest's loop, or xdist's)."""

    name: str
    when: Callable[[Situation], bool]
    refusal: Callable[[Situation], str] | None = None
    checks: Checks | None = before_items
    sends: bool = False
    distributes: bool = False
    engine: Engine | None = None


def task_checks(config: pytest.Config, opts: Settings, state: BenchState) -> None:
    """A task run on a node: the node's own sandbox checks, unless the session only lists the items."""
    if not config.option.collectonly:
        node_checks(opts, state)


def listed_runs(names: tuple[str, ...]) -> tuple[str, str]:
    """What a run file's several runs are in a message, and how to pick one: ``2 models (a, b)``, or with several
    agents (a run named ``<model>+<agent>``) ``2 runs (a+x, a+y)``."""
    if any("+" in name for name in names):
        return f"{len(names)} runs ({', '.join(names)})", "--model=NAME and --bench-agent=NAME"
    return f"{len(names)} models ({', '.join(names)})", "--model=NAME"


def several_on_slurm(situation: Situation) -> str:
    listed, pick = listed_runs(situation.runs)
    one = "run" if listed.split(" ", 2)[1] == "runs" else "model"
    return f"--bench-backend=slurm runs one {one} per session, and the run file lists {listed}: pick one with {pick}"


def slurm_under_xdist(situation: Situation) -> str:
    return "--bench-backend=slurm runs every task as a Slurm job: leave out -n/--dist/--tx (pytest-xdist) for this run"


def collect_engine(config: pytest.Config, state: BenchState) -> tuple[Any, str]:
    from .slurm.backend import collect_ended  # why: the Slurm side loads only in a session that uses it
    from .slurm.taskpackage import CollectSession  # why: as above

    ended = collect_ended(state.run_dir)  # a Slurm run's jobs that ended without a package are lost
    return CollectSession(config, state, ended), "agentbench-collect-session"


def slurm_engine(config: pytest.Config, state: BenchState) -> tuple[Any, str]:
    from .slurm.backend import SlurmBackend  # why: the Slurm side loads only in a session that uses it

    return SlurmBackend(config, state), "agentbench-slurm"


def on_slurm(situation: Situation) -> bool:
    return situation.backend == "slurm"


MODES: tuple[RunMode, ...] = (
    RunMode("several models on Slurm", lambda s: bool(s.runs) and on_slurm(s), refusal=several_on_slurm),
    RunMode("task package (run-task)", lambda s: s.packaging, checks=task_checks, sends=True),
    RunMode("xdist worker", lambda s: s.role is Role.WORKER, checks=None, sends=True),
    RunMode("collect", lambda s: s.collecting, engine=collect_engine),
    RunMode("Slurm under xdist", lambda s: on_slurm(s) and s.role is Role.CONTROLLER, refusal=slurm_under_xdist),
    RunMode("Slurm", on_slurm, engine=slurm_engine),
    RunMode("xdist controller", lambda s: s.role is Role.CONTROLLER, distributes=True),
    RunMode("alone", lambda s: True),
)


def run_mode(situation: Situation) -> RunMode:
    """The first row of ``MODES`` that holds (the last always does)."""
    return next(mode for mode in MODES if mode.when(situation))
