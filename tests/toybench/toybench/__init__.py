"""A toy third benchmark: two tasks of two arithmetic samples, written only against the public protocol.

It uses every member of ``pytest_agentbench.benchmarks.base.Benchmark`` and nothing else of the
plugin, so running it through its entry point shows that a new benchmark needs no core change:
its option (``--toy-wrong``), marker (``toy``), gate metrics, headlines, free settings, records
file and summary all reach pytest, the reports, the gates, the baseline and ``compare``.

Records are deterministic. The solver is chosen once, in ``open_run``: the built-in oracle model
answers with the ground truth, a ``bench_model`` with an ``answer(question)`` method answers itself.
``--toy-wrong IDS`` plants wrong answers for those samples (a regression to detect); it is a free
setting, so runs that differ only in it can still be compared.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

from pytest_agentbench.benchmarks.base import Benchmark, BenchRun, RunSpec
from pytest_agentbench.core.errors import ConfigError
from pytest_agentbench.core.options import Option, Settings
from pytest_agentbench.core.types import Sample, Task
from pytest_agentbench.models.oracle import OracleModel

NAME = "toy"
SPLIT = "dev"
# task id -> (question, expected answer) per sample; sample ids are "<task>.<n>"
QUESTIONS: dict[str, list[tuple[str, str]]] = {
    "t1": [("1 + 1", "2"), ("2 * 3", "6")],
    "t2": [("10 - 4", "6"), ("9 // 2", "4")],
}
SAMPLE_IDS = tuple(f"{task}.{n}" for task, items in QUESTIONS.items() for n in range(1, len(items) + 1))

WRONG = Option(
    name="toy_wrong",
    flag="--toy-wrong",
    kind="list",
    ini="agentbench_toy_wrong",
    metavar="IDS",
    owner=NAME,
    help="toy benchmark: sample ids (e.g. t2.1) answered wrongly on purpose, comma separated.",
    free_on_resume=True,
)


class ToyRun(BenchRun):
    """One process's toy run: the solver was chosen once, each sample is answered and scored."""

    def __init__(self, solve: Callable[[str], str], wrong: frozenset[str]) -> None:
        self.solve = solve
        self.wrong = wrong
        self.closed = False

    def run_sample(self, sample: Sample) -> dict[str, Any]:
        question, expected = sample.data
        answer = self.solve(question)
        if sample.id in self.wrong:
            answer += "0"  # the planted regression
        ok = answer == expected
        return {
            "status": "pass" if ok else "fail",
            "message": "" if ok else f"{question} = {expected}, answered {answer}",
            "question": question,
            "expected": expected,
            "answer": answer,
        }

    def close(self) -> None:
        self.closed = True


class Toy(Benchmark):
    name = NAME
    splits = (SPLIT,)
    default_split = SPLIT
    group_items = True
    records_file = "toy_records.jsonl"
    options = (WRONG,)
    markers = {"toy": "a sample of the toy benchmark (toybench)"}
    gate_metrics = {"toy": "toy_accuracy", "toy_tasks": "toy_task_accuracy"}
    headlines = {"toy_accuracy": "item", "toy_task_accuracy": "task"}
    free_settings = frozenset({"toy_wrong"})

    def configure(self, opts: Settings, split: str) -> dict[str, Any]:
        wrong = tuple(opts["toy_wrong"] or ())
        unknown = [i for i in wrong if i not in SAMPLE_IDS]
        if unknown:
            raise ConfigError(
                f"--toy-wrong: unknown toy sample {', '.join(unknown)}; valid samples: {', '.join(SAMPLE_IDS)}"
            )
        return {"toy_wrong": sorted(wrong)}

    def load_tasks(self, opts: Settings, split: str) -> list[Task]:
        tasks = []
        for task_id, items in QUESTIONS.items():
            samples = [
                Sample(id=f"{task_id}.{n}", task_id=task_id, split=split, markers=("toy",), data=item)
                for n, item in enumerate(items, 1)
            ]
            tasks.append(Task(id=task_id, split=split, samples=samples))
        return tasks

    def open_run(self, spec: RunSpec, model: Any, env: Any) -> ToyRun:
        truth = {q: a for items in QUESTIONS.values() for q, a in items}
        if isinstance(model, OracleModel):
            solve = truth.__getitem__
        elif callable(getattr(model, "answer", None)):
            solve = model.answer
        else:
            raise ConfigError(
                "the toy benchmark needs --model=oracle, or a bench_model fixture whose "
                "answer(question) returns the answer as a string"
            )
        return ToyRun(solve, frozenset(spec.settings.get("toy_wrong") or ()))

    def summarize(self, records: list[dict[str, Any]], settings: Mapping[str, Any]) -> dict[str, Any]:
        scored = [r for r in records if r.get("scored", True) and r.get("status") != "skipped"]
        right = sum(r["status"] == "pass" for r in scored)
        by_task: dict[str, list[bool]] = defaultdict(list)
        for record in scored:
            by_task[str(record["task"])].append(record["status"] == "pass")
        solved = sum(all(v) for v in by_task.values())
        accuracy = right / len(scored) if scored else 0.0
        task_accuracy = solved / len(by_task) if by_task else 0.0
        markdown = (
            "## Toy benchmark\n\n| metric | value |\n|---|---|\n"
            f"| toy_accuracy | {accuracy:.1%} |\n| toy_task_accuracy | {task_accuracy:.1%} |\n"
        )
        return {
            "metrics": {"toy_accuracy": float(accuracy), "toy_task_accuracy": float(task_accuracy)},
            "terminal": [
                f"toy: {right}/{len(scored)} samples right ({accuracy:.1%}), {solved}/{len(by_task)} tasks solved"
            ],
            "markdown": markdown,
        }


benchmark = Toy()
