"""Counting a harness's model calls: tokens, cache hits, and whether an item's answers are fresh.

Both benchmarks' harnesses keep an accounting dict per item (``record["generation"]``). Besides the
counts, it holds ``responses``, a running sha256 over every reply's text and tool calls (two runs whose
item has the same digest were scored on the same answers), and ``answers``: ``fresh`` when every call
reached the endpoint, ``replayed`` when every call came from the response cache, ``mixed`` otherwise. With a
price (``models/price.py``) it also holds ``cost_usd`` (fresh calls) and ``replayed_cost_usd`` (cache hits: what
they would have cost); ``usage_missing`` counts replies that reported no token usage. ``served_models`` lists the
models the endpoint said answered (each reply's ``model``, kept in the response cache so a replay keeps it).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from .price import Price, add_call_cost

FRESH, REPLAYED, MIXED = "fresh", "replayed", "mixed"


def count_completion(accounting: dict[str, Any], completion: Any, price: Price | None = None) -> None:
    """Add one call (a ``models.client.Completion``) to ``accounting``, with its cost when ``price`` is given."""
    accounting["model_calls"] = accounting.get("model_calls", 0) + 1
    accounting["cache_hits"] = accounting.get("cache_hits", 0) + int(completion.cached)
    accounting["prompt_tokens"] = accounting.get("prompt_tokens", 0) + completion.prompt_tokens
    accounting["completion_tokens"] = accounting.get("completion_tokens", 0) + completion.completion_tokens
    # requests the client retried (429, 5xx, ...) before this reply; a custom client's reply may not say
    accounting["request_retries"] = accounting.get("request_retries", 0) + getattr(completion, "request_retries", 0)
    if "latency" in accounting:
        accounting["latency"] += completion.latency
    add_call_cost(accounting, completion, price)
    served = getattr(completion, "served_model", "")  # a custom client's reply may not say
    if served:  # who the endpoint said answered, each name once
        accounting["served_models"] = sorted({*accounting.get("served_models", []), served})
    accounting["responses"] = chained_digest(accounting.get("responses", ""), completion)
    accounting["answers"] = answers_label(accounting)


def turn_of(completion: Any, message: int) -> dict[str, Any]:
    """What one model call cost, for a trajectory file's ``turns``: ``message`` is the index of the assistant
    message the call produced. Kept beside the messages, never in them: the messages are the next request (and
    its cache key). ``latency`` is the call's wall clock, the first call's when the reply came from the cache."""
    return {
        "message": message,
        "prompt_tokens": completion.prompt_tokens,
        "completion_tokens": completion.completion_tokens,
        "latency": round(float(getattr(completion, "latency", 0.0) or 0.0), 3),
        "cached": bool(getattr(completion, "cached", False)),
    }


def chained_digest(previous: str, completion: Any) -> str:
    calls = [[c.get("name"), c.get("arguments")] for c in completion.tool_calls]
    payload = json.dumps([previous, completion.text, calls], ensure_ascii=True)
    return hashlib.sha256(payload.encode("ascii")).hexdigest()


def answers_label(accounting: dict[str, Any]) -> str | None:
    """fresh, replayed or mixed; None when the item made no model call."""
    calls, hits = accounting.get("model_calls", 0) or 0, accounting.get("cache_hits", 0) or 0
    if not calls:
        return None
    return REPLAYED if hits >= calls else FRESH if not hits else MIXED
