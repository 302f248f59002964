"""How a run's verdicts depend on the per-step time limit.

Runners disagree on it (upstream gives each step's script 1800 s; others use 60, 120, 180 or 300 s), and
slow-but-correct steps fail under the shorter ones. From each passing step's ``exec_duration`` (the
child's wall clock, what ``--bench-timeout`` bounds) this says which steps would have failed at those
limits on the machine that scored them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from ...core.io import natural_key
from ...core.records import PASS, RecordLike, as_record

COMMON_LIMITS = (60, 120, 180, 300)


def sensitivity(records: Iterable[RecordLike], limits: tuple[int, ...] = COMMON_LIMITS) -> dict[str, Any]:
    """``{"limits": {"60": [ids...], ...}, "cores": N, "timed": K}`` over passing steps with a duration."""
    passed = [r for r in map(as_record, records) if r.status == PASS]
    timed = [r for r in passed if isinstance(r.get("exec_duration"), (int, float))]
    over = {
        str(limit): sorted((r.id for r in timed if r["exec_duration"] > limit), key=natural_key) for limit in limits
    }
    return {
        "limits": over,
        "cores": os.cpu_count() or 1,
        "timed": len(timed),
        "slowest": max((float(r["exec_duration"]) for r in timed), default=0.0),
    }


def terminal_lines(found: dict[str, Any]) -> list[str]:
    affected = {limit: ids for limit, ids in found["limits"].items() if ids}
    if not affected:
        return []
    parts = [
        f"{len(ids)} at {limit} s ({', '.join(ids[:6])}{', ...' if len(ids) > 6 else ''})"
        for limit, ids in affected.items()
    ]
    return [
        f"time limit: passing steps that would fail under a shorter per-step limit: {'; '.join(parts)} "
        f"(scored on {found['cores']} cores)"
    ]


def markdown(found: dict[str, Any]) -> str:
    rows = [f"| {limit} s | {len(ids)} | {' '.join(ids) or '—'} |" for limit, ids in found["limits"].items()]
    return (
        "\n".join(
            [
                "## Time-limit sensitivity",
                "",
                "Passing steps whose scoring script ran longer than other runners' per-step limits, from each "
                f"record's "
                f"`exec_duration` (this run: {found['timed']} passing steps timed, slowest {found['slowest']:.1f} s, "
                f"summarized on a machine with {found['cores']} cores; slower machines move more steps):",
                "",
                "| limit | steps that would fail | steps |",
                "|---|---|---|",
                *rows,
                "",
            ]
        )
        + "\n"
    )
