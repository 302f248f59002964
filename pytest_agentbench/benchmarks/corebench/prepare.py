"""Per-item workspaces and task prompts for the three CORE-Bench difficulties.

The workspace is the folder the agent starts in; it holds the capsule as ``<capsule_id>/``
and is where ``report.json`` is expected. What each difficulty removes (same as upstream):

* easy:   results/ kept; REPRODUCING.md, environment/, code/run and code/run.sh removed
* medium: everything kept except the contents of results/ (the empty folder stays)
* hard:   results/ emptied; REPRODUCING.md, environment/, code/run and code/run.sh removed
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Mapping

DIFFICULTIES = ("easy", "medium", "hard")
RUN_SCRIPTS = ("run", "run.sh")

# Same advice for every model; short and practical, one block per difficulty.
COMMON_HINTS = (
    "Use the question texts exactly as the keys of report.json and give numbers as JSON numbers "
    "without units. Questions mentioning a figure need you to look at the image files that are produced. "
    "Write report.json in the folder you start in, even when some answers are missing."
)
HINTS = {
    "easy": (
        "All answers are already in the capsule's results/ folder (text logs, CSV files, images); "
        "search it with grep or by listing files, and read the values; do not install or run anything."
    ),
    "medium": (
        "REPRODUCING.md gives the exact commands and environment/ (Dockerfile, postinstall) lists the "
        "dependencies: install those, then run the commands from the code/ folder; outputs go to results/."
    ),
    "hard": (
        "There is no run script and no instructions: read the README and the main scripts under code/ "
        "to find the entry point and the dependencies, install them with pip or apt, and run only what "
        "the task asks. Use CPU versions of libraries when no GPU is available, and reduce waiting by "
        "running the long jobs in the background while you read the rest of the code."
    ),
}


def check_difficulty(difficulty: str) -> str:
    if difficulty not in DIFFICULTIES:
        raise ValueError(f"unknown CORE-Bench difficulty {difficulty!r}; valid: {', '.join(DIFFICULTIES)}")
    return difficulty


def needs_gpu(reproducing_text: str) -> bool:
    """Upstream gives a capsule a GPU machine when its REPRODUCING.md mentions "gpu" (lowercase)."""
    return "gpu" in reproducing_text


def capsule_needs_gpu(capsule_root: Path) -> bool | None:
    """None when the capsule has no REPRODUCING.md to tell."""
    path = Path(capsule_root) / "REPRODUCING.md"
    if not path.is_file():
        return None
    return needs_gpu(path.read_text(encoding="utf-8", errors="replace"))


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _empty_folder(path: Path) -> None:
    _remove(path)
    path.mkdir(parents=True, exist_ok=True)


def apply_difficulty(capsule: Path, difficulty: str) -> None:
    """Remove what ``difficulty`` hides from the capsule copy at ``capsule``."""
    check_difficulty(difficulty)
    if difficulty != "easy":
        _empty_folder(capsule / "results")
    if difficulty != "medium":
        _remove(capsule / "REPRODUCING.md")
        _remove(capsule / "environment")
        for script in RUN_SCRIPTS:
            _remove(capsule / "code" / script)


def prepare_workspace(capsule_root: Path, workspace: Path, capsule_id: str, difficulty: str) -> Path:
    """Copy the unpacked capsule into ``workspace/<capsule_id>`` and apply ``difficulty``."""
    check_difficulty(difficulty)
    target = Path(workspace) / capsule_id
    # symlinks stay links: they were checked to point inside the capsule when it was unpacked
    shutil.copytree(capsule_root, target, symlinks=True)
    apply_difficulty(target, difficulty)
    return target


def json_fields(task: Mapping[str, Any]) -> str:
    """The question list as upstream renders it into the prompt: ``str(dict.keys())``."""
    return str(task["results"][0].keys())


def render_prompt(templates: Mapping[str, str], task: Mapping[str, Any], difficulty: str, hints: bool) -> str:
    """The upstream prompt for ``difficulty`` with the task filled in, plus our hints when on."""
    check_difficulty(difficulty)
    text = templates[f"codeocean_{difficulty}"]
    # literal replacement, as upstream: str.format would choke on braces in task prompts
    text = text.replace("{task_prompt}", task["task_prompt"]).replace("{json_fields}", json_fields(task))
    if hints:
        text += f"\n\nHints:\n- {HINTS[difficulty]}\n- {COMMON_HINTS}"
    return text
