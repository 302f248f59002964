"""The units a run is made of: a ``Task`` (run whole, in order, on one worker) of ``Sample``s (one item each)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Sample:
    """One pytest item: a SciCode step or a CORE-Bench capsule."""

    id: str  # "77.3", "capsule-7038571"; unique within the benchmark
    task_id: str  # "77", "capsule-7038571"
    split: str
    scored: bool = True
    skip_reason: str | None = None  # items that are collected but never run (prefilled steps)
    markers: tuple[str, ...] = ()
    data: Any = None  # benchmark-owned payload (the step dict, the task dict, ...)


@dataclass
class Task:
    """A group of samples that must run on one worker, in order (a SciCode problem)."""

    id: str
    split: str
    samples: list[Sample] = field(default_factory=list)
    data: Any = None
