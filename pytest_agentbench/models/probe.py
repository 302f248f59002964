"""--bench-replay's check before any item: does the response cache hold the first call a harness would make?

``FirstCallProbe`` stands in for the run's replaying model: the benchmark drives its harness with the real
prompt building (``first_call_misses``), and the probe's first ``complete`` asks the real model, which in
replay mode reads the cache only and never the endpoint, then stops the harness with ``FirstCallSeen``.
Nothing is run and nothing is sent. (Its own module: it needs the client, which imports the openai SDK.)
"""

from __future__ import annotations

from typing import Any, NoReturn

from .base import Model
from .client import ModelError


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
