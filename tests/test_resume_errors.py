"""--bench-resume runs again what did not finish honestly: the items that ended in an error (a model error, a
step blocked by one), with the run's own settings, keeping the pass and fail verdicts; a step run again builds on
the answers the kept records scored.

Problem 29's step 29.2 always fails at first (HTTP 500), so 29.3 is blocked; the endpoint then recovers and the
resume gives both real verdicts, 29.1 kept as it was and never asked again (the run has no cache: its answer
comes from its record).
"""

from __future__ import annotations

import html
import json

import pytest

from helpers.bench_runs import read_jsonl, run_dirs
from helpers.fake_openai import FakeOpenAI
from helpers.scripted_steps import args, asked_step, serve, statuses

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_resume_runs_the_errored_and_blocked_steps_again_and_keeps_verdicts(bench, pytester, cache_dir):
    with FakeOpenAI() as fake:
        serve(fake, failing="29.2")
        first = bench(*args(fake, cache_dir, "--bench-cache=off"), subprocess=True)
    [run] = run_dirs(pytester.path)
    assert statuses(run) == {"29.1": "pass", "29.2": "model_error", "29.3": "blocked"}, first.stdout.str()
    kept = {r["id"]: r for r in read_jsonl(run / "steps.jsonl")}["29.1"]
    lines = first.stdout.lines
    assert "incomplete score: 2 ended in an error; resume with:" in lines, first.stdout.str()
    command = lines[lines.index("incomplete score: 2 ended in an error; resume with:") + 1]
    assert command.strip().endswith(f"--bench-resume={run}")
    assert html.escape(command.strip()) in (run / "report.html").read_text()  # every page gives the same advice
    assert command.strip() in (run / "summary.md").read_text()

    with FakeOpenAI() as recovered:
        serve(recovered, failing=None)
        resumed = bench(
            f"--bench-resume={run}",
            f"--model-base-url={recovered.base_url}",
            "--model-api-key=test-key",
            subprocess=True,
        )
    out = resumed.stdout.str()
    assert resumed.ret == 0, out
    assert "2 item(s) that ended in an error (model_error, blocked) run again: 29.2, 29.3" in out
    assert [asked_step(r["body"]) for r in recovered.requests] == ["29.2", "29.3"]  # 29.1's answer is its record's
    assert statuses(run) == {"29.1": "pass", "29.2": "pass", "29.3": "pass"}
    records = read_jsonl(run / "steps.jsonl")
    assert len(records) == 3 and {r["id"]: r for r in records}["29.1"] == kept
    summary = json.loads((run / "summary.json").read_text())
    assert summary["counts"] == {"pass": 3} and summary["metrics"]["main"] == 1.0


def test_a_resume_with_only_verdicts_left_runs_nothing(bench, pytester, cache_dir):
    with FakeOpenAI() as fake:
        serve(fake, failing=None)
        bench(*args(fake, cache_dir, "--bench-cache=off"), subprocess=True)
        [run] = run_dirs(pytester.path)
        again = bench(f"--bench-resume={run}", "--model-api-key=test-key", subprocess=True)
        asked = len(fake.requests)
    assert "all 3 item(s) have a finished record, nothing is left to run" in again.stdout.str()
    assert asked == 3
