"""The comparison of two runs as HTML: in a run's report.html (a run with ``--bench-baseline``), as the page
``python -m pytest_agentbench compare A B --html OUT`` writes, and on the session page of a run of several
models (``models.py``: each model after the first compared with the first).

What it shows comes from ``compare.Comparison`` (A the reference, B the run compared with it): the
headline metrics side by side with their deltas and 95% bootstrap intervals (tasks resampled), the
exact McNemar tests with the smallest drop each could detect (``power.detectable_drop``), the gates
with their numbers when the run has gates, and the flipped items, pass -> fail first. Each flipped
item links to its transcript on both runs' pages (``report.html#item-ID``, a relative link to a page
that is on disk; this run's own transcript is on the same page), and both transcripts are also
embedded side by side when the runs' records files are on disk, so the page holds them on its own.

Every value is escaped (records hold model output); no script is added but the page's own, and
nothing is fetched.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ...benchmarks.registry import get_benchmark
from ...core import records as rec
from ...core.errors import ConfigError
from ...core.io import write_atomic
from ..compare import (
    Comparison,
    comparability_warnings,
    drop_p_value,
    responses_lines,
    shared_line,
    too_small,
    units_of,
)
from ..gates import GateResult
from ..highlight import esc
from ..html import ANCHOR_JS, REPORT_HTML, item_anchor, item_or_fallback, status_badge
from ..options import GateConfig
from ..power import detectable_drop
from .format import delta_class, interval, page, pct, pp

EMBEDDED = 100  # flipped items whose two transcripts are embedded; the rest are linked only
PASS_TO_FAIL, FAIL_TO_PASS = "pass -> fail", "fail -> pass"

COMPARE_CSS = """
section.comparison{background:#fff;border:1px solid #d0d7de;border-radius:8px;padding:6px 16px 14px;margin:12px 0}
.comparison td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.comparison .down{color:#c62828;font-weight:600}.comparison .up{color:#2e7d32;font-weight:600}
.comparison .warn{background:#fff8e1;border-left:3px solid #ef6c00;padding:4px 8px;margin:4px 0}
.comparison tr.pf td:first-child{border-left:4px solid #c62828}
.comparison tr.fp td:first-child{border-left:4px solid #2e7d32}
.side-by-side{display:grid;grid-template-columns:1fr 1fr;gap:12px}.side-by-side>div{min-width:0}
"""


@dataclass
class RunSide:
    """One of the two runs as the page shows it."""

    name: str  # "A" or "B"
    summary: Mapping[str, Any]
    run_dir: Path | None = None  # the folder holding its summary.json (its records and trajectories)
    records: dict[str, rec.RecordData] = field(default_factory=dict)  # by record_key
    in_page: bool = False  # its transcripts are on this very page (the run's own report.html)

    @property
    def report(self) -> Path | None:
        """Its report.html, when it is on disk and is not this page."""
        if self.in_page or self.run_dir is None:
            return None
        page = self.run_dir / REPORT_HTML
        return page if page.is_file() else None

    @property
    def label(self) -> str:
        s = self.summary.get("settings", {})
        return f"model {s.get('model')}, run {s.get('run_id')}"


def records_file_of(run_dir: Path, benchmark: str) -> Path | None:
    """The run's records file: the benchmark's ``records_file``, else the folder's only ``*.jsonl``."""
    try:
        named = run_dir / get_benchmark(benchmark).records_file
    except ConfigError:  # a benchmark not installed here: its records file is the run's only JSONL file, if any
        found = [p for p in run_dir.glob("*.jsonl") if p.is_file()]
        return found[0] if len(found) == 1 else None
    return named if named.is_file() else None


def read_run_records(run_dir: Path | None, benchmark: str) -> dict[str, dict[str, Any]]:
    """A run's records by key ({} when the folder holds none: a baseline saved as a lone summary.json)."""
    if run_dir is None or not run_dir.is_dir():
        return {}
    path = records_file_of(run_dir, benchmark)
    if path is None:
        return {}
    try:
        with warnings.catch_warnings():  # a torn last line is the run's business; the page shows the rest
            warnings.simplefilter("ignore")
            return rec.latest_by_id(r for r in rec.read_records(path) if isinstance(r, dict) and "id" in r)
    except OSError:
        return {}


def side_of(
    name: str,
    summary: Mapping[str, Any],
    run_dir: Path | None = None,
    records: Iterable[rec.RecordLike] | None = None,
    in_page: bool = False,
) -> RunSide:
    """A run read from disk: its folder is where its summary.json is (``_path``) unless given."""
    if run_dir is None and summary.get("_path"):
        run_dir = Path(str(summary["_path"])).parent
    if records is None:
        by_key = read_run_records(run_dir, str(summary.get("settings", {}).get("benchmark")))
    else:
        by_key = {rec.record_key(r): dict(r) for r in records}
    return RunSide(name, summary, Path(run_dir) if run_dir is not None else None, by_key, in_page)


# ---- pieces ------------------------------------------------------------------------------------
def link(side: RunSide, key: str, page_dir: Path) -> str:
    """A link to the item's transcript on ``side``'s page, or a word saying why there is none."""
    anchor = "#" + quote(item_anchor(key), safe="")
    if side.in_page:
        return f'<a href="{esc(anchor)}">{side.name}: this page</a>'
    if side.report is None:
        return f'<span class="n">{side.name}: no report.html on disk</span>'
    relative = Path(os.path.relpath(side.report.resolve(), Path(page_dir).resolve())).as_posix()
    return f'<a href="{esc(quote(relative) + anchor)}">{side.name}: {esc(relative)}</a>'


def header_html(a: RunSide, b: RunSide, c: Comparison, alpha: float, page_dir: Path) -> str:
    def where(side: RunSide) -> str:
        if side.in_page:
            return "this page"
        if side.report is not None:
            relative = Path(os.path.relpath(side.report.resolve(), Path(page_dir).resolve())).as_posix()
            return f'<a href="{esc(quote(relative))}">{esc(relative)}</a>'
        return esc(side.summary.get("_path") or side.run_dir or "?")

    out = [f"<p><b>A</b> (reference): {esc(a.label)} — {where(a)}<br><b>B</b>: {esc(b.label)} — {where(b)}</p>"]
    if c.settings_table:
        out.append(
            "<table><tr><th>setting that differs</th><th>A</th><th>B</th></tr>"
            + "".join(f"<tr><td>{esc(k)}</td><td>{esc(x)}</td><td>{esc(y)}</td></tr>" for k, x, y in c.settings_table)
            + "</table>"
        )
    warnings_ = []
    if c.settings_diff:
        warnings_.append("these settings change what is asked or how it is scored: " + "; ".join(c.settings_diff))
    warnings_ += comparability_warnings(c)
    if shared_line(c):
        warnings_.append(f"scores are {shared_line(c)}")
    warnings_ += [line.removeprefix("WARNING: ") for line in responses_lines(c)]
    warnings_ += too_small(units_of(c), alpha)
    out += [f'<div class="warn">{esc(w)}</div>' for w in warnings_]
    return "".join(out)


def metrics_html(c: Comparison) -> str:
    """The headline metrics side by side: A, B, B - A, each with its 95% interval (tasks resampled)."""
    rows = [
        '<table class="metrics-delta"><tr><th>metric</th><th>A</th><th>95% CI A</th><th>B</th>'
        "<th>95% CI B</th><th>B − A</th><th>95% CI of B − A</th></tr>"
    ]
    for name, left, right in c.metrics:
        delta = None if left is None or right is None else right - left
        boot = c.bootstrap.get(name) or {}
        rows.append(
            f"<tr><td>{esc(name)}</td><td class=num>{pct(left)}</td>"
            f"<td class=num>{interval(boot.get('a_ci'))}</td><td class=num>{pct(right)}</td>"
            f"<td class=num>{interval(boot.get('b_ci'))}</td>"
            f'<td class="num delta{delta_class(delta)}">{pp(delta)}</td>'
            f"<td class=num>{interval(boot.get('delta_ci'), points=True)}</td></tr>"
        )
    rows.append(
        '</table><p class="n">Intervals: 95% paired percentile bootstrap resampling whole tasks '
        "(the items of one task are not independent).</p>"
    )
    return "".join(rows) if c.metrics else "<p>no metric to compare</p>"


def tests_html(c: Comparison, alpha: float) -> str:
    """The exact McNemar test over items and over tasks, with the smallest drop each could detect."""
    rows = [
        '<table class="mcnemar"><tr><th>units</th><th>shared</th><th>pass → fail</th><th>fail → pass</th>'
        f"<th>McNemar p</th><th>at {alpha:g}</th><th>smallest detectable drop (80% power)</th></tr>"
    ]
    for unit in ("item", "task"):
        m = c.mcnemar.get(unit) or {}
        n = int(m.get("n", 0))
        flips = int(m.get("worse", 0)) + int(m.get("better", 0))
        found = detectable_drop(n, flips, alpha, unit) if n else None
        power = "n/a" if found is None else found.shown
        p = float(m.get("p", 1.0))
        verdict = '<span class="bad">significant</span>' if p < alpha else "within noise"
        rows.append(
            f"<tr><td>{unit}s</td><td class=num>{n}</td><td class=num>{m.get('worse', 0)}</td>"
            f"<td class=num>{m.get('better', 0)}</td><td class=num>{p:.4g}</td><td>{verdict}</td>"
            f"<td class=num>{esc(power)}</td></tr>"
        )
    rows.append("</table>")
    return "".join(rows)


def gates_html(c: Comparison, gates: GateConfig | None, results: Iterable[GateResult]) -> str:
    """The run's gates: every result, and for each --bench-max-drop gate its numbers."""
    results = list(results)
    if not results:
        return ""
    by_gate = {r.gate: r for r in results}
    out = ['<h3>Gates</h3><table class="gates"><tr><th>gate</th><th>result</th><th>detail</th></tr>']
    out += [
        f"<tr><td><code>{esc(r.gate)}</code></td>"
        f"<td>{'<span class=ok>pass</span>' if r.ok else '<span class=bad>FAIL</span>'}"
        f"</td><td>{esc(r.detail)}</td></tr>"
        for r in results
    ]
    out.append("</table>")
    drops = list(gates.max_drop) if gates is not None else []
    drop_alpha = gates.alpha if gates is not None else 0.05  # (drops come only with gates)
    if drops:
        out.append(
            '<table class="drop-gates"><tr><th>max-drop gate</th><th>A</th><th>B</th><th>drop</th>'
            "<th>limit</th><th>McNemar p</th><th>smallest detectable drop</th><th>result</th></tr>"
        )
        for t in drops:
            before, after = c.a.get("metrics", {}).get(t.metric), c.b.get("metrics", {}).get(t.metric)
            numeric = all(isinstance(v, (int, float)) for v in (before, after))
            unit = c.unit_of(t.name)
            counts = c.mcnemar.get(unit) or {}
            found = (
                detectable_drop(
                    int(counts.get("n", 0)),
                    int(counts.get("worse", 0)) + int(counts.get("better", 0)),
                    drop_alpha,
                    unit,
                )
                if counts.get("n")
                else None
            )
            power = (
                "n/a"
                if found is None
                else (
                    f"{found.drop * 100:.1f} pp over {found.units} {unit}s"
                    if found.drop is not None
                    else f"none over {found.units} {unit}s"
                )
            )
            result = by_gate.get(f"--bench-max-drop {t.name}={t.text}")
            verdict = (
                "" if result is None else ("<span class=ok>pass</span>" if result.ok else "<span class=bad>FAIL</span>")
            )
            out.append(
                f"<tr><td><code>{esc(t.name)}={esc(t.text)}</code></td><td class=num>{pct(before if numeric else None)}"
                f"</td><td class=num>{pct(after if numeric else None)}</td>"
                f"<td class=num>{f'{(before - after) * 100:.1f} pp' if numeric else 'n/a'}</td>"
                f"<td class=num>{t.value * 100:.1f} pp</td>"
                f"<td class=num>{drop_p_value(c, t.name):.4g} ({unit}s)</td><td class=num>{esc(power)}</td>"
                f"<td>{verdict}</td></tr>"
            )
        out.append("</table>")
    return "".join(out)


def ordered_flips(c: Comparison) -> list[dict[str, Any]]:
    """Pass -> fail first (what a regression hunt reads), each group in the comparison's natural order."""
    return sorted(c.flipped, key=lambda f: f["direction"] != PASS_TO_FAIL)


def transcript(side: RunSide, key: str) -> str:
    record = side.records.get(key)
    if record is None:
        return f'<p class="n">{side.name}: no record of this item on disk</p>'
    head = f'<div class="n">{side.name} ({esc(side.label)})</div>'
    return head + item_or_fallback(record, side.run_dir, open_=True, anchor=False)  # an odd record costs only itself


def flipped_html(c: Comparison, a: RunSide, b: RunSide, page_dir: Path) -> str:
    flips = ordered_flips(c)
    worse = sum(1 for f in flips if f["direction"] == PASS_TO_FAIL)
    out = [f"<h3>Flipped items ({len(flips)}: {worse} pass → fail, {len(flips) - worse} fail → pass)</h3>"]
    if not flips:
        return out[0] + "<p>None.</p>" + only_html(c)
    out.append(
        '<table class="flipped"><tr><th>item</th><th>task</th><th>change</th><th>A</th><th>B</th>'
        "<th>transcripts</th></tr>"
    )
    for number, f in enumerate(flips):
        key = str(f["id"])
        embedded = ""
        if number < EMBEDDED and (key in a.records or key in b.records):
            embedded = (
                f'<details class="pair"><summary>side by side</summary><div class="side-by-side">'
                f"<div>{transcript(a, key)}</div><div>{transcript(b, key)}</div></div></details>"
            )
        cls = "pf" if f["direction"] == PASS_TO_FAIL else "fp"
        out.append(
            f'<tr class="flip {cls}" data-id="{esc(key)}"><td><b>{esc(key)}</b></td><td>{esc(f["task"])}</td>'
            f"<td>{esc(f['direction'])}</td><td>{status_badge(f['a'])}</td><td>{status_badge(f['b'])}</td>"
            f"<td>{link(a, key, page_dir)} · {link(b, key, page_dir)}{embedded}</td></tr>"
        )
    out.append("</table>")
    return "".join(out) + only_html(c)


def only_html(c: Comparison) -> str:
    if not (c.only_a or c.only_b):
        return ""
    return (
        f"<p>Items only in A: {esc(', '.join(c.only_a) or 'none')}; only in B: {esc(', '.join(c.only_b) or 'none')}</p>"
    )


def comparison_section(
    c: Comparison,
    a: RunSide,
    b: RunSide,
    page_dir: Path,
    alpha: float = 0.05,
    gates: GateConfig | None = None,
    gate_results: Iterable[GateResult] = (),
    title: str = "Comparison",
    section_id: str = "comparison",
) -> str:
    """The comparison as one ``<section>``: headers, metrics with deltas, tests, gates, flipped items
    (``section_id``: its id, one per section when a page holds several)."""
    return "".join(
        [
            f'<style>{COMPARE_CSS}</style><section class="comparison" id="{esc(section_id)}"><h2>{esc(title)}</h2>',
            header_html(a, b, c, alpha, page_dir),
            "<h3>Metrics</h3>",
            metrics_html(c),
            "<h3>Paired tests</h3>",
            tests_html(c, alpha),
            gates_html(c, gates, gate_results),
            flipped_html(c, a, b, page_dir),
            "</section>",
        ]
    )


def comparison_for_run(
    c: Comparison,
    run_dir: Path | str,
    records: Iterable[rec.RecordLike],
    *,
    alpha: float = 0.05,
    gates: GateConfig | None = None,
    gate_results: Iterable[GateResult] = (),
) -> str:
    """The section of a run's own report.html: A is its baseline (read from disk), B this run. A baseline
    folder that cannot be shown costs the section, never the page (the comparison is in summary.md too)."""
    run_dir = Path(run_dir)
    try:
        a = side_of("A", c.a)
        b = side_of("B", c.b, run_dir, records, in_page=True)
        return comparison_section(c, a, b, run_dir, alpha, gates, gate_results, title="Comparison with the baseline")
    except Exception as exc:  # noqa: BLE001  (anything in a baseline folder written by another run)
        return (
            f"<p><b>Note:</b> the comparison with the baseline is not shown here ({esc(type(exc).__name__)}: "
            f"{esc(exc)}); summary.md has it</p>"
        )


def render_compare_page(c: Comparison, out: Path | str, alpha: float = 0.05) -> str:
    """The page ``compare A B --html OUT`` writes: the same section, both runs read from disk."""
    out = Path(out)
    a, b = side_of("A", c.a), side_of("B", c.b)
    title = f"{c.benchmark} · A {a.label} vs B {b.label}"
    return page(
        title,
        f"{len(c.flipped)} flipped items · {c.shared} shared items",
        comparison_section(c, a, b, out.parent, alpha),
        script=ANCHOR_JS,
    )


def write_compare_page(c: Comparison, out: Path | str, alpha: float = 0.05) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, render_compare_page(c, out, alpha))
    return out
