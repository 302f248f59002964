"""Controller-side reporting: gather records, print the benchmark's metrics, write the run's files.

At the end of the session (see ``report/summary.py`` for the pure steps): the summary; the verdict
(comparison with the baseline, the gates and, when any gate is given, the exit code they decide);
the ``pytest_agentbench_summary`` hook; then the picture, summary.json, summary.md, the baseline
when asked to update it, and GITHUB_STEP_SUMMARY when CI sets it.

The controller knows the session's selection (its own collection, or under xdist the workers'
collections, which already had ``-k``/``-m``/``--deselect`` applied): a selected item without a record is
reported as not run (``report/summary.py``), and the terminal prints the command that resumes the run.
"""

from __future__ import annotations

import os
import shlex
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from ..core import records as rec
from ..core.records import usage_text
from ..core.text import printable
from ..core.types import Sample
from ..models.options import ORACLE
from ..report.attempts import counts_line
from ..report.caveats import resume_command as resume_of
from ..report.caveats import run_warnings
from ..report.compare import render_text
from ..report.comparison import (
    MODELS_FOLDER,
    ModelRun,
    compared_with_first,
    comparison_for_run,
    model_row,
    write_models_reports,
)
from ..report.comparison import render_text as render_models
from ..report.cost import terminal_lines as cost_terminal_lines
from ..report.html import write_html
from ..report.ledger import Ledger, RunPlan
from ..report.resume import write_settings_once
from ..report.summary import (
    Summary,
    Verdict,
    Written,
    build_summary,
    judge,
    judge_without_items,
    write_reports,
)
from .checks import selection_checks
from .collect import BenchItem, item_entries
from .distribution.handshake import on_worker_collection
from .progress import status_line
from .provenance import command_line, run_info
from .replaycheck import stop_replay_without_cache
from .run import BenchState, Streak, base_record, owns
from .selfdescribe import settings_file_content


class Reporter:
    def __init__(self, config: pytest.Config, state: BenchState) -> None:
        self.config = config
        self.state = state
        self.ledger = Ledger()  # the records this run got
        self.plan = RunPlan()  # the session's benchmark items, once collected (what it meant to run)
        self.other_failures = 0  # failed non-benchmark tests collected in the same session
        self.started = time.monotonic()
        self.started_at = datetime.now(timezone.utc)
        self._summary: Summary | None = None
        self.verdict: Verdict | None = None
        self.written: Written | None = None
        self.html: Path | None = None  # report.html, once written
        self.streak = Streak(state.options.max_consecutive_errors)  # one row for the run, every worker's records
        self.streak_workers: set[str] = set()  # the workers whose records are in the current row
        self.session_exit: int | None = None  # several runs: the exit status before the gates (RunsReport)
        self.finished = lambda session: None  # several runs: RunsReport's call once this run is judged
        on_worker_collection(config, self.worker_collected)

    def worker_collected(self, ids: list[str]) -> None:
        """Under xdist the controller collects nothing itself: the selection is a worker's collection."""
        if self.plan.known:
            return
        entries = item_entries(self.state)
        self.select([entries[nodeid] for nodeid in ids if nodeid in entries])

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """The selection, after -k, -m and --deselect (without xdist: this process collected)."""
        samples = [item.sample for item in session.items if isinstance(item, BenchItem) and item.state is self.state]
        if samples:
            self.select(samples, collected_here=True)

    def select(self, samples: list[Sample], collected_here: bool = False) -> None:
        if self.config.option.collectonly:  # listing the items runs none: nothing is missing
            return
        selected: list[rec.Record] = []
        for sample in samples:
            item = {**base_record(sample, self.state), **not_run_fields(self.state, sample)}
            if sample.skip_reason:  # a prefilled step: a skipped record whether or not the session reached it
                item.update(status="skipped", message=sample.skip_reason)
            selected.append(rec.Record.from_json(item))  # no status yet, unless skipped (``absent`` says so)
        # the benchmark's data and image, before any item and before the plan: a refused run shows no results banner
        selection_checks(self.config, self.state, samples, collected_here)
        self.plan.select(selected)
        stop_replay_without_cache(self.config, self.state, samples)  # before any item runs

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        found = False
        for name, value in report.user_properties:
            if name == rec.RECORD_PROPERTY and isinstance(value, dict):
                found = True
                if not owns(self.state, report.nodeid):  # another run's record (a session of several runs)
                    continue
                if not self.ledger:  # the run folder exists from its first record on
                    write_settings_once(
                        self.state.run_dir,
                        settings_file_content(self.state.settings, self.config, self.state.definition),
                    )
                self.count_errors(self.ledger.add(value))
        if report.failed and not found and not is_bench_node(report.nodeid, self.state):
            self.other_failures += 1

    def count_errors(self, record: rec.Record) -> None:
        """The run's model-error row, over every worker's records in the order they arrive: at the limit the
        stop is noted in the reports and no more work is handed out (xdist's workers finish the items they hold;
        the rest is reported not run). The only process stops itself (writer.py) on the same count."""
        if rec.record_key(record) in self.state.resumed:
            return
        worker = str(record.get("worker", "main"))
        stop = self.streak.add(record)
        if not self.streak.count:
            self.streak_workers = set()
        elif record.get("status") == Streak.STATUS:
            self.streak_workers = self.streak_workers | {worker}
        if not stop or self.state.error_stop:
            return
        workers = sorted(self.streak_workers - {"main"})
        where = (
            f" (across workers {', '.join(workers)})" if len(workers) > 1 else f" (on {workers[0]})" if workers else ""
        )
        self.state.error_stop = stop.removeprefix("agentbench: ").replace("; last:", f"{where}; last:", 1)
        self.state.notes.append(self.state.error_stop)

    def summary(self) -> Summary:
        if self._summary is None:
            self._summary = build_summary(
                self.ledger,
                self.state.benchmark,
                self.state.settings,
                self.plan.items,
                reused=self.state.resumed,
                unscored=self.state.unscored,
            )
            mended = [self._summary[k] for k in ("incomplete", "errors") if self._summary.get(k)]
            for part in mended:  # --bench-resume runs the items not run and those that ended in an error again
                part["resume"] = resume_command(
                    self.config.invocation_params.args, self.state.run_dir, self.config.invocation_params.dir
                )
        return self._summary

    # ---- end of session ----------------------------------------------------------------------
    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        state = self.state
        if not self.ledger:
            # listing items (--collect-only) runs none by design: the gates judge runs, not listings; nor are the
            # gates of a run none of whose items was selected (-k picked other runs of the run file)
            listing = self.config.option.collectonly or (state.name is not None and not self.plan)
            self.verdict = judge_without_items(None if listing else state.gates, self.exit_before(session))
            if self.plan and not listing and self.verdict.exit_code == 0 and not state.gates.allow_incomplete:
                self.verdict.exit_code = 1  # items were selected and none ran: never a passing run
            session.exitstatus = self.verdict.exit_code
            self.finished(session)
            return
        self.ledger.reuse(state.resumed.values())  # a resumed run's summary never narrows to what ran now
        summary = self.summary()
        params = self.config.invocation_params
        summary["run"] = run_info(self.started_at, datetime.now(timezone.utc), params.args, Path(params.dir))
        self.verdict = judge(summary, state.gates, state.baseline, self.exit_before(session), self.other_failures)
        session.exitstatus = self.verdict.exit_code
        self.config.hook.pytest_agentbench_summary(summary=summary.data)
        self.written = write_reports(
            summary,
            self.verdict,
            state.run_dir,
            gates=state.gates,
            baseline=state.baseline,
            notes=state.notes,
            step_summary=os.environ.get("GITHUB_STEP_SUMMARY"),
        )
        records = [*self.ledger, *summary.not_run]
        sections = []
        if self.verdict.comparison is not None:  # metrics side by side, gates, flipped items linked to both runs
            sections.append(
                comparison_for_run(
                    self.verdict.comparison,
                    state.run_dir,
                    records,
                    alpha=self.verdict.alpha,
                    gates=state.gates,
                    gate_results=self.verdict.gate_results,
                )
            )
        self.html = write_html(state.run_dir, summary.to_json(), records, notes=state.notes, sections=sections)
        self.finished(session)

    def usage_lines(self, terminalreporter, summary: Summary) -> None:
        """The status line with this session's usage; a resumed run's reused records' usage on its own line."""
        whole = summary["usage"]
        usage = whole.get("this_session", whole) if self.state.settings.get("model") != ORACLE else None
        terminalreporter.write_line(
            status_line(len(self.ledger), None, summary["counts"], time.monotonic() - self.started, usage)
        )
        if usage is not None and "reused" in whole:
            reused = whole["reused"]
            terminalreporter.write_line(
                f"agentbench: {reused['items']:g} records reused from the earlier session, their usage "
                f"(not counted above): {usage_text(reused)}"
            )

    def exit_before(self, session: pytest.Session) -> int:
        """The session's exit status before any gate judged it (several models: each model's gates judge that).
        A run stopped on model errors in a row is interrupted (2), as -x makes it in a single process."""
        status = self.session_exit if self.session_exit is not None else session.exitstatus
        if self.state.error_stop and status in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
            return pytest.ExitCode.INTERRUPTED
        return status

    def pytest_terminal_summary(self, terminalreporter, exitstatus: int, config: pytest.Config) -> None:
        verdict = self.verdict
        gate_results = verdict.gate_results if verdict is not None else []
        if not self.ledger and not gate_results and not self.plan:
            return
        model = f" ({self.state.name})" if self.state.name is not None else ""
        terminalreporter.write_sep("=", f"agentbench: {self.state.benchmark.name} results{model}")
        if not self.ledger and self.plan and exitstatus in (0, 1, 2):
            terminalreporter.write_line(
                f"incomplete: none of the {len(self.plan)} selected items finished; nothing was written: run it again",
                red=True,
            )
        if self.ledger:
            summary = self.summary()
            for warning in run_warnings(summary):  # what report.html and summary.md lead with too
                terminalreporter.write_line(
                    f"WARNING: {warning.text}" if warning.kind == "errors" else warning.text,
                    red=warning.kind != "replayed",
                    yellow=warning.kind == "replayed",
                    bold=True,
                )
                if warning.detail and warning.kind == "errors":
                    terminalreporter.write_line(f"  {warning.detail}")
            for line in summary.terminal:  # a benchmark's lines may quote what a model or an agent wrote
                terminalreporter.write_line(printable(line))
            terminalreporter.write_line(f"run counts: {counts_line(summary['run_counts'])}")
            self.usage_lines(terminalreporter, summary)
            for line in cost_terminal_lines(summary.get("cost") or {}):
                terminalreporter.write_line(line)
            if self.state.budget_stop:  # why the items not run did not start
                terminalreporter.write_line(self.state.budget_stop, yellow=True)
            if self.state.error_stop:
                terminalreporter.write_line(self.state.error_stop, red=True)
        if verdict is not None and verdict.comparison is not None:
            for line in render_text(verdict.comparison, verdict.alpha):
                terminalreporter.write_line(printable(line))
        if gate_results:
            ok = all(r.ok for r in gate_results)
            exit_code = verdict.exit_code if verdict is not None else exitstatus  # (gate results come with a verdict)
            terminalreporter.write_sep(
                "-", f"agentbench gates: {'passed' if ok else 'FAILED'} (exit code {exit_code})", green=ok, red=not ok
            )
            for result in gate_results:
                terminalreporter.write_line(result.line(), green=result.ok, red=not result.ok)
            if verdict is not None and ok and verdict.exit_before == 1 and verdict.exit_code == 0:
                terminalreporter.write_line("failing items are expected in a benchmark: the gates decide the exit code")
        if self.written is not None and self.written.baseline is not None:
            terminalreporter.write_line(f"baseline updated: {self.written.baseline}")
        if self.ledger:
            terminalreporter.write_line(
                f"report: {self.state.run_dir}" + (f" (open {self.html.name} in a browser)" if self.html else "")
            )
            command = resume_of(self.summary())
            if command:  # last, where it is seen: the exact command that runs the rest
                terminalreporter.write_line(f"{self.left_to_run()}; resume with:", yellow=True)
                terminalreporter.write_line(f"  {command}", bold=True)

    def left_to_run(self) -> str:
        """``incomplete run: 2 item(s) not run, 1 ended in an error``: what a resume runs."""
        summary = self.summary()
        parts = []
        if summary.get("incomplete"):
            parts.append(f"{summary['incomplete']['not_run']} item(s) not run")
        if summary.get("errors"):
            parts.append(f"{summary['errors']['items']} ended in an error")
        return f"{'incomplete run' if summary.get('incomplete') else 'incomplete score'}: {', '.join(parts)}"

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """After pytest's own last line, which counts only the items that ran: the plugin's, naming those not run
        (the session's last word on an incomplete run)."""
        line = self.not_run_line()
        terminal = config.pluginmanager.get_plugin("terminalreporter")
        if line is not None and terminal is not None:
            terminal.write_line(line, yellow=True, bold=True)

    def not_run_line(self) -> str | None:
        if self.config.option.collectonly or not self.plan:
            return None
        model = f" of {self.state.name}" if self.state.name is not None else ""
        if not self.ledger:  # (a usage error after collection says why itself)
            ran = self.verdict is not None and self.verdict.exit_before in (0, 1, 2)
            return f"agentbench: none of the {len(self.plan)} selected items{model} ran" if ran else None
        incomplete = self.summary().get("incomplete")
        if not incomplete:
            return None
        return (
            f"agentbench: {incomplete['not_run']} of {incomplete['selected']} selected items{model} not run "
            f"(not in the counts above); the resume command is printed above"
        )


class RunsReport:
    """A session of several runs: each run's gates judge the session's own exit status (not another run's
    verdict), the exit code is the worst of theirs, and the session ends with one table across the runs
    (terminal, and ``summary.md`` and ``report.html`` in ``<report dir>/<bench>/_models/<run id>/``)."""

    def __init__(self, config: pytest.Config, reporters: list[Reporter]) -> None:
        self.config = config
        self.reporters = reporters
        self.rows: list[Any] = []
        self.written: tuple[Path, Path] | None = None
        self.exit_code = 0
        first = reporters[0].state
        self.folder = Path(first.options.report_dir) / first.benchmark.name / MODELS_FOLDER / first.run_dir.name

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Before any model's reporter (trylast) judges: the status each judges, and the call when all have."""
        for reporter in self.reporters:
            reporter.session_exit = session.exitstatus
            reporter.finished = self.one_finished

    def one_finished(self, session: pytest.Session) -> None:
        if any(r.verdict is None for r in self.reporters):
            return  # not every model has been judged yet
        self.exit_code = max(r.verdict.exit_code for r in self.reporters if r.verdict is not None)
        session.exitstatus = self.exit_code
        runs = [
            ModelRun(str(r.state.name), r.summary(), [*r.ledger, *r.summary().not_run], r.state.run_dir)
            for r in self.reporters
            if r.ledger
        ]
        self.rows = [model_row(run.model, run.summary, run.records, run.run_dir) for run in runs]
        if self.rows:
            first = self.reporters[0].state
            title = f"{first.benchmark.name} · {first.split} · run {first.run_dir.name}"
            alpha = first.gates.alpha if first.gates is not None else 0.05
            allow = bool(first.gates is not None and first.gates.allow_incomparable)
            pairs = compared_with_first(runs, allow_incomparable=allow)
            self.written = write_models_reports(self.folder, self.rows, title, pairs, alpha)

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter, exitstatus: int, config: pytest.Config) -> None:
        if not self.rows:
            return
        what = "runs" if len({row.agent for row in self.rows}) > 1 else "models"
        terminalreporter.write_sep("=", f"agentbench: {len(self.rows)} {what} compared")
        for line in render_models(self.rows):
            terminalreporter.write_line(line)
        failed = [
            r.state.name
            for r in self.reporters
            if r.verdict is not None and r.verdict.gate_results and not all(g.ok for g in r.verdict.gate_results)
        ]
        if failed:
            terminalreporter.write_line(
                f"agentbench gates FAILED for {what[:-1]}(s): {', '.join(map(str, failed))} "
                f"(exit code {self.exit_code})",
                red=True,
                bold=True,
            )
        if self.written is not None:
            terminalreporter.write_line(f"{what} compared: {self.written[0]} (and {self.written[1].name})")


def is_bench_node(nodeid: str, state: BenchState) -> bool:
    return nodeid.startswith(f"{state.benchmark.name}/") or nodeid.startswith(f"{state.benchmark.name}::")


def not_run_fields(state: BenchState, sample: Sample) -> dict[str, Any]:
    """What a benchmark knows of an item before it runs, from the run's settings (CORE-Bench: its question
    counts and the difficulty), so the item's questions count as not answered when it never runs."""
    return dict(state.benchmark.not_run_fields(sample, state.settings))


# options of this session that a resume command leaves out: it names the run folder itself
NOT_REPEATED = ("--bench-resume", "--bench-replay", "--bench-run-id")


def resume_command(args: tuple[str, ...] | list[str], run_dir: Path, invocation_dir: Path) -> str:
    """The command that continues this run, to paste from any folder: ``cd`` to the folder this session started in
    (its conftest.py, ini file and relative paths mean what they meant), then this session's command line (``-n``,
    paths and plugins kept) without its own resume/replay/run id, plus ``--bench-resume=RUN_DIR`` (absolute, in the
    ``=`` form the plugin demands of a path; settings.json restores the rest). Every word is shell-quoted."""
    kept: list[str] = []
    skip_next = False
    for word in shlex.split(command_line(args)):
        if skip_next:
            skip_next = False
            continue
        name, eq, _ = word.partition("=")
        if name in NOT_REPEATED:
            skip_next = not eq
            continue
        kept.append(word)
    folder = Path(os.path.abspath(invocation_dir))
    resume = os.path.abspath(folder / run_dir)
    return f"cd {shlex.quote(str(folder))} && " + shlex.join([*kept, f"--bench-resume={resume}"])
