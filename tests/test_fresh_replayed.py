"""Each record says whether its answers came from the endpoint or the response cache; summaries count
both; compare states how many items share the same responses and warns when a comparison rests on
replayed answers."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers.bench_runs import read_jsonl, run_dirs
from helpers.fake_openai import FakeOpenAI
from helpers.scicode_builders import asked_number, numbered_problems

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROBLEMS, TARGETS = numbered_problems(range(1, 5))


def answer(offset: int):
    """Reply with f<k> returning k + offset (offset 0: right)."""

    def make(body: dict) -> dict:
        k = asked_number(body)
        return {"text": f"```python\ndef f{k}():\n    return {k + offset}\n```"}

    return make


def compare(a, b) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pytest_agentbench", "compare", str(a), str(b)], capture_output=True, text=True
    )
    assert done.returncode in (0, 1), done.stderr
    return done.stdout


def test_fresh_and_replayed_answers_are_labelled_counted_and_compared(pytester, bench, custom_scicode):
    custom_scicode.write(PROBLEMS, TARGETS)
    with FakeOpenAI() as server:
        for _ in range(20):
            server.reply_with(answer(0))
        args = custom_scicode.args(
            "--bench-mode=naive", f"--bench-cache-dir={pytester.path / 'cache'}", model="m", server=server
        )
        assert bench(*args, "--bench-run-id=fresh").ret == 0
        calls = len(server.requests)
        assert (
            bench(
                f"--bench-replay={pytester.path / 'reports/scicode/m/fresh'}",
                "--bench-run-id=replayed",
                f"--bench-cache-dir={pytester.path / 'cache'}",
                f"--model-base-url={server.base_url}",
            ).ret
            == 0
        )
        assert len(server.requests) == calls  # the replay asked nothing
        server._replies.clear()
        for _ in range(20):
            server.reply_with(answer(1))  # a new model: every answer differs, and is wrong
        assert bench(*args, "--bench-run-id=new", "--bench-cache=off").ret == 1
    fresh, new, replayed = run_dirs(pytester.path)
    assert {r["generation"]["answers"] for r in read_jsonl(fresh / "steps.jsonl")} == {"fresh"}
    assert {r["generation"]["answers"] for r in read_jsonl(replayed / "steps.jsonl")} == {"replayed"}
    usage = json.loads((replayed / "summary.json").read_text())["usage"]
    assert (usage["replayed_items"], usage["fresh_items"]) == (4, 0)
    assert json.loads((fresh / "summary.json").read_text())["usage"]["fresh_items"] == 4

    rescored = compare(fresh, replayed)
    assert "4 of 4 shared items have the same model responses in both runs; 4 of B's were replayed" in rescored
    assert "WARNING: this comparison rests mostly on replayed answers" in rescored
    measured = compare(fresh, new)
    assert "0 of 4 shared items have the same model responses in both runs; 0 of B's were replayed" in measured
    assert "rests mostly on replayed answers" not in measured
