"""Progress lines (items, model calls, tokens, cache hits, elapsed) never cut pytest's own lines."""
from __future__ import annotations

import re

import pytest
import scipy.stats  # noqa: F401  loaded before pytester's in-process runs, which cannot re-import numpy's C parts
from matplotlib.backends import backend_agg  # noqa: F401  (same reason)

PROGRESS = re.compile(r"^agentbench: (\d)/5 items, (\d) model calls, 0 tokens, 0 cache hits, 0 tool calls, "
                      r"elapsed [\d.]+s$")


def test_verbose_lines_stay_whole(tiny):
    result = tiny("-v", "--bench-progress-interval=0", broken="2.2")
    lines = result.outlines
    progress = [m.groups() for m in map(PROGRESS.match, lines) if m]
    assert progress == [(str(n), str(n)) for n in range(1, 6)]  # one per finished item, counting up
    items = [line for line in lines if line.startswith("scicode/")]
    assert len(items) == 5 and all(re.match(r"^scicode/\d::\d\.\d (PASSED|FAILED) +\[ *\d+%\]$", i) for i in items)
    assert "agentbench: 5 items, 5 model calls, 0 tokens, 0 cache hits" in result.stdout.str()  # the final totals


def test_quiet_keeps_every_outcome_letter(tiny):
    result = tiny("-q", "--bench-progress-interval=0", broken="2.2")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    progress = [line for line in result.outlines if line.startswith("agentbench: ") and "/5 items" in line]
    assert len(progress) == 5 and all(PROGRESS.match(line) for line in progress)
    letters = "".join(re.sub(r"\s*\[ *\d+%\]$", "", line) for line in result.outlines
                      if re.fullmatch(r"[.F]+\s*(\[ *\d+%\])?", line.strip()))
    assert sorted(letters) == sorted("....F")
