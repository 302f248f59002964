"""report.html: one self-contained page per run (no server, no network, opens from disk).

Headline metrics with 95% Wilson intervals, the status counts, a per-task table with filters (status,
split, category when the records have one), and for every item its message, code, stdout/stderr,
trajectory (model turns and tool calls, read from the run's ``trajectories/`` files) and, when the
record has them, its questions (reported value, accepted value or interval, verdict); then the
metrics (per category too, when the summary has them), the run's settings and data hashes. Plain
HTML with inline CSS and a few lines of inline JavaScript that only filter rows: every value from a
record is escaped (model output is hostile), none is put in a script.
"""
from __future__ import annotations

import html
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..core import records as rec
from ..core.io import natural_key, write_atomic
from .cost import html_section as html_cost_section
from .declared import declared_in

REPORT_HTML = "report.html"
TEXT_LIMIT = 20_000  # characters of one code, output or message shown (the files keep everything)
Z95 = 1.959963984540054


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """Wilson score interval of a rate k/n (95% by default); None when n is 0."""
    if n <= 0:
        return None
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def clip(text: Any, limit: int = TEXT_LIMIT) -> str:
    text = "" if text is None else text if isinstance(text, str) else json.dumps(text, indent=1, default=str)
    return text if len(text) <= limit else text[:limit] + f"\n… ({len(text) - limit} more characters in the run's files)"


def pct(value: float) -> str:
    return f"{value:.1%}"


# ---- headline metrics ------------------------------------------------------------------------
def scored_items(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in records if r.get("scored", True) and r.get("status") != "skipped"]


def rate_counts(records: list[Mapping[str, Any]], unit: str) -> tuple[int, int]:
    """(passed, total) of the scored items, or of the tasks (a task passes when all its items pass)."""
    items = scored_items(records)
    if unit == "task":
        tasks: dict[str, bool] = {}
        for r in items:
            tasks[str(r.get("task"))] = tasks.get(str(r.get("task")), True) and r.get("status") == rec.PASS
        return sum(tasks.values()), len(tasks)
    return sum(1 for r in items if r.get("status") == rec.PASS), len(items)


def headlines(summary: Mapping[str, Any], records: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The benchmark's headline metrics: name, value, k/n and a 95% Wilson interval."""
    declared = declared_in(summary)
    metrics = summary.get("metrics", {})
    out = []
    for gate, key in declared.picture_metrics().items():
        value = metrics.get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        k, n = rate_counts(records, declared.unit_of(gate))
        if n and abs(k / n - value) > 1e-9:  # a rate over other units: the interval uses its value on n units
            k = round(value * n)
        out.append({"name": gate, "key": key, "value": float(value), "k": k, "n": n, "interval": wilson(k, n)})
    return out


# ---- pieces ------------------------------------------------------------------------------------
CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1c1e21;background:#f6f7f9}
header{background:#1f2937;color:#fff;padding:14px 24px}header h1{margin:0;font-size:20px}
header .sub{color:#cbd5e1;font-size:13px}main{padding:16px 24px;max-width:1400px}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:8px 0 16px}
.card{background:#fff;border:1px solid #d0d7de;border-radius:8px;padding:10px 16px;min-width:180px}
.card .v{font-size:26px;font-weight:600}.n{color:#57606a;font-size:12px}
.nocat .cat{display:none}
table{border-collapse:collapse;background:#fff;width:100%}th,td{border:1px solid #d0d7de;padding:4px 8px;
text-align:left;vertical-align:top}th{background:#eef1f4}
pre{background:#0d1117;color:#e6edf3;padding:8px;border-radius:6px;overflow:auto;max-height:420px;
white-space:pre-wrap;word-break:break-word;font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace}
.st{display:inline-block;padding:0 6px;border-radius:4px;color:#fff;font-size:12px;font-weight:600}
.st-pass{background:#2e7d32}.st-fail{background:#c62828}.st-timeout{background:#ef6c00}
.st-parse_error{background:#6a1b9a}.st-eval_error{background:#757575}.st-model_error{background:#212121}
.st-env_error{background:#455a64}.st-error{background:#000}.st-skipped{background:#9e9e9e}.st-budget{background:#8d6e00}
.st-not_run{background:#fff;color:#c62828;border:1px dashed #c62828}
.incomplete{background:#fdecea;border:1px solid #c62828;border-radius:8px;padding:8px 14px}
.filters{margin:8px 0;display:flex;gap:14px;align-items:center;flex-wrap:wrap}
details.item{margin:6px 0 10px;border-left:3px solid #d0d7de;padding-left:10px}
details.item>summary{cursor:pointer}.msg{color:#8b1a1a}.turn{margin:4px 0}.role{font-weight:600}
.ok{color:#2e7d32;font-weight:600}.bad{color:#c62828;font-weight:600}h2{margin-top:26px}
"""

JS = """
(function(){
  var sel=function(id){return document.getElementById(id);};
  function apply(){
    var st=sel('f-status').value, sp=sel('f-split').value, ca=sel('f-category').value, q=sel('f-text').value.toLowerCase();
    var rows=document.querySelectorAll('tr.task'), shown=0;
    for(var i=0;i<rows.length;i++){
      var r=rows[i], d=r.dataset;
      var ok=(!st||(' '+d.statuses+' ').indexOf(' '+st+' ')>=0)&&(!sp||d.split===sp)&&(!ca||d.category===ca)
             &&(!q||d.id.toLowerCase().indexOf(q)>=0);
      r.style.display=ok?'':'none'; if(ok){shown++;}
    }
    sel('f-count').textContent=shown+' of '+rows.length+' shown';
  }
  ['f-status','f-split','f-category','f-text'].forEach(function(id){
    sel(id).addEventListener('input',apply); sel(id).addEventListener('change',apply);});
  sel('f-open').addEventListener('click',function(){
    var all=document.querySelectorAll('tr.task:not([style*="none"]) details');
    for(var i=0;i<all.length;i++){all[i].open=true;}});
  sel('f-close').addEventListener('click',function(){
    var all=document.querySelectorAll('details');for(var i=0;i<all.length;i++){all[i].open=false;}});
  apply();
})();
"""


def status_badge(status: Any) -> str:
    return f'<span class="st st-{esc(status)}">{esc(status)}</span>'


def pre(text: Any, cls: str = "") -> str:
    attribute = f' class="{esc(cls)}"' if cls else ""
    return f"<pre{attribute}>{esc(clip(text))}</pre>"


def read_trajectory(run_dir: Path | None, ref: Any) -> dict[str, Any] | None:
    """The trajectory file a record names (relative to the run folder); None when it is not there."""
    if run_dir is None or not isinstance(ref, str) or not ref:
        return None
    path = (Path(run_dir) / ref)
    try:
        if Path(run_dir).resolve() not in path.resolve().parents:  # a record names only files of its run
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def content_text(content: Any) -> str:
    if isinstance(content, list):  # parts (text, images described by size and hash)
        return "\n".join(str(p.get("text", json.dumps(p, default=str))) if isinstance(p, dict) else str(p)
                         for p in content)
    return "" if content is None else str(content)


def trajectory_html(data: Mapping[str, Any]) -> str:
    messages = data.get("messages") or []
    out = [f"<details><summary>trajectory: {len(messages)} messages</summary>"]
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = message.get("role", "?")
        out.append(f'<div class="turn"><span class="role">{esc(role)}</span>'
                   f'{" (" + esc(message.get("name")) + ")" if message.get("name") else ""}')
        text = content_text(message.get("content"))
        if text:
            out.append(pre(text))
        for call in message.get("tool_calls") or []:
            fn = call.get("function", call) if isinstance(call, dict) else {}
            out.append(f"<div>tool call <b>{esc(fn.get('name'))}</b></div>{pre(fn.get('arguments'))}")
        out.append("</div>")
    out.append("</details>")
    return "".join(out)


def questions_html(questions: list[Any]) -> str:
    rows = ["<table><tr><th>question</th><th>reported</th><th>accepted</th><th>verdict</th></tr>"]
    for q in questions:
        if not isinstance(q, dict):
            continue
        expected = q.get("expected")
        if q.get("kind") == "numeric" and isinstance(expected, list) and len(expected) == 2:
            accepted = f"[{expected[0]:.6g}, {expected[1]:.6g}]" if all(
                isinstance(x, (int, float)) for x in expected) else str(expected)
        else:
            accepted = json.dumps(expected, default=str)
        reported = json.dumps(q.get("submitted"), default=str) if q.get("answered", True) else "(not answered)"
        verdict = '<span class="ok">correct</span>' if q.get("correct") else '<span class="bad">wrong</span>'
        note = f" — {esc(q['note'])}" if q.get("note") else ""
        rows.append(f"<tr><td>{esc(q.get('question'))}</td><td>{esc(reported)}</td><td>{esc(accepted)}</td>"
                    f"<td>{verdict}{note}</td></tr>")
    rows.append("</table>")
    return "".join(rows)


SHOWN_ELSEWHERE = {"code", "stdout", "stderr", "message", "trajectory", "questions", "status", "id", "task",
                   "benchmark", "traceback"}


def item_html(record: Mapping[str, Any], run_dir: Path | None, open_: bool = False) -> str:
    rid = record.get("id")
    out = [f'<details class="item"{" open" if open_ else ""}><summary>{status_badge(record.get("status"))} '
           f'<b>{esc(rid)}</b> {esc(clip(record.get("message"), 200))}</summary>']
    facts = ", ".join(f"{esc(k)}={esc(v)}" for k, v in record.items()
                      if k not in SHOWN_ELSEWHERE and not isinstance(v, (dict, list)) and v not in (None, ""))
    if facts:
        out.append(f"<div class=\"n\">{facts}</div>")
    if record.get("message"):
        out.append(f'<div class="msg">{esc(clip(record.get("message")))}</div>')
    if record.get("code"):
        out.append(f"<div>code</div>{pre(record['code'], 'code')}")
    for stream in ("stdout", "stderr", "traceback"):
        if record.get(stream):
            out.append(f"<div>{stream}</div>{pre(record[stream])}")
    if isinstance(record.get("questions"), list) and record["questions"]:
        out.append(questions_html(record["questions"]))
    trajectory = read_trajectory(run_dir, record.get("trajectory"))
    if trajectory is not None:
        out.append(trajectory_html(trajectory))
    out.append("</details>")
    return "".join(out)


def task_rows(records: list[Mapping[str, Any]], run_dir: Path | None) -> tuple[list[str], dict[str, set[str]]]:
    by_task: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for record in records:
        by_task[str(record.get("task", record.get("id")))].append(record)
    values: dict[str, set[str]] = {"status": set(), "split": set(), "category": set()}
    rows = []
    for number, task in enumerate(sorted(by_task, key=natural_key)):
        items = sorted(by_task[task], key=rec.sort_key)
        statuses = sorted({str(r.get("status")) for r in items})
        split = str(items[0].get("split", ""))
        # a prefilled (skipped) step's record carries no category: any item of the task names it
        category = next((str(r["category"]) for r in items if r.get("category")), "")
        values["status"].update(statuses)
        values["split"].add(split)
        if category:
            values["category"].add(category)
        scored = scored_items(items)
        passed = sum(1 for r in scored if r.get("status") == rec.PASS)
        body = "".join(item_html(r, run_dir, open_=number == 0 and i == 0) for i, r in enumerate(items))
        rows.append(f'<tr class="task" data-id="{esc(task)}" data-statuses="{esc(" ".join(statuses))}" '
                    f'data-split="{esc(split)}" data-category="{esc(category)}"><td><b>{esc(task)}</b></td>'
                    f"<td>{esc(split)}</td><td class=cat>{esc(category)}</td><td>{passed}/{len(scored)}</td>"
                    f"<td>{' '.join(status_badge(s) for s in statuses)}</td><td>{body}</td></tr>")
    return rows, values


def incomplete_html(incomplete: Any) -> str:
    """The banner of an incomplete run: how many selected items did not run, which, and how to resume."""
    if not isinstance(incomplete, Mapping):
        return ""
    items = ", ".join(str(i) for i in incomplete.get("items") or [])
    resume = (f"<div>resume with:</div>{pre(incomplete['resume'])}") if incomplete.get("resume") else ""
    return (f'<div class="incomplete"><p><b>incomplete: {esc(incomplete.get("not_run"))} of '
            f'{esc(incomplete.get("selected"))} items not run</b>: {esc(items)}</p><p>Every metric is over the '
            f"whole selection: an item not run counts as not passed.</p>{resume}</div>")


def category_cell(metrics: Mapping[str, Any], passed: str, total: str, rate: str) -> str:
    """``1/2 (50.0%)``: one headline metric of a category (summary.json's ``categories``)."""
    return f"{metrics.get(passed, 0)}/{metrics.get(total, 0)} ({pct(float(metrics.get(rate) or 0.0))})"


def options(values: Iterable[str]) -> str:
    return "".join(f'<option value="{esc(v)}">{esc(v)}</option>' for v in sorted(values, key=natural_key))


def render_html(summary: Mapping[str, Any], records: Iterable[Mapping[str, Any]], run_dir: Path | str | None = None,
                notes: Iterable[str] = ()) -> str:
    """The page of a run from its summary (summary.json's content) and its records."""
    records = sorted((dict(r) for r in records), key=rec.sort_key)
    run_dir = Path(run_dir) if run_dir is not None else None
    settings = summary.get("settings", {})
    title = f"{settings.get('benchmark')} · {settings.get('model')} · {settings.get('split')} · run {settings.get('run_id')}"
    cards = []
    for h in headlines(summary, records):
        ci = h["interval"]
        ci_text = f"95% CI {pct(ci[0])} – {pct(ci[1])}" if ci else "no interval (nothing scored)"
        cards.append(f'<div class="card"><div>{esc(h["name"])}</div><div class="v">{esc(pct(h["value"]))}</div>'
                     f'<div class="n">{h["k"]}/{h["n"]} · {esc(ci_text)} (Wilson)</div></div>')
    counts = summary.get("counts") or rec.count_statuses(records)
    usage = summary.get("usage") or {}
    hits = usage.get("cache_hits", 0) or 0
    usage_text = (f"{max(0, (usage.get('model_calls', 0) or 0) - hits):g} model calls, {usage.get('tokens', 0) or 0:g} "
                  f"tokens, {hits:g} cache hits, {usage.get('tool_calls', 0) or 0:g} tool calls") \
        if usage and (any(usage.values()) or settings.get("model") != "oracle") else ""  # the oracle calls no model
    rows, values = task_rows(records, run_dir)
    metric_rows = "".join(f"<tr><td>{esc(k)}</td><td>{esc(f'{v:.4g}' if isinstance(v, float) else v)}</td></tr>"
                          for k, v in (summary.get("metrics") or {}).items())
    setting_rows = "".join(f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>" for k, v in settings.items()
                           if k not in ("data_hashes", "notes"))
    hashes = settings.get("data_hashes") or {}
    hash_rows = "".join(f"<tr><td>{esc(k)}</td><td><code>{esc(v)}</code></td></tr>" for k, v in hashes.items())
    notes = [*settings.get("notes", []), *notes, *summary.get("notes", [])]
    run = summary.get("run") if isinstance(summary.get("run"), dict) else {}
    run_rows = "".join(f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>" for k, v in run.items() if v not in (None, ""))
    gates = summary.get("gates") or []
    gate_html = "".join(f"<li>{'<span class=ok>ok</span>' if g.get('ok') else '<span class=bad>FAILED</span>'} "
                        f"{esc(g.get('gate'))}: {esc(g.get('detail'))}</li>" for g in gates)
    category_rows = "".join(
        f"<tr><td>{esc(name)}</td><td>{esc(category_cell(m, 'problems_resolved', 'problems', 'main'))}</td>"
        f"<td>{esc(category_cell(m, 'steps_passed', 'steps', 'subproblem'))}</td></tr>"
        for name, m in (summary.get("categories") or {}).items() if isinstance(m, Mapping))
    category_filter = (f'<label>category <select id="f-category"><option value="">all</option>'
                       f'{options(values["category"])}</select></label>') if values["category"] else \
        '<select id="f-category" hidden><option value=""></option></select>'
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        # nothing is fetched: no network, and no script but the inline one below
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
        "script-src 'unsafe-inline'; img-src data:\">",
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>",
        f"<header><h1>{esc(title)}</h1><div class=\"sub\">{len(records)} items · "
        f"{esc(', '.join(f'{n} {s}' for s, n in counts.items()))}"
        f"{' · ' + esc(usage_text) if usage_text else ''}</div></header><main>",
        incomplete_html(summary.get("incomplete")),
        *[f"<p><b>Note:</b> {esc(n)}</p>" for n in notes],
        f'<h2>Headline metrics</h2><div class="cards">{"".join(cards) or "<p>no headline metric</p>"}</div>',
        f"<ul>{gate_html}</ul>" if gate_html else "",
        '<h2>Tasks</h2><div class="filters">'
        f'<label>status <select id="f-status"><option value="">all</option>{options(values["status"])}</select></label>'
        f'<label>split <select id="f-split"><option value="">all</option>{options(values["split"])}</select></label>'
        f'{category_filter}<label>id <input id="f-text" size="10"></label>'
        '<button id="f-open" type="button">expand shown</button><button id="f-close" type="button">collapse all'
        '</button><span id="f-count"></span></div>',
        f"<table{'' if values['category'] else ' class=nocat'}><tr><th>task</th><th>split</th><th class=cat>category</th><th>passed</th><th>statuses</th><th>items</th></tr>",
        *rows, "</table>",
        f"<h2>Metrics</h2><table>{metric_rows}</table>",
        html_cost_section(summary.get("cost") or {}, summary.get("items") or []),  # report/cost.py
        ('<h2>Categories</h2><table class="categories"><tr><th>category</th><th>main problems resolved</th>'
         f"<th>subproblems passed</th></tr>{category_rows}</table>") if category_rows else "",
        f"<h2>Settings</h2><table>{setting_rows}</table>",
        f"<h2>Run</h2><table>{run_rows}</table>" if run_rows else "",
        f"<h2>Data hashes (sha256)</h2><table>{hash_rows}</table>" if hash_rows else "",
        f"</main><script>{JS}</script></body></html>",
    ]
    return "\n".join(p for p in parts if p)


def write_html(run_dir: Path | str, summary: Mapping[str, Any], records: Iterable[Mapping[str, Any]],
               notes: Iterable[str] = ()) -> Path:
    """Write report.html into the run folder; returns its path."""
    path = Path(run_dir) / REPORT_HTML
    write_atomic(path, render_html(summary, records, run_dir, notes))
    return path
