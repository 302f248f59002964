"""Run counts and repeated attempts (--bench-attempts): pure functions over a run's records.

Run counts: Total (selected tasks), Evaluated (tasks with a verdict) and Error (tasks with any item
that ended in an infrastructure failure: ``records.ERROR_STATUSES``), stated next to the benchmark's
raw counts; Not run (tasks with an item that never ran, no error) when the run is incomplete; then the
items scored (a verdict: not skipped, not an error, not "not run") of the selected items.

Attempts: with K > 1 every record carries ``attempt`` (1..K). The benchmark summarizes each attempt on
its own; the run's metrics are the mean over attempts (gates and compare read them), each with its
standard error over attempts (sample standard deviation / sqrt(K)); pass@k for k = 1..K uses the
unbiased estimator 1 - C(n-c, k) / C(n, k) (n attempts, c of them correct), averaged over items
(steps, capsules: "item") and over tasks (a task attempt counts when all its scored items pass:
"task"), each with its standard error over attempts too: the attempts are the independent samples,
so the error is the jackknife over them (pass@k recomputed with each attempt left out in turn:
sqrt((K-1)/K * sum((theta_i - mean)^2))). For pass@1 that is exactly the sample standard deviation of
the per-attempt pass rates / sqrt(K), the headline metrics' error; pass@K uses every attempt, so no
attempt can be left out and it has no standard error (None, shown "n/a").
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from ..core.records import ERROR_STATUSES, PASS, R, RecordLike

NOT_RUN = "not_run"  # the status of a selected item without a record (report/summary.py)


def scored(record: RecordLike) -> bool:
    return bool(record.get("scored", True)) and record.get("status") != "skipped"


def run_counts(records: Iterable[RecordLike], raw: Mapping[str, int] | None = None) -> dict[str, int]:
    """Total, Evaluated and Error tasks (over every attempt), then the benchmark's raw counts."""
    tasks: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for record in records:
        tasks[str(record.get("task"))].append(record)
    error = {t for t, rs in tasks.items() if any(r.get("status") in ERROR_STATUSES for r in rs)}
    # a task with an item that never ran (report/summary.py's stand-ins) has no verdict yet
    not_run = {t for t, rs in tasks.items() if t not in error and any(r.get("status") == NOT_RUN for r in rs)}
    evaluated = {t for t, rs in tasks.items() if t not in error and t not in not_run and any(scored(r) for r in rs)}
    out = {"total": len(tasks), "evaluated": len(evaluated), "error": len(error)}
    if not_run:
        out["not_run"] = len(not_run)
    # items too: a task with one item not run has no verdict, so "Evaluated 0" can follow many scored items
    items = [r for rs in tasks.values() for r in rs if r.get("status") != "skipped"]
    verdicts = [r for r in items if scored(r) and r.get("status") not in (*ERROR_STATUSES, NOT_RUN)]
    out.update(items=len(items), items_scored=len(verdicts))
    return {**out, **dict(raw or {})}


OWN_COUNTS = ("total", "evaluated", "error", "not_run", "items", "items_scored")


def counts_line(counts: Mapping[str, int]) -> str:
    """``Total 3, Evaluated 1, Error 0, Not run 2 (raw counts); items scored 3 of 5``."""
    head = f"Total {counts['total']}, Evaluated {counts['evaluated']}, Error {counts['error']}"
    if counts.get("not_run"):
        head += f", Not run {counts['not_run']}"
    raw = ", ".join(f"{k} {v}" for k, v in counts.items() if k not in OWN_COUNTS)
    items = f"; items scored {counts['items_scored']} of {counts['items']}" if "items" in counts else ""
    return head + (f" ({raw})" if raw else "") + items


def attempts_of(records: Iterable[R]) -> dict[int, list[R]]:
    """Records by attempt (1..K); records without ``attempt`` (a run of one attempt) are attempt 1."""
    out: dict[int, list[R]] = defaultdict(list)
    for record in records:
        out[int(record.get("attempt") or 1)].append(record)
    return dict(sorted(out.items()))


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimator (Chen et al. 2021): 1 - C(n-c, k) / C(n, k)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} attempts, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean_stderr(values: list[float]) -> tuple[float, float]:
    """Mean and its standard error (sample standard deviation / sqrt(n); 0 for one value)."""
    if not values:
        return 0.0, 0.0
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, 0.0
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return mean, math.sqrt(var / len(values))


Outcomes = Mapping[str, Mapping[int, bool]]  # unit (item or task) -> attempt -> passed


def pass_at_mean(units: Outcomes, k: int, left_out: int | None = None) -> float | None:
    """pass@k averaged over the units with at least k attempts (``left_out``: an attempt ignored);
    None when no unit has k."""
    values = []
    for by_attempt in units.values():
        outcomes = [ok for attempt, ok in by_attempt.items() if attempt != left_out]
        if len(outcomes) >= k:
            values.append(pass_at_k(len(outcomes), sum(outcomes), k))
    return sum(values) / len(values) if values else None


def jackknife_stderr(units: Outcomes, k: int) -> float | None:
    """The standard error of pass@k over attempts: the jackknife, leaving out one attempt at a time;
    None when it cannot be computed (fewer than two attempts, or k = K: no attempt can be left out)."""
    attempts = sorted({a for by_attempt in units.values() for a in by_attempt})
    if len(attempts) < 2:
        return None
    found = [pass_at_mean(units, k, left_out=a) for a in attempts]
    thetas = [t for t in found if t is not None]
    if len(thetas) < len(found):
        return None
    n = len(thetas)
    mean = sum(thetas) / n
    return math.sqrt((n - 1) / n * sum((t - mean) ** 2 for t in thetas))


def pass_at(units: Outcomes, k_max: int) -> dict[str, dict[str, Any]]:
    """pass@k for k = 1..k_max over units (an item or a task), each with its standard error over attempts."""
    out = {}
    for k in range(1, k_max + 1):
        value = pass_at_mean(units, k)
        out[str(k)] = {
            "value": value if value is not None else 0.0,
            "stderr": jackknife_stderr(units, k),
            "n": sum(1 for v in units.values() if len(v) >= k),
        }
    return out


def attempt_stats(per_attempt: Mapping[int, Mapping[str, Any]], records: Iterable[RecordLike]) -> dict[str, Any]:
    """The attempts block of summary.json: K, each attempt's metrics, their mean and standard error,
    and pass@k per item and per task (each with its standard error over attempts)."""
    metrics = [dict(m) for m in per_attempt.values()]
    names = [k for k in metrics[0] if all(isinstance(m.get(k), (int, float)) for m in metrics)] if metrics else []
    mean = {}
    stderr = {}
    for name in names:
        mean[name], stderr[name] = mean_stderr([float(m[name]) for m in metrics])
    items: dict[str, dict[int, bool]] = defaultdict(dict)
    tasks: dict[str, dict[int, bool]] = defaultdict(dict)
    for record in records:
        if not scored(record):
            continue
        attempt = int(record.get("attempt") or 1)
        passed = record.get("status") == PASS
        items[str(record["id"])][attempt] = passed
        task = tasks[str(record.get("task"))]
        task[attempt] = task.get(attempt, True) and passed  # a task attempt passes when all its items pass
    k = len(per_attempt)
    return {
        "k": k,
        "per_attempt": {str(a): dict(m) for a, m in per_attempt.items()},
        "mean": mean,
        "stderr": stderr,
        "pass_at_k": {"item": pass_at(items, k), "task": pass_at(tasks, k)},
        "pass_at_k_stderr": "jackknife over attempts",
    }


def error_text(stderr: float | None) -> str:
    return "n/a" if stderr is None else f"{stderr:.1%}"


def attempt_lines(stats: Mapping[str, Any], headlines: Iterable[str]) -> list[str]:
    """Terminal lines: each headline metric's mean ± standard error, then pass@k per task and per item."""
    k = stats["k"]
    lines = []
    for name in headlines:
        if name in stats["mean"]:
            lines.append(
                f"{name}: mean over {k} attempts {stats['mean'][name]:.1%} "
                f"± {stats['stderr'][name]:.1%} (standard error)"
            )
    for unit, label in (("task", "per task"), ("item", "per item")):
        shown = ", ".join(
            f"pass@{n} {v['value']:.1%} ± {error_text(v['stderr'])}" for n, v in stats["pass_at_k"][unit].items()
        )
        lines.append(f"{label}: {shown}")
    lines.append(f"(± standard error over the {k} attempts; pass@k's by the jackknife, so pass@{k} has none)")
    return lines


def attempt_markdown(stats: Mapping[str, Any], headlines: Iterable[str]) -> str:
    k = stats["k"]
    out = [
        f"## Attempts ({k})",
        "",
        "| metric | mean | standard error | " + " | ".join(f"attempt {a}" for a in stats["per_attempt"]) + " |",
        "|---|---|---|" + "---|" * len(stats["per_attempt"]),
    ]
    for name in headlines:
        if name in stats["mean"]:
            per = " | ".join(f"{m[name]:.1%}" for m in stats["per_attempt"].values())
            out.append(f"| {name} | {stats['mean'][name]:.1%} | {stats['stderr'][name]:.1%} | {per} |")
    out += ["", "| pass@k | " + " | ".join(f"k={n}" for n in range(1, k + 1)) + " |", "|---|" + "---|" * k]
    for unit, label in (("task", "per task"), ("item", "per item")):
        row = " | ".join(f"{v['value']:.1%} ± {error_text(v['stderr'])}" for v in stats["pass_at_k"][unit].values())
        out.append(f"| {label} | {row} |")
    out += [
        "",
        f"± is the standard error over the {k} attempts (pass@k: jackknife, each attempt left out in turn; "
        f"pass@{k} uses every attempt, so it has none).",
    ]
    return "\n".join(out) + "\n"
