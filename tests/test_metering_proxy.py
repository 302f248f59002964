"""The metering proxy: the real openai SDK talks to it as an external agent would (Chat Completions and the
Responses API, streamed or not), and it forwards through the plugin's own client to the scripted server."""

from __future__ import annotations

import json
import threading

import openai
import pytest

from pytest_agentbench.models.proxy import MeteringProxy


@pytest.fixture
def proxy(make_model):
    with MeteringProxy(make_model("chat", max_retries=0)) as running:
        yield running


def agent_client(proxy: MeteringProxy, key: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base_url, api_key=key or proxy.token, max_retries=0, timeout=10)


def test_chat_reply_passes_through_and_is_counted(server, proxy):
    server.reply("hello from upstream", prompt_tokens=13, completion_tokens=5)
    reply = agent_client(proxy).chat.completions.create(
        model="whatever-the-agent-says", messages=[{"role": "user", "content": "hi"}], temperature=0.9
    )
    assert reply.choices[0].message.content == "hello from upstream"
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (13, 5)
    upstream = server.requests[0]
    assert upstream["body"]["model"] == "fake-model"  # the run's model, not the agent's choice
    assert upstream["headers"]["authorization"] == "Bearer sk-test"  # the user's key stays with the plugin
    assert "temperature" not in upstream["body"]
    assert upstream["body"]["messages"] == [{"role": "user", "content": "hi"}]
    assert proxy.accounting["model_calls"] == 1
    assert (proxy.accounting["prompt_tokens"], proxy.accounting["completion_tokens"]) == (13, 5)
    assert proxy.messages[-1] == {"role": "assistant", "content": "hello from upstream"}


def test_other_keys_are_refused(server, proxy):
    with pytest.raises(openai.AuthenticationError):
        agent_client(proxy, key="sk-test").chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
    assert server.requests == []
    assert proxy.token not in ("sk-test", "") and proxy.token.startswith("agentbench-")


def test_chat_stream_carries_text_tool_calls_and_usage(server, proxy):
    server.reply("thinking", tool_calls=[("bash", {"command": "ls"}, "call_9")], prompt_tokens=20, completion_tokens=4)
    stream = agent_client(proxy).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "list"}],
        tools=[{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}],
        stream=True,
        stream_options={"include_usage": True},
    )
    text, calls, finish, usage = "", {}, None, None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
            for call in choice.delta.tool_calls or []:
                entry = calls.setdefault(call.index, {"id": call.id, "name": "", "arguments": ""})
                entry["name"] += call.function.name or ""
                entry["arguments"] += call.function.arguments or ""
    assert text == "thinking"
    assert calls == {0: {"id": "call_9", "name": "bash", "arguments": json.dumps({"command": "ls"})}}
    assert finish == "tool_calls"
    assert (usage.prompt_tokens, usage.completion_tokens) == (20, 4)
    assert server.requests[0]["body"]["tools"][0]["function"]["name"] == "bash"


def responses_conversation() -> list[dict]:
    return [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "be brief"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "run ls"}]},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "call_id": "call_1", "name": "exec_command", "arguments": '{"cmd":"ls"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "a.txt"},
    ]


TOOLS = [
    {"type": "function", "name": "exec_command", "description": "run", "parameters": {"type": "object"}},
    {"type": "web_search"},
]


def test_responses_request_becomes_a_chat_call(server, proxy):
    server.reply("a.txt is there", prompt_tokens=30, completion_tokens=6)
    reply = agent_client(proxy).responses.create(
        model="m", instructions="You are an agent.", input=responses_conversation(), tools=TOOLS
    )
    assert reply.output_text == "a.txt is there"
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (30, 6)
    body = server.requests[0]["body"]
    assert body["messages"] == [
        {"role": "system", "content": "You are an agent."},
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "run ls"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "exec_command", "arguments": '{"cmd":"ls"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"},
    ]
    assert [t["function"]["name"] for t in body["tools"]] == ["exec_command"]  # hosted tools are not the model's


def test_responses_stream_gives_the_events_of_a_function_call(server, proxy):
    server.reply("", tool_calls=[("exec_command", {"cmd": "pwd"}, "call_7")], prompt_tokens=9, completion_tokens=3)
    events = list(agent_client(proxy).responses.create(model="m", input="where am I?", tools=TOOLS, stream=True))
    kinds = [event.type for event in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.function_call_arguments.done" in kinds
    done = events[-1].response
    call = done.output[0]
    assert (call.type, call.call_id, call.name, json.loads(call.arguments)) == (
        "function_call",
        "call_7",
        "exec_command",
        {"cmd": "pwd"},
    )
    assert (done.usage.input_tokens, done.usage.output_tokens) == (9, 3)
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_responses_stream_of_text(server, proxy):
    server.reply("done: 42")
    with agent_client(proxy).responses.stream(model="m", input="answer") as stream:
        final = stream.get_final_response()
    assert final.output_text == "done: 42"


def test_token_budget_stops_the_proxy_once(server, make_model):
    stopped = threading.Event()
    calls = []

    def on_stop():
        calls.append(1)
        stopped.set()

    server.reply("one", prompt_tokens=60, completion_tokens=50)
    server.reply("two")
    with MeteringProxy(make_model("chat", max_retries=0), tokens=100, on_stop=on_stop) as proxy:
        client = agent_client(proxy)
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
        assert stopped.is_set() and proxy.state == "token_limit"
        with pytest.raises(openai.PermissionDeniedError, match="tokens"):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "b"}])
    assert calls == [1]
    assert len(server.requests) == 1


def test_model_error_is_the_proxys_state_not_the_agents(server, make_model):
    server.always_status = 500
    with MeteringProxy(make_model("chat", max_retries=1, retry_base_delay=0, retry_max_delay=0)) as proxy:
        with pytest.raises(openai.InternalServerError):
            agent_client(proxy).chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
    assert proxy.state == "model_error"
    assert "HTTP 500" in proxy.message
    assert proxy.accounting["request_retries"] == 1


def test_replay_answers_without_the_endpoint(server, make_model, tmp_path):
    server.reply("recorded")
    recording, replaying = make_model("chat"), make_model("chat", cache_mode="replay")
    with MeteringProxy(recording) as proxy:
        agent_client(proxy).chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    server.stop()
    with MeteringProxy(replaying) as proxy:
        reply = agent_client(proxy).chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    assert reply.choices[0].message.content == "recorded"
    assert proxy.accounting["cache_hits"] == 1 and proxy.accounting["answers"] == "replayed"


def test_the_scripted_server_streams_both_protocols(server):
    """The tests' server as a streaming endpoint (what an agent pointed at it directly would see)."""
    server.reply("streamed text", prompt_tokens=4, completion_tokens=2)
    server.reply("", tool_calls=[("exec_command", {"cmd": "ls"}, "call_3")])
    client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
    with client.responses.stream(model="m", input="hi") as stream:
        assert stream.get_final_response().output_text == "streamed text"
    chunks = list(client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], stream=True))
    calls = [c for chunk in chunks for choice in chunk.choices for c in choice.delta.tool_calls or []]
    assert [(c.id, c.function.name) for c in calls] == [("call_3", "exec_command")]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_a_wake_up_with_no_connection_waiting_does_not_stall_the_proxy(make_model):
    """The serving loop accepts only after its poll said a connection waits; when none is left by then (another
    holder of the listening socket took it, or the wake-up was spurious), that look must end at once, or the
    loop sits in accept() and close() waits for it forever. One look of the loop (socketserver's
    ``_handle_request_noblock``, what ``serve_forever`` calls after a poll) on an empty queue must return."""
    proxy = MeteringProxy(make_model("chat", max_retries=0))
    try:
        look = threading.Thread(target=proxy._server._handle_request_noblock, daemon=True)
        look.start()
        look.join(timeout=60)  # a hang guard: the look returns at once
        assert not look.is_alive(), "the serving loop waits in accept() for a connection nobody made"
    finally:
        proxy.close()
