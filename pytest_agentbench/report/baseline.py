"""Baselines: an earlier run's summary.json, whose settings must match the run compared with it.

What may differ between two comparable runs is the model under test and how the run was executed
(endpoint, retries, cache, executor, timeouts, run id). Everything that defines the questions and
how they are asked and scored (benchmark, split, mode, background, targets, data hashes, ...) must match.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .. import records as rec

# Settings that may differ between two runs that are still comparable.
FREE_SETTINGS = frozenset({
    "run_id", "model", "base_url", "protocol", "params", "timeout", "max_retries", "retry_base_delay",
    "cache_dir", "cache_mode", "executor", "memory_limit_gib", "item_timeout", "tool_timeout", "notes",
    "resumed_from", "env", "docker_image",
})


class BaselineError(Exception):
    """A baseline or run that cannot be read or compared; the message names the file and the fix."""


def summary_path(path: str | Path) -> Path:
    """``PATH`` itself when it names a .json file, else ``PATH/summary.json`` (a run folder)."""
    path = Path(path).expanduser()
    return path if path.suffix == ".json" else path / "summary.json"


def load_summary(path: str | Path) -> dict[str, Any]:
    file = summary_path(path)
    if not file.is_file():
        raise BaselineError(f"{file} does not exist: give a run folder holding summary.json, or a summary.json file"
                            f" (write one on purpose with --bench-update-baseline)")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise BaselineError(f"{file} is not a readable summary.json ({exc})") from None
    if not isinstance(data, dict) or not {"settings", "metrics", "items"} <= set(data):
        raise BaselineError(f"{file} is not a pytest-agentbench summary (no settings/metrics/items)")
    data["_path"] = str(file)
    return data


def write_baseline(path: str | Path, summary: dict[str, Any]) -> Path:
    from .reporter import write_atomic

    file = summary_path(path)
    file.parent.mkdir(parents=True, exist_ok=True)
    public = {k: v for k, v in summary.items() if not k.startswith("_")}
    write_atomic(file, json.dumps(public, indent=2, sort_keys=True, default=rec._fallback))
    return file


def settings_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """``key: A vs B`` for each setting that makes two runs incomparable (nested dicts compared key by key)."""
    out = []
    for key in sorted(set(a) | set(b)):
        if key in FREE_SETTINGS:
            continue
        left, right = a.get(key), b.get(key)
        if isinstance(left, dict) and isinstance(right, dict):
            out += [f"{key}.{d}" for d in settings_differences(left, right)]
        elif left != right:
            out.append(f"{key}: {_short(left)} vs {_short(right)}")
    return out


def _short(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else value
    return text if len(text) <= 40 else text[:37] + "..."
