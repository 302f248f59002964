"""A trajectory file shown as a conversation in report.html: prompts folded, then the model's turns.

Each model turn says what it cost (prompt and completion tokens, the call's latency, whether the reply
came from the response cache) when the file has ``turns`` (``models.usage.turn_of``; older files do
not). A tool call's arguments are decoded from their JSON: code and commands as numbered, highlighted
code, other arguments as ``name: value``, and the tool's output follows its call. Fenced code blocks in
a reply are shown as code too. Every text is escaped: the model and its tools wrote it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from .highlight import clip, code_html, esc, fenced_parts

# argument names whose text is a program, and its language when the tool's name does not say
CODE_ARGUMENTS = {
    "code": "python",
    "source": "python",
    "script": "",
    "program": "",
    "command": "shell",
    "cmd": "shell",
    "commands": "shell",
}
SHELL_TOOLS = ("bash", "shell", "sh", "terminal", "exec", "run_command")
PYTHON_TOOLS = ("python", "code_interpreter", "ipython", "jupyter")


def content_text(content: Any) -> str:
    """A message's content as text; parts (text, images described by size and hash) one per line."""
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text", json.dumps(p, default=str))) if isinstance(p, dict) else str(p) for p in content
        )
    return "" if content is None else str(content)


def argument_language(tool: str, key: str) -> str:
    name = tool.lower()
    if key in CODE_ARGUMENTS:
        if any(word in name for word in SHELL_TOOLS):
            return "shell"
        if any(word in name for word in PYTHON_TOOLS):
            return "python"
        return CODE_ARGUMENTS[key]
    return ""


def arguments_html(tool: str, arguments: Any) -> str:
    """A tool call's arguments: decoded from JSON, programs as code, the rest as ``name: value``."""
    if isinstance(arguments, str):
        try:
            decoded = json.loads(arguments)
        except ValueError:
            return '<div class="n">arguments (not valid JSON, shown as sent)</div>' + code_html(clip(arguments))
    else:
        decoded = arguments
    if not isinstance(decoded, dict):
        return code_html(clip(json.dumps(decoded, indent=2, ensure_ascii=False, default=str)), "json")
    blocks, inline = [], []
    for key, value in decoded.items():
        language = argument_language(tool, str(key))
        if isinstance(value, str) and (key in CODE_ARGUMENTS or "\n" in value):
            blocks.append(f'<div class="arg">{esc(key)}</div>{code_html(clip(value), language)}')
        elif isinstance(value, (dict, list)):
            text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
            blocks.append(f'<div class="arg">{esc(key)}</div>{code_html(clip(text), "json")}')
        else:
            shown = value if isinstance(value, str) else json.dumps(value, default=str)
            inline.append(f'<span class="arg">{esc(key)}:</span> <code>{esc(clip(shown, 500))}</code>')
    head = f'<div class="args">{" · ".join(inline)}</div>' if inline else ""
    return head + "".join(blocks)


def prose_html(text: str) -> str:
    """A reply's text: prose as wrapped text, fenced code blocks as code."""
    out = []
    for part, language in fenced_parts(clip(text)):
        if language is None:
            if part.strip():
                out.append(f'<div class="prose">{esc(part.strip(chr(10)))}</div>')
        else:
            out.append(code_html(part, language))
    return "".join(out)


def usage_html(turn: Mapping[str, Any] | None) -> str:
    """``120 + 35 tokens · 1.24 s``: one model call's prompt and completion tokens and latency."""
    if not isinstance(turn, Mapping):
        return ""
    prompt, completion = number(turn.get("prompt_tokens")), number(turn.get("completion_tokens"))
    parts = [f"{prompt:,.0f} + {completion:,.0f} tokens"]
    latency = turn.get("latency")
    if isinstance(latency, (int, float)) and not isinstance(latency, bool):
        parts.append(f"{number(latency):.2f} s")
    if turn.get("cached"):
        parts.append("from the cache (replayed: no model time)")
    return f'<span class="usage" title="prompt + completion tokens, latency of the call">{" · ".join(parts)}</span>'


def number(value: Any) -> float:
    """A count or a duration as a finite float; 0 for anything else (a huge JSON integer overflows a float)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return 0.0
    try:
        out = float(value)
    except OverflowError:
        return 0.0
    return out if math.isfinite(out) else 0.0


def listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def turns_of(data: Mapping[str, Any]) -> dict[int, Mapping[str, Any]]:
    """The file's ``turns`` by the index of the assistant message each produced."""
    out = {}
    for turn in listed(data.get("turns")):
        if isinstance(turn, Mapping) and isinstance(turn.get("message"), int):
            out[turn["message"]] = turn
    return out


def totals_text(turns: Mapping[int, Mapping[str, Any]], model_turns: int, calls: int) -> str:
    """The transcript's head: model turns, tool calls, and (when recorded) its tokens and model time."""
    head = [
        f"{model_turns} model turn{'s' if model_turns != 1 else ''}",
        f"{calls} tool call{'s' if calls != 1 else ''}",
    ]
    if turns:
        prompt = sum(number(t.get("prompt_tokens")) for t in turns.values())
        completion = sum(number(t.get("completion_tokens")) for t in turns.values())
        # a replayed turn came from the response cache: its latency is the original call's, not this run's
        latency = sum(number(t.get("latency")) for t in turns.values() if not t.get("cached"))
        replayed = sum(1 for t in turns.values() if t.get("cached"))
        head += [f"{prompt:,.0f} + {completion:,.0f} tokens", f"{latency:.2f} s in model calls"]
        if replayed:
            head.append(f"{replayed} turn{'s' if replayed != 1 else ''} replayed from the cache")
    return " · ".join(head)


def folded(title: str, text: str) -> str:
    return (
        f'<details class="prompt"><summary>{esc(title)} · {len(text):,} characters</summary>'
        f'<div class="prose">{esc(clip(text))}</div></details>'
    )


def tool_outputs(messages: list[Any], index: int) -> list[int]:
    """The tool messages answering the assistant message at ``index``: those after it, up to the next
    assistant message (ids repeat across turns: a client makes up ``call_0`` when the server sends none)."""
    out = []
    for later in range(index + 1, len(messages)):
        message = messages[later]
        if not isinstance(message, dict):
            continue
        if message.get("role") == "assistant":
            break
        if message.get("role") == "tool" and message.get("tool_call_id") is not None:
            out.append(later)
    return out


def answer_of(call: Mapping[str, Any], messages: list[Any], candidates: list[int], shown: set[int]) -> int | None:
    """The first tool message among ``candidates`` with the call's id that is not shown yet."""
    for later in candidates:
        if later not in shown and str(messages[later].get("tool_call_id")) == str(call.get("id")):
            return later
    return None


def transcript_html(data: Mapping[str, Any]) -> str:
    """The ``<details>`` of one trajectory file: the conversation as turns."""
    # indexed as in the file: ``turns[].message`` counts every entry, one that is not an object included
    messages = listed(data.get("messages"))
    turns = turns_of(data)
    shown_outputs: set[int] = set()
    body, model_turn, calls, seen_model = [], 0, 0, False
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        role = str(message.get("role", "?"))
        text = content_text(message.get("content"))
        if role == "system" or (role == "user" and not seen_model):
            body.append(folded("system prompt" if role == "system" else "prompt", text))
        elif role == "assistant":
            seen_model = True
            model_turn += 1
            out = [
                f'<div class="turn model"><div class="th"><span class="role">model · turn {model_turn}</span> '
                f"{usage_html(turns.get(index))}</div>",
                prose_html(text),
            ]
            candidates = tool_outputs(messages, index)
            for call in listed(message.get("tool_calls")):
                if not isinstance(call, dict):
                    continue
                calls += 1
                fn = call.get("function") if isinstance(call.get("function"), dict) else call
                fn = fn if isinstance(fn, dict) else call
                name = str(fn.get("name") or "?")
                out.append(
                    f'<div class="call"><div class="th">tool call <b>{esc(name)}</b></div>'
                    f"{arguments_html(name, fn.get('arguments'))}"
                )
                answer = answer_of(call, messages, candidates, shown_outputs)
                if answer is not None:
                    shown_outputs.add(answer)
                    out.append(
                        f'<div class="th">output</div><pre class="out">'
                        f"{esc(clip(content_text(messages[answer].get('content'))))}</pre>"
                    )
                out.append("</div>")
            out.append("</div>")
            body.append("".join(out))
        elif role == "tool":
            if index not in shown_outputs:  # an output whose call is not in the file
                body.append(
                    f'<div class="turn"><div class="th"><span class="role">tool output</span>'
                    f"{' (' + esc(message.get('name')) + ')' if message.get('name') else ''}</div>"
                    f'<pre class="out">{esc(clip(text))}</pre></div>'
                )
        else:
            body.append(
                f'<div class="turn"><div class="th"><span class="role">{esc(role)}</span></div>{prose_html(text)}</div>'
            )
    shown = sum(isinstance(m, dict) for m in messages)
    return (
        f'<details class="transcript"><summary>transcript: {shown} messages · '
        f"{esc(totals_text(turns, model_turn, calls))}</summary>{''.join(body)}</details>"
    )
