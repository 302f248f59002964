"""Which model answered is part of the record: each reply's ``model`` (what the endpoint says answered) is kept in
the record and the response cache; a run answered by another model than the one asked for (a gateway's fallback)
says so in its headline on every page and in its comparability keys, and a gate against a baseline answered as
asked is refused unless --bench-set allow_incomparable=true."""

from __future__ import annotations

import json

import pytest

from pytest_agentbench.models.client import parse_chat_reply
from pytest_agentbench.report.served import AS_ASKED, comparability_value, is_model_asked, served_text

from helpers.bench_runs import read_jsonl, run_dirs
from helpers.scicode_builders import asked_number, numbered_problems

PROBLEMS, TARGETS = numbered_problems((1, 2))


def right_answer(body: dict) -> dict:
    k = asked_number(body)
    return {"text": f"```python\ndef f{k}():\n    return {k}\n```"}


@pytest.mark.parametrize(
    ("asked", "served", "same"),
    [
        ("gpt-4o", "gpt-4o", True),
        ("gpt-4o", "gpt-4o-2024-08-06", True),
        ("claude-3-5-sonnet", "claude-3-5-sonnet-20240620", True),
        ("gpt-4", "gpt-4-0613", True),
        ("gpt-4o", "gpt-4o-mini", False),
        ("gpt-4o", "gpt-4o-mini-2024-07-18", False),
        ("primary", "fallback-model", False),
        ("gpt-4o", "gpt-4", False),
    ],
)
def test_a_dated_name_of_the_model_asked_for_is_that_model(asked, served, same):
    assert is_model_asked(asked, served) is same


def test_the_comparability_value_says_as_asked_or_names_the_other_models():
    assert comparability_value({}, "m") is None  # no reply named a model: unknown, never refused for
    assert comparability_value({"gpt-4o-2024-08-06": 3}, "gpt-4o") == AS_ASKED
    assert comparability_value({"gpt-4o": 2, "gpt-4o-mini": 1}, "gpt-4o") == ["gpt-4o", "gpt-4o-mini"]
    assert served_text({"gpt-4o-2024-08-06": 3}, "gpt-4o", 3) is None
    text = served_text({"gpt-4o": 2, "gpt-4o-mini": 1}, "gpt-4o", 3)
    assert text is not None and "gpt-4o-mini (1 of 3 items), not from gpt-4o" in text


def test_a_reply_s_model_name_is_kept_to_the_characters_of_names():
    reply = {"model": "evil\x1b[31m<b>|x", "choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}]}
    assert parse_chat_reply(reply).served_model == "evil??31m?b??x"


@pytest.mark.e2e
@pytest.mark.slow
def test_a_fallback_model_is_recorded_replayed_headlined_and_refused_as_a_baseline(
    pytester, bench, custom_scicode, server
):
    custom_scicode.write(PROBLEMS, TARGETS)
    cache = pytester.path / "cache"

    def run(model: str, run_id: str, *extra: str):
        args = custom_scicode.args(
            "--bench-mode=naive", f"--bench-cache-dir={cache}", *extra, model=model, server=server
        )
        return bench(*args, f"--bench-run-id={run_id}")

    # the baseline: "primary" answered by itself
    for _ in PROBLEMS:
        server.reply_with(right_answer)
    baseline = run(
        "primary", "as-asked", f"--bench-baseline={pytester.path / 'baseline.json'}", "--bench-update-baseline"
    )
    assert baseline.ret == 0, baseline.stdout.str()
    assert "served model:" not in baseline.stdout.str()

    # the gateway falls back: every answer for "other" comes from fallback-model
    server.served_model = "fallback-model"
    for _ in PROBLEMS:
        server.reply_with(right_answer)
    gate = ("--bench-max-drop=subproblem=10%", f"--bench-baseline={pytester.path / 'baseline.json'}")
    swapped = run("other", "swapped", "--bench-set=allow_incomparable=true")
    assert swapped.ret == 0, swapped.stdout.str()
    server.served_model = None

    by_id = {run.name: run for run in run_dirs(pytester.path)}
    records = read_jsonl(by_id["swapped"] / "steps.jsonl")
    assert [r["generation"]["served_models"] for r in records] == [["fallback-model"]] * 2
    summary = json.loads((by_id["swapped"] / "summary.json").read_text())
    assert summary["served_models"] == {"fallback-model": 2}
    assert summary["comparability"]["served_model"] == ["fallback-model"]
    as_asked = json.loads((by_id["as-asked"] / "summary.json").read_text())
    assert as_asked["comparability"]["served_model"] == AS_ASKED

    headline = "served model: answers came from fallback-model (2 of 2 items), not from other, the model asked for"
    assert headline in " ".join(swapped.stdout.str().split())
    assert headline in (by_id["swapped"] / "summary.md").read_text()
    assert headline in (by_id["swapped"] / "report.html").read_text()

    # a rerun replays the cached answers, and who gave them: the gate against the as-asked baseline is refused
    refused = run("other", "replayed", *gate)
    assert refused.ret == 1, refused.stdout.str()
    replayed = read_jsonl(pytester.path / "reports/scicode/other/replayed/steps.jsonl")
    assert [r["generation"]["answers"] for r in replayed] == ["replayed", "replayed"]
    assert [r["generation"]["served_models"] for r in replayed] == [["fallback-model"]] * 2
    text = " ".join(refused.stdout.str().split())
    assert "FAIL --bench-max-drop subproblem=10%: refused: the baseline is not comparable with this run" in text
    assert "served_model: as asked vs" in text and headline in text

    allowed = run("other", "allowed", *gate, "--bench-set=allow_incomparable=true")
    assert allowed.ret == 0, allowed.stdout.str()
    assert "PASS --bench-max-drop subproblem=10%" in allowed.stdout.str()
