"""--bench-replay's check before any item: does the response cache hold the first call a harness would make?

``FirstCallProbe`` stands in for the run's replaying model: the benchmark drives its harness with the real
prompt building (``first_call_misses``), and the probe's first ``complete`` asks the real model, which in
replay mode reads the cache only and never the endpoint, then stops the harness with ``FirstCallSeen``.
Nothing is run and nothing is sent. (Its own module: it needs the client, which imports the openai SDK.)

``FirstRequestKeeper`` is driven the same way for the model preflight: it keeps the shape of the run's first
request (messages, tools, tool choice), which the preflight then sends for real.
"""

from __future__ import annotations

import copy
from typing import Any, NoReturn

from .base import Model
from .client import ModelError
from .preflight import FirstCall


class FirstCallSeen(Exception):
    """Raised at the first model call a harness makes: whether the cache holds it."""

    def __init__(self, found: bool, detail: str = "") -> None:
        super().__init__(detail or ("in the cache" if found else "not in the cache"))
        self.found = found


class FirstCallProbe:
    """A model whose first ``complete`` answers only whether the replaying ``model`` has that call cached."""

    is_oracle = False

    def __init__(self, model: Model) -> None:
        self.model = model
        self.name = getattr(model, "name", "")
        self.settings = getattr(model, "settings", {})

    def complete(self, messages: list[dict[str, Any]], **kwargs: Any) -> NoReturn:
        try:
            self.model.complete(messages, **kwargs)
        except ModelError as error:
            raise FirstCallSeen(False, str(error)) from None
        raise FirstCallSeen(True)


class FirstRequestKeeper:
    """A model that keeps the first request a harness makes and ends the harness there: the model preflight
    sends a request of that shape (``FirstCall``). Given to a benchmark's ``first_call_misses`` in place of the
    run's model: its ``FirstCallProbe`` turns the ModelError raised here into the end of the harness."""

    is_oracle = False

    def __init__(self, name: str) -> None:
        self.name = name
        self.settings: dict[str, Any] = {"model": name}
        self.seen: FirstCall | None = None

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | None = None,
        **_: Any,
    ) -> NoReturn:
        if self.seen is None:
            self.seen = FirstCall(copy.deepcopy(messages), copy.deepcopy(tools) or None, tool_choice)
        raise ModelError("the first request is kept for the model preflight")
