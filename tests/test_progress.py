"""Progress lines (done/total, statuses, elapsed, ETA, usage, long-running items) and the run header: the texts,
the ETA and the final count in-process; through pytester output, with and without xdist, where the lines meet
pytest's own (which are never cut)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_agentbench.core.records import RECORD_PROPERTY as RECORD
from pytest_agentbench.pytest_plugin import progress

from helpers.records_kit import tiny_records
from helpers.scicode_builders import MODEL_CONFTEST

OLD_RUN = Path(__file__).parent / "old_runs" / "scicode-tiny"

PROGRESS = re.compile(
    r"^agentbench: (\d)/5 done \((\d) pass(?:, (\d) fail)?\) · elapsed [^·]+ s"
    r"(?: · ETA [^·]+ s)? · (\d) model calls, 0 tokens, 0 cache hits$"
)

# 3.1 takes 2.5 s; "long running" is lowered to 0.5 s for the run (and restored after it)
SLOW_CONFTEST = (
    MODEL_CONFTEST
    + """
import time
from pytest_agentbench.pytest_plugin import progress as _progress

_answer = Mutant.answer_step
def _slow(self, problem, index, previous_code, **attempt):
    if problem["sub_steps"][index]["step_number"] == "3.1":
        time.sleep(2.5)
    return _answer(self, problem, index, previous_code)
Mutant.answer_step = _slow

_saved = []
def pytest_configure(config):
    _saved.append(_progress.LONG_RUNNING)
    _progress.LONG_RUNNING = 0.5

def pytest_unconfigure(config):
    if _saved:
        _progress.LONG_RUNNING = _saved.pop()
"""
)


@pytest.mark.e2e
def test_verbose_lines_stay_whole(tiny):
    result = tiny("-v", "--bench-set=progress_interval=0", broken="2.2")
    lines = result.outlines
    header = [line for line in lines if line.startswith("agentbench:") and "done" not in line]
    assert re.fullmatch(r"agentbench: scicode, split validation, model mutant, run \S+", header[0]), header
    assert header[2].startswith("agentbench: settings: ")  # the block test_header_is_a_short_block checks
    progress_lines = [m.groups() for m in map(PROGRESS.match, lines) if m]
    assert [g[0] for g in progress_lines] == ["1", "2", "3", "4", "5"]  # one per finished item, counting up
    assert progress_lines[-1] == ("5", "4", "1", "5")  # pass/fail counts so far, model calls
    items = [line for line in lines if line.startswith("scicode/") and line.rstrip().endswith("%]")]
    assert len(items) == 5 and all(re.match(r"^scicode/\d::\d\.\d (PASSED|FAILED) +\[ *\d+%\]$", i) for i in items)
    eta = [line for line in lines if "ETA" in line]
    assert all(PROGRESS.match(line) for line in eta)  # (five items are too few for one: the xdist test has it)
    assert re.search(
        r"agentbench: 5 done \(4 pass, 1 fail\) · elapsed [^·]+ s · 5 model calls, 0 tokens, "
        r"0 cache hits",
        result.stdout.str(),
    )  # the final totals


@pytest.mark.e2e
@pytest.mark.slow
def test_quiet_keeps_every_outcome_letter(tiny):
    result = tiny("-q", "--bench-set=progress_interval=0", broken="2.2")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    progress_lines = [line for line in result.outlines if line.startswith("agentbench: ") and "/5 done" in line]
    assert len(progress_lines) == 5 and all(PROGRESS.match(line) for line in progress_lines)
    letters = "".join(
        re.sub(r"\s*\[ *\d+%\]$", "", line)
        for line in result.outlines
        if re.fullmatch(r"[.F]+\s*(\[ *\d+%\])?", line.strip())
    )
    assert sorted(letters) == sorted("....F")


def test_the_final_count_is_shown_however_recent_the_last_line(pytester, capsys):
    """Lines are at most one per interval, but the line saying every item is done is never held back: it is
    the run's last word on progress (a heartbeat just before the last item ended once swallowed it).

    In-process: the controller's display on a configured pytest (no session), fed the tiny run's item reports."""
    config = pytester.parseconfigure("-q")  # its terminal writes to this test's captured output
    shown = progress.Progress(config, interval=3600)
    records = tiny_records()
    nodeids = [f"scicode/{r['task']}::{r['id']}" for r in records]
    shown.worker_collected(nodeids)  # the total, as xdist's workers report it
    for nodeid, record in zip(nodeids, records):
        report = pytest.TestReport(
            nodeid, (nodeid, None, record["id"]), {}, "passed", None, "call", user_properties=[(RECORD, record)]
        )
        shown.pytest_runtest_logreport(report)
    progress_lines = [line for line in capsys.readouterr().out.splitlines() if PROGRESS.match(line)]
    assert [PROGRESS.match(line).group(1) for line in progress_lines] == ["5"], progress_lines


def test_header_is_a_short_block():
    """The header of a real run's settings (the tiny dataset's, tests/old_runs/scicode-tiny/settings.json)."""
    recorded = json.loads((OLD_RUN / "settings.json").read_text())
    settings = {k: v for k, v in recorded.items() if not k.startswith("_")} | {"run_id": "hdr"}
    header = progress.header_lines(settings, OLD_RUN.parent / "reports" / "scicode" / "mutant" / "hdr", ["a note"])
    assert all(line.startswith("agentbench:") for line in header)
    assert header[0] == "agentbench: scicode, split validation, model mutant, run hdr"
    assert header[1].startswith("agentbench: reports in ") and header[1].endswith("hdr")
    assert header[2].startswith("agentbench: settings: ")
    wrapped = [line for line in header[2:] if "note:" not in line]  # notes and the reports path are as long as they are
    assert wrapped and max(len(line) for line in wrapped) <= 110, header


@pytest.mark.e2e
@pytest.mark.slow
def test_long_running_items(tiny, pytester):
    pytester.makeconftest(SLOW_CONFTEST)
    # no generation ahead: 3.1's slow answer is then asked while its own item runs (with chains generated ahead it
    # would be ready before the item starts)
    result = tiny("-v", "--bench-set=progress_interval=0.2", "--bench-set=overlap=false")
    out = result.stdout.str()
    assert result.ret == 0, out[-2000:]
    # the heartbeat's line never cuts the item's own line
    assert re.search(r"^scicode/3::3\.1 PASSED +\[100%\]$", out, re.M), out[-3000:]
    assert re.search(r"agentbench: 3\.1 running \d+ s", out), out[-3000:]
    assert re.search(r"agentbench: \d/5 done \(\d pass\) · elapsed", out)
    finished = out.split("agentbench: 5/5 done")[1].split("\n")
    assert "running" not in finished[1]  # a finished item is no longer listed


TIMED = re.compile(r"^agentbench: (\d+)/15 done .*· elapsed ([^·]+) s(?: · ETA ([^·]+) s)?", re.M)


def test_the_eta_under_xdist_is_paced_by_finished_items_over_the_workers():
    """The first ETA was once the pace since the first item started (each worker's first item carrying the
    worker's set-up) times the items left, as if no two ran at once: many times the time left. It now waits for
    a few items that carry no set-up and spreads the rest over the workers.

    Two workers set up for 8 s, then each finishes an item every 2 s, side by side (one a second in all): their
    first items (at 10 and 11 s) do not pace the ETA (``Progress.paces``), the others do."""
    paced = [12.0, 13.0, 14.0, 15.0, 16.0, 17.0, 18.0]
    for count in range(1, len(paced) + 1):
        done, now = 2 + count, paced[count - 1]
        left = 15 - done  # one item a second
        eta = progress.eta_seconds(done, 15, paced[:count], now)
        if count < progress.MIN_ETA_ITEMS:
            assert eta is None, (done, eta)  # none from one item's time
        else:
            assert eta == pytest.approx(left), (done, eta, left)  # the time left, not twice it (one worker's pace)


@pytest.mark.e2e
@pytest.mark.slow
def test_progress_under_xdist(tiny, pytester):
    """The lines of a run on two workers: one per item, the ETA once items pace it, and a long-running item."""
    pytester.makeconftest(SLOW_CONFTEST)
    # 15 items asking their answers while they run (no generation ahead: 3.1's slow answer is then asked while its
    # own item runs), on two workers
    result = tiny(
        "-n",
        "2",
        "-v",
        "--bench-set=overlap=false",
        "--bench-max-connections=2",
        "--bench-set=progress_interval=0",
        "--bench-attempts=3",
    )
    out = result.stdout.str()
    assert result.ret == 0, out[-3000:]
    lines = [(int(done), eta) for done, _, eta in TIMED.findall(out)]
    # a line per finished item, counting up (the heartbeat's, while an item runs long, repeat a count, 0 included)
    counts = [done for done, _ in lines]
    assert sorted(set(counts) | {0}) == list(range(16)) and counts == sorted(counts), out[-3000:]
    etas = [done for done, eta in lines if eta]
    assert etas and all(done >= progress.MIN_ETA_ITEMS for done in etas), lines  # none from one item's time
    # under -v each progress line is a line of its own beside xdist's outcome lines
    shown = [line for line in out.splitlines() if "/15 done" in line]
    assert len(shown) == len(lines) and all(line.startswith("agentbench: ") for line in shown), shown
    assert all(line.rstrip().endswith("cache hits") for line in shown), shown
    # the controller learnt the total from the workers and the start of 3.1 from its logstart
    assert re.search(r"agentbench: 3\.1(\[\w+\])? running \d+ s", out), out[-3000:]
    finished = out.split("agentbench: 15/15 done")[1].split("\n")
    assert "running" not in finished[1]  # a finished item is no longer listed


@pytest.mark.e2e
@pytest.mark.slow
def test_oracle_prints_no_model_counters(bench):
    result = bench(
        "--bench=scicode",
        "--bench-split=validation",
        "--model=oracle",
        "--bench-ids=1.1",
        "--bench-set=progress_interval=0",
    )
    out = result.stdout.str()
    assert re.search(r"agentbench: 1/1 done \(1 \w+\) · elapsed [^·]+ s$", out, re.M), out[-2000:]
    assert "model calls" not in out and "tokens" not in out


@pytest.mark.e2e
@pytest.mark.slow
def test_no_terminal_prints_nothing(tiny):
    result = tiny("-p", "no:terminal", "--bench-set=progress_interval=0")
    assert not [line for line in result.outlines if "agentbench" in line]


def test_texts():
    assert (
        progress.running_line(
            {"scicode/51::51.4": 0.0, "scicode/1::1.1": 95.0, "core-bench/capsule-7": 60.0}, 120.0, 30.0
        )
        == "agentbench: 51.4 running 120 s, capsule-7 running 60 s"
    )
    assert progress.running_line({"scicode/1::1.1": 100.0}, 120.0, 30.0) is None
    # a replay: every call answered by the cache, none reached the endpoint
    assert (
        progress.usage_text({"model_calls": 6, "cache_hits": 6, "tokens": 90, "tool_calls": 0})
        == "0 model calls, 90 tokens, 6 cache hits"
    )
    # the items left at the rate of those finished since the first one
    # the newer half of the paced items (2 of 5) came in the 8 s since the one before: 4 s each, 6 left take 24 s
    assert progress.eta_seconds(4, 10, [0.0, 0.1, 4.0, 8.0, 12.0], 12.0) == pytest.approx(24.0)
    assert progress.eta_seconds(4, 10, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0], 5.0) == pytest.approx(6.0)  # 1 s each
    assert progress.eta_seconds(6, 10, [1.0, 2.0, 3.0, 4.0], 5.0) is None  # too few finished to pace the rest
    assert progress.eta_seconds(10, 10, [float(i) for i in range(9)], 10.0) is None
    assert progress.duration_text(125) == "2 min 05 s"
