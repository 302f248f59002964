"""One cheap request at session start proving the model endpoint answers, before any item is spent.

``preflight(opts)`` lists the server's models (``GET /models``) with a short connect timeout and no
retries; when the server lists models, the run's model must be among them. A server that does not
list models gets one 1-token completion instead. A missing or refused key, an unreachable or wrong
base URL and an unknown model are each one ``ConfigError`` naming the fix; rate limits and server
errors pass (the run's own retries deal with them). ``skip_reason(opts)`` says when no request is
needed: the oracle, ``--bench-cache replay|ro`` (no endpoint is called) and ``--model-preflight off``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from ..core.errors import ConfigError
from ..core.options import given_settings, view
from ..core.run_options import RunOptions
from .options import ORACLE, ModelOptions, check_api_key, model_settings

CONNECT_TIMEOUT = 3.0  # seconds to open the connection
READ_TIMEOUT = 8.0  # seconds for the answer (capped by --model-timeout)
OFF_HINT = "--model-preflight=off skips this check"


def skip_reason(opts: Mapping[str, Any]) -> str | None:
    """Why no preflight request is made for these settings, or None when one is."""
    model = view(ModelOptions, opts)
    if not model.model:
        return "no model"
    if model.model == ORACLE:
        return "the oracle needs no endpoint"
    if model.cache in ("replay", "ro"):
        return f"--bench-cache {model.cache} calls no endpoint"
    if model.model_preflight == "off":
        return "--model-preflight off"
    return None


def preflight(opts: Mapping[str, Any]) -> str:
    """Check the key, the endpoint and the model with one request; a note for the run header, or ConfigError."""
    given = given_settings(opts, ModelOptions, RunOptions)
    settings = model_settings(given)
    api_key = view(ModelOptions, given).model_api_key
    check_api_key(settings, api_key)
    import openai  # why: the openai SDK is loaded only when a real model is checked

    name, url = settings["model"], settings["base_url"]
    timeout = openai.Timeout(min(settings["timeout"], READ_TIMEOUT), connect=CONNECT_TIMEOUT)
    client = openai.OpenAI(base_url=url, api_key=api_key or "not-set", timeout=timeout, max_retries=0)
    started = time.monotonic()
    try:
        listed: list[str] | None = [m.id for m in client.models.list()]
    except openai.APIStatusError as error:
        if error.status_code in (401, 403):
            raise ConfigError(key_refused(url, error)) from None
        listed = None  # listing is not supported here: ask for one token instead
    except Exception as error:  # no answer at all (connection refused, DNS, TLS, timeout): the endpoint is unreachable
        raise ConfigError(unreachable(url, error)) from None
    if listed:
        if name not in listed:
            shown = ", ".join(sorted(listed)[:20]) + (f", ... ({len(listed)} in all)" if len(listed) > 20 else "")
            raise ConfigError(
                f"model preflight: {url} does not serve model {name!r}; it lists: {shown}. "
                f"Check --model (the server's model name); {OFF_HINT}"
            )
        return f"model preflight: {url} lists {name} ({time.monotonic() - started:.1f} s)"
    try:
        one_token(client, name, settings["protocol"])
    except openai.APIStatusError as error:
        status = error.status_code
        if status in (401, 403):
            raise ConfigError(key_refused(url, error)) from None
        if status == 404:
            raise ConfigError(
                f"model preflight: {url} answered HTTP 404 to a 1-token request for model {name!r}: "
                f"the model is unknown there or the base URL is wrong ({short(error)}). Check --model "
                f"and --model-base-url (it usually ends in /v1); {OFF_HINT}"
            ) from None
        # 400/422 (a parameter the server dislikes), 429, 5xx: the endpoint answers; the run's retries handle the rest
        return f"model preflight: {url} answered HTTP {status} to a 1-token request for {name}"
    except Exception as error:  # no answer at all: the endpoint is unreachable
        raise ConfigError(unreachable(url, error)) from None
    return f"model preflight: {url} answered a 1-token request for {name} ({time.monotonic() - started:.1f} s)"


def one_token(client: Any, name: str, protocol: str) -> None:
    if protocol == "chat":
        client.chat.completions.create(model=name, messages=[{"role": "user", "content": "ping"}], max_tokens=1)
    else:
        client.responses.create(model=name, input="ping", max_output_tokens=16)  # 16: the API's minimum


def short(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text if len(text) <= 200 else text[:197] + "..."


def key_refused(url: str, error: Any) -> str:
    return (
        f"model preflight: {url} refused the API key (HTTP {error.status_code}: {short(error)}); "
        f"pass --model-api-key or set OPENAI_API_KEY; {OFF_HINT}"
    )


def unreachable(url: str, error: Exception) -> str:
    import openai  # why: loaded by preflight() already; kept out of module import

    what = (
        "did not answer in time"
        if isinstance(error, openai.APITimeoutError)
        else f"cannot be reached ({short(error.__cause__ or error)})"
    )
    return (
        f"model preflight: {url} {what}: check --model-base-url (or OPENAI_BASE_URL) and that the "
        f"server is running; {OFF_HINT}"
    )
