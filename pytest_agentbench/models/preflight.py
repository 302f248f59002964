"""Two requests at session start proving the model endpoint answers the run, before any item is spent.

``preflight(opts, first_call)`` lists the server's models (``GET /models``) with a short connect timeout and no
retries; when the server lists models, the run's model must be among them. Then it sends one real request
shaped like the run's first (``first_call``: the messages, tools and tool choice the benchmark's harness builds
first, in the run's protocol and with the run's ``--model-params``; a plain "ping" when no shape is known), its
reply capped at a token or so. A missing or refused key (401/403, or the 400 a gateway such as LiteLLM answers
a refused key with), an unreachable or wrong base URL, an unknown model (404) and a failing endpoint (5xx) are
each one ``ConfigError`` quoting the endpoint's own message and naming the fix. A 5xx is retried once, a
400 is sent once more exactly as the run would send it (no cap): a failure that retry clears passes; a rate
limit (429) passes (the run's own retries deal with it).

``skip_reason(opts)`` says when no request is needed: the oracle, ``--bench-cache replay`` (no endpoint is
called) and ``--bench-set model_preflight off``. A warm cache does not skip it: a cached answer must not hide a dead
endpoint or a refused key (``--bench-cache ro`` calls the endpoint on every miss).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.errors import ConfigError
from ..core.options import given_settings, view
from ..core.retrywait import pause_before_retry
from ..core.run_options import RunOptions
from ..core.text import clipped, repaired
from .options import ORACLE, ModelOptions, check_api_key, model_settings

CONNECT_TIMEOUT = 3.0  # seconds to open the connection
READ_TIMEOUT = 8.0  # seconds for the listing's answer (capped by --bench-set model_timeout)
FIRST_TIMEOUT = 30.0  # seconds for the answer to the run's first request, capped (a long prompt takes a moment)
RETRY_WAIT = 1.0  # seconds before the one retry of a 5xx (a Retry-After up to MAX_RETRY_WAIT is honoured)
MAX_RETRY_WAIT = 5.0
OFF_HINT = "--bench-set=model_preflight=off skips this check"
# statuses of the first request that end the run before any item when one retry does not clear them
STOP_STATUSES = (400, 401, 403, 404, 422)


@dataclass(frozen=True)
class FirstCall:
    """The request a run makes first (chat-shaped messages, the tools a tool-use harness offers)."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | None = None
    source: str = "the run's first request"  # how the message names it


PING = FirstCall([{"role": "user", "content": "ping"}], source="a 1-token request")


def skip_reason(opts: Mapping[str, Any]) -> str | None:
    """Why no preflight request is made for these settings, or None when one is."""
    model = view(ModelOptions, opts)
    if not model.model:
        return "no model"
    if model.model == ORACLE:
        return "the oracle needs no endpoint"
    if model.cache == "replay":
        return "--bench-cache replay calls no endpoint"
    if model.model_preflight == "off":
        return "--bench-set model_preflight off"
    return None


def preflight(opts: Mapping[str, Any], first_call: FirstCall | None = None) -> str:
    """Check the key, the endpoint and the model with a listing and one request shaped like the run's first
    (``first_call``; PING when None); a note for the run header, or ConfigError."""
    given = given_settings(opts, ModelOptions, RunOptions)
    settings = model_settings(given)
    api_key = view(ModelOptions, given).model_api_key
    check_api_key(settings, api_key)
    import openai  # why: the openai SDK is loaded only when a real model is checked

    name, url = settings["model"], settings["base_url"]
    timeout = openai.Timeout(min(settings["timeout"], READ_TIMEOUT), connect=CONNECT_TIMEOUT)
    client = openai.OpenAI(base_url=url, api_key=api_key or "not-set", timeout=timeout, max_retries=0)
    started = time.monotonic()
    listed = listed_models(client, url)
    if listed and name not in listed:
        shown = ", ".join(sorted(listed)[:20]) + (f", ... ({len(listed)} in all)" if len(listed) > 20 else "")
        raise ConfigError(
            f"model preflight: {url} does not serve model {name!r}; it lists: {shown}. "
            f"Check --model (the server's model name); {OFF_HINT}"
        )
    call = first_call or PING
    outcome = first_request(settings, api_key, call)
    listing = f"lists {name}; " if listed else ""
    return f"model preflight: {url} {listing}{outcome} ({time.monotonic() - started:.1f} s)"


def capped(params: Mapping[str, Any], protocol: str) -> dict[str, Any]:
    """The run's request fields with the reply cut to (about) one token, under the name the run uses."""
    out = dict(params)
    if protocol != "chat":
        for alias in ("max_tokens", "max_completion_tokens"):
            out.pop(alias, None)
        out["max_output_tokens"] = 16  # the Responses API's minimum
    elif "max_completion_tokens" in out:  # a reasoning model refuses max_tokens: keep the run's spelling
        out["max_completion_tokens"] = 1
    else:
        out["max_tokens"] = 1
    return out


def first_request(settings: Mapping[str, Any], api_key: str | None, call: FirstCall) -> str:
    """Send ``call`` once as the run would (capped); a note saying how it went, or ConfigError when it fails
    with a STOP_STATUSES status or a 5xx that one retry does not clear. The listing got an answer before, so
    no answer in time here is a slow server (a long first prompt), not a dead one: it passes with a note."""
    import openai  # why: as in preflight()

    from .client import OpenAIModel  # why: it imports the openai SDK

    model = OpenAIModel(
        settings["model"],
        base_url=settings["base_url"],
        api_key=api_key,
        protocol=settings["protocol"],
        params=settings["params"],
        timeout=min(settings["timeout"], FIRST_TIMEOUT),
        max_retries=0,
        cache_dir=settings["cache_dir"],
        cache_mode="off",  # the endpoint itself is checked: a cached answer proves nothing about it
    )
    api = describe_call(call, settings["protocol"]).removeprefix(call.source).strip()
    shape = f"{call.source} for {settings['model']} {api}"
    params = capped(settings["params"], settings["protocol"])
    try:
        model.send_once(call.messages, tools=call.tools, tool_choice=call.tool_choice, params=params)
        return f"answered {shape}"
    except openai.APIStatusError as error:
        first = error
    except openai.APITimeoutError:
        return f"did not answer {shape} within {model.timeout:g} s (the run's requests wait --bench-set model_timeout)"
    except Exception as error:  # no answer at all: the endpoint is unreachable
        raise ConfigError(unreachable(settings["base_url"], error)) from None
    if not stops(first.status_code):
        return f"answered HTTP {first.status_code} to {shape}; the run's retries deal with it"
    again: dict[str, Any] = {"params": params}
    if first.status_code >= 500:
        pause_before_retry(min(MAX_RETRY_WAIT, retry_wait(first)))
    elif first.status_code in (400, 422):
        again = {"params": None}  # exactly the run's request: the cap may be what the server refused
    else:
        raise ConfigError(refused(settings, call, first, retried=False)) from None
    try:
        model.send_once(call.messages, tools=call.tools, tool_choice=call.tool_choice, **again)
        return f"answered {shape} when retried (HTTP {first.status_code} first)"
    except openai.APIStatusError as error:
        if stops(error.status_code):
            raise ConfigError(refused(settings, call, error, retried=True)) from None
        return f"answered HTTP {error.status_code} to {shape} when retried; the run's retries deal with it"
    except openai.APITimeoutError:  # the uncapped request is a whole reply: no error in time is an answer
        return f"accepted {shape} when retried (no error within {model.timeout:g} s)"
    except Exception as error:
        raise ConfigError(unreachable(settings["base_url"], error)) from None


def stops(status: int) -> bool:
    return status in STOP_STATUSES or status >= 500


def retry_wait(error: Any) -> float:
    from .client import retry_after_seconds  # why: it imports the openai SDK

    requested = retry_after_seconds(error)
    return RETRY_WAIT if requested is None else max(0.0, requested)


def describe_call(call: FirstCall, protocol: str) -> str:
    api = "Chat Completions" if protocol == "chat" else "Responses"
    tools = f", {len(call.tools)} tools" if call.tools else ""
    return f"{call.source} ({api}{tools})"


def server_message(error: Any) -> str:
    """The endpoint's own words: the ``error.message`` of its JSON body, else the SDK's text of the error."""
    body = getattr(error, "body", None)
    inner = body.get("error", body) if isinstance(body, dict) else None
    message = inner.get("message") if isinstance(inner, dict) else None
    text = message if isinstance(message, str) and message.strip() else str(error)
    return short(repaired(text))


def refused(settings: Mapping[str, Any], call: FirstCall, error: Any, *, retried: bool) -> str:
    url, name, status = settings["base_url"], settings["model"], error.status_code
    api = describe_call(call, settings["protocol"]).removeprefix(call.source).strip()
    again = ", and again when retried" if retried else ""
    head = (
        f"model preflight: {url} answered HTTP {status} to {call.source} for model {name!r} {api}{again}: "
        f"{server_message(error)!r}"
    )
    if status in (401, 403):
        fix = "the API key was refused: pass --model-api-key or set OPENAI_API_KEY"
    elif status == 404:
        fix = (
            "the model is unknown there or the base URL is wrong: check --model and --model-base-url "
            "(it usually ends in /v1)"
        )
    elif status in (400, 422):
        fix = (
            "every item would fail the same way. A gateway (LiteLLM, ...) answers a refused key with 400 too: "
            "check --model-api-key (or OPENAI_API_KEY), then --model-params and --model-protocol against what "
            "the server accepts"
        )
    else:
        fix = (
            "the endpoint fails (behind a gateway: the model it forwards to); check that the server is healthy "
            "and --model-base-url, --model"
        )
    return f"{head}. Fix: {fix}; {OFF_HINT}"


def short(error: BaseException | str) -> str:
    return clipped(str(error), 200)


def key_refused(url: str, error: Any) -> str:
    return (
        f"model preflight: {url} refused the API key (HTTP {error.status_code}: {short(error)}); "
        f"pass --model-api-key or set OPENAI_API_KEY; {OFF_HINT}"
    )


def unreachable(url: str, error: Exception) -> str:
    import openai  # why: loaded by preflight() already; kept out of module import

    if isinstance(error, openai.APITimeoutError):
        what = "did not answer in time"
    elif isinstance(error, openai.APIConnectionError):
        what = f"cannot be reached ({short(error.__cause__ or error)})"
    else:  # an answer the SDK could not read: a server, but not an OpenAI-compatible API
        return not_an_api(url, f"an answer the OpenAI SDK cannot read ({short(error)})")
    return (
        f"model preflight: {url} {what}: check --model-base-url (or OPENAI_BASE_URL) and that the "
        f"server is running; {OFF_HINT}"
    )


def not_an_api(url: str, answer: str) -> str:
    return (
        f"model preflight: {url} answered with {answer}: it is probably not an OpenAI-compatible API base URL; "
        f"check --model-base-url (or OPENAI_BASE_URL: an API's usually ends in /v1); {OFF_HINT}"
    )


def listed_models(client: Any, url: str) -> list[str] | None:
    """The models the endpoint lists; None when it does not list them (an error status other than a refused key).
    ConfigError when it cannot be reached, refuses the key, or answers with something other than JSON (a web page:
    the base URL is a site, not an API)."""
    import openai  # why: as in preflight()

    try:
        raw = client.models.with_raw_response.list()
    except openai.APIStatusError as error:
        if error.status_code in (401, 403):
            raise ConfigError(key_refused(url, error)) from None
        return None  # listing is not supported here (or refused as a gateway refuses a key: the request says)
    except Exception as error:  # no answer at all (connection refused, DNS, TLS, timeout): the endpoint is unreachable
        raise ConfigError(unreachable(url, error)) from None
    kind = raw.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind and "json" not in kind:
        named = "HTML" if "html" in kind else kind
        raise ConfigError(not_an_api(url, f"{named} (not JSON) to GET {url.rstrip('/')}/models"))
    try:
        return [m.id for m in raw.parse()]
    except Exception as error:  # noqa: BLE001 - an answer, not one of an API
        raise ConfigError(unreachable(url, error)) from None
