"""Synthetic CORE-Bench v1.1 data: a manifest in the published layout and capsules in the official folder layout.

The real v1.1 files cannot be fetched here, so runs use a hand-made set of three capsules (real v1.1 ids, so the
real aliases apply), written as the authors' manifest is (a JSON array dumped with indent 4, keys in v1's order,
``gpu`` only where true) into ``<data>/core_bench/v1.1/core_test.json``, with the capsules under
``<data>/core_bench/v1.1/capsules/``. Its sha256 is not the pinned one: runs pass --bench-set allow_custom_data=true.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from pytest_agentbench.benchmarks.corebench.grading_v11 import STRING_ALIASES

from .capsule_factory import build_capsule_archive

COLOUR_CAPSULE, GPU_CAPSULE, LIST_CAPSULE = "capsule-3639589", "capsule-5507257", "capsule-7655932"
(COLOUR_Q,) = STRING_ALIASES[COLOUR_CAPSULE]
ACCURACY_Q = "Report the test accuracy of the model."
EPOCHS_Q = "Report the number of epochs."
RISING_Q = "fig Is the loss curve decreasing?"
LIST_Q = "Report the list of the two thresholds."
FULL = 96.12499135323452

# what the hard workspace of v1.1 must not show, beside the factory capsule's results/, REPRODUCING.md, code/run*
HIDDEN_EXTRAS = {
    "code/results/old_output.txt": "leftover\n",
    "data/train_split.csv": "1,2\n",
    "code/cache/model.bin": "cached\n",
    "code/__pycache__/main.cpython-311.pyc": "bytes\n",
    "code/checkpoint_3.pt": "weights\n",
    "code/model.ckpt.index": "weights\n",
    "code/environment/environment/x.txt": "nested env\n",
}
KEPT_EXTRAS = {
    "data/test_split.csv": "3,4\n",  # no "train" in its name
    "code/Train_notes.md": "not a data suffix\n",
    "code/CACHE/readme.txt": "upper-case CACHE is not matched\n",
}


def task(capsule_id: str, title: str, answers: dict[str, Any], gpu: bool = False) -> dict[str, Any]:
    """A manifest entry with the published keys in their order (``gpu`` present only when true)."""
    entry: dict[str, Any] = {
        "field": "Computer Science",
        "language": "Python",
        "capsule_title": title,
        "capsule_id": capsule_id,
        "task_prompt": "Run main.py and report the results.",
    }
    if gpu:
        entry["gpu"] = True
    entry["results"] = [dict(answers) for _ in range(3)]
    entry["capsule_doi"] = f"https://doi.org/10.24433/CO.{capsule_id[-7:]}.v1"
    return entry


def tasks() -> list[dict[str, Any]]:
    return [
        task(COLOUR_CAPSULE, "Memory activation", {COLOUR_Q: "blue", ACCURACY_Q: FULL}),
        task(GPU_CAPSULE, "A GPU paper", {EPOCHS_Q: 5, RISING_Q: "True"}, gpu=True),
        task(LIST_CAPSULE, "Thresholds", {LIST_Q: [1, 2]}),
    ]


# answers right by the v1.1 rules and wrong by v1's: an alias, isclose, the widening, 1 for True, floats for ints
V11_ANSWERS = {
    COLOUR_CAPSULE: {COLOUR_Q: "Green", ACCURACY_Q: 96.125},
    GPU_CAPSULE: {EPOCHS_Q: 5.4, RISING_Q: 1},
    LIST_CAPSULE: {LIST_Q: [1.0, 2.0]},
}


def manifest_text(entries: list[dict[str, Any]]) -> str:
    return json.dumps(entries, indent=4, ensure_ascii=False) + "\n"


def write_v11_data(data: Path, shared_data: Path, name: str = "v1.1", entries: list | None = None) -> Path:
    """``data`` holding v1's prompt file (copied from the shared data dir), the manifest and the capsules of the
    synthetic set ``name``; returns the manifest's path."""
    core = Path(data) / "core_bench"
    core.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(Path(shared_data) / "core_bench" / "benchmark_prompts.json", core / "benchmark_prompts.json")
    folder = core / name
    folder.mkdir(parents=True, exist_ok=True)
    entries = entries if entries is not None else tasks()
    (folder / "core_test.json").write_text(manifest_text(entries), encoding="utf-8")
    for entry in entries:
        build_capsule_archive(folder / "capsules", entry["capsule_id"], extra={**HIDDEN_EXTRAS, **KEPT_EXTRAS})
    return folder / "core_test.json"
