"""Options of the model layer, the model settings a run records, and the model factory.

Plain Python: ``build_model(opts)`` takes resolved ``Settings`` (see ``core/options.py``) or a plain mapping of
a few options (the rest take their defaults), so a notebook builds the same client as a pytest run. Errors are
``ConfigError`` naming the fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ..core.errors import ConfigError
from ..core.options import Option, given_settings, view
from ..core.run_options import RunOptions
from .cache import CACHE_MODES
from .concurrency import DEFAULT_MAX_CONNECTIONS
from .defaults import (
    DEFAULT_BASE_URL,
    DEFAULT_MAX_RETRIES,
    DEFAULT_MAX_RETRY_TIME,
    DEFAULT_RETRY_BASE_DELAY,
    DEFAULT_TIMEOUT,
    PROTOCOLS,
)
from .oracle import OracleModel
from .price import BUDGET_OPTIONS, PRICE_OPTION, price_of

if TYPE_CHECKING:  # the openai SDK is imported only when a real model is used
    from .client import OpenAIModel

ORACLE = "oracle"
# request fields the client sets itself; letting --model-params override them would break the harness
RESERVED_PARAMS = ("model", "messages", "input", "tools", "tool_choice", "stream")


def check_params(value: Any) -> dict[str, Any]:
    """A --model-params value (parsed JSON): an object that leaves the harness's own fields alone."""
    if not isinstance(value, dict):
        raise ValueError(
            f"is a JSON {type(value).__name__}, not an object; pass a JSON object such as '{{\"temperature\": 0}}'"
        )
    reserved = [k for k in RESERVED_PARAMS if k in value]
    if reserved:
        raise ValueError(
            f"sets {', '.join(reserved)}, which the harness controls; "
            "remove them (use --model / --model-protocol for the model and API)"
        )
    return value


MODEL_OPTIONS: tuple[Option, ...] = (
    Option(
        "model",
        "--model",
        "model name sent to the OpenAI-compatible server; 'oracle' answers with the benchmarks' ground truth.",
        ini="agentbench_model",
        metavar="NAME",
        runfile_group="models",
    ),
    Option(
        "model_base_url",
        "--model-base-url",
        f"base URL of the OpenAI-compatible API (default: $OPENAI_BASE_URL, else {DEFAULT_BASE_URL}).",
        ini="agentbench_model_base_url",
        env="OPENAI_BASE_URL",
        metavar="URL",
        runfile_group="models",
        free_on_resume=True,
    ),
    Option(
        "model_api_key",
        "--model-api-key",
        "API key (default: $OPENAI_API_KEY); never written to reports or the cache.",
        env="OPENAI_API_KEY",
        metavar="KEY",
        secret=True,
        runfile_group="models",
    ),
    Option(
        "model_protocol",
        "--model-protocol",
        "API to call: chat (Chat Completions) or responses (Responses API); default chat.",
        kind="choice",
        choices=PROTOCOLS,
        default="chat",
        ini="agentbench_model_protocol",
        runfile_group="models",
    ),
    Option(
        "model_params",
        "--model-params",
        'JSON object of extra request fields, e.g. \'{"temperature": 0, "max_tokens": 4096, '
        '"reasoning_effort": "high"}\'.',
        kind="json",
        check=check_params,
        ini="agentbench_model_params",
        metavar="JSON",
        runfile_group="models",
    ),
    Option(
        "model_timeout",
        "--model-timeout",
        f"timeout of one model request in seconds (default {DEFAULT_TIMEOUT:g}).",
        kind="float",
        default=DEFAULT_TIMEOUT,
        minimum=0,
        exclusive_minimum=True,
        ini="agentbench_model_timeout",
        metavar="SECONDS",
        runfile_group="models",
        free_on_resume=True,
        shown=False,
    ),
    Option(
        "model_max_retries",
        "--model-max-retries",
        "retries of a model request on rate limits, server errors, timeouts and connection errors, "
        f"with exponential backoff (default {DEFAULT_MAX_RETRIES}).",
        kind="int",
        default=DEFAULT_MAX_RETRIES,
        minimum=0,
        ini="agentbench_model_max_retries",
        metavar="N",
        runfile_group="models",
        free_on_resume=True,
        shown=False,
    ),
    Option(
        "model_max_retry_time",
        "--model-max-retry-time",
        "seconds an item's model requests may spend on retries in all (backoff waits and repeated attempts, from "
        "each request's first failure; every request of the item, its tool-use rounds or agent turns, draws from "
        "the same budget) before the item ends in model_error: a failing endpoint costs each item about this "
        f"long at most, whatever --bench-set model_max_retries allows (default {DEFAULT_MAX_RETRY_TIME:g}).",
        kind="float",
        default=DEFAULT_MAX_RETRY_TIME,
        minimum=0,
        ini="agentbench_model_max_retry_time",
        metavar="SECONDS",
        runfile_group="models",
        free_on_resume=True,
        shown=False,
    ),
    Option(
        "model_retry_delay",
        "--model-retry-delay",
        f"base delay in seconds of the exponential retry backoff (default {DEFAULT_RETRY_BASE_DELAY:g}).",
        kind="float",
        default=DEFAULT_RETRY_BASE_DELAY,
        minimum=0,
        ini="agentbench_model_retry_delay",
        metavar="SECONDS",
        runfile_group="models",
        free_on_resume=True,
        shown=False,
    ),
    Option(
        "cache",
        "--bench-cache",
        "response cache mode: rw (read and write, default), ro (read only), off, "
        "replay (only cached replies; a miss is an error, to re-score without a model).",
        kind="choice",
        choices=CACHE_MODES,
        default="rw",
        ini="agentbench_cache",
        help_group="run",
    ),
    Option(
        "model_preflight",
        "--model-preflight",
        "at session start, prove the endpoint answers the run: list the models, then send one request shaped "
        "like the run's first (its prompt, protocol, params and tools; the reply capped at a token). A missing "
        "or refused key (401/403, or a gateway's 400), a dead endpoint, an unknown model or a 5xx that one retry "
        "does not clear is then one usage error (exit 4) quoting the endpoint, before any item runs, even when "
        "the cache is warm. Skipped for the oracle and with --bench-cache replay (default on).",
        kind="choice",
        choices=("on", "off"),
        default="on",
        ini="agentbench_model_preflight",
        runfile_group="models",
        free_on_resume=True,
        shown=False,
    ),
    Option(
        "max_connections",
        "--bench-max-connections",
        "model requests in flight at once in the session: each process generates the steps of all the problems "
        "(and attempts) it holds concurrently, ahead of scoring, up to its share (this number divided over the "
        "xdist workers, at least 1 each); items are still scored in order. A rate limit (HTTP 429, Retry-After) "
        f"lowers it for a while (default {DEFAULT_MAX_CONNECTIONS}; 1: one chain at a time).",
        kind="int",
        default=DEFAULT_MAX_CONNECTIONS,
        minimum=1,
        ini="agentbench_max_connections",
        metavar="N",
        free_on_resume=True,
    ),
    PRICE_OPTION,
    *BUDGET_OPTIONS,
)


@dataclass(frozen=True)
class ModelOptions:
    """The model's settings, typed (``view(ModelOptions, opts)``); one field per option of MODEL_OPTIONS."""

    OPTIONS: ClassVar[tuple[Option, ...]] = MODEL_OPTIONS
    model: str | None
    model_base_url: str | None
    model_api_key: str | None
    model_protocol: str
    model_params: Any  # a JSON value (an object of request parameters), None when not given
    model_timeout: float
    model_max_retries: int
    model_max_retry_time: float
    model_retry_delay: float
    cache: str
    model_preflight: str
    max_connections: int
    model_price: str | None  # the canonical PROMPT,COMPLETION text
    max_cost_per_item: float | None
    max_cost: float | None


def model_settings(opts: Mapping[str, Any]) -> dict[str, Any]:
    """The model settings a run records (never the API key), checked; ``price`` only when one is given.

    ``opts`` are resolved settings or a plain mapping of the model's and the run's options (the preflight's
    plain-Python callers): the ones it lacks take their defaults."""
    given = given_settings(opts, ModelOptions, RunOptions)
    model = view(ModelOptions, given)
    base_url = model.model_base_url or DEFAULT_BASE_URL
    price = price_of(model.model_price)
    return {
        "model": model.model or None,
        "base_url": base_url.rstrip("/"),
        "protocol": model.model_protocol,
        "params": dict(model.model_params or {}),
        "timeout": float(model.model_timeout),
        "max_retries": int(model.model_max_retries),
        "max_retry_time": float(model.model_max_retry_time),
        "retry_base_delay": float(model.model_retry_delay),
        "cache_dir": str(view(RunOptions, given).cache_dir),  # a run option (RUN_OPTIONS), not the model's
        "cache_mode": model.cache,
        **({"price": price.to_settings()} if price is not None else {}),
    }


def check_api_key(settings: dict[str, Any], api_key: str | None) -> None:
    """ConfigError when the default (OpenAI) endpoint would be called without a key."""
    if not api_key and settings["base_url"] == DEFAULT_BASE_URL and settings["cache_mode"] != "replay":
        raise ConfigError(
            f"no API key for {DEFAULT_BASE_URL}: pass --model-api-key or set OPENAI_API_KEY "
            "(or point --model-base-url at your OpenAI-compatible server)"
        )


def build_model(opts: Mapping[str, Any], *, connections: int | None = None) -> OracleModel | OpenAIModel:
    """The model of this run: ``OracleModel`` for ``--model oracle``, else an ``OpenAIModel``.

    ``opts["cache_dir"]`` is used as given (the plugin resolves it against the rootdir, so xdist
    workers and the controller share one cache). ``connections``: this process's share of
    --bench-max-connections (an xdist worker's, from its controller); None: all of it."""
    given = given_settings(opts, ModelOptions, RunOptions)
    settings = model_settings(given)
    name = settings["model"]
    if not name:
        raise ConfigError(
            "no model given: pass --model NAME (or set agentbench_model in the ini file); "
            "--model oracle scores the benchmarks' ground truth without any server"
        )
    if name == ORACLE:
        return OracleModel({"model": ORACLE})
    api_key = view(ModelOptions, given).model_api_key
    check_api_key(settings, api_key)
    from .client import OpenAIModel  # why: the openai SDK is imported only when a real model is used

    return OpenAIModel(
        name,
        base_url=settings["base_url"],
        api_key=api_key,
        protocol=settings["protocol"],
        params=settings["params"],
        timeout=settings["timeout"],
        max_retries=settings["max_retries"],
        cache_dir=settings["cache_dir"],
        cache_mode=settings["cache_mode"],
        retry_base_delay=settings["retry_base_delay"],
        max_retry_time=settings["max_retry_time"],
        max_connections=connections or int(view(ModelOptions, given).max_connections),
        price=price_of(settings.get("price")),
        max_cost=view(ModelOptions, given).max_cost,
    )
