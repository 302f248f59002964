"""The run's picture: per task, the share of its scored items in each status, and the headline metrics.

Drawn with matplotlib's Agg canvas directly (no pyplot), so it never touches a display or global state.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

STATUS_COLOURS = {
    "pass": "#2e7d32", "fail": "#c62828", "timeout": "#ef6c00", "parse_error": "#6a1b9a",
    "eval_error": "#757575", "model_error": "#212121", "env_error": "#455a64", "error": "#000000",
}
OTHER_COLOUR = "#bdbdbd"


def task_rows(summary: dict[str, Any]) -> list[tuple[str, int, dict[str, int]]]:
    """(task, scored items, status counts) in the summary's item order; skipped items are left out."""
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    order: list[str] = []
    for item in summary.get("items", []):
        if not item.get("scored", True) or item.get("status") == "skipped":
            continue
        task = str(item.get("task"))
        if task not in counts:
            order.append(task)
        counts[task][item["status"]] += 1
    return [(t, sum(counts[t].values()), dict(counts[t])) for t in order]


def pass_fractions(summary: dict[str, Any]) -> dict[str, float]:
    return {task: c.get("pass", 0) / n for task, n, c in task_rows(summary) if n}


def headline_text(summary: dict[str, Any], baseline: dict[str, Any] | None, names: dict[str, str]) -> str:
    parts = []
    for short, key in names.items():
        value = summary["metrics"].get(key)
        if not isinstance(value, (int, float)):
            continue
        text = f"{short} {value:.1%}"
        before = (baseline or {}).get("metrics", {}).get(key)
        if isinstance(before, (int, float)):
            text += f" ({(value - before) * 100:+.1f} pp vs baseline)"
        parts.append(text)
    return "   ".join(parts)


def draw(summary: dict[str, Any], path: Path, *, headlines: dict[str, str],
         baseline: dict[str, Any] | None = None) -> Path | None:
    """Write the PNG; returns None when there is nothing scored to draw.

    ``headlines``: the metrics named in the title, gate name -> key in summary["metrics"]."""
    # why: matplotlib takes about half a second to import, and only the end of a run draws
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure  # why: matplotlib, as above
    from matplotlib.lines import Line2D  # why: matplotlib, as above
    from matplotlib.patches import Patch  # why: matplotlib, as above

    rows = task_rows(summary)
    if not rows:
        return None
    before = pass_fractions(baseline) if baseline else {}
    height = 1.6 + 0.24 * len(rows)
    fig = Figure(figsize=(8, height), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    seen: list[str] = []
    for y, (task, n, counts) in enumerate(rows):
        left = 0.0
        for status in [*STATUS_COLOURS, *sorted(set(counts) - set(STATUS_COLOURS))]:
            share = counts.get(status, 0) / n
            if not share:
                continue
            ax.barh(y, share, left=left, color=STATUS_COLOURS.get(status, OTHER_COLOUR), height=0.8)
            left += share
            if status not in seen:
                seen.append(status)
        if task in before:  # the baseline's pass fraction of this task, as a tick
            ax.plot([before[task]] * 2, [y - 0.45, y + 0.45], color="#1565c0", linewidth=2)
    ax.set_yticks(range(len(rows)), [t for t, _, _ in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of the task's scored items")
    settings = summary.get("settings", {})
    ax.set_title(f"{settings.get('benchmark')} · {settings.get('model')} · {settings.get('split')}\n"
                 f"{headline_text(summary, baseline, headlines)}", fontsize=9)
    handles = [Patch(color=STATUS_COLOURS.get(s, OTHER_COLOUR), label=s) for s in seen]
    if before:
        handles.append(Line2D([], [], color="#1565c0", linewidth=2, label="baseline pass share"))
    ax.legend(handles=handles, fontsize=7, loc="lower right", framealpha=0.8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, format="png")
    tmp.replace(path)
    return path
