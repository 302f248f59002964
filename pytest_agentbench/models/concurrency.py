"""Model requests in flight in one process: the gate every request of a model client passes.

A benchmark's latency-bound run (SciCode: a problem is a chain of calls, step k needs the code of steps
1..k-1) goes as fast as its longest chain only when many chains call the model at once. ``CallGate`` bounds
how many requests are in flight (``--bench-max-connections``: the session's number, each xdist worker getting
its share, ``share``), lowers that bound for a while when the endpoint rate limits (HTTP 429 or a
``Retry-After``: halved, then doubled back after each quiet cool-down), and stops every new request at once
when the run's budget is spent (``stop``): a request that would start then raises ``CallsStopped``.

Plain threading, importable without the openai SDK: the plugin reads ``in_flight`` for its progress line.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

DEFAULT_MAX_CONNECTIONS = 16
MIN_COOL_DOWN = 5.0  # seconds a lowered bound holds at least after a rate limit (longer when the server asks)


class CallsStopped(Exception):
    """No new model request starts any more (the run's budget is spent); the message says why."""


def share(total: int, parts: int) -> int:
    """One of ``parts`` processes' share of ``total`` (at least 1 each)."""
    return max(1, int(total) // max(1, int(parts)))


class CallGate:
    """At most ``limit`` requests in flight; fewer for a while after a rate limit; none after ``stop``."""

    def __init__(self, limit: int = DEFAULT_MAX_CONNECTIONS, *, cool_down: float = MIN_COOL_DOWN) -> None:
        self.limit = max(1, int(limit))
        self.allowed = self.limit  # the bound now: lowered by rate limits, raised back after quiet cool-downs
        self.cool_down = float(cool_down)
        self.cond = threading.Condition()
        self.in_flight = 0
        self.peak = 0
        self.rate_limits = 0  # rate-limited answers seen
        self.lowered_until = 0.0  # monotonic time before which the bound is not raised
        self.stopped: str | None = None

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        """Hold one of the in-flight places for one request (waits for a free one; CallsStopped after stop)."""
        with self.cond:
            while True:
                if self.stopped is not None:
                    raise CallsStopped(self.stopped)
                self.raise_back(time.monotonic())
                if self.in_flight < self.allowed:
                    break
                # woken by a release or a stop; the timeout lets a lowered bound rise again with no release
                self.cond.wait(timeout=max(0.05, min(1.0, self.lowered_until - time.monotonic())))
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        try:
            yield
        finally:
            with self.cond:
                self.in_flight -= 1
                self.cond.notify_all()

    def rate_limited(self, wait: float | None = None) -> None:
        """The endpoint refused a request for its rate (429, or it sent Retry-After ``wait`` seconds): halve the
        bound, and keep it lowered for at least the cool-down or what the server asked."""
        with self.cond:
            self.rate_limits += 1
            self.allowed = max(1, self.allowed // 2)
            hold = max(self.cool_down, float(wait or 0.0))
            self.lowered_until = max(self.lowered_until, time.monotonic() + hold)

    def raise_back(self, now: float) -> None:
        """After a cool-down without rate limits the bound doubles back towards the limit (caller holds cond)."""
        if self.allowed < self.limit and now >= self.lowered_until:
            self.allowed = min(self.limit, self.allowed * 2)
            self.lowered_until = now + self.cool_down
            self.cond.notify_all()

    def stop(self, reason: str) -> None:
        """No new request starts from now on (those in flight finish): each raises CallsStopped(reason)."""
        with self.cond:
            if self.stopped is None:
                self.stopped = reason
            self.cond.notify_all()


class Spending:
    """What one process's fresh model calls cost so far, against the run's budget (``--bench-max-cost``): once
    it is reached, ``gate`` stops every new request at once, whichever chain would send it. Each cost is also
    handed to ``listeners`` (an xdist worker tells its controller, which adds up every worker's calls and stops
    them all once the session's total reaches the budget)."""

    def __init__(self, gate: CallGate, limit: float | None) -> None:
        self.gate = gate
        self.limit = limit
        self.lock = threading.Lock()
        self.spent = 0.0
        self.listeners: list[Callable[[float], None]] = []

    def add(self, usd: float) -> None:
        for listener in list(self.listeners):
            listener(usd)
        with self.lock:
            self.spent = round(self.spent + usd, 9)
            reached = self.limit is not None and self.spent >= self.limit
        if reached:
            self.gate.stop(
                f"the run budget --bench-max-cost=${self.limit:g} is spent (${self.spent:.4f} by the calls of "
                f"this process): no new model request was sent"
            )
