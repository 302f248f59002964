"""Who a run measured, as every page names it: the model, and the agent that did the work when the run names one
(``settings["agent"]``, e.g. ``mini-swe-agent==2.4.6``): on an agentic benchmark the agent decides the score as
much as the model, so a title naming only the model would put two different measurements under one name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def run_subject(settings: Mapping[str, Any]) -> str:
    """``gpt-4o``, or ``gpt-4o with mini-swe-agent==2.4.6``."""
    model, agent = settings.get("model"), settings.get("agent")
    return f"{model} with {agent}" if agent else f"{model}"
