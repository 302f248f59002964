"""Which model answered: the name each reply gave (``generation.served_models`` of a record), against the model
the run asked for.

A gateway may answer with another model than the one asked for (a fallback after rate limits, an alias): the
scores are then that model's. A dated name of the same model (``gpt-4o`` answered as ``gpt-4o-2024-08-06``) is the
model asked for. summary.json keeps ``served_models`` (each name with the items it answered) and, in its
comparability keys, ``served_model``: ``"as asked"``, or the names when another model answered some item; two runs
whose keys differ there are not comparable (a gate refuses the baseline unless --bench-set allow_incomparable=true).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ..core import records as rec

AS_ASKED = "as asked"
KEY = "served_model"  # the comparability key
DATED = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8}|\d{4})")  # -2024-08-06, -20240620, -0613


def served_names(record: rec.RecordLike) -> list[str]:
    """The models the endpoint said answered the item's calls (none when it did not say, or no model was called)."""
    generation = record.get("generation") or {}
    names = generation.get("served_models") if isinstance(generation, Mapping) else None
    return [n for n in names if isinstance(n, str) and n] if isinstance(names, list) else []


def is_model_asked(asked: str, served: str) -> bool:
    """Whether ``served`` is the model ``asked`` for: the same name, or it with a date appended."""
    if served == asked:
        return True
    return served.startswith(asked) and DATED.fullmatch(served[len(asked) :]) is not None


def served_models(records: Iterable[rec.RecordLike]) -> dict[str, int]:
    """Each model the endpoint named, with the number of items it answered (some of)."""
    counts: dict[str, int] = {}
    for record in records:
        for name in served_names(record):
            counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items()))


def comparability_value(served: Mapping[str, int], asked: str | None) -> Any:
    """``"as asked"`` when every named model is the one asked for, else the sorted names; None when no reply named
    a model (the key is then left out: unknown, never refused for)."""
    if not served:
        return None
    if asked and all(is_model_asked(asked, name) for name in served):
        return AS_ASKED
    return sorted(served)


def served_text(served: Mapping[str, int], asked: str | None, items: int) -> str | None:
    """The headline of a run some of whose answers came from another model than the one asked for, else None."""
    if not asked or comparability_value(served, asked) in (None, AS_ASKED):
        return None
    others = [name for name in served if not is_model_asked(asked, name)]
    shown = ", ".join(f"{name} ({served[name]} of {items} items)" for name in others)
    return (
        f"served model: answers came from {shown}, not from {asked}, the model asked for (the endpoint said so in "
        f"its replies: a gateway's fallback or alias): the scores are not {asked}'s, and the run is comparable only "
        f"with runs answered by the same models"
    )


def summary_text(summary: Mapping[str, Any]) -> str | None:
    """``served_text`` of a summary.json."""
    settings = summary.get("settings") or {}
    served = summary.get("served_models")
    if not isinstance(served, Mapping):
        return None
    items = len(summary.get("items") or []) or sum(served.values())
    return served_text(served, settings.get("model"), items)
