"""Options of the CI layer: score gates, baselines, significance, resume and progress.

Metric values are fractions of 1 (``main=0.4``) or percentages (``main=40%``); a bare number above 1
is refused because ``40`` is ambiguous. ``--bench-max-drop main=5%`` means five percentage points.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import pytest

# Short gate names of each benchmark -> the metric key its summarize() returns.
GATE_METRICS: dict[str, dict[str, str]] = {
    "scicode": {"main": "main", "subproblem": "subproblem",
                "validation.main": "validation.main", "validation.subproblem": "validation.subproblem",
                "test.main": "test.main", "test.subproblem": "test.subproblem"},
    "core-bench": {"accuracy": "capsule_accuracy", "written": "written_task_accuracy",
                   "vision": "figure_task_accuracy", "questions": "question_accuracy"},
}

FAIL_UNDER_HELP = ("gate: fail the run (exit 1) when METRIC is below VALUE, e.g. main=0.4 or main=40%; repeatable. "
                   "SciCode: main, subproblem; CORE-Bench: accuracy, written, vision. With any gate the exit code "
                   "says whether the gates held, not whether every item passed.")
BASELINE_HELP = "an earlier run's summary.json (or its run folder) to compare this run with."
MAX_DROP_HELP = ("gate: fail when METRIC dropped by more than VALUE against --bench-baseline (0.05 or 5% = five "
                 "percentage points); repeatable.")
MAX_ERRORS_HELP = "gate: fail when more than N items ended in a model or environment error (model_error, env_error, error)."
UPDATE_HELP = ("write this run's summary to --bench-baseline (a .json path, else <path>/summary.json). "
               "A run never updates its baseline otherwise.")
SIGNIFICANCE_HELP = ("with --bench-max-drop: count a drop only when it is significant at this level "
                     "(exact McNemar test over the metric's units, e.g. 0.05).")
RESUME_HELP = ("continue an interrupted run in RUN_DIR: its finished records are reused (reported, not run again), "
               "the missing items run, and complete reports are written into RUN_DIR.")
PROGRESS_HELP = "seconds between the progress lines (model calls, tokens, cache hits, elapsed); 0 = after every item."


def _cli(text: str) -> str:
    return text.replace("%", "%%")  # argparse %-formats help texts


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("agentbench")
    group.addoption("--bench-fail-under", dest="bench_fail_under", action="append", default=None,
                    metavar="METRIC=VALUE", help=_cli(FAIL_UNDER_HELP))
    group.addoption("--bench-baseline", dest="bench_baseline", default=None, metavar="PATH", help=BASELINE_HELP)
    group.addoption("--bench-max-drop", dest="bench_max_drop", action="append", default=None,
                    metavar="METRIC=VALUE", help=_cli(MAX_DROP_HELP))
    group.addoption("--bench-max-errors", dest="bench_max_errors", default=None, metavar="N", help=MAX_ERRORS_HELP)
    group.addoption("--bench-update-baseline", dest="bench_update_baseline", action="store_true", default=False,
                    help=UPDATE_HELP)
    group.addoption("--bench-significance", dest="bench_significance", default=None, metavar="ALPHA",
                    help=SIGNIFICANCE_HELP)
    group.addoption("--bench-resume", dest="bench_resume", default=None, metavar="RUN_DIR", help=RESUME_HELP)
    group.addoption("--bench-progress-interval", dest="bench_progress_interval", default=None, metavar="SECONDS",
                    help=PROGRESS_HELP)
    parser.addini("agentbench_fail_under", type="linelist", default=[], help=FAIL_UNDER_HELP)
    parser.addini("agentbench_baseline", default="", help=BASELINE_HELP)
    parser.addini("agentbench_max_drop", type="linelist", default=[], help=MAX_DROP_HELP)
    parser.addini("agentbench_max_errors", default="", help=MAX_ERRORS_HELP)
    parser.addini("agentbench_significance", default="", help=SIGNIFICANCE_HELP)
    parser.addini("agentbench_progress_interval", default="15", help=PROGRESS_HELP)


@dataclass(frozen=True)
class Threshold:
    name: str  # as the user wrote it (main, accuracy)
    metric: str  # the key in summary["metrics"]
    value: float  # a fraction of 1
    text: str  # as the user wrote the value, for messages


@dataclass
class GateConfig:
    fail_under: list[Threshold]
    max_drop: list[Threshold]
    max_errors: int | None
    baseline: str | None
    update_baseline: bool
    significance: float | None

    @property
    def any_gate(self) -> bool:
        return bool(self.fail_under or self.max_drop or self.max_errors is not None)


def valid_metrics(benchmark: Any) -> dict[str, str]:
    """Gate names of a benchmark; a benchmark may declare its own as ``gate_metrics``."""
    own = getattr(benchmark, "gate_metrics", None)
    return dict(own) if own else dict(GATE_METRICS.get(benchmark.name, {}))


def parse_fraction(text: str, what: str) -> float:
    raw = text.strip()
    percent = raw.endswith("%")
    try:
        value = float(raw[:-1] if percent else raw)
    except ValueError:
        raise pytest.UsageError(f"agentbench: {what}: {text!r} is not a number; write a fraction (0.45) or a "
                                f"percentage (45%)") from None
    if not math.isfinite(value):
        raise pytest.UsageError(f"agentbench: {what}: {text!r} is not a finite number")
    if percent:
        value /= 100
    elif value > 1:
        raise pytest.UsageError(f"agentbench: {what}: {text!r} is above 1; metrics are fractions, so write "
                                f"{value / 100:g} or {raw}%")
    if not 0 <= value <= 1:
        raise pytest.UsageError(f"agentbench: {what}: {text!r} must lie between 0 and 1 (0% and 100%)")
    return value


def parse_thresholds(entries: list[str], option: str, benchmark: Any) -> list[Threshold]:
    names = valid_metrics(benchmark)
    out = []
    for entry in entries:
        for part in (p for p in re.split(r"[,\s]+", entry) if p):
            metric, sep, value = part.partition("=")
            metric = metric.strip()
            if not sep or not metric:
                raise pytest.UsageError(f"agentbench: {option} takes METRIC=VALUE (e.g. main=0.4), got {part!r}")
            if metric not in names and metric not in names.values():
                raise pytest.UsageError(
                    f"agentbench: unknown {benchmark.name} metric {metric!r} in {option}; valid metrics: "
                    f"{', '.join(names) or '(this benchmark declares none)'}")
            out.append(Threshold(metric, names.get(metric, metric), parse_fraction(value, f"{option} {metric}"),
                                 value.strip()))
    return out


def _option_or_ini(config: pytest.Config, dest: str, ini: str) -> Any:
    value = config.getoption(dest)
    if value in (None, []):
        value = config.getini(ini)
    return value


def gate_config(config: pytest.Config, benchmark: Any) -> GateConfig:
    """Parse and validate the gate options now, so a typo is a usage error before anything runs."""
    fail_under = parse_thresholds(_option_or_ini(config, "bench_fail_under", "agentbench_fail_under") or [],
                                  "--bench-fail-under", benchmark)
    max_drop = parse_thresholds(_option_or_ini(config, "bench_max_drop", "agentbench_max_drop") or [],
                                "--bench-max-drop", benchmark)
    raw_errors = _option_or_ini(config, "bench_max_errors", "agentbench_max_errors")
    max_errors = None
    if raw_errors not in (None, ""):
        try:
            max_errors = int(str(raw_errors))
        except ValueError:
            max_errors = -1
        if max_errors < 0:
            raise pytest.UsageError(f"agentbench: --bench-max-errors takes a whole number >= 0, got {raw_errors!r}")
    baseline = _option_or_ini(config, "bench_baseline", "agentbench_baseline") or None
    update = bool(config.getoption("bench_update_baseline"))
    if max_drop and not baseline:
        raise pytest.UsageError("agentbench: --bench-max-drop needs --bench-baseline PATH (an earlier summary.json)")
    if update and not baseline:
        raise pytest.UsageError("agentbench: --bench-update-baseline needs --bench-baseline PATH (where to write it)")
    raw_alpha = _option_or_ini(config, "bench_significance", "agentbench_significance")
    alpha = None
    if raw_alpha not in (None, ""):
        try:
            alpha = float(raw_alpha)
        except ValueError:
            alpha = -1.0
        if not 0 < alpha < 1:
            raise pytest.UsageError(f"agentbench: --bench-significance takes a level between 0 and 1 "
                                    f"(e.g. 0.05), got {raw_alpha!r}")
    return GateConfig(fail_under, max_drop, max_errors, baseline, update, alpha)


def progress_interval(config: pytest.Config) -> float:
    raw = _option_or_ini(config, "bench_progress_interval", "agentbench_progress_interval")
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = -1.0
    if value < 0:
        raise pytest.UsageError(f"agentbench: --bench-progress-interval takes seconds >= 0, got {raw!r}")
    return value
