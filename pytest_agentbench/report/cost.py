"""What a run cost: per item, per task (problem or capsule), per run and per solved task.

Pure: it reads the records' ``generation`` cost fields (``models/price.py``) and the run's price from the
settings. ``summary["cost"]`` always exists (other reports read ``total_usd``); without a price every amount
is None. Fresh calls are what was spent (``total_usd``); replayed calls (cache hits) are shown apart as what
they would have cost (``replayed_usd``). An item whose cost is unknown (its endpoint reported no usage) makes
the totals unknown too: they are never estimated.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..core import records as rec
from ..core.io import natural_key
from ..models.price import USAGE_MISSING_KEY, item_replayed, item_spent

TOP_TASKS = 10  # tasks named in the terminal line (summary.json and summary.md list them all)


def usd(value: float | None) -> str:
    return "unknown" if value is None else f"${value:.4f}"


def total(values: Iterable[float | None]) -> float | None:
    """The sum, or None when any part is unknown."""
    out = 0.0
    for value in values:
        if value is None:
            return None
        out += value
    return round(out, 9)


def solved_tasks(records: Sequence[rec.RecordLike]) -> int:
    """Tasks solved (per attempt): every scored item of the task passed, and it had one."""
    tasks: dict[tuple[str, Any], bool] = {}
    for r in records:
        if not r.get("scored", True) or r.get("status") == "skipped":
            continue
        key = (str(r.get("task")), r.get("attempt"))
        tasks[key] = tasks.get(key, True) and r.get("status") == rec.PASS
    return sum(tasks.values())


def cost_summary(
    records: Sequence[rec.RecordLike],
    settings: Mapping[str, Any],
    reused: Iterable[str] = (),
    unscored: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """``summary["cost"]``: totals, cost per solved task, per task, and the budgets the run had. ``reused``: keys
    of the records an earlier session wrote (a resumed run): ``this_session_usd`` is what this session spent.
    ``unscored``: the accounting of model work done ahead that no record reports (a step generated for an item
    that never ran): in ``unscored`` and in the totals, since it was paid for."""
    out = priced_summary(records, settings, reused)
    if unscored:
        ahead = total(item_spent({"generation": u}) for u in unscored) if settings.get("price") else None
        out["unscored"] = {
            "steps": len(unscored),
            "model_calls": sum(int(u.get("model_calls") or 0) for u in unscored),
            "cost_usd": ahead,
        }
        if out.get("priced"):
            out["total_usd"] = total([out["total_usd"], ahead])
            if "this_session_usd" in out:
                out["this_session_usd"] = total([out["this_session_usd"], ahead])
    return out


def priced_summary(
    records: Sequence[rec.RecordLike], settings: Mapping[str, Any], reused: Iterable[str] = ()
) -> dict[str, Any]:
    """``cost_summary`` of the records alone."""
    price = settings.get("price")
    ran = [r for r in records if r.get("status") != "not_run"]
    missing = sum(
        int((r.get("generation") or {}).get(USAGE_MISSING_KEY) or 0)
        for r in ran
        if isinstance(r.get("generation"), Mapping)
    )
    solved = solved_tasks(records)
    if not price:
        return {
            "priced": False,
            "total_usd": None,
            "replayed_usd": None,
            "per_solved_usd": None,
            "solved": solved,
            "usage_missing": missing,
        }
    spent = {rec.record_key(r): item_spent(r) for r in ran}
    replayed = {rec.record_key(r): item_replayed(r) for r in ran}
    per_task: dict[str, list[float | None]] = {}
    for r in ran:
        per_task.setdefault(str(r.get("task")), []).append(spent[rec.record_key(r)])
    run_total = total(spent.values())
    out = {
        "priced": True,
        "price": dict(price),
        "total_usd": run_total,
        "replayed_usd": total(replayed.values()),
        "per_solved_usd": round(run_total / solved, 9) if run_total is not None and solved else None,
        "solved": solved,
        "unknown_items": sum(1 for v in spent.values() if v is None),
        "usage_missing": missing,
        "per_task": {
            task: total(values) for task, values in sorted(per_task.items(), key=lambda kv: natural_key(kv[0]))
        },
    }
    earlier = set(reused)
    if earlier:  # a session's budget counts what that session spends
        out["this_session_usd"] = total(v for k, v in spent.items() if k not in earlier)
    for budget in ("max_cost_per_item", "max_cost"):
        if settings.get(budget) is not None:
            out[budget] = settings[budget]
    out["budget_stopped"] = sum(1 for r in ran if r.get("status") == rec.BUDGET)
    return out


def item_cost(record: rec.RecordLike, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The cost fields of one item in summary.json's ``items``: only in a priced run."""
    if not settings.get("price") or record.get("status") == "not_run":
        return {}
    return {"cost_usd": item_spent(record)}


def cost_line(cost: Mapping[str, Any]) -> str | None:
    """One line for the terminal and summary.md; None when the run had no price (and no reply lacked usage)."""
    if not cost.get("priced"):
        if cost.get("usage_missing"):
            return f"cost: unknown (no --model-price; {cost['usage_missing']} model replies reported no token usage)"
        return None
    price = cost.get("price") or {}
    spent = f"cost: {usd(cost.get('total_usd'))} spent"
    if "this_session_usd" in cost:  # a resumed run: the reused records were paid for by an earlier session
        spent += f", {usd(cost['this_session_usd'])} of it in this session"
    if cost.get("max_cost") is not None:
        spent += f", against a run budget of ${cost['max_cost']:g}"
    parts = [
        f"{spent} (price ${price.get('prompt_per_mtok', 0):g} / "
        f"${price.get('completion_per_mtok', 0):g} per million prompt / completion tokens)"
    ]
    ahead = cost.get("unscored") or {}
    if ahead.get("steps"):
        parts.append(
            f"{ahead['steps']} step(s) generated ahead and never scored cost {usd(ahead.get('cost_usd'))} "
            f"({ahead.get('model_calls', 0)} model calls; in the total)"
        )
    solved = cost.get("solved") or 0
    parts.append(f"{usd(cost.get('per_solved_usd'))} per solved task ({solved} solved)" if solved else "no task solved")
    if cost.get("replayed_usd"):
        parts.append(f"replayed calls would have cost {usd(cost['replayed_usd'])}")
    if cost.get("unknown_items"):
        parts.append(
            f"unknown for {cost['unknown_items']} item(s): {cost.get('usage_missing', 0)} model replies "
            f"reported no token usage"
        )
    if cost.get("budget_stopped"):
        parts.append(
            f"{cost['budget_stopped']} item(s) stopped by --bench-set max_cost_per_item "
            f"${cost.get('max_cost_per_item', 0):g}"
        )
    return "; ".join(parts)


def terminal_lines(cost: Mapping[str, Any]) -> list[str]:
    line = cost_line(cost)
    if line is None:
        return []
    tasks = [(t, v) for t, v in (cost.get("per_task") or {}).items()]
    costly = sorted(tasks, key=lambda tv: -(tv[1] or 0.0))[:TOP_TASKS]
    out = [line]
    if len(tasks) > 1:
        out.append(
            "  cost per task (most first): "
            + ", ".join(f"{t} {usd(v)}" for t, v in costly)
            + (f", ... ({len(tasks) - TOP_TASKS} more)" if len(tasks) > TOP_TASKS else "")
        )
    return out


def markdown(cost: Mapping[str, Any], items: list[Mapping[str, Any]]) -> str:
    """summary.md's cost section: the line, then one row per task with its items' costs."""
    line = cost_line(cost)
    if line is None:
        return ""
    out = ["## Cost", "", line.removeprefix("cost: "), ""]
    per_task = cost.get("per_task") or {}
    if per_task:
        out += ["| task | cost | items |", "|---|---|---|"]
        for task, value in per_task.items():
            parts = ", ".join(
                f"{i['id']}{attempt_tag(i)} {usd(i.get('cost_usd'))}"
                for i in items
                if str(i.get("task")) == task and "cost_usd" in i
            )
            out.append(f"| {task} | {usd(value)} | {parts.replace('|', '/')} |")
    return "\n".join(out) + "\n"


def html_section(cost: Mapping[str, Any], items: list[Mapping[str, Any]]) -> str:
    """report.html's cost section (every value escaped)."""
    line = cost_line(cost) if isinstance(cost, Mapping) else None
    if line is None:
        return ""

    def esc(value: Any) -> str:
        return html.escape(str(value), quote=True)

    rows = []
    for task, value in (cost.get("per_task") or {}).items():
        parts = ", ".join(
            f"{i['id']} {usd(i.get('cost_usd'))}" for i in items if str(i.get("task")) == task and "cost_usd" in i
        )
        rows.append(f"<tr><td>{esc(task)}</td><td>{esc(usd(value))}</td><td>{esc(parts)}</td></tr>")
    table = (
        f"<table class=cost><tr><th>task</th><th>cost</th><th>items</th></tr>{''.join(rows)}</table>" if rows else ""
    )
    return f"<h2>Cost</h2><p>{esc(line.removeprefix('cost: '))}</p>{table}"


def attempt_tag(item: Mapping[str, Any]) -> str:
    """``[attempt2]`` after an item's id when the run repeats items (--bench-attempts), else nothing."""
    return f"[attempt{item['attempt']}]" if "attempt" in item else ""
