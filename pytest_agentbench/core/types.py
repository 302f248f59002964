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
    # --bench-attempts: which independent attempt this is (1-based; model calls use sample_index attempt-1)
    attempt: int = 1
    # --bench-set max_retries: 0 for the first try of an item, n for its n-th retry after an infrastructure failure
    retry: int = 0
    repeated: bool = False  # true when the run has more than one attempt (every attempt is then named)

    @property
    def key(self) -> str:
        """The id of this sample's record: ``77.3``, or ``77.3[attempt2]`` when attempts are repeated."""
        return attempt_key(self.id, self.attempt if self.repeated else None)


def attempt_key(sample_id: str, attempt: int | None) -> str:
    """``77.3`` (no attempt) or ``77.3[attempt2]``: the name of an item and the key of its record."""
    return sample_id if attempt is None else f"{sample_id}[attempt{attempt}]"


@dataclass
class Task:
    """A group of samples that must run on one worker, in order (a SciCode problem)."""

    id: str
    split: str
    samples: list[Sample] = field(default_factory=list)
    data: Any = None
