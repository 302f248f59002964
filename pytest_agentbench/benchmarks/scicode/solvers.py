"""Who writes the code of a step: chosen once per run (``choose_solver``), never guessed per step.

* ``OracleSolver``: the ground-truth code (validation split only; no model).
* ``ClientSolver``: a user's own client that answers steps directly (``answer_step(problem, index, previous)``).
* ``ChatSolver``: a chat model driven by the SciCode harness (``generate.generate_step``: naive or tool use);
  its ``code_interpreter`` runs through the environment factory (``env.run_python``), whatever the env is.

A solver never raises for the model's misbehaviour: every outcome is a ``Generated`` with a status.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ...core.text import repair
from ...models.oracle import OracleModel
from . import script


@dataclass
class Generated:
    """The code for one step and how it was obtained."""

    code: str | None
    status: str = "ok"  # ok, parse_error, model_error, truncated, budget
    message: str = ""
    accounting: dict[str, Any] = field(default_factory=dict)
    trajectory: list[dict[str, Any]] = field(default_factory=list)
    response_text: str = ""
    turns: list[dict[str, Any]] = field(default_factory=list)  # tokens and latency per model call


class Solver(Protocol):
    # Whether the next step is worth generating while this one is scored (not for the oracle: it is instant).
    overlaps: bool

    def solve(self, problem: dict[str, Any], index: int, previous: list[str], *, sample_index: int = 0) -> Generated:
        """The code of step ``index`` (0-based) of ``problem``, given the code of the steps before it;
        ``sample_index`` is the attempt (--bench-attempts) less one, part of the response cache key."""


class OracleSolver:
    overlaps = False

    def solve(self, problem: dict[str, Any], index: int, previous: list[str], *, sample_index: int = 0) -> Generated:
        step = problem["sub_steps"][index]
        code = step.get("ground_truth_code")
        if not code:
            return Generated(None, "model_error", f"the oracle has no ground truth for step {step['step_number']}")
        return Generated(code, accounting={"model_calls": 0})


class ClientSolver:
    """A user's own client (an overridden ``bench_model`` fixture) that answers steps directly."""

    overlaps = True

    def __init__(self, client: Any) -> None:
        self.client = client
        self.takes_attempt = accepts_keyword(client.answer_step, "attempt")

    def solve(self, problem: dict[str, Any], index: int, previous: list[str], *, sample_index: int = 0) -> Generated:
        # A client whose answer_step takes ``attempt`` is told which attempt (1-based) it answers.
        extra = {"attempt": sample_index + 1} if self.takes_attempt else {}
        try:
            answer = self.client.answer_step(problem, index, previous, **extra)
        except Exception as exc:
            text, repaired = repair(str(exc))  # the client's words: valid UTF-8 from here on, counted
            return Generated(None, "model_error", f"{type(exc).__name__}: {text}", accounting=counted(repaired))
        if not isinstance(answer, str):
            return Generated(answer, accounting={"model_calls": 1})
        code, repaired = repair(answer)  # the code scored (and recorded) is the repaired code
        return Generated(code, accounting={"model_calls": 1, **counted(repaired)})


def counted(repaired: int) -> dict[str, int]:
    """The accounting entry of characters replaced by U+FFFD: none when nothing was (records stay as they were)."""
    return {"text_repaired": repaired} if repaired else {}


RunPython = Callable[[str, float], dict[str, Any]]  # (source, timeout) -> {status, exit_code, stdout, stderr}


class ChatSolver:
    """The SciCode harness around a chat model (``complete(messages, tools=..., ...)``)."""

    overlaps = True

    def __init__(
        self,
        model: Any,
        *,
        templates: dict,
        run_python: RunPython | None,
        mode: str = "tool_use",
        background: bool = True,
        tool_loops: int = 15,
        tool_timeout: float = 180.0,
        price: Any = None,
        budget: float | None = None,
        tool_concurrency: int | None = None,
    ) -> None:
        from .generate import generate_step  # why: it loads openai (2 s), which the other solvers never need

        self.generate_step = generate_step
        self.model = model
        self.templates = templates
        self.run_python = run_python
        self.mode = mode
        self.background = background
        self.tool_loops = tool_loops
        self.tool_timeout = tool_timeout
        self.price = price  # models.price.Price: the step's calls are costed (None: not)
        self.budget = budget  # USD one step's calls may cost (--bench-set max_cost_per_item)
        # code_interpreter runs of concurrent chains at once (--bench-set tool_concurrency); each is its own sandboxed
        # run through the environment (nothing is shared between them): the bound only keeps the cores busy
        self.tool_slots = threading.BoundedSemaphore(tool_concurrency) if tool_concurrency else None

    def solve(self, problem: dict[str, Any], index: int, previous: list[str], *, sample_index: int = 0) -> Generated:
        dependencies = problem.get("required_dependencies", "")

        def run_code(code: str, timeout: float) -> dict[str, Any]:
            source = script.build_tool_script(dependencies=dependencies, previous_code=previous, code=code)
            if self.run_python is None:  # (the replay check's solver: its probe ends the step at the first call)
                raise RuntimeError("this solver runs no tool code")
            if self.tool_slots is None:
                return self.run_python(source, min(timeout, self.tool_timeout))
            with self.tool_slots:
                return self.run_python(source, min(timeout, self.tool_timeout))

        result = self.generate_step(
            self.model,
            problem,
            index,
            previous,
            mode=self.mode,
            with_background=self.background,
            templates=self.templates,
            run_code=run_code,
            tool_loops=self.tool_loops,
            tool_timeout=self.tool_timeout,
            sample_index=sample_index,
            price=self.price,
            budget=self.budget,
        )
        return Generated(
            code=result.code,
            status=result.status,
            message=result.message,
            accounting=dict(result.accounting),
            trajectory=list(result.trajectory),
            response_text=result.response_text,
            turns=list(result.turns),
        )


def accepts_keyword(func: Callable[..., Any], name: str) -> bool:
    """Whether ``func`` takes the keyword argument ``name`` (or any keyword)."""
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        p.name == name and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) or p.kind == p.VAR_KEYWORD
        for p in params
    )


def choose_solver(
    model: Any,
    *,
    env: Any,
    templates: Callable[[], dict],
    mode: str = "tool_use",
    background: bool = True,
    tool_loops: int = 15,
    tool_timeout: float = 180.0,
    price: Any = None,
    budget: float | None = None,
    tool_concurrency: int | None = None,
) -> Solver:
    """The solver for ``model`` (the ``bench_model`` value), chosen once per run.

    ``env`` is the environment factory whose ``run_python`` runs tool code; ``templates()`` loads the
    prompt templates (only a chat model needs them)."""
    if isinstance(model, OracleModel):
        return OracleSolver()
    if callable(getattr(model, "answer_step", None)):  # the documented way to plug in one's own client
        return ClientSolver(model)
    return ChatSolver(
        model,
        templates=templates(),
        run_python=env.run_python,
        mode=mode,
        background=background,
        tool_loops=tool_loops,
        tool_timeout=tool_timeout,
        price=price,
        budget=budget,
        tool_concurrency=tool_concurrency,
    )
