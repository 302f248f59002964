"""The metering proxy holds an external agent to the steps it was given (``--bench-set agent_steps``): the model
call past them is refused and the agent ended, whatever the agent does with its own switch."""

from __future__ import annotations

import openai
import pytest

from pytest_agentbench.models.proxy import MeteringProxy


def ask(proxy: MeteringProxy, n: int) -> str | None:
    client = openai.OpenAI(base_url=proxy.base_url, api_key=proxy.token, max_retries=0, timeout=10)
    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"step {n}"}])
    return reply.choices[0].message.content


def test_the_call_past_the_steps_is_refused_and_the_agent_ended(server, make_model):
    for n in range(3):
        server.reply(f"reply {n}", prompt_tokens=10, completion_tokens=2)
    stopped: list[str] = []
    with MeteringProxy(make_model("chat", max_retries=0), steps=2, on_stop=lambda: stopped.append("end")) as proxy:
        assert [ask(proxy, 0), ask(proxy, 1)] == ["reply 0", "reply 1"]
        with pytest.raises(openai.PermissionDeniedError, match="past its 2 steps"):
            ask(proxy, 2)
        with pytest.raises(openai.PermissionDeniedError, match="max_steps|past its 2 steps"):
            ask(proxy, 3)  # an agent retrying gets no further
    assert proxy.state == "max_steps" and stopped == ["end"]
    assert len(server.requests) == 2 == proxy.accounting["model_calls"]


def test_no_steps_no_limit(server, make_model):
    for n in range(3):
        server.reply(f"reply {n}")
    with MeteringProxy(make_model("chat", max_retries=0)) as proxy:
        assert [ask(proxy, n) for n in range(3)] == ["reply 0", "reply 1", "reply 2"]
    assert proxy.state == ""
