"""Command-line options of the model layer and the model factory."""
from __future__ import annotations

import json
import os

import pytest

from .cache import CACHE_MODES, DEFAULT_CACHE_DIR
from .defaults import DEFAULT_BASE_URL, DEFAULT_MAX_RETRIES, DEFAULT_RETRY_BASE_DELAY, DEFAULT_TIMEOUT, PROTOCOLS
from .oracle import OracleModel

ORACLE = "oracle"
# request fields the client sets itself; letting --model-params override them would break the harness
RESERVED_PARAMS = ("model", "messages", "input", "tools", "tool_choice", "stream")


def add_model_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("agentbench")
    group.addoption("--model", dest="agentbench_model", default=None, metavar="NAME",
                    help="model name sent to the OpenAI-compatible server; 'oracle' answers with "
                         "the benchmarks' ground truth (ini: agentbench_model)")
    group.addoption("--model-base-url", dest="agentbench_model_base_url", default=None, metavar="URL",
                    help=f"base URL of the OpenAI-compatible API (default: $OPENAI_BASE_URL, "
                         f"else {DEFAULT_BASE_URL})")
    group.addoption("--model-api-key", dest="agentbench_model_api_key", default=None, metavar="KEY",
                    help="API key (default: $OPENAI_API_KEY); never written to reports or the cache")
    group.addoption("--model-protocol", dest="agentbench_model_protocol", default="chat",
                    choices=PROTOCOLS, help="API to call: chat (Chat Completions) or responses "
                                            "(Responses API); default chat")
    group.addoption("--model-params", dest="agentbench_model_params", default=None, metavar="JSON",
                    help='JSON object of extra request fields, e.g. \'{"temperature": 0, '
                         '"max_tokens": 4096, "reasoning_effort": "high"}\'')
    group.addoption("--model-timeout", dest="agentbench_model_timeout", type=float,
                    default=DEFAULT_TIMEOUT, metavar="SECONDS",
                    help=f"timeout of one model request in seconds (default {DEFAULT_TIMEOUT:g})")
    group.addoption("--model-max-retries", dest="agentbench_model_max_retries", type=int,
                    default=DEFAULT_MAX_RETRIES, metavar="N",
                    help="retries of a model request on rate limits, server errors, timeouts and "
                         f"connection errors, with exponential backoff (default {DEFAULT_MAX_RETRIES})")
    group.addoption("--bench-cache-dir", dest="agentbench_cache_dir", default=DEFAULT_CACHE_DIR,
                    metavar="DIR", help=f"cache folder, relative to the rootdir: model responses, rebuilt SciCode "
                                        f"targets, checksum stamps, unpacked capsules (default {DEFAULT_CACHE_DIR}/)")
    group.addoption("--bench-cache", dest="agentbench_cache_mode", default="rw", choices=CACHE_MODES,
                    help="response cache mode: rw (read and write, default), ro (read only), off, "
                         "replay (only cached replies; a miss is an error, to re-score without a model)")
    parser.addini("agentbench_model", default="",
                  help="default model name when --model is not given")
    parser.addini("agentbench_model_retry_delay", default=str(DEFAULT_RETRY_BASE_DELAY),
                  help="base delay in seconds of the exponential retry backoff (default 1)")


def parse_model_params(text: str | None) -> dict:
    """--model-params text to a dict, or a UsageError that quotes the text and says what is wrong."""
    if text is None or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise pytest.UsageError(
            f"--model-params {text!r} is not valid JSON ({error.msg} at column {error.colno}); "
            'pass a JSON object such as \'{"temperature": 0, "max_tokens": 4096}\''
        ) from None
    if not isinstance(value, dict):
        raise pytest.UsageError(
            f"--model-params {text!r} is a JSON {type(value).__name__}, not an object; "
            'pass a JSON object such as \'{"temperature": 0}\''
        )
    reserved = [k for k in RESERVED_PARAMS if k in value]
    if reserved:
        raise pytest.UsageError(
            f"--model-params {text!r} sets {', '.join(reserved)}, which the harness controls; "
            "remove them (use --model / --model-protocol for the model and API)"
        )
    return value


def _model_name(config: pytest.Config) -> str | None:
    return config.getoption("agentbench_model") or (config.getini("agentbench_model") or "").strip() or None


def _retry_delay(config: pytest.Config) -> float:
    raw = config.getini("agentbench_model_retry_delay")
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = -1.0
    if value < 0:
        raise pytest.UsageError(f"ini agentbench_model_retry_delay {raw!r} must be a number of seconds >= 0")
    return value


def model_settings(config: pytest.Config) -> dict:
    """Validated model settings for report headers (no API key)."""
    timeout = config.getoption("agentbench_model_timeout")
    if timeout is None or timeout <= 0:
        raise pytest.UsageError(f"--model-timeout {timeout!r} must be a positive number of seconds")
    retries = config.getoption("agentbench_model_max_retries")
    if retries is None or retries < 0:
        raise pytest.UsageError(f"--model-max-retries {retries!r} must be 0 or more")
    base_url = config.getoption("agentbench_model_base_url") or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
    return {
        "model": _model_name(config),
        "base_url": base_url.rstrip("/"),
        "protocol": config.getoption("agentbench_model_protocol"),
        "params": parse_model_params(config.getoption("agentbench_model_params")),
        "timeout": float(timeout),
        "max_retries": int(retries),
        "retry_base_delay": _retry_delay(config),
        "cache_dir": str(config.getoption("agentbench_cache_dir")),
        "cache_mode": config.getoption("agentbench_cache_mode"),
    }


def build_model(config: pytest.Config):
    """The model object for this run: OracleModel for --model oracle, else an OpenAIModel."""
    settings = model_settings(config)
    name = settings["model"]
    if not name:
        raise pytest.UsageError(
            "no model given: pass --model NAME (or set agentbench_model in the ini file); "
            "--model oracle scores the benchmarks' ground truth without any server"
        )
    if name == ORACLE:
        return OracleModel({"model": ORACLE})
    api_key = config.getoption("agentbench_model_api_key") or os.environ.get("OPENAI_API_KEY")
    if not api_key and settings["base_url"] == DEFAULT_BASE_URL and settings["cache_mode"] != "replay":
        raise pytest.UsageError(
            f"no API key for {DEFAULT_BASE_URL}: pass --model-api-key or set OPENAI_API_KEY "
            "(or point --model-base-url at your OpenAI-compatible server)"
        )
    cache_dir = settings["cache_dir"]
    if not os.path.isabs(cache_dir):
        # relative to the rootdir, so xdist workers and the controller share one cache
        cache_dir = str(config.rootpath / cache_dir)
    from .client import OpenAIModel  # the openai SDK is imported only when a real model is used

    return OpenAIModel(
        name, base_url=settings["base_url"], api_key=api_key, protocol=settings["protocol"],
        params=settings["params"], timeout=settings["timeout"], max_retries=settings["max_retries"],
        cache_dir=cache_dir, cache_mode=settings["cache_mode"],
        retry_base_delay=settings["retry_base_delay"],
    )
