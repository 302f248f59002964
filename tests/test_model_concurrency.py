"""Model calls in flight, not processes: the chains of the problems a process holds are generated concurrently
(--bench-max-connections), with the same prompts, cache entries and records as one chain at a time; a rate limit
lowers the calls in flight and is retried; the run budget stops every chain's next request at once, and what was
generated ahead but never scored is in the run's cost.

The model is the tests' scripted OpenAI-compatible server on 127.0.0.1 driven by the real openai SDK."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from pytest_agentbench.core.records import comparable
from pytest_agentbench.models.client import OpenAIModel
from pytest_agentbench.models.concurrency import CallGate, CallsStopped, share

from helpers.bench_runs import read_jsonl, run_dirs
from helpers.fake_openai import FakeOpenAI
from helpers.scicode_builders import PROBLEMS, custom_data_args, write_dataset

NEXT_STEP = "NEXT STEP - PROBLEM STEP AND FUNCTION HEADER"
STEPS = {s["step_number"]: s for p in PROBLEMS for s in p["sub_steps"]}
LATENCY = 0.4  # seconds the server takes per reply: calls of concurrent chains overlap by this much


# ---- the gate itself ---------------------------------------------------------------------------------------------
def test_the_gate_bounds_calls_in_flight_lowers_them_after_a_rate_limit_and_stops():
    gate = CallGate(3, cool_down=0.3)
    seen: list[int] = []
    together = threading.Barrier(3)  # each call holds its slot until three are in flight

    def call() -> None:
        with gate.slot():
            seen.append(gate.in_flight)
            together.wait(timeout=60)

    threads = [threading.Thread(target=call) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert max(seen) == 3 and gate.peak == 3 and gate.in_flight == 0
    gate.rate_limited(wait=0.0)
    gate.rate_limited(wait=0.0)
    assert gate.allowed == 1 and gate.rate_limits == 2  # halved twice: 3 -> 1 -> 1 (never 0)
    time.sleep(0.35)
    with gate.slot():  # after a quiet cool-down the bound doubles back
        pass
    assert gate.allowed == 2
    gate.stop("the budget is spent")
    with pytest.raises(CallsStopped, match="the budget is spent"), gate.slot():
        pass
    assert share(16, 3) == 5 and share(2, 4) == 1


def test_a_rate_limit_lowers_the_calls_in_flight_and_every_call_still_succeeds():
    """Four concurrent calls, two answered 429 with Retry-After: the retries go out one at a time (the bound was
    halved twice), each call gets its reply, and the retries are counted on it."""
    with FakeOpenAI() as server:
        server.delay = LATENCY
        server.fail(times=2, status=429, retry_after=0.1)
        for k in range(4):
            server.reply(f"```python\ndef f():\n    return {k}\n```")
        model = OpenAIModel("m", base_url=server.base_url, api_key="k", cache_mode="off", max_connections=4)
        replies: list = []

        def ask(k: int) -> None:
            replies.append(model.complete([{"role": "user", "content": f"question {k}"}]))

        threads = [threading.Thread(target=ask, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        arrivals = sorted(r["at"] for r in server.requests)
    assert len(replies) == 4 and all(r.text for r in replies)
    assert sum(r.request_retries for r in replies) == 2 and model.gate.rate_limits == 2
    assert overlap(arrivals[:4]) == 4  # the first four went out together
    retries = arrivals[4:]
    assert len(retries) == 2 and overlap(retries) == 1, retries  # then one at a time


def overlap(arrivals: list[float]) -> int:
    """The most requests in flight at once, each taking LATENCY from its arrival."""
    return max(sum(1 for a in arrivals if a <= t < a + LATENCY) for t in arrivals)


# ---- a run -------------------------------------------------------------------------------------------------------
def asked_step(body: dict) -> dict:
    prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
    after = prompt.split(NEXT_STEP, 1)[1]
    [number] = [n for n in STEPS if f"step {n}" in after]
    return STEPS[number]


def ground_truth(body: dict) -> dict:
    """Naive: the asked step's ground truth. Tool use: first a code_interpreter call, then the answer."""
    step = asked_step(body)
    last = body["messages"][-1]
    if body.get("tools") and last["role"] != "tool" and body.get("tool_choice") != "none":
        code = step["ground_truth_code"] + "\nprint('ok')"  # (the call's id is the step's: the same in every run)
        return {"tool_calls": [("code_interpreter", {"code": code}, f"call_{step['step_number']}")]}
    return {"text": f"```python\n{step['ground_truth_code']}\n```", "prompt_tokens": 1000, "completion_tokens": 500}


def run_args(pytester, shared_data, server, cache: Path, *extra: str) -> tuple[str, ...]:
    data, h5 = write_dataset(pytester.path, shared_data)
    return tuple(custom_data_args(data, h5, f"--bench-cache-dir={cache}", *extra, model="m", server=server))


def entries(cache: Path) -> dict[str, dict]:
    """The response cache's entries, key -> reply (its latency aside: how long the call took)."""
    out = {}
    for path in sorted((cache / "responses-v1").rglob("*.json")):
        reply = json.loads(path.read_text())
        reply.pop("latency")
        out[path.stem] = reply
    return out


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["naive", "tool_use"])
def test_concurrent_chains_ask_the_same_prompts_as_one_chain_at_a_time(pytester, bench, shared_data, mode):
    """The tiny dataset's three problems, generated one chain at a time and sixteen at once: the same cache
    entries (same keys: byte-identical requests) and the same records; only the second overlaps its calls."""
    runs = {}
    with FakeOpenAI() as server:  # one server: its URL is part of the cache key
        server.delay = LATENCY
        for _ in range(40):
            server.reply_with(ground_truth)
        for connections in (1, 16):
            before = len(server.requests)
            cache = pytester.path / f"cache-{connections}"
            result = bench(
                *run_args(pytester, shared_data, server, cache, f"--bench-mode={mode}"),
                f"--bench-max-connections={connections}",
                f"--bench-run-id=c{connections}",
            )
            assert result.ret == 0, result.stdout.str()[-3000:]
            arrivals = [r["at"] for r in server.requests[before:]]
            records = read_jsonl(pytester.path / "reports" / "scicode" / "m" / f"c{connections}" / "steps.jsonl")
            runs[connections] = (entries(cache), records, overlap(arrivals))
    (serial, serial_records, serial_peak), (concurrent, concurrent_records, peak) = runs[1], runs[16]
    calls = 5 if mode == "naive" else 10
    assert len(serial) == calls and serial == concurrent
    assert serial_peak == 1 and peak == 3  # one chain at a time; then the three problems' chains at once

    def same(records: list[dict]) -> list[dict]:
        return sorted(({k: v for k, v in comparable(r).items() if k != "generation"} for r in records), key=str)

    assert same(serial_records) == same(concurrent_records)
    assert all(r["status"] == "pass" for r in concurrent_records) and len(concurrent_records) == 5
    if mode == "tool_use":
        assert all(r["generation"]["tool_calls"] == 1 for r in concurrent_records)


@pytest.mark.e2e
@pytest.mark.slow
def test_rate_limited_calls_of_concurrent_chains_are_retried_and_no_item_errs(pytester, bench, shared_data):
    with FakeOpenAI() as server:
        server.delay = LATENCY
        server.fail(times=3, status=429, retry_after=0.1)
        for _ in range(20):
            server.reply_with(ground_truth)
        pytester.makeini("[pytest]\nagentbench_model_retry_delay = 0\n")
        result = bench(*run_args(pytester, shared_data, server, pytester.path / "cache", "--bench-mode=naive"))
    assert result.ret == 0, result.stdout.str()[-3000:]
    [run] = run_dirs(pytester.path)
    records = read_jsonl(run / "steps.jsonl")
    assert [r["status"] for r in records] == ["pass"] * 5
    assert sum(r["generation"]["request_retries"] for r in records) == 3  # counted where they happened


@pytest.mark.e2e
@pytest.mark.slow
def test_the_run_budget_stops_every_chain_at_once_and_counts_what_was_generated_ahead(pytester, bench, shared_data):
    """Three chains start together (1.1, 2.1, 3.1 in flight, $0.007 each); the first reply spends the $0.005
    budget, so no chain sends another request and no item starts after 1.1. 2.1 and 3.1 were generated and paid
    for but never scored: the run's cost counts them."""
    with FakeOpenAI() as server:
        server.delay = LATENCY
        for _ in range(20):
            server.reply_with(ground_truth)
        result = bench(
            *run_args(pytester, shared_data, server, pytester.path / "cache", "--bench-mode=naive"),
            "--model-price=2,10",
            "--bench-cache=off",
            "--bench-max-cost=0.005",
        )
        requests = len(server.requests)
    assert result.ret == 1, result.stdout.str()[-3000:]
    assert requests == 3  # without the stop the chains would go on to 1.2 and 2.2
    [run] = run_dirs(pytester.path)
    assert {r["id"]: r["status"] for r in read_jsonl(run / "steps.jsonl")} == {"1.1": "pass"}
    summary = json.loads((run / "summary.json").read_text())
    assert summary["incomplete"]["items"] == ["1.2", "2.1", "2.2", "3.1"]
    cost = summary["cost"]
    assert cost["unscored"] == {"steps": 2, "model_calls": 2, "cost_usd": pytest.approx(0.014)}
    assert cost["total_usd"] == pytest.approx(0.021)
    result.stdout.fnmatch_lines(["cost: $0.0210 spent*2 step(s) generated ahead and never scored cost $0.0140*"])


# ---- the chains of one process -------------------------------------------------------------------------------------
def chain_problem(pid: str, steps: int) -> dict:
    return {"problem_id": pid, "sub_steps": [{"step_number": f"{pid}.{k + 1}"} for k in range(steps)]}


def test_a_chain_stops_at_a_model_error_and_a_queued_chain_is_run_where_it_is_needed():
    """One thread for two chains: the second, still queued when its step is wanted, is generated in the waiting
    thread; the first stops at its model error, leaving the step after it to the scoring loop (NotAhead)."""
    from concurrent.futures import Future

    from pytest_agentbench.benchmarks.scicode.chains import ChainRunner, NotAhead
    from pytest_agentbench.benchmarks.scicode.solvers import Generated

    release = threading.Event()
    asked: list[tuple[str, int, tuple[str, ...], str]] = []

    def solve(problem: dict, index: int, previous: list[str], attempt: int) -> Generated:
        number = problem["sub_steps"][index]["step_number"]
        asked.append((number, attempt, tuple(previous), threading.current_thread().name))
        if number == "A.1":
            release.wait(5)  # the only chain thread is busy with A while B is wanted
        if number == "A.2":
            return Generated(None, "model_error", "HTTP 500")
        return Generated(f"code {number}")

    memo: dict = {}
    runner = ChainRunner(1, solve, {}, memo, threading.RLock())
    a, b = chain_problem("A", 3), chain_problem("B", 2)
    runner.start(a, 1, 2)
    runner.start(b, 1, 1)
    wanted = memo[("B", 1, 1)]
    assert isinstance(wanted, Future)
    assert runner.wait(("B", 1, 1), wanted).code == "code B.2"  # run here: B's chain had not begun
    here = threading.current_thread().name
    assert [(n, p, t == here) for n, _, p, t in asked if n.startswith("B")] == [
        ("B.1", (), True),
        ("B.2", ("code B.1",), True),
    ]
    release.set()
    third = memo[("A", 2, 1)]
    with pytest.raises(NotAhead):
        runner.wait(("A", 2, 1), third)
    assert ("A", 2, 1) not in memo  # the scoring loop generates it when its item starts
    assert [n for n, *_ in asked if n.startswith("A")] == ["A.1", "A.2"]
    runner.close()
