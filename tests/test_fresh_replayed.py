"""Each record says whether its answers came from the endpoint or the response cache; summaries count
both; compare states how many items share the same responses and warns when a comparison rests on
replayed answers."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from bench_runs import read_jsonl, run_dirs
from fake_openai import FakeOpenAI
from scicode_builders import CLOSE, problem, step, write_dataset

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROBLEMS = [
    problem(
        str(k), [step(f"{k}.1", f"def f{k}():\n    return {k}", [CLOSE.format(call=f"f{k}()")], header=f"def f{k}():")]
    )
    for k in range(1, 5)
]
TARGETS = {f"{k}.1": [k] for k in range(1, 5)}


def answer(offset: int):
    """Reply with f<k> returning k + offset (offset 0: right)."""

    def make(body: dict) -> dict:
        k = re.findall(r"def f(\d+)\(\)", json.dumps(body["messages"]))[-1]
        return {"text": f"```python\ndef f{k}():\n    return {int(k) + offset}\n```"}

    return make


def compare(a, b) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pytest_agentbench", "compare", str(a), str(b)], capture_output=True, text=True
    )
    assert done.returncode in (0, 1), done.stderr
    return done.stdout


def test_fresh_and_replayed_answers_are_labelled_counted_and_compared(pytester, bench, shared_data):
    data, h5 = write_dataset(pytester.path, shared_data, targets=TARGETS, problems=PROBLEMS)
    with FakeOpenAI() as server:
        for _ in range(20):
            server.reply_with(answer(0))
        args = (
            "--bench=scicode",
            "--bench-split=validation",
            "--model=m",
            f"--model-base-url={server.base_url}",
            "--model-api-key=k",
            "--bench-mode=naive",
            f"--bench-data-dir={data}",
            f"--bench-h5={h5}",
            "--bench-allow-custom-data",
            f"--bench-cache-dir={pytester.path / 'cache'}",
        )
        assert bench(*args, "--bench-run-id=fresh").ret == 0
        calls = len(server.requests)
        assert (
            bench(
                "--bench-replay",
                str(pytester.path / "reports/scicode/m/fresh"),
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
