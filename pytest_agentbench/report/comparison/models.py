"""The comparison of the runs of one session (a run file that lists several models or agents): one row per run,
and each run after the first compared with the first.

Pure: from each model's summary and records to a table, as terminal lines, Markdown (the session's
``summary.md``) and HTML (a fragment, and the session's ``report.html`` page that links each model's own
report). A row holds the benchmark's headline metrics with their 95% Wilson intervals (as each model's
report.html shows them), the item counts, the tokens, the cost (``summary["cost"]["total_usd"]`` when the
summary has one, "—" otherwise) and the run's gates; when a run says which agent (the harness) produced its
answers (``summary["comparability"]["harness"]["agent"]``: name and version), an ``agent`` column stands
beside the model. Below the table, each later model is compared with the
first as two runs are (``runs.py``: metrics with deltas and bootstrap intervals, McNemar tests, flipped items
linked to both models' report.html); summary.md holds the same comparisons as text (``compare.render_text``).
Two runs of different agents (or harnesses) are not comparable: their pair is refused, as a gate refuses such a
baseline, unless ``allow_incomparable`` (--bench-set allow_incomparable=true) asks for it anyway.

    rows = [model_row("gpt-4o", summary, records, run_dir), ...]
    pairs = compared_with_first([ModelRun("gpt-4o", summary, records, run_dir), ...])
    render_text(rows); render_markdown(rows, pairs=pairs); write_models_reports(folder, rows, title, pairs)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...core import records as rec
from ...core.io import write_atomic
from ...core.text import printable
from ..baseline import public
from ..compare import Comparison, compare
from ..compare import render_text as comparison_text
from ..highlight import esc
from ..html import ANCHOR_JS, REPORT_HTML, headlines
from ..summary import SUMMARY_JSON, SUMMARY_MD
from .format import NONE, page, wilson_text
from .runs import RunSide, comparison_section, side_of

MODELS_FOLDER = "_models"  # <report dir>/<bench>/_models/<run id>/: no model's folder can be named so


@dataclass(frozen=True)
class ModelRow:
    model: str  # the run's name: the model, or ``<model>+<agent>`` in a session of several agents
    metrics: list[dict[str, Any]]  # html.headlines: name, value, k, n, interval
    counts: Mapping[str, int] = field(default_factory=dict)
    usage: Mapping[str, float] = field(default_factory=dict)
    cost_usd: float | None = None
    gates: bool | None = None  # None: no gate given
    run_dir: str = ""
    not_run: int = 0
    agent: str | None = None  # the harness's agent (name and version), when the summary names one
    model_name: str = ""  # the model the summary names (shown in place of the run's name beside ``agent``)


def harness_of(summary: Mapping[str, Any]) -> Mapping[str, Any]:
    """The harness the run's comparability keys name (a benchmark with agents: ``{"agent": "codex 0.171.0"}``)."""
    keys = summary.get("comparability")
    harness = keys.get("harness") if isinstance(keys, Mapping) else None
    return harness if isinstance(harness, Mapping) else {}


def model_row(
    model: str, summary: Mapping[str, Any], records: Iterable[rec.RecordLike], run_dir: Path | str = ""
) -> ModelRow:
    """One model's row from its summary (in memory or summary.json) and its records (with the not-run stand-ins)."""
    records = list(records)
    cost = summary.get("cost")
    total = cost.get("total_usd") if isinstance(cost, Mapping) else None
    incomplete = summary.get("incomplete")
    agent = harness_of(summary).get("agent")
    settings = summary.get("settings")
    named = settings.get("model") if isinstance(settings, Mapping) else None
    return ModelRow(
        model=model,
        metrics=headlines(summary, records),
        counts=dict(summary.get("counts") or rec.count_statuses(records)),
        usage=dict(summary.get("usage") or {}),
        cost_usd=float(total) if isinstance(total, (int, float)) and not isinstance(total, bool) else None,
        gates=summary.get("gates_passed") if "gates_passed" in summary else None,
        run_dir=str(run_dir),
        not_run=int(incomplete.get("not_run", 0)) if isinstance(incomplete, Mapping) else 0,
        agent=str(agent) if agent is not None else None,
        model_name=str(named) if named else "",
    )


@dataclass(frozen=True)
class ModelRun:
    """One model's run as the session holds it: its summary (in memory), records and run folder."""

    model: str
    summary: Mapping[str, Any]
    records: list[rec.RecordLike]
    run_dir: Path | str


@dataclass(frozen=True)
class Pair:
    """A later model (B) compared with the first one (A); ``error`` when that comparison cannot be made."""

    first: str
    model: str
    comparison: Comparison | None = None
    a: RunSide | None = None
    b: RunSide | None = None
    error: str = ""

    @property
    def title(self) -> str:
        return f"{self.model} compared with {self.first}"


def as_run(run: ModelRun) -> dict[str, Any]:
    """The summary as compare reads a run from disk: what summary.json holds, and where it is (its label)."""
    return {**public(run.summary), "_path": str(Path(run.run_dir) / SUMMARY_JSON)}


def compared_with_first(runs: Iterable[ModelRun], allow_incomparable: bool = False) -> list[Pair]:
    """Each run after the first compared with the first (A the first, B the later one), from what is in
    memory. A comparison that cannot be made costs only its own section, never the table; one between runs
    of different harnesses (agents) is refused unless ``allow_incomparable``."""
    runs = list(runs)
    if len(runs) < 2:
        return []
    first, pairs = runs[0], []
    summary_a = as_run(first)
    for run in runs[1:]:
        refused = other_harness(first, run)
        if refused and not allow_incomparable:
            pairs.append(Pair(first.model, run.model, error=refused))
            continue
        try:
            summary_b = as_run(run)
            c = compare(summary_a, summary_b)
            a = side_of("A", summary_a, Path(first.run_dir), first.records)
            b = side_of("B", summary_b, Path(run.run_dir), run.records)
            pairs.append(Pair(first.model, run.model, c, a, b))
        except Exception as exc:  # noqa: BLE001  (one model's odd summary costs its comparison only)
            pairs.append(Pair(first.model, run.model, error=f"{type(exc).__name__}: {exc}"))
    return pairs


def other_harness(a: ModelRun, b: ModelRun) -> str:
    """Why two runs' harnesses (agents) make them incomparable, or "" when they are the same."""
    harness_a, harness_b = harness_of(a.summary), harness_of(b.summary)
    if harness_a == harness_b:
        return ""
    shown = ", ".join(f"{key}: {harness_a.get(key)} and {harness_b.get(key)}" for key in {**harness_a, **harness_b})
    return (
        f"the runs' harnesses differ ({shown}), so their scores measure different systems; compare them anyway "
        f"with --bench-set allow_incomparable=true"
    )


def pair_markdown(pair: Pair, alpha: float = 0.05) -> str:
    """A pair in summary.md: the comparison as ``compare A B`` prints it."""
    if pair.comparison is None:
        return f"## {pair.title}\n\nNot compared ({pair.error}).\n"
    return f"## {pair.title}\n\n```\n" + "\n".join(comparison_text(pair.comparison, alpha)) + "\n```\n"


def pair_html(pair: Pair, page_dir: Path, alpha: float = 0.05) -> str:
    """A pair on the session page: the section a run's comparison with its baseline shows."""
    section_id = f"compared-{pair.model}"
    if pair.comparison is None or pair.a is None or pair.b is None:
        return note_section(pair, section_id, f"Not compared ({pair.error}).")
    try:
        return comparison_section(
            pair.comparison, pair.a, pair.b, page_dir, alpha, title=pair.title, section_id=section_id
        )
    except Exception as exc:  # noqa: BLE001  (records written by a model's run: the page is shown without it)
        return note_section(pair, section_id, f"Not shown here ({type(exc).__name__}: {exc}); summary.md has it.")


def note_section(pair: Pair, section_id: str, note: str) -> str:
    """The pair's section when it has no comparison to show: why not."""
    return f'<section class="comparison" id="{esc(section_id)}"><h2>{esc(pair.title)}</h2><p>{esc(note)}</p></section>'


def metric_names(rows: Iterable[ModelRow]) -> list[str]:
    """The headline metrics of every row, in their first-seen order."""
    return list(dict.fromkeys(m["name"] for row in rows for m in row.metrics))


def metric_cell(row: ModelRow, name: str) -> str:
    """``60.0% (3/5, 95% CI 23.1%–88.2%)``, or "—" when the model has no such metric."""
    found = next((m for m in row.metrics if m["name"] == name), None)
    if found is None:
        return NONE
    return wilson_text(found["value"], found["k"], found["n"], found["interval"])


def tokens_cell(row: ModelRow) -> str:
    usage = row.usage
    total = usage.get("tokens", 0) or 0
    parts = [f"{total:g}"]
    if usage.get("prompt_tokens") or usage.get("completion_tokens"):
        parts.append(f"({usage.get('prompt_tokens', 0) or 0:g} in, {usage.get('completion_tokens', 0) or 0:g} out)")
    return " ".join(parts)


def cost_cell(row: ModelRow) -> str:
    return NONE if row.cost_usd is None else f"${row.cost_usd:.4f}"


def gates_cell(row: ModelRow) -> str:
    return NONE if row.gates is None else ("passed" if row.gates else "FAILED")


def items_cell(row: ModelRow) -> str:
    text = rec.counts_text(row.counts)
    return text + (f" ({row.not_run} not run)" if row.not_run and "not_run" not in row.counts else "")


def with_agents(rows: Iterable[ModelRow]) -> bool:
    """Whether the table has an ``agent`` column: some run names its agent."""
    return any(row.agent is not None for row in rows)


def header(rows: list[ModelRow]) -> list[str]:
    agent = ["agent"] if with_agents(rows) else []
    return ["model", *agent, *metric_names(rows), "items", "tokens", "cost", "gates"]


def cells(row: ModelRow, names: list[str], agents: bool = False) -> list[str]:
    who = [row.model_name or row.model, row.agent or NONE] if agents else [row.model]
    return [
        *who,
        *(metric_cell(row, n) for n in names),
        items_cell(row),
        tokens_cell(row),
        cost_cell(row),
        gates_cell(row),
    ]


def table(rows: Iterable[ModelRow]) -> list[list[str]]:
    """Header and one list of cells per model."""
    rows = list(rows)
    names, agents = metric_names(rows), with_agents(rows)
    return [header(rows), *(cells(row, names, agents) for row in rows)]


def render_text(rows: Iterable[ModelRow]) -> list[str]:
    """The table as aligned terminal lines."""
    grid = table(rows)
    widths = [max(len(line[i]) for line in grid) for i in range(len(grid[0]))]
    out = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in grid]
    out.insert(1, "  ".join("-" * width for width in widths))
    return out


def md_cell(text: str) -> str:
    return printable(text, markdown=True)


def render_markdown(
    rows: Iterable[ModelRow], title: str = "Models compared", pairs: Iterable[Pair] = (), alpha: float = 0.05
) -> str:
    """The table in Markdown, with each model's run folder below it, then each pair's comparison."""
    rows = list(rows)
    grid = table(rows)
    lines = [f"## {title}", "", "| " + " | ".join(md_cell(c) for c in grid[0]) + " |", "|" + "---|" * len(grid[0])]
    lines += ["| " + " | ".join(md_cell(c) for c in line) + " |" for line in grid[1:]]
    lines += [
        "",
        "Metrics: value (passed/units, 95% Wilson interval). Each model's own summary and report are in "
        "its run folder:",
        "",
    ]
    lines += [f"- {row.model}: `{row.run_dir}`" for row in rows]
    return "\n".join(lines) + "\n" + "".join("\n" + pair_markdown(pair, alpha) for pair in pairs)


def html_fragment(rows: Iterable[ModelRow], links: Mapping[str, str] | None = None) -> str:
    """The table as an HTML ``<table>``; ``links``: model -> the address of its report.html."""
    rows = list(rows)
    grid = table(rows)
    links = links or {}
    head = "".join(f"<th>{esc(c)}</th>" for c in grid[0])
    body = []
    for row, line in zip(rows, grid[1:]):
        text = esc(line[0])
        name = f'<a href="{esc(links[row.model])}">{text}</a>' if row.model in links else text
        rest = "".join(f"<td>{esc(c)}</td>" for c in line[1:-1])
        gate = line[-1]
        gate_html = f'<span class="{"bad" if gate == "FAILED" else "ok"}">{esc(gate)}</span>' if gate != NONE else NONE
        body.append(f"<tr><td>{name}</td>{rest}<td>{gate_html}</td></tr>")
    return f'<table class="models"><tr>{head}</tr>{"".join(body)}</table>'


def render_page(
    rows: Iterable[ModelRow],
    title: str,
    links: Mapping[str, str] | None = None,
    pairs: Iterable[Pair] = (),
    page_dir: Path | str = ".",
    alpha: float = 0.05,
) -> str:
    """The session's report.html: the table, each model linked to its own report, then each later model
    compared with the first (``page_dir``: the page's folder, from which the transcripts are linked)."""
    sections = [pair_html(pair, Path(page_dir), alpha) for pair in pairs]
    body = "".join(
        [
            "<h2>Models compared</h2>",
            html_fragment(rows, links),
            '<p class="n">Metrics: value (passed/units, 95% Wilson interval). Each model\'s name opens its own '
            "report.</p>",
            *sections,
        ]
    )
    return page(title, "models compared", body, script=ANCHOR_JS if sections else "")


def relative_link(folder: Path, run_dir: str) -> str:
    """The address of a model's report.html from the session folder (both under the same report folder)."""
    target = Path(run_dir) / REPORT_HTML
    try:
        return Path("..", "..", *target.relative_to(folder.parent.parent).parts).as_posix()
    except ValueError:
        return target.absolute().as_uri() if target.is_absolute() else target.as_posix()


def write_models_reports(
    folder: Path | str, rows: Iterable[ModelRow], title: str, pairs: Iterable[Pair] = (), alpha: float = 0.05
) -> tuple[Path, Path]:
    """``summary.md`` and ``report.html`` of the comparison in ``folder``; returns their paths."""
    folder = Path(folder)
    rows, pairs = list(rows), list(pairs)
    folder.mkdir(parents=True, exist_ok=True)
    markdown = folder / SUMMARY_MD
    write_atomic(markdown, f"# {title}\n\n" + render_markdown(rows, pairs=pairs, alpha=alpha))
    html_page = folder / REPORT_HTML
    links = {row.model: relative_link(folder, row.run_dir) for row in rows if row.run_dir}
    write_atomic(html_page, render_page(rows, title, links, pairs, folder, alpha))
    return markdown, html_page
