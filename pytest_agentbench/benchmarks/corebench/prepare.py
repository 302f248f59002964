"""Per-item workspaces and task prompts for the three CORE-Bench difficulties.

The workspace is the folder the agent starts in (``--bench-set workspace_root`` inside the environment);
the capsule's folders (``code/``, ``data/``, ``results/``, ...) and REPRODUCING.md sit directly in it,
and ``report.json`` is expected there. What each difficulty removes (same as upstream):

* easy:   results/ kept; REPRODUCING.md, environment/, code/run and code/run.sh removed
* medium: everything kept except the contents of results/ (the empty folder stays)
* hard:   results/ emptied; REPRODUCING.md, environment/, code/run and code/run.sh removed
"""

from __future__ import annotations

import json
import os
import posixpath
import shlex
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .defaults import DIFFICULTIES

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


def prepare_workspace(capsule_root: Path, workspace: Path, capsule_id: str, difficulty: str, rules: str = "v1") -> Path:
    """Copy the unpacked capsule's contents into ``workspace`` (its folders directly there) and apply
    ``difficulty``; ``rules="v1.1"``: the v1.1 hard workspace instead (:func:`apply_v11_hard`)."""
    check_difficulty(difficulty)
    target = Path(workspace)
    # symlinks stay links: they were checked to point inside the capsule when it was unpacked
    shutil.copytree(capsule_root, target, symlinks=True, dirs_exist_ok=True)
    if rules == "v1.1":
        apply_v11_hard(target)
    else:
        apply_difficulty(target, difficulty)
    return target


# --------------------------------------------------------------------------- the v1.1 hard workspace

TRAINING_SUFFIXES = (".csv", ".txt", ".json", ".parquet", ".h5", ".hdf5")


def v11_hard_drops(relative: str) -> bool:
    """Whether the v1.1 harness leaves the capsule file at ``relative`` (POSIX, from the capsule root) out of the
    hard workspace. Upstream matches the path under its ``/environment/`` target folder, so a pattern with a
    leading slash matches at any depth: results/ folders, REPRODUCING.md, the capsule's environment/ folder,
    code/run and code/run.sh, training data (a name holding "train" with a data suffix), cache/ and Cache/
    folders, checkpoints (a name starting "checkpoint" or holding ".ckpt") and __pycache__/."""
    path = "/environment/" + relative
    name = posixpath.basename(path).lower()
    return (
        "/results/" in path
        or path.endswith("/REPRODUCING.md")
        or "/environment/environment/" in path
        or path.endswith(("/code/run.sh", "/code/run"))
        or ("train" in name and name.endswith(TRAINING_SUFFIXES))
        or "/cache/" in path
        or "/Cache/" in path
        or name.startswith("checkpoint")
        or ".ckpt" in name
        or "/__pycache__/" in path
    )


def apply_v11_hard(capsule: Path) -> list[str]:
    """The v1.1 hard workspace in place: every ``results`` folder removed (the pre-rendered answers that led to
    the audit), every file :func:`v11_hard_drops` names removed, then the folders left empty (upstream copies
    files only). Returns what was removed, relative to ``capsule``."""
    root = Path(capsule)
    removed = []
    for folder, subdirs, files in os.walk(root, topdown=True):
        here = Path(folder)
        for name in [d for d in subdirs if d == "results"]:
            _remove(here / name)
            removed.append((here / name).relative_to(root).as_posix() + "/")
        subdirs[:] = [d for d in subdirs if d != "results" and not (here / d).is_symlink()]
        entries = files + [d for d in os.listdir(here) if (here / d).is_symlink() and d not in files]
        for name in entries:
            relative = (here / name).relative_to(root).as_posix()
            if v11_hard_drops(relative):
                _remove(here / name)
                removed.append(relative)
    for folder, _, _ in os.walk(root, topdown=False):  # children first: a folder emptied below goes too
        path = Path(folder)
        if path != root and not any(path.iterdir()):
            path.rmdir()
    return removed


def difficulty_script(difficulty: str) -> str:
    """``apply_difficulty`` as bash run in the workspace (for inputs copied inside the environment)."""
    check_difficulty(difficulty)
    lines = []
    if difficulty != "easy":
        lines.append("rm -rf results && mkdir -p results")
    if difficulty != "medium":
        lines.append("rm -rf REPRODUCING.md environment " + " ".join(f"code/{s}" for s in RUN_SCRIPTS))
    return "\n".join(lines)


# --------------------------------------------------------------------------- preinstalled inputs

MANIFEST = "input.json"
MANIFEST_FIELDS = ("schema_version", "task_id", "split", "difficulty", "dataset_revision", "uses_gpu")


def check_manifest(raw: bytes, *, task_id: str, split: str, difficulty: str, revision: str) -> tuple[bool, str | None]:
    """(uses_gpu, None) when ``input.json`` fits the item; else (False, the field that differs and how)."""
    where = "preinstalled inputs: input.json"
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return False, f"{where} is not valid JSON ({str(exc)[:200]})"
    if not isinstance(manifest, dict):
        return False, f"{where} is not a JSON object"
    missing = [f for f in MANIFEST_FIELDS if f not in manifest]
    if missing:
        return False, f"{where} lacks {', '.join(missing)}"
    expected = {
        "schema_version": 1,
        "task_id": task_id,
        "split": split,
        "difficulty": difficulty,
        "dataset_revision": revision,
    }
    for name, value in expected.items():
        if manifest[name] != value or type(manifest[name]) is not type(value):
            return False, f"{where}: {name} is {manifest[name]!r}, this item needs {value!r}"
    if not isinstance(manifest["uses_gpu"], bool):
        return False, f"{where}: uses_gpu must be true or false, got {manifest['uses_gpu']!r}"
    return manifest["uses_gpu"], None


def preinstalled_copy_script(folder: str, capsule_id: str, difficulty: str) -> str:
    """Bash, run in the fresh workspace: copy ``folder/<capsule_id>``'s contents there, apply ``difficulty``."""
    source = shlex.quote(f"{folder}/{capsule_id}")
    return f"set -e\ntest -d {source}\ncp -a {source}/. .\n{difficulty_script(difficulty)}\n"


def gpu_evidence(uses_gpu: bool, instructions_say: bool | None) -> dict[str, object]:
    """The record's GPU fields with preinstalled inputs: the manifest wins over REPRODUCING.md."""
    out: dict[str, object] = {"gpu_required": uses_gpu}
    if instructions_say is not None and instructions_say != uses_gpu:
        out["gpu_note"] = (
            f"input.json says uses_gpu={str(uses_gpu).lower()} but REPRODUCING.md "
            f"{'asks for' if instructions_say else 'does not ask for'} a GPU; the manifest wins"
        )
    return out


def json_fields(task: Mapping[str, Any]) -> str:
    """The questions, the exact keys report.json must have, as a JSON list (``["Report the ...", ...]``).
    Upstream renders ``str(dict.keys())``, a Python repr (``dict_keys([...])``, quotes that change with the
    text) an agent would have to decode; the keys and their order are the same."""
    return json.dumps(list(task["results"][0]), ensure_ascii=False)


def render_prompt(
    templates: Mapping[str, str],
    task: Mapping[str, Any],
    difficulty: str,
    hints: bool,
    root: str = "/capsule/environment",
) -> str:
    """The upstream prompt for ``difficulty`` with the task filled in, plus our hints when on
    (they name ``root``, the workspace folder)."""
    check_difficulty(difficulty)
    text = templates[f"codeocean_{difficulty}"]
    # literal replacement, as upstream: str.format would choke on braces in task prompts
    text = text.replace("{task_prompt}", task["task_prompt"]).replace("{json_fields}", json_fields(task))
    if hints:
        text += (
            f"\n\nHints:\n- {HINTS[difficulty]}\n- {COMMON_HINTS}\n- You start in {root}: the capsule's "
            f"folders are there, and report.json goes to {root}/report.json."
        )
    return text
