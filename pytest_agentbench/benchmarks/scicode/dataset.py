"""SciCode's problems, prefilled steps and templates: pinned upstream files and their loading."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ...core.data import DataError, DataFile, find_or_fetch
from ...core.types import Sample, Task

REVISION = "69a8cfc829fe8788a426ce8b5de6292366dce7ef"
RAW = f"https://raw.githubusercontent.com/scicode-bench/SciCode/{REVISION}/eval/data"
SUBDIR = "scicode"


def _upstream(local: str, remote: str, sha256: str) -> DataFile:
    return DataFile(name=local, url=f"{RAW}/{remote}", sha256=sha256, subdir=SUBDIR)


PROBLEM_FILES = {
    "validation": _upstream(
        "problems_dev.jsonl", "problems_dev.jsonl", "193968aff23b7ed931c8f6d196b611e2f6694adb49e6cc085444a60ad2fc4f7b"
    ),
    "test": _upstream(
        "problems_test.jsonl", "problems_all.jsonl", "38797fef78f434720be6d053b4f3a86839d6f8ea5fb9115450677cd3a6edf81d"
    ),
}
PREFILLED_FILES = {
    "13.6": _upstream("13.6.txt", "13.6.txt", "795a2b57c2d9bb12ca4eaf16d6b8e1f202015a89a886628858abf42a1b18a94e"),
    "62.1": _upstream("62.1.txt", "62.1.txt", "bc9931d88a7d5950091b72a996a25b8be6c936fd136b01005e22c3d45b0008a2"),
    "76.3": _upstream("76.3.txt", "76.3.txt", "4758300d96ea726cdc0fbf749f1bc437030d2a3e8b43bde232ecdeaf636cd367"),
}
TEMPLATE_FILES = {
    "with_background": _upstream(
        "multistep_template.txt",
        "multistep_template.txt",
        "2c6946acf50f69d37647b83c04e77e6bdc5f3ff04e87d4aa6f79d0f27b5dcbc2",
    ),
    "without_background": _upstream(
        "background_comment_template.txt",
        "background_comment_template.txt",
        "9b407bdd44937f13cf090b5ae35436b7dc60a0fb8494caec6995c9c83cdadb03",
    ),
}
H5_FILE = DataFile(
    name="test_data.h5",
    url="https://huggingface.co/datasets/xantheocracy/scicode-mirror/resolve/"
    "2f903a64a1c4eb62c7c649b0caf7ecb2c0217590/test_data.h5",
    sha256="48b0272a88b17dbd29777c217e1b4fb2b019b92e11cc2add847409db9541b890",
    subdir=SUBDIR,
)
PREFILLED_REASON = "official prefilled step"
SPLITS = ("validation", "test", "all")


def unverified(f: DataFile) -> DataFile:
    return DataFile(name=f.name, url=f.url, sha256=None, subdir=f.subdir)


def fetch(root: Path, f: DataFile, *, verify: bool, stamp_dir: Path | None) -> Path:
    return find_or_fetch(root, f if verify else unverified(f), stamp_dir=stamp_dir)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Problems of one JSONL file; a corrupt line is an error that names the file and the line."""
    rows = []
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(
                    f"{path} line {number} is not valid JSON ({exc.msg} at column {exc.colno}); the file is corrupt: "
                    f"delete it so it is downloaded again, or restore the upstream file"
                ) from None
            if not isinstance(row, dict) or "problem_id" not in row or "sub_steps" not in row:
                raise DataError(f"{path} line {number} is not a SciCode problem (no problem_id/sub_steps)")
            rows.append(row)
    return rows


def load_problems(
    root: Path, split: str, *, verify: bool = True, stamp_dir: Path | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """(split, problem) pairs of ``split`` in upstream order; ``all`` is validation then test."""
    parts = ("validation", "test") if split == "all" else (split,)
    out = []
    for part in parts:
        path = fetch(root, PROBLEM_FILES[part], verify=verify, stamp_dir=stamp_dir)
        out += [(part, problem) for problem in read_jsonl(path)]
    return out


def load_prefilled(root: Path, *, verify: bool = True, stamp_dir: Path | None = None) -> dict[str, str]:
    return {
        step: fetch(root, f, verify=verify, stamp_dir=stamp_dir).read_text(encoding="utf-8")
        for step, f in PREFILLED_FILES.items()
    }


UNCLASSIFIED = "unclassified"  # the category of a problem without one (every official problem)


def category_of(problem: dict[str, Any]) -> str:
    return str(problem.get("category") or UNCLASSIFIED)


def to_tasks(problems: list[tuple[str, dict[str, Any]]]) -> list[Task]:
    tasks = []
    for split, problem in problems:
        task = Task(id=str(problem["problem_id"]), split=split, data=problem)
        for index, step in enumerate(problem["sub_steps"]):
            number = str(step["step_number"])
            prefilled = number in PREFILLED_FILES
            task.samples.append(
                Sample(
                    id=number,
                    task_id=task.id,
                    split=split,
                    scored=not prefilled,
                    skip_reason=PREFILLED_REASON if prefilled else None,
                    markers=("prefilled",) if prefilled else (),
                    data={"index": index, "step": step},
                )
            )
        tasks.append(task)
    return tasks
