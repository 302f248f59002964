"""The two executors the sandbox checks run every script under (test_sandbox.py, test_isolation.py)
and how they look for the processes a script left.

A test module builds its pair in a module-scoped fixture: ``yield from executor_pair(...)``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from pytest_agentbench.sandbox.executors import SubprocessExecutor
from pytest_agentbench.sandbox.forkserver import DEFAULT_PRELOAD, ForkServer
from pytest_agentbench.sandbox.isolation import Isolation

KINDS = ["fork", "subprocess"]  # (a test's markers tell the kinds apart by KINDS.index(kind))


def executor_pair(
    isolation: Isolation | None = None, preload: Sequence[str] = DEFAULT_PRELOAD
) -> Iterator[dict[str, ForkServer | SubprocessExecutor]]:
    """A started fork server and a subprocess executor, by kind, isolated alike (``None``: what
    ``isolation.probe()`` finds here); the fork server is closed when the generator is."""
    fork = ForkServer(preload=preload, isolation=isolation)
    fork.start()
    try:
        yield {"fork": fork, "subprocess": SubprocessExecutor(isolation=fork.isolation)}
    finally:
        fork.close()


def process_with(marker: str) -> bool:
    """Whether a live process has ``marker`` in its command line (arguments separated by NUL). A zombie
    never matches: its command line reads empty."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                return True
        except OSError:
            pass
    return False


def wait_until(done: Callable[[], bool], seconds: float) -> bool:
    """Poll ``done`` until it holds (True) or ``seconds`` have passed (False): a killed process takes a
    moment to go."""
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def wait_gone(marker: str, seconds: float) -> bool:
    """True once no live process has ``marker`` in its command line."""
    return wait_until(lambda: not process_with(marker), seconds)
