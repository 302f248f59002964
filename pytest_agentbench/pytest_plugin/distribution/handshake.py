"""The role of this process in an xdist run, and the one message a controller gives each of its workers.

pytest-xdist hands a worker ``config.workerinput``, a dict its controller filled in ``pytest_configure_node``
(execnet carries it: plain values, and channels by reference). Everything pytest-agentbench puts there is one
``WorkerInput``: built in one place (``DistributionController.pytest_configure_node``, plugins.py) and read
in one place (``distribution.take_role``, the worker's first configure hook), so the rest of the plugin reads
typed fields, never keys. Controller and worker run the same build (a remote host's build is checked by its
probe), so a key this reader does not know, or one it needs and does not find, is an error that says so.

The role is decided once per process, as pytest-xdist documents it (a worker has ``config.workerinput``), and
kept in ``config.stash[ROLE]``; nothing else asks xdist which process this is.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ...core import records as rec

# The keys of ``workerinput`` the controller fills (the wire format: the same in every release that speaks it).
RUN_DIR_KEY = "agentbench_run_dir"
ONLY_BENCH_KEY = "agentbench_only_bench"
RESUMED_KEY = "agentbench_resumed"  # JSON text: the finished records a resumed run reuses (workers read no file)
RUN_DIRS_KEY = "agentbench_run_dirs"  # JSON text: run name -> run folder, in a session of several runs
REMOTE_KEY = "agentbench_remote"  # a remote worker: {"settings", "host", "gpus", "host_timeout"}
HEARTBEAT_KEY = "agentbench_heartbeat"  # a remote worker: an execnet channel to its controller
WORKERS_KEY = "agentbench_workers"  # how many workers share the session's bounds (--bench-max-connections, ...)
BUDGET_KEY = "agentbench_budget"  # an execnet channel: the run budget counted over every worker (budget.py)
KEYS = (
    RUN_DIR_KEY,
    ONLY_BENCH_KEY,
    RESUMED_KEY,
    RUN_DIRS_KEY,
    REMOTE_KEY,
    HEARTBEAT_KEY,
    WORKERS_KEY,
    BUDGET_KEY,
)
REQUIRED_KEYS = (RUN_DIR_KEY, ONLY_BENCH_KEY)
REMOTE_FIELDS = ("settings", "host", "gpus", "host_timeout")
PREFIX = "agentbench_"  # every key of ours starts so; xdist's own (workerid, testrunuid, ...) and others' do not


class HandshakeError(ValueError):
    """The controller's worker input cannot be read by this worker (controller and worker differ)."""


class Role(enum.Enum):
    CONTROLLER = "controller"  # xdist hands this session's items to workers (-n N, --tx, --dist other than no)
    WORKER = "worker"  # an xdist worker: local (-n, popen) or remote (--tx ssh=/socket=)
    ALONE = "alone"  # no xdist: the only process (xdist absent or disabled, -n 0, --dist=no)


ROLE = pytest.StashKey[Role]()
# Under xdist the controller collects nothing itself: who needs the selection hears a worker's collection from
# the distribution controller (the one plugin that implements xdist's hooks).
WORKER_COLLECTION = pytest.StashKey[list[Callable[[list[str]], None]]]()


def on_worker_collection(config: pytest.Config, listener: Callable[[list[str]], None]) -> None:
    """``listener(ids)`` is called with the node ids each xdist worker collected (every worker collects the same
    items, with -k/-m/--deselect applied); without xdist it is never called."""
    config.stash.setdefault(WORKER_COLLECTION, []).append(listener)


WORKER_INPUT = pytest.StashKey["WorkerInput | None"]()  # on a worker: what its controller sent (None: nothing)


def decide_role(config: pytest.Config) -> Role:
    """This process's role, kept in ``config.stash[ROLE]``; called once, before any plugin reads an option."""
    if hasattr(config, "workerinput"):
        role = Role.WORKER
    elif config.pluginmanager.hasplugin("xdist") and config.getoption("dist", "no") != "no":
        role = Role.CONTROLLER
    else:
        role = Role.ALONE
    config.stash[ROLE] = role
    return role


def run_alone(config: pytest.Config) -> None:
    """This controller runs its session in-process after all (a resumed run with nothing left to run): no worker
    is started, through xdist's documented --dist/--tx options (its session is made after every plugin's
    configure hook, from their values)."""
    if role_of(config) is Role.CONTROLLER:
        config.option.dist = "no"
        config.option.tx = []
        config.stash[ROLE] = Role.ALONE


def role_of(config: pytest.Config) -> Role:
    """This process's role: decided at configure time in a benchmark run; in a session without one (a test that
    asks for the ``bench_model`` fixture), when first asked."""
    role = config.stash.get(ROLE, None)
    return role if role is not None else decide_role(config)


@dataclass(frozen=True)
class RemoteInput:
    """What a worker on another host (``--tx ssh=...``/``socket=...``) gets besides the run: the controller's
    explicitly set run settings as command-line values (in memory only: they may hold the API key; paths are
    never among them), its host as the controller names it and the GPUs the probe found there, the liveness
    bound (``--bench-set host_timeout``) and the heartbeat channel (None only where no gateway exists, in a test)."""

    settings: Mapping[str, Any]
    host: str
    gpus: int
    host_timeout: float
    heartbeat: Any = None


@dataclass(frozen=True)
class WorkerInput:
    """What a controller tells each worker about the run: where its records go (the controller writes them; a
    worker only names its run), whether only the benchmark is collected, in a session of several runs each run's
    folder, in a resumed run the finished records it reuses, on a remote worker ``remote``, and when the run
    has a budget the channel its model calls' costs go by (``budget``)."""

    run_dir: Path
    only_bench: bool
    run_dirs: Mapping[str, Path] = field(default_factory=dict)
    resumed: str = ""  # JSON text of the reused records, encoded once on the controller (``records.json_default``)
    remote: RemoteInput | None = None
    workers: int = 1  # the session's workers: each takes its share of the session-wide bounds
    budget: Any = None  # the run budget's execnet channel to the controller (budget.py), when the run has one

    def to_workerinput(self) -> dict[str, Any]:
        """The ``workerinput`` entries (plain values execnet can carry) that ``from_workerinput`` reads back."""
        out: dict[str, Any] = {RUN_DIR_KEY: str(self.run_dir), ONLY_BENCH_KEY: self.only_bench}
        if self.workers > 1:
            out[WORKERS_KEY] = self.workers
        if self.run_dirs:
            out[RUN_DIRS_KEY] = json.dumps({name: str(path) for name, path in self.run_dirs.items()})
        if self.resumed:
            out[RESUMED_KEY] = self.resumed
        if self.budget is not None:
            out[BUDGET_KEY] = self.budget
        if self.remote is not None:
            remote = self.remote
            out[REMOTE_KEY] = {
                "settings": dict(remote.settings),
                "host": remote.host,
                "gpus": remote.gpus,
                "host_timeout": remote.host_timeout,
            }
            if remote.heartbeat is not None:
                out[HEARTBEAT_KEY] = remote.heartbeat
        return out

    @classmethod
    def from_workerinput(cls, workerinput: Mapping[str, Any]) -> WorkerInput | None:
        """What the controller sent; None when it sent nothing of ours (its session runs no benchmark). Raises
        HandshakeError naming a key this worker does not know or one it needs and did not get."""
        ours = {key: value for key, value in workerinput.items() if str(key).startswith(PREFIX)}
        if not ours:
            return None
        unknown = sorted(set(ours) - set(KEYS))
        if unknown:
            raise mismatch(f"has {', '.join(map(repr, unknown))}, which this worker's pytest-agentbench does not know")
        missing = [key for key in REQUIRED_KEYS if key not in ours]
        if missing:
            raise mismatch(f"lacks {', '.join(map(repr, missing))}")
        dirs = json.loads(ours[RUN_DIRS_KEY]) if RUN_DIRS_KEY in ours else {}
        return cls(
            run_dir=Path(ours[RUN_DIR_KEY]),
            only_bench=bool(ours[ONLY_BENCH_KEY]),
            run_dirs={name: Path(path) for name, path in dirs.items()},
            resumed=str(ours.get(RESUMED_KEY) or ""),
            remote=remote_input(ours),
            workers=max(1, int(ours.get(WORKERS_KEY) or 1)),
            budget=ours.get(BUDGET_KEY),
        )

    def run_dir_of(self, name: str | None) -> Path:
        """The folder of the run ``name`` in a session of several runs, else the run's."""
        if name is not None and self.run_dirs:
            return self.run_dirs[name]
        return self.run_dir

    def resumed_records(self) -> dict[str, rec.Record]:
        """The finished records a resumed run reuses, by record key (none when the run is not resumed)."""
        finished = rec.latest_by_id(json.loads(self.resumed)) if self.resumed else {}
        return {key: rec.Record.from_json(record) for key, record in finished.items()}


def remote_input(ours: Mapping[str, Any]) -> RemoteInput | None:
    remote = ours.get(REMOTE_KEY)
    if remote is None:
        if HEARTBEAT_KEY in ours:
            raise mismatch(f"has {HEARTBEAT_KEY!r} without {REMOTE_KEY!r}")
        return None
    missing = [name for name in REMOTE_FIELDS if name not in remote]
    if missing:
        raise mismatch(f"has {REMOTE_KEY!r} without {', '.join(map(repr, missing))}")
    return RemoteInput(
        settings=dict(remote["settings"]),
        host=str(remote["host"]),
        gpus=int(remote["gpus"]),
        host_timeout=float(remote["host_timeout"]),
        heartbeat=ours.get(HEARTBEAT_KEY),
    )


def mismatch(what: str) -> HandshakeError:
    return HandshakeError(
        f"the worker input from the xdist controller {what}: the controller and this worker run "
        f"different pytest-agentbench versions; install the controller's version where the "
        f"worker runs (the python after //python= in --tx)"
    )
