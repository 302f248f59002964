"""SciCode (scicode-bench/SciCode): scientific programming, one function per step.

Public, pytest-free API::

    from pytest_agentbench.benchmarks.scicode import load_problems, rebuild_targets, score_step
"""

from .api import load_problems, official_targets, rebuild_targets, score_step

__all__ = ["load_problems", "official_targets", "rebuild_targets", "score_step"]
