"""xdist wiring: workers inherit the run folder, and one task's samples stay on one worker, in order.

A sample may need what the earlier samples of its task produced (a step needs the code of the steps
before it); keeping a task on one worker makes ``-n N`` produce the same records as ``-n 0`` without regenerating anything. A resumed
run tells each worker how much of the records file is the interrupted run's.
"""
from __future__ import annotations

from typing import Any

from ..report.resume import records_size
from .run import BenchState
from .state import ONLY_BENCH_KEY, RESUME_BYTES_KEY, RUN_DIR_KEY


class XdistHooks:
    """Registered on the controller when pytest-xdist is active."""

    def __init__(self, state: BenchState, dist: str | None) -> None:
        self.state = state
        self.dist = dist  # xdist's --dist, read at configure time
        self.resume_bytes = records_size(state.records_path) if state.resumed else 0

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[RUN_DIR_KEY] = str(self.state.run_dir)
        node.workerinput[ONLY_BENCH_KEY] = self.state.only_bench
        if self.resume_bytes:
            node.workerinput[RESUME_BYTES_KEY] = self.resume_bytes

    def pytest_xdist_make_scheduler(self, config: Any, log: Any):
        # Node ids are "<bench>/<task>::<sample>": load-scope scheduling sends each task whole.
        if self.dist in ("load", "loadscope"):
            from xdist.scheduler import LoadScopeScheduling  # why: xdist is imported only when it runs

            return LoadScopeScheduling(config, log)
        return None
