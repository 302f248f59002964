"""Records, files and cache entries of a run: the controller (or the only process) is their only writer.

Which writer a process has follows from its role, decided once at configure time (distribution/handshake.py:
``hasattr(config, "workerinput")``, as pytest-xdist documents it and pytest-json-report does):

* ``ControllerWriter``, the only process or the xdist controller. An item run here has its record appended
  (and fsynced) before the next item starts, so a killed run loses no finished record; its files were written
  by the run's ``DirectoryFiles``. A report from a worker carries the record (``RECORD_PROPERTY``) and a
  delivery (``DELIVERY_PROPERTY``: the item's files and new model-cache entries, zlib-compressed): files are
  written under the run folder (paths checked: they come from another process), entries are put into this
  cache when absent, then the record is appended.
* ``WorkerWriter``, an xdist worker (local ``-n`` or a remote ``--tx``): writes nothing of the run. It attaches
  the record and the delivery to the item's report; over ``MAX_DELIVERY_BYTES`` (compressed) the files and
  entries stay behind and the record becomes an error that says so.

The only process counts model errors in a row (``Streak``) on the records of the items it runs and stops as
``-x`` does; under xdist the controller counts them across every worker (reporter.py) and hands out no more
work, so a failing endpoint stops the run after N errors in all, not N per worker. Plugins
may add fields to a record first through the ``pytest_agentbench_record`` hook. Both count what the fresh records
cost against ``--bench-max-cost`` (``RunBudget``): once it is spent, no further item of this process starts (its
protocol is skipped: no report, no record, so the summary reports it ``not run``). The controller counts every
record delivered to it too, and then hands out no more work (distribution/placement.py reads ``state.budget_stop``).

No item can end the run: whatever fails while its record is built (``record``), written (``write``) or handed to
the controller (``deliver``) makes that item's record an ``error`` naming the stage and the cause
(``run.error_record``), and the item's report a failure; the other items and the reports go on. Only a records
file that cannot be appended to (a full disk, a removed run folder) stops the run: exit 3 naming the file and
the last record written (no item's record could say so).
"""

from __future__ import annotations

import traceback
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from ..benchmarks.base import Benchmark
from ..core import records as rec
from ..core.errors import warn_about
from ..core.io import UnsafePath, write_under
from ..core.records import record_line
from ..models.cache import ResponseCache
from ..models.price import RunBudget
from .collect import BenchItem
from .provenance import session_command
from .run import RECORD, BenchState, Streak, base_record, error_record, owns, repair_data, where_ran

MAX_DELIVERY_BYTES = 64 * 2**20  # compressed files + cache entries one item may send to the controller
MAX_UNPACKED_BYTES = 1024 * 2**20  # what one file or entry may expand to on the controller (a zlib bomb is refused)


class RecordWriter:
    """What both roles do in the process that runs an item: build its record and attach it to the report."""

    def __init__(self, config: pytest.Config, state: BenchState) -> None:
        self.config = config
        self.state = state
        self.streak = Streak(state.options.max_consecutive_errors)
        self.budget = RunBudget(state.options.get("max_cost"))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        """Once the run budget is spent, a benchmark item does not start: it gets no report and no record, so it
        is reported not run (a finished item of a resumed run is still reported: it costs nothing)."""
        if not isinstance(item, BenchItem) or not (self.budget.exhausted or self.state.budget_stop):
            return None
        if item.sample.key in self.state.resumed:
            return None
        self.note_budget()
        return True

    def count_cost(self, record: rec.Record) -> None:
        self.budget.add(record)
        if self.budget.exhausted:
            self.note_budget()

    def note_budget(self) -> None:
        if self.state.budget_stop is None:
            self.state.budget_stop = self.budget.text()
            self.state.notes.append(self.state.budget_stop)
        if self.state.gate is not None:  # no new model request either, from any chain generating ahead
            self.state.gate.stop(self.state.budget_stop)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        if not isinstance(item, BenchItem) or item.state is not self.state:  # another run's item: its writer's
            return report
        try:
            self.finish(item, call, report)
        except pytest.exit.Exception:  # the records file cannot be appended to: the run stops (it is an Exception)
            raise
        except Exception as exc:  # a bug here must not end the session (an INTERNALERROR): the item's error
            self.last_resort(item, report, exc)
        return report

    def finish(self, item: BenchItem, call: pytest.CallInfo, report: pytest.TestReport) -> None:
        """Build the item's record for this phase (when it has one), write or hand it on, attach it to the report."""
        record = record_of(item, call, report, self.state)
        if record is None or not (call.when == "call" or not report.passed):
            return
        fresh = record.key not in self.state.resumed  # a resumed record is already in the file
        if fresh:  # the hook changes the JSON object in place: an error record keeps the identity it left
            data = record.to_json()
            record = self.guarded("record", item.nodeid, report, data, lambda d: self.build(item, d))
        record = self.deliver(item, report, record, fresh)
        self.attach(item, report, record, fresh)

    def build(self, item: BenchItem, data: rec.RecordData) -> rec.Record:
        """The finished record: plugins' fields added, every string valid UTF-8, plain JSON data. The public
        hook gets the record's JSON object, ``data``, to change in place (its contract); what it left is
        repaired (a plugin's text), made plain as the file will hold it, and made the ``Record`` once."""
        self.config.hook.pytest_agentbench_record(record=data, item=item)
        return rec.Record.from_json(rec.plain(repair_data(data)))

    def attach(self, item: BenchItem, report: pytest.TestReport, record: rec.Record, fresh: bool) -> None:
        report.user_properties.append((rec.RECORD_PROPERTY, record.to_json()))  # plain data: xdist carries it
        if fresh:
            self.count_cost(record)
            stop = None if self.state.is_worker else self.streak.add(record)  # a worker's row is the controller's
            if stop and not item.session.shouldstop:
                item.session.shouldstop = stop  # as -x: the session ends after this item, reports complete
        # junitxml writes the teardown report's properties: the item's list is copied into it.
        item.user_properties.extend(rec.junit_properties(record))
        item.stash[RECORD] = None  # written once (the record stays in the report)

    def guarded(self, stage: str, nodeid: str, report: pytest.TestReport, record: rec.RecordLike, step) -> rec.Record:
        """``step(record)``; when it raises, the item's error record for ``stage`` (and a failed report)."""
        try:
            return step(record)
        except pytest.exit.Exception:
            raise
        except Exception as exc:
            failed = error_record(record, stage, exc)
            fail_report(report, failed)
            return failed

    def last_resort(self, item: BenchItem, report: pytest.TestReport, exc: Exception) -> None:
        """An unexpected failure of ``finish``: the item still gets an error record when one can be made."""
        warn_about(f"agentbench: {item.nodeid}: {''.join(traceback.format_exception(exc, limit=5))}", item.nodeid)
        if report.when != "call" and report.passed:
            return
        try:
            identity = {**base_record(item.sample, self.state), **where_ran()}
            record = error_record(identity, "record", exc)
            fail_report(report, record)
            fresh = record.key not in self.state.resumed
            self.attach(item, report, self.deliver(item, report, record, fresh), fresh)
        except pytest.exit.Exception:
            raise
        except Exception as again:  # nothing more can be done for this item; the run goes on
            warn_about(f"agentbench: {item.nodeid}: no record could be made: {again!r}", item.nodeid)

    def deliver(self, item: BenchItem, report: pytest.TestReport, record: rec.Record, fresh: bool) -> rec.Record:
        """Make the record (and the item's files) durable, or hand them on; returns the record to report."""
        raise NotImplementedError


def revised(benchmark: Benchmark, record: rec.Record) -> rec.Record:
    """The record as this run's settings derive it on the controller (CORE-Bench: ``--bench-review`` applied beside
    the automatic verdicts); a failure there keeps the record as it came, with a warning."""
    try:
        return rec.as_record(benchmark.revise_record(record))
    except Exception as exc:  # a bug in a benchmark's revision must not cost the item its record
        warn_about(f"agentbench: {record.key}: record not revised: {type(exc).__name__}: {exc}", record.key)
        return record


def fail_report(report: Any, record: rec.Record) -> None:
    """Show an item whose record became an error as failed, with the record's message."""
    report.outcome = "failed"
    report.longrepr = f"error: {record['message']}"


class ControllerWriter(RecordWriter):
    """The only process or the xdist controller: the one writer of the records file, the run's files and the
    cache entries that come from workers."""

    def __init__(self, config: pytest.Config, state: BenchState) -> None:
        super().__init__(config, state)
        self.cache: ResponseCache | None = None  # this process's response cache, opened for the first entries
        self.last_written: str | None = None  # key of the last record this run appended

    def deliver(self, item: BenchItem, report: pytest.TestReport, record: rec.Record, fresh: bool) -> rec.Record:
        if fresh:  # an item run here: its files are already in the run folder (DirectoryFiles)
            record = self.write(item.nodeid, report, record)
        return record

    def write(self, nodeid: str, report: Any, record: rec.Record) -> rec.Record:
        """Append the record; one that cannot be written becomes the item's error record (written instead)."""
        record = revised(self.state.benchmark, record)
        try:
            line = record_line(record)
        except Exception as exc:
            record = error_record(record, "write", exc)
            fail_report(report, record)
            line = record_line(record)
        self.append(line, record)
        return record

    def append(self, line: bytes, record: rec.Record) -> None:
        """Append one line to the records file; when that fails no item's record can say so: the run stops
        (exit 3) naming the file, the cause and the last record written."""
        path = self.state.records_path
        try:
            if self.last_written is None:
                path.parent.mkdir(parents=True, exist_ok=True)  # the run folder, at the first record
            rec.append_line(path, line)
        except OSError as exc:
            last = (
                f"the last record written is {self.last_written}"
                if self.last_written
                else "no record of this run was written"
            )
            pytest.exit(
                f"agentbench: cannot append to the records file {path} ({exc}); {last}; the record of "
                f"{record.key} and those after it are not written. Free space or restore the "
                f"folder, then `{session_command('resume', self.state.run_dir)}` runs the rest",
                returncode=3,
            )
        self.last_written = record.key

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """A worker's report: write its files and cache entries, then append its record (the record last: a
        record in the file means its files are there); the delivery is dropped from the report afterwards."""
        # what another process sent: checked below before it is trusted as a record or a delivery
        delivery: Any = next((v for k, v in report.user_properties if k == rec.DELIVERY_PROPERTY), None)
        if delivery is None:
            return
        record: Any = next((v for k, v in report.user_properties if k == rec.RECORD_PROPERTY), None)
        if not owns(self.state, report.nodeid):  # a session of several runs: another run's writer stores it
            return
        report.user_properties = [(k, v) for k, v in report.user_properties if k != rec.DELIVERY_PROPERTY]
        try:
            problems = store_delivery(self.state.run_dir, self.controller_cache(delivery), delivery)
        except Exception as exc:  # a damaged delivery: the item's files are missing, its record says why
            problems = [f"could not store the worker's delivery: {type(exc).__name__}: {exc}"]
        if not isinstance(record, dict):
            return
        if problems:
            for problem in problems:
                warn_about(f"agentbench: {rec.record_key(record)}: {problem}", self.state.run_dir)
            record["delivery_errors"] = problems  # in place: the report carries them too
        if record.get("worker") and record.get("host"):
            # a remote host's probe named it first, with its --tx address: that stays the fuller name
            self.state.worker_hosts.setdefault(str(record["worker"]), str(record["host"]))
        if delivery.get("append", True) and rec.record_key(record) not in self.state.resumed:
            received = rec.Record.from_json(record)
            self.count_cost(received)  # what every worker spent: past the budget, no more work goes out
            written = self.write(report.nodeid, report, received)
            if written is not received:  # it became the item's error record: the report carries that one
                report.user_properties = [
                    (k, written.to_json() if k == rec.RECORD_PROPERTY else v) for k, v in report.user_properties
                ]

    def controller_cache(self, delivery: Mapping[str, Any]) -> ResponseCache | None:
        if not delivery.get("cache"):
            return None
        if self.cache is None:
            opts = self.state.options
            self.cache = ResponseCache(opts.cache_dir, opts.cache)
        return self.cache


class WorkerWriter(RecordWriter):
    """An xdist worker: the record, the item's files and its new cache entries travel in the report."""

    def deliver(self, item: BenchItem, report: pytest.TestReport, record: rec.Record, fresh: bool) -> rec.Record:
        files = self.state.files.take()
        entries = self.state.journal.take() if self.state.journal is not None else {}
        try:
            delivery = pack_delivery(files, entries, append=fresh)
            if delivery["bytes"] > MAX_DELIVERY_BYTES:
                record = over_cap(record, delivery["bytes"], files)
                delivery = pack_delivery({}, {}, append=fresh)
                fail_report(report, record)
            check_sendable(record, delivery)
        except Exception as exc:  # the files and entries stay behind; the record says why
            record = error_record(record, "deliver", exc)
            fail_report(report, record)
            delivery = pack_delivery({}, {}, append=fresh)
        report.user_properties.append((rec.DELIVERY_PROPERTY, delivery))
        return record


def check_sendable(record: rec.Record, delivery: dict[str, Any]) -> None:
    """Raise unless execnet can carry the record and the delivery to the controller: a value it refuses
    (text that is not UTF-8, a type it does not know) would otherwise stop the worker, and with it the run."""
    import execnet  # why: only an xdist worker delivers, and xdist brings execnet

    execnet.dumps([record.to_json(), delivery])


def record_of(
    item: BenchItem, call: pytest.CallInfo, report: pytest.TestReport, state: BenchState
) -> rec.Record | None:
    """The item's record for this phase of its run, or None (a phase that adds none)."""
    record = item.stash.get(RECORD, None)
    if call.when == "call" and record is None:
        fields = {**base_record(item.sample, state), "status": "error", "message": "item ran without a record"}
        record = rec.Record.from_json({**fields, **where_ran()})
    if call.when == "setup" and not report.passed:
        # A fixture failed (an unreachable model, an environment that did not start): still a record.
        status = "skipped" if report.skipped else "error"
        record = rec.Record.from_json(
            {
                **base_record(item.sample, state),
                "status": status,
                "message": short_reason(report),
                "duration": 0.0,
                **where_ran(),
            }
        )
    if call.when == "setup" and report.skipped and item.sample.key in state.resumed:
        record = state.resumed[item.sample.key]  # a skip marker fired: report the old record
    return record


# ---- the delivery: plain data execnet can carry ---------------------------------------------------------
def pack_delivery(files: Mapping[str, bytes], entries: Mapping[str, str], *, append: bool = True) -> dict[str, Any]:
    """``{"append", "files": [[relpath, zlib bytes], ...], "cache": [[key, zlib bytes], ...], "bytes"}``."""
    packed_files = [[path, zlib.compress(data, 6)] for path, data in sorted(files.items())]
    packed_cache = [[key, zlib.compress(text.encode("utf-8"), 6)] for key, text in sorted(entries.items())]
    size = sum(len(blob) for _, blob in packed_files) + sum(len(blob) for _, blob in packed_cache)
    return {"append": append, "files": packed_files, "cache": packed_cache, "bytes": size}


def size_text(size: int) -> str:
    return f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size} bytes"


def over_cap(record: rec.Record, size: int, files: Mapping[str, bytes]) -> rec.Record:
    """The record of an item whose delivery is over the cap: an error that says what was not kept and why."""
    names = ", ".join(sorted(files)[:5]) + (" ..." if len(files) > 5 else "")
    message = (
        f"agentbench: this item's files and model responses are {size_text(size)} compressed, over the "
        f"{size_text(MAX_DELIVERY_BYTES)} an xdist worker may send to the controller; they were not kept "
        f"({names or 'model responses only'}); run this item without -n/--tx to keep them"
    )
    kept = {k: v for k, v in record.items() if k != "trajectory"}  # it names a file that is not written
    return rec.Record.from_json(
        {**kept, "status": "error", "message": message, "status_before_cap": record.get("status")}
    )


def unpack(blob: Any, what: str) -> bytes:
    """A zlib blob from a worker, refused when it expands past MAX_UNPACKED_BYTES."""
    inflater = zlib.decompressobj()
    data = inflater.decompress(bytes(blob), MAX_UNPACKED_BYTES)
    if inflater.unconsumed_tail or not inflater.eof:
        raise ValueError(f"{what}: expands past {MAX_UNPACKED_BYTES // 2**20} MiB or is not whole")
    return data


def store_delivery(run_dir: Path, cache: ResponseCache | None, delivery: Mapping[str, Any]) -> list[str]:
    """Controller side: write a worker's files under ``run_dir`` and put its cache entries into ``cache`` (when
    absent). Everything here came from another process: a path that would leave the run folder, a bad key or a
    damaged blob is not written; the problems are returned (one line each)."""
    problems: list[str] = []
    for relpath, blob in delivery.get("files") or ():
        try:
            write_under(Path(run_dir), str(relpath), unpack(blob, f"run file {relpath!r}"))
        except (UnsafePath, ValueError, zlib.error) as exc:
            problems.append(f"refused a file from the worker: {exc}")
        except OSError as exc:
            problems.append(f"could not write run file {relpath!r}: {exc}")
    for key, blob in delivery.get("cache") or ():
        if cache is None:
            break
        try:
            cache.add_entry(str(key), unpack(blob, f"cache entry {str(key)[:16]}").decode("utf-8"))
        except (ValueError, zlib.error) as exc:
            problems.append(f"refused a cache entry from the worker: {exc}")
        except OSError as exc:
            problems.append(f"could not write cache entry {str(key)[:16]}...: {exc}")
    return problems


def short_reason(report: pytest.TestReport) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    text = report.longreprtext.strip().splitlines()
    return text[-1] if text else "setup failed"
