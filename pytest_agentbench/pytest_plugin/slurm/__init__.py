"""The Slurm back-end's pytest side: the controller's submit-and-wait loop (``backend.py``) and the task packages'
sessions (``taskpackage.py``). Its plain part (commands, options, spool) is ``backends/slurm/``."""

from __future__ import annotations

import sys
from typing import Any

import pytest

TASK_SESSIONS = f"{__name__}.taskpackage"  # the module of the task packages' sessions


def task_plugin(config: pytest.Config, kind: str) -> Any:
    """The plugin object of class ``kind`` (``TaskPackager``, ``PackageCollector``) that ``run-task`` or
    ``collect`` passed to ``pytest.main``, or None. Those commands import its module to make it, so a process
    that has not imported it has none, and a worker or a plain run does not import it to find that out."""
    module = sys.modules.get(TASK_SESSIONS)
    return None if module is None else module.plugin_of(config, getattr(module, kind))
