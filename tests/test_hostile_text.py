"""Text that is not valid UTF-8 never ends a run: it is repaired where it enters.

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

from helpers.bench_runs import read_jsonl, run_dirs
from helpers.fake_openai import FakeOpenAI

LONE = "\udc80"  # JSON "\udc80": a lone low surrogate
FFFD = "\ufffd"
TINY_STEPS = ("1.1", "1.2", "2.1", "2.2", "3.1")
GROUND_TRUTH = {
    "1.1": "def add(a, b):\n    return a + b",
    "1.2": "def twice(a):\n    return add(a, a)",
    "2.1": "def sq(a):\n    return a * a",
    "2.2": "def cube(a):\n    return a * a * a",
    "3.1": "def six():\n    return 6",
}


# ---- the repair itself -------------------------------------------------------------------------------------
def test_repair_replaces_lone_surrogates_and_nothing_else():
    from pytest_agentbench.core.text import decode, repair, repair_value

    assert repair(f"caf{LONE}\x1b[31m\u00e9\u0301") == (f"caf{FFFD}\x1b[31m\u00e9\u0301", 1)  # no normalisation
    assert repair("\ud83d\ude00") == (FFFD + FFFD, 2)  # a pair spelled as two lone halves is two lone halves
    assert repair("plain") == ("plain", 0)
    assert decode(b"ok \x80\xff \xef\xbf\xbd") == (f"ok {FFFD}{FFFD} {FFFD}", 2)  # an own U+FFFD is not counted
    value, count = repair_value({f"k{LONE}": [LONE, 1, (LONE, None)], "n": 2.5})
    assert value == {f"k{FFFD}": [FFFD, 1, (FFFD, None)], "n": 2.5} and count == 3
    clean = {"a": ["b"]}
    assert repair_value(clean) == (clean, 0) and repair_value(clean)[0] is clean


def test_a_reply_is_repaired_where_it_is_parsed_and_its_count_survives_the_cache():
    from pytest_agentbench.models.client import Completion, parse_chat_reply

    # what the SDK hands over after parsing {"content": "x\udc80", ... "name": "n\udc80"}
    reply = {
        "choices": [
            {
                "message": {
                    "content": f"x{LONE}",
                    "tool_calls": [{"id": "c1", "function": {"name": f"n{LONE}", "arguments": "{}"}}],
                },
                "finish_reason": "stop",
            }
        ]
    }
    completion = parse_chat_reply(reply)
    assert completion.text == f"x{FFFD}" and completion.tool_calls[0]["name"] == f"n{FFFD}"
    assert completion.text_repaired == 2
    json.dumps(completion.to_record(), ensure_ascii=False).encode("utf-8")  # a cache entry can be written
    again = Completion.from_record(completion.to_record())
    assert again.text == completion.text and again.text_repaired == completion.text_repaired and again.cached


def fenced(code: str) -> str:
    return f"Here it is.\n```python\n{code}\n```\n"


def step_of(body: dict) -> str:
    """Which tiny step a request asks for (its ground truth's function header is in the prompt)."""
    prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
    asked = prompt.split("NEXT STEP", 1)[-1]
    return next(n for n, code in GROUND_TRUTH.items() if code.splitlines()[0] in asked or n in asked)


@pytest.fixture
def tiny_data(custom_scicode):
    custom_scicode.write()
    return custom_scicode


def run_tiny(bench, server: FakeOpenAI, tiny_data, tmp_path, *args: str):
    cache = tmp_path / "model-cache"
    return tiny_data(
        "--bench-mode=naive",
        "--bench-timeout=20",
        f"--bench-cache-dir={cache}",
        *args,
        model="hostile",
        server=server,
        subprocess=True,
    )


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
@pytest.mark.e2e
@pytest.mark.slow
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


@pytest.mark.parametrize(
    "reply,status,in_message",
    [
        # the exception text of the model's function (raised in the scoring child) travels into the failure message
        (fenced("def add(a, b):\n    raise ValueError('caf' + chr(0xdc80))"), "fail", f"ValueError: caf{FFFD}"),
        # undecodable bytes on the child's stdout
        (
            fenced(
                "def add(a, b):\n    out = __import__('sys').stdout\n    out.buffer.write(b'caf\\x80\\xff\\n')\n"
                "    out.flush()\n    return a + b"
            ),
            "pass",
            "",
        ),
    ],
    ids=["exception-text", "stdout"],
)
@pytest.mark.e2e
@pytest.mark.slow
def test_hostile_text_from_the_scoring_child(bench, pytester, tiny_data, tmp_path, reply, status, in_message):
    with FakeOpenAI() as server:
        for _ in range(10):
            server.reply_with(answering({"1.1": reply}))
        result = run_tiny(bench, server, tiny_data, tmp_path)
    records = assert_complete(result, pytester)
    first = records["1.1"]
    assert first["status"] == status, first
    assert in_message in first["message"]
    assert first["text_repaired"] >= 1
    if status == "pass":
        assert first["stdout"] == f"caf{FFFD}{FFFD}\n" and first["text_repaired"] == 2


CLIENT_CONFTEST = '''
import pytest

class Hostile:
    """A user's own client: a lone surrogate in the code of 1.1, in the text of the exception it raises for 2.1."""
    name = "hostile-client"
    is_oracle = False

    def answer_step(self, problem, index, previous_code):
        step = problem["sub_steps"][index]
        if step["step_number"] == "2.1":
            raise ConnectionError("the service said caf" + chr(0xdc80))
        code = step["ground_truth_code"]
        if step["step_number"] == "1.1":
            code = code.replace("return", "# caf" + chr(0xdc80) + chr(0xdc81) + "\\n    return")
        return code

@pytest.fixture(scope="session")
def bench_model():
    return Hostile()
'''


@pytest.mark.e2e
@pytest.mark.slow
def test_hostile_text_from_a_users_own_client(bench, pytester, tiny_data):
    pytester.makeconftest(CLIENT_CONFTEST)
    result = tiny_data("--bench-timeout=20", model="hostile-client", subprocess=True)
    records = assert_complete(result, pytester)
    assert records["1.1"]["status"] == "pass" and f"# caf{FFFD}{FFFD}" in records["1.1"]["code"]
    assert records["1.1"]["text_repaired"] == 2
    error = records["2.1"]
    assert error["status"] == "model_error" and f"caf{FFFD}" in error["message"], error
    assert error["text_repaired"] == 1


# ---- CORE-Bench: an agent's tool output and its report.json ----------------------------------------------
def core_bench_answers() -> tuple[str, dict]:
    from pytest_agentbench.benchmarks.corebench import dataset

    from helpers.bench_runs import SHARED_DATA

    task = next(t for t in dataset.load_split(SHARED_DATA, "train") if t["capsule_id"] == CAPSULE)
    return CAPSULE, task["results"][0]


CAPSULE = "capsule-7038571"


@pytest.mark.e2e
@pytest.mark.slow
def test_hostile_text_in_a_core_bench_report_and_tool_output(pytester, tmp_path, monkeypatch, shared_data):
    import base64

    from helpers.capsule_factory import build_capsule_archive

    monkeypatch.setenv("AGENTBENCH_DATA_DIR", str(shared_data))
    capsule, answers = core_bench_answers()
    first = next(iter(answers))
    # report.json written by the agent's own code: json.dump escapes the lone surrogate as "\udc80"
    maker = (
        f"import json\nanswers = json.loads({json.dumps(json.dumps(answers))})\n"
        f"answers[{first!r}] = 'caf' + chr(0xdc80)\njson.dump(answers, open('report.json', 'w'))\n"
    )
    encoded = base64.b64encode(maker.encode()).decode()
    staged = tmp_path / "staged"
    build_capsule_archive(staged, capsule)
    with FakeOpenAI() as server:
        server.reply(tool_calls=[("bash", {"command": "printf 'caf\\200\\377\\n'"})])  # undecodable tool output
        server.reply(
            tool_calls=[
                (
                    "bash",
                    {"command": f"echo {encoded} | base64 -d > /tmp/mk.py && python3 /tmp/mk.py && cat report.json"},
                )
            ]
        )
        # no submit (the submit tool would write report.json itself): the agent's steps run out
        result = pytester.runpytest_subprocess(
            "--bench=core-bench",
            "--bench-split=train",
            f"--bench-ids={capsule}",
            "--model=agent-model",
            f"--model-base-url={server.base_url}",
            "--model-api-key=x",
            "--bench-cache=off",
            "--bench-set=model_max_retries=0",
            "--bench-difficulty=hard",
            f"--bench-capsules-dir={staged}",
            "--bench-env=host",
            "--bench-set=agent_steps=2",
            f"--bench-report-dir={tmp_path / 'reports'}",
            "--bench-run-id=hostile",
            "-p",
            "no:cacheprovider",
        )
        requests = [r for r in server.requests if r["path"].endswith("/chat/completions")]
    out = result.stdout.str() + result.stderr.str()
    assert result.ret not in (3, 4) and "INTERNALERROR" not in out, out[-3000:]
    run = tmp_path / "reports" / "core-bench" / "agent-model" / "hostile"
    [record] = read_jsonl(run / "records.jsonl")
    assert (run / "summary.json").is_file()
    tool_output = [m["content"] for m in requests[1]["body"]["messages"] if m["role"] == "tool"][0]
    assert f"caf{FFFD}{FFFD}" in tool_output  # what the model was shown: the repaired output
    assert record["report_source"].endswith("report.json"), record
    assert record["status"] == "fail"  # the repaired answer is not the reference
    assert record["text_repaired"] == 3, record  # two bytes of tool output, one character of the report
    submission = json.loads((run / "artifacts" / capsule / "submission.json").read_text(encoding="utf-8"))
    assert submission["report"][first] == f"caf{FFFD}"
