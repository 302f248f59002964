"""xdist wiring: workers learn the run from the controller, one task's samples stay on one worker, in order,
and an item whose worker died still gets a record.

A sample may need what the earlier samples of its task produced (a step needs the code of the steps
before it); keeping a task on one worker makes ``-n N`` produce the same records as ``-n 0`` without
regenerating anything. Workers read nothing of the run folder (it may be on another machine): a resumed
run hands them its finished records in ``workerinput``. The controller is the only writer of the run
(``writer.py``): records, files and cache entries reach it in the reports.
"""
from __future__ import annotations

import json
import socket
from typing import Any

from ..core import records as rec
from . import xdist_compat as xc
from .collect import item_entries
from .remote import make_placement_scheduler
from .run import BenchState, base_record
from .state import MODEL_RUN_DIRS_KEY, ONLY_BENCH_KEY, RESUMED_KEY, RUN_DIR_KEY


class XdistHooks:
    """Registered on the controller when pytest-xdist is active."""

    def __init__(self, state: BenchState, dist: str | None, runs: list[BenchState] | None = None) -> None:
        self.state = state
        self.runs = {run.model: run for run in runs or [state]}  # several models: each model's state
        self.dist = dist  # xdist's --dist, read at configure time
        self.resumed = json.dumps(list(state.resumed.values()), default=rec.json_default) if state.resumed else ""
        self.samples: dict[str, Any] | None = None  # node id -> sample, built at the first crash

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[RUN_DIR_KEY] = str(self.state.run_dir)
        node.workerinput[ONLY_BENCH_KEY] = self.state.only_bench
        if self.state.models:
            node.workerinput[MODEL_RUN_DIRS_KEY] = json.dumps({m: str(s.run_dir) for m, s in self.runs.items()})
        if self.resumed:
            node.workerinput[RESUMED_KEY] = self.resumed

    def pytest_xdist_make_scheduler(self, config: Any, log: Any):
        # The placement scheduler (placement.py) sends each task whole, heaviest first, and survives a dead
        # worker: xdist's load-scope queues the dead worker's finished tasks again and then hangs, and would run
        # the item that killed it again (resume runs it).
        if self.dist in ("load", "loadscope"):
            return make_placement_scheduler(config, log, lambda nodeid: False, lambda node: False)
        return None

    def note_host(self, worker: str, host: str) -> None:
        """What host a worker runs on (its records say so; a host probe may say so earlier)."""
        for state in self.runs.values():
            state.worker_hosts[worker] = host

    def pytest_handlecrashitem(self, crashitem: str, report: Any, sched: Any) -> None:
        """xdist's report of the item a dead worker was running becomes that item's record: an error naming the
        worker and its host, marked lost (``--bench-resume`` runs it again). It is written like any other."""
        if self.samples is None:
            self.samples = item_entries(self.state.benchmark, self.state.tasks, self.state.options.attempts,
                                        self.state.models)
        if crashitem not in self.samples:  # not a benchmark item (a user's test in the same session)
            return
        model, sample = self.samples[crashitem]
        state = self.runs.get(model, self.state)
        node = xc.crashed_worker(report)
        worker = xc.worker_id(node) if node is not None else "?"
        host = state.worker_hosts.get(worker) or gateway_host(node)
        record = {**base_record(sample, state), "status": "error",
                  "message": lost_message(worker, host), rec.LOST_FIELD: True, "duration": 0.0,
                  "worker": worker, "host": host}
        report.user_properties.append((rec.RECORD_PROPERTY, record))
        report.user_properties.append((rec.DELIVERY_PROPERTY, {"append": True, "files": [], "cache": [], "bytes": 0}))


def lost_message(worker: str, host: str | None) -> str:
    where = f"worker {worker!r}" + (f" on host {host}" if host else "")
    return (f"{where} died while running this item (its process crashed or was killed, or the host was lost); "
            f"no result reached the controller: --bench-resume runs it again")


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
