"""Prices and budgets: what a model's tokens cost, in US dollars, from a price the user gives.

A price is data (``--model-price=PROMPT,COMPLETION`` or ``price:`` of a run file's model entry), in USD per
million tokens; nothing here fetches one. The cost of a call is computed from the token counts the endpoint
reported in its ``usage``; a reply without usage has no known cost (it is never estimated from text length).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.options import Option

PROMPT_KEY, COMPLETION_KEY = "prompt_per_mtok", "completion_per_mtok"  # a run file's price: keys
MILLION = 1_000_000
PRICE_FORMAT = (
    "give USD per million tokens as PROMPT,COMPLETION (e.g. 2.5,10), or in a run file "
    f"price: {{{PROMPT_KEY}: 2.5, {COMPLETION_KEY}: 10}}"
)


@dataclass(frozen=True)
class Price:
    """USD per million prompt tokens and per million completion tokens."""

    prompt_per_mtok: float
    completion_per_mtok: float

    def cost(self, prompt_tokens: float, completion_tokens: float) -> float:
        return (prompt_tokens * self.prompt_per_mtok + completion_tokens * self.completion_per_mtok) / MILLION

    def to_settings(self) -> dict[str, float]:
        return {PROMPT_KEY: self.prompt_per_mtok, COMPLETION_KEY: self.completion_per_mtok}

    @property
    def text(self) -> str:
        """The option's own spelling, ``2.5,10``: what settings.json keeps and a resume reads back."""
        return f"{self.prompt_per_mtok:g},{self.completion_per_mtok:g}"


def parse_price(value: Any) -> Price:
    """``2.5,10``, a JSON object ``{"prompt_per_mtok": 2.5, "completion_per_mtok": 10}`` (a run file's mapping
    arrives so), or that mapping itself; ValueError saying the format otherwise."""
    if isinstance(value, str) and value.strip().startswith("{"):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ValueError(f"is not a price; {PRICE_FORMAT}") from None
    if isinstance(value, Mapping):
        unknown = sorted(set(map(str, value)) - {PROMPT_KEY, COMPLETION_KEY})
        if unknown or PROMPT_KEY not in value or COMPLETION_KEY not in value:
            raise ValueError(
                f"is not a price: it needs exactly the keys {PROMPT_KEY} and {COMPLETION_KEY} (USD per "
                f"million tokens)" + (f"; unknown: {', '.join(unknown)}" if unknown else "")
            )
        parts = [value[PROMPT_KEY], value[COMPLETION_KEY]]
    else:
        parts = [p.strip() for p in str(value).split(",")]
        if len(parts) != 2:
            raise ValueError(f"is not a price; {PRICE_FORMAT}")
    numbers = []
    for part in parts:
        try:
            number = float(part)
        except (TypeError, ValueError):
            number = math.nan
        if isinstance(part, bool) or not math.isfinite(number) or number < 0:
            raise ValueError(
                "must be two finite numbers >= 0: USD per million prompt and completion tokens, e.g. 2.5,10"
            )
        numbers.append(number)
    return Price(*numbers)


def check_price(value: Any) -> str:
    """Option check of --model-price: the price in its canonical spelling (``2.5,10``)."""
    return parse_price(value).text


def price_of(text: Any) -> Price | None:
    """The resolved --model-price (its canonical text, or a settings mapping) as a Price; None when not given."""
    if text in (None, "", {}):
        return None
    return parse_price(text)


PRICE_OPTION = Option(
    "model_price",
    "--model-price",
    "the model's price in USD per million tokens, PROMPT,COMPLETION (e.g. 2.5,10): records, summaries and "
    f"report.html then show what the run cost (a run file's model takes price: {{{PROMPT_KEY}: ..., "
    f"{COMPLETION_KEY}: ...}}). Nothing fetches prices.",
    check=check_price,
    ini="agentbench_model_price",
    metavar="PROMPT,COMPLETION",
    runfile_group="models",
    free_on_resume=True,
)

BUDGET_OPTIONS: tuple[Option, ...] = (
    Option(
        "max_cost_per_item",
        "--bench-max-cost-per-item",
        "budget in USD of one item (the agent or harness that answers it): once its fresh model calls have "
        "cost this much, it stops with the status budget (not passed, not retried, no error). "
        "Needs --model-price.",
        kind="float",
        minimum=0,
        exclusive_minimum=True,
        ini="agentbench_max_cost_per_item",
        metavar="USD",
        shown=False,
    ),
    Option(
        "max_cost",
        "--bench-max-cost",
        "budget in USD of the run: once its fresh model calls have cost this much, no new item starts; the "
        "rest is reported not run and the run is incomplete (resume it to go on). Needs --model-price.",
        kind="float",
        minimum=0,
        exclusive_minimum=True,
        ini="agentbench_max_cost",
        metavar="USD",
        free_on_resume=True,
    ),
)


# ---- what one call and one item cost ------------------------------------------------------------------
COST_KEY, REPLAYED_COST_KEY, USAGE_MISSING_KEY = "cost_usd", "replayed_cost_usd", "usage_missing"


def start_costs(accounting: dict[str, Any], price: Price | None) -> dict[str, Any]:
    """Give an item's accounting its cost fields (0 USD so far) when the model has a price."""
    if price is not None:
        accounting.setdefault(COST_KEY, 0.0)
        accounting.setdefault(REPLAYED_COST_KEY, 0.0)
    return accounting


def add_call_cost(accounting: dict[str, Any], completion: Any, price: Price | None) -> None:
    """Count one reply's cost: ``cost_usd`` (fresh calls: what was spent) or ``replayed_cost_usd`` (cache
    hits: what they would have cost). A reply without usage makes its side unknown (None) and is counted in
    ``usage_missing``, priced or not."""
    reported = getattr(completion, "usage_reported", True)
    if not reported:
        accounting[USAGE_MISSING_KEY] = accounting.get(USAGE_MISSING_KEY, 0) + 1
    if price is None:
        return
    start_costs(accounting, price)
    key = REPLAYED_COST_KEY if getattr(completion, "cached", False) else COST_KEY
    if not reported or accounting[key] is None:
        accounting[key] = None
        return
    accounting[key] = round(accounting[key] + price.cost(completion.prompt_tokens, completion.completion_tokens), 9)


def spent(accounting: Mapping[str, Any]) -> float:
    """What an item's fresh calls cost so far (what a budget counts; a call of unknown cost counts 0)."""
    value = accounting.get(COST_KEY)
    return float(value) if isinstance(value, (int, float)) else 0.0


def over_budget(accounting: Mapping[str, Any], budget: float | None) -> str | None:
    """The message of an item whose spending reached ``budget`` (USD), else None."""
    if budget is None or spent(accounting) < budget:
        return None
    return f"spent ${spent(accounting):.4f} of its budget of ${budget:g} (--bench-set max_cost_per_item)"


def item_spent(record: Mapping[str, Any]) -> float | None:
    """What an item's fresh calls cost, every try of a retried item included (``tries``); None when some of it
    is unknown (a reply without usage, a client that reports no tokens)."""
    return summed(record, COST_KEY)


def item_replayed(record: Mapping[str, Any]) -> float | None:
    """What an item's replayed calls would have cost (every try), None when unknown."""
    return summed(record, REPLAYED_COST_KEY)


def summed(record: Mapping[str, Any], key: str) -> float | None:
    """``generation[key]`` over the record's tries (or the record itself): 0 for a part that asked no model, None
    when a part that did has no amount (unknown, or not costed)."""
    tries = record.get("tries")
    total = 0.0
    for part in tries if isinstance(tries, list) and tries else [record]:
        generation = part.get("generation") if isinstance(part, Mapping) else None
        generation = generation if isinstance(generation, Mapping) else {}
        value = generation.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            total += value
        elif key in generation or generation.get("model_calls"):
            return None
    return round(total, 9)


class RunBudget:
    """What one process saw spent (the fresh records it ran or received) against --bench-max-cost."""

    def __init__(self, limit: float | None) -> None:
        self.limit = limit
        self.spent = 0.0
        self.unknown = 0  # records whose cost is unknown (counted as 0)

    def add(self, record: Mapping[str, Any]) -> None:
        cost = item_spent(record)
        if cost is None:
            self.unknown += 1
        self.spent = round(self.spent + (cost or 0.0), 9)

    @property
    def exhausted(self) -> bool:
        return self.limit is not None and self.spent >= self.limit

    def text(self) -> str:
        """Why no new item starts. It names no sum: items already running finish after it is said, so the
        run's cost is the one figure the cost line gives (report/cost.py), counted when every record is in."""
        unknown = f" ({self.unknown} item(s) of unknown cost counted as $0)" if self.unknown else ""
        return (
            f"run budget --bench-max-cost=${self.limit:g} reached{unknown}: no new item started after that "
            f"(the items already running finished; the cost line counts them)"
        )
