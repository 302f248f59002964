"""Grading one step in several environments (--bench-set grading_envs) and combining the verdicts.

Each environment scores the step as the single environment does (the same split scoring, sandbox and
limits, its own targets table: rebuilt targets are rebuilt in that environment), without the ``simps``
shim. The step passes when any environment passes; the record keeps every environment's verdict under
``grading_envs`` and, at its top level, the fields of the verdict that decided it (the first that passed,
else the first environment's), named by ``graded_in``. Without --bench-set=grading_envs_all=true the environments
after a pass are not run and say so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .gradingenvs import GradingEnv
from .locate import RebuiltTable, Targets, TargetTable

SKIPPED = "skipped"
SKIP_MESSAGE = "not graded: an earlier environment passed (--bench-set=grading_envs_all=true grades in every one)"
# what each environment's verdict keeps (the child's output stays with the deciding verdict, at the top level)
VERDICT_FIELDS = (
    "status",
    "message",
    "targets",
    "targets_source",
    "returncode",
    "tests_completed",
    "failed_test",
    "failure_kind",
    "limit",
    "exec_duration",
)

Scorer = Callable[[Targets, GradingEnv], dict[str, Any]]


def grade(
    number: str,
    envs: Sequence[tuple[GradingEnv, TargetTable | RebuiltTable]],
    score: Scorer,
    *,
    every: bool,
) -> dict[str, Any]:
    """The record fields of step ``number`` graded in ``envs`` by ``score(targets, env)``."""
    verdicts: dict[str, dict[str, Any]] = {}
    decided: tuple[str, dict[str, Any]] | None = None
    for env, table in envs:
        if decided is not None and decided[1]["status"] == "pass" and not every:
            verdicts[env.name] = {"status": SKIPPED, "message": SKIP_MESSAGE}
            continue
        targets = table.for_step(number)
        out: dict[str, Any] = {"targets": targets.kind}
        if targets.path is None:
            out.update(status=targets.status, message=targets.message)
        else:
            out.update(targets_source=targets.source, **score(targets, env))
        verdicts[env.name] = {key: out[key] for key in VERDICT_FIELDS if key in out}
        if decided is None or (out["status"] == "pass" and decided[1]["status"] != "pass"):
            decided = (env.name, out)
    assert decided is not None  # (at least one environment is given)
    name, fields = decided
    return {**fields, "graded_in": name, "grading_envs": verdicts}


def prepare(envs: Sequence[tuple[GradingEnv, TargetTable | RebuiltTable]], number: str) -> None:
    """Have every environment's targets of step ``number`` before the step is timed."""
    for _, table in envs:
        table.prepare_step(number)


def forget_failures(envs: Sequence[tuple[GradingEnv, TargetTable | RebuiltTable]], problem_id: str) -> None:
    for _, table in envs:
        table.forget_failures(problem_id)
