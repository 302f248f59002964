"""Codex's requests as the model and the response cache see them: the ids and timings Codex makes up in each
command's output differ between a recorded run and its replay; the cache keys on them replaced (the multi-turn
replay end to end is in test_external_agents.py, and in Docker in test_external_agents_docker.py)."""

from __future__ import annotations

import json

from pytest_agentbench.benchmarks.agents import codex_view


def codex_request(chunk: str, seconds: str, session: int, date: str, output: str = "mean accuracy: 0.93") -> list:
    """A Codex conversation as the proxy hands it on: a command left running, then waited on by its handle."""
    start = {"cmd": "python3 main.py", "yield_time_ms": 250}
    return [
        {"role": "user", "content": f"<environment_context><current_date>{date}</current_date></environment_context>"},
        {"role": "assistant", "content": None, "tool_calls": [call("c1", "exec_command", start)]},
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": f"Chunk ID: {chunk}\nWall time: {seconds} seconds\n"
            f"Process running with session ID {session}\nOutput:\n",
        },
        {"role": "assistant", "content": None, "tool_calls": [call("c2", "write_stdin", {"session_id": session})]},
        {
            "role": "tool",
            "tool_call_id": "c2",
            "content": f"Chunk ID: {chunk[::-1]}\nWall time: {seconds} seconds\n"
            f"Process exited with code 0\nOutput:\n{output}\n",
        },
    ]


def call(call_id: str, name: str, arguments: dict) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def test_codex_requests_of_two_runs_key_alike_and_differ_in_what_the_model_reads():
    recorded = codex_view(codex_request("6e3054", "0.2511", 19220, "2026-12-07"))
    replayed = codex_view(codex_request("366595", "1.0032", 7627, "2027-01-31"))
    assert recorded.key_messages == replayed.key_messages
    # what the model reads keeps the timings and the date, with the handles numbered in order of appearance
    assert recorded.model_messages != replayed.model_messages
    assert "Wall time: 0.2511 seconds" in recorded.model_messages[2]["content"]
    assert "Chunk ID: 1\n" in recorded.model_messages[2]["content"]
    assert "session ID 1\n" in recorded.model_messages[2]["content"]
    assert json.loads(recorded.model_messages[3]["tool_calls"][0]["function"]["arguments"]) == {"session_id": 1}
    other = codex_view(codex_request("6e3054", "0.2511", 19220, "2026-12-07", output="mean accuracy: 0.94"))
    assert other.key_messages != recorded.key_messages  # what a command printed is never masked
    printed = "Chunk ID: ab12\nWall time: 1.5 seconds\nProcess running with session ID 77"
    echoed = codex_view(codex_request("6e3054", "0.2511", 19220, "2026-12-07", output=printed))
    assert echoed.model_messages[4]["content"].endswith(f"Output:\n{printed}\n")  # nor changed
    assert echoed.key_messages[4]["content"].endswith(f"Output:\n{printed}\n")
    # the model's reply names the handle it was shown; the agent gets its own process back
    reply = [{"id": "c3", "name": "write_stdin", "arguments": json.dumps({"session_id": 1, "chars": ""})}]
    assert json.loads(replayed.to_agent(reply)[0]["arguments"]) == {"session_id": 7627, "chars": ""}
    assert json.loads(recorded.to_agent(reply)[0]["arguments"]) == {"session_id": 19220, "chars": ""}
