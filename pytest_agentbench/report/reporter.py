"""Controller-side reporting: gather records, print the benchmark's metrics, write the run's files.

At the end of the session, in this order: the summary; the comparison with the baseline (when given);
the gates and, when any gate is given, the exit code they decide; the picture; summary.json and
summary.md; the baseline when asked to update it; and GITHUB_STEP_SUMMARY when CI sets it.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from .. import records as rec


class Reporter:
    def __init__(self, config: pytest.Config, state: Any) -> None:
        self.config = config
        self.state = state
        self.records: dict[str, dict[str, Any]] = {}
        self.other_failures = 0  # failed non-benchmark tests collected in the same session
        self.started = time.monotonic()
        self._summary: dict[str, Any] | None = None
        self.comparison = None
        self.gate_results: list = []
        self.exit_before: int | None = None
        self.exit_after: int | None = None
        self.baseline_written: Path | None = None
        self.picture: Path | None = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        found = False
        for name, value in report.user_properties:
            if name == rec.RECORD_PROPERTY:
                found = True
                if not self.records:  # the run folder exists from its first record on
                    from .resume import write_settings_once

                    write_settings_once(self.state.run_dir, self.state.settings)
                self.records[value["id"]] = value
        if report.failed and not found and not _is_bench_node(report.nodeid, self.state):
            self.other_failures += 1

    def sorted_records(self) -> list[dict[str, Any]]:
        return sorted(self.records.values(), key=rec.sort_key)

    def summary(self) -> dict[str, Any]:
        if self._summary is None:
            records = self.sorted_records()
            result = self.state.benchmark.summarize(records, self.state.settings)
            self._summary = {
                "settings": self.state.settings,
                "metrics": result["metrics"],
                "counts": rec.count_statuses(records),
                "items": [{"id": r["id"], "task": r["task"], "status": r["status"], "scored": r.get("scored", True)}
                          for r in records],
                "usage": rec.usage_totals(records),
                **{k: v for k, v in result.items() if k not in ("metrics", "terminal", "markdown")},
                "_terminal": result["terminal"],
                "_markdown": result["markdown"],
            }
        return self._summary

    # ---- end of session ----------------------------------------------------------------------
    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        gates = self.state.gates
        self.exit_before = int(session.exitstatus)
        if not self.records:
            if gates is not None and gates.any_gate and session.exitstatus in (0, 1):
                from .gates import GateResult

                self.gate_results = [GateResult("gates", False, "no benchmark item ran, so no gate can hold")]
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
            return
        summary = self.summary()
        self.compare_with_baseline(summary)
        if gates is not None and gates.any_gate:
            from .gates import decide_exit, evaluate

            note = None if self.state.baseline else "no comparable baseline yet (this run writes it)"
            self.gate_results = evaluate(gates, summary, self.comparison, note)
            session.exitstatus = decide_exit(session.exitstatus, self.gate_results, self.other_failures)
            summary["gates"] = [{"gate": r.gate, "ok": r.ok, "detail": r.detail} for r in self.gate_results]
            summary["gates_passed"] = all(r.ok for r in self.gate_results)
        self.exit_after = int(session.exitstatus)
        summary["exit_code"] = self.exit_after
        run_dir: Path = self.state.run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        self.draw_picture(summary, run_dir)
        public = {k: v for k, v in summary.items() if not k.startswith("_")}
        write_atomic(run_dir / "summary.json", json.dumps(public, indent=2, sort_keys=True, default=rec._fallback))
        markdown = render_markdown(summary, self)
        write_atomic(run_dir / "summary.md", markdown)
        if gates is not None and gates.update_baseline and self.exit_before in (0, 1):
            from .baseline import write_baseline

            self.baseline_written = write_baseline(gates.baseline, public)
        step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if step_summary:
            with open(step_summary, "a", encoding="utf-8") as fh:
                fh.write(markdown.replace("](summary.png)", f"]({run_dir / 'summary.png'})") + "\n")

    def compare_with_baseline(self, summary: dict[str, Any]) -> None:
        if self.state.baseline is None:
            return
        from .compare import compare

        public = {k: v for k, v in summary.items() if not k.startswith("_")}
        self.comparison = compare(self.state.baseline, public)
        m = self.comparison.mcnemar
        summary["comparison"] = {
            "baseline": self.state.baseline["_path"],
            "flipped": self.comparison.flipped,
            "mcnemar": m,
            "bootstrap": self.comparison.bootstrap,
        }

    def draw_picture(self, summary: dict[str, Any], run_dir: Path) -> None:
        from .compare import headlines
        from .options import valid_metrics
        from .picture import draw

        names = {k: v for k, v in valid_metrics(self.state.benchmark).items()
                 if k in headlines(self.state.benchmark.name)} or valid_metrics(self.state.benchmark)
        try:
            self.picture = draw(summary, run_dir / "summary.png", headlines=names, baseline=self.state.baseline)
        except Exception as exc:  # a broken plotting stack must not lose the run's reports
            summary.setdefault("notes", []).append(f"picture not drawn: {type(exc).__name__}: {exc}")

    def pytest_terminal_summary(self, terminalreporter, exitstatus: int, config: pytest.Config) -> None:
        if not self.records and not self.gate_results:
            return
        terminalreporter.write_sep("=", f"agentbench: {self.state.benchmark.name} results")
        if self.records:
            summary = self.summary()
            for line in summary["_terminal"]:
                terminalreporter.write_line(line)
            from .progress import usage_line

            terminalreporter.write_line(usage_line(len(self.records), None, summary["usage"],
                                                   time.monotonic() - self.started))
        if self.comparison is not None:
            from .compare import render_text

            alpha = self.state.gates.significance or 0.05
            for line in render_text(self.comparison, alpha):
                terminalreporter.write_line(line)
        if self.gate_results:
            ok = all(r.ok for r in self.gate_results)
            terminalreporter.write_sep("-", f"agentbench gates: {'passed' if ok else 'FAILED'}"
                                            f" (exit code {self.exit_after if self.exit_after is not None else 1})",
                                       green=ok, red=not ok)
            for result in self.gate_results:
                terminalreporter.write_line(result.line(), green=result.ok, red=not result.ok)
            if ok and self.exit_before == 1 and self.exit_after == 0:
                terminalreporter.write_line("failing items are expected in a benchmark: the gates decide the exit code")
        if self.baseline_written is not None:
            terminalreporter.write_line(f"baseline updated: {self.baseline_written}")
        if self.records:
            terminalreporter.write_line(f"report: {self.state.run_dir}")


def _is_bench_node(nodeid: str, state: Any) -> bool:
    return nodeid.startswith(f"{state.benchmark.name}/") or nodeid.startswith(f"{state.benchmark.name}::")


def render_markdown(summary: dict[str, Any], reporter: Reporter | None = None) -> str:
    settings = summary["settings"]
    lines = [f"# {settings['benchmark']} — {settings.get('model')} — run {settings.get('run_id')}", ""]
    for note in [*settings.get("notes", []), *(reporter.state.notes if reporter else []), *summary.get("notes", [])]:
        lines += [f"> **Note:** {note}", ""]
    if reporter is not None and reporter.gate_results:
        from .gates import render_markdown as gates_markdown

        lines.append(gates_markdown(reporter.gate_results, summary.get("exit_code", 1)))
    if reporter is not None and reporter.picture is not None:
        lines += [f"![per-task results](summary.png)", ""]
    lines.append(summary["_markdown"].rstrip())
    usage = summary.get("usage")
    if usage:
        lines += ["", "Usage: " + ", ".join(f"{k.replace('_', ' ')} {v:g}" for k, v in usage.items())]
    if reporter is not None and reporter.comparison is not None:
        from .compare import render_markdown as compare_markdown

        lines += ["", compare_markdown(reporter.comparison, reporter.state.gates.significance or 0.05).rstrip()]
    lines += ["", "## Settings", "", "| setting | value |", "|---|---|"]
    for key, value in settings.items():
        if key != "notes":
            lines.append(f"| {key} | {value} |")
    return "\n".join(lines) + "\n"


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
