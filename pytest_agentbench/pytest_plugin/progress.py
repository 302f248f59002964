"""Live progress beside pytest's own: done/total, statuses so far, elapsed and ETA, model usage, and the
items that have been running for a while (``51.4 running 120 s``); also the run header.

The same under xdist as without it: the controller counts the records that arrive in the reports, learns
the total from the workers' collections and knows an item started through ``pytest_runtest_logstart``.
A line is shown after a finished item at most every ``--bench-set progress_interval`` seconds, and, while
an item runs for more than ``LONG_RUNNING`` seconds, by a heartbeat thread. Lines go through the terminal
reporter (nothing is printed with ``-p no:terminal``) and are placed so pytest's own lines are not cut:
in -q and default mode a line is started after the current dots (which then continue on the next line);
in -v mode the text goes on a line of its own and pytest writes the item's location again before its
outcome.
"""

from __future__ import annotations

import textwrap
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from ..core import records as rec
from ..core.text import printable
from ..models.options import ORACLE
from .concurrency import IN_FLIGHT_PROPERTY
from .distribution.handshake import Role, on_worker_collection, role_of
from .run import STATE

counts_text = rec.counts_text  # the formats every report shares (core/records.py)
usage_text = rec.usage_text

LONG_RUNNING = 30.0  # seconds: an item running longer is listed with its age
HEADER_WIDTH = 100  # the run header is wrapped to lines of about this many characters
# settings shown on the header's first lines (the rest go in the wrapped block)
HEADER_FIRST = ("benchmark", "dataset", "split", "model", "run_id")
HEADER_HIDDEN = ("notes", "data_hashes", "isolation", "comparability", "child_env")


# ---- text (pure) --------------------------------------------------------------------------------
def duration_text(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


MIN_ETA_ITEMS = 5  # items pacing the ETA before it is shown: the first ones can be a burst of answers generated ahead


def eta_seconds(done: int, total: int | None, finishes: list[float], now: float) -> float | None:
    """Time left at the run's recent throughput: the items left at the rate of the newer half of ``finishes``
    (when each item that paces the ETA finished: no worker's first item, which carries its set-up, nor a skipped
    item or reused record), over the time from the finish before them to ``now``. A rate, not items' durations,
    since workers run side by side and a worker that generates several chains ahead finishes items in bursts
    of near-zero time; the newer half only, since the first items can be such a burst, of answers generated
    during the workers' set-up. None until ``MIN_ETA_ITEMS`` items pace it."""
    if not total or done >= total or len(finishes) < MIN_ETA_ITEMS:
        return None
    newer = len(finishes) // 2
    window = now - finishes[-newer - 1]
    return (total - done) * window / newer if window > 0 else None


def status_line(
    done: int,
    total: int | None,
    counts: Mapping[str, int],
    elapsed: float,
    usage: Mapping[str, float] | None,
    eta: float | None = None,
    in_flight: int | None = None,
) -> str:
    """``agentbench: 3/5 done (2 pass, 1 fail) · elapsed 12 s · ETA 8 s · 4 model calls, ... · 3 calls in
    flight``."""
    parts = [f"{done}/{total} done" if total else f"{done} done"]
    if counts:
        parts[0] += f" ({counts_text(counts)})"
    parts.append(f"elapsed {duration_text(elapsed)}")
    if eta is not None:
        parts.append(f"ETA {duration_text(eta)}")
    if usage is not None:
        parts.append(usage_text(usage))
    if in_flight is not None:
        parts.append(f"{in_flight} call{'' if in_flight == 1 else 's'} in flight")
    return "agentbench: " + " · ".join(parts)


def item_label(nodeid: str) -> str:
    """The sample id of a benchmark item's node id (``scicode/51::51.4`` -> ``51.4``)."""
    if "::" in nodeid:
        return nodeid.rsplit("::", 1)[1]
    return nodeid.split("/", 1)[1] if "/" in nodeid else nodeid


def running_line(started: Mapping[str, float], now: float, threshold: float | None = None) -> str | None:
    """``agentbench: 51.4 running 120 s, 77.3 running 45 s``: the items running longer than ``threshold``,
    oldest first; None when there are none."""
    threshold = LONG_RUNNING if threshold is None else threshold
    long = sorted((start, nodeid) for nodeid, start in started.items() if now - start > threshold)
    if not long:
        return None
    return "agentbench: " + ", ".join(f"{item_label(n)} running {now - s:.0f} s" for s, n in long)


def header_lines(
    settings: Mapping[str, Any], run_dir: Path | str, notes: Iterable[str] = (), width: int = HEADER_WIDTH
) -> list[str]:
    """The run header: a short block instead of one long line.

    agentbench: scicode, split validation, model gpt-x, run 20261201T043000Z-ab12
    agentbench: reports in reports/scicode/gpt-x/20261201T043000Z-ab12
    agentbench: settings: mode=..., background=True, ...   (wrapped, continued with an indent)
    agentbench: note: ...
    """
    first = [str(settings.get("benchmark", "?"))]
    if settings.get("dataset"):  # a benchmark's data other than its default (SciCode-Verified)
        first.append(f"dataset: {settings['dataset']}")
    for key, label in (("split", "split"), ("model", "model"), ("run_id", "run")):
        if settings.get(key) is not None:
            first.append(f"{label} {settings[key]}")
    lines = ["agentbench: " + ", ".join(first), f"agentbench: reports in {run_dir}"]
    rest = [
        f"{k}={v}"
        for k, v in settings.items()
        if v is not None and v != "" and k not in HEADER_FIRST and k not in HEADER_HIDDEN
    ]
    line = "agentbench: settings:"
    for part in rest:
        if len(line) + len(part) + 2 > width and not line.endswith(":"):
            lines.append(line + ",")
            line = "agentbench:  "
        line += ("" if line.endswith(("settings:", "  ")) else ",") + " " + part
    if rest:
        lines.append(line)
    if settings.get("isolation"):  # a sentence, not a key=value: its own wrapped lines
        lines += textwrap.wrap(
            str(settings["isolation"]),
            width,
            initial_indent="agentbench: isolation: ",
            subsequent_indent="agentbench:   ",
        )
    lines += [f"agentbench: note: {note}" for note in notes]
    return lines


# ---- the live display (controller) ---------------------------------------------------------------
class Progress:
    def __init__(self, config: pytest.Config, interval: float) -> None:
        self.config = config
        self.interval = interval
        state = config.stash.get(STATE, None)
        # the oracle makes no model calls: its counters would always be zero
        self.show_usage = state is None or state.settings.get("model") != ORACLE
        self.started = time.monotonic()
        self.last_shown = self.started
        self.finishes: list[float] = []  # when each item that paces the ETA finished (monotonic)
        self.workers: set[str] = set()  # the workers whose first record came (its time is the worker's set-up)
        self.done = 0
        self.total: int | None = None
        self.counts: dict[str, int] = {}
        self.totals = rec.usage_totals([])
        self.running: dict[str, float] = {}  # node id -> when it started (monotonic)
        self.state = state
        self.in_flight: dict[str, int] = {}  # worker id ("" without xdist) -> its calls in flight, at its last item
        self.lock = threading.RLock()
        self.stop = threading.Event()
        self.heartbeat: threading.Thread | None = None
        on_worker_collection(config, self.worker_collected)

    def worker_collected(self, ids: list[str]) -> None:
        """Under xdist the controller collects nothing itself: the total comes from the workers' collections."""
        if ids and self.total is None:
            self.total = len(ids)

    # ---- pytest hooks ----
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if session.items:
            self.total = len(session.items)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> None:
        if self.heartbeat is None and self.interval >= 0:
            self.heartbeat = threading.Thread(target=self.beat, name="agentbench-progress", daemon=True)
            self.heartbeat.start()

    def pytest_sessionfinish(self) -> None:
        self.stop.set()
        if self.heartbeat is not None:
            self.heartbeat.join(timeout=2)

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        with self.lock:
            self.running[nodeid] = time.monotonic()

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        with self.lock:
            self.running.pop(nodeid, None)

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, value in report.user_properties:
            if name == IN_FLIGHT_PROPERTY and isinstance(value, list) and len(value) == 2:
                with self.lock:
                    self.in_flight[str(value[0])] = int(value[1])
            if name == rec.RECORD_PROPERTY and isinstance(value, dict):
                with self.lock:
                    self.running.pop(report.nodeid, None)  # finished, whatever comes after its record
                    if self.paces(value):
                        self.finishes.append(time.monotonic())
                    self.done += 1
                    status = str(value.get("status", "error"))
                    self.counts[status] = self.counts.get(status, 0) + 1
                    for key, amount in rec.usage_of(value).items():
                        self.totals[key] = self.totals.get(key, 0) + amount
                self.maybe_show()

    def paces(self, record: Mapping[str, Any]) -> bool:
        """Whether this finished item's time paces the ETA: not a worker's first item, which carries the worker's
        set-up (its session fixtures: the model, the environment, SciCode's targets: 8 s against 0.3 s of an
        item), nor a skipped one or a resumed run's record reported again at once."""
        worker = str(record.get("worker", ""))
        first = worker not in self.workers
        self.workers.add(worker)
        state = self.config.stash.get(STATE, None)
        reused = state is not None and rec.record_key(record) in state.resumed
        return not first and not reused and record.get("status") != "skipped"

    # ---- display ----
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def lines(self, now: float) -> list[str]:
        with self.lock:
            out = [
                status_line(
                    self.done,
                    self.total,
                    self.counts,
                    now - self.started,
                    self.totals if self.show_usage else None,
                    eta_seconds(self.done, self.total, self.finishes, now),
                    self.calls_in_flight(),
                )
            ]
            running = running_line(self.running, now)
        return out + ([running] if running else [])

    def calls_in_flight(self) -> int | None:
        """This process's model requests in flight now, else the sum of what the workers' last reports said
        (None when no process has a model client that counts them)."""
        gate = self.state.gate if self.state is not None else None
        if gate is not None:
            return int(gate.in_flight)
        return sum(self.in_flight.values()) if self.in_flight else None

    def maybe_show(self) -> None:
        now = time.monotonic()
        last = self.total is not None and self.done >= self.total  # the final count is always shown
        if now - self.last_shown < self.interval and not last:
            return
        self.show(self.lines(now), now)

    def beat(self) -> None:
        """While an item runs past LONG_RUNNING, say so every interval (nothing finishes to trigger a line)."""
        period = max(self.interval, 1.0)
        while not self.stop.wait(min(period, LONG_RUNNING / 4 if LONG_RUNNING > 0 else period)):
            now = time.monotonic()
            with self.lock:
                long = any(now - start > LONG_RUNNING for start in self.running.values())
            if long and now - self.last_shown >= period:
                self.show(self.lines(now), now)

    def show(self, lines: list[str], now: float) -> None:
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        if terminal is None:  # -p no:terminal: nothing is printed
            return
        with self.lock:
            self.last_shown = now
            writer = terminal._tw
            text = "\n".join(printable(line, one_line=True) for line in lines)
            if self.config.get_verbosity() >= 1 and role_of(self.config) is not Role.CONTROLLER:
                # pytest ends this line itself, and writes the running item's location again before its outcome
                # (under xdist each outcome is a line of its own, after a newline only where pytest left one)
                writer.write("\n" + text, flush=True)
                terminal.currentfspath = None
            else:
                writer.write(("\n" if writer.width_of_current_line else "") + text + "\n", flush=True)
