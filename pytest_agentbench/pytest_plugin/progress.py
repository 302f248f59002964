"""Live accounting beside pytest's progress: items done, model calls, tokens, cache hits, elapsed time.

Written only as whole lines, placed so pytest's own output is not cut: in -q and default mode a line
is started after the current dots (which then continue on the next line); in -v mode, where pytest
ends each item's line when the next item starts, the text goes on a line of its own that pytest ends.
"""
from __future__ import annotations

import time
from typing import Any

import pytest

from ..core import records as rec


def usage_line(done: int, total: int | None, totals: dict[str, float], elapsed: float) -> str:
    of = f"/{total}" if total else ""
    return (f"agentbench: {done}{of} items, {totals['model_calls']:g} model calls, {totals['tokens']:g} tokens, "
            f"{totals['cache_hits']:g} cache hits, {totals['tool_calls']:g} tool calls, elapsed {elapsed:.1f}s")


class Progress:
    def __init__(self, config: pytest.Config, interval: float) -> None:
        self.config = config
        self.interval = interval
        self.started = time.monotonic()
        self.last_shown = self.started
        self.done = 0
        self.total: int | None = None
        self.totals = rec.usage_totals([])

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.total = len(session.items) or None

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, value in report.user_properties:
            if name == rec.RECORD_PROPERTY:
                self.done += 1
                for key, amount in rec.usage_of(value).items():
                    self.totals[key] = self.totals.get(key, 0) + amount
                self.maybe_show()

    def maybe_show(self) -> None:
        now = time.monotonic()
        if now - self.last_shown < self.interval:
            return
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        if terminal is None:
            return
        self.last_shown = now
        text = usage_line(self.done, self.total, self.totals, self.elapsed())
        writer = terminal._tw
        if self.config.get_verbosity() >= 1:
            # pytest ends this line itself (when the next item starts or the session ends).
            writer.write("\n" + text, flush=True)
        else:
            writer.write(("\n" if writer.width_of_current_line else "") + text + "\n", flush=True)
