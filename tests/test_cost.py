"""Cost and budgets: a priced model's records and summaries say what the run cost (fresh calls apart from
replayed ones), an endpoint without usage leaves the cost unknown, a run budget leaves items not run, and a
cost gate fails when the run cost more than its limit.

The cost arithmetic, the cost gate and the price checks are tested in-process: SciCode's harness asks the real
client for the answers (helpers/records_kit.py), the report layer sums and judges them. The pytester runs show
each option's wiring: the price and the cost gate, the run budget (and its resume), a budget without a price,
the per-item budget, and the budget across xdist workers."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from types import SimpleNamespace

import pytest

from pytest_agentbench.core import runfile
from pytest_agentbench.core.options import OptionError, Sources, resolve
from pytest_agentbench.models.concurrency import CallsStopped
from pytest_agentbench.models.price import PRICE_OPTION, parse_price
from pytest_agentbench.pytest_plugin.distribution.budget import BudgetLink, SharedBudget, stop_text
from pytest_agentbench.pytest_plugin.options import all_options
from pytest_agentbench.pytest_plugin.run import BenchState
from pytest_agentbench.report.cost import cost_line
from pytest_agentbench.report.summary import judge

from helpers.bench_runs import read_jsonl, run_dirs, wait_for
from helpers.records_kit import generated_records, scicode, scicode_gates, scicode_settings, scicode_summary
from helpers.scicode_builders import asked_number, numbered_problems

PROBLEMS, TARGETS = numbered_problems(range(1, 5))
# 1000 prompt and 500 completion tokens at $2 / $10 per million: $0.002 + $0.005 per call
PRICE, CALL_COST = "2,10", 0.007


def right_answer(usage: bool = True):
    """Reply with f<k> returning k (a right answer), with or without token usage."""

    def make(body: dict) -> dict:
        k = asked_number(body)
        tokens = {"prompt_tokens": 1000, "completion_tokens": 500} if usage else {"prompt_tokens": None}
        return {"text": f"```python\ndef f{k}():\n    return {k}\n```", **tokens}

    return make


def scicode_args(pytester, custom_scicode, server, *extra: str) -> list[str]:
    custom_scicode.write(PROBLEMS, TARGETS)
    return custom_scicode.args(
        "--bench-mode=naive", f"--bench-cache-dir={pytester.path / 'cache'}", *extra, model=None, server=server
    )


@pytest.mark.e2e
@pytest.mark.slow
def test_a_priced_model_shows_cost_in_records_summaries_and_report(pytester, bench, custom_scicode, server):
    for _ in range(4):
        server.reply_with(right_answer())
    (pytester.path / "agentbench.yaml").write_text(
        "models:\n  - name: m\n    price: {prompt_per_mtok: 2, completion_per_mtok: 10}\n"
    )
    args = scicode_args(pytester, custom_scicode, server)
    result = bench(*args, "--bench-config=agentbench.yaml", "--bench-run-id=fresh", "--bench-set=fail_over=cost=1")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "cost: $0.0280 spent (price $2 / $10 per million prompt / completion tokens); "
            "$0.0070 per solved task (4 solved)*",
            "PASS --bench-set fail_over cost=1: cost = $0.0280 <= $1",
        ]
    )
    # the same answers replayed from the cache: nothing spent, what they would have cost shown apart
    replay = bench(
        f"--bench-replay={pytester.path / 'reports/scicode/m/fresh'}",
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


def priced_run(server, make_model, usage: bool = True):
    """The four numbered problems answered right by the real client, priced: (records, summary)."""
    for _ in range(4):
        server.reply_with(right_answer(usage))
    price = parse_price(PRICE)
    records = generated_records(make_model(name="m", price=price), PROBLEMS, price=price)
    return records, scicode_summary(records, scicode_settings(model="m", price=price.to_settings()))


def test_the_cost_gate_fails_when_the_run_cost_more(tmp_path, server, make_model):
    _, summary = priced_run(server, make_model)
    verdict = judge(summary, scicode_gates(tmp_path, fail_over=["cost=$0.02,cost_per_solved=0.01"]), None, 0)
    assert verdict.exit_code == 1
    assert [r.line() for r in verdict.gate_results] == [
        "FAIL --bench-set fail_over cost=$0.02: cost = $0.0280 > $0.02",
        "PASS --bench-set fail_over cost_per_solved=0.01: cost_per_solved = $0.0070 <= $0.01",
    ]
    assert [g["ok"] for g in summary["gates"]] == [False, True]


def test_an_endpoint_without_usage_leaves_the_cost_unknown(tmp_path, server, make_model):
    records, summary = priced_run(server, make_model, usage=False)
    for record in records:
        assert record["status"] == "pass"
        assert record["generation"]["cost_usd"] is None and record["generation"]["usage_missing"] == 1
    cost = summary["cost"]
    assert cost["total_usd"] is None and cost["per_solved_usd"] is None and cost["unknown_items"] == 4
    line = cost_line(cost)
    assert line is not None and line.startswith("cost: unknown spent"), line
    assert line.endswith("unknown for 4 item(s): 4 model replies reported no token usage"), line
    verdict = judge(summary, scicode_gates(tmp_path, fail_over=["cost=100"]), None, 0)
    assert verdict.exit_code == 1  # the gate cannot hold on an unknown cost
    assert [r.line() for r in verdict.gate_results] == [
        "FAIL --bench-set fail_over cost=100: cost is unknown: some model replies reported no token usage"
    ]


@pytest.mark.e2e
@pytest.mark.slow
def test_a_run_budget_leaves_items_not_run(pytester, bench, custom_scicode, server):
    for _ in range(4):
        server.reply_with(right_answer())
    result = bench(
        *scicode_args(
            pytester,
            custom_scicode,
            server,
            "--model=m",
            f"--model-price={PRICE}",
            "--bench-cache=off",
            "--bench-max-cost=0.01",
            "--bench-max-connections=1",  # one call at a time: the budget is seen after each (see below for more)
        )
    )
    assert result.ret == 1  # an incomplete run that ended normally
    assert len(server.requests) == 2  # $0.007, then $0.014: spent, no third call and no third item started
    run_dir = run_dirs(pytester.path)[0]
    assert [r["id"] for r in read_jsonl(run_dir / "steps.jsonl")] == ["1.1", "2.1"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["complete"] is False and summary["incomplete"]["items"] == ["3.1", "4.1"]
    assert summary["counts"] == {"pass": 2, "not_run": 2}
    assert summary["cost"]["total_usd"] == pytest.approx(2 * CALL_COST) and summary["cost"]["max_cost"] == 0.01
    stop = "run budget --bench-max-cost=$0.01 reached: no new item started after that"
    result.stdout.fnmatch_lines(
        [
            "incomplete: 2 of 4 items not run: 3.1, 4.1",
            "run counts: Total 4, Evaluated 2, Error 0, Not run 2 (*); items scored 2 of 4",
            "cost: $0.0140 spent, against a run budget of $0.01 (price $2 / $10 per million*",
            f"{stop} (the items already running finished; the cost line counts them)",
        ]
    )
    out = result.stdout.str()
    assert set(re.findall(r"\$\d+\.\d{4}", out)) == {"$0.0140", "$0.0070"}  # spent, and per solved task
    assert stop in (run_dir / "summary.md").read_text()
    # pytest's last line counts the two that ran; the plugin's, after it, the two that did not
    last = [line for line in result.stdout.lines if line.strip()]
    assert re.search(r"=+ 2 passed in .* =+", last[-2]), last[-3:]
    assert last[-1].startswith("agentbench: 2 of 4 selected items not run (not in the counts above)"), last[-3:]

    # the rest, resumed under a larger budget: this session's usage and cost apart from the reused records'
    for _ in range(2):
        server.reply_with(right_answer())
    resumed = bench(f"--bench-resume={run_dir}", "--bench-max-cost=1")
    assert resumed.ret == 0, resumed.stdout.str()
    assert len(server.requests) == 4  # two more: what this session asked
    usage = json.loads((run_dir / "summary.json").read_text())["usage"]
    assert usage["endpoint_calls"] == 4
    assert usage["this_session"]["endpoint_calls"] == 2 and usage["this_session"]["items"] == 2
    assert usage["reused"]["endpoint_calls"] == 2 and usage["reused"]["items"] == 2
    resumed.stdout.fnmatch_lines(
        [
            "agentbench: 4 done (4 pass) · elapsed * · 2 model calls, 3000 tokens, 0 cache hits",
            "agentbench: 2 records reused from the earlier session, their usage (not counted above): "
            "2 model calls, 3000 tokens, 0 cache hits",
            "cost: $0.0280 spent, $0.0140 of it in this session, against a run budget of $1 (price*",
        ]
    )
    assert "this session: 2 model calls" in (run_dir / "summary.md").read_text()


@pytest.mark.e2e
@pytest.mark.slow
def test_a_budget_needs_a_price(pytester, bench, custom_scicode, server):
    unpriced = bench(*scicode_args(pytester, custom_scicode, server, "--model=m"), "--bench-max-cost=1")
    assert unpriced.ret == 4
    unpriced.stderr.fnmatch_lines(["*--bench-max-cost needs the model's price*--model-price=PROMPT,COMPLETION*"])
    assert not server.requests


def test_a_price_is_checked(tmp_path):
    def price_of(**found) -> str:
        sources = Sources(cli={}, ini={}, env={}, invocation_dir=tmp_path, rootdir=tmp_path, file_dir=tmp_path)
        with pytest.raises(OptionError) as error:  # the plugin shows it as a usage error (exit 4)
            resolve([PRICE_OPTION], replace(sources, **found))
        return str(error.value)

    bad = price_of(cli={"model_price": "2"})
    assert "--model-price '2' is not a price; give USD per million tokens as PROMPT,COMPLETION" in bad
    (tmp_path / "agentbench.yaml").write_text("models:\n  - name: m\n    price: {prompt_per_mtok: 2}\n")
    in_file = price_of(file=runfile.load(tmp_path / "agentbench.yaml", all_options()).values_for("m", {}))
    assert (
        "file agentbench.yaml:3 '{\"prompt_per_mtok\": 2}' is not a price: it needs "
        "exactly the keys prompt_per_mtok and completion_per_mtok"
    ) in in_file


@pytest.mark.e2e
@pytest.mark.slow
def test_a_per_item_budget_stops_the_scicode_harness(pytester, bench, custom_scicode, server):
    for _ in range(4):  # each step's first reply asks for a tool call ($0.007): its budget is then spent
        server.reply(tool_calls=[("code_interpreter", {"code": "print(1)"})], prompt_tokens=1000, completion_tokens=500)
    args = scicode_args(
        pytester,
        custom_scicode,
        server,
        "--model=m",
        f"--model-price={PRICE}",
        "--bench-cache=off",
        "--bench-set=max_cost_per_item=0.005",
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


def budget_run_on_two_workers(custom_scicode, server, max_cost: str, *extra: str):
    """The written dataset under ``-n 2``, one chain at a time per worker, priced, with a run budget."""
    return custom_scicode(
        *extra,
        "--bench-mode=naive",
        "--bench-cache=off",
        f"--model-price={PRICE}",
        f"--bench-max-cost={max_cost}",
        "--bench-max-connections=2",  # one chain at a time per worker
        "-n",
        "2",
        model="m",
        server=server,
        subprocess=True,
    )


@pytest.mark.e2e
@pytest.mark.slow
def test_a_run_budget_holds_across_workers(pytester, bench, custom_scicode, server):
    custom_scicode.write(*numbered_problems(range(1, 9)))
    for _ in range(8):
        server.reply_with(right_answer())
    result = budget_run_on_two_workers(custom_scicode, server, "0.01")
    assert result.ret == 1, result.stdout.str()
    run_dir = run_dirs(pytester.path)[0]
    ran = read_jsonl(run_dir / "steps.jsonl")
    summary = json.loads((run_dir / "summary.json").read_text())
    # each worker holds the item after the one it runs (xdist needs it): at most two per worker start, and the
    # held item's step may have been generated ahead without being scored; every call is in the run's cost
    assert 2 <= len(ran) <= 4 and len(ran) <= len(server.requests) <= len(ran) + 2
    assert summary["cost"]["total_usd"] == pytest.approx(len(server.requests) * CALL_COST)
    assert summary["complete"] is False and summary["incomplete"]["not_run"] == 8 - len(ran)
    assert "run budget --bench-max-cost=$0.01 reached" in (run_dir / "summary.md").read_text()
    # one cost figure: the run's, counted once every record is in (the items running at the stop included)
    spent = [f for f in re.findall(r"\$\d+\.\d{4}", result.stdout.str())]
    assert spent and spent[0] == f"${summary['cost']['total_usd']:.4f}", result.stdout.str()[-3000:]
    assert "run budget spent" not in result.stdout.str()


class ChannelEnd:
    """One end of an in-memory stand-in for the execnet channel between the controller and a worker: what one end
    sends, the other end's callback receives at once (the transport is execnet's, not the budget's)."""

    def __init__(self) -> None:
        self.peer: ChannelEnd | None = None
        self.callback = None

    def setcallback(self, callback) -> None:
        self.callback = callback

    def send(self, message) -> None:
        assert self.peer is not None and self.peer.callback is not None
        self.peer.callback(message)


def channel() -> tuple[ChannelEnd, ChannelEnd]:
    controller, worker = ChannelEnd(), ChannelEnd()
    controller.peer, worker.peer = worker, controller
    return controller, worker


def model_run(tmp_path, max_cost: float | None = None) -> BenchState:
    """A process's state of run m, with what the budget reads: the run budget and the run's name."""
    return BenchState(
        benchmark=scicode(),
        split="validation",
        settings={},
        options={"max_cost": max_cost},  # type: ignore[arg-type]  (the options the budget reads)
        tasks=[],
        run_dir=tmp_path,
        only_bench=True,
        records_path=tmp_path / "steps.jsonl",
        is_worker=max_cost is None,
        name="m",
    )


def ask(model, k: int):
    return model.complete([{"role": "user", "content": f"def f{k}():"}])


def test_the_controller_stops_every_workers_calls_once_their_total_reaches_the_run_budget(tmp_path, server, make_model):
    """The budget across xdist workers, in-process: the controller's ``SharedBudget`` and each worker's
    ``BudgetLink`` over stand-in channels, each worker with a real client. One worker's three calls ($0.021)
    reach the $0.02 budget: both workers' clients send no new request, the other's although it spent nothing."""
    controller = SharedBudget({"m": model_run(tmp_path, max_cost=0.02)})
    price = parse_price(PRICE)
    workers = []
    for name in ("gw0", "gw1"):
        ours, theirs = channel()
        assert controller.channel_for(SimpleNamespace(gateway=SimpleNamespace(newchannel=lambda end=ours: end)))
        state, model = model_run(tmp_path / name), make_model(name="m", price=price, cache_mode="off")
        BudgetLink(theirs).attach(state, model)
        workers.append((state, model))
    (_, idle), (_, busy) = workers
    for k in (2, 3):
        server.reply_with(right_answer())
        ask(busy, k)
        assert controller.spent["m"] == pytest.approx((k - 1) * CALL_COST) and not controller.stopped
    server.reply_with(right_answer())
    ask(busy, 4)  # $0.021: the run's budget is spent
    assert controller.runs["m"].budget_stop == stop_text(0.02)
    assert "reached by the model calls of all workers" in stop_text(0.02)
    for state, model in workers:
        assert state.budget_stop == stop_text(0.02)  # no new item starts there either
        with pytest.raises(CallsStopped, match="reached by the model calls of all workers"):
            ask(model, 5)
    assert idle.spending.spent == 0 and len(server.requests) == 3


@pytest.mark.e2e
@pytest.mark.slow
def test_a_run_budget_stops_the_model_calls_of_every_worker_at_once(pytester, bench, custom_scicode, server):
    """Each worker used to count only its own calls against the run budget, so every worker could spend all of
    it. Problem 1 (the first task placed, so one worker's) is answered only once the other worker's three quick
    items are recorded, their calls having reached the $0.02 budget; the controller then stops the first worker at
    once: its call in flight finishes, and the task it holds beside problem 1 is never asked for (it was, before:
    five calls)."""
    custom_scicode.write(*numbered_problems(range(1, 9)))
    quick = right_answer()
    records = pytester.path / "reports" / "scicode" / "m" / "shared" / "steps.jsonl"

    def three_recorded() -> bool:
        return records.is_file() and len(read_jsonl(records)) >= 3

    def answer(body: dict) -> dict:
        if asked_number(body) == 1:
            # A worker sends each call's cost to the controller as the call returns, and the item's record after it
            # over the same connection: a record written says the controller heard what that item's call cost (and told
            # every worker to stop). Every call belongs to an item that runs: no step is generated ahead (the stop
            # of every worker's client, which also refuses a request made ahead, is the in-process test's above).
            wait_for(three_recorded, 120, "the other worker's three items recorded")
        return quick(body)

    for _ in range(8):
        server.reply_with(answer)
    # a cache of its own: no durations from earlier runs, so the tasks' costs are equal and go out in order
    result = budget_run_on_two_workers(
        custom_scicode,
        server,
        "0.02",
        f"--bench-cache-dir={pytester.path / 'cache'}",
        "--bench-run-id=shared",
        "--bench-set=overlap=false",
    )
    assert result.ret == 1, result.stdout.str()[-3000:]
    asked = sorted(asked_number(r["body"]) for r in server.requests)
    assert 1 in asked and len(asked) <= 4, asked  # three quick calls spent it; problem 1's was in flight
    run_dir = run_dirs(pytester.path)[0]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["cost"]["total_usd"] == pytest.approx(len(asked) * CALL_COST)
    assert "reached by the model calls of all workers" in (run_dir / "summary.md").read_text()
