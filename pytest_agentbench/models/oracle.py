"""The built-in ``oracle`` model: benchmarks answer with their own ground truth.

It never talks to a server; a benchmark seeing ``model.is_oracle`` substitutes the reference
solution, which checks the scoring pipeline end to end without any model.
"""

from __future__ import annotations

from typing import Any, NoReturn


class OracleModel:
    name = "oracle"
    is_oracle = True

    def __init__(self, settings: dict[str, Any] | None = None) -> None:
        self.settings = dict(settings or {"model": "oracle"})

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        sample_index: int = 0,
        tool_choice: str | None = None,
        cache_messages: list[dict[str, Any]] | None = None,
    ) -> NoReturn:
        raise RuntimeError(
            "the oracle model has no replies: a benchmark must check model.is_oracle and use its "
            "ground truth instead of calling complete()"
        )
