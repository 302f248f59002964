"""The sandbox's settings: how scoring children run and their memory limit."""
from __future__ import annotations

from typing import Any, Mapping

from ..core.options import Option
from .executors import EXECUTORS
from .limits import GiB, Limits

SANDBOX_OPTIONS = (
    Option("executor", "--bench-executor", kind="choice", choices=EXECUTORS, default="fork",
           ini="agentbench_executor",
           help="how scoring scripts run: fork (default; a warm fork server) or subprocess "
                "(a fresh interpreter per step)."),
    Option("memory_limit", "--bench-memory-limit", kind="float", default=4.0, minimum=0, exclusive_minimum=True,
           ini="agentbench_memory_limit", metavar="GIB",
           help="address-space limit of each child process in GiB (default 4)."),
)


def limits_from(opts: Mapping[str, Any], timeout: float) -> Limits:
    """The limits of one child run under the resolved settings ``opts`` and a wall-clock ``timeout``."""
    return Limits(timeout=timeout, memory=int(opts["memory_limit"] * GiB))
