"""What a benchmark may rely on of the run's model (``OracleModel``, ``OpenAIModel``, ``FirstCallProbe``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # the client imports the openai SDK, which only a run with a real model loads
    from .client import Completion


class Model(Protocol):
    name: str
    is_oracle: bool
    settings: dict[str, Any]

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        sample_index: int = 0,
        tool_choice: str | None = None,
        cache_messages: list[dict[str, Any]] | None = None,
    ) -> Completion:
        """One reply of the model to ``messages`` (chat shape). ``cache_messages``: what a response cache keys on
        instead of ``messages`` (the metering proxy passes it only to a ``complete`` that takes it)."""
        ...
