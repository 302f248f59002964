"""Text that is not valid UTF-8 never ends a run: it is repaired where it enters (issue 19, point 1).

A lone UTF-16 surrogate is what a JSON ``"\\udc80"`` escape decodes to: Python holds it in a str, but it cannot
be encoded as UTF-8, so one such character in a record, a cache entry or an xdist report used to end the whole
session (exit 3, no record, no summary). Each case here sends one through a real boundary (a reply of the tests'
OpenAI-compatible server, the text of an exception raised by the model's code in the scoring child, the
child's stdout, a CORE-Bench report.json, an agent's tool output) and asks for a complete run: every record,
a summary, the repaired text in the record and ``text_repaired`` counting the characters replaced.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench_runs import read_jsonl, run_dirs
from fake_openai import FakeOpenAI
from scicode_builders import write_dataset

LONE = "\udc80"  # JSON "\udc80": a lone low surrogate
FFFD = "\ufffd"
TINY_STEPS = ("1.1", "1.2", "2.1", "2.2", "3.1")
GROUND_TRUTH = {"1.1": "def add(a, b):\n    return a + b", "1.2": "def twice(a):\n    return add(a, a)",
                "2.1": "def sq(a):\n    return a * a", "2.2": "def cube(a):\n    return a * a * a",
                "3.1": "def six():\n    return 6"}


def fenced(code: str) -> str:
    return f"Here it is.\n```python\n{code}\n```\n"


def step_of(body: dict) -> str:
    """Which tiny step a request asks for (its ground truth's function header is in the prompt)."""
    prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
    asked = prompt.split("NEXT STEP", 1)[-1]
    return next(n for n, code in GROUND_TRUTH.items() if code.splitlines()[0] in asked or n in asked)


@pytest.fixture
def tiny_data(pytester, shared_data):
    return write_dataset(pytester.path, shared_data)


def run_tiny(bench, server: FakeOpenAI, tiny_data, tmp_path, *args: str):
    data, h5 = tiny_data
    cache = tmp_path / "model-cache"
    return bench("--bench=scicode", "--bench-split=validation", "--model=hostile", f"--model-base-url={server.base_url}",
                 "--model-api-key=k", f"--bench-data-dir={data}", f"--bench-h5={h5}", "--bench-allow-custom-data",
                 "--bench-mode=naive", "--bench-timeout=20", f"--bench-cache-dir={cache}", *args, subprocess=True)


def records_by_id(pytester) -> tuple[Path, dict[str, dict]]:
    [run] = run_dirs(pytester.path)
    return run, {r["id"]: r for r in read_jsonl(run / "steps.jsonl")}


def assert_complete(result, pytester) -> dict[str, dict]:
    """Every step has a record, the summary is written, and the run did not end in an internal error."""
    out = result.stdout.str() + result.stderr.str()
    assert result.ret not in (3, 4), out[-3000:]
    assert "INTERNALERROR" not in out, out[-3000:]
    run, records = records_by_id(pytester)
    assert sorted(records) == sorted(TINY_STEPS), out[-3000:]
    assert (run / "summary.json").is_file() and (run / "summary.md").is_file()
    json.loads((run / "summary.json").read_text(encoding="utf-8"))
    return records


def answering(replies: dict[str, str]):
    """A scripted model: the ground truth for every step, ``replies[step]`` for the steps named."""
    def make(body: dict) -> dict:
        step = step_of(body)
        return {"text": replies.get(step) or fenced(GROUND_TRUTH[step])}
    return make


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["one-process", "xdist"])
def test_a_lone_surrogate_in_a_model_reply(bench, pytester, tiny_data, tmp_path, xdist):
    code = f"def add(a, b):\n    # caf{LONE} \n    return a + b"
    with FakeOpenAI() as server:
        for _ in range(10):
            server.reply_with(answering({"1.1": fenced(code), "2.1": f"no code here {LONE}{LONE}"}))
        result = run_tiny(bench, server, tiny_data, tmp_path, *xdist)
    records = assert_complete(result, pytester)
    first = records["1.1"]
    assert first["status"] == "pass", first
    assert first["code"].strip() == code.replace(LONE, FFFD)  # the code scored is the repaired code, shown so
    assert first["text_repaired"] == 1
    assert records["2.1"]["status"] == "parse_error" and records["2.1"]["text_repaired"] == 2
    assert "text_repaired" not in records["1.2"]
    assert result.ret == 1  # 2.1 did not pass
