"""A run fails before spending items.

The model configuration is checked once at session start (one usage error, exit 4, no report folder,
well within 10 s): a missing key, a refused key, a dead endpoint, an unknown model; a run stops after
N model errors in a row with complete reports; the oracle narrows SciCode to the validation split.
"""

from __future__ import annotations

import json
import socket

import pytest

from pytest_agentbench.core.errors import ConfigError
from pytest_agentbench.core.options import Settings
from pytest_agentbench.models.preflight import preflight, skip_reason
from pytest_agentbench.pytest_plugin.run import Streak

from helpers.bench_runs import read_jsonl, run_dirs

ONE_STEP = ["--bench=scicode", "--bench-split=validation", "--bench-ids=1.1", "--bench-mode=naive"]


def dead_port() -> int:
    with socket.socket() as sock:  # a port nothing listens on (bound, then released)
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def opts(**values) -> Settings:
    base = {
        "model": "gpt-x",
        "model_base_url": None,
        "model_api_key": "k",
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


def refused(**values) -> str:
    """preflight() with these settings: one ConfigError."""
    with pytest.raises(ConfigError) as error:
        preflight(opts(**values))
    return str(error.value)


def test_missing_api_key_for_the_default_endpoint():
    assert refused(model_api_key=None).startswith(
        "no API key for https://api.openai.com/v1: pass --model-api-key or set OPENAI_API_KEY"
    )


def test_key_refused_by_the_server(server):
    server.api_key = "sk-right"
    error = refused(model_base_url=server.base_url, model_api_key=None)
    assert f"model preflight: {server.base_url} refused the API key (HTTP 401" in error and "--model-api-key" in error
    assert len(server.preflights) == 1 and not server.requests


def test_dead_endpoint():
    url = f"http://127.0.0.1:{dead_port()}/v1"
    error = refused(model_base_url=url)
    assert f"model preflight: {url} cannot be reached" in error and "--model-base-url" in error


def test_unknown_model_of_a_server_that_lists_models(server):
    server.models = ["llama-3", "qwen-2"]
    error = refused(model_base_url=server.base_url)
    assert f"{server.base_url} does not serve model 'gpt-x'; it lists: llama-3, qwen-2" in error
    assert not server.requests  # no scripted reply spent


@pytest.mark.parametrize("protocol", ["chat", "responses"])
def test_unknown_model_of_a_server_that_does_not_list(server, protocol):
    server.list_models = False
    server.known_models = ["llama-3"]
    error = refused(model_base_url=server.base_url, model_protocol=protocol)
    assert "answered HTTP 404 to a 1-token request for model 'gpt-x'" in error
    assert [p["path"] for p in server.preflights] == [
        "/v1/models",
        "/v1/" + ("chat/completions" if protocol == "chat" else "responses"),
    ]


def test_wrong_base_url(server):
    error = refused(model_base_url=server.base_url.removesuffix("/v1"))  # the usual mistake: no /v1
    assert "HTTP 404" in error and "base URL" in error


def test_a_healthy_endpoint_passes(server):
    server.models = ["gpt-x"]
    assert preflight(opts(model_base_url=server.base_url)).startswith(f"model preflight: {server.base_url} lists gpt-x")
    server.list_models = False  # a server that does not list: one token is asked for, no scripted reply spent
    assert "answered a 1-token request for gpt-x (Chat Completions)" in preflight(opts(model_base_url=server.base_url))
    assert len(server.preflights) == 4 and not server.requests  # each time: the listing and one capped request


def test_preflight_is_skipped_when_no_endpoint_is_called():
    assert skip_reason(opts()) is None
    assert "oracle" in skip_reason(opts(model="oracle"))
    assert "replay" in skip_reason(opts(cache="replay"))
    assert skip_reason(opts(cache="ro")) is None  # a miss calls the endpoint: a warm cache must not hide it
    assert "off" in skip_reason(opts(model_preflight="off"))


@pytest.mark.parametrize("case", ["dead endpoint", "unknown model"])
@pytest.mark.e2e
@pytest.mark.slow
def test_a_run_exits_4_with_one_message_and_no_report_folder(bench, pytester, server, case):
    server.models = ["llama-3"]
    url = f"http://127.0.0.1:{dead_port()}/v1" if case == "dead endpoint" else server.base_url
    result = bench(
        *ONE_STEP, "--model=gpt-x", f"--model-base-url={url}", "--model-api-key=k", subprocess=True
    )  # a fresh process, as a user starts it
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    errors = [line for line in result.stderr.lines if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("ERROR: agentbench: model preflight: "), errors
    assert "Traceback" not in result.stdout.str() and not (pytester.path / "reports").exists()
    assert not server.requests  # no item asked the model, so none retried


# ---- consecutive model errors ----------------------------------------------------------------------
def test_streak_counts_model_errors_only():
    streak = Streak(3)
    for status in ("model_error", "model_error", "eval_error", "model_error", "skipped", "model_error"):
        stop = streak.add({"status": status, "message": status})
    assert stop is None and streak.count == 2  # eval_error broke the row; skipped neither adds nor breaks
    assert "stopped after 3 model errors in a row (--bench-set=max_consecutive_errors=3)" in streak.add(
        {"status": "model_error", "message": "HTTP 500"}
    )
    assert all(Streak(3).add({"status": "env_error"}) is None for _ in range(5))
    never = Streak(0)
    assert all(never.add({"status": "model_error"}) is None for _ in range(20))


@pytest.mark.e2e
@pytest.mark.slow
def test_run_stops_after_consecutive_model_errors_with_complete_reports(tiny, pytester):
    result = tiny("--bench-set=max_consecutive_errors=2", errors="1.1,1.2,2.1,2.2,3.1")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    out = result.stdout.str()
    assert "stopped after 2 model errors in a row (--bench-set=max_consecutive_errors=2)" in out
    [run] = run_dirs(pytester.path)
    records = read_jsonl(run / "steps.jsonl")
    # 1.2 builds on 1.1 and is blocked, never asked: a blocked step is no model error of its own, so the two in a
    # row are 1.1 and 2.1
    assert [(r["id"], r["status"]) for r in records] == [
        ("1.1", "model_error"),
        ("1.2", "blocked"),
        ("2.1", "model_error"),
    ]
    summary = json.loads((run / "summary.json").read_text())
    # the items the stop left out are in the summary as not run (never in the records file)
    assert [(i["id"], i["status"]) for i in summary["items"]] == [
        ("1.1", "model_error"),
        ("1.2", "blocked"),
        ("2.1", "model_error"),
        ("2.2", "not_run"),
        ("3.1", "not_run"),
    ]
    assert summary["incomplete"]["items"] == ["2.2", "3.1"]
    assert "stopped after 2 model errors in a row" in (run / "summary.md").read_text()


# ---- the oracle narrows SciCode to the validation split -----------------------------------------------
@pytest.mark.e2e
@pytest.mark.slow
def test_oracle_without_a_split_narrows_to_validation(bench):
    result = bench("--bench=scicode", "--model=oracle", "--collect-only")
    assert result.ret == pytest.ExitCode.OK, result.stderr.str()
    out = result.stdout.str()
    assert "--model=oracle without --bench-split: narrowed to the validation split" in out
    assert "50 tests collected" in out or "collected 50 items" in out
    assert "split validation" in out or "split=validation" in out


@pytest.mark.e2e
@pytest.mark.slow
def test_oracle_refuses_a_test_item_named_explicitly(bench):
    result = bench("--bench=scicode", "--model=oracle", "--bench-ids=1,77.2", "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (
        "--bench-ids 77.2 names test-split items: --model=oracle answers with the ground-truth code"
        in result.stderr.str()
    )
    explicit = bench("--bench=scicode", "--model=oracle", "--bench-split=all", "--collect-only")
    assert (
        explicit.ret == pytest.ExitCode.USAGE_ERROR and "only SciCode's validation split ships" in explicit.stderr.str()
    )


@pytest.mark.e2e
@pytest.mark.slow
def test_missing_key_is_one_usage_error_even_with_the_preflight_off(bench, pytester, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    result = bench(*ONE_STEP, "--model=gpt-x", "--bench-set=model_preflight=off")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "no API key for https://api.openai.com/v1" in result.stderr.str()
    assert not (pytester.path / "reports").exists()


@pytest.mark.e2e
@pytest.mark.slow
def test_stop_under_xdist_counts_across_workers(tiny, pytester):
    result = tiny("--bench-set=max_consecutive_errors=2", "-n", "2", errors="1.1,1.2,2.1,2.2,3.1")
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()
    assert "stopped after 2 model errors in a row" in result.stdout.str()
    [run] = run_dirs(pytester.path)
    records = read_jsonl(run / "steps.jsonl")
    summary = json.loads((run / "summary.json").read_text())
    ran = sorted(i["id"] for i in summary["items"] if i["status"] != "not_run")
    assert ran == sorted(r["id"] for r in records)  # complete for what finished, the rest not run
    assert sorted(summary.get("incomplete", {}).get("items", [])) == sorted(
        i["id"] for i in summary["items"] if i["status"] == "not_run"
    )
    assert all(r["status"] in ("model_error", "blocked") for r in records)
    assert sum(r["status"] == "model_error" for r in records) >= 2
    assert "stopped after 2 model errors in a row" in (run / "summary.md").read_text()
