"""A metering proxy: an OpenAI-compatible endpoint that an external agent talks to instead of the real one.

One proxy serves one item. It speaks Chat Completions (``POST /v1/chat/completions``) and the Responses API
(``POST /v1/responses``), each with or without streaming (server-sent events), and ``GET /v1/models``. Every
request is turned into the chat-shaped call of the plugin's own model client (``client.OpenAIModel.complete``),
so the client's retries and 429 backoff, the connection limit, the response cache and replay and the token and
cost accounting hold for an external agent as for the built-in one; the reply is built again in the protocol
the agent spoke. Streaming replies are sent whole once the client has them (the agent sees one chunk per part).

The agent holds a random per-item token, never the user's key: a request with another bearer token gets a 401.
The model the agent names is ignored (the run's model answers), and so are its sampling parameters (the run's
``--model-params`` are sent). The proxy listens on a socket it is given (the environment makes one that only the
agent's sandbox can reach: a TCP socket in its network namespace, or a unix socket relayed into its container) or
on this machine's loopback.

Replay: an agent may put ids and timings of its own making into the conversation (a command's random output
id, the wall time it took, the handle of a process still running), so the same run sends different requests each
time and a replay would miss the cache. ``view`` (given by whoever knows the agent) turns each request into an
``AgentView``: the messages the model is sent (opaque handles replaced by their order of appearance, which
keeps all the model needs of them), the messages the response cache keys on (measurements that vary from run to
run masked too) and the way back for the handles in the reply's tool calls.

Limits: after a model error, once the item's tokens or cost reach their budget, or once the agent asks for a
model call past its ``steps``, every further request is refused with a 403 and ``on_stop`` is called once (the
caller ends the agent's processes): an agent cannot keep spending by retrying, nor step past the limit it was
given. ``state`` says why the proxy stopped (``model_error``, ``token_limit``, ``budget``, ``max_steps``).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .price import Price, over_budget, start_costs
from .usage import count_completion, turn_of

SHUTDOWN_POLL = 0.05  # seconds between the serving loop's looks for close()
MAX_REQUEST_BYTES = 64 << 20  # a request body past this is refused (images as data URLs can be large)


# ---------------------------------------------------------------- Responses API -> chat shape


def _text_of(content: Any) -> str | list[dict[str, Any]]:
    """Responses message content (text or parts) as chat content."""
    if content is None or isinstance(content, str):
        return content or ""
    parts: list[dict[str, Any]] = []
    for part in content:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text"):
            parts.append({"type": "text", "text": part.get("text") or ""})
        elif kind == "input_image":
            url = part.get("image_url")
            if isinstance(url, dict):
                url = url.get("url")
            parts.append({"type": "image_url", "image_url": {"url": url or ""}})
        elif kind == "refusal":
            parts.append({"type": "text", "text": part.get("refusal") or ""})
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def input_items_to_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A Responses request's ``instructions`` and ``input`` as chat messages (function calls and their outputs
    become assistant ``tool_calls`` and tool messages; reasoning items are dropped)."""
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": str(body["instructions"])})
    items = body.get("input")
    if isinstance(items, str):
        return [*messages, {"role": "user", "content": items}]
    for item in items or []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type") or "message"
        if kind == "message":
            role = item.get("role") or "user"
            role = "system" if role == "developer" else role
            messages.append({"role": role, "content": _text_of(item.get("content"))})
        elif kind in ("function_call", "custom_tool_call"):
            arguments = item.get("arguments")
            if kind == "custom_tool_call":
                arguments = json.dumps({"input": item.get("input") or ""})
            call = {
                "id": item.get("call_id") or item.get("id") or f"call_{len(messages)}",
                "type": "function",
                "function": {"name": item.get("name") or "", "arguments": arguments or "{}"},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            elif last is not None and last["role"] == "assistant" and not last.get("tool_calls"):
                last["tool_calls"] = [call]
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind in ("function_call_output", "custom_tool_call_output"):
            output = item.get("output")
            if not isinstance(output, str):
                output = _text_of(output) if isinstance(output, list) else json.dumps(output)
                output = output if isinstance(output, str) else json.dumps(output)
            messages.append({"role": "tool", "tool_call_id": item.get("call_id") or "", "content": output})
    return messages


def responses_tools_to_chat(tools: list[dict[str, Any]] | None) -> tuple[list[dict[str, Any]], set[str]]:
    """Function tools as chat tools, and the names of freeform (``custom``) tools, offered as a function with one
    ``input`` string. Other tool types (web search, hosted tools) are the provider's, not the model's: dropped."""
    out: list[dict[str, Any]] = []
    custom: set[str] = set()
    for tool in tools or []:
        kind = tool.get("type")
        if kind == "function":
            out.append(
                {
                    "type": "function",
                    "function": {
                        "name": tool.get("name") or "",
                        "description": tool.get("description") or "",
                        "parameters": tool.get("parameters") or {"type": "object", "properties": {}},
                    },
                }
            )
        elif kind == "custom":
            custom.add(tool.get("name") or "")
            out.append(
                {
                    "type": "function",
                    "function": {
                        "name": tool.get("name") or "",
                        "description": tool.get("description") or "",
                        "parameters": {
                            "type": "object",
                            "properties": {"input": {"type": "string"}},
                            "required": ["input"],
                        },
                    },
                }
            )
    return out, custom


# ---------------------------------------------------------------- replies in the agent's protocol


def _usage_chat(completion: Any) -> dict[str, int]:
    prompt, reply = completion.prompt_tokens, completion.completion_tokens
    return {"prompt_tokens": prompt, "completion_tokens": reply, "total_tokens": prompt + reply}


def chat_reply(completion: Any, model: str, reply_id: str) -> dict[str, Any]:
    return {
        "id": reply_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": completion.assistant_message(), "finish_reason": completion.finish_reason}],
        "usage": _usage_chat(completion),
    }


def chat_chunks(completion: Any, model: str, reply_id: str, with_usage: bool) -> list[dict[str, Any]]:
    """The reply as Chat Completions stream chunks: the text, each tool call, the finish reason, the usage."""
    base = {"id": reply_id, "object": "chat.completion.chunk", "created": int(time.time()), "model": model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": completion.text or ""})]
    for index, call in enumerate(completion.tool_calls):
        function = {"name": call["name"], "arguments": call["arguments"]}
        chunks.append(
            chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function", "function": function}]})
        )
    chunks.append(chunk({}, completion.finish_reason))
    if with_usage:
        chunks.append({**base, "choices": [], "usage": _usage_chat(completion)})
    return chunks


def responses_output(completion: Any, custom: set[str], reply_id: str) -> list[dict[str, Any]]:
    output: list[dict[str, Any]] = []
    if completion.text:
        output.append(
            {
                "type": "message",
                "id": f"msg_{reply_id}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": completion.text, "annotations": []}],
            }
        )
    for index, call in enumerate(completion.tool_calls):
        if call["name"] in custom:
            try:
                text = json.loads(call["arguments"]).get("input", "")
            except (ValueError, AttributeError):
                text = call["arguments"]
            output.append(
                {
                    "type": "custom_tool_call",
                    "id": f"ctc_{reply_id}_{index}",
                    "call_id": call["id"],
                    "name": call["name"],
                    "input": text if isinstance(text, str) else json.dumps(text),
                    "status": "completed",
                }
            )
        else:
            output.append(
                {
                    "type": "function_call",
                    "id": f"fc_{reply_id}_{index}",
                    "call_id": call["id"],
                    "name": call["name"],
                    "arguments": call["arguments"],
                    "status": "completed",
                }
            )
    return output


def responses_reply(completion: Any, model: str, reply_id: str, custom: set[str]) -> dict[str, Any]:
    prompt, reply = completion.prompt_tokens, completion.completion_tokens
    incomplete = completion.finish_reason == "length"
    return {
        "id": reply_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": "incomplete" if incomplete else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "model": model,
        "output": responses_output(completion, custom, reply_id),
        "usage": {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": reply,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + reply,
        },
    }


def responses_events(response: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The Responses API's stream events for a finished ``response``: created, each output item (added, its
    text or arguments, done), completed."""
    pending = {**response, "status": "in_progress", "output": [], "usage": None}
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": pending}),
        ("response.in_progress", {"response": pending}),
    ]
    for index, item in enumerate(response["output"]):
        added = {**item, "status": "in_progress"}
        if item["type"] == "message":
            added["content"] = []
        elif item["type"] == "function_call":
            added["arguments"] = ""
        elif item["type"] == "custom_tool_call":
            added["input"] = ""
        events.append(("response.output_item.added", {"output_index": index, "item": added}))
        where = {"item_id": item["id"], "output_index": index}
        if item["type"] == "message":
            part = item["content"][0]
            text = part["text"]
            events.append(("response.content_part.added", {**where, "content_index": 0, "part": {**part, "text": ""}}))
            events.append(("response.output_text.delta", {**where, "content_index": 0, "delta": text}))
            events.append(("response.output_text.done", {**where, "content_index": 0, "text": text}))
            events.append(("response.content_part.done", {**where, "content_index": 0, "part": part}))
        elif item["type"] == "function_call":
            events.append(("response.function_call_arguments.delta", {**where, "delta": item["arguments"]}))
            events.append(("response.function_call_arguments.done", {**where, "arguments": item["arguments"]}))
        elif item["type"] == "custom_tool_call":
            events.append(("response.custom_tool_call_input.delta", {**where, "delta": item["input"]}))
            events.append(("response.custom_tool_call_input.done", {**where, "input": item["input"]}))
        events.append(("response.output_item.done", {"output_index": index, "item": item}))
    events.append(("response.completed", {"response": response}))
    return [(name, {"type": name, "sequence_number": n, **data}) for n, (name, data) in enumerate(events)]


# ---------------------------------------------------------------- the proxy


def same_calls(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return calls


@dataclass
class AgentView:
    """One request of an agent as the model and the response cache see it (see the module's text)."""

    model_messages: list[dict[str, Any]]
    key_messages: list[dict[str, Any]]
    to_agent: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] = same_calls  # the reply's tool calls


def takes_cache_messages(model: Any) -> bool:
    """Whether ``model.complete`` takes ``cache_messages`` (the plugin's client does; a user's may not)."""
    try:
        parameters = inspect.signature(model.complete).parameters.values()
    except (TypeError, ValueError, AttributeError):
        return False
    return any(p.name == "cache_messages" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


class ProxyRefusal(Exception):
    def __init__(self, status: int, message: str, kind: str) -> None:
        super().__init__(message)
        self.status, self.kind = status, kind


class MeteringProxy:
    """One item's endpoint for an external agent (see the module's text).

    ``model``: the run's client (``complete(messages, tools=, sample_index=, tool_choice=)``); ``listener``: a
    bound, listening TCP or unix socket (None: one on 127.0.0.1 is made); ``host`` and ``port``: the address the
    agent dials (the listener's own by default; a unix socket has none: they are needed then);
    ``tokens``/``cost`` with ``price``: the item's budgets; ``steps``: most model calls (None: no limit);
    ``on_stop``: called once when the proxy stops serving (a model error, a spent budget, the steps); ``view``:
    each request as the model and the response cache see it (``AgentView``), None for the request as sent."""

    def __init__(
        self,
        model: Any,
        *,
        listener: socket.socket | None = None,
        host: str | None = None,
        port: int | None = None,
        sample_index: int = 0,
        price: Price | None = None,
        tokens: int | None = None,
        cost: float | None = None,
        steps: int | None = None,
        on_stop: Callable[[], None] | None = None,
        view: Callable[[list[dict[str, Any]]], AgentView] | None = None,
    ) -> None:
        self.model = model
        self.view = view
        self._keys_apart = view is not None and takes_cache_messages(model)
        self.token = "agentbench-" + secrets.token_urlsafe(24)
        self.sample_index = sample_index
        self.price, self.tokens, self.cost, self.steps = price, tokens, cost, steps
        self._asked = 0  # model calls asked for (a refused one not counted)
        self.on_stop = on_stop
        self.accounting: dict[str, Any] = start_costs(
            {"model_calls": 0, "cache_hits": 0, "prompt_tokens": 0, "completion_tokens": 0, "request_retries": 0},
            price,
        )
        self.turns: list[dict[str, Any]] = []
        self.messages: list[dict[str, Any]] = []  # the longest conversation the agent sent, with its reply
        self.calls: list[dict[str, Any]] = []  # one per request: the protocol, what came back or why not
        self.state = ""  # why the proxy stopped serving: "", "model_error", "token_limit", "budget"
        self.message = ""
        self._lock = threading.Lock()
        self._stopped_once = False
        if listener is None:
            listener = socket.create_server(("127.0.0.1", 0))
        self.listener = listener
        if listener.family == socket.AF_UNIX:
            if host is None or port is None:
                raise ValueError("a proxy on a unix socket needs the host and port its agent dials")
            address: Any = (host, port)
        else:
            address = listener.getsockname()
        self.host = host or address[0]
        self.port = port or address[1]
        self._server = _Server(listener, self)
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> MeteringProxy:
        # close() waits for the loop's next look: at the default 0.5 s, every item's proxy took that long to close
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(SHUTDOWN_POLL,), name="agentbench-proxy", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> MeteringProxy:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------ one request

    def check_key(self, authorization: str) -> None:
        given = authorization[7:].strip() if authorization.lower().startswith("bearer ") else ""
        if not secrets.compare_digest(given.encode(), self.token.encode()):
            raise ProxyRefusal(401, "this endpoint takes only the item's own token as its key", "invalid_api_key")

    def complete(self, protocol: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]], choice: Any) -> Any:
        """The client's reply to one request, counted; ProxyRefusal once the proxy has stopped serving."""
        from .client import ModelError  # why: it imports the openai SDK (slow)

        with self._lock:
            if self.state:
                raise ProxyRefusal(403, f"no more model calls for this item: {self.message}", self.state)
            past_steps = self.steps is not None and self._asked >= self.steps
            self._asked += not past_steps
        if past_steps:
            self.stop("max_steps", f"the agent asked for a model call past its {self.steps} steps")
            raise ProxyRefusal(403, f"no more model calls for this item: {self.message}", self.state)
        view = self.view(messages) if self.view is not None else AgentView(messages, messages)
        keyed = {"cache_messages": view.key_messages} if self._keys_apart else {}
        try:
            completion = self.model.complete(
                view.model_messages,
                tools=tools or None,
                sample_index=self.sample_index,
                tool_choice=choice if isinstance(choice, str) else None,
                **keyed,
            )
        except ModelError as exc:
            with self._lock:
                retries = exc.request_retries
                self.accounting["request_retries"] += retries
                self.calls.append({"protocol": protocol, "error": str(exc)})
            self.stop("model_error", str(exc))
            raise ProxyRefusal(502, f"the model call failed: {exc}", "model_error") from None
        with self._lock:
            count_completion(self.accounting, completion, self.price)  # the model's reply, as the model gave it
        calls = view.to_agent(completion.tool_calls)
        if calls != completion.tool_calls:
            completion = dataclasses.replace(completion, tool_calls=calls)
        with self._lock:
            self.turns.append(turn_of(completion, len(messages)))
            self.calls.append({"protocol": protocol, "messages": len(messages), "tools": len(tools)})
            if len(messages) + 1 >= len(self.messages):
                self.messages = [*messages, completion.assistant_message()]
            spent = self._over_limit()
        if spent:
            self.stop(*spent)
        return completion

    def _over_limit(self) -> tuple[str, str] | None:
        used = self.accounting["prompt_tokens"] + self.accounting["completion_tokens"]
        if self.tokens is not None and used >= self.tokens:
            return "token_limit", f"the agent used {used} tokens of its budget of {self.tokens}"
        spent = over_budget(self.accounting, self.cost)
        return ("budget", f"the agent {spent}") if spent else None

    def stop(self, state: str, message: str) -> None:
        with self._lock:
            if self._stopped_once:
                return
            self._stopped_once = True
            self.state, self.message = state, message
        if self.on_stop is not None:
            self.on_stop()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, listener: socket.socket, proxy: MeteringProxy) -> None:
        self.proxy = proxy
        address = ("", 0) if listener.family == socket.AF_UNIX else listener.getsockname()[:2]
        super().__init__(address, _Handler, bind_and_activate=False)
        self.socket.close()
        self.socket = listener  # already bound and listening (perhaps in another network namespace)
        # The loop accepts after a poll said a connection waits; if none is left by then (another holder of the
        # socket took it, a spurious wake-up), a blocking accept() would hold the loop, and close() with it.
        listener.setblocking(False)

    def server_bind(self) -> None:  # never called: the socket came bound
        pass


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # the agent's requests are in the record, not on stderr
        pass

    def _send_json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_events(self, events: list[tuple[str | None, dict[str, Any] | str]]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        for name, data in events:
            text = data if isinstance(data, str) else json.dumps(data)
            head = f"event: {name}\n" if name else ""
            self.wfile.write(f"{head}data: {text}\n\n".encode())
        self.wfile.flush()
        self.close_connection = True

    def _refuse(self, refusal: ProxyRefusal) -> None:
        self._send_json(
            refusal.status, {"error": {"message": str(refusal), "type": refusal.kind, "code": refusal.kind}}
        )

    def do_GET(self) -> None:  # noqa: N802 (http.server naming)
        proxy = self.server.proxy
        try:
            proxy.check_key(self.headers.get("Authorization", ""))
        except ProxyRefusal as refusal:
            return self._refuse(refusal)
        if self.path.rstrip("/") == "/v1/models":
            name = getattr(proxy.model, "name", "model")
            return self._send_json(200, {"object": "list", "data": [{"id": name, "object": "model"}]})
        return self._send_json(404, {"error": {"message": f"no such path {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:  # noqa: N802 (http.server naming)
        proxy = self.server.proxy
        try:
            proxy.check_key(self.headers.get("Authorization", ""))
            body = self._body()
            path = self.path.split("?", 1)[0].rstrip("/")
            if path == "/v1/chat/completions":
                return self._chat(proxy, body)
            if path == "/v1/responses":
                return self._responses(proxy, body)
            raise ProxyRefusal(
                404,
                f"no such path {self.path}; this endpoint serves /v1/chat/completions and /v1/responses",
                "not_found",
            )
        except ProxyRefusal as refusal:
            return self._refuse(refusal)

    def _body(self) -> dict[str, Any]:
        try:
            size = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            size = -1
        if size < 0 or size > MAX_REQUEST_BYTES:
            raise ProxyRefusal(
                413, f"request body must have a Content-Length of at most {MAX_REQUEST_BYTES}", "invalid_request_error"
            )
        try:
            body = json.loads(self.rfile.read(size) or b"{}")
        except ValueError as exc:
            raise ProxyRefusal(400, f"the request body is not JSON: {exc}", "invalid_request_error") from None
        if not isinstance(body, dict):
            raise ProxyRefusal(400, "the request body must be a JSON object", "invalid_request_error")
        return body

    def _chat(self, proxy: MeteringProxy, body: dict[str, Any]) -> None:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ProxyRefusal(400, "messages must be a non-empty list", "invalid_request_error")
        tools = [t for t in body.get("tools") or [] if isinstance(t, dict)]
        completion = proxy.complete("chat", messages, tools, body.get("tool_choice"))
        name = str(body.get("model") or getattr(proxy.model, "name", "model"))
        reply_id = f"chatcmpl-{secrets.token_hex(8)}"
        if body.get("stream"):
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            chunks: list[tuple[str | None, dict[str, Any] | str]] = [
                (None, c) for c in chat_chunks(completion, name, reply_id, usage)
            ]
            return self._send_events([*chunks, (None, "[DONE]")])
        return self._send_json(200, chat_reply(completion, name, reply_id))

    def _responses(self, proxy: MeteringProxy, body: dict[str, Any]) -> None:
        messages = input_items_to_messages(body)
        if not messages:
            raise ProxyRefusal(400, "input must be text or a non-empty list of items", "invalid_request_error")
        tools, custom = responses_tools_to_chat([t for t in body.get("tools") or [] if isinstance(t, dict)])
        completion = proxy.complete("responses", messages, tools, body.get("tool_choice"))
        name = str(body.get("model") or getattr(proxy.model, "name", "model"))
        response = responses_reply(completion, name, f"resp_{secrets.token_hex(8)}", custom)
        if body.get("stream"):
            return self._send_events(list(responses_events(response)))
        return self._send_json(200, response)
