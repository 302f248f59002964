"""OpenAI-compatible model client: Chat Completions or Responses, own retries, response cache.

Harnesses always speak the Chat Completions message shape (system/user/assistant with
``tool_calls``/tool messages); for the Responses protocol the client converts that list to input
items on the way out and the reply back to a chat-shaped assistant turn, so a harness never needs
to know which protocol is in use and its trajectory looks the same for both.
"""

from __future__ import annotations

import email.utils
import json
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import openai

from ..core.retrywait import pause_before_retry
from ..core.text import clipped, repair, repaired
from .cache import DEFAULT_CACHE_DIR, ResponseCache, cache_key
from .concurrency import DEFAULT_MAX_CONNECTIONS, CallGate, Spending
from .defaults import (  # noqa: F401
    DEFAULT_BASE_URL,
    DEFAULT_MAX_RETRIES,
    DEFAULT_MAX_RETRY_TIME,
    DEFAULT_RETRY_BASE_DELAY,
    DEFAULT_RETRY_MAX_DELAY,
    DEFAULT_TIMEOUT,
    PROTOCOLS,
    backoff_delay,
)
from .retrytime import retry_time_left, retry_time_spent, spend_retry_time

# statuses worth another try, as in OpenAI's own client: timeout, conflict, rate limit, server errors
RETRYABLE_STATUSES = {408, 409, 429}


MODEL_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9._:/@+\-]")  # what a served model's name may not hold


class ModelError(Exception):
    """A model call that could not produce a reply (after retries, or a replay-mode cache miss).

    ``request_retries``: the requests retried before giving up (the record counts them as it counts a reply's)."""

    def __init__(self, message: str, request_retries: int = 0) -> None:
        super().__init__(message)
        self.request_retries = request_retries


def count_failed_call(accounting: dict[str, Any], error: BaseException) -> None:
    """Add the retries of a call that ended in ``error`` to an item's ``accounting`` (a reply's are added by
    ``usage.count_completion``): a record says how hard the endpoint was tried even when it never answered."""
    retries = getattr(error, "request_retries", 0) or 0
    if retries:
        accounting["request_retries"] = accounting.get("request_retries", 0) + retries


@dataclass
class Completion:
    text: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # each {"id", "name", "arguments" (JSON text)}
    finish_reason: str = "stop"  # "stop", "length", "tool_calls", "content_filter", ...
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency: float = 0.0  # seconds of the call that produced the reply (kept as-is on cache hits)
    cached: bool = False
    text_repaired: int = 0  # characters of the reply replaced by U+FFFD (lone surrogates): see repair_reply
    request_retries: int = 0  # requests retried (429, 5xx, ...) before this reply came; never cached
    usage_reported: bool = True  # False: the reply had no token usage, so its cost is unknown (models/price.py)
    served_model: str = ""  # the model the endpoint said answered (the reply's ``model``; a gateway may swap it)

    @property
    def is_empty(self) -> bool:
        return not self.text.strip() and not self.tool_calls

    def assistant_message(self) -> dict[str, Any]:
        """The assistant turn to append to the conversation (chat shape, for either protocol)."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
                for call in self.tool_calls
            ]
        elif message["content"] is None:
            message["content"] = ""
        return message

    def to_record(self) -> dict[str, Any]:
        record = asdict(self)
        record.pop("cached")
        if not record["text_repaired"]:  # cache entries of clean replies stay as they always were
            record.pop("text_repaired")
        record.pop("request_retries")  # how this call went, not part of the reply
        record.pop("usage_reported")
        if not self.usage_reported:  # kept only when missing: cache entries of replies with usage stay as they were
            record["usage_missing"] = True
        if not record["served_model"]:  # a reply that named no model: its entry stays as entries always were
            record.pop("served_model")
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Completion:
        known: dict[str, Any] = {
            k: record[k]
            for k in (
                "text",
                "tool_calls",
                "finish_reason",
                "prompt_tokens",
                "completion_tokens",
                "latency",
                "text_repaired",
            )
            if k in record
        }
        if isinstance(record.get("served_model"), str):  # a replay keeps who answered the first time
            known["served_model"] = served_model_of({"model": record["served_model"]})
        # an entry written before replies were repaired (or by another tool) is repaired here, counted too
        completion = repair_reply(cls(**known, cached=True))
        # an entry written before usage was tracked says nothing: zero tokens both ways is no usage report
        completion.usage_reported = not record.get("usage_missing") and bool(
            completion.prompt_tokens or completion.completion_tokens
        )
        return completion


def repair_reply(completion: Completion) -> Completion:
    """The reply made valid UTF-8 where it enters: every lone surrogate (a JSON ``"\\udc80"`` escape) in its
    text and tool calls becomes U+FFFD, and ``text_repaired`` adds how many were replaced. Nothing else changes:
    the code extracted from the reply, scored and recorded is this repaired text."""
    text, count = repair(completion.text)
    calls = []
    for call in completion.tool_calls:
        fixed = {}
        for key, value in call.items():
            if isinstance(value, str):
                value, n = repair(value)
                count += n
            fixed[key] = value
        calls.append(fixed)
    completion.finish_reason = repaired(completion.finish_reason)  # a word of the protocol: not counted
    if not count:
        return completion
    completion.text, completion.tool_calls = text, calls
    completion.text_repaired += count
    return completion


def tool_result_message(call: dict[str, Any], content: str) -> dict[str, Any]:
    """The message carrying a tool's output back to the model for ``call`` (a Completion tool call)."""
    return {"role": "tool", "tool_call_id": call["id"], "content": content}


# ---------------------------------------------------------------- Responses API conversions


def _responses_content(content: str | list[dict[str, Any]] | None) -> str | list[dict[str, Any]]:
    """Chat content (text or parts) to Responses input content."""
    if content is None or isinstance(content, str):
        return content or ""
    parts = []
    for part in content:
        kind = part.get("type")
        if kind == "text":
            parts.append({"type": "input_text", "text": part.get("text", "")})
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            parts.append({"type": "input_image", "image_url": url})
        else:
            parts.append(part)  # already a Responses part
    return parts


def messages_to_input_items(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message["tool_call_id"],
                    "output": message.get("content") or "",
                }
            )
        elif role == "assistant":
            if message.get("content"):
                items.append({"role": "assistant", "content": message["content"]})
            for call in message.get("tool_calls") or []:
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call["id"],
                        "name": call["function"]["name"],
                        "arguments": call["function"]["arguments"],
                    }
                )
        else:
            items.append({"role": role, "content": _responses_content(message.get("content"))})
    return items


def tools_to_responses(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    converted = []
    for tool in tools:
        if tool.get("type") == "function" and "function" in tool:
            fn = tool["function"]
            converted.append(
                {
                    "type": "function",
                    "name": fn["name"],
                    "description": fn.get("description", ""),
                    "parameters": fn.get("parameters", {"type": "object", "properties": {}}),
                    "strict": fn.get("strict", False),
                }
            )
        else:
            converted.append(tool)
    return converted


def responses_params(params: dict[str, Any]) -> dict[str, Any]:
    """Accept the chat spellings of the common knobs for the Responses protocol too."""
    out = dict(params)
    for alias in ("max_tokens", "max_completion_tokens"):
        if alias in out and "max_output_tokens" not in out:
            out["max_output_tokens"] = out.pop(alias)
        else:
            out.pop(alias, None)
    if "reasoning_effort" in out:
        effort = out.pop("reasoning_effort")
        out.setdefault("reasoning", {})
        if isinstance(out["reasoning"], dict):
            out["reasoning"] = {**out["reasoning"], "effort": effort}
    return out


# ---------------------------------------------------------------- reply parsing


def _dump(reply: object) -> dict[str, Any]:
    if hasattr(reply, "model_dump"):
        data: dict[str, Any] = reply.model_dump()
        return data
    if isinstance(reply, dict):
        return reply
    raise ValueError(f"reply is not a JSON object: {str(reply)[:200]!r}")


def parse_chat_reply(reply: object) -> Completion:
    data = _dump(reply)
    choices = data.get("choices") or []
    if not choices:
        raise ValueError(f"reply has no choices: {json.dumps(data)[:300]}")
    choice = choices[0]
    message = choice.get("message") or {}
    calls = [
        {
            "id": call.get("id") or f"call_{i}",
            "name": (call.get("function") or {}).get("name", ""),
            "arguments": (call.get("function") or {}).get("arguments") or "{}",
        }
        for i, call in enumerate(message.get("tool_calls") or [])
    ]
    usage = data.get("usage") or {}
    return repair_reply(
        Completion(
            text=message.get("content") or "",
            tool_calls=calls,
            finish_reason=repaired(choice.get("finish_reason") or ("tool_calls" if calls else "stop")),
            prompt_tokens=usage.get("prompt_tokens") or 0,
            completion_tokens=usage.get("completion_tokens") or 0,
            usage_reported=has_usage(usage, "prompt_tokens", "completion_tokens"),
            served_model=served_model_of(data),
        )
    )


def served_model_of(data: dict[str, Any]) -> str:
    """The model the reply says answered (its ``model``), "" when it names none. The endpoint's text: kept to the
    characters of model names (others become ``?``) and 200 of them, so every page can show it as it is."""
    model = data.get("model")
    return MODEL_NAME_UNSAFE.sub("?", model.strip()[:200]) if isinstance(model, str) else ""


def has_usage(usage: dict[str, Any], *keys: str) -> bool:
    """Whether a reply's ``usage`` gives a token count (a server that sends none leaves the cost unknown)."""
    return any(isinstance(usage.get(key), int) and not isinstance(usage.get(key), bool) for key in keys)


def parse_responses_reply(reply: object) -> Completion:
    data = _dump(reply)
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for item in data.get("output") or []:
        kind = item.get("type")
        if kind == "message":
            for part in item.get("content") or []:
                if part.get("type") in ("output_text", "text"):
                    texts.append(part.get("text") or "")
        elif kind == "function_call":
            calls.append(
                {
                    "id": item.get("call_id") or item.get("id") or f"call_{len(calls)}",
                    "name": item.get("name", ""),
                    "arguments": item.get("arguments") or "{}",
                }
            )
    status = data.get("status") or "completed"
    incomplete = (data.get("incomplete_details") or {}).get("reason")
    if status == "incomplete":
        finish = "length" if incomplete in (None, "max_output_tokens") else incomplete
    elif calls:
        finish = "tool_calls"
    else:
        finish = "stop"
    usage = data.get("usage") or {}
    return repair_reply(
        Completion(
            text="".join(texts),
            tool_calls=calls,
            finish_reason=repaired(finish),
            prompt_tokens=usage.get("input_tokens") or 0,
            completion_tokens=usage.get("output_tokens") or 0,
            usage_reported=has_usage(usage, "input_tokens", "output_tokens"),
            served_model=served_model_of(data),
        )
    )


# ---------------------------------------------------------------- retries


def retry_after_seconds(error: Exception) -> float | None:
    """The server's requested wait (Retry-After / retry-after-ms), if it sent one."""
    response = getattr(error, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return float(millis) / 1000.0
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value) if value else None
        if parsed is None:
            return None
        return max(0.0, parsed.timestamp() - time.time())


def is_retryable(error: Exception) -> bool:
    if isinstance(error, openai.APIConnectionError):  # includes timeouts
        return True
    if isinstance(error, openai.APIStatusError):
        return error.status_code in RETRYABLE_STATUSES or error.status_code >= 500
    return False


def is_rate_limit(error: Exception) -> bool:
    """A 429, or any refusal that says when to come back (Retry-After)."""
    if isinstance(error, openai.APIStatusError) and error.status_code == 429:
        return True
    return isinstance(error, openai.APIStatusError) and retry_after_seconds(error) is not None


MESSAGE_LIMIT = 1000  # characters of the server's words kept in a record's message (a gateway's 429 says a lot)


def describe_error(error: Exception) -> str:
    """One line for a failed call; the server's own words in it are repaired (they came from outside)."""
    if isinstance(error, openai.APITimeoutError):
        return "request timed out"
    if isinstance(error, openai.APIStatusError):
        return f"HTTP {error.status_code}: {repaired(clipped(str(error), MESSAGE_LIMIT))}"
    return f"{type(error).__name__}: {repaired(clipped(str(error), MESSAGE_LIMIT))}"


def fix_hint(error: Exception | None) -> str:
    status = getattr(error, "status_code", None)
    if status in (401, 403):
        return "check --model-api-key (or OPENAI_API_KEY)"
    if status == 404:
        return "check --model (the server's model name), --model-base-url and --model-protocol"
    if status in (400, 422):
        return "check --model-params and --model-protocol against what the server accepts"
    if status == 429:
        return "the server is rate limiting; lower --bench-max-connections or raise --bench-set model_max_retries"
    if isinstance(error, openai.APITimeoutError):
        return "raise --bench-set model_timeout or check that the server is responsive"
    if isinstance(error, openai.APIConnectionError):
        return "check --model-base-url (or OPENAI_BASE_URL) and that the server is running"
    return "check --model-base-url, --model and that the server is healthy, or raise --bench-set model_max_retries"


class OpenAIModel:
    is_oracle = False

    def __init__(
        self,
        name: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        protocol: str = "chat",
        params: dict[str, Any] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        cache_dir: str | Path = DEFAULT_CACHE_DIR,
        cache_mode: str = "rw",
        retry_base_delay: float = DEFAULT_RETRY_BASE_DELAY,
        retry_max_delay: float = DEFAULT_RETRY_MAX_DELAY,
        max_retry_time: float = DEFAULT_MAX_RETRY_TIME,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        price: Any = None,
        max_cost: float | None = None,
    ):
        if protocol not in PROTOCOLS:
            raise ValueError(f"model protocol {protocol!r} is not one of {', '.join(PROTOCOLS)}")
        self.name = name
        self.base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")
        self.protocol = protocol
        self.params = dict(params or {})
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.retry_base_delay = float(retry_base_delay)
        self.retry_max_delay = float(retry_max_delay)
        self.max_retry_time = float(max_retry_time)
        self.cache = ResponseCache(cache_dir, cache_mode)
        # local OpenAI-compatible servers usually ignore the key, but the SDK insists on one; the SDK's own
        # retries are off (max_retries=0): every retry happens in _call_with_retries, where it is counted and timed
        # Requests in flight are bounded by the gate (--bench-max-connections, this process's share); the SDK's
        # connection pool is sized to it, so a request that passed the gate never waits for a connection.
        self.gate = CallGate(max_connections)
        self.price = price  # models.price.Price of the fresh calls, counted against max_cost as they return
        self.spending = Spending(self.gate, max_cost)
        # (the Limits class of whichever HTTP library this SDK release is built on)
        limits = type(openai.DEFAULT_CONNECTION_LIMITS)
        pool = limits(max_connections=self.gate.limit, max_keepalive_connections=self.gate.limit)
        self._client = openai.OpenAI(
            base_url=self.base_url,
            api_key=api_key or "not-set",
            timeout=self.timeout,
            max_retries=0,
            http_client=openai.DefaultHttpxClient(limits=pool, timeout=self.timeout),
        )
        self.settings = {
            "model": name,
            "base_url": self.base_url,
            "protocol": protocol,
            "params": self.params,
            "timeout": self.timeout,
            "max_retries": self.max_retries,
            "max_retry_time": self.max_retry_time,
            "cache_dir": str(cache_dir),
            "cache_mode": cache_mode,
        }

    @property
    def endpoint(self) -> str:
        return f"{self.base_url}/{'chat/completions' if self.protocol == 'chat' else 'responses'}"

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        sample_index: int = 0,
        tool_choice: str | None = None,
        cache_messages: list[dict[str, Any]] | None = None,
    ) -> Completion:
        """One model reply for ``messages`` (chat shape); cached, retried; raises ModelError. The cache keys on
        ``cache_messages`` when given (an agent's request with what varies from run to run masked)."""
        key = cache_key(
            base_url=self.base_url,
            model=self.name,
            protocol=self.protocol,
            messages=messages if cache_messages is None else cache_messages,
            tools=tools or None,
            params=self.params,
            sample_index=sample_index,
            tool_choice=tool_choice,
        )
        record = self.cache.get(key)
        if record is not None:
            return Completion.from_record(record)
        if self.cache.mode == "replay":
            raise ModelError(
                f"not in cache (replay mode): no stored reply of model {self.name!r} at "
                f"{self.endpoint} for this request (key {key[:16]}...) under {self.cache.root}. "
                "Run once with --bench-cache rw to record replies, or check that --model, "
                "--model-base-url, --model-protocol, --model-params and --bench-cache-dir match "
                "the recorded run."
            )
        completion = self._call_with_retries(messages, tools, tool_choice)
        if self.price is not None and completion.usage_reported:
            self.spending.add(self.price.cost(completion.prompt_tokens, completion.completion_tokens))
        if not completion.is_empty:  # empty replies are not worth replaying
            self.cache.put(key, completion.to_record())
        return completion

    def _call_with_retries(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, tool_choice: str | None
    ) -> Completion:
        """The request, retried on retryable failures: at most ``max_retries`` times, and never past
        ``max_retry_time`` seconds of retries, counted from the first failure and shared by every request of the
        item (retrytime.py: the waits and the repeated attempts; a retry's own timeout is cut to what is left), so
        a failing endpoint costs an item a bounded time while a long reply that failed late still gets its
        retries. Every retry is counted, on the reply or on the error."""
        last_error: Exception | None = None
        failed_at: float | None = None  # when the first attempt failed: the retry time starts there
        unslept = 0.0  # seconds of waits the retry-wait scale skipped: spent all the same
        timeout: float | None = None  # the first attempt has the client's --bench-set model_timeout
        out_of_time = False
        attempt = 0
        while True:
            started = time.monotonic()
            try:
                with self.gate.slot():  # (CallsStopped once the run's budget is spent: not retried)
                    completion = self._call_once(messages, tools, tool_choice, timeout=timeout)
            except openai.OpenAIError as error:
                last_error = error
                if is_rate_limit(error):  # fewer requests in flight for a while, from every chain of this process
                    self.gate.rate_limited(retry_after_seconds(error))
                if not is_retryable(error) or attempt >= self.max_retries:
                    break
                if failed_at is None:
                    failed_at = time.monotonic()
                wait = self._backoff(attempt, error)
                left = retry_time_left(self.max_retry_time, failed_at, unslept) - wait  # the item's budget
                if left <= 0:
                    out_of_time = True
                    break
                unslept += pause_before_retry(wait)
                timeout = min(self.timeout, left)
                attempt += 1
                continue
            except ValueError as error:  # a reply we cannot read; retrying will not help
                last_error = error
                break
            completion.latency = time.monotonic() - started
            completion.request_retries = attempt
            spend_retry_time(failed_at, unslept)
            return completion
        spend_retry_time(failed_at, unslept)
        tried = f"{attempt + 1} attempt{'s' if attempt else ''}"
        if out_of_time and failed_at is not None:
            spent = retry_time_spent(failed_at, unslept)
            tried += f", {spent:.0f} s of retries (--bench-set=model_max_retry_time={self.max_retry_time:g})"
        raise ModelError(
            f"model {self.name!r} at {self.endpoint} failed after {tried}: "
            f"{describe_error(last_error)}. Fix: {fix_hint(last_error)}.",
            request_retries=attempt,
        )

    def send_once(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | None = None,
        params: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> Completion:
        """Exactly one request as the run would send it (the cache is neither read nor written, nothing is
        retried; the SDK's errors are raised): the model preflight's probe of the endpoint."""
        return self._call_once(messages, tools, tool_choice, timeout=timeout, params=params)

    def _backoff(self, attempt: int, error: Exception) -> float:
        requested = retry_after_seconds(error)
        if requested is not None:
            return min(self.retry_max_delay, max(0.0, requested))
        return backoff_delay(attempt, self.retry_base_delay, self.retry_max_delay)

    def _call_once(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        tool_choice: str | None,
        *,
        timeout: float | None = None,
        params: dict[str, Any] | None = None,
    ) -> Completion:
        """One request, no cache, no retry (raises the SDK's errors). ``params`` replace the run's extra request
        fields (the preflight caps the reply); ``timeout`` replaces --bench-set model_timeout for this request."""
        # The request is plain JSON (messages and tools as the harness built them), so it goes to the SDK as
        # keyword arguments of type Any rather than as the SDK's TypedDicts.
        request: dict[str, Any] = {"model": self.name}
        if timeout is not None:
            request["timeout"] = timeout
        fields = self.params if params is None else params
        if self.protocol == "chat":
            request["messages"] = messages
            if tools:
                request["tools"] = tools
            if tools and tool_choice:
                request["tool_choice"] = tool_choice
            if fields:
                request["extra_body"] = fields
            return parse_chat_reply(self._client.chat.completions.create(**request))
        request["input"] = messages_to_input_items(messages)
        if tools:
            request["tools"] = tools_to_responses(tools)
        if tools and tool_choice:
            request["tool_choice"] = tool_choice
        body = responses_params(fields)
        if body:
            request["extra_body"] = body
        return parse_responses_reply(self._client.responses.create(**request))
