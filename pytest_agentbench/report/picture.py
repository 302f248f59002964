"""The run's picture: per task, the share of its scored items in each status, and the headline metrics.

Drawn with matplotlib's Agg canvas directly (no pyplot), so it never touches a display or global state.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from .subject import run_subject

STATUS_COLOURS = {
    "pass": "#2e7d32",
    "fail": "#c62828",
    "timeout": "#ef6c00",
    "parse_error": "#6a1b9a",
    "eval_error": "#757575",
    "model_error": "#212121",
    "env_error": "#455a64",
    "error": "#000000",
    "blocked": "#5d4037",
    "budget": "#8d6e00",
}
OTHER_COLOUR = "#bdbdbd"
BASELINE_COLOUR = "#0d47a1"


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


def figure(summary: dict[str, Any], *, headlines: dict[str, str], baseline: dict[str, Any] | None = None) -> Any:
    """The matplotlib Figure of the picture, or None when there is nothing scored to draw.

    The legend sits outside the axes (right of the bars, never over them); the baseline's pass share of
    each task is a dark tick with a white outline drawn above the bars, visible on any colour and at 0 or 1."""
    # why: matplotlib takes about half a second to import, and only the end of a run draws
    from matplotlib import patheffects  # why: matplotlib, as above
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # why: matplotlib, as above
    from matplotlib.figure import Figure  # why: matplotlib, as above
    from matplotlib.lines import Line2D  # why: matplotlib, as above
    from matplotlib.patches import Patch  # why: matplotlib, as above

    rows = task_rows(summary)
    if not rows:
        return None
    before = pass_fractions(baseline) if baseline else {}
    height = 1.6 + 0.24 * len(rows)
    fig = Figure(figsize=(9, height), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    seen: list[str] = []
    outline = [patheffects.withStroke(linewidth=4, foreground="white")]
    for y, (task, n, counts) in enumerate(rows):
        left = 0.0
        for status in [*STATUS_COLOURS, *sorted(set(counts) - set(STATUS_COLOURS))]:
            share = counts.get(status, 0) / n
            if not share:
                continue
            ax.barh(y, share, left=left, color=STATUS_COLOURS.get(status, OTHER_COLOUR), height=0.8, zorder=1)
            left += share
            if status not in seen:
                seen.append(status)
        if task in before:  # the baseline's pass fraction of this task, as a tick above the bars
            ax.plot(
                [before[task]] * 2,
                [y - 0.42, y + 0.42],
                color=BASELINE_COLOUR,
                linewidth=2.5,
                zorder=5,
                clip_on=False,
                solid_capstyle="butt",
                path_effects=outline,
                gid="baseline",
            )
    ax.set_yticks(range(len(rows)), [t for t, _, _ in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of the task's scored items")
    settings = summary.get("settings", {})
    ax.set_title(
        f"{settings.get('benchmark')} · {run_subject(settings)} · {settings.get('split')}\n"
        f"{headline_text(summary, baseline, headlines)}",
        fontsize=9,
    )
    handles: list[Any] = [Patch(color=STATUS_COLOURS.get(s, OTHER_COLOUR), label=s) for s in seen]
    if before:
        handles.append(
            Line2D([], [], color=BASELINE_COLOUR, linewidth=2.5, label="baseline pass share", path_effects=outline)
        )
    ax.legend(
        handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False
    )
    fig.tight_layout()
    return fig


def draw(
    summary: dict[str, Any], path: Path, *, headlines: dict[str, str], baseline: dict[str, Any] | None = None
) -> Path | None:
    """Write the PNG; returns None when there is nothing scored to draw.

    ``headlines``: the metrics named in the title, gate name -> key in summary["metrics"]."""
    fig = figure(summary, headlines=headlines, baseline=baseline)
    if fig is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, format="png", bbox_inches="tight")  # "tight" keeps the legend beside the axes
    tmp.replace(path)
    return path
