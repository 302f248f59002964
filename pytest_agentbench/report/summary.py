"""A run's summary, its verdict and its files: everything the reporter does once the records are in.

The plugin's reporter gathers the records and calls, at the end of the session:

    summary = build_summary(records, benchmark, settings, selection)   # metrics, counts, items, usage
    verdict = judge(summary, gates, baseline, exit_status, other_failures)   # comparison, gates, exit code
    ... (hooks may add fields to ``summary`` here)
    written = write_reports(summary, verdict, run_dir, gates=gates, baseline=baseline, notes=notes,
                            step_summary=os.environ.get("GITHUB_STEP_SUMMARY"))

(``judge_without_items`` when no benchmark item ran). A ``Summary`` is a mutable mapping of what summary.json
holds (``summary.data``), with what stays in memory beside it as attributes: the benchmark's own terminal lines
(``terminal``) and Markdown (``markdown``), and the stand-ins of the items not run (``not_run``). A key starting
with "_" that a plugin adds to the data stays in memory too.

``selection``: the items the session selected (one dict per item, as ``base_record`` makes it). A selected
item without a record (the run was interrupted, stopped early or lost a worker) is ``not_run``: it is put
into the metrics as an item that did not pass (in memory only: the records file never holds one), and the
summary says ``incomplete`` with the items to resume. Records of items that run again on resume (lost,
unplaced) count as not run for that label too.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import records as rec
from ..core.io import natural_key, write_atomic
from ..core.text import printable
from . import caveats, comparability
from . import cost as run_cost
from .attempts import NOT_RUN, attempt_lines, attempt_markdown, attempt_stats, attempts_of, counts_line, run_counts
from .baseline import json_text, public, write_baseline
from .compare import Comparison, compare
from .compare import render_markdown as comparison_markdown
from .declared import Declared, declared_in
from .gates import GateResult, decide_exit, evaluate, incomplete_exit, no_items_results
from .gates import render_markdown as gates_markdown
from .html import REPORT_HTML
from .options import GateConfig
from .picture import draw
from .scores import AUTOMATIC, REVIEWED, reviewed_status_of, score_view
from .served import KEY as SERVED_KEY
from .served import comparability_value, served_models
from .subject import run_subject
from .usage import split_usage, usage_line, usage_totals

SUMMARY_JSON = "summary.json"
SUMMARY_MD = "summary.md"
PICTURE = "summary.png"


# NOT_RUN (attempts.py): a selected item without a record: not passed, not an error, never in the records file
LISTED_NOT_RUN = 30  # ids named in a report line; summary.json lists them all


@dataclass(eq=False)
class Summary(MutableMapping[str, Any]):
    """A run's summary: a mutable mapping of ``data``, the fields summary.json holds (a key starting with "_"
    excepted), with what only this process shows beside it."""

    data: dict[str, Any]
    terminal: list[str] = field(default_factory=list)  # the benchmark's own lines for the terminal
    markdown: str = ""  # the benchmark's own Markdown for summary.md
    not_run: list[rec.Record] = field(default_factory=list)  # the records report.html shows for items without one

    def to_json(self) -> dict[str, Any]:
        """What summary.json (and a baseline written from this run) holds."""
        return public(self.data)

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.data[key] = value

    def __delitem__(self, key: str) -> None:
        del self.data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)


def not_run_records(selection: Iterable[rec.RecordLike], records: Iterable[rec.RecordLike]) -> list[rec.Record]:
    """Stand-ins for the selected items that have no record: ``not_run`` (a prefilled step the session never
    reached stays ``skipped``, as its record would say)."""
    have = {rec.record_key(r) for r in records}
    return [
        rec.Record.from_json({"message": "not run", **item, "status": item.get("status") or NOT_RUN})
        for item in selection
        if rec.record_key(item) not in have
    ]


def incomplete_of(
    selection: Iterable[rec.RecordLike], records: Iterable[rec.RecordLike], stand_ins: Iterable[rec.Record]
) -> dict[str, Any] | None:
    """``{"not_run": K, "selected": N, "items": [...]}`` when some selected item did not run (no record, or a
    record of an item that runs again on resume: lost, unplaced), else None."""
    missing = {rec.record_key(r) for r in stand_ins if r["status"] == NOT_RUN}
    missing |= {rec.record_key(r) for r in records if rec.runs_again_on_resume(r)}
    if not missing:
        return None
    selected = {rec.record_key(r) for r in [*selection, *records]}
    return {"not_run": len(missing), "selected": len(selected), "items": sorted(missing, key=natural_key)}


def incomplete_text(incomplete: Mapping[str, Any], limit: int = LISTED_NOT_RUN) -> str:
    """``incomplete: 2 of 5 items not run: 2.2, 3.1``."""
    return caveats.incomplete_text(incomplete, limit)


def build_summary(
    records: Iterable[rec.RecordLike],
    benchmark: Any,
    settings: Mapping[str, Any],
    selection: Iterable[rec.RecordLike] | None = None,
    reused: Iterable[str] = (),
    unscored: Sequence[Mapping[str, Any]] = (),
) -> Summary:
    """The summary of a run from its records and ``benchmark.summarize``; it also stores the benchmark's
    gate metrics, headlines and free settings, so two summary.json files can be compared on their own.
    With ``selection`` (the session's items) the metrics are over every selected item, those not run included.
    ``reused``: keys of the records an earlier session wrote (a resumed run): the usage says them apart.
    ``unscored``: model work done ahead that no record reports (report/cost.py counts it)."""
    ran = [rec.as_record(r) for r in records]
    reused = set(reused)
    chosen = [dict(item) for item in selection or ()]
    stand_ins = not_run_records(chosen, ran)
    incomplete = incomplete_of(chosen, ran, stand_ins) if selection is not None else None
    ordered: list[rec.Record] = sorted([*ran, *stand_ins], key=rec.sort_key)
    errors = caveats.errors_of(ordered)
    declared = Declared.of(benchmark)
    if any("attempt" in r for r in ordered):
        result = summarize_attempts(ordered, benchmark, settings, list(declared.units))
    else:
        result = benchmark.summarize(ordered, settings)
    counts = run_counts(ordered, result.get("raw_counts"))
    keys = settings.get(comparability.KEY)
    served = served_models(ordered)
    served_key = comparability_value(served, settings.get("model"))
    if isinstance(keys, dict) and served_key is not None:  # who answered, known only now
        keys = {**keys, SERVED_KEY: served_key}
    data = {
        "settings": {k: v for k, v in settings.items() if k != comparability.KEY},
        **(
            {comparability.KEY: comparability.with_selection(keys, (rec.record_key(r) for r in ordered))}
            if isinstance(keys, dict)
            else {}
        ),
        "metrics": result["metrics"],
        "counts": rec.count_statuses(ordered),
        "run_counts": counts,
        "items": [
            {
                "id": r.id,
                "task": r.task,
                "status": r.status,
                "scored": r.scored,
                **({"attempt": r["attempt"]} if "attempt" in r else {}),
                **answers_of(r),
                **reviewed_status_of(r),
                **run_cost.item_cost(r, settings),
            }
            for r in ordered
        ],
        "usage": split_usage(ordered, reused),
        **({"served_models": served} if served else {}),
        "cost": run_cost.cost_summary(ordered, settings, reused, unscored),
        **({"complete": incomplete is None} if selection is not None else {}),
        **({"incomplete": incomplete} if incomplete else {}),
        **({"errors": errors} if errors else {}),
        **{k: v for k, v in result.items() if k not in ("metrics", "terminal", "markdown", "raw_counts")},
        **declared.to_summary(),
    }
    return Summary(
        data, terminal=list(result.get("terminal", [])), markdown=result.get("markdown", ""), not_run=stand_ins
    )


def usage_of_run(records: list[rec.Record]) -> dict[str, float]:
    """Model usage totals. ``model_calls`` counts every call the harness made, a cache hit included;
    ``endpoint_calls`` those that reached the model's endpoint (what the terminal and summary.md call
    "model calls": 0 for a replay)."""
    return usage_totals(records)


def answers_of(record: rec.RecordLike) -> dict[str, str]:
    """Where an item's answers came from (fresh, replayed, mixed) and their digest, when it asked a model."""
    generation = record.get("generation") or {}
    return {k: generation[k] for k in ("answers", "responses") if isinstance(generation.get(k), str)}


def summarize_attempts(
    records: list[rec.Record], benchmark: Any, settings: Mapping[str, Any], headlines: list[str]
) -> dict[str, Any]:
    """--bench-attempts K > 1: the benchmark summarizes each attempt; the metrics are their means (what
    gates and compare read); ``attempts`` holds each attempt's metrics, standard errors and pass@k."""
    results = {a: benchmark.summarize(rs, settings) for a, rs in attempts_of(records).items()}
    stats = attempt_stats({a: r["metrics"] for a, r in results.items()}, records)
    raw: dict[str, Any] = {}
    for r in results.values():  # raw counts are summed over attempts
        for key, value in (r.get("raw_counts") or {}).items():
            raw[key] = raw.get(key, 0) + value
    terminal = list(attempt_lines(stats, headlines))
    markdown = [attempt_markdown(stats, headlines)]
    for attempt, r in results.items():
        terminal += [f"attempt {attempt}:", *(f"  {line}" for line in r.get("terminal", []))]
        body = "\n".join("#" + line if line.startswith("## ") else line for line in r.get("markdown", "").splitlines())
        markdown += [f"## Attempt {attempt}", "", body, ""]
    per_attempt = {
        str(a): {k: v for k, v in r.items() if k not in ("metrics", "terminal", "markdown", "raw_counts")}
        for a, r in results.items()
    }
    notes = list(dict.fromkeys(n for r in results.values() for n in r.get("notes", [])))  # each attempt's, once
    return {
        "metrics": dict(stats["mean"]),
        "attempts": stats,
        "attempt_results": per_attempt,
        "raw_counts": raw,
        "terminal": terminal,
        "markdown": "\n".join(markdown),
        **({"notes": notes} if notes else {}),
        **mean_scores(results, stats["mean"]),
    }


def mean_scores(results: Mapping[int, Mapping[str, Any]], automatic: Mapping[str, Any]) -> dict[str, Any]:
    """``scores`` of a run of several attempts whose benchmark reviewed each: the means over attempts of the
    reviewed metrics beside the automatic ones (the overrides counted over all attempts)."""
    reviewed = [r["scores"]["reviewed"] for r in results.values() if isinstance(r.get("scores"), Mapping)]
    if not reviewed or len(reviewed) != len(results):
        return {}
    means = attempt_stats({i: s.get("metrics") or {} for i, s in enumerate(reviewed, start=1)}, [])["mean"]
    first = reviewed[0]
    return {
        "scores": {
            AUTOMATIC: {"metrics": dict(automatic)},
            REVIEWED: {
                **{k: first[k] for k in ("file", "sha256") if k in first},
                "metrics": means,
                "overrides": sum(int(s.get("overrides") or 0) for s in reviewed),
                "changed": sum(int(s.get("changed") or 0) for s in reviewed),
            },
        }
    }


@dataclass
class Verdict:
    """What the end of a run decided: the comparison with the baseline, the gates and the exit code."""

    exit_before: int  # pytest's exit status before the gates
    exit_code: int  # the exit status to set (the same unless a gate was given and the run completed)
    comparison: Comparison | None = None
    gate_results: list[GateResult] = field(default_factory=list)
    alpha: float = 0.05  # the level the comparison is read at

    @property
    def gates_passed(self) -> bool:
        return all(r.ok for r in self.gate_results)


def judge(
    summary: MutableMapping[str, Any],
    gates: GateConfig | None,
    baseline: Mapping[str, Any] | None,
    exit_status: int,
    other_failures: int = 0,
) -> Verdict:
    """Compare with the baseline (when there is one), evaluate the gates (when any is given) and decide
    the exit code; the results are added to ``summary`` (comparison, gates, gates_passed, exit_code).

    ``other_failures``: failed tests of the session that are not benchmark items (they still fail the run)."""
    verdict = Verdict(
        exit_before=int(exit_status), exit_code=int(exit_status), alpha=gates.alpha if gates is not None else 0.05
    )
    score = gates.score if gates is not None else AUTOMATIC
    judged = score_view(summary, score)  # --bench-set=gate_score=reviewed: the human verdicts applied
    if baseline is not None:
        verdict.comparison = compare(
            score_view(baseline, score) if (baseline.get("scores") or {}).get(score) else dict(baseline),
            public(judged),
            declared=declared_in(summary),
        )
        summary["comparison"] = {
            "baseline": baseline.get("_path"),
            "incomparable": verdict.comparison.incomparable,
            "flipped": verdict.comparison.flipped,
            "mcnemar": verdict.comparison.mcnemar,
            "bootstrap": verdict.comparison.bootstrap,
        }
    if gates is not None and gates.any_gate:
        note = None if baseline is not None else "no comparable baseline yet (this run writes it)"
        verdict.gate_results = evaluate(gates, judged, verdict.comparison, note)
        if score == REVIEWED:  # every line says which score it judged
            verdict.gate_results = [
                GateResult(f"{r.gate} [reviewed score]", r.ok, r.detail) for r in verdict.gate_results
            ]
        verdict.exit_code = decide_exit(verdict.exit_before, verdict.gate_results, other_failures)
        summary["gates"] = [{"gate": r.gate, "ok": r.ok, "detail": r.detail} for r in verdict.gate_results]
        summary["gates_passed"] = verdict.gates_passed
    elif summary.get("incomplete") and not (gates is not None and gates.allow_incomplete):
        verdict.exit_code = incomplete_exit(verdict.exit_before)  # a run that ended normally still fails
    summary["exit_code"] = verdict.exit_code
    return verdict


def judge_without_items(gates: GateConfig | None, exit_status: int) -> Verdict:
    """No benchmark item ran: a gated run that otherwise completed fails, since no gate can hold."""
    verdict = Verdict(exit_before=int(exit_status), exit_code=int(exit_status))
    if gates is not None and gates.any_gate and exit_status in (0, 1):
        verdict.gate_results = no_items_results()
        verdict.exit_code = decide_exit(exit_status, verdict.gate_results, 0)
    return verdict


def render_markdown(
    summary: Summary, verdict: Verdict | None = None, *, notes: Iterable[str] = (), picture: bool = False
) -> str:
    """summary.md: notes, gates, picture, the benchmark's own Markdown, usage, comparison, settings."""
    settings = summary["settings"]
    lines = [f"# {settings['benchmark']} — {run_subject(settings)} — run {settings.get('run_id')}", ""]
    for warning in caveats.run_warnings(summary):  # first: what every number below must be read with
        lines += [f"> **{warning.text}**", *([">", f"> {warning.detail}"] if warning.detail else []), ""]
    command = caveats.resume_command(summary)
    if command:
        lines += ["Resume it with:", "", "```", command, "```", ""]
    for note in [*settings.get("notes", []), *notes, *summary.get("notes", [])]:
        lines += [f"> **Note:** {printable(note, markdown=True)}", ""]
    if verdict is not None and verdict.gate_results:
        lines.append(gates_markdown(verdict.gate_results, summary.get("exit_code", 1)))
    if picture:
        lines += [f"![per-task results]({PICTURE})", ""]
    lines.append(summary.markdown.rstrip())
    if summary.get("run_counts"):
        lines += ["", f"Run counts: {counts_line(summary['run_counts'])}"]
    usage = summary.get("usage")
    if usage and (any(usage.values()) or settings.get("model") != "oracle"):  # the oracle calls no model
        lines += ["", "Usage: " + usage_line(usage)]
    cost_md = run_cost.markdown(summary.get("cost") or {}, summary.get("items") or [])
    if cost_md:
        lines += ["", cost_md.rstrip()]
    if verdict is not None and verdict.comparison is not None:
        lines += ["", comparison_markdown(verdict.comparison, verdict.alpha).rstrip()]
    run = summary.get("run") or {}
    if run:  # when, on what and how the run was started (written by the plugin)
        lines += ["", "## Run", "", "| | |", "|---|---|"]
        lines += [
            f"| {key.replace('_', ' ')} | {code_cell(value) if key == 'command' else cell(value)} |"
            for key, value in run.items()
        ]
    lines += ["", "## Settings", "", "| setting | value |", "|---|---|"]
    for key, value in settings.items():
        if key not in ("notes", "data_hashes"):
            lines.append(f"| {key} | {cell(value)} |")
    hashes = settings.get("data_hashes") or {}
    if hashes:
        lines += ["", "## Data (sha256)", "", "| file | sha256 |", "|---|---|"]
        lines += [f"| {cell(name)} | {code_cell(digest)} |" for name, digest in hashes.items()]
    keys = comparability.of(summary)
    if keys:  # the data hashes are above; the rest says what another run must share to be compared with this one
        shown = {k: v for k, v in comparability.flat(keys).items() if ".hashes." not in k}
        lines += ["", "## Comparability", "", "| key | value |", "|---|---|"]
        lines += [f"| {cell(k)} | {cell(comparability.text(v))} |" for k, v in shown.items()]
        if keys.get("replayed"):
            lines.append(f"| replayed | {cell(comparability.text(keys['replayed']))} |")
    return "\n".join(lines) + "\n"


def cell(value: Any) -> str:
    """A value in a Markdown table cell: one inert line (``core.text.printable``)."""
    return printable(value, markdown=True)


def code_cell(value: Any) -> str:
    """A value in a Markdown table cell as code: one printable line, its pipes escaped (GitHub reads ``\\|`` as a
    pipe inside code in a table) and no backtick of its own to end the code span."""
    return "`" + printable(value, one_line=True).replace("|", "\\|").replace("`", "'") + "`"


def step_summary_markdown(markdown: str, run_id: Any) -> str:
    """summary.md for GITHUB_STEP_SUMMARY: the picture is a file of the run folder, which GitHub cannot show
    from a path on the runner, so it is named instead of linked."""
    return markdown.replace(
        f"![per-task results]({PICTURE})",
        f"_The per-task picture ({PICTURE}) and {REPORT_HTML} are in the run folder "
        f"{run_id}: upload it as an artifact to see them._",
    )


def draw_picture(
    summary: MutableMapping[str, Any], run_dir: Path, baseline: Mapping[str, Any] | None = None
) -> Path | None:
    """summary.png, or None; a broken plotting stack adds a note to the summary instead of losing the reports."""
    try:
        return draw(
            dict(summary),
            Path(run_dir) / PICTURE,
            headlines=declared_in(summary).picture_metrics(),
            baseline=dict(baseline) if baseline is not None else None,
        )
    except Exception as exc:  # noqa: BLE001  (any plotting failure)
        summary.setdefault("notes", []).append(f"picture not drawn: {type(exc).__name__}: {exc}")
        return None


@dataclass
class Written:
    markdown: str
    picture: Path | None = None
    baseline: Path | None = None  # where the baseline was updated, when it was


def write_reports(
    summary: Summary,
    verdict: Verdict,
    run_dir: Path,
    *,
    gates: GateConfig | None = None,
    baseline: Mapping[str, Any] | None = None,
    notes: Iterable[str] = (),
    step_summary: str | Path | None = None,
) -> Written:
    """Write summary.png, summary.json and summary.md into ``run_dir``; update the baseline when asked
    (and the run completed); append the Markdown to ``step_summary`` (GITHUB_STEP_SUMMARY) when given."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    update = gates is not None and gates.update_baseline and gates.baseline and verdict.exit_before in (0, 1)
    if update and summary.get("incomplete"):  # a partial run is no baseline: later comparisons would be skewed
        update = False
        summary.setdefault("notes", []).append("baseline not updated: the run is incomplete")
    picture = draw_picture(summary, run_dir, baseline)
    write_atomic(run_dir / SUMMARY_JSON, json_text(summary.to_json()))
    markdown = render_markdown(summary, verdict, notes=notes, picture=picture is not None)
    write_atomic(run_dir / SUMMARY_MD, markdown)
    written = Written(markdown=markdown, picture=picture)
    if update and gates is not None and gates.baseline:
        written.baseline = write_baseline(gates.baseline, summary)
    if step_summary:
        with open(step_summary, "a", encoding="utf-8") as fh:
            fh.write(step_summary_markdown(markdown, summary["settings"].get("run_id", run_dir.name)) + "\n")
    return written
