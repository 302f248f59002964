"""xdist wiring: workers inherit the run folder, and one task's samples stay on one worker, in order.

A SciCode step needs the code generated for the earlier steps of its problem; keeping a problem
on one worker makes ``-n N`` produce the same records as ``-n 0`` without regenerating anything.
"""
from __future__ import annotations

from typing import Any


class XdistHooks:
    def __init__(self, state: Any) -> None:
        self.state = state

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["agentbench_run_dir"] = str(self.state.run_dir)
        node.workerinput["agentbench_only_bench"] = self.state.only_bench

    def pytest_xdist_make_scheduler(self, config: Any, log: Any):
        # Node ids are "<bench>/<task>::<sample>": load-scope scheduling sends each task whole.
        if config.getvalue("dist") in ("load", "loadscope"):
            from xdist.scheduler import LoadScopeScheduling

            return LoadScopeScheduling(config, log)
        return None
