"""Cost and budgets: a priced model's records and summaries say what the run cost (fresh calls apart from
replayed ones), an endpoint without usage leaves the cost unknown, a run budget leaves items not run, and a
cost gate fails when the run cost more than its limit."""

from __future__ import annotations

import json
import re

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
# 1000 prompt and 500 completion tokens at $2 / $10 per million: $0.002 + $0.005 per call
PRICE, CALL_COST = "2,10", 0.007


def right_answer(usage: bool = True):
    """Reply with f<k> returning k (a right answer), with or without token usage."""

    def make(body: dict) -> dict:
        k = re.findall(r"def f(\d+)\(\)", json.dumps(body["messages"]))[-1]
        tokens = {"prompt_tokens": 1000, "completion_tokens": 500} if usage else {"prompt_tokens": None}
        return {"text": f"```python\ndef f{k}():\n    return {k}\n```", **tokens}

    return make


@pytest.fixture
def server():
    with FakeOpenAI() as fake:
        yield fake


def scicode_args(pytester, shared_data, server, *extra: str) -> tuple[str, ...]:
    data, h5 = write_dataset(pytester.path, shared_data, targets=TARGETS, problems=PROBLEMS)
    return (
        "--bench=scicode",
        "--bench-split=validation",
        f"--model-base-url={server.base_url}",
        "--model-api-key=k",
        "--bench-mode=naive",
        f"--bench-data-dir={data}",
        f"--bench-h5={h5}",
        "--bench-allow-custom-data",
        f"--bench-cache-dir={pytester.path / 'cache'}",
        *extra,
    )


def test_a_priced_model_shows_cost_in_records_summaries_and_report(pytester, bench, shared_data, server):
    for _ in range(4):
        server.reply_with(right_answer())
    (pytester.path / "agentbench.yaml").write_text(
        "models:\n  - name: m\n    price: {prompt_per_mtok: 2, completion_per_mtok: 10}\n"
    )
    args = scicode_args(pytester, shared_data, server)
    result = bench(*args, "--bench-config=agentbench.yaml", "--bench-run-id=fresh", "--bench-fail-over=cost=1")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "cost: $0.0280 spent (price $2 / $10 per million prompt / completion tokens); "
            "$0.0070 per solved task (4 solved)*",
            "PASS --bench-fail-over cost=1: cost = $0.0280 <= $1",
        ]
    )
    # the same answers replayed from the cache: nothing spent, what they would have cost shown apart
    replay = bench(
        "--bench-replay",
        str(pytester.path / "reports/scicode/m/fresh"),
        "--bench-run-id=replayed",
        f"--model-base-url={server.base_url}",
        f"--bench-cache-dir={pytester.path / 'cache'}",
    )
    assert replay.ret == 0, replay.stdout.str()
    fresh, replayed = run_dirs(pytester.path)
    for record in read_jsonl(fresh / "steps.jsonl"):
        generation = record["generation"]
        assert (generation["prompt_tokens"], generation["completion_tokens"]) == (1000, 500)
        assert generation["cost_usd"] == pytest.approx(CALL_COST) and generation["replayed_cost_usd"] == 0
    summary = json.loads((fresh / "summary.json").read_text())
    cost = summary["cost"]
    assert cost["total_usd"] == pytest.approx(4 * CALL_COST) and cost["per_solved_usd"] == pytest.approx(CALL_COST)
    assert cost["price"] == {"prompt_per_mtok": 2.0, "completion_per_mtok": 10.0} and cost["solved"] == 4
    assert cost["per_task"] == {str(k): pytest.approx(CALL_COST) for k in range(1, 5)}
    assert [i["cost_usd"] for i in summary["items"]] == [pytest.approx(CALL_COST)] * 4
    assert summary["settings"]["price"] == {"prompt_per_mtok": 2.0, "completion_per_mtok": 10.0}
    markdown = (fresh / "summary.md").read_text()
    assert "## Cost" in markdown and "| 3 | $0.0070 | 3.1 $0.0070 |" in markdown
    page = (fresh / "report.html").read_text()
    assert "<h2>Cost</h2>" in page and "$0.0280 spent" in page

    again = json.loads((replayed / "summary.json").read_text())["cost"]
    assert again["total_usd"] == 0 and again["replayed_usd"] == pytest.approx(4 * CALL_COST)
    assert {r["generation"]["cost_usd"] for r in read_jsonl(replayed / "steps.jsonl")} == {0}
    replay.stdout.fnmatch_lines(["cost: $0.0000 spent*replayed calls would have cost $0.0280*"])


def test_the_cost_gate_fails_when_the_run_cost_more(pytester, bench, shared_data, server):
    for _ in range(4):
        server.reply_with(right_answer())
    result = bench(
        *scicode_args(
            pytester,
            shared_data,
            server,
            "--model=m",
            f"--model-price={PRICE}",
            "--bench-cache=off",
            "--bench-fail-over=cost=$0.02,cost_per_solved=0.01",
        )
    )
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "FAIL --bench-fail-over cost=$0.02: cost = $0.0280 > $0.02",
            "PASS --bench-fail-over cost_per_solved=0.01: cost_per_solved = $0.0070 <= $0.01",
        ]
    )
    gates = json.loads((run_dirs(pytester.path)[0] / "summary.json").read_text())["gates"]
    assert [g["ok"] for g in gates] == [False, True]


def test_an_endpoint_without_usage_leaves_the_cost_unknown(pytester, bench, shared_data, server):
    for _ in range(4):
        server.reply_with(right_answer(usage=False))
    result = bench(
        *scicode_args(
            pytester,
            shared_data,
            server,
            "--model=m",
            f"--model-price={PRICE}",
            "--bench-cache=off",
            "--bench-fail-over=cost=100",
        )
    )
    assert result.ret == 1  # the gate cannot hold on an unknown cost
    result.stdout.fnmatch_lines(
        [
            "cost: unknown spent*unknown for 4 item(s): 4 model replies reported no token usage",
            "FAIL --bench-fail-over cost=100: cost is unknown: some model replies reported no token usage",
        ]
    )
    run_dir = run_dirs(pytester.path)[0]
    for record in read_jsonl(run_dir / "steps.jsonl"):
        assert record["status"] == "pass"
        assert record["generation"]["cost_usd"] is None and record["generation"]["usage_missing"] == 1
    cost = json.loads((run_dir / "summary.json").read_text())["cost"]
    assert cost["total_usd"] is None and cost["per_solved_usd"] is None and cost["unknown_items"] == 4


def test_a_run_budget_leaves_items_not_run(pytester, bench, shared_data, server):
    for _ in range(4):
        server.reply_with(right_answer())
    result = bench(
        *scicode_args(
            pytester,
            shared_data,
            server,
            "--model=m",
            f"--model-price={PRICE}",
            "--bench-cache=off",
            "--bench-max-cost=0.01",
        )
    )
    assert result.ret == 1  # an incomplete run that ended normally
    assert len(server.requests) == 2  # $0.007, then $0.014: spent, no third item started
    run_dir = run_dirs(pytester.path)[0]
    assert [r["id"] for r in read_jsonl(run_dir / "steps.jsonl")] == ["1.1", "2.1"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["complete"] is False and summary["incomplete"]["items"] == ["3.1", "4.1"]
    assert summary["counts"] == {"pass": 2, "not_run": 2}
    assert summary["cost"]["total_usd"] == pytest.approx(2 * CALL_COST) and summary["cost"]["max_cost"] == 0.01
    result.stdout.fnmatch_lines(
        [
            "incomplete: 2 of 4 items not run: 3.1, 4.1",
            "run budget spent: $0.0140 of --bench-max-cost=$0.01; no new item started",
        ]
    )
    assert (
        "run budget spent: $0.0140 of --bench-max-cost=$0.01; no new item started"
        in (run_dir / "summary.md").read_text()
    )


def test_a_budget_needs_a_price_and_a_price_is_checked(pytester, bench, shared_data, server):
    args = scicode_args(pytester, shared_data, server, "--model=m")
    unpriced = bench(*args, "--bench-max-cost=1")
    assert unpriced.ret == 4
    unpriced.stderr.fnmatch_lines(["*--bench-max-cost needs the model's price*--model-price=PROMPT,COMPLETION*"])
    bad = bench(*args, "--model-price=2")
    assert bad.ret == 4
    bad.stderr.fnmatch_lines(["*--model-price '2' is not a price; give USD per million tokens as PROMPT,COMPLETION*"])
    (pytester.path / "agentbench.yaml").write_text("models:\n  - name: m\n    price: {prompt_per_mtok: 2}\n")
    in_file = bench(*args, "--bench-config=agentbench.yaml")
    assert in_file.ret == 4
    in_file.stderr.fnmatch_lines(
        [
            "*file agentbench.yaml:3 '{\"prompt_per_mtok\": 2}' is not a price: it needs "
            "exactly the keys prompt_per_mtok and completion_per_mtok*"
        ]
    )
    assert not server.requests


def test_a_per_item_budget_stops_the_scicode_harness(pytester, bench, shared_data, server):
    for _ in range(4):  # each step's first reply asks for a tool call ($0.007): its budget is then spent
        server.reply(tool_calls=[("code_interpreter", {"code": "print(1)"})], prompt_tokens=1000, completion_tokens=500)
    args = scicode_args(
        pytester,
        shared_data,
        server,
        "--model=m",
        f"--model-price={PRICE}",
        "--bench-cache=off",
        "--bench-max-cost-per-item=0.005",
        "--bench-max-errors=0",
        "--bench-ids=1,2",
    )
    result = bench(*[a for a in args if a != "--bench-mode=naive"], "--bench-mode=tool_use")
    assert result.ret == 0, result.stdout.str()  # the error gate holds: budget is a verdict, not an error
    assert len(server.requests) == 2
    records = read_jsonl(run_dirs(pytester.path)[0] / "steps.jsonl")
    assert [r["status"] for r in records] == ["budget", "budget"]
    assert "the harness spent $0.0070 of its budget of $0.005" in records[0]["message"]
    assert records[0]["generation"]["tool_calls"] == 1


def test_a_run_budget_holds_across_workers(pytester, bench, shared_data, server):
    problems = [
        problem(
            str(k),
            [step(f"{k}.1", f"def f{k}():\n    return {k}", [CLOSE.format(call=f"f{k}()")], header=f"def f{k}():")],
        )
        for k in range(1, 9)
    ]
    data, h5 = write_dataset(
        pytester.path, shared_data, targets={f"{k}.1": [k] for k in range(1, 9)}, problems=problems
    )
    for _ in range(8):
        server.reply_with(right_answer())
    result = bench(
        "--bench=scicode",
        "--bench-split=validation",
        "--model=m",
        f"--model-base-url={server.base_url}",
        "--model-api-key=k",
        "--bench-mode=naive",
        f"--bench-data-dir={data}",
        f"--bench-h5={h5}",
        "--bench-allow-custom-data",
        "--bench-cache=off",
        f"--model-price={PRICE}",
        "--bench-max-cost=0.01",
        "-n",
        "2",
        subprocess=True,
    )
    assert result.ret == 1, result.stdout.str()
    run_dir = run_dirs(pytester.path)[0]
    ran = read_jsonl(run_dir / "steps.jsonl")
    summary = json.loads((run_dir / "summary.json").read_text())
    # each worker holds the item after the one it runs (xdist needs it): at most two per worker start
    assert 2 <= len(ran) <= 4 and len(server.requests) == len(ran)
    assert summary["complete"] is False and summary["incomplete"]["not_run"] == 8 - len(ran)
    assert "run budget spent" in (run_dir / "summary.md").read_text()
