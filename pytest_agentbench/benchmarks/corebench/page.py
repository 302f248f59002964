"""What report.html shows of CORE-Bench beyond the common parts: each capsule's questions, and the human review.

The report layer asks for these through the ``Benchmark`` protocol (``page_sections``, ``item_headline``,
``item_details``, ``page_css``, ``page_js``); every value from a record is escaped here.

* ``questions_html(questions)`` / ``wrong_questions_html(questions)``: a capsule's questions (reported value,
  accepted value or interval, verdict), and one line per wrong answer.

* ``review_mark(question)``: beside an overridden question's automatic verdict, the reviewer's verdict,
  name and reason.
* ``review_section(summary, records)``: both scores side by side (when the summary has a review), the overridden
  questions, and the export of a review-file stub: every question the automatic grader marked wrong (and every
  override already made), as YAML that ``--bench-review`` reads. The stub is written here, at render time, into
  an escaped ``<textarea>``; the page's script (``REVIEW_JS``, appended to the page's one script) only puts the
  reviewer's name in and copies it to the clipboard or offers it as a download. No record value is ever put in a
  script, and nothing is sent anywhere.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ...core.records import RecordLike

# report.html's Metrics table: (label, correct, total, rate) keys of the summary's metrics (bench.compute_metrics)
METRIC_ROWS = (
    ("capsules solved (every question right)", "correct_capsules", "capsules", "capsule_accuracy"),
    ("questions right", "correct_questions", "questions", "question_accuracy"),
    ("written questions right", "correct_written_questions", "written_questions", "written_question_accuracy"),
    ("figure questions right", "correct_figure_questions", "figure_questions", "figure_question_accuracy"),
    ("capsules with every written question right", "correct_written_tasks", "written_tasks", "written_task_accuracy"),
    ("capsules with every figure question right", "correct_figure_tasks", "figure_tasks", "figure_task_accuracy"),
)
REVIEWER_SLOT = "__REVIEWER__"  # replaced by the page's script with the name typed in (JSON-quoted)
PENDING_REASON = "to review: set verdict to correct where the grader was wrong, and say why"
STUB_FILE = "review.yaml"
# what YAML 1.1 does not allow anywhere in a stream (its c-printable set, complemented)
NOT_YAML = re.compile("[^\t\n\r\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")

REVIEW_CSS = """
.reviewed{background:#fff3cd;border:1px solid #d39e00;border-radius:4px;padding:0 4px;margin-left:4px}
.review table{margin:8px 0}.review textarea{width:100%;font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace}
"""

REVIEW_JS = """
(function(){
  var button=document.getElementById('rv-copy'); if(!button){return;}
  function stub(){
    var name=document.getElementById('rv-reviewer').value
      .replace(/[^\\t\\x20-\\x7e\\xa0-\\ud7ff\\ue000-\\ufffd\\u{10000}-\\u{10ffff}]/gu,'').trim()||'reviewer';
    return document.getElementById('rv-template').value.split('__REVIEWER__').join(JSON.stringify(name));
  }
  button.addEventListener('click',function(){
    var text=stub(), out=document.getElementById('rv-stub'), link=document.getElementById('rv-download');
    out.value=text; out.hidden=false;
    link.href='data:text/yaml;charset=utf-8,'+encodeURIComponent(text); link.hidden=false;
    var done=function(how){document.getElementById('rv-state').textContent=how;};
    if(navigator.clipboard&&navigator.clipboard.writeText){
      navigator.clipboard.writeText(text).then(function(){done('copied to the clipboard');},
        function(){out.select(); done('select the text below and copy it, or download it');});
    }else{out.select(); done('select the text below and copy it, or download it');}
  });
})();
"""


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def one_line(value: Any, limit: int = 100) -> str:
    """A value for a YAML comment: one line of characters YAML accepts, clipped (a model's answer may hold
    anything; YAML refuses control characters even in a comment)."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = NOT_YAML.sub("?", " ".join(text.split()))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def accepted_text(question: Mapping[str, Any]) -> str:
    """The accepted value, or a numeric question's interval as ``[low, high]``."""
    expected = question.get("expected")
    if (
        question.get("kind") == "numeric"
        and isinstance(expected, list)
        and len(expected) == 2
        and all(isinstance(x, (int, float)) for x in expected)
    ):
        return f"[{expected[0]:.6g}, {expected[1]:.6g}]"
    return one_line(expected)


def review_mark(question: Mapping[str, Any]) -> str:
    """The reviewer's verdict on a question, shown beside the automatic one (empty when not reviewed)."""
    found = question.get("review")
    if not isinstance(found, Mapping):
        return ""
    return (
        f' <span class="reviewed" title="{esc(found.get("file"))}:{esc(found.get("line"))}">reviewed: '
        f"<b>{esc(found.get('verdict'))}</b> by {esc(found.get('reviewer'))}: {esc(found.get('reason'))}</span>"
    )


def stub_entries(records: Iterable[RecordLike]) -> list[tuple[str, dict[str, str]]]:
    """(comment, entry) for every override already made and every question the grader marked wrong."""
    out = []
    for record in sorted(records, key=lambda r: str(r.get("id"))):
        questions = record.get("questions")
        if not isinstance(questions, list):
            continue
        capsule = str(record.get("task", record.get("id")))
        for q in questions:
            if not isinstance(q, Mapping) or not isinstance(q.get("question"), str):
                continue
            found = q.get("review") if isinstance(q.get("review"), Mapping) else None
            if found is None and q.get("correct"):
                continue
            reported = one_line(q.get("submitted")) if q.get("answered", True) else "(not answered)"
            comment = f"{capsule}: reported {reported}; accepted {accepted_text(q)}"
            if found is not None:
                entry = {
                    "capsule": capsule,
                    "question": q["question"],
                    "verdict": str(found.get("verdict")),
                    "reviewer": str(found.get("reviewer")),
                    "reason": str(found.get("reason")),
                }
            else:
                entry = {
                    "capsule": capsule,
                    "question": q["question"],
                    "verdict": "wrong",
                    "reviewer": REVIEWER_SLOT,
                    "reason": PENDING_REASON,
                }
            out.append((comment, entry))
    return out


def review_stub(records: Iterable[RecordLike], settings: Mapping[str, Any]) -> str:
    """The review file a reviewer starts from; as it stands it changes no verdict (every entry repeats the
    automatic verdict or an override already made)."""
    import yaml  # why: only a page with questions to review needs it

    lines = [
        "# pytest-agentbench review file: pytest --bench-review=review.yaml (docs/corebench.md)",
        f"# run {one_line(settings.get('run_id'))}, {one_line(settings.get('benchmark'))} "
        f"{one_line(settings.get('split'))} split, model {one_line(settings.get('model'))}",
        "# Each entry is a question the automatic grader marked wrong (or one already reviewed). Set verdict:",
        "# correct where the answer is right and give your reason; entries left as they are change nothing.",
        "overrides:",
    ]
    entries = stub_entries(records)
    for comment, entry in entries:
        body = yaml.safe_dump([entry], sort_keys=False, allow_unicode=True, width=1_000_000)
        lines.append(f"  # {comment}")
        lines += [f"  {line}" for line in body.rstrip("\n").splitlines()]
    if not entries:
        lines[-1] = "overrides: []  # the grader marked no question wrong"
    return "\n".join(lines) + "\n"


def scores_table(scores: Mapping[str, Any]) -> str:
    auto = (scores.get("automatic") or {}).get("metrics") or {}
    rev = (scores.get("reviewed") or {}).get("metrics") or {}
    rows = []
    for name, num, den in (
        ("capsules correct", "correct_capsules", "capsules"),
        ("questions correct", "correct_questions", "questions"),
    ):
        cells = []
        for m in (auto, rev):
            n = m.get(den) or 0
            cells.append(f"{m.get(num, 0)}/{n} ({m.get(num, 0) / n:.1%})" if n else "n/a")
        rows.append(f"<tr><td>{esc(name)}</td><td>{esc(cells[0])}</td><td>{esc(cells[1])}</td></tr>")
    info = scores.get("reviewed") or {}
    return (
        f"<p>Review file <code>{esc(info.get('file'))}</code>: {esc(info.get('overrides', 0))} override(s), "
        f'{esc(info.get("changed", 0))} verdict(s) changed.</p><table class="scores"><tr><th>score</th>'
        f"<th>automatic</th><th>reviewed</th></tr>{''.join(rows)}</table>"
    )


def overridden_rows(records: Iterable[RecordLike]) -> str:
    rows = []
    for record in records:
        for q in record.get("questions") or []:
            found = q.get("review") if isinstance(q, Mapping) else None
            if isinstance(found, Mapping):
                rows.append(
                    f"<tr><td>{esc(record.get('id'))}</td><td>{esc(q.get('question'))}</td>"
                    f"<td>{'correct' if q.get('correct') else 'wrong'}</td><td>{esc(found.get('verdict'))}</td>"
                    f"<td>{esc(found.get('reviewer'))}</td><td>{esc(found.get('reason'))}</td></tr>"
                )
    if not rows:
        return ""
    return (
        '<table class="overridden"><tr><th>capsule</th><th>question</th><th>automatic</th><th>reviewed</th>'
        f"<th>reviewer</th><th>reason</th></tr>{''.join(rows)}</table>"
    )


def review_section(summary: Mapping[str, Any], records: Iterable[RecordLike]) -> str:
    """The "Human review" section: empty for a run whose records have no questions."""
    records = [r for r in records if isinstance(r.get("questions"), list)]
    if not records:
        return ""
    scores = summary.get("scores") if isinstance(summary.get("scores"), Mapping) else None
    stub = review_stub(records, summary.get("settings") or {})
    failing = len(stub_entries(records))
    return "".join(
        [
            '<h2>Human review</h2><div class="review">',
            scores_table(scores)
            if scores
            else "<p>No review file was given (--bench-review): the automatic verdicts stand.</p>",
            overridden_rows(records),
            f"<p>Export a review-file stub of the {failing} question(s) marked wrong (and any already reviewed), edit "
            f"it, and give it to a run with <code>--bench-review</code> (e.g. <code>--bench-resume</code> of this run "
            f"rewrites its reports with both scores).</p>",
            '<label>reviewer <input id="rv-reviewer" size="16"></label> ',
            '<button id="rv-copy" type="button">copy review-file stub</button> ',
            f'<a id="rv-download" download="{STUB_FILE}" hidden>download {STUB_FILE}</a> <span id="rv-state"></span>',
            f'<textarea id="rv-template" hidden readonly>{esc(stub)}</textarea>',
            '<textarea id="rv-stub" rows="14" hidden readonly></textarea></div>',
        ]
    )


# ---- a capsule's questions ------------------------------------------------------------------
def accepted_html_text(question: Mapping[str, Any]) -> str:
    """The accepted answer: an interval for a numeric question, else the expected value."""
    expected = question.get("expected")
    if question.get("kind") == "numeric" and isinstance(expected, list) and len(expected) == 2:
        if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in expected):
            return f"[{expected[0]:.6g}, {expected[1]:.6g}]"
        return str(expected)
    return json.dumps(expected, default=str, ensure_ascii=False)


def reported_text(question: Mapping[str, Any]) -> str:
    if not question.get("answered", True):
        return "(not answered)"
    return json.dumps(question.get("submitted"), default=str, ensure_ascii=False)


def questions_html(questions: list[Any]) -> str:
    rows = ["<table><tr><th>question</th><th>reported</th><th>accepted</th><th>verdict</th></tr>"]
    for q in questions:
        if not isinstance(q, dict):
            continue
        verdict = '<span class="ok">correct</span>' if q.get("correct") else '<span class="bad">wrong</span>'
        note = f" — {esc(q['note'])}" if q.get("note") else ""
        note += f" (rule: {esc(q['rule'])})" if q.get("rule") else ""  # v1.1 grading names what decided
        rows.append(
            f"<tr><td>{esc(q.get('question'))}</td><td>{esc(reported_text(q))}</td>"
            f"<td>{esc(accepted_html_text(q))}</td><td>{verdict}{note}{review_mark(q)}</td></tr>"
        )
    rows.append("</table>")
    return "".join(rows)


def wrong_questions_html(questions: list[Any]) -> str:
    """One line per wrong answer: the whole question, the reported value and the accepted value or interval."""
    lines = []
    for q in questions:
        if not isinstance(q, dict) or q.get("correct"):
            continue
        what = "interval" if q.get("kind") == "numeric" and isinstance(q.get("expected"), list) else "value"
        note = f" ({esc(q['note'])})" if q.get("note") else ""
        lines.append(
            f'<li class="wrong"><span class="bad">wrong:</span> {esc(q.get("question"))} — reported '
            f"<code>{esc(reported_text(q))}</code>, accepted {what} <code>{esc(accepted_html_text(q))}</code>"
            f"{note}</li>"
        )
    return f'<ul class="wrong">{"".join(lines)}</ul>' if lines else ""


def questions_summary(questions: list[Any]) -> str:
    graded = [q for q in questions if isinstance(q, dict)]
    return f"{sum(1 for q in graded if q.get('correct'))}/{len(graded)} questions correct"
