"""Whether two runs are comparable: the keys every summary.json records under ``comparability``.

The plugin records the keys every run has (benchmark, split, time limit, this package's version, and for a replay
the replayed run's keys under ``replayed``), the benchmark its own through the Benchmark protocol (``dataset``,
``grading_envs``, ``harness``, prompt templates' hashes), and the summary adds the selection and who answered
(``served_model``, report/served.py). This module knows no
benchmark: it compares the dicts key by key. Two runs whose ``STRICT`` keys differ measure different things, so a
gate refuses such a baseline (``baseline.baseline_for_run``) unless --bench-set=allow_incomparable=true; every other
key is shown where it differs. A run older than these keys has none: it is "unknown", said so, and never refused for it
(its settings are still checked as before), so old baselines and run folders keep loading.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

KEY = "comparability"
STRICT = ("dataset", "grading_envs", "harness", "served_model")  # a difference in one of these refuses a baseline
INFORMATIVE = frozenset({"replayed"})  # shown, never compared: what a replay re-graded
UNKNOWN = "unknown"


def of(summary: Mapping[str, Any]) -> dict[str, Any] | None:
    """A summary's comparability keys (None: a run older than them)."""
    found = summary.get(KEY)
    return found if isinstance(found, dict) else None


def with_selection(keys: Mapping[str, Any], item_keys: Iterable[str]) -> dict[str, Any]:
    """``keys`` with the run's selection: how many items and the sha256 of their sorted keys."""
    chosen = sorted(set(item_keys))
    digest = hashlib.sha256("\n".join(chosen).encode()).hexdigest()
    return {**keys, "selection": {"items": len(chosen), "sha256": digest}}


def text(value: Any) -> str:
    if value is None:
        return "(not recorded)"
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def flat(keys: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys (lists, such as the grading environments, stay whole)."""
    out: dict[str, Any] = {}
    for key, value in keys.items():
        if not prefix and key in INFORMATIVE:
            continue
        if isinstance(value, dict) and value:
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def differences(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> list[tuple[str, str, str]]:
    """``(comparability.KEY, A, B)`` for every key whose value differs; one row when a run has no keys at all."""
    if a is None and b is None:
        return []
    if a is None or b is None:
        return [(KEY, "unknown (an older run)" if a is None else "recorded", "recorded" if a is None else "unknown")]
    left, right = flat(a), flat(b)
    return [
        (f"{KEY}.{key}", text(left.get(key)), text(right.get(key)))
        for key in sorted(set(left) | set(right))
        if left.get(key) != right.get(key)
    ]


def incomparable(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> list[str]:
    """``key: A vs B`` for each STRICT key recorded by both runs whose value differs (nothing for unknown keys)."""
    if a is None or b is None:
        return []
    out = []
    for name in STRICT:
        if name not in a or name not in b:
            continue
        left, right = flat({name: a[name]}), flat({name: b[name]})
        out += [
            f"{key}: {short(left.get(key))} vs {short(right.get(key))}"
            for key in sorted(set(left) | set(right))
            if left.get(key) != right.get(key)
        ]
    return out


def short(value: Any) -> str:
    shown = text(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def unknown_note(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None, what: str = "the baseline") -> str | None:
    """What the report says when a run records no comparability keys (None when both do)."""
    if a is not None and b is not None:
        return None
    who = what if a is None else "this run"
    return (
        f"{who} records no comparability keys (a run older than them): its dataset version, grading environments "
        f"and harness are unknown and were not checked; its settings were"
    )
