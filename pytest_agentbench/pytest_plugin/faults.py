"""Where a test may make one stage of an item's life fail, as a bug or a broken environment would.

The hook ``pytest_agentbench_test_fault(stage, nodeid)`` is not part of the plugin's hook spec: the project's own
tests declare and implement it in the conftest.py of the runs they start (xdist workers load it too). In any
other run no plugin declares it, and ``stage_fault`` does nothing.
"""

from __future__ import annotations

import pytest

FAULT_HOOK = "pytest_agentbench_test_fault"


def stage_fault(config: pytest.Config, stage: str, nodeid: str) -> None:
    """Call the test-only fault hook for ``stage`` of item ``nodeid`` where a test declared it; whatever it raises
    becomes that item's error record naming the stage."""
    hook = getattr(config.hook, FAULT_HOOK, None)
    if hook is not None:
        hook(stage=stage, nodeid=nodeid)
