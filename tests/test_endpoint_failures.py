"""A broken endpoint or a refused key is found fast and said plainly, and retries are counted and bounded.

A scripted server answering as LiteLLM's proxy does (tests/helpers/fake_openai.py: 400 "No connected db." for a key it
cannot check, 500 with a JSON error body, 429 with Retry-After) stands in for a gateway on 127.0.0.1. The
model preflight sends one request shaped like the run's first and stops the run (exit 4, the endpoint's own
message quoted) on 400/401/403/404/5xx that a retry does not clear, even when the cache is warm; the client
counts every retry into the record (also when the call finally fails) and spends at most
--bench-set model_max_retry_time on them; a run whose endpoint dies midway stops after N model errors in a row counted
across workers.
"""

from __future__ import annotations

import json
import time

import pytest

from pytest_agentbench.core.errors import ConfigError
from pytest_agentbench.core.options import Settings
from pytest_agentbench.models.client import ModelError
from pytest_agentbench.models.preflight import FirstCall, preflight
from pytest_agentbench.models.retrytime import item_retry_time

from helpers.bench_runs import read_jsonl, run_dirs
from helpers.fake_openai import FakeOpenAI

NO_DB = "No connected db."
LITELLM_500 = "litellm.InternalServerError"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "code_interpreter",
            "description": "run Python",
            "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
        },
    }
]
SHAPED = FirstCall([{"role": "system", "content": "be brief"}, {"role": "user", "content": "step 1.1"}], TOOLS)


def opts(server: FakeOpenAI, **values) -> Settings:
    base = {
        "model": "gpt-x",
        "model_base_url": server.base_url,
        "model_api_key": "sk-refused",
        "model_protocol": "chat",
        "model_params": None,
        "model_timeout": 600.0,
        "model_max_retries": 6,
        "model_retry_delay": 1.0,
        "cache_dir": "/nonexistent-cache",
        "cache": "rw",
        "model_preflight": "on",
    }
    return Settings({**base, **values})


def refused(server: FakeOpenAI, first_call: FirstCall | None = None, **values) -> str:
    with pytest.raises(ConfigError) as error:
        preflight(opts(server, **values), first_call)
    assert len(posts(server)) <= 2  # the probe and at most one retry, not the run's retries
    return str(error.value)


def posts(server: FakeOpenAI) -> list[dict]:
    return [p for p in server.preflights if "body" in p]


# ---- the preflight --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("protocol", ["chat", "responses"])
def test_a_refused_key_answered_with_400_stops_the_preflight(server, protocol):
    server.gateway_bad_key = True
    error = refused(server, SHAPED, model_protocol=protocol)
    assert "answered HTTP 400 to the run's first request for model 'gpt-x'" in error
    assert repr(NO_DB) in error and "--model-api-key" in error  # the endpoint's words, and the likely fix
    # the request was the run's: same protocol, its messages and tools; once capped (the fake counts it a
    # preflight), once exactly as the run sends it (an item request to the fake)
    path = "/v1/" + ("chat/completions" if protocol == "chat" else "responses")
    [capped], [exact] = posts(server), server.requests
    assert capped["path"] == exact["path"] == path
    assert capped["body"]["tools"] and (capped["body"].get("messages") or capped["body"].get("input"))[1] == {
        "role": "user",
        "content": "step 1.1",
    }
    cap = "max_tokens" if protocol == "chat" else "max_output_tokens"
    assert {k: v for k, v in capped["body"].items() if k != cap} == exact["body"] and cap not in exact["body"]


def test_an_always_500_endpoint_stops_the_preflight_after_one_retry(server):
    server.gateway_status = 500
    error = refused(server)
    assert (
        "answered HTTP 500 to a 1-token request for model 'gpt-x' (Chat Completions), and again when retried" in error
    )
    assert LITELLM_500 in error and "healthy" in error
    assert len(posts(server)) == 2


def test_a_500_that_one_retry_clears_passes_the_preflight(server):
    server.gateway_error(times=1, status=500, retry_after=0, preflights=True)
    note = preflight(opts(server), SHAPED)
    assert (
        "answered the run's first request for gpt-x (Chat Completions, 1 tools) when retried (HTTP 500 first)" in note
    )
    assert len(posts(server)) == 2


def test_a_rate_limited_preflight_passes(server, real_retry_waits):
    server.gateway_error(times=1, status=429, retry_after=30, preflights=True)
    started = time.monotonic()
    assert "answered HTTP 429" in preflight(opts(server))
    assert len(posts(server)) == 1  # not retried: the run's retries deal with a rate limit
    assert time.monotonic() - started < 30  # nor was the server's Retry-After of 30 s waited out


# ---- the client: retries counted where they happen, bounded in time ----------------------------------------------
def model(make_model, **kwargs):
    """The client with six retries that do not wait, and no cache."""
    return make_model(name="gpt-x", **{"max_retries": 6, "retry_base_delay": 0.0, "cache_mode": "off", **kwargs})


def test_a_500_cleared_by_one_retry_counts_one_retry(server, make_model):
    server.gateway_error(times=1, status=500)
    server.reply("done")
    completion = model(make_model).complete([{"role": "user", "content": "hi"}])
    assert completion.text == "done" and completion.request_retries == 1
    assert [r.get("status") for r in server.requests] == [500, None]


def test_retries_of_a_call_that_fails_are_counted(server, make_model):
    server.gateway_status = 500
    with pytest.raises(ModelError) as error:
        model(make_model, max_retries=3).complete([{"role": "user", "content": "hi"}])
    assert error.value.request_retries == 3 and server.count() == 4  # the SDK retried none on its own
    assert LITELLM_500 in str(error.value)


def test_a_429_waits_for_its_retry_after(server, make_model, real_retry_waits):
    server.gateway_error(times=1, status=429, retry_after=0.4)
    server.reply("done")
    started = time.monotonic()
    completion = model(make_model).complete([{"role": "user", "content": "hi"}])
    assert completion.request_retries == 1 and time.monotonic() - started >= 0.4


def test_the_retry_time_bounds_a_failing_call(server, make_model):
    server.gateway_status = 500
    server.delay = 0.2  # each failed attempt takes a while, as behind a gateway that retries itself
    client = model(make_model, max_retries=1000, retry_base_delay=0.1, retry_max_delay=0.2, max_retry_time=1.5)
    started = time.monotonic()
    with pytest.raises(ModelError) as error:
        client.complete([{"role": "user", "content": "hi"}])
    took = time.monotonic() - started
    assert took < 15, took  # 1000 retries allowed, 1.5 s of them spent (ten times that at most)
    assert "--bench-set=model_max_retry_time=1.5" in str(error.value) and 2 <= error.value.request_retries < 20


def test_the_retry_time_is_the_items_across_its_requests(server, make_model):
    """An item's requests (tool-use rounds, agent turns) share one --bench-set model_max_retry_time: a second request of
    the same item gets what the first left, so a flaky endpoint cannot cost an item the budget per request.

    Every failure asks for a 10 s Retry-After: the waits are not slept in the tests but counted as spent, so the
    budget of 65 s buys 6 retries (10 s each, the next would end past it), whatever the machine's speed."""
    client = model(make_model, max_retries=1000, retry_max_delay=10.0, max_retry_time=65)
    ask = [{"role": "user", "content": "hi"}]
    with item_retry_time():
        server.gateway_error(times=4, status=500, retry_after=10)  # 40 s of retries, then an answer (a tool-use round)
        server.reply("round one")
        assert client.complete(ask).request_retries == 4
        server.gateway_error(times=1000, status=500, retry_after=10)  # the next round fails for good
        with pytest.raises(ModelError) as error:
            client.complete([*ask, {"role": "assistant", "content": "round one"}])
    assert "--bench-set=model_max_retry_time=65" in str(error.value)
    assert error.value.request_retries == 2  # the 25 s the first request left, not 65 s of its own
    with item_retry_time(), pytest.raises(ModelError) as error:  # the next item has the whole budget again
        client.complete(ask)
    assert error.value.request_retries == 6 and "60 s of retries" in str(error.value)


# ---- whole runs, as a user starts them -----------------------------------------------------------------------
ONE_STEP_PROBLEMS = 12  # problems of one step each: a unit of work is one item, so workers hold little


@pytest.fixture
def dataset(custom_scicode):
    """Single-step problems 1..12 (each step returns 6), written for ``custom_scicode`` to run."""
    from helpers.scicode_builders import CLOSE, problem, step

    problems = [
        problem(str(i), [step(f"{i}.1", "def six():\n    return 6", [CLOSE.format(call="six()")])])
        for i in range(1, ONE_STEP_PROBLEMS + 1)
    ]
    targets = {f"{i}.1": [6] for i in range(1, ONE_STEP_PROBLEMS + 1)}
    custom_scicode.write(problems, targets)
    return custom_scicode


def run_against(bench, server: FakeOpenAI, dataset, cache_dir, *args: str):
    return dataset(
        f"--bench-cache-dir={cache_dir}",
        "--bench-set=model_retry_delay=0.2",
        *args,
        model="gpt-x",
        server=server,
        subprocess=True,  # the HTTP stack imports parts of itself lazily: in-process runs would re-import them
    )


@pytest.mark.e2e
@pytest.mark.slow
def test_an_always_500_endpoint_is_exit_4_at_the_preflight_in_seconds(bench, pytester, server, dataset, cache_dir):
    server.gateway_status = 500
    result = run_against(bench, server, dataset, cache_dir, "--bench-mode=naive")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    err = result.stderr.str()
    assert "model preflight" in err and "answered HTTP 500" in err and LITELLM_500 in err
    assert not server.requests and not (pytester.path / "reports").exists()  # no item ran, so none retried
    assert len(posts(server)) <= 2  # the preflight's probe and at most one retry


@pytest.mark.e2e
@pytest.mark.slow
def test_a_key_refused_with_400_is_exit_4_even_with_a_warm_cache(bench, pytester, server, dataset, cache_dir):
    for _ in range(3):
        server.reply("```python\ndef six():\n    return 6\n```")
    first = run_against(bench, server, dataset, cache_dir, "--bench-mode=tool_use", "--bench-ids=1.1")
    assert first.ret == pytest.ExitCode.OK, first.stdout.str()
    asked = len(server.requests)
    server.gateway_bad_key = True  # the key is now refused; every answer of the run is in the cache
    again = run_against(bench, server, dataset, cache_dir, "--bench-mode=tool_use", "--bench-ids=1.1")
    assert again.ret == pytest.ExitCode.USAGE_ERROR, again.stdout.str()
    err = again.stderr.str()
    assert "answered HTTP 400 to the run's first request for model 'gpt-x'" in err and repr(NO_DB) in err
    assert "--model-api-key" in err
    # the preflight's request was the run's first: the SciCode prompt and the tool-use harness's tools
    shaped = [p["body"] for p in server.preflights if p.get("status") == 400 and "body" in p][-1]
    assert shaped["tools"] and "step" in json.dumps(shaped["messages"])
    assert len(server.requests) == asked + 1  # the preflight's uncapped second try; no item ran


@pytest.mark.e2e
@pytest.mark.slow
def test_an_item_whose_500_clears_passes_and_counts_the_retry(bench, pytester, server, dataset, cache_dir):
    server.gateway_error(times=1, status=500)  # the item's request, not the preflight's
    server.reply("```python\ndef six():\n    return 6\n```")
    result = run_against(bench, server, dataset, cache_dir, "--bench-mode=naive", "--bench-ids=1.1")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    [run] = run_dirs(pytester.path)
    [record] = read_jsonl(run / "steps.jsonl")
    assert record["status"] == "pass" and record["generation"]["request_retries"] == 1


@pytest.mark.e2e
@pytest.mark.slow
def test_a_failed_item_counts_its_retries_and_max_retry_time_bounds_it(bench, pytester, server, dataset, cache_dir):
    server.gateway_down_after(0)  # the preflight passes, every item request is a 500
    server.delay = 0.3
    run_against(
        bench,
        server,
        dataset,
        cache_dir,
        "--bench-mode=naive",
        "--bench-ids=1.1",
        "--bench-set=model_max_retries=1000",
        "--bench-set=model_max_retry_time=3",
    )
    [run] = run_dirs(pytester.path)
    [record] = read_jsonl(run / "steps.jsonl")
    assert record["status"] == "model_error" and "--bench-set=model_max_retry_time=3" in record["message"], record
    assert record["generation"]["request_retries"] == len(server.requests) - 1 >= 2  # every retry, counted
    assert record["duration"] < 30, record["duration"]  # 1000 retries allowed: 3 s of them spent (10x at most)


@pytest.mark.e2e
@pytest.mark.slow
def test_an_endpoint_that_dies_midway_stops_the_run_across_workers(bench, pytester, server, dataset, cache_dir):
    for _ in range(2):
        server.reply("I cannot solve this.")  # answered (a parse_error, no scoring): the row starts after them
    server.gateway_down_after(2)
    server.delay = 0.3  # both workers' items take a while, so their records arrive interleaved
    result = run_against(
        bench,
        server,
        dataset,
        cache_dir,
        "--bench-mode=naive",
        "--bench-set=model_max_retries=0",
        "--bench-set=max_consecutive_errors=3",
        "--bench-max-connections=2",  # one problem at a time per worker, so the two workers' records interleave
        "-n",
        "2",
    )
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.INTERRUPTED, out
    [run] = run_dirs(pytester.path)
    records = read_jsonl(run / "steps.jsonl")
    summary = json.loads((run / "summary.json").read_text())
    errors = [r for r in records if r["status"] == "model_error"]
    # the row of 3 was counted over both workers' records, in the order they arrived
    assert "stopped after 3 model errors in a row (--bench-set=max_consecutive_errors=3)" in out
    assert "across workers gw0, gw1" in (run / "summary.md").read_text()
    assert {r["worker"] for r in errors[:3]} == {"gw0", "gw1"}
    # no work was handed out after the stop: what the two workers held (one running, one next) at most
    assert len(errors) <= 3 + 2 * 2, [(r["id"], r["worker"]) for r in records]
    not_run = [i["id"] for i in summary["items"] if i["status"] == "not_run"]
    assert not_run and summary["incomplete"]["items"] == not_run and summary["complete"] is False
    assert len(records) + len(not_run) == ONE_STEP_PROBLEMS
    assert "incomplete" in out
