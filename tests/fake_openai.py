"""A small scripted OpenAI-compatible server on 127.0.0.1 for tests.

Serves POST /v1/chat/completions and POST /v1/responses from a queue of scripted replies, logs
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
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


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
        self.api_key: str | None = None  # when set, other bearer tokens get a 401
        self.preflights: list[dict] = []  # GET /v1/models and 1-token completions (never scripted replies)
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
        """Queue one reply. tool_calls: (name, arguments dict or JSON text) pairs.
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
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-openai", daemon=True)
        self._thread.start()
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

    def answer_get(self, path: str, headers: dict) -> tuple[int, dict, dict]:
        with self._lock:
            self.preflights.append({"path": path, "headers": headers})
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
        is_preflight = body.get("max_tokens") == 1 or (body.get("input") == "ping" and "max_output_tokens" in body)
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
        for name, args in spec["tool_calls"]:
            text = args if isinstance(args, str) else json.dumps(args)
            calls.append((f"call_{next(self._ids)}", name, text))
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
            "model": body.get("model"),
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
            "model": body.get("model"),
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
