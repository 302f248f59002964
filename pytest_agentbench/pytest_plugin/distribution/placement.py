"""Placement: which xdist worker runs which task, heaviest first, GPU tasks on GPU hosts.

``PlacementScheduling`` implements xdist's documented scheduler interface (``xdist.scheduler.protocol.
Scheduling``; returned from ``pytest_xdist_make_scheduler``) on its own, touching xdist only through
``xdist_compat``. Its rules:

* a unit is a task (a SciCode problem: its steps run in order on one worker), or one item for a benchmark
  that does not group its items (a CORE-Bench capsule), or a test module/class for other tests;
* units go out heaviest first (``durations.plan_costs``: the previous run's durations from
  ``<cache dir>/durations.json``, else the benchmark's declared estimate), each to the first worker that is
  free; a worker is free when it waits on its last item (xdist runs an item only once it knows the next one,
  so a worker always gets its next unit as it starts its last item);
* a worker that holds several units at once (it generates their chains concurrently) is sent the ones it
  holds from the start shortest chain first, heaviest first among equal lengths: a short chain's answers are
  all in early, so it is scored while the long chains are still generating, and what is left to score after
  the last answer is the end of the longest chain, not every unit queued behind it (which units go to which
  worker still follows cost alone);
* GPU placement comes before cost: a worker whose host has a GPU takes GPU units first; a worker without one
  never takes them while some live worker has one (when none has, they go anywhere and end as env_error
  "no worker with a GPU", see remote.py, so they stay in the run's denominator);
* once the run budget is spent (``--bench-max-cost``, counted on the records delivered: ``state.budget_stop``),
  or the run's model errors in a row reached --bench-set max_consecutive_errors (``state.error_stop``)
  no unit goes out any more: the queue is dropped, its items are reported not run;
* a worker that can take nothing more is told to finish, so it never waits on its last item; except with
  ``keep_free`` (remote workers, which are never replaced): then it is kept while another worker holds a
  unit it has not begun, so that unit has a live worker to go to if the other one's host is lost;
* a worker that dies: the item it was running is returned to xdist (its crash report becomes a ``lost``
  record), the later items of its task are reported lost too (a task runs whole in one process, so
  ``--bench-resume`` runs them together), and its units not begun go back to the queue.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from ..concurrency import chains_per_worker
from ..run import STATE, states_of
from . import xdist_compat as xc
from .durations import plan_costs

Unit = dict[str, bool]  # node id -> done, in collection order


class PlacementScheduling:
    def __init__(
        self,
        config: Any,
        log: Any = None,
        *,
        gpu_item: Callable[[str], bool],
        gpu_node: Callable[[Any], bool],
        unit_of: Callable[[str], str] | None = None,
        unit_cost: Callable[[str, list[str]], float] | None = None,
        keep_free: bool = False,
        stopped: Callable[[], bool] | None = None,
        held: int = 1,
    ) -> None:
        self.config = config
        # units a worker holds at once: more than one when it generates their chains concurrently (its share of
        # --bench-max-connections, concurrency.py); it still runs them one after another
        self.held = max(1, int(held))
        self.stopped = stopped or (lambda: False)  # True once no new unit may start (the run budget is spent)
        # remote workers are never replaced (remote.py): a free worker is then kept, not told to finish, while
        # another worker holds units it has not begun, so they have a live worker to go to if that one's host
        # is lost (it waits on its last item meanwhile; xdist ends the run once no worker holds more than one)
        self.keep_free = keep_free
        self.log = log if log is not None else (lambda *args: None)
        self.gpu_item = gpu_item  # node id -> whether the item needs a GPU
        self.gpu_node = gpu_node  # worker -> whether its host has a GPU
        self.unit_of = unit_of or default_unit
        self.unit_cost = unit_cost or (lambda unit, nodeids: float(len(nodeids)))
        self.numnodes = xc.expected_workers(config)
        self.collection: list[str] | None = None
        self.collections: dict[Any, list[str]] = {}  # worker -> its collection
        self.assigned: dict[Any, dict[str, Unit]] = {}  # live worker -> its units, in the order given
        self.queue: list[tuple[str, Unit]] = []  # units not given out, heaviest first
        self.costs: dict[str, float] = {}
        self.order: list[str] = []  # every unit given out, in order (for the log and the tests)
        self.unsent: dict[Any, list[str]] | None = None  # units given at the start, sent once all are chosen

    # ---- xdist's Scheduling interface
    @property
    def nodes(self) -> list[Any]:
        return list(self.assigned)

    @property
    def collection_is_completed(self) -> bool:
        # once scheduled it stays complete: workers that finish leave, and xdist ends the session only when
        # ``tests_finished`` (which needs this) holds after an event
        return self.collection is not None or len(self.collections) >= self.numnodes

    @property
    def tests_finished(self) -> bool:
        if not self.collection_is_completed or self.queue:
            return False
        return all(pending(units) < 2 for units in self.assigned.values())

    @property
    def has_pending(self) -> bool:
        return bool(self.queue) or any(pending(units) for units in self.assigned.values())

    def add_node(self, node: Any) -> None:
        assert node not in self.assigned
        self.assigned[node] = {}

    def add_node_collection(self, node: Any, collection: Sequence[str]) -> None:
        if self.collection is not None and list(collection) != self.collection:
            self.log(f"worker {xc.worker_id(node)} collected other items than the run; it gets no work")
            return
        self.collections[node] = list(collection)

    def mark_test_complete(self, node: Any, item_index: int, duration: float = 0) -> None:
        nodeid = self.collections[node][item_index]
        for unit in self.assigned[node].values():
            if nodeid in unit:
                unit[nodeid] = True
                break
        self.feed(node)
        for other in self.nodes:  # a worker kept free may now be told to finish
            if other is not node:
                self.feed(other)

    def mark_test_pending(self, item: str) -> None:
        """A plugin's ``pytest_handlecrashitem`` asks for an item to run again: it is queued as its own unit."""
        self.enqueue([(f"{item} (again)", {item: False})])
        for node in self.nodes:
            self.feed(node)

    def remove_pending_tests_from_node(self, node: Any, indices: Sequence[int]) -> None:
        raise NotImplementedError("placement scheduling never steals items")

    def remove_node(self, node: Any) -> str | None:
        units = self.assigned.pop(node)
        running = next((unit for unit in units.values() if not all(unit.values())), None)
        if running is None:
            return None
        left = [nodeid for nodeid, done in running.items() if not done]
        crashitem, rest = left[0], left[1:]
        running.update((nodeid, True) for nodeid in running)
        self.enqueue([(scope, unit) for scope, unit in units.items() if not any(unit.values())])
        self.report_lost(rest, node)
        for other in self.nodes:
            self.feed(other)
        return crashitem

    # ---- a worker that never ran (remote.py: a lost host is not replaced)
    def count_out(self, node: Any) -> None:
        """A worker that died before it sent its collection will never send one: stop waiting for it (the first
        distribution waits for every expected collection), and distribute now if the others' are all in."""
        if node in self.collections or self.collection is not None or self.numnodes <= 0:
            return
        self.numnodes -= 1
        if self.numnodes and self.collections and self.collection_is_completed:
            self.schedule()

    def take_queued(self) -> list[str]:
        """The node ids of the units no worker took yet, removed from the queue (no worker is left to take
        them: the caller reports them lost)."""
        out = [nodeid for _scope, unit in self.queue for nodeid, done in unit.items() if not done]
        self.queue = []
        return out

    def schedule(self) -> None:
        assert self.collection_is_completed
        if self.collection is not None:  # a worker joined later (a replacement): give it work
            for node in self.nodes:
                self.feed(node)
            return
        if not self.same_collections():
            return
        self.collection = list(next(iter(self.collections.values())))
        units: dict[str, Unit] = {}
        for nodeid in self.collection:
            units.setdefault(self.unit_of(nodeid), {})[nodeid] = False
        self.enqueue(list(units.items()))
        self.unsent = {node: [] for node in self.nodes}
        for node in self.nodes:  # one unit each first, so the heaviest are spread over the workers
            self.give(node)
        for _ in range(self.held):  # then round after round, so the workers' held units are alike
            for node in self.nodes:
                self.feed(node)
        for node in self.nodes:
            self.send_held(node)
        self.unsent = None

    # ---- placement
    def enqueue(self, units: list[tuple[str, Unit]]) -> None:
        for scope, unit in units:
            if scope not in self.costs:
                self.costs[scope] = float(self.unit_cost(scope, list(unit)))
        # heaviest first; equal costs keep collection order (sorted is stable)
        self.queue = sorted([*self.queue, *units], key=lambda entry: -self.costs[entry[0]])

    def feed(self, node: Any) -> None:
        """Give ``node`` its next unit when it is down to its last item; tell it to finish when nothing it may
        take is left."""
        if node not in self.assigned or xc.is_shutting_down(node):
            return
        if pending(self.assigned[node]) > 1:
            if sum(1 for unit in self.assigned[node].values() if not all(unit.values())) < self.held:
                self.give(node)
            return
        if not self.give(node) and not (self.keep_free and self.held_elsewhere(node)):
            self.send_held(node)  # what it was given comes before being told to finish
            xc.shut_down(node)

    def held_elsewhere(self, node: Any) -> bool:
        """Whether another live worker holds a unit it has not begun (what remove_node would requeue)."""
        return any(
            not_begun(units)
            for other, units in self.assigned.items()
            if other is not node and not xc.is_shutting_down(other)
        )

    def give(self, node: Any) -> bool:
        if self.stopped():  # the run budget is spent: nothing new starts, what was not given out is not run
            self.queue = []
            return False
        index = self.pick(node)
        if index is None:
            return False
        scope, unit = self.queue.pop(index)
        self.assigned[node][scope] = unit
        self.order.append(scope)
        self.log(f"{xc.worker_id(node)} <- {scope} (expected cost {self.costs[scope]:.3g})")
        if self.unsent is not None and node in self.unsent:
            self.unsent[node].append(scope)
        else:
            self.send(node, unit)
        return True

    def send(self, node: Any, unit: Unit) -> None:
        collection = self.collections[node]
        xc.send_items(node, [collection.index(nodeid) for nodeid, done in unit.items() if not done])

    def send_held(self, node: Any) -> None:
        """Send the units ``node`` was given at the start, shortest chain first (see the module's rules), and
        keep ``assigned`` in the order the worker runs them (``remove_node`` finds the running unit by it)."""
        if self.unsent is None or node not in self.unsent:
            return
        held = self.unsent.pop(node)  # (every unit the worker has: all were given while ``unsent`` was set)
        units = self.assigned[node]
        if self.held > 1:  # one unit at a time: they run as given, heaviest first
            held.sort(key=lambda scope: (len(units[scope]), -self.costs[scope]))
        self.assigned[node] = {scope: units[scope] for scope in held}
        for scope in held:
            self.send(node, units[scope])

    def pick(self, node: Any) -> int | None:
        """The queue index of ``node``'s next unit: a GPU worker's heaviest GPU unit, else the heaviest unit it
        may take (a GPU unit only when no live worker has a GPU)."""
        if node not in self.collections:
            return None
        gpu_here = self.gpu_node(node)
        gpu_somewhere = gpu_here or any(self.gpu_node(n) for n in self.nodes if not xc.is_shutting_down(n))
        first_allowed = None
        for index, (_scope, unit) in enumerate(self.queue):
            needs = any(self.gpu_item(nodeid) for nodeid in unit)
            if needs and gpu_here:
                return index
            if (not needs or not gpu_somewhere) and first_allowed is None:
                first_allowed = index
                if not gpu_here:
                    break
        return first_allowed

    def report_lost(self, nodeids: list[str], node: Any) -> None:
        """Items of a dead worker's task that will not run in this session get the report xdist makes for the
        item a worker died in (and so a lost record), through xdist's public hooks."""
        for nodeid in nodeids:
            path = nodeid.split("::")[0]
            report = xc.with_worker(
                pytest.TestReport(
                    nodeid=nodeid,
                    location=(path, None, path),
                    keywords={},
                    outcome="failed",
                    when="call",
                    longrepr=f"worker {xc.worker_id(node)!r} died while running an earlier item of {nodeid!r}'s task",
                ),
                node,
            )
            self.config.hook.pytest_handlecrashitem(crashitem=nodeid, report=report, sched=self)
            self.config.hook.pytest_runtest_logreport(report=report)

    def same_collections(self) -> bool:
        """Whether every worker collected the same items; else the difference is reported as a collection
        error (as xdist's own schedulers do) and nothing runs."""
        (first, expected), *others = self.collections.items()
        for node, got in others:
            if got == expected:
                continue
            diff = "\n".join(difflib.unified_diff(expected, got, xc.worker_id(first), xc.worker_id(node), lineterm=""))
            message = f"different tests were collected between {xc.worker_id(first)} and {xc.worker_id(node)}:\n{diff}"
            self.log(message)
            self.config.hook.pytest_collectreport(
                report=pytest.CollectReport("", "failed", longrepr=message, result=[])
            )
            return False
        return True


def placement_scheduler(
    config: Any, log: Any, gpu_item: Callable[[str], bool], gpu_node: Callable[[Any], bool], keep_free: bool = False
) -> PlacementScheduling:
    """The run's scheduler: units and their costs from the run's state (durations.py) when it has one."""
    state = config.stash.get(STATE, None)
    unit_of, unit_cost = plan_costs(states_of(config)) if state is not None else (None, None)
    stopped = (lambda: bool(state.budget_stop or state.error_stop)) if state is not None else None
    return PlacementScheduling(
        config,
        log,
        gpu_item=gpu_item,
        gpu_node=gpu_node,
        unit_of=unit_of,
        unit_cost=unit_cost,
        keep_free=keep_free,
        stopped=stopped,
        held=chains_per_worker(config, state) if state is not None else 1,
    )


def pending(units: dict[str, Unit]) -> int:
    return sum(1 for unit in units.values() for done in unit.values() if not done)


def not_begun(units: dict[str, Unit]) -> list[str]:
    """A worker's units after the one it is running, none of whose items is done."""
    running = next((scope for scope, unit in units.items() if not all(unit.values())), None)
    return [scope for scope, unit in units.items() if scope != running and not any(unit.values())]


def default_unit(nodeid: str) -> str:
    """A test that is no benchmark item is grouped as xdist's load-scope does: by module, or by class."""
    return nodeid.rsplit("::", 1)[0]
