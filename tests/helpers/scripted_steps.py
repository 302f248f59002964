"""Problem 29 of the validation split served step by step by the scripted server: each step answered with its
ground truth, one step (``failing``) always failing with HTTP 500, as an endpoint that never recovers for it.
Used by tests/test_blocked_steps.py and tests/test_resume_errors.py."""

from __future__ import annotations

import json

from helpers.bench_runs import SHARED_DATA, read_jsonl
from helpers.fake_openai import FakeOpenAI


def problem(pid: str) -> dict:
    for line in (SHARED_DATA / "scicode" / "problems_dev.jsonl").read_text().splitlines():
        data = json.loads(line)
        if data["problem_id"] == pid:
            return data
    raise AssertionError(f"no validation problem {pid}")


PROBLEM = problem("29")


def asked_step(body: dict) -> str:
    """The step a naive-mode request asks for: the step whose function header comes last in the prompt."""
    text = json.dumps(body.get("messages") or body.get("input"))
    found = {
        s["step_number"]: text.rfind(json.dumps(s["function_header"].split("(")[0])[1:-1]) for s in PROBLEM["sub_steps"]
    }
    return max(found, key=lambda number: found[number])


def ground_truth(body: dict) -> dict:
    number = asked_step(body)
    [step] = [s for s in PROBLEM["sub_steps"] if s["step_number"] == number]
    return {"text": f"```python\n{step['ground_truth_code']}\n```"}


def serve(fake: FakeOpenAI, failing: str | None) -> None:
    """Answer every step with its ground truth; ``failing`` always gets HTTP 500."""
    for _ in range(12):
        fake.reply_with(ground_truth)
    fake.fail_when = (lambda body: 500 if asked_step(body) == failing else None) if failing else None


def args(fake: FakeOpenAI, cache_dir, *extra: str) -> list[str]:
    return [
        "--bench=scicode",
        "--bench-split=validation",
        "--bench-ids=29",
        "--bench-mode=naive",
        "--model=gt-player",
        f"--model-base-url={fake.base_url}",
        "--model-api-key=test-key",
        "--bench-set=model_max_retries=0",
        f"--bench-cache-dir={cache_dir}",
        *extra,
    ]


def statuses(run) -> dict[str, str]:
    return {r["id"]: r["status"] for r in read_jsonl(run / "steps.jsonl")}
