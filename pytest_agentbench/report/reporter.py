"""Controller-side reporting: gather records, print the benchmark's metrics, write the run's files."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from .. import records as rec


class Reporter:
    def __init__(self, config: pytest.Config, state: Any) -> None:
        self.config = config
        self.state = state
        self.records: dict[str, dict[str, Any]] = {}
        self._summary: dict[str, Any] | None = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, value in report.user_properties:
            if name == rec.RECORD_PROPERTY:
                self.records[value["id"]] = value

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
                "items": [{"id": r["id"], "task": r["task"], "status": r["status"]} for r in records],
                **{k: v for k, v in result.items() if k not in ("metrics", "terminal", "markdown")},
                "_terminal": result["terminal"],
                "_markdown": result["markdown"],
            }
        return self._summary

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if not self.records:
            return
        summary = self.summary()
        run_dir: Path = self.state.run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        public = {k: v for k, v in summary.items() if not k.startswith("_")}
        write_atomic(run_dir / "summary.json", json.dumps(public, indent=2, sort_keys=True, default=rec._fallback))
        write_atomic(run_dir / "summary.md", render_markdown(summary))

    def pytest_terminal_summary(self, terminalreporter, exitstatus: int, config: pytest.Config) -> None:
        if not self.records:
            return
        summary = self.summary()
        terminalreporter.write_sep("=", f"agentbench: {self.state.benchmark.name} results")
        for line in summary["_terminal"]:
            terminalreporter.write_line(line)
        terminalreporter.write_line(f"report: {self.state.run_dir}")


def render_markdown(summary: dict[str, Any]) -> str:
    settings = summary["settings"]
    lines = [f"# {settings['benchmark']} — {settings.get('model')} — run {settings.get('run_id')}", ""]
    for note in settings.get("notes", []):
        lines += [f"> **Note:** {note}", ""]
    lines.append(summary["_markdown"].rstrip())
    lines += ["", "## Settings", "", "| setting | value |", "|---|---|"]
    for key, value in settings.items():
        if key != "notes":
            lines.append(f"| {key} | {value} |")
    return "\n".join(lines) + "\n"


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
