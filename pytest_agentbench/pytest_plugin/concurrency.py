"""Model calls in flight, per process: each process's share of the session's bounds, and what it holds.

``--bench-max-connections`` (and a benchmark's own session-wide bounds, SciCode's ``--bench-set tool_concurrency``)
are numbers for the session: under xdist the controller tells each worker how many workers share them
(handshake.py, ``WorkerInput.workers``) and each takes ``share(N, workers)``. A benchmark prepares the samples a
process holds ahead of scoring (``RunSpec.held``): the only process holds every item it selected; a worker
holds the items its controller has sent it and it has not begun (placement gives a worker as many tasks at a
time as its share of connections). Each item's report carries the calls in flight of its process when it
finished (``IN_FLIGHT_PROPERTY``), which the progress line shows.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from ..benchmarks.base import BenchRun
from ..core.types import Sample
from ..models.concurrency import share
from .collect import BenchItem
from .distribution import xdist_compat as xc
from .distribution.handshake import WORKER_INPUT, Role, role_of
from .run import BenchState

IN_FLIGHT_PROPERTY = "agentbench_in_flight"  # (worker id, model requests in flight) of the item's process
UNSCORED_KEY = "agentbench_unscored"  # a worker's ``workeroutput``: JSON list of the work no record reports


def workers_of(config: pytest.Config) -> int:
    """How many processes of the session run items (on the controller: the workers it starts)."""
    role = role_of(config)
    if role is Role.WORKER:
        handshake = config.stash.get(WORKER_INPUT, None)
        return handshake.workers if handshake is not None else 1
    if role is Role.CONTROLLER:
        return max(1, xc.expected_workers(config))
    return 1


def connections_of(config: pytest.Config, max_connections: int) -> int:
    """This process's share of --bench-max-connections."""
    return share(max_connections, workers_of(config))


def chains_per_worker(config: pytest.Config, state: BenchState) -> int:
    """How many tasks placement lets a worker hold at once: its share of connections for a model that calls an
    endpoint (its chains are then generated concurrently), 1 for the oracle (it calls nothing)."""
    if state.settings.get("model") in (None, "oracle"):
        return 1
    return connections_of(config, int(state.options.get("max_connections") or 1))


def held_samples(session: pytest.Session, state: BenchState) -> Callable[[], Sequence[Sample]]:
    """The samples of ``state``'s run this process holds, in its order (RunSpec.held); a resumed run's
    finished items and prefilled steps are not among them."""

    def wanted(item: Any) -> bool:  # (a BenchItem of this run)
        return (
            isinstance(item, BenchItem)
            and item.state is state
            and not item.sample.skip_reason
            and item.sample.key not in state.resumed
        )

    if role_of(session.config) is not Role.WORKER:
        every = [item.sample for item in session.items if isinstance(item, BenchItem) and wanted(item)]
        return lambda: every

    def queued() -> list[Sample]:
        items = session.items
        picked = [items[i] for i in xc.queued_indices(session.config) if i < len(items)]
        return [item.sample for item in picked if isinstance(item, BenchItem) and wanted(item)]

    return queued


class InFlight:
    """Puts the calls in flight of this process on each item's report (the progress line sums them)."""

    def __init__(self, state: BenchState) -> None:
        self.state = state
        self.worker = os.environ.get("PYTEST_XDIST_WORKER", "")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        gate = self.state.gate
        if call.when == "call" and gate is not None and isinstance(item, BenchItem):
            report.user_properties.append((IN_FLIGHT_PROPERTY, [self.worker, int(gate.in_flight)]))
        return report


def keep_unscored(config: pytest.Config, state: BenchState, run: BenchRun) -> None:
    """After the run closed: what it did ahead that no record reports (``BenchRun.unscored``) goes into the run's
    cost, this process's own or, from a worker, through xdist's ``workeroutput`` to the controller."""
    work = list(run.unscored())
    if not work:
        return
    if role_of(config) is Role.WORKER:
        output = getattr(config, "workeroutput", None)
        if isinstance(output, dict):
            output[UNSCORED_KEY] = json.dumps(work, default=str)
        return
    state.unscored.extend(work)


def take_unscored(state: BenchState, node: Any) -> None:
    """The controller's side of ``keep_unscored``: a worker's list, as the worker goes down
    (``pytest_testnodedown``, distribution.py)."""
    output = getattr(node, "workeroutput", None) or {}
    try:
        work = json.loads(output.get(UNSCORED_KEY) or "[]")
    except (TypeError, ValueError):  # another build's worker: its cost stays out, nothing else breaks
        return
    state.unscored.extend(w for w in work if isinstance(w, dict))
