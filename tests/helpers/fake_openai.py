"""A small scripted OpenAI-compatible server on 127.0.0.1 for tests.

Serves POST /v1/chat/completions and POST /v1/responses from a queue of scripted replies (streamed as
server-sent events when the request asks for ``stream``: chat chunks, or the Responses API's events), logs
every request, and can be told to fail (429 with Retry-After, persistent 500) or to be slow.

    with FakeOpenAI() as server:
        server.reply("```python\\ndef f(): return 1\\n```")
        server.reply(tool_calls=[("code_interpreter", {"code": "print(1)"})])
        server.fail(times=1, status=429, retry_after=0)
        ... OpenAIModel("m", base_url=server.base_url, ...)
        server.requests  # [{"path", "body", "headers" (lower-cased names), "at" (monotonic time)}, ...]

For the model preflight: GET /v1/models lists ``server.models`` (empty by default: any model is
served; ``list_models = False`` answers 404 as a server without listing does); ``known_models``
makes completions of any other model a 404 (model_not_found); ``api_key`` makes every request with
another bearer token a 401. Preflight requests (listings, 1-token completions) are counted in
``server.preflights`` and never consume a scripted reply. Only paths under /v1/ exist.

Answering as a gateway does (LiteLLM's proxy, its JSON error bodies; the preflight's requests included):
``gateway_bad_key = True`` answers every request with LiteLLM's 400 "No connected db." (how it refuses a key
it cannot check); ``gateway_status = 500`` answers every POST with that status; ``gateway_error(times, status,
retry_after, preflights)`` queues failures (429 with Retry-After, 500, ...) for the next POSTs;
``gateway_down_after(n, status)`` answers n item requests, then fails every POST. ``fail_when = f`` answers every
item request whose body ``f`` gives a status for with that status (a step that always fails).

Fixtures (loaded by tests/conftest.py through ``pytest_plugins``): ``server``, a started FakeOpenAI stopped after
the test (a module that wants it scripted up front overrides it: ``def server(server): server.reply(...)``), and
``make_model``, a factory of the real client against it: ``make_model("responses", max_retries=0)``.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

import pytest

from helpers.serving import serve_in_background

if TYPE_CHECKING:
    from pytest_agentbench.models.client import OpenAIModel


class FakeOpenAI:
    def __init__(self):
        self._lock = threading.Lock()
        self._replies: deque = deque()
        self._failures: deque = deque()  # (status, retry_after) served before scripted replies
        self.always_status: int | None = None  # persistent failure status, e.g. 500
        self.delay = 0.0  # seconds to wait before every answer
        self.requests: list[dict] = []
        self.models: list[str] = []  # what GET /v1/models lists
        self.list_models = True  # False: GET /v1/models is a 404, as on servers that do not list
        self.known_models: list[str] | None = None  # when set, completions of other models are a 404
        self.served_model: str | None = None  # when set, replies say this model answered (a gateway's fallback)
        self.api_key: str | None = None  # when set, other bearer tokens get a 401
        self.preflights: list[dict] = []  # GET /v1/models and 1-token completions (never scripted replies)
        self.gateway_bad_key = False  # True: every request gets LiteLLM's 400 "No connected db."
        self.gateway_status: int | None = None  # every POST (preflights too) gets this status, LiteLLM's body
        self._gateway_failures: deque = deque()  # (status, retry_after, preflights too) for the next POSTs
        self._down_after: tuple[int, int] | None = None  # (item requests still answered, status after them)
        # a step that always fails: body -> the status to answer with (None: answer as scripted); no reply is used
        self.fail_when: Callable[[dict], int | None] | None = None
        self._ids = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ scripting

    def reply(
        self,
        text: str = "",
        *,
        tool_calls=(),
        finish_reason: str | None = None,
        prompt_tokens: int = 11,
        completion_tokens: int = 7,
        delay: float = 0.0,
    ) -> None:
        """Queue one reply. tool_calls: (name, arguments dict or JSON text[, call id]) tuples.
        finish_reason 'length' renders as a cut-off reply in both protocols; prompt_tokens=None sends no usage."""
        self._replies.append(
            {
                "text": text,
                "tool_calls": list(tool_calls),
                "finish_reason": finish_reason,
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "delay": delay,
            }
        )

    def reply_with(self, make: Callable[[dict], dict]) -> None:
        """Queue a reply computed from the request body; ``make`` returns reply() keyword args."""
        self._replies.append(make)

    def fail(self, times: int = 1, status: int = 429, retry_after: float | None = None) -> None:
        for _ in range(times):
            self._failures.append((status, retry_after))

    def gateway_error(
        self, times: int = 1, status: int = 500, retry_after: float | None = None, *, preflights: bool = False
    ) -> None:
        """The next ``times`` POSTs get ``status`` with LiteLLM's JSON body (and Retry-After when given); with
        ``preflights`` the preflight's requests count too, else they are answered and not counted."""
        for _ in range(times):
            self._gateway_failures.append((status, retry_after, preflights))

    def gateway_down_after(self, answered: int, status: int = 500) -> None:
        """Answer ``answered`` more item requests, then fail every POST with ``status`` (an endpoint that dies
        mid-run)."""
        self._down_after = (answered, status)

    @property
    def base_url(self) -> str:
        assert self._server is not None, "start the server first"
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def count(self, path_suffix: str = "") -> int:
        return sum(1 for r in self.requests if r["path"].endswith(path_suffix))

    # ------------------------------------------------------------ lifecycle

    def start(self) -> FakeOpenAI:
        handler = _make_handler(self)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = serve_in_background(self._server, "fake-openai")
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------ answering

    def refusal(self, path: str, body: dict | None, headers: dict) -> tuple[int, dict, dict] | None:
        """The error a request gets before any scripting: unknown path, wrong key, unknown model."""
        if not path.startswith("/v1/"):
            return 404, {}, {"error": {"message": f"fake server: unknown path {path}"}}
        if self.api_key is not None and headers.get("authorization") != f"Bearer {self.api_key}":
            return (
                401,
                {},
                {
                    "error": {
                        "message": "Incorrect API key provided",
                        "type": "invalid_request_error",
                        "code": "invalid_api_key",
                    }
                },
            )
        model = (body or {}).get("model")
        if body is not None and self.known_models is not None and model not in self.known_models:
            return (
                404,
                {},
                {
                    "error": {
                        "message": f"The model `{model}` does not exist",
                        "type": "invalid_request_error",
                        "code": "model_not_found",
                    }
                },
            )
        return None

    def gateway_answer(self, is_preflight: bool) -> tuple[int, dict, dict] | None:
        """The gateway's failure for this POST, if one is due (called under the lock)."""
        if self.gateway_bad_key:
            return gateway_body(400, None, "No connected db.", "no_db_connection")
        if self.gateway_status is not None:
            return gateway_body(self.gateway_status, None)
        if self._gateway_failures and (self._gateway_failures[0][2] or not is_preflight):
            status, retry_after, _ = self._gateway_failures.popleft()
            return gateway_body(status, retry_after)
        if self._down_after is not None and not is_preflight:
            left, status = self._down_after
            if left <= 0:
                return gateway_body(status, None)
            self._down_after = (left - 1, status)
        return None

    def answer_get(self, path: str, headers: dict) -> tuple[int, dict, dict]:
        with self._lock:
            self.preflights.append({"path": path, "headers": headers})
        if self.gateway_bad_key:
            return gateway_body(400, None, "No connected db.", "no_db_connection")
        refused = self.refusal(path, None, headers)
        if refused:
            return refused
        if path.rstrip("/") == "/v1/models" and self.list_models:
            return (
                200,
                {},
                {
                    "object": "list",
                    "data": [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in self.models],
                },
            )
        return 404, {}, {"error": {"message": f"fake server: unknown path {path}"}}

    def answer(self, path: str, body: dict, headers: dict | None = None) -> tuple[int, dict, dict]:
        """(status, headers, JSON body) for one request."""
        headers = headers or {}
        refused = self.refusal(path, body, headers)
        is_preflight = (
            body.get("max_tokens") == 1
            or body.get("max_completion_tokens") == 1
            or body.get("max_output_tokens") == 16  # the preflight's cap of a Responses request
            or (body.get("input") == "ping" and "max_output_tokens" in body)
        )
        with self._lock:
            failed = None if refused else self.gateway_answer(is_preflight)
        if failed:
            with self._lock:
                (self.preflights if is_preflight else self.requests).append(
                    {"path": path, "body": body, "headers": headers, "at": time.monotonic(), "status": failed[0]}
                )
            time.sleep(self.delay)  # a failing gateway is as slow as a working one
            return failed
        if refused or is_preflight:
            with self._lock:
                (self.preflights if is_preflight else self.requests).append(
                    {"path": path, "body": body, "headers": headers}
                )
            if refused:
                return refused
            spec = {
                "text": "p",
                "tool_calls": [],
                "finish_reason": "length",
                "prompt_tokens": 1,
                "completion_tokens": 1,
            }
            return (
                200,
                {},
                (self._chat(body, spec) if path.endswith("/chat/completions") else self._responses(body, spec)),
            )
        with self._lock:
            self.requests.append({"path": path, "body": body, "headers": headers, "at": time.monotonic()})
        time.sleep(self.delay)
        with self._lock:
            if self.always_status is not None:
                return self._error(self.always_status, None)
            failing = self.fail_when(body) if self.fail_when is not None else None
            if failing is not None:
                return self._error(failing, None)
            if self._failures:
                return self._error(*self._failures.popleft())
            if not self._replies:
                return (
                    400,
                    {},
                    {"error": {"message": "fake server: no scripted reply left", "type": "invalid_request_error"}},
                )
            spec = self._replies.popleft()
        if callable(spec):
            spec = {
                "prompt_tokens": 11,
                "completion_tokens": 7,
                "tool_calls": [],
                "text": "",
                "finish_reason": None,
                "delay": 0.0,
                **spec(body),
            }
        time.sleep(spec.get("delay", 0.0))
        if path.endswith("/chat/completions"):
            return 200, {}, self._chat(body, spec)
        if path.endswith("/responses"):
            return 200, {}, self._responses(body, spec)
        return 404, {}, {"error": {"message": f"fake server: unknown path {path}"}}

    @staticmethod
    def _error(status: int, retry_after) -> tuple[int, dict, dict]:
        headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
        return (
            status,
            headers,
            {"error": {"message": f"fake server error {status}", "type": "server_error", "code": None}},
        )

    def _calls(self, spec: dict) -> list[tuple[str, str, str]]:
        calls = []
        for name, args, *given in spec["tool_calls"]:  # (name, arguments[, call id]): the id is counted unless given
            text = args if isinstance(args, str) else json.dumps(args)
            calls.append((given[0] if given else f"call_{next(self._ids)}", name, text))
        return calls

    def _chat(self, body: dict, spec: dict) -> dict:
        calls = self._calls(spec)
        finish = spec["finish_reason"] or ("tool_calls" if calls else "stop")
        message: dict = {"role": "assistant", "content": spec["text"] or None}
        if calls:
            message["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": n, "arguments": a}} for cid, n, a in calls
            ]
        return {
            "id": f"chatcmpl-{next(self._ids)}",
            "object": "chat.completion",
            "created": 0,
            "model": self.served_model or body.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            **(
                {}
                if spec["prompt_tokens"] is None
                else {
                    "usage": {
                        "prompt_tokens": spec["prompt_tokens"],
                        "completion_tokens": spec["completion_tokens"],
                        "total_tokens": spec["prompt_tokens"] + spec["completion_tokens"],
                    }
                }
            ),
        }

    def _responses(self, body: dict, spec: dict) -> dict:
        output = []
        if spec["text"]:
            output.append(
                {
                    "type": "message",
                    "id": f"msg_{next(self._ids)}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": spec["text"], "annotations": []}],
                }
            )
        for cid, name, args in self._calls(spec):
            output.append(
                {
                    "type": "function_call",
                    "id": f"fc_{next(self._ids)}",
                    "call_id": cid,
                    "name": name,
                    "arguments": args,
                    "status": "completed",
                }
            )
        cut = spec["finish_reason"] == "length"
        return {
            "id": f"resp_{next(self._ids)}",
            "object": "response",
            "created_at": 0,
            "model": self.served_model or body.get("model"),
            "status": "incomplete" if cut else "completed",
            "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools", []),
            "usage": {
                "input_tokens": spec["prompt_tokens"],
                "output_tokens": spec["completion_tokens"],
                "total_tokens": spec["prompt_tokens"] + spec["completion_tokens"],
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0},
            },
        }


GATEWAY_MESSAGES = {
    429: "litellm.RateLimitError: RateLimitError: OpenAIException - Rate limit reached for requests",
    500: "litellm.InternalServerError: InternalServerError: OpenAIException - Internal Server Error. "
    "Received Model Group=gpt-x\nAvailable Model Group Fallbacks=None",
}


def gateway_body(status: int, retry_after: float | None, message: str | None = None, kind: str | None = None):
    """(status, headers, body) as LiteLLM's proxy answers an error: ``{"error": {message, type, param, code}}``
    with the code as text."""
    headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
    text = message or GATEWAY_MESSAGES.get(status, f"litellm.APIError: APIError: status {status}")
    return status, headers, {"error": {"message": text, "type": kind, "param": None, "code": str(status)}}


def stream_events(path: str, reply: dict) -> list[str]:
    """A finished reply as the stream a server sends when the request says ``stream: true``: Chat Completions
    chunks ending in ``[DONE]``, or the Responses API's typed events (created, each output item, completed)."""
    if path.endswith("/chat/completions"):
        choice = reply["choices"][0]
        base = {k: reply[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
        delta = {"role": "assistant", "content": choice["message"].get("content") or ""}
        calls = [{**call, "index": i} for i, call in enumerate(choice["message"].get("tool_calls") or [])]
        chunks = [
            {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
            *({**base, "choices": [{"index": 0, "delta": {"tool_calls": [c]}, "finish_reason": None}]} for c in calls),
            {
                **base,
                "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}],
                **({"usage": reply["usage"]} if "usage" in reply else {}),
            },
        ]
        return [f"data: {json.dumps(chunk)}\n\n" for chunk in chunks] + ["data: [DONE]\n\n"]
    events: list[dict] = [{"type": "response.created", "response": {**reply, "status": "in_progress", "output": []}}]
    for index, item in enumerate(reply["output"]):
        events.append({"type": "response.output_item.added", "output_index": index, "item": item})
        if item["type"] == "message":
            text = item["content"][0]["text"]
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            events.append({"type": "response.output_text.delta", **where, "delta": text})
            events.append({"type": "response.output_text.done", **where, "text": text})
        elif item["type"] == "function_call":
            where = {"item_id": item["id"], "output_index": index}
            events.append({"type": "response.function_call_arguments.delta", **where, "delta": item["arguments"]})
            events.append({"type": "response.function_call_arguments.done", **where, "arguments": item["arguments"]})
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append({"type": "response.completed", "response": reply})
    return [
        f"event: {event['type']}\ndata: {json.dumps({**event, 'sequence_number': n})}\n\n"
        for n, event in enumerate(events)
    ]


def _make_handler(fake: FakeOpenAI):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):  # noqa: N802 (http.server naming)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {"_unparsed": raw.decode("utf-8", "replace")}
            status, headers, payload = fake.answer(self.path, body, {k.lower(): v for k, v in self.headers.items()})
            if status == 200 and body.get("stream"):  # the same reply as server-sent events
                return self.send_events(stream_events(self.path, payload))
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout test)

        def send_events(self, events: list[str]) -> None:
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                for event in events:
                    self.wfile.write(event.encode())
                self.close_connection = True
            except (BrokenPipeError, ConnectionResetError):
                pass

        def do_GET(self):  # noqa: N802 (http.server naming)
            status, headers, payload = fake.answer_get(self.path, {k.lower(): v for k, v in self.headers.items()})
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, *args):  # keep test output quiet
            pass

    return Handler


@pytest.fixture
def server():
    """The scripted server, started on 127.0.0.1 and stopped after the test."""
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def make_model(server: FakeOpenAI, tmp_path):
    """make_model(protocol="chat", name="fake-model", **overrides) -> the real client (``OpenAIModel``) against
    ``server``: key ``sk-test``, its cache in the test's folder, 3 quick retries, a 5 s time-out."""

    def make(protocol: str = "chat", name: str = "fake-model", **overrides) -> OpenAIModel:
        from pytest_agentbench.models.client import OpenAIModel  # why: it imports the SDK, slow at collection

        options = dict(
            base_url=server.base_url,
            api_key="sk-test",
            protocol=protocol,
            cache_dir=tmp_path / "cache",
            retry_base_delay=0.001,
            max_retries=3,
            timeout=5,
        )
        options.update(overrides)
        return OpenAIModel(name, **options)

    return make
