"""CORE-Bench (siegelz/core-bench): computational reproducibility of published research code.

Public, pytest-free API::

    from pytest_agentbench.benchmarks.corebench import CoreBench, CoreBenchRun, choose_solver, score_report
    score = score_report(task["results"], report)   # per-question verdicts and the capsule verdict

The names load on first use: the plugin reads this benchmark's option declarations (``options.py``) in every
pytest run, which must not import its runtime.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .bench import CoreBench, benchmark
    from .options import CORE_BENCH_OPTIONS
    from .run import CoreBenchRun, choose_solver
    from .scorer import CapsuleScore, QuestionVerdict, load_submission, score_report

# public name -> the module of this package that defines it
_EXPORTS = {
    "CORE_BENCH_OPTIONS": "options",
    "CapsuleScore": "scorer",
    "CoreBench": "bench",
    "CoreBenchRun": "run",
    "QuestionVerdict": "scorer",
    "benchmark": "bench",
    "choose_solver": "run",
    "load_submission": "scorer",
    "score_report": "scorer",
}

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


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value
