"""Every page names who a run measured: the model, and the agent when the run names one (on an agentic benchmark
the agent decides the score as much as the model), on hand-made summaries of a benchmark the report layer does not
know."""

from __future__ import annotations

import html

from pytest_agentbench.report.compare import compare, render_markdown, render_text
from pytest_agentbench.report.html import render_html
from pytest_agentbench.report.summary import build_summary
from pytest_agentbench.report.summary import render_markdown as summary_markdown

from helpers.records_kit import toy_records
from toybench import Toy

STATUSES = {"1.1": "pass", "2.1": "fail"}


def summary_of(run_id: str, **extra: str):
    settings = {"benchmark": "toy", "model": "m", "split": "dev", "run_id": run_id, **extra}
    return build_summary(toy_records(STATUSES), Toy(), settings)


def test_the_title_of_every_page_names_the_agent_beside_the_model():
    summary = summary_of("r1", agent="mini-swe-agent==2.4.6")
    assert summary_markdown(summary).startswith("# toy — m with mini-swe-agent==2.4.6 — run r1")
    assert html.escape("toy · m with mini-swe-agent==2.4.6 · dev") in render_html(summary.to_json(), [])


def test_a_comparison_names_each_sides_agent_and_a_run_without_one_only_its_model():
    a = summary_of("a", agent="codex==0.171.0").to_json()
    b = summary_of("b").to_json()
    both = compare(a, b)
    markdown, text = render_markdown(both), render_text(both)
    assert "model m with codex==0.171.0, run a" in markdown and "B (this run): model m, run b" in markdown
    assert "A: this run (model m with codex==0.171.0, run a)" in text
    assert summary_markdown(summary_of("plain")).startswith("# toy — m — run plain")
