"""The distribution component: one plugin object on the xdist controller, one on each worker.

``take_role`` decides at the first configure hook what this process is (handshake.py: controller, worker, or
alone) and, on a worker, reads what its controller sent (``WorkerInput``) and registers ``DistributionWorker``.
The plugin's ``pytest_configure`` registers ``DistributionController`` on the controller of a benchmark run.
Between them they own every xdist hook pytest-agentbench implements (the progress line and the reporter hear
a worker's collection from the controller: ``handshake.on_worker_collection``); ``pytest_unconfigure``
unregisters both, with every other plugin object of the run.

What they do: workers learn the run from the controller, one task's samples stay on one worker, in order, and
an item whose worker died still gets a record. A sample may need what the earlier samples of its task produced
(a step needs the code of the steps before it); keeping a task on one worker makes ``-n N`` produce the same
records as ``-n 0`` without regenerating anything. Workers read nothing of the run folder (it may be on another
machine): a resumed run hands them its finished records in their worker input. The controller is the only
writer of the run (``writer.py``): records, files and cache entries reach it in the reports. Remote hosts
(``--tx ssh=...``/``socket=...``) add probes, forwarded settings, heartbeats and lost-host handling: the
helpers in remote.py (``RemoteHosts`` on the controller, ``RemoteWorker`` on a worker) that these plugins hold.
xdist's objects are touched only through the adapter (xdist_compat.py).
"""

from __future__ import annotations

import json
import socket
from typing import TYPE_CHECKING, Any

import pytest

from ...core import records as rec
from ..collect import session_entries
from ..concurrency import take_unscored
from ..run import BenchState, base_record
from . import xdist_compat as xc
from .budget import BudgetLink, SharedBudget
from .handshake import WORKER_COLLECTION, WORKER_INPUT, RemoteInput, Role, WorkerInput, decide_role

if TYPE_CHECKING:
    from .remote import RemoteHosts, RemoteWorker

CONTROLLER_PLUGIN = "agentbench-distribution-controller"
WORKER_PLUGIN = "agentbench-distribution-worker"


def take_role(config: pytest.Config) -> Role:
    """The one place this process's role is decided (before any plugin reads an option); on a worker whose
    controller runs a benchmark, its worker input is read and the worker's plugin registered. Raises
    HandshakeError when that input cannot be read."""
    role = decide_role(config)
    if role is not Role.WORKER:
        return role
    handshake = WorkerInput.from_workerinput(config.workerinput)  # type: ignore[attr-defined]
    config.stash[WORKER_INPUT] = handshake
    if handshake is not None:
        # pytest_configure is historic: the worker's own is called as it registers, before the plugin reads options
        config.pluginmanager.register(DistributionWorker(handshake), WORKER_PLUGIN)
    return role


def count_in_session_budget(config: pytest.Config, state: BenchState, model: Any) -> None:
    """On a worker of a run with a budget: ``model``'s calls count in the session's total (budget.py)."""
    worker = config.pluginmanager.get_plugin(WORKER_PLUGIN)
    if isinstance(worker, DistributionWorker) and worker.budget is not None:
        worker.budget.attach(state, model)


class DistributionWorker:
    """An xdist worker's side of a benchmark run (registered only on workers): what its controller sent."""

    def __init__(self, handshake: WorkerInput) -> None:
        self.handshake = handshake
        self.remote = remote_worker(handshake.remote) if handshake.remote is not None else None
        self.budget = BudgetLink(handshake.budget) if handshake.budget is not None else None

    @pytest.hookimpl(tryfirst=True)
    def pytest_configure(self, config: pytest.Config) -> None:
        """A remote worker takes the controller's run settings before the plugin reads its options."""
        if self.remote is not None:
            self.remote.take_settings(config)

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> bool | None:
        """On a remote host without a GPU, an item marked gpu ends as env_error instead of running."""
        if self.remote is not None and self.remote.unplaced(pyfuncitem):
            return True
        return None


def remote_worker(given: RemoteInput) -> RemoteWorker:
    """The ``RemoteWorker`` of a worker on another host: a local worker never loads the remote helpers."""
    from .remote import RemoteWorker  # why: see the docstring

    return RemoteWorker(given)


class DistributionController:
    """The xdist controller's side of a benchmark run (registered only there): the worker input, placement,
    records of items whose worker died, and, through ``RemoteHosts``, the run's remote hosts."""

    def __init__(self, config: pytest.Config, state: BenchState, runs: list[BenchState] | None = None) -> None:
        self.config = config
        self.state = state
        self.runs = {run.name: run for run in runs or [state]}  # several runs: each run's state, by its name
        self.dist = config.getoption("dist", None)  # xdist's --dist, read at configure time
        # the same for every worker, and possibly large: encoded once
        self.resumed = json.dumps(list(state.resumed.values()), default=rec.json_default) if state.resumed else ""
        self.remote: RemoteHosts | None = None  # set at session start when the run has remote --tx workers
        self.samples: dict[str, Any] | None = None  # node id -> sample, built at the first crash
        self.budget = SharedBudget(self.runs)  # every worker's model calls against each run's --bench-max-cost

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Before xdist starts any gateway: refuse what cannot run remotely, then take over placement."""
        from .remote import remote_hosts  # why: the remote hosts' helpers load on the controller only

        self.remote = remote_hosts(self.config, self.state, self.note_host)

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """What a worker generated ahead and never scored comes back with it (its ``workeroutput``): the run's cost."""
        take_unscored(self.state, node)

    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        for listener in self.config.stash.get(WORKER_COLLECTION, []):
            listener(ids)

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_newgateway(self, gateway: Any) -> None:
        if self.remote is not None:
            self.remote.new_gateway(gateway)

    def pytest_configure_node(self, node: Any) -> None:
        """The one place a worker's input is built (the worker reads it back in ``take_role``)."""
        state = self.state
        handshake = WorkerInput(
            run_dir=state.run_dir,
            only_bench=state.only_bench,
            run_dirs={name: s.run_dir for name, s in self.runs.items() if name is not None},
            resumed=self.resumed,
            remote=self.remote.worker_input(node) if self.remote is not None else None,
            workers=max(1, xc.expected_workers(self.config)),
            budget=self.budget.channel_for(node),
        )
        node.workerinput.update(handshake.to_workerinput())

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: Any, log: Any):
        # The placement scheduler (placement.py) sends each task whole, heaviest first, and survives a dead
        # worker: xdist's load-scope queues the dead worker's finished tasks again and then hangs, and would run
        # the item that killed it again (resume runs it).
        if self.dist not in ("load", "loadscope"):
            return None
        if self.remote is not None:
            return self.remote.scheduler(config, log)
        from .remote import make_placement_scheduler  # why: only the controller schedules

        return make_placement_scheduler(config, log, lambda nodeid: False, lambda node: False)

    def note_host(self, worker: str, host: str) -> None:
        """What host a worker runs on (its records say so; a host probe may say so earlier)."""
        for state in self.runs.values():
            state.worker_hosts[worker] = host

    def pytest_handlecrashitem(self, crashitem: str, report: Any, sched: Any) -> None:
        """xdist's report of the item a dead worker was running becomes that item's record: an error naming the
        worker and its host, marked lost (``--bench-resume`` runs it again). It is written like any other."""
        if self.samples is None:
            self.samples = session_entries(self.runs.values())
        if crashitem not in self.samples:  # not a benchmark item (a user's test in the same session)
            return
        state, sample = self.samples[crashitem]
        node = xc.crashed_worker(report)
        worker = xc.worker_id(node) if node is not None else "?"
        host = state.worker_hosts.get(worker) or gateway_host(node)
        record = {
            **base_record(sample, state),
            "status": "error",
            "message": lost_message(worker, host),
            rec.LOST_FIELD: True,
            "duration": 0.0,
            "worker": worker,
            "host": host,
        }
        report.user_properties.append((rec.RECORD_PROPERTY, record))
        report.user_properties.append((rec.DELIVERY_PROPERTY, {"append": True, "files": [], "cache": [], "bytes": 0}))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.remote is not None:
            self.remote.finish(session)  # a lost host makes the run incomplete (exit 1)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.remote is not None:
            self.remote.summarize(terminalreporter)  # each lost host, with the resume that runs its items again


def lost_message(worker: str, host: str | None) -> str:
    where = f"worker {worker!r}" + (f" on host {host}" if host else "")
    return (
        f"{where} died while running this item (its process crashed or was killed, or the host was lost); "
        f"no result reached the controller: --bench-resume runs it again"
    )


def gateway_host(node: Any) -> str | None:
    """The host of an xdist worker from its gateway spec: the ssh or socket address, this machine for popen."""
    spec = xc.worker_spec(node) if node is not None else None
    if spec is None:
        return None
    if getattr(spec, "ssh", None):
        return str(spec.ssh).rsplit("@", 1)[-1]
    if getattr(spec, "socket", None):
        return str(spec.socket).rsplit(":", 1)[0]
    if getattr(spec, "popen", None):
        return socket.gethostname()
    return None
