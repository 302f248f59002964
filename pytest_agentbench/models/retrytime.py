"""The retry time of one item: every model request an item makes (a SciCode step's tool-use rounds, a CORE-Bench
agent's turns) draws its retries from one ``--bench-set model_max_retry_time`` budget, so a failing endpoint costs
an item at most that long however many requests it makes.

The item's runner opens the scope (``item_retry_time``) around the item; the client reads it
(``retry_time_left``) and charges it (``spend_retry_time``). A request made outside any scope (a notebook, the
preflight) has the budget to itself, from its own first failure. Context variables are per thread: work handed to
another thread for an item opens its own scope there (``in_item_scope``).
"""

from __future__ import annotations

import contextvars
import functools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

_SPENT: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar("agentbench_item_retry_time", default=None)
T = TypeVar("T")


@contextmanager
def item_retry_time() -> Iterator[None]:
    """The model requests inside share one item's retry-time budget."""
    token = _SPENT.set([0.0])
    try:
        yield
    finally:
        _SPENT.reset(token)


def in_item_scope(function: Callable[..., T]) -> Callable[..., T]:
    """``function`` run in an item scope of its own (work for an item done in another thread)."""

    @functools.wraps(function)
    def scoped(*args: Any, **kwargs: Any) -> T:
        with item_retry_time():
            return function(*args, **kwargs)

    return scoped


def retry_time_left(budget: float, failed_at: float, unslept: float = 0.0) -> float:
    """Seconds of retries left to a request that first failed at ``failed_at`` (monotonic): the budget less what
    the item's earlier requests spent retrying and what this one has spent since its first failure (``unslept``:
    the seconds of its waits not slept, core/retrywait.py, which count as spent)."""
    spent = _SPENT.get()
    return budget - (spent[0] if spent else 0.0) - retry_time_spent(failed_at, unslept)


def retry_time_spent(failed_at: float, unslept: float = 0.0) -> float:
    """The retry time of one request since its first failure at ``failed_at``, its unslept waits included."""
    return time.monotonic() - failed_at + unslept


def spend_retry_time(failed_at: float | None, unslept: float = 0.0) -> None:
    """A request that first failed at ``failed_at`` is done (answered or given up): its retry time is the item's."""
    spent = _SPENT.get()
    if spent is not None and failed_at is not None:
        spent[0] += retry_time_spent(failed_at, unslept)
