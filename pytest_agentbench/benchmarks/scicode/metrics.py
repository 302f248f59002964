"""SciCode's metrics: main-problem resolve rate and the micro-averaged subproblem rate.

Records are read as ``Record``s (``summarize`` makes one of a JSON object it is given): the common fields
(status, task, split, id, scored) as attributes, the benchmark's own (category, exec_duration) by key."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from ...core.records import INFRA_STATUSES, PASS, Record, RecordLike, as_record, count_statuses, sort_key
from . import timelimits
from .dataset import UNCLASSIFIED

ORDER = ("validation", "test")


def split_metrics(records: list[Record]) -> dict[str, Any]:
    """A problem is resolved when every one of its scored steps passed; the subproblem rate is
    passed steps over scored steps (micro average, not the mean of per-problem ratios)."""
    scored = [r for r in records if r.scored and r.status != "skipped"]
    by_problem: dict[str, list[Record]] = defaultdict(list)
    for record in scored:
        by_problem[record.task].append(record)
    resolved = sum(1 for steps in by_problem.values() if all(s.status == PASS for s in steps))
    passed = sum(1 for r in scored if r.status == PASS)
    return {
        "problems": len(by_problem),
        "problems_resolved": resolved,
        "main": resolved / len(by_problem) if by_problem else 0.0,
        "steps": len(scored),
        "steps_passed": passed,
        "subproblem": passed / len(scored) if scored else 0.0,
        "counts": count_statuses(records),
        "infra_errors": sum(1 for r in scored if r.status in INFRA_STATUSES),
    }


def problem_rows(records: list[Record]) -> list[dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for record in sorted(records, key=sort_key):
        row = rows.setdefault(record.task, {"problem": record.task, "split": record.split, "steps": []})
        row["steps"].append({"id": record.id, "status": record.status})
    for row in rows.values():
        scored = [s for s in row["steps"] if s["status"] != "skipped"]
        row["passed"] = sum(1 for s in scored if s["status"] == PASS)
        row["scored"] = len(scored)
        row["resolved"] = bool(scored) and row["passed"] == row["scored"]
    return list(rows.values())


def summarize(
    given: Iterable[RecordLike], settings: dict[str, Any], categories: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """``categories``: problem id -> category (a problem not named there is ``unclassified``)."""
    records = [as_record(r) for r in given]
    splits = {
        s: split_metrics([r for r in records if r.split == s]) for s in ORDER if any(r.split == s for r in records)
    }
    overall = split_metrics(records)
    metrics = {"main": overall["main"], "subproblem": overall["subproblem"]}
    for name, m in splits.items():
        metrics[f"{name}.main"] = m["main"]
        metrics[f"{name}.subproblem"] = m["subproblem"]
    rows = problem_rows(records)
    by_category = category_metrics(records, categories or {})
    limits = timelimits.sensitivity(records)
    raw = {
        "main_problem_resolved": overall["problems_resolved"],
        "main_problem_total": overall["problems"],
        "subproblem_correct": overall["steps_passed"],
        "subproblem_total": overall["steps"],
    }
    return {
        "metrics": metrics,
        "splits": splits,
        "overall": overall,
        "problems": rows,
        "categories": {name: {k: m[k] for k in CATEGORY_KEYS} for name, m in by_category.items()},
        "raw_counts": raw,
        "time_limits": limits,
        "terminal": terminal_lines(splits, overall, records)
        + category_lines(by_category)
        + timelimits.terminal_lines(limits),
        "markdown": markdown(splits, overall, rows, records, by_category) + timelimits.markdown(limits),
    }


CATEGORY_KEYS = ("problems", "problems_resolved", "main", "steps", "steps_passed", "subproblem")


def category_metrics(records: list[Record], categories: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """Both headline metrics per category (--bench-set category), categories in name order."""
    groups: dict[str, list[Record]] = defaultdict(list)
    for record in records:
        groups[record.get("category") or categories.get(record.task) or UNCLASSIFIED].append(record)
    return {name: split_metrics(groups[name]) for name in sorted(groups)}


def category_lines(by_category: dict[str, dict[str, Any]]) -> list[str]:
    return [
        f"category {name}: main problems resolved {m['problems_resolved']}/{m['problems']} ({m['main']:.1%}), "
        f"subproblems passed {m['steps_passed']}/{m['steps']} ({m['subproblem']:.1%})"
        for name, m in by_category.items()
    ]


def _counts_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {status}" for status, n in counts.items())


def terminal_lines(splits, overall, records) -> list[str]:
    lines = []
    for name, m in [*splits.items(), *([("all", overall)] if len(splits) > 1 else [])]:
        lines.append(
            f"{name}: main problems resolved {m['problems_resolved']}/{m['problems']} ({m['main']:.1%}), "
            f"subproblems passed {m['steps_passed']}/{m['steps']} ({m['subproblem']:.1%})"
        )
        lines.append(f"  statuses: {_counts_text(m['counts'])}")
    # steps that ended in an error: the report layer's warning says it on every page (report/caveats.py)
    # model usage: the plugin's last line says it for every benchmark
    return lines


def markdown(splits, overall, rows, records, by_category=None) -> str:
    out = ["## Metrics", "", "| split | main problems resolved | subproblems passed |", "|---|---|---|"]
    for name, m in [*splits.items(), *([("all", overall)] if len(splits) > 1 else [])]:
        out.append(
            f"| {name} | {m['problems_resolved']}/{m['problems']} ({m['main']:.1%}) | "
            f"{m['steps_passed']}/{m['steps']} ({m['subproblem']:.1%}) |"
        )
    if by_category:
        out += ["", "| category | main problems resolved | subproblems passed |", "|---|---|---|"]
        for name, m in by_category.items():
            out.append(
                f"| {name} | {m['problems_resolved']}/{m['problems']} ({m['main']:.1%}) | "
                f"{m['steps_passed']}/{m['steps']} ({m['subproblem']:.1%}) |"
            )
    out += ["", "Statuses: " + (_counts_text(overall["counts"]) or "none"), ""]
    # model usage: one line for every benchmark, written by the report layer (summary.md's "Usage:")
    out += ["## Problems", "", "| problem | split | resolved | steps passed | steps |", "|---|---|---|---|---|"]
    for row in rows:
        steps = " ".join(f"{s['id']}:{s['status']}" for s in row["steps"])
        out.append(
            f"| {row['problem']} | {row['split']} | {'yes' if row['resolved'] else 'no'} | "
            f"{row['passed']}/{row['scored']} | {steps} |"
        )
    return "\n".join(out) + "\n"
