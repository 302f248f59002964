"""pytest-agentbench: agent and code benchmarks as pytest items, scored as their authors score them.

Run it with pytest (``pytest --bench=scicode --model=...``). The names below are the pytest-free API for a
notebook or a script, loaded on first use so that pytest loading the plugin pays for none of them::

    import pytest_agentbench as ab

    problems = ab.load_scicode_problems("validation")
    targets = ab.rebuild_scicode_targets(problems[:1], cache_dir="cache")
    record = ab.score_scicode_step(problems[0], 0, code, targets=targets)

    tasks = ab.load_corebench_tasks("train")
    score = ab.score_corebench_report(tasks[0]["results"], {"What is the accuracy?": 0.93})

    metrics = ab.benchmark_metrics("reports/scicode/oracle/RUN_ID")  # summary.json's metrics, from the records
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> (module, attribute)
_EXPORTS = {
    "load_scicode_problems": ("pytest_agentbench.benchmarks.scicode.api", "load_problems"),
    "rebuild_scicode_targets": ("pytest_agentbench.benchmarks.scicode.api", "rebuild_targets"),
    "official_scicode_targets": ("pytest_agentbench.benchmarks.scicode.api", "official_targets"),
    "score_scicode_step": ("pytest_agentbench.benchmarks.scicode.api", "score_step"),
    "load_corebench_tasks": ("pytest_agentbench.benchmarks.corebench.api", "load_tasks"),
    "score_corebench_report": ("pytest_agentbench.benchmarks.corebench.scorer", "score_report"),
    "load_corebench_submission": ("pytest_agentbench.benchmarks.corebench.scorer", "load_submission"),
    "benchmark_metrics": ("pytest_agentbench.report.metrics_api", "benchmark_metrics"),
}

__all__ = ["__version__", *_EXPORTS]


def installed_version() -> str:
    from .core.version import package_version  # why: the package's import stays free of metadata reads

    return package_version()


def __getattr__(name: str) -> Any:
    if name == "__version__":
        globals()[name] = installed_version()
        return globals()[name]
    if name not in _EXPORTS:
        raise AttributeError(f"module 'pytest_agentbench' has no attribute {name!r}")
    module, attribute = _EXPORTS[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
