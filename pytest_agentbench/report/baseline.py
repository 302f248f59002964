"""Baselines: an earlier run's summary.json, whose settings must match the run compared with it.

What may differ between two comparable runs is the model under test and how the run was executed
(endpoint, retries, cache, executor, timeouts, run id: ``COMMON_FREE_SETTINGS``, plus the
benchmark's own ``free_settings``). Everything that defines the questions and how they are asked
and scored (benchmark, split, mode, background, targets, data hashes, ...) must match.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError
from ..core.io import write_atomic
from ..core.records import json_default
from . import comparability
from .subject import run_subject

# Settings of the layers every run shares (run, models, sandbox, envs) that may differ between two
# runs that are still comparable. A benchmark adds its own with ``Benchmark.free_settings``.
COMMON_FREE_SETTINGS = frozenset(
    {
        "run_id",
        "model",
        "base_url",
        "protocol",
        "params",
        "timeout",
        "max_retries",
        "max_retry_time",
        "retry_base_delay",
        "cache_dir",
        "cache_mode",
        "executor",
        "memory_limit_gib",
        "item_timeout",
        "notes",
        "resumed_from",
        "env",
        "docker_image",
        "item_retries",
        "isolation",
        "child_env",
        "price",
        "max_cost",
        "comparability",  # compared on its own (comparability.py): an older run has none
    }
)


class BaselineError(Exception):
    """A baseline or run that cannot be read or compared; the message names the file and the fix."""


def json_text(data: Any) -> str:
    """How the report layer writes JSON files (summary.json, baselines, settings.json)."""
    return json.dumps(data, indent=2, sort_keys=True, default=json_default)


def public(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The summary without its private keys (a baseline's ``_path``, a plugin's own): what files hold."""
    return {k: v for k, v in summary.items() if not k.startswith("_")}


def summary_path(path: str | Path) -> Path:
    """``PATH`` itself when it names a .json file, else ``PATH/summary.json`` (a run folder)."""
    path = Path(path).expanduser()
    return path if path.suffix == ".json" else path / "summary.json"


def load_summary(path: str | Path) -> dict[str, Any]:
    file = summary_path(path)
    if not file.is_file():
        raise BaselineError(
            f"{file} does not exist: give a run folder holding summary.json, or a summary.json file"
            f" (write one on purpose with --bench-update-baseline)"
        )
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise BaselineError(f"{file} is not a readable summary.json ({exc})") from None
    if not isinstance(data, dict) or not {"settings", "metrics", "items"} <= set(data):
        raise BaselineError(f"{file} is not a pytest-agentbench summary (no settings/metrics/items)")
    data["_path"] = str(file)
    return data


def write_baseline(path: str | Path, summary: Mapping[str, Any]) -> Path:
    file = summary_path(path)
    file.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(file, json_text(public(summary)))
    return file


def settings_diff(
    a: Mapping[str, Any], b: Mapping[str, Any], skip: frozenset[str] = frozenset()
) -> list[tuple[str, Any, Any]]:
    """``(dotted key, A, B)`` for every setting whose value differs (nested dicts key by key), keys in
    ``skip`` ignored at every level."""
    out: list[tuple[str, Any, Any]] = []
    for key in sorted(set(a) | set(b)):
        if key in skip:
            continue
        left, right = a.get(key), b.get(key)
        if isinstance(left, dict) and isinstance(right, dict):
            out += [(f"{key}.{k}", x, y) for k, x, y in settings_diff(left, right, skip)]
        elif left != right:
            out.append((key, left, right))
    return out


def settings_differences(a: Mapping[str, Any], b: Mapping[str, Any], free: Iterable[str] = ()) -> list[str]:
    """``key: A vs B`` for each setting that makes two runs incomparable.

    ``free``: the benchmark's own settings that may differ, beyond ``COMMON_FREE_SETTINGS``."""
    allowed = COMMON_FREE_SETTINGS | frozenset(free)
    return [f"{key}: {short(left)} vs {short(right)}" for key, left, right in settings_diff(a, b, allowed)]


def short(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else value
    return text if len(text) <= 40 else text[:37] + "..."


def baseline_for_run(
    baseline: Path | None,
    update: bool,
    settings: Mapping[str, Any],
    free: Iterable[str] = (),
    *,
    allow_incomparable: bool = False,
) -> tuple[dict[str, Any] | None, list[str]]:
    """The baseline this run is compared with (None when there is none to compare), and notes for the header.

    A baseline with other settings, or whose dataset, grading environments or harness differ (its comparability
    keys), is refused (ConfigError), unless this run replaces it on purpose or ``allow_incomparable`` (then it is
    compared and the notes name every difference)."""
    if not baseline:
        return None, []
    file = summary_path(baseline)
    if not file.is_file() and update:
        return None, [f"no baseline at {file} yet: this run writes it"]
    try:
        data = load_summary(baseline)
    except BaselineError as exc:
        raise ConfigError(f"--bench-baseline: {exc}") from None
    keys = comparability.of(data), settings.get(comparability.KEY)
    diffs = settings_differences(data["settings"], settings, free) + comparability.incomparable(*keys)
    unknown = comparability.unknown_note(*keys)
    if diffs and allow_incomparable and not update:
        return data, [
            f"baseline {data['_path']} is NOT comparable with this run ({'; '.join(diffs)}): compared anyway, "
            f"as --bench-set=allow_incomparable=true asks; read the comparison and its gates with that in mind",
            *([unknown] if unknown else []),
        ]
    if diffs and not update:
        raise ConfigError(
            f"refusing to compare with the baseline {data['_path']}: it is not comparable with this run: "
            f"{'; '.join(diffs)}. Run with the baseline's settings and data, replace the baseline "
            f"on purpose with --bench-update-baseline, or compare anyway with --bench-set=allow_incomparable=true "
            f"(the report then says the runs are not comparable)"
        )
    if diffs:
        return None, [
            f"baseline {data['_path']} has other settings ({'; '.join(diffs)}): "
            f"not compared; --bench-update-baseline replaces it"
        ]
    return data, [
        f"baseline: {data['_path']} (model {run_subject(data['settings'])}, run {data['settings'].get('run_id')})",
        *([unknown] if unknown else []),
    ]
