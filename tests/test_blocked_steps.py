"""A step whose earlier step ended without the model's answer (its endpoint failed) is ``blocked``, not failed.

Problem 29 of the validation split has three steps; 29.3 calls 29.2's function. The scripted server answers
every step with its ground truth, except 29.2, which always fails (HTTP 500): 29.2 is a ``model_error`` and
29.3, which would run against a missing function, is ``blocked`` naming 29.2, an error in every count and gate.
"""

from __future__ import annotations

import json
import re

import pytest

from helpers.bench_runs import read_jsonl, run_dirs
from helpers.fake_openai import FakeOpenAI
from helpers.scripted_steps import args, serve, statuses

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_a_step_after_a_model_error_is_blocked_and_counted_as_an_error(bench, pytester, cache_dir):
    with FakeOpenAI() as fake:
        serve(fake, failing="29.2")
        result = bench(*args(fake, cache_dir, "--bench-max-errors=0"), subprocess=True)
    out = result.stdout.str()
    [run] = run_dirs(pytester.path)
    assert statuses(run) == {"29.1": "pass", "29.2": "model_error", "29.3": "blocked"}, out
    blocked = {r["id"]: r for r in read_jsonl(run / "steps.jsonl")}["29.3"]
    assert "29.2" in blocked["message"] and "NameError" not in blocked["message"]
    assert blocked["blocked_by"] == "29.2"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["counts"] == {"pass": 1, "model_error": 1, "blocked": 1}
    assert summary["run_counts"]["error"] == 1 and summary["run_counts"]["items_scored"] == 1
    # --bench-max-errors counts it with the errors, never as the model's failure
    gate = [g for g in summary["gates"] if "max-errors" in g["gate"]][0]
    assert not gate["ok"] and gate["detail"].startswith("2 item(s)"), gate
    warning = "2 item(s) ended in an error (1 model_error, 1 blocked): 29.2, 29.3"
    assert f"WARNING: {warning}" in out
    markdown = (run / "summary.md").read_text()
    assert "29.3:blocked" in markdown and warning in markdown
    page = (run / "report.html").read_text()
    assert re.search(r"29\.3.*blocked", page) and warning in page
