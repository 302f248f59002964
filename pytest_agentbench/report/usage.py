"""What a run's model usage says in its headline: answers replayed from the response cache, and in a resumed run
this session's calls apart from those of the records it reused.

A plain rerun finds every answer of the earlier run in the cache and replays it, so at a temperature above 0 a
"new" sample is the old one: the headline says so, with the way to ask the model again. A resumed run reuses
the finished records of its earlier session(s); their calls were made then, so the usage of this session is
shown apart from theirs (summary.json: ``usage.this_session`` and ``usage.reused``, beside the run's totals).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..core import records as rec

FRESH_SAMPLES = "--bench-cache=off asks the model again (new samples, nothing read from the cache)"


def usage_totals(records: Iterable[rec.RecordLike]) -> dict[str, float]:
    """Usage totals with ``endpoint_calls`` (calls that reached the endpoint) and the items by answers' origin."""
    records = list(records)
    usage = rec.usage_totals(records)
    usage["endpoint_calls"] = max(0, (usage.get("model_calls") or 0) - (usage.get("cache_hits") or 0))
    labels = [answers_label(r) for r in records]
    for label in ("fresh", "replayed", "mixed"):  # items whose answers came from the endpoint, the cache, both
        usage[f"{label}_items"] = labels.count(label)
    return usage


def answers_label(record: rec.RecordLike) -> str | None:
    generation = record.get("generation") or {}
    label = generation.get("answers") if isinstance(generation, Mapping) else None
    return label if isinstance(label, str) else None


def split_usage(records: list[rec.Record], reused: Iterable[str]) -> dict[str, Any]:
    """The run's usage; with ``reused`` (keys of records an earlier session wrote) also ``this_session`` and
    ``reused`` (each with its ``items``), so a resumed run's usage never counts earlier calls as made now."""
    usage: dict[str, Any] = usage_totals(records)
    keys = set(reused)
    if not keys:
        return usage
    earlier = [r for r in records if rec.record_key(r) in keys]
    now = [r for r in records if rec.record_key(r) not in keys]
    usage["this_session"] = {**usage_totals(now), "items": sum(1 for r in now if r.get("status") != "not_run")}
    usage["reused"] = {**usage_totals(earlier), "items": len(earlier)}
    return usage


def usage_line(usage: Mapping[str, Any]) -> str:
    """``4 model calls, ...``; a resumed run's: this session's, then the reused records' calls."""
    now, earlier = usage.get("this_session"), usage.get("reused")
    if not isinstance(now, Mapping) or not isinstance(earlier, Mapping):
        return rec.usage_text(usage)
    return (
        f"this session: {rec.usage_text(now)}; reused from the earlier session ({earlier.get('items', 0):g} "
        f"records): {rec.usage_text(earlier)}"
    )


def replayed_text(usage: Mapping[str, Any], settings: Mapping[str, Any]) -> str | None:
    """The headline of a run some of whose answers came from the response cache, else None."""
    now = usage.get("this_session")
    scope: Mapping[str, Any] = now if isinstance(now, Mapping) else usage
    replayed, mixed = int(scope.get("replayed_items") or 0), int(scope.get("mixed_items") or 0)
    if not replayed and not mixed:
        return None
    asked = replayed + mixed + int(scope.get("fresh_items") or 0)
    parts = [f"{replayed} of {asked} items replayed from the response cache"]
    if mixed:
        parts.append(f"{mixed} partly")
    head = f"answers replayed: {', '.join(parts)} ({scope.get('cache_hits', 0):g} cache hits)"
    if settings.get("cache_mode") == "replay":  # asked for: a re-scoring of recorded answers
        return f"{head}: a re-scoring of recorded answers"
    return f"{head}: these are earlier samples, not new ones; {FRESH_SAMPLES}"
