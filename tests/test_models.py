"""The model layer against a scripted OpenAI-compatible server, through the real openai SDK."""

from __future__ import annotations

import json
import threading
import time

import pytest

from pytest_agentbench.core.errors import ConfigError
from pytest_agentbench.core.options import OptionError, Sources, resolve
from pytest_agentbench.core.run_options import RUN_OPTIONS
from pytest_agentbench.models.cache import ResponseCache, cache_key
from pytest_agentbench.models.client import Completion, ModelError, OpenAIModel, tool_result_message
from pytest_agentbench.models.options import MODEL_OPTIONS, build_model, model_settings
from pytest_agentbench.models.oracle import OracleModel

from helpers.bench_runs import SHARED_DATA  # honours $AGENTBENCH_DATA_DIR

PROTOCOLS = ["chat", "responses"]
HELLO = [{"role": "user", "content": "hello"}]
TOOL = {
    "type": "function",
    "function": {
        "name": "code_interpreter",
        "description": "run code",
        "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
    },
}


def endpoint(protocol: str) -> str:
    return "/v1/chat/completions" if protocol == "chat" else "/v1/responses"


# ---------------------------------------------------------------- plain replies


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_text_reply_fields_and_request(server, make_model, protocol):
    server.reply("hi there", prompt_tokens=21, completion_tokens=4)
    completion = make_model(protocol).complete(HELLO)
    assert completion.text == "hi there"
    assert completion.tool_calls == []
    assert completion.finish_reason == "stop"
    assert (completion.prompt_tokens, completion.completion_tokens) == (21, 4)
    assert completion.latency > 0 and completion.cached is False
    [request] = server.requests
    assert request["path"] == endpoint(protocol)
    assert request["body"]["model"] == "fake-model"
    assert request["headers"]["authorization"] == "Bearer sk-test"
    if protocol == "chat":
        assert request["body"]["messages"] == HELLO
    else:
        assert request["body"]["input"] == [{"role": "user", "content": "hello"}]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_cut_off_reply_reports_length(server, make_model, protocol):
    server.reply("```python\ndef f(x):\n    return", finish_reason="length")
    completion = make_model(protocol).complete(HELLO)
    assert completion.finish_reason == "length"
    assert completion.text.startswith("```python")


def test_chat_params_go_into_the_request_body(server, make_model):
    server.reply("ok")
    make_model("chat", params={"temperature": 0, "max_tokens": 99, "reasoning_effort": "low"}).complete(HELLO)
    body = server.requests[0]["body"]
    assert (body["temperature"], body["max_tokens"], body["reasoning_effort"]) == (0, 99, "low")


def test_responses_params_accept_chat_spellings(server, make_model):
    server.reply("ok")
    make_model("responses", params={"temperature": 0.5, "max_tokens": 99, "reasoning_effort": "high"}).complete(HELLO)
    body = server.requests[0]["body"]
    assert body["temperature"] == 0.5
    assert body["max_output_tokens"] == 99 and "max_tokens" not in body
    assert body["reasoning"] == {"effort": "high"} and "reasoning_effort" not in body


# ---------------------------------------------------------------- tool calls


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("n_calls", [1, 3])
def test_tool_calls_round_trip(server, make_model, protocol, n_calls):
    calls = [("code_interpreter", {"code": f"print({i})"}) for i in range(n_calls)]
    server.reply("let me check", tool_calls=calls)
    server.reply("done")
    model = make_model(protocol)
    messages = list(HELLO)
    first = model.complete(messages, tools=[TOOL])
    assert first.finish_reason == "tool_calls"
    assert [json.loads(c["arguments"]) for c in first.tool_calls] == [{"code": f"print({i})"} for i in range(n_calls)]
    assert len({c["id"] for c in first.tool_calls}) == n_calls
    messages.append(first.assistant_message())
    for i, call in enumerate(first.tool_calls):
        messages.append(tool_result_message(call, f"out {i}"))
    assert model.complete(messages, tools=[TOOL]).text == "done"

    body = server.requests[1]["body"]
    ids = [c["id"] for c in first.tool_calls]
    if protocol == "chat":
        assert body["tools"] == [TOOL]
        sent = body["messages"]
        assert [c["id"] for c in sent[1]["tool_calls"]] == ids
        assert [(m["role"], m["tool_call_id"], m["content"]) for m in sent[2:]] == [
            ("tool", ids[i], f"out {i}") for i in range(n_calls)
        ]
    else:
        assert body["tools"][0]["name"] == "code_interpreter"
        assert body["tools"][0]["parameters"] == TOOL["function"]["parameters"]
        items = body["input"]
        assert items[1] == {"role": "assistant", "content": "let me check"}
        assert [(i["type"], i["call_id"]) for i in items[2 : 2 + n_calls]] == [("function_call", x) for x in ids]
        assert [(i["type"], i["call_id"], i["output"]) for i in items[2 + n_calls :]] == [
            ("function_call_output", ids[i], f"out {i}") for i in range(n_calls)
        ]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_tool_choice_is_sent_with_tools(server, make_model, protocol):
    server.reply("final")
    make_model(protocol).complete(HELLO, tools=[TOOL], tool_choice="none")
    assert server.requests[0]["body"]["tool_choice"] == "none"


def test_assistant_message_without_tools_is_plain_text():
    assert Completion(text="x").assistant_message() == {"role": "assistant", "content": "x"}


# ---------------------------------------------------------------- retries and errors


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_rate_limit_then_success(server, make_model, protocol):
    server.fail(times=2, status=429, retry_after=0)
    server.reply("finally")
    assert make_model(protocol).complete(HELLO).text == "finally"
    assert server.count() == 3


def test_retry_after_header_is_honoured(server, make_model, real_retry_waits):
    server.fail(times=1, status=429, retry_after=0.4)
    server.reply("ok")
    started = time.monotonic()
    make_model("chat", retry_base_delay=0.001).complete(HELLO)
    assert time.monotonic() - started >= 0.4


def test_retry_after_is_capped(server, make_model):
    # an hour's wait would not fit the minute of retry time: the call would end out of time, without a retry
    server.fail(times=1, status=429, retry_after=3600)
    server.reply("ok")
    completion = make_model("chat", retry_max_delay=0.05, max_retry_time=60).complete(HELLO)
    assert completion.text == "ok" and completion.request_retries == 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_persistent_500_raises_model_error_after_retries(server, make_model, protocol):
    server.always_status = 500
    model = make_model(protocol, max_retries=2)
    with pytest.raises(ModelError) as info:
        model.complete(HELLO)
    assert server.count() == 3  # first try plus two retries
    message = str(info.value)
    assert server.base_url + endpoint(protocol)[3:] in message
    assert "fake-model" in message and "500" in message and "3 attempts" in message
    assert "--model-base-url" in message


def test_client_error_is_not_retried_and_names_the_fix(server, make_model):
    server.always_status = 401
    with pytest.raises(ModelError, match="--model-api-key"):
        make_model("chat").complete(HELLO)
    assert server.count() == 1


def test_unreachable_server(tmp_path):
    model = OpenAIModel(
        "m", base_url="http://127.0.0.1:9/v1", cache_dir=tmp_path, max_retries=1, retry_base_delay=0.001, timeout=2
    )
    with pytest.raises(ModelError, match="127.0.0.1:9/v1/chat/completions.*--model-base-url"):
        model.complete(HELLO)


def test_timeout_is_retried_then_reported(server, make_model):
    server.delay = 1.0
    with pytest.raises(ModelError, match="timed out.*--bench-set model_timeout"):
        make_model("chat", timeout=0.2, max_retries=1).complete(HELLO)
    assert server.count() == 2


# ---------------------------------------------------------------- cache


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_second_identical_call_is_a_cache_hit(server, make_model, protocol):
    server.reply("once", tool_calls=[("code_interpreter", {"code": "1"})], prompt_tokens=5, completion_tokens=6)
    model = make_model(protocol)
    first = model.complete(HELLO, tools=[TOOL])
    again = model.complete(HELLO, tools=[TOOL])
    assert server.count() == 1
    assert again.cached and not first.cached
    assert (again.text, again.tool_calls, again.finish_reason) == (first.text, first.tool_calls, first.finish_reason)
    assert (again.prompt_tokens, again.completion_tokens) == (5, 6)


def test_key_parts_make_distinct_entries(server, make_model):
    for _ in range(4):
        server.reply("r")
    model = make_model("chat")
    model.complete(HELLO)
    model.complete(HELLO, sample_index=1)
    model.complete(HELLO, tools=[TOOL])
    make_model("responses").complete(HELLO)
    assert server.count() == 4


def test_replay_mode_makes_no_requests(server, make_model, tmp_path):
    server.reply("recorded")
    make_model("chat").complete(HELLO)
    replay = make_model("chat", cache_mode="replay")
    assert replay.complete(HELLO).text == "recorded"
    assert server.count() == 1


def test_replay_miss_is_a_model_error(server, make_model):
    with pytest.raises(ModelError, match=r"not in cache \(replay mode\).*--bench-cache rw"):
        make_model("chat", cache_mode="replay").complete(HELLO)
    assert server.count() == 0


def test_off_mode_always_calls_and_ro_never_writes(server, make_model, tmp_path):
    for _ in range(3):
        server.reply("r")
    off = make_model("chat", cache_mode="off")
    off.complete(HELLO)
    off.complete(HELLO)
    make_model("chat", cache_mode="ro").complete(HELLO)
    assert server.count() == 3
    assert not list((tmp_path / "cache").rglob("*.json"))


def test_errors_and_empty_replies_are_not_stored(server, make_model, tmp_path):
    server.always_status = 500
    with pytest.raises(ModelError):
        make_model("chat", max_retries=0).complete(HELLO)
    server.always_status = None
    server.reply("")
    server.reply("now real")
    model = make_model("chat")
    assert model.complete(HELLO).is_empty
    assert model.complete(HELLO).text == "now real"
    files = list((tmp_path / "cache").rglob("*.json"))
    assert len(files) == 1
    assert files[0].parent.name == files[0].stem[:2]  # sharded by key prefix


def test_cache_key_is_order_independent_and_covers_inputs():
    base = dict(
        base_url="u", model="m", protocol="chat", messages=HELLO, tools=None, params={"a": 1, "b": 2}, sample_index=0
    )
    assert cache_key(**base) == cache_key(**{**base, "params": {"b": 2, "a": 1}})
    for change in (
        {"base_url": "v"},
        {"model": "n"},
        {"protocol": "responses"},
        {"sample_index": 1},
        {"messages": [{"role": "user", "content": "bye"}]},
        {"params": {"a": 2, "b": 2}},
    ):
        assert cache_key(**base) != cache_key(**{**base, **change})


def test_concurrent_writers_leave_one_whole_entry(tmp_path):
    cache = ResponseCache(tmp_path, "rw")
    record = {"text": "x" * 200_000, "tool_calls": [], "finish_reason": "stop"}
    threads = [threading.Thread(target=cache.put, args=("ab" + "0" * 62, record)) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert cache.get("ab" + "0" * 62) == record
    assert [p.name for p in (cache.root / "ab").iterdir()] == ["ab" + "0" * 62 + ".json"]


def test_damaged_entry_is_a_miss(tmp_path):
    cache = ResponseCache(tmp_path, "rw")
    path = cache.path_for("cd" + "1" * 62)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert cache.get("cd" + "1" * 62) is None


# ---------------------------------------------------------------- options


def test_oracle_model():
    oracle = OracleModel()
    assert oracle.name == "oracle" and oracle.is_oracle is True
    with pytest.raises(RuntimeError, match="is_oracle"):
        oracle.complete(HELLO)


def model_opts(tmp_path, cli=None, env=None, ini=None):
    """MODEL_OPTIONS and RUN_OPTIONS resolved without pytest, as a notebook would."""
    return resolve(
        (*RUN_OPTIONS, *MODEL_OPTIONS),
        Sources(cli=cli or {}, ini=ini or {}, env=env or {}, invocation_dir=tmp_path, rootdir=tmp_path / "root"),
    )


def test_models_are_built_from_settings_without_pytest(tmp_path):
    opts = model_opts(
        tmp_path,
        cli={"model": "gpt-x", "model_params": '{"temperature": 0}', "cache": "ro"},
        env={"OPENAI_BASE_URL": "http://127.0.0.1:1/v1/", "OPENAI_API_KEY": "sk-secret", "HOME": str(tmp_path)},
    )
    settings = model_settings(opts)
    assert settings["base_url"] == "http://127.0.0.1:1/v1" and settings["params"] == {"temperature": 0}
    assert settings["cache_dir"] == str(tmp_path / ".cache" / "pytest-agentbench")  # the per-user folder
    assert "sk-secret" not in repr(settings)
    model = build_model(opts)
    assert isinstance(model, OpenAIModel) and str(model.cache.root).startswith(str(tmp_path / ".cache"))
    assert build_model(model_opts(tmp_path, ini={"model": "oracle"})).is_oracle
    with pytest.raises(ConfigError, match="no model given"):
        build_model(model_opts(tmp_path))
    with pytest.raises(ConfigError, match="no API key"):
        build_model(model_opts(tmp_path, cli={"model": "gpt-x"}))
    with pytest.raises(OptionError, match="ini agentbench_model_params '\\[1\\]' is a JSON list, not an object"):
        model_opts(tmp_path, ini={"model_params": "[1]"})


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{bad", "is not valid JSON"),
        ("[1, 2]", "is a JSON list, not an object"),
        ('"temperature"', "is a JSON str, not an object"),
    ],
)
def test_malformed_model_params_quote_the_text(tmp_path, text, says):
    with pytest.raises(OptionError) as info:
        model_opts(tmp_path, cli={"model_params": text})
    assert f"--model-params {text!r} {says}" in str(info.value)


def test_model_params_may_not_override_the_harness(tmp_path):
    with pytest.raises(OptionError, match="sets stream, which the harness controls"):
        model_opts(tmp_path, cli={"model_params": '{"stream": true}'})
    assert model_opts(tmp_path, cli={"model_params": '{"temperature": 0}'})["model_params"] == {"temperature": 0}
    assert model_settings(model_opts(tmp_path, cli={"model": "gpt-x"}))["params"] == {}


@pytest.mark.e2e
def test_cli_malformed_model_params_is_a_usage_error(pytester):
    # checked in a run that asks for a benchmark (without one the plugin reads no option: tests/test_inert.py)
    result = pytester.runpytest("--bench=scicode", "--model", "m", "--model-params", "{bad")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--model-params '{bad' is not valid JSON*"])


@pytest.mark.e2e
@pytest.mark.slow
def test_cli_builds_models_and_settings(pytester, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1/")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    pytester.makepyfile("""
        from pytest_agentbench.models.options import model_settings
        from pytest_agentbench.models.client import OpenAIModel
        from pytest_agentbench.pytest_plugin.session import settings_of

        def test_build(pytestconfig, bench_model):
            settings = model_settings(settings_of(pytestconfig))
            assert settings["model"] == "gpt-x"
            assert settings["base_url"] == "http://127.0.0.1:1/v1"
            assert settings["protocol"] == "responses"
            assert settings["params"] == {"temperature": 0}
            assert (settings["timeout"], settings["max_retries"]) == (12.0, 2)
            assert settings["cache_mode"] == "ro"
            assert "sk-secret" not in repr(settings)
            model = bench_model
            assert isinstance(model, OpenAIModel) and model.name == "gpt-x" and not model.is_oracle
            assert "sk-secret" not in repr(model.settings)
            assert str(model.cache.root).startswith(str(pytestconfig.rootpath))
    """)
    result = pytester.runpytest(
        "--model",
        "gpt-x",
        "--model-protocol",
        "responses",
        "--model-params",
        '{"temperature": 0}',
        "--bench-set=model_timeout=12",
        "--bench-set=model_max_retries=2",
        "--bench-cache",
        "ro",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=1)


@pytest.mark.e2e
@pytest.mark.slow
def test_cli_oracle_from_ini(pytester):
    pytester.makeini("[pytest]\nagentbench_model = oracle\n")
    pytester.makepyfile("""
        def test_build(bench_model):
            assert bench_model.is_oracle
    """)
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)


@pytest.mark.e2e
@pytest.mark.slow
def test_cli_rejects_unknown_protocol(pytester):
    result = pytester.runpytest("--model-protocol", "grpc")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--model-protocol*invalid choice*grpc*"])


@pytest.mark.e2e
@pytest.mark.slow
def test_cli_malformed_model_params_with_a_benchmark(pytester, monkeypatch):
    monkeypatch.setenv("AGENTBENCH_DATA_DIR", str(SHARED_DATA))
    result = pytester.runpytest("--bench=scicode", "--model", "m", "--model-params", "[1]", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--model-params '[1]' is a JSON list, not an object" in result.stderr.str()
