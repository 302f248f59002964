"""In every process that runs items: attach each record to its report and append it to disk.

A record is appended (and fsynced) before the next item starts, so a killed run loses no finished
record; plugins may add fields first through the ``pytest_agentbench_record`` hook.
"""
from __future__ import annotations

import pytest

from ..core import records as rec
from .collect import BenchItem
from .run import RECORD, BenchState, Streak, base_record


class RecordWriter:
    def __init__(self, config: pytest.Config, state: BenchState) -> None:
        self.config = config
        self.state = state
        self.streak = Streak(state.options.max_consecutive_errors)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        if not isinstance(item, BenchItem):
            return report
        state = self.state
        record = item.stash.get(RECORD, None)
        if call.when == "call" and record is None:
            record = {**base_record(item.sample, state), "status": "error", "message": "item ran without a record"}
        if call.when == "setup" and not report.passed:
            # A fixture failed (an unreachable model, an environment that did not start): still a record.
            status = "skipped" if report.skipped else "error"
            record = {**base_record(item.sample, state), "status": status, "message": short_reason(report),
                      "duration": 0.0}
        if call.when == "setup" and report.skipped and item.sample.key in state.resumed:
            record = dict(state.resumed[item.sample.key])  # a skip marker fired: report the old record
        if record is not None and (call.when == "call" or not report.passed):
            resumed = rec.record_key(record) in state.resumed  # a resumed record is already in the file
            if not resumed:
                self.config.hook.pytest_agentbench_record(record=record, item=item)
            report.user_properties.append((rec.RECORD_PROPERTY, record))
            if not resumed:
                rec.append_record(state.records_path, record)
                stop = self.streak.add(record)
                if stop and not item.session.shouldstop:
                    item.session.shouldstop = stop  # as -x: the session ends after this item, reports complete
            # junitxml writes the teardown report's properties: the item's list is copied into it.
            item.user_properties.extend(rec.junit_properties(record))
            item.stash[RECORD] = None  # written once
        return report


def short_reason(report: pytest.TestReport) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    text = report.longreprtext.strip().splitlines()
    return text[-1] if text else "setup failed"
