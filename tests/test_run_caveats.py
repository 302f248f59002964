"""What a run's reports warn about, on hand-made summaries of a benchmark the report layer does not know: the
terminal, summary.md and report.html lead with the same warnings (items not run, items that ended in an error,
replayed answers) and the same resume command."""

from __future__ import annotations

import html

from pytest_agentbench.report.attempts import counts_line
from pytest_agentbench.report.caveats import errors_of, run_warnings
from pytest_agentbench.report.html import render_html
from pytest_agentbench.report.summary import build_summary
from pytest_agentbench.report.summary import render_markdown as summary_markdown

from helpers.records_kit import toy_records
from toybench import Toy

RESUME = "cd /home/me && python -m pytest --bench-resume=/home/me/reports/toy/m/run1"


def test_errors_are_counted_apart_and_every_page_shows_the_same_warning_and_command():
    records = toy_records({"1.1": "pass", "1.2": "model_error", "1.3": "blocked", "2.1": "fail"})
    assert errors_of(records) == {"items": 2, "counts": {"model_error": 1, "blocked": 1}, "ids": ["1.2", "1.3"]}
    summary = build_summary(records, Toy(), {"benchmark": "toy", "model": "m", "split": "dev", "run_id": "run1"})
    summary["errors"]["resume"] = RESUME  # the plugin writes the command in (pytest_plugin/reporter.py)
    [warning] = run_warnings(summary)
    assert warning.text == "2 item(s) ended in an error (1 model_error, 1 blocked): 1.2, 1.3"
    assert summary["run_counts"]["error"] == 1 and summary["run_counts"]["items_scored"] == 2
    markdown = summary_markdown(summary)
    page = render_html(summary.to_json(), records)
    for text in (warning.text, warning.detail):
        assert text in markdown and html.escape(text) in page
    assert RESUME in markdown and html.escape(RESUME) in page
    counts = counts_line(summary["run_counts"])  # the terminal's "run counts: ..." (pytest_plugin/reporter.py)
    assert f"Run counts: {counts}" in markdown and html.escape(f"run counts: {counts}") in page
    assert markdown.index(warning.text) < markdown.index("## ")  # above every number


def test_a_run_without_errors_or_replays_has_no_warning():
    records = toy_records({"1.1": "pass", "2.1": "fail"})
    summary = build_summary(records, Toy(), {"benchmark": "toy", "model": "m", "split": "dev", "run_id": "run1"})
    assert run_warnings(summary) == [] and "errors" not in summary
    assert 'class="incomplete"' not in render_html(summary.to_json(), records)
