"""CORE-Bench (siegelz/core-bench): computational reproducibility of published research code.

Public, pytest-free API::

    from pytest_agentbench.benchmarks.corebench import CoreBench, CoreBenchRun, choose_solver, score_report
    score = score_report(task["results"], report)   # per-question verdicts and the capsule verdict
"""

from .bench import CoreBench, benchmark
from .options import CORE_BENCH_OPTIONS
from .run import CoreBenchRun, choose_solver
from .scorer import CapsuleScore, QuestionVerdict, load_submission, score_report

__all__ = [
    "CORE_BENCH_OPTIONS",
    "CapsuleScore",
    "CoreBench",
    "CoreBenchRun",
    "QuestionVerdict",
    "benchmark",
    "choose_solver",
    "load_submission",
    "score_report",
]
