"""SciCode from plain Python: load the problems, rebuild their targets, score one step's code.

Everything here is what a run does for one item, without pytest::

    problems = load_problems("validation")
    targets = rebuild_targets(problems[:1], cache_dir="cache")
    record = score_step(problems[0], 0, code, targets=targets)
    record["status"], record["message"]
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ...core.data import DATA_DIR_ENV
from ...sandbox.limits import Limits
from . import dataset
from .locate import RebuiltTable, TargetTable, rebuilt_table
from .run import RunSettings, SciCodeRun
from .solvers import Generated, OracleSolver

DEFAULT_TIMEOUT = 1800.0  # seconds per step, as a run's --bench-timeout
BENCHMARK = "scicode"  # the benchmark a record names (bench.SciCode.name)


def data_folder(data_dir: str | os.PathLike[str] | None) -> Path:
    """The folder a run would read: the one given, else $AGENTBENCH_DATA_DIR, else ./data."""
    return Path(data_dir if data_dir is not None else os.environ.get(DATA_DIR_ENV) or "data")


def load_problems(split: str = "validation", data_dir: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """The problems of ``split`` (validation, test or all) in upstream order, each a dict of the upstream
    JSONL; missing files are downloaded from their pinned URLs and checked by sha256."""
    return [problem for _, problem in dataset.load_problems(data_folder(data_dir), split)]


def rebuild_targets(
    problems: Iterable[dict[str, Any]],
    cache_dir: str | os.PathLike[str],
    *,
    data_dir: str | os.PathLike[str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> RebuiltTable:
    """The targets of ``problems`` rebuilt from their ground-truth code (validation problems have it) into
    ``cache_dir``, each step in a fresh sandboxed process; reused from there while the data is unchanged."""
    return rebuilt_table(problems, Path(cache_dir), data_dir=data_folder(data_dir), timeout=timeout)


def official_targets(h5_path: str | os.PathLike[str]) -> TargetTable:
    """The targets of upstream's ``test_data.h5`` (every step, test split included)."""
    return TargetTable.file(Path(h5_path))


class GivenCode:
    """A solver that answers one step with the code given and earlier steps with ``previous`` (or, where it
    runs out, the problem's ground truth, as the oracle does)."""

    overlaps = False

    def __init__(self, index: int, code: str, previous: Sequence[str] | None) -> None:
        self.index, self.code, self.previous = index, code, list(previous or [])

    def solve(self, problem: dict[str, Any], index: int, previous: list[str], *, sample_index: int = 0) -> Generated:
        if index == self.index:
            return Generated(self.code)
        if index < len(self.previous):
            return Generated(self.previous[index])
        return OracleSolver().solve(problem, index, previous)


def private_to(targets: TargetTable | RebuiltTable) -> tuple[str, ...]:
    """The folders the step's child must not see, as a run hides its data dir and cache: the data and the
    targets' folder (the answers)."""
    folders = [data_folder(None)]
    if isinstance(targets, RebuiltTable):
        folders += [targets.folder, *([targets.data_dir] if targets.data_dir else [])]
    elif targets.source.path is not None:
        folders.append(targets.source.path.parent)
    return tuple(str(Path(f).resolve()) for f in folders)


def score_step(
    problem: dict[str, Any],
    index: int,
    code: str,
    *,
    targets: TargetTable | RebuiltTable,
    previous_code: Sequence[str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    out_dir: str | os.PathLike[str] | None = None,
    split: str | None = None,
) -> dict[str, Any]:
    """Score ``code`` as the answer to step ``index`` (0-based) of ``problem``: the step's record (``status``
    pass/fail/..., ``message``, ``tests_completed``, ...), as a run writes it, with its identity (``benchmark``,
    ``task``, ``id``, ``split``, ``scored``), so ``benchmark_metrics`` takes a list of them. The code of the earlier
    steps is ``previous_code`` (one string per step), else the problem's ground truth; it runs in the same sandbox
    and limits as in a run (``timeout`` seconds for the step). ``split``: the problem's split (default:
    ``validation`` for a problem with ground truth, else ``test``)."""
    run = SciCodeRun(
        RunSettings(targets=targets, overlap=False),
        GivenCode(index, code, previous_code),
        env=None,
        limits=Limits(timeout=timeout, hidden=private_to(targets)),
        out_dir=Path(out_dir) if out_dir is not None else None,
    )
    try:
        return {**step_identity(problem, index, split), **run.run_step(problem, index)}
    finally:
        run.close()


def step_identity(problem: dict[str, Any], index: int, split: str | None) -> dict[str, Any]:
    """The fields a run's record of the step starts with: what the metrics group and count by."""
    number = str(problem["sub_steps"][index]["step_number"])
    has_ground_truth = any(step.get("ground_truth_code") for step in problem.get("sub_steps", []))
    return {
        "benchmark": BENCHMARK,
        "task": str(problem["problem_id"]),
        "id": number,
        "split": split or ("validation" if has_ground_truth else "test"),
        "scored": number not in dataset.PREFILLED_FILES,
    }
