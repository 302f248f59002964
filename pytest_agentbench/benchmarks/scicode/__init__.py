"""SciCode (scicode-bench/SciCode): scientific programming, one function per step.

Public, pytest-free API::

    from pytest_agentbench.benchmarks.scicode import load_problems, rebuild_targets, score_step

The names load on first use: the plugin reads this benchmark's option declarations (``options.py``) in every
pytest run, which must not import its runtime (h5py, numpy).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .api import load_problems, official_targets, rebuild_targets, score_step

__all__ = ["load_problems", "official_targets", "rebuild_targets", "score_step"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.api"), name)
    globals()[name] = value
    return value
