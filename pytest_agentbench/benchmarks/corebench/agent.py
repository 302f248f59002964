"""The CORE-Bench agent: a tool-using loop on the model layer, working in an environment.

Tools: ``bash(command, timeout?)``, ``view_image(path, page?)`` and ``submit(answers)``. A chat
tool message can only carry text, so an image is announced in the tool result and sent in a user
message with an ``image_url`` data URL right after the tool results of that turn. ``submit``
accepts only the exact question texts as keys; on success it writes ``report.json`` at the
workspace root and ends the run. Step, time and token limits end the run with what is in the
workspace so far; ``end_reason`` says why it ended. A cost budget (``AgentLimits.cost``, USD, counted with
``AgentLimits.price``) ends it with ``budget``: an item status of its own, as upstream's cost cap did.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shlex
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...core.text import printable, repair_value
from ...models.price import Price, over_budget, start_costs
from ...models.usage import count_completion, turn_of
from ...sandbox.result import ExecResult
from . import scorer
from .defaults import DEFAULT_COMMAND_TIMEOUT, DEFAULT_STEPS, DEFAULT_TIME

if TYPE_CHECKING:  # the openai SDK is imported when an agent runs, not when the plugin loads
    from ...envs import Environment
    from ...models.client import Completion

MAX_IMAGE_BYTES = 20 << 20
IMAGE_TYPES = {
    b"\x89PNG\r\n\x1a\n": "image/png",
    b"\xff\xd8\xff": "image/jpeg",
    b"GIF87a": "image/gif",
    b"GIF89a": "image/gif",
}
END_REASONS = ("submitted", "max_steps", "time_limit", "token_limit", "model_error", "budget")

SYSTEM_PROMPT = """You are an expert research engineer reproducing the results of a scientific code capsule.
You work in a Linux shell through tools. The capsule is in the folder you start in ({workdir}).
- bash(command, timeout): run a bash command there; long outputs are shortened to their head and tail.
- view_image(path, page): look at a PNG/JPEG image or a page of a PDF, for questions about figures.
- submit(answers): hand in your answers as a JSON object whose keys are exactly the question texts; \
this writes report.json and ends your work.
Work step by step, check your numbers, and call submit before you run out of steps (at most {steps} \
steps of {minutes:.0f} minutes in total)."""

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a bash command in the capsule's folder and return its exit code, stdout and stderr.",
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "the bash command"},
                    "timeout": {
                        "type": "number",
                        "description": f"seconds before it is killed (default {DEFAULT_COMMAND_TIMEOUT:.0f})",
                    },
                },
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "view_image",
            "description": "Show an image file (PNG, JPEG, GIF, or one page of a PDF) so you can read a figure.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "path of the file, relative to the starting folder"},
                    "page": {"type": "integer", "description": "PDF page number (default 1)"},
                },
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "submit",
            "description": "Submit the final answers: a JSON object mapping each exact question text to its answer.",
            "parameters": {
                "type": "object",
                "properties": {"answers": {"type": "object", "description": "question text -> answer"}},
                "required": ["answers"],
            },
        },
    },
]


@dataclass
class AgentLimits:
    steps: int = DEFAULT_STEPS
    time: float = DEFAULT_TIME
    tokens: int | None = None
    command_timeout: float = DEFAULT_COMMAND_TIMEOUT
    cost: float | None = None  # USD the capsule's fresh model calls may cost (--bench-set max_cost_per_item)
    price: Price | None = None  # the model's price (--model-price): without it nothing is costed


@dataclass
class AgentResult:
    end_reason: str
    final_answer: dict | None = None
    message: str = ""
    accounting: dict = field(default_factory=dict)
    trajectory: list[dict] = field(default_factory=list)
    turns: list[dict] = field(default_factory=list)  # tokens and latency of each model call (usage.turn_of)


def new_accounting() -> dict[str, Any]:
    return {
        "steps": 0,
        "model_calls": 0,
        "cache_hits": 0,
        "tool_calls": 0,
        "tool_errors": 0,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "submit_rejections": 0,
        "commands_timed_out": 0,
        "request_retries": 0,
        "tools": {"bash": 0, "view_image": 0, "submit": 0},
    }


def format_command_result(result: ExecResult, timeout: float) -> str:
    lines = [
        f"exit code: {result.exit_code}"
        if not result.timed_out
        else f"command timed out after {timeout:g} s and was killed"
    ]
    for label, text, size in (
        ("stdout", result.stdout, result.stdout_bytes),
        ("stderr", result.stderr, result.stderr_bytes),
    ):
        note = f" ({size} bytes, only the head and the tail are shown)" if size > len(text.encode()) else ""
        lines.append(f"--- {label}{note} ---\n{text}" if text else f"--- {label}: empty ---")
    return "\n".join(lines)


def image_type(data: bytes) -> str | None:
    for magic, mime in IMAGE_TYPES.items():
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


class ToolError(Exception):
    """A tool call that cannot be done; its message goes back to the model."""


class CoreAgent:
    def __init__(
        self, model, env: Environment, questions: list[str], limits: AgentLimits, *, sample_index: int = 0
    ) -> None:
        self.model = model
        self.sample_index = sample_index  # the attempt (--bench-attempts) less one: part of the cache key
        self.env = env
        self.questions = list(questions)
        self.limits = limits
        self.accounting = start_costs(new_accounting(), limits.price)
        self.started = 0.0
        self.submitted: dict | None = None
        self.pending_images: list[dict] = []
        self.turns: list[dict] = []

    # ---------------------------------------------------------------- the loop

    def time_left(self) -> float:
        return self.limits.time - (time.monotonic() - self.started)

    def run(self, prompt: str) -> AgentResult:
        self.started = time.monotonic()
        system = SYSTEM_PROMPT.format(workdir=self.env.workdir, steps=self.limits.steps, minutes=self.limits.time / 60)
        messages: list[dict] = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
        reason, message = self._loop(messages)
        self.accounting["agent_seconds"] = round(time.monotonic() - self.started, 3)
        return AgentResult(
            end_reason=reason,
            final_answer=self.submitted,
            message=message,
            accounting=self.accounting,
            trajectory=messages,
            turns=self.turns,
        )

    def _loop(self, messages: list[dict]) -> tuple[str, str]:
        from ...models.client import (  # why: it imports the openai SDK (slow)
            ModelError,
            count_failed_call,
            tool_result_message,
        )

        acc = self.accounting
        while True:
            if acc["steps"] >= self.limits.steps:
                return "max_steps", f"the agent used its {self.limits.steps} steps without submitting"
            if self.time_left() <= 0:
                return "time_limit", f"the agent ran out of its {self.limits.time:g} s without submitting"
            used = acc["prompt_tokens"] + acc["completion_tokens"]
            if self.limits.tokens is not None and used >= self.limits.tokens:
                return "token_limit", f"the agent used {used} tokens of its budget of {self.limits.tokens}"
            spent = over_budget(acc, self.limits.cost)
            if spent:
                return "budget", f"the agent {spent}"
            acc["steps"] += 1
            try:
                completion = self.model.complete(messages, tools=TOOLS, sample_index=self.sample_index)
            except ModelError as exc:
                count_failed_call(acc, exc)
                return "model_error", printable(exc)  # the server's text: no escape sequence reaches a record
            self._count(completion)
            self.turns.append(turn_of(completion, len(messages)))
            messages.append(completion.assistant_message())
            if not completion.tool_calls:
                messages.append(
                    {
                        "role": "user",
                        "content": "Continue with the tools. When you have the answers, "
                        "call submit(answers) with the exact question texts "
                        "as keys.",
                    }
                )
                continue
            for call in completion.tool_calls:
                messages.append(tool_result_message(call, self._dispatch(call)))
            messages.extend(self.pending_images)  # after every tool result of the turn, as the API requires
            self.pending_images = []
            if self.submitted is not None:
                return "submitted", ""

    def _count(self, completion: Completion) -> None:
        count_completion(self.accounting, completion, self.limits.price)
        self._count_repaired(completion.text_repaired)

    def _count_repaired(self, count: int) -> None:
        """Characters of text from outside (replies, tool arguments, command output) replaced by U+FFFD."""
        if count:
            self.accounting["text_repaired"] = self.accounting.get("text_repaired", 0) + count

    # ---------------------------------------------------------------- tools

    def _dispatch(self, call: dict) -> str:
        acc = self.accounting
        acc["tool_calls"] += 1
        name = call.get("name")
        try:
            # refused before decoding when nested past the scorer's limit: the repair and the record recurse per level
            args, repaired = repair_value(scorer.loads_shallow(call.get("arguments") or "{}"))
            self._count_repaired(repaired)  # a JSON "\\udc80" escape in the arguments is a lone surrogate
            if not isinstance(args, dict):
                raise ToolError("the arguments must be a JSON object")
            if self.submitted is not None:
                raise ToolError("the answers were already submitted; nothing more is run")
            if name == "bash":
                acc["tools"]["bash"] += 1
                return self.bash(args)
            if name == "view_image":
                acc["tools"]["view_image"] += 1
                return self.view_image(args)
            if name == "submit":
                acc["tools"]["submit"] += 1
                return self.submit(args)
            raise ToolError(f"unknown tool {name!r}; the tools are bash, view_image and submit")
        except json.JSONDecodeError as exc:
            acc["tool_errors"] += 1
            return f"error: the arguments of {name} are not valid JSON ({exc})"
        except (ToolError, FileNotFoundError, ValueError, OSError) as exc:
            acc["tool_errors"] += 1
            return f"error: {exc}"

    def bash(self, args: dict) -> str:
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ToolError("bash needs a non-empty 'command' string")
        try:
            timeout = float(args.get("timeout") or self.limits.command_timeout)
        except (TypeError, ValueError):
            raise ToolError(f"timeout must be a number of seconds, got {args.get('timeout')!r}") from None
        timeout = max(1.0, min(timeout, self.limits.command_timeout * 10, self.time_left()))
        result = self.env.run(command, timeout)
        self.accounting["commands_timed_out"] += int(result.timed_out)
        self._count_repaired(result.text_repaired)
        return format_command_result(result, timeout)

    def view_image(self, args: dict) -> str:
        path = args.get("path")
        if not isinstance(path, str) or not path:
            raise ToolError("view_image needs a 'path'")
        data = self.env.read_file(path)
        if data.startswith(b"%PDF"):
            data = self._pdf_page(path, args.get("page") or 1)
        mime = image_type(data)
        if mime is None:
            raise ToolError(f"{path} is not a PNG, JPEG, GIF, WebP or PDF file")
        if len(data) > MAX_IMAGE_BYTES:
            raise ToolError(
                f"{path} is {len(data)} bytes; images above {MAX_IMAGE_BYTES >> 20} MB are not sent "
                "(convert it to a smaller PNG first)"
            )
        url = f"data:{mime};base64,{base64.b64encode(data).decode()}"
        self.pending_images.append(
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": f"The image {path} from view_image:"},
                    {"type": "image_url", "image_url": {"url": url}},
                ],
            }
        )
        return f"{path} ({mime}, {len(data)} bytes) is shown in the next message."

    def _pdf_page(self, path: str, page: Any) -> bytes:
        try:
            page = int(page)
        except (TypeError, ValueError):
            raise ToolError(f"page must be a number, got {page!r}") from None
        out = f"/tmp/agentbench-pdf-page-{page}"
        quoted = shlex.quote(path)
        result = self.env.run(
            f"command -v pdftoppm >/dev/null || exit 127; "
            f"pdftoppm -png -r 100 -f {page} -l {page} -singlefile {quoted} {out}",
            120,
        )
        if result.exit_code == 127:
            raise ToolError(
                "cannot show a PDF: pdftoppm is not installed in the environment (install "
                "poppler-utils, or convert the page to PNG yourself and view that)"
            )
        if result.exit_code != 0:
            raise ToolError(f"pdftoppm could not render page {page} of {path}: {result.stderr.strip()[:500]}")
        data = self.env.read_file(out + ".png")
        self.env.run(f"rm -f {out}.png", 30)
        return data

    def submit(self, args: dict) -> str:
        answers = args.get("answers")
        if isinstance(answers, str):
            try:
                answers = json.loads(answers)
            except json.JSONDecodeError as exc:
                raise ToolError(f"answers must be a JSON object, got text that is not JSON ({exc})") from None
        if not isinstance(answers, dict):
            raise ToolError(f"answers must be a JSON object (question text -> answer), got {type(answers).__name__}")
        missing = [q for q in self.questions if q not in answers]
        extra = [k for k in answers if k not in self.questions]
        if missing or extra:
            self.accounting["submit_rejections"] += 1
            parts = ["Not accepted: the keys must be exactly the question texts."]
            if missing:
                parts.append("Missing: " + json.dumps(missing))
            if extra:
                parts.append("Not questions: " + json.dumps(extra))
            parts.append("Nothing was written; call submit again with corrected keys.")
            return "\n".join(parts)
        self.env.write_file(scorer.REPORT_NAME, json.dumps(answers, indent=2))
        self.submitted = answers
        return f"Accepted: {len(answers)} answers written to {scorer.REPORT_NAME}."


def compact_trajectory(messages: list[dict]) -> list[dict]:
    """The trajectory with image data URLs replaced by their size and hash (kept readable on disk)."""
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            parts = []
            for part in content:
                url = (part.get("image_url") or {}).get("url", "") if part.get("type") == "image_url" else ""
                if url.startswith("data:"):
                    head, _, b64 = url.partition(",")
                    digest = hashlib.sha256(b64.encode()).hexdigest()[:16]
                    part = {
                        "type": "image_url",
                        "image_url": {"url": f"{head},<{len(b64)} base64 chars, sha256 {digest}>"},
                    }
                parts.append(part)
            message = {**message, "content": parts}
        out.append(message)
    return out


def write_trajectory(files: Any, key: str, result: AgentResult, extra: dict) -> str | None:
    """``trajectories/<key>.json`` through the run's file sink (``core.io.RunFiles``; None: not kept); ``key`` is
    the sample's (the capsule, ``capsule-1[attempt2]`` with --bench-attempts). Returns the relpath or None."""
    if files is None:
        return None
    capsule_id = key.split("[", 1)[0]
    return files.write(
        f"trajectories/{key}.json",
        json.dumps(
            {
                "capsule": capsule_id,
                "end_reason": result.end_reason,
                "message": result.message,
                "accounting": result.accounting,
                **extra,
                "messages": compact_trajectory(result.trajectory),
                "turns": result.turns,
            },
            indent=1,
            default=str,
        ),
    )
