"""Placement by capability: xdist's load-scope scheduling (each task whole on one worker, in order) that
sends a work unit holding an item which needs a GPU only to a worker whose host has one.

When no live worker has a GPU, such units go to any worker, whose plugin ends them as env_error ("no
worker with a GPU", see remote.py), so they stay in the run's denominator. A worker that can take no
remaining unit waits idle and is shut down when the queue is empty.
"""
from __future__ import annotations

from typing import Any, Callable

from xdist.scheduler import LoadScopeScheduling


class PlacementScheduling(LoadScopeScheduling):
    def __init__(self, config: Any, log: Any = None, *, gpu_item: Callable[[str], bool],
                 gpu_node: Callable[[Any], bool]) -> None:
        super().__init__(config, log)
        self.gpu_item = gpu_item  # node id -> whether the item needs a GPU
        self.gpu_node = gpu_node  # worker -> whether its host has a GPU

    def unit_needs_gpu(self, work_unit: dict[str, bool]) -> bool:
        return any(self.gpu_item(nodeid) for nodeid in work_unit)

    def pick_scope(self, node: Any) -> str | None:
        """The next unit for ``node``: a GPU worker takes GPU units first; a worker without one never takes
        them while some live worker has a GPU."""
        gpu_here = self.gpu_node(node)
        gpu_somewhere = gpu_here or any(self.gpu_node(n) for n in self.nodes if not n.shutting_down)
        fallback = None
        for scope, unit in self.workqueue.items():
            needs = self.unit_needs_gpu(unit)
            if needs and gpu_here:
                return scope
            if (not needs or not gpu_somewhere) and fallback is None:
                fallback = scope
                if not gpu_here:
                    return scope
        return fallback

    def _assign_work_unit(self, node: Any) -> None:
        scope = self.pick_scope(node) if self.workqueue else None
        if scope is None:
            return
        work_unit = self.workqueue.pop(scope)
        self.assigned_work.setdefault(node, {})[scope] = work_unit
        worker_collection = self.registered_collections[node]
        node.send_runtest_some([worker_collection.index(nodeid) for nodeid, done in work_unit.items() if not done])

    def remove_node(self, node: Any) -> str | None:
        """A worker left; if it died mid-item, return that item (xdist reports it, the plugin records it as
        lost) and hand its units not begun to the others. Unlike load-scope, the lost item is not queued
        again (it may be what killed its worker), nor are the later items of its task: a task runs whole in
        one process, so they are reported lost too and ``--bench-resume`` runs them together."""
        workload = self.assigned_work.pop(node)
        pending = [nodeid for unit in workload.values() for nodeid, done in unit.items() if not done]
        if not pending:
            return None
        crashitem = pending[0]
        rest: list[str] = []
        for unit in workload.values():
            if crashitem in unit:
                rest = [nodeid for nodeid, done in unit.items() if not done and nodeid != crashitem]
                unit.update((nodeid, True) for nodeid in unit)
        self.workqueue.update((scope, unit) for scope, unit in workload.items() if not all(unit.values()))
        self.report_lost(rest, node)
        for other in self.assigned_work:
            self._reschedule(other)
        self.shut_down_idle()
        return crashitem

    def report_lost(self, nodeids: list[str], node: Any) -> None:
        """Items of a dead worker's task that will not run in this session get xdist's crash report (and so a
        lost record), as the item it died in does."""
        dsession = self.config.pluginmanager.getplugin("dsession") if nodeids else None
        for nodeid in nodeids:
            dsession.handle_crashitem(nodeid, node)

    def _reschedule(self, node: Any) -> None:
        super()._reschedule(node)
        self.shut_down_idle()

    def schedule(self) -> None:
        first = self.collection is None
        if not first:
            super().schedule()
            return
        # The first distribution, as load-scope's, but without its "more workers than units" shortcut,
        # which would shut down the last workers whatever their host has.
        if not self._check_nodes_have_same_collection():
            self.log("**Different tests collected, aborting run**")
            return
        self.collection = list(next(iter(self.registered_collections.values())))
        if not self.collection:
            return
        units: dict[str, dict[str, bool]] = {}
        for nodeid in self.collection:
            units.setdefault(self._split_scope(nodeid), {})[nodeid] = False
        ordered = units.items()
        if self.config.option.loadscopereorder:  # as load-scope: the largest units first
            ordered = sorted(ordered, key=lambda item: -len(item[1]))
        self.workqueue.update(ordered)
        for node in self.nodes:
            self._assign_work_unit(node)
        for node in self.nodes:
            self._reschedule(node)
        self.shut_down_idle()

    def shut_down_idle(self) -> None:
        """Once nothing is left to hand out, workers with no pending items stop (load-scope stops a worker
        only when it finishes an item, and a worker that could take nothing never does)."""
        if self.workqueue:
            return
        for node in self.nodes:
            if not node.shutting_down and not self._pending_of(self.assigned_work.get(node, {})):
                node.shutdown()
