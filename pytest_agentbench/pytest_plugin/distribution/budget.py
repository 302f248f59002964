"""The run budget (``--bench-max-cost``) across xdist workers: one total of every worker's model calls.

Each process counts its own fresh calls (``models.concurrency.Spending``) and stops its own requests once they
reach the budget; under ``-n`` that alone lets every worker spend the whole budget. So the controller opens one
execnet channel per worker (it travels in the worker input, as the remote heartbeat's does; local and remote
workers alike). A worker sends the cost of each fresh call as it returns (``("spent", model, usd)``); the
controller adds them up per model run, and once a run's total reaches its budget it stops handing out tasks
(``state.budget_stop``, which placement reads) and tells every worker (``("stop", model, reason)``), whose gate
then lets no new request of that model start. Requests in flight finish, and the cost line counts them.

What arrives on a channel comes from a worker process, not from model code (which runs sandboxed in a child of
it); a message of another shape is ignored. A worker that loses its channel keeps its own count.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from ..run import BenchState
from . import xdist_compat as xc


def stop_text(limit: float) -> str:
    """Why no new request and no new task starts. Like the records' budget text it names no sum: the cost line
    gives the run's one cost figure, counted when every record is in."""
    return (
        f"run budget --bench-max-cost=${limit:g} reached by the model calls of all workers: no new model request "
        f"was sent and no new task handed out after that (requests in flight finished; the cost line counts them)"
    )


def send(channel: Any, message: tuple) -> None:
    try:
        channel.send(message)
    except Exception:  # the other side is gone (a worker ended, or the controller): nothing is left to tell
        pass


class SharedBudget:
    """The controller's side: every worker's model calls added up per model run, against each run's budget."""

    def __init__(self, runs: Mapping[str | None, BenchState]) -> None:
        self.runs = dict(runs)
        self.limits: dict[str | None, float] = {}
        for model, state in self.runs.items():
            limit = state.options.get("max_cost")
            if limit is not None:
                self.limits[model] = float(limit)
        self.spent = dict.fromkeys(self.limits, 0.0)
        self.stopped: dict[str | None, str] = {}
        self.channels: list[Any] = []
        self.lock = threading.Lock()

    def channel_for(self, node: Any) -> Any | None:
        """A new channel to ``node`` for its worker input (None when no run has a budget). A worker that starts
        after a stop (a replacement) is told at once."""
        if not self.limits:
            return None
        channel = xc.new_channel(node)
        with self.lock:
            self.channels.append(channel)
            stops = dict(self.stopped)
        channel.setcallback(self.heard)
        for model, reason in stops.items():
            send(channel, ("stop", model, reason))
        return channel

    def heard(self, message: Any) -> None:
        """A worker's ``("spent", model, usd)`` (runs in execnet's receiver thread)."""
        if not (isinstance(message, tuple) and len(message) == 3 and message[0] == "spent"):
            return
        _kind, model, usd = message
        if model not in self.limits or not isinstance(usd, (int, float)) or isinstance(usd, bool):
            return
        with self.lock:
            self.spent[model] = round(self.spent[model] + float(usd), 9)
            if model in self.stopped or self.spent[model] < self.limits[model]:
                return
            reason = self.stopped[model] = stop_text(self.limits[model])
            channels = list(self.channels)
        note_stop(self.runs[model], reason)
        for channel in channels:
            send(channel, ("stop", model, reason))


def note_stop(state: BenchState, reason: str) -> None:
    """No new item of ``state``'s run starts (writer.py), and no new task is handed out (placement.py)."""
    if state.budget_stop is None:
        state.budget_stop = reason
        state.notes.append(reason)


class BudgetLink:
    """A worker's side: each fresh call's cost goes to the controller; its stop stops the model's gate, and no
    item of that run starts here any more (the items left are reported not run, as under the records' budget)."""

    def __init__(self, channel: Any) -> None:
        self.channel = channel
        self.lock = threading.Lock()
        self.send_lock = threading.Lock()  # the model's chains report from several threads
        self.runs: dict[str | None, tuple[BenchState, Any]] = {}  # model -> (its state, its model's gate)
        self.stopped: dict[str | None, str] = {}
        channel.setcallback(self.heard)

    def attach(self, state: BenchState, model: Any) -> None:
        """Count ``model``'s calls (a client with ``spending`` and ``gate``; the oracle has neither) in the
        session's total of ``state``'s run."""
        spending, gate = getattr(model, "spending", None), getattr(model, "gate", None)
        if spending is None or gate is None:
            return
        model_key = state.name
        spending.listeners.append(lambda usd: self.report(model_key, usd))
        with self.lock:
            self.runs[model_key] = (state, gate)
            reason = self.stopped.get(model_key)
        if reason is not None:
            stop_run(state, gate, reason)

    def report(self, model_key: str | None, usd: float) -> None:
        with self.send_lock:
            send(self.channel, ("spent", model_key, float(usd)))

    def heard(self, message: Any) -> None:
        if not (isinstance(message, tuple) and len(message) == 3 and message[0] == "stop"):
            return
        _kind, model_key, reason = message
        with self.lock:
            self.stopped.setdefault(model_key, str(reason))
            run = self.runs.get(model_key)
        if run is not None:
            stop_run(*run, str(reason))


def stop_run(state: BenchState, gate: Any, reason: str) -> None:
    note_stop(state, reason)
    gate.stop(reason)
