"""report.html: one self-contained page per run (no server, no network, opens from disk).

Headline metrics with 95% Wilson intervals, the status counts, a per-task table with filters (status,
split, category when the records have one), and for every item its message, code, stdout/stderr,
trajectory (model turns and tool calls, read from the run's ``trajectories/`` files) and the details its
benchmark adds (``Benchmark.item_details``); then the metrics (per category too, in the columns the benchmark
declares), the run's settings and data hashes. This module names no benchmark: what is a benchmark's own comes
from its declarations (``benchmarks.base.Benchmark``: ``answer_counts``, ``category_columns``,
``page_sections``, ...). Plain
HTML with inline CSS and a few lines of inline JavaScript that only filter rows: every value from a
record is escaped (model output is hostile), none is put in a script.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeGuard

from ..benchmarks.base import Benchmark
from ..benchmarks.registry import get_benchmark
from ..core import records as rec
from ..core.errors import ConfigError
from ..core.io import natural_key, write_atomic
from . import caveats
from .attempts import counts_line
from .cost import html_section as html_cost_section
from .declared import declared_in
from .highlight import clip, code_html, esc
from .subject import run_subject
from .transcript import number, transcript_html

REPORT_HTML = "report.html"
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


def pct(value: float) -> str:
    return f"{value:.1%}"


# ---- headline metrics ------------------------------------------------------------------------
def scored_items(records: Iterable[rec.RecordLike]) -> list[Mapping[str, Any]]:
    return [r for r in records if r.get("scored", True) and r.get("status") != "skipped"]


def rate_counts(records: list[rec.RecordLike], unit: str) -> tuple[int, int]:
    """(passed, total) of the scored items, or of the tasks (a task passes when all its items pass)."""
    items = scored_items(records)
    if unit == "task":
        tasks: dict[str, bool] = {}
        for r in items:
            tasks[str(r.get("task"))] = tasks.get(str(r.get("task")), True) and r.get("status") == rec.PASS
        return sum(tasks.values()), len(tasks)
    return sum(1 for r in items if r.get("status") == rec.PASS), len(items)


def headlines(summary: Mapping[str, Any], records: list[rec.RecordLike]) -> list[dict[str, Any]]:
    """The benchmark's headline metrics: name, value, k/n and a 95% Wilson interval."""
    declared = declared_in(summary)
    metrics = summary.get("metrics", {})
    out = []
    for gate, key in declared.picture_metrics().items():
        value = metrics.get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        unit = declared.unit_of(gate)
        k, n = rate_counts(records, unit)
        exact = not n or abs(k / n - value) <= 1e-9
        if not exact:  # a rate over other units: the interval uses its value on n units
            k = round(value * n)
        out.append(
            {
                "name": gate,
                "key": key,
                "value": float(value),
                "k": k,
                "n": n,
                "interval": wilson(k, n),
                "by_difficulty": by_difficulty(records, unit) if exact else {},
            }
        )
    return out


def by_difficulty(records: list[rec.RecordLike], unit: str) -> dict[str, tuple[int, int]]:
    """(passed, total) per ``difficulty`` of the records, when they carry one (a benchmark run at a level)."""
    levels = sorted({str(r["difficulty"]) for r in records if r.get("difficulty") not in (None, "")}, key=natural_key)
    return {level: rate_counts([r for r in records if str(r.get("difficulty")) == level], unit) for level in levels}


def benchmark_of(name: Any) -> Benchmark:
    """The benchmark whose page parts report.html shows; a neutral one when it is not installed (an old run read
    elsewhere): the common parts are shown."""
    try:
        return get_benchmark(str(name))
    except ConfigError:
        return Benchmark()


def answer_counts(records: list[rec.RecordLike], declared: Mapping[str, tuple[str, str]]) -> dict[str, tuple[int, int]]:
    """(correct, total) per label the benchmark declares (``Benchmark.answer_counts``: label -> the record fields
    counting correct answers and answers), over the scored records that count them (an item not run counts its
    answers as not given)."""
    out = {}
    for label, (correct, total) in declared.items():
        counted = [r for r in scored_items(records) if is_number(r.get(total))]
        if counted:
            out[label] = (
                int(sum(number(r.get(correct)) for r in counted)),
                int(sum(number(r[total]) for r in counted)),
            )
    return out


# ---- pieces ------------------------------------------------------------------------------------
CSS = r"""
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1c1e21;background:#f6f7f9}
header{background:#1f2937;color:#fff;padding:14px 24px}header h1{margin:0;font-size:20px}
header .sub{color:#cbd5e1;font-size:13px}main{padding:16px 24px;max-width:2000px}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:8px 0 16px}
.card{background:#fff;border:1px solid #d0d7de;border-radius:8px;padding:10px 16px;min-width:180px}
.card .v{font-size:26px;font-weight:600}.n{color:#57606a;font-size:12px}
.nocat .cat{display:none}.nocost .cost{display:none}.nosplit .split{display:none}.notok .tok{display:none}
table{border-collapse:collapse;background:#fff;width:100%}th,td{border:1px solid #d0d7de;padding:4px 8px;
text-align:left;vertical-align:top}th{background:#eef1f4}td.num{text-align:right;white-space:nowrap}
#tasks>tbody>tr>td:last-child{max-width:0}#tasks>tbody>tr>td:not(:last-child),#tasks>thead th:not(:last-child)
{width:1%;white-space:nowrap}details.notes{margin:8px 0;color:#57606a}
details.notes>summary{cursor:pointer}#tasks .prose,#tasks .msg{overflow-wrap:anywhere}
th.sort{cursor:pointer;user-select:none;white-space:nowrap}th.sort::after{content:" \2195";color:#8c959f}
th.sort[data-dir=asc]::after{content:" \25B2";color:#1c1e21}
th.sort[data-dir=desc]::after{content:" \25BC";color:#1c1e21}
pre{background:#0d1117;color:#e6edf3;padding:8px;border-radius:6px;overflow:auto;max-height:420px;
white-space:pre-wrap;word-break:break-word;font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace;margin:4px 0}
pre.code{white-space:pre;word-break:normal;counter-reset:ln;max-height:600px}
pre.code .l::before{counter-increment:ln;content:counter(ln);display:inline-block;width:3.2em;padding-right:.8em;
margin-right:.6em;text-align:right;color:#6e7681;border-right:1px solid #30363d;user-select:none}
pre .k{color:#ff7b72}pre .b{color:#79c0ff}pre .s{color:#a5d6ff}pre .c{color:#8b949e;font-style:italic}
pre .m{color:#79c0ff}pre .f{color:#d2a8ff}pre .v{color:#ffa657}pre .a{color:#7ee787}pre .o{color:#ff7b72}
pre.out{background:#161b22;color:#c9d1d9;max-height:320px}
.st{display:inline-block;padding:0 6px;border-radius:4px;color:#fff;font-size:12px;font-weight:600}
.st-pass{background:#2e7d32}.st-fail{background:#c62828}.st-timeout{background:#ef6c00}
.st-parse_error{background:#6a1b9a}.st-eval_error{background:#757575}.st-model_error{background:#212121}
.st-env_error{background:#455a64}.st-error{background:#000}.st-blocked{background:#5d4037}.st-skipped{background:#9e9e9e}.st-budget{background:#8d6e00}
.st-not_run{background:#fff;color:#c62828;border:1px dashed #c62828}
.incomplete{background:#fdecea;border:1px solid #c62828;border-radius:8px;padding:8px 14px;margin:8px 0}
.replayed{background:#fff8e1;border:1px solid #f9a825;border-radius:8px;padding:8px 14px;margin:8px 0}
.filters{margin:8px 0;display:flex;gap:14px;align-items:center;flex-wrap:wrap}
details.item{margin:6px 0 10px;border-left:3px solid #d0d7de;padding-left:10px}
details.item>summary{cursor:pointer}.msg{color:#8b1a1a;white-space:pre-wrap}.role{font-weight:600}
.turn{margin:8px 0;padding:6px 10px;border:1px solid #d0d7de;border-radius:6px;background:#fff}
.turn.model{border-left:4px solid #0969da}.th{font-size:12px;color:#57606a;margin:4px 0 2px}
.call{margin:6px 0 2px 10px;padding-left:8px;border-left:3px solid #8250df}
.usage{margin-left:8px;color:#0969da}.prose{white-space:pre-wrap;word-break:break-word;margin:4px 0}
.arg{font-size:12px;color:#57606a;font-weight:600}.args{margin:2px 0}
details.prompt .prose{background:#f6f8fa;border:1px solid #d0d7de;border-radius:6px;padding:6px 8px;max-height:420px;
overflow:auto}details.prompt,details.meta{margin:4px 0}
details.prompt>summary,details.meta>summary{cursor:pointer;color:#57606a}
table.meta{width:auto;max-width:100%;font-size:12px}table.meta td:first-child{color:#57606a;white-space:nowrap}
table.meta td{word-break:break-word}ul.wrong{margin:4px 0;padding-left:20px}ul.wrong li{margin:2px 0}
.ok{color:#2e7d32;font-weight:600}.bad{color:#c62828;font-weight:600}h2{margin-top:26px}
"""

JS = """
(function(){
  var sel=function(id){return document.getElementById(id);};
  var rows=Array.prototype.slice.call(document.querySelectorAll('tr.task'));
  function text(r){if(r._text===undefined){r._text=(r.dataset.id+' '+r.textContent).toLowerCase();}return r._text;}
  function apply(){
    var st=sel('f-status').value, sp=sel('f-split').value, ca=sel('f-category').value,
        q=sel('f-text').value.toLowerCase().trim(), shown=0;
    rows.forEach(function(r){
      var d=r.dataset;
      var ok=(!st||(' '+d.statuses+' ').indexOf(' '+st+' ')>=0)&&(!sp||d.split===sp)&&(!ca||d.category===ca)
             &&(!q||text(r).indexOf(q)>=0);
      r.style.display=ok?'':'none'; if(ok){shown++;}
    });
    sel('f-count').textContent=shown+' of '+rows.length+' shown';
  }
  function key(cell,kind){var v=cell?cell.getAttribute('data-sort'):null;
    if(kind==='num'){var x=parseFloat(v);return isNaN(x)?null:x;} return v===null?(cell?cell.textContent:''):v;}
  function sortBy(th){
    var heads=th.parentNode.children, col=Array.prototype.indexOf.call(heads,th);
    var dir=th.dataset.dir==='asc'?'desc':'asc', kind=th.dataset.kind, body=th.closest('table').tBodies[0];
    for(var i=0;i<heads.length;i++){heads[i].removeAttribute('data-dir');}
    th.dataset.dir=dir;
    var sorted=Array.prototype.slice.call(body.rows).sort(function(a,b){
      var x=key(a.cells[col],kind), y=key(b.cells[col],kind);
      if(x===null||y===null){return x===y?0:(x===null?1:-1);}  // unknown values last either way
      var c=kind==='num'?x-y:String(x).localeCompare(String(y),undefined,{numeric:true});
      return dir==='asc'?c:-c;});
    sorted.forEach(function(r){body.appendChild(r);});
  }
  document.querySelectorAll('th.sort').forEach(function(th){
    th.addEventListener('click',function(){sortBy(th);});
    th.addEventListener('keydown',function(e){if(e.key==='Enter'){sortBy(th);}});});
  ['f-status','f-split','f-category','f-text'].forEach(function(id){
    sel(id).addEventListener('input',apply); sel(id).addEventListener('change',apply);});
  sel('f-open').addEventListener('click',function(){
    var all=document.querySelectorAll('tr.task:not([style*="none"]) details.item, '+
                                      'tr.task:not([style*="none"]) details.transcript');
    for(var i=0;i<all.length;i++){all[i].open=true;}});
  sel('f-close').addEventListener('click',function(){
    var all=document.querySelectorAll('details');for(var i=0;i<all.length;i++){all[i].open=false;}});
  function reveal(){  // report.html#item-ID opens that item and its transcript, showing its row whatever the filters
    var target=null;
    try{target=location.hash?document.getElementById(decodeURIComponent(location.hash.slice(1))):null;}
    catch(e){return;}  // a malformed link opens nothing
    if(!target){return;}
    var transcript=target.querySelector('details.transcript'); if(transcript){transcript.open=true;}
    for(var p=target;p;p=p.parentElement){
      if(p.tagName==='DETAILS'){p.open=true;}
      if(p.classList&&p.classList.contains('task')&&p.style.display==='none'){
        ['f-status','f-split','f-category','f-text'].forEach(function(id){sel(id).value='';}); apply();}
    }
    target.scrollIntoView();
  }
  window.addEventListener('hashchange',reveal);
  // a link to the item the address already names changes no hash: open it again on the click
  document.querySelectorAll('a[href^="#item-"]').forEach(function(a){
    a.addEventListener('click',function(){setTimeout(reveal,0);});});
  apply(); reveal();
})();
"""

# Opens the item a link names (``report.html#item-ID``, from a comparison of two runs): its details and the
# details around it, and shows its task row even when a filter hid it.
ANCHOR_JS = """
(function(){
  function show(){
    var id='';
    try{id=decodeURIComponent(location.hash.slice(1));}catch(e){return;}  // a malformed link opens nothing
    var el=id&&document.getElementById(id);
    if(!el){return;}
    for(var n=el;n;n=n.parentElement){
      if(n.tagName==='DETAILS'){n.open=true;}
      if(n.tagName==='TR'&&n.style.display==='none'){n.style.display='';}
    }
    el.scrollIntoView();
  }
  window.addEventListener('hashchange',show); show();
})();
"""


# worst last: the status column sorts a task by its worst item
STATUS_RANK = {
    s: i
    for i, s in enumerate(
        (
            "pass",
            "skipped",
            "fail",
            "timeout",
            "parse_error",
            "eval_error",
            "model_error",
            "env_error",
            "error",
            "blocked",
            "not_run",
        )
    )
}


def notes_html(notes: list[str]) -> str:
    """The run's notes (how the pipeline ran: targets, isolation, cache, resume), folded below the results."""
    if not notes:
        return ""
    items = "".join(f"<li>{esc(n)}</li>" for n in notes)
    summary = f"<summary>{len(notes)} note(s) on how the run was made</summary>"
    return f'<details class="notes">{summary}<ul>{items}</ul></details>'


def status_badge(status: Any) -> str:
    return f'<span class="st st-{esc(status)}">{esc(status)}</span>'


def pre(text: Any, cls: str = "") -> str:
    attribute = f' class="{esc(cls)}"' if cls else ""
    return f"<pre{attribute}>{esc(clip(text))}</pre>"


def read_trajectory(run_dir: Path | None, ref: Any) -> dict[str, Any] | None:
    """The trajectory file a record names (relative to the run folder); None when it is not there."""
    if run_dir is None or not isinstance(ref, str) or not ref:
        return None
    path = Path(run_dir) / ref
    try:
        if Path(run_dir).resolve() not in path.resolve().parents:  # a record names only files of its run
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_number(value: Any) -> TypeGuard[int | float]:
    """A finite number (a JSON integer too large for a float is not one)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def cost_of(record: rec.RecordLike) -> float | None:
    """The item's cost in US dollars where the run recorded one (``cost_usd``, in the record or its
    ``generation``); None when it is not known (no price, the oracle, an older run)."""
    generation = rec.as_mapping(record.get("generation"))
    for value in (record.get("cost_usd"), generation.get("cost_usd")):
        if is_number(value):
            return float(value)
    return None


def model_seconds(record: rec.RecordLike, trajectory: Mapping[str, Any] | None) -> float | None:
    """Seconds the item's model calls took: from the transcript's turns, else the record's ``latency``."""
    turns = (trajectory or {}).get("turns")
    turns = [t for t in turns if isinstance(t, Mapping)] if isinstance(turns, list) else []
    if turns:
        return sum(float(t["latency"]) for t in turns if is_number(t.get("latency")))
    generation = rec.as_mapping(record.get("generation"))
    return float(generation["latency"]) if is_number(generation.get("latency")) else None


def usage_of(record: rec.RecordLike) -> dict[str, float]:
    """The record's model accounting (``records.usage_of``); none for a ``generation`` that is not an object."""
    if not isinstance(record.get("generation", {}), Mapping):
        return {"tokens": 0}
    return {key: number(value) for key, value in rec.usage_of(dict(record)).items()}  # finite, for the page


def dollars(value: float) -> str:
    return f"${value:.4f}" if value < 1 else f"${value:,.2f}"


def item_facts(record: rec.RecordLike, trajectory: Mapping[str, Any] | None) -> str:
    """``1.7 s · 90 tokens (5 model calls, 2.1 s) · $0.0123``: what the item took, for its summary line."""
    parts = []
    if is_number(record.get("duration")):
        parts.append(f"{record['duration']:.1f} s")
    usage = usage_of(record)
    if usage.get("model_calls") or usage.get("tokens"):
        spent = model_seconds(record, trajectory)
        calls = f"{usage.get('model_calls', 0):g} model call{'s' if usage.get('model_calls') != 1 else ''}"
        parts.append(f"{usage.get('tokens', 0):,.0f} tokens ({calls}{f', {spent:.2f} s' if spent is not None else ''})")
    cost = cost_of(record)
    if cost is not None:
        parts.append(dollars(cost))
    return " · ".join(parts)


SHOWN_ELSEWHERE = {
    "code",
    "stdout",
    "stderr",
    "message",
    "trajectory",
    "status",
    "id",
    "task",
    "benchmark",
    "traceback",
}


def meta_value(value: Any) -> str:
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {meta_value(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return json.dumps(value, default=str, ensure_ascii=False)
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def meta_html(record: rec.RecordLike, shown: frozenset[str] = frozenset()) -> str:
    """The record's other fields (not ``shown`` by the item's own details) as a two-column table; a nested object
    (``generation``) one row per key."""
    rows = []
    for key, value in record.items():
        if key in SHOWN_ELSEWHERE or key in shown or value in (None, "", [], {}):
            continue
        if isinstance(value, Mapping):
            rows += [(f"{key}.{k}", v) for k, v in value.items() if v not in (None, "", [], {})]
        else:
            rows.append((str(key), value))
    if not rows:
        return ""
    body = "".join(f"<tr><td>{esc(k)}</td><td>{esc(clip(meta_value(v), 2000))}</td></tr>" for k, v in rows)
    return (
        f'<details class="meta"><summary>record: {len(rows)} fields</summary>'
        f'<table class="meta">{body}</table></details>'
    )


def item_anchor(key: str) -> str:
    """The id of an item's transcript on its run's page (``key``: ``record_key``, so each attempt has its own):
    ``report.html#item-<key>`` opens that item's transcript."""
    return f"item-{key}"


def item_html(record: rec.RecordLike, run_dir: Path | None, open_: bool = False, anchor: bool = True) -> str:
    """An item's transcript; ``anchor``: with its id (``item_anchor``), which only one copy on a page has."""
    rid = record.get("id")
    target = f' id="{esc(item_anchor(rec.record_key(record)))}"' if anchor else ""
    trajectory = read_trajectory(run_dir, record.get("trajectory"))
    bench = benchmark_of(record.get("benchmark"))
    facts = item_facts(record, trajectory)
    headline = bench.item_headline(record) or clip(record.get("message"), 200)
    out = [
        f'<details class="item"{target}{" open" if open_ else ""}><summary>'
        f"{status_badge(record.get('status'))} <b>{esc(rid)}</b> "
        f"{f'<span class=n>{esc(facts)}</span> ' if facts else ''}{esc(headline)}</summary>"
    ]
    if record.get("message"):
        out.append(f'<div class="msg">{esc(clip(record.get("message")))}</div>')
    out += bench.item_details(record)
    if record.get("code"):
        out.append(f'<div class="th">code</div>{code_html(clip(record["code"]), "python")}')
    for stream in ("stdout", "stderr", "traceback"):
        if record.get(stream):
            out.append(f'<div class="th">{stream}</div>{pre(record[stream], "out")}')
    if trajectory is not None:
        out.append(transcript_html(trajectory))
    out.append(meta_html(record, bench.item_fields_shown))
    out.append("</details>")
    return "".join(out)


def item_or_fallback(record: rec.RecordLike, run_dir: Path | None, open_: bool = False, anchor: bool = True) -> str:
    """``item_html``, or when an odd record or trajectory file breaks it, a line saying so (with the item's
    anchor, so links to it still land): one item never costs the page."""
    try:
        return item_html(record, run_dir, open_, anchor)
    except Exception as exc:  # noqa: BLE001 - whatever the record holds, the rest of the page is written
        target = f' id="{esc(item_anchor(rec.record_key(record)))}"' if anchor else ""
        return (
            f'<details class="item"{target}><summary>{esc(record.get("id"))}: could not show this item '
            f"({esc(type(exc).__name__)}: {esc(clip(str(exc), 300))})</summary></details>"
        )


def number_cell(value: float | None, text: str, cls: str = "num") -> str:
    """A cell the table sorts by ``value`` (empty: unknown, sorted last)."""
    return f'<td class="{cls}" data-sort="{value if value is not None else ""}">{esc(text)}</td>'


def task_rows(records: list[rec.RecordLike], run_dir: Path | None) -> tuple[list[str], dict[str, set[str]]]:
    by_task: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for record in records:
        by_task[str(record.get("task", record.get("id")))].append(record)
    values: dict[str, set[str]] = {"status": set(), "split": set(), "category": set()}
    rows = []
    for position, task in enumerate(sorted(by_task, key=natural_key)):
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
        durations = [float(r["duration"]) for r in items if is_number(r.get("duration"))]
        duration = sum(durations) if durations else None
        tokens = sum(usage_of(r)["tokens"] for r in items)
        costs = [c for c in (cost_of(r) for r in items) if c is not None]
        cost = sum(costs) if costs else None
        worst = max((STATUS_RANK.get(s, len(STATUS_RANK)) for s in statuses), default=0)
        body = "".join(item_or_fallback(r, run_dir, open_=position == 0 and i == 0) for i, r in enumerate(items))
        rows.append(
            f'<tr class="task" data-id="{esc(task)}" data-statuses="{esc(" ".join(statuses))}" '
            f'data-split="{esc(split)}" data-category="{esc(category)}"><td><b>{esc(task)}</b></td>'
            f"<td class=split>{esc(split)}</td><td class=cat>{esc(category)}</td>"
            f'<td class="num" data-sort="{passed / len(scored) if scored else ""}">{passed}/{len(scored)}</td>'
            f'<td data-sort="{worst}">{" ".join(status_badge(s) for s in statuses)}</td>'
            f"{number_cell(duration, f'{duration:.1f} s' if duration is not None else '')}"
            f"{number_cell(tokens, f'{tokens:,.0f}' if tokens else '', 'num tok')}"
            f"{number_cell(cost, dollars(cost) if cost is not None else '', 'num cost')}"
            f"<td>{body}</td></tr>"
        )
    return rows, values


def tasks_table_head(categories: bool, cost: bool, splits: bool = True, tokens: bool = True) -> str:
    """The task table's head: click a column (or press Enter on it) to sort, again to reverse. A column that
    would say nothing (one split, no tokens, no cost) is hidden, so the items column, where code is shown, keeps
    the width."""
    hidden = (("nocat", not categories), ("nocost", not cost), ("nosplit", not splits), ("notok", not tokens))
    classes = " ".join(c for c, hide in hidden if hide)
    sortable = [
        ("task", "text", ""),
        ("split", "text", "split"),
        ("category", "text", "cat"),
        ("passed", "num", ""),
        ("status", "num", ""),
        ("duration", "num", ""),
        ("tokens", "num", "tok"),
        ("cost", "num", "cost"),
    ]
    heads = "".join(
        f'<th class="sort {cls}" data-kind="{kind}" tabindex="0">{name}</th>' for name, kind, cls in sortable
    )
    return (
        f'<table id="tasks"{f" class={classes!r}" if classes else ""}><thead><tr>{heads}<th>items</th></tr>'
        "</thead><tbody>"
    )


def run_counts_html(counts: Any) -> str:
    """The run counts, in the words the terminal and summary.md use (Total, Evaluated, Error, Not run, items)."""
    if not isinstance(counts, Mapping) or "total" not in counts:
        return ""
    return f'<p class="counts">run counts: {esc(counts_line(counts))}</p>'


def warnings_html(summary: Mapping[str, Any]) -> str:
    """The run's warnings (``caveats.run_warnings``, as the terminal and summary.md show them): items not run,
    items that ended in an error, replayed answers; then, once, the command that resumes the run."""
    boxes = [
        f'<div class="{"replayed" if w.kind == "replayed" else "incomplete"}"><p><b>{esc(w.text)}</b></p>'
        + (f"<p>{esc(w.detail)}</p>" if w.detail else "")
        + "</div>"
        for w in caveats.run_warnings(summary)
    ]
    command = caveats.resume_command(summary)
    if command:
        boxes.append(f'<div class="incomplete resume"><div>resume with:</div>{pre(command)}</div>')
    return "".join(boxes)


def rate_keys(summary: Mapping[str, Any]) -> set[str]:
    """The metrics that are rates: the benchmark's gate metrics (``physics.main`` like ``main``), and any
    fraction named ``*accuracy`` or ``*rate``."""
    gated = set(declared_in(summary).gate_metrics.values())
    out = set()
    for key, value in (summary.get("metrics") or {}).items():
        if not is_number(value) or not 0 <= value <= 1:
            continue
        if key in gated or key.rsplit(".", 1)[-1] in gated or key.endswith(("accuracy", "rate")):
            out.add(key)
    return out


def metric_text(value: Any, rate: bool) -> str:
    """A metric as the Metrics table shows it: a rate as a percentage, a count as a count."""
    if rate:
        return pct(float(value))
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.4g}"
    if isinstance(value, float):
        return f"{value:.0f}"
    return str(value)


def metrics_table_rows(
    metrics: Mapping[str, Any], rates: set[str], labelled: Iterable[tuple[str, str, str, str]]
) -> str:
    """The Metrics table: the benchmark's labelled rows (``Benchmark.metric_rows``: label, correct, total and rate
    keys) as label, correct, of and rate, then every metric no row names, by its key."""
    rows, named = [], set()
    for label, correct, total, rate in labelled:
        if total not in metrics:
            continue
        named |= {correct, total, rate}
        share = pct(float(metrics[rate])) if rate in metrics else "n/a"
        rows.append(
            f'<tr><td>{esc(label)}</td><td class="num">{esc(metrics.get(correct, 0))}</td>'
            f'<td class="num">{esc(metrics[total])}</td><td class="num">{esc(share)}</td></tr>'
        )
    head = "<tr><th>metric</th><th>correct</th><th>of</th><th>rate</th></tr>" if rows else ""
    span = ' colspan="3"' if rows else ""
    rest = [
        f"<tr><td>{esc(k)}</td><td{span}>{esc(metric_text(v, k in rates))}</td></tr>"
        for k, v in metrics.items()
        if k not in named
    ]
    return head + "".join(rows) + "".join(rest)


def category_cell(metrics: Mapping[str, Any], passed: str, total: str, rate: str) -> str:
    """``1/2 (50.0%)``: one headline metric of a category (summary.json's ``categories``)."""
    return f"{metrics.get(passed, 0)}/{metrics.get(total, 0)} ({pct(float(metrics.get(rate) or 0.0))})"


def options(values: Iterable[str]) -> str:
    return "".join(f'<option value="{esc(v)}">{esc(v)}</option>' for v in sorted(values, key=natural_key))


def render_html(
    summary: Mapping[str, Any],
    records: Iterable[rec.RecordLike],
    run_dir: Path | str | None = None,
    notes: Iterable[str] = (),
    sections: Iterable[str] = (),
) -> str:
    """The page of a run from its summary (summary.json's content) and its records. ``sections``: HTML
    placed after the gates (the comparison with a baseline: ``comparison.runs.comparison_for_run``)."""
    records = sorted((dict(r) for r in records), key=rec.sort_key)
    run_dir = Path(run_dir) if run_dir is not None else None
    settings = summary.get("settings", {})
    bench = benchmark_of(settings.get("benchmark"))
    title = (
        f"{settings.get('benchmark')} · {run_subject(settings)} · {settings.get('split')} "
        f"· run {settings.get('run_id')}"
    )
    cards = []
    for h in headlines(summary, records):
        ci = h["interval"]
        ci_text = f"95% CI {pct(ci[0])} – {pct(ci[1])}" if ci else "no interval (nothing scored)"
        levels = "".join(
            f'<div class="n">difficulty {esc(level)}: {k}/{n} passed</div>'
            for level, (k, n) in h["by_difficulty"].items()
        )
        levels += "".join(
            f'<div class="n">{esc(label)}: {k}/{n} correct</div>'
            for label, (k, n) in answer_counts(records, bench.answer_counts).items()
        )
        cards.append(
            f'<div class="card"><div>{esc(h["name"])}</div><div class="v">{esc(pct(h["value"]))}</div>'
            f'<div class="n">{h["k"]}/{h["n"]} · {esc(ci_text)} (Wilson)</div>{levels}</div>'
        )
    counts = summary.get("counts") or rec.count_statuses(records)
    whole: Mapping[str, Any] = summary.get("usage") or {}
    now = whole.get("this_session")
    usage: Mapping[str, Any] = now if isinstance(now, Mapping) else whole
    hits = number(usage.get("cache_hits"))
    usage_text = (
        (
            f"{max(0, number(usage.get('model_calls')) - hits):g} model calls, {number(usage.get('tokens')):g} "
            f"tokens, {hits:g} cache hits, {number(usage.get('tool_calls')):g} tool calls"
        )
        if usage and (any(usage.values()) or settings.get("model") != "oracle")
        else ""
    )  # the oracle calls no model
    if usage is not whole and usage_text:  # a resumed run: the reused records' calls were made earlier
        reused = number(whole["reused"].get("items"))
        usage_text = f"this session: {usage_text} (the {reused:g} reused records' not counted)"
    rows, values = task_rows(records, run_dir)
    costs = [c for c in (cost_of(r) for r in records) if c is not None]
    has_cost = bool(costs)
    if has_cost:  # where known: an item without a recorded cost counts as unknown, not as free
        usage_text += f"{', ' if usage_text else ''}{dollars(sum(costs))} over {len(costs)} of {len(records)} items"
    metrics = summary.get("metrics") or {}
    rates = rate_keys(summary)
    metric_rows = metrics_table_rows(metrics, rates, bench.metric_rows)
    setting_rows = "".join(
        f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>" for k, v in settings.items() if k not in ("data_hashes", "notes")
    )
    hashes = settings.get("data_hashes") or {}
    hash_rows = "".join(f"<tr><td>{esc(k)}</td><td><code>{esc(v)}</code></td></tr>" for k, v in hashes.items())
    notes = [*settings.get("notes", []), *notes, *summary.get("notes", [])]
    run = summary.get("run") if isinstance(summary.get("run"), dict) else {}
    run = run if isinstance(run, dict) else {}
    run_rows = "".join(f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>" for k, v in run.items() if v not in (None, ""))
    gates = summary.get("gates") or []
    gate_html = "".join(
        f"<li>{'<span class=ok>ok</span>' if g.get('ok') else '<span class=bad>FAILED</span>'} "
        f"{esc(g.get('gate'))}: {esc(g.get('detail'))}</li>"
        for g in gates
    )
    category_rows = "".join(
        f"<tr><td>{esc(name)}</td>"
        + "".join(f"<td>{esc(category_cell(m, *keys))}</td>" for _, *keys in bench.category_columns)
        + "</tr>"
        for name, m in (summary.get("categories") or {}).items()
        if isinstance(m, Mapping) and bench.category_columns
    )
    category_heads = "".join(f"<th>{esc(heading)}</th>" for heading, *_ in bench.category_columns)
    category_filter = (
        (
            f'<label>category <select id="f-category"><option value="">all</option>'
            f"{options(values['category'])}</select></label>"
        )
        if values["category"]
        else '<select id="f-category" hidden><option value=""></option></select>'
    )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        # nothing is fetched: no network, and no script but the inline one below
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
        "script-src 'unsafe-inline'; img-src data:\">",
        f"<title>{esc(title)}</title><style>{CSS}{bench.page_css}</style></head><body>",
        f'<header><h1>{esc(title)}</h1><div class="sub">{len(records)} items · '
        f"{esc(', '.join(f'{n} {s}' for s, n in counts.items()))}"
        f"{' · ' + esc(usage_text) if usage_text else ''}</div></header><main>",
        warnings_html(summary),
        run_counts_html(summary.get("run_counts")),
        f'<h2>Headline metrics</h2><div class="cards">{"".join(cards) or "<p>no headline metric</p>"}</div>',
        f"<ul>{gate_html}</ul>" if gate_html else "",
        notes_html(notes),
        *bench.page_sections(summary, records),
        *sections,
        '<h2>Tasks</h2><div class="filters">'
        f'<label>status <select id="f-status"><option value="">all</option>{options(values["status"])}</select></label>'
        f'<label>split <select id="f-split"><option value="">all</option>{options(values["split"])}</select></label>'
        f'{category_filter}<label>search <input id="f-text" type="search" size="24" '
        'placeholder="id, question, code, output"></label>'
        '<button id="f-open" type="button">expand shown</button><button id="f-close" type="button">collapse all'
        '</button><span id="f-count"></span></div>',
        tasks_table_head(
            len(values["category"]) > 1,
            has_cost,
            len(values["split"]) > 1,
            any(usage_of(r)["tokens"] for r in records),
        ),
        *rows,
        "</tbody></table>",
        f'<h2>Metrics</h2><table id="metrics">{metric_rows}</table>',
        html_cost_section(summary.get("cost") or {}, summary.get("items") or []),  # report/cost.py
        (
            f'<h2>Categories</h2><table class="categories"><tr><th>category</th>{category_heads}</tr>'
            f"{category_rows}</table>"
        )
        if category_rows
        else "",
        f"<h2>Settings</h2><table>{setting_rows}</table>",
        f"<h2>Run</h2><table>{run_rows}</table>" if run_rows else "",
        f"<h2>Data hashes (sha256)</h2><table>{hash_rows}</table>" if hash_rows else "",
        f"</main><script>{JS}{bench.page_js}</script></body></html>",
    ]
    return "\n".join(p for p in parts if p)


def write_html(
    run_dir: Path | str,
    summary: Mapping[str, Any],
    records: Iterable[rec.RecordLike],
    notes: Iterable[str] = (),
    sections: Iterable[str] = (),
) -> Path:
    """Write report.html into the run folder; returns its path."""
    path = Path(run_dir) / REPORT_HTML
    write_atomic(path, render_html(summary, records, run_dir, notes, sections))
    return path
