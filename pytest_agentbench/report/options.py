"""Options of the CI layer: score gates, baselines, significance, resume and progress.

Metric values are fractions of 1 (``main=0.4``) or percentages (``main=40%``); a bare number above 1
is refused because ``40`` is ambiguous. ``--bench-max-drop main=5%`` means five percentage points.
Gate names are the benchmark's own (``Benchmark.gate_metrics``); this module knows no benchmark.
The plugin registers ``REPORT_OPTIONS`` with pytest and resolves them; ``gate_config`` turns the
resolved values into a ``GateConfig`` (or a ``ConfigError`` naming the fix) before anything runs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ..core.errors import ConfigError
from ..core.options import Option, view

FAIL_UNDER_HELP = (
    "gate: fail the run (exit 1) when METRIC is below VALUE, e.g. main=0.4 or main=40%; repeatable. "
    "METRIC is one of the benchmark's gate metrics (a wrong name lists them). With any gate the exit "
    "code says whether the gates held, not whether every item passed."
)
BASELINE_HELP = "an earlier run's summary.json (or its run folder) to compare this run with."
MAX_DROP_HELP = (
    "gate: fail when METRIC dropped by more than VALUE against --bench-baseline (0.05 or 5% = five "
    "percentage points); repeatable."
)
MAX_ERRORS_HELP = (
    "gate: fail when more than N items ended in a model or environment error (model_error, env_error, error, blocked)."
)
UPDATE_HELP = (
    "write this run's summary to --bench-baseline (a .json path, else <path>/summary.json). "
    "A run never updates its baseline otherwise."
)
SIGNIFICANCE_HELP = (
    "with --bench-max-drop: count a drop only when it is significant at this level "
    "(exact McNemar test over the metric's units, e.g. 0.05); a significant drop beyond the limit fails as "
    "such, and a drop beyond it that is not significant fails as underpowered when the smallest drop the "
    "test could detect (80% power) exceeds the limit. A drop within the limit holds (with a note when the "
    "test is that weak)."
)
UNDERPOWERED_HELP = (
    "with --bench-max-drop and --bench-set significance: a drop beyond the limit that is not significant "
    "holds even when the test could not detect a drop as small as the limit (instead of failing as "
    "underpowered); the report still gives the detectable drop."
)
RESUME_HELP = (
    "continue an interrupted run in RUN_DIR: its settings and selection are read from RUN_DIR/settings.json "
    "(a command-line value that differs is refused), its finished records are reused (reported, not run "
    "again), the missing items run, and complete reports are written into RUN_DIR."
)
ALLOW_INCOMPLETE_HELP = (
    "accept a run in which some selected items did not run (interrupted, stopped early, a "
    "lost worker): its gates are decided on the metrics alone (the items not run still count "
    "as not passed). Without it such a run fails its gates, and without gates ends with exit 1."
)
GATE_SCORE_HELP = (
    "which score the gates judge: automatic (the grader's verdicts, the default) or reviewed (with "
    "--bench-review's human verdicts applied, for a benchmark that takes a review). A reviewed summary carries both."
)
SCORES = ("automatic", "reviewed")
FAIL_OVER_HELP = (
    "gate: fail the run (exit 1) when what it cost is above a limit in USD: cost=USD (the run's "
    "fresh model calls), cost_per_solved=USD (that over the tasks solved); repeatable. An unknown cost "
    "(no --model-price, or replies without token usage) fails the gate."
)
COST_GATES = {"cost": "total_usd", "cost_per_solved": "per_solved_usd"}  # gate name -> key of summary["cost"]
PROGRESS_HELP = (
    "seconds between the progress lines (done/total, statuses, elapsed, ETA, model usage, items "
    "running over 30 s); 0 = after every item."
)


NOT_A_RUN_FOLDER = "is not a folder; give the run folder of the interrupted run (reports/<benchmark>/<model>/<run-id>)"


def check_level(value: float) -> float:
    """Option check of --bench-set significance (core.options words it: "--flag must ..., got 'x'")."""
    if not 0 < value < 1:
        raise ValueError("must be a level between 0 and 1 (e.g. 0.05)")
    return value


def check_run_folder(path: Path) -> Path:
    """Option check of --bench-resume (core.options words it: "--flag 'x' is not a folder; ...")."""
    if not Path(path).is_dir():
        raise ValueError(NOT_A_RUN_FOLDER)
    return path


# Help texts may contain "%": escaping them for argparse is the plugin's business.
REPORT_OPTIONS: tuple[Option, ...] = (
    Option(
        "fail_under",
        "--bench-fail-under",
        FAIL_UNDER_HELP,
        kind="multi",
        ini="agentbench_fail_under",
        metavar="METRIC=VALUE",
        runfile_group="gates",
        free_on_resume=True,
    ),
    Option(
        "baseline",
        "--bench-baseline",
        BASELINE_HELP,
        kind="path",
        ini="agentbench_baseline",
        metavar="PATH",
        runfile_group="gates",
        free_on_resume=True,
    ),
    Option(
        "max_drop",
        "--bench-max-drop",
        MAX_DROP_HELP,
        kind="multi",
        ini="agentbench_max_drop",
        metavar="METRIC=VALUE",
        runfile_group="gates",
        free_on_resume=True,
    ),
    Option(
        "fail_over",
        "--bench-fail-over",
        FAIL_OVER_HELP,
        kind="multi",
        ini="agentbench_fail_over",
        metavar="cost=USD",
        runfile_group="gates",
        free_on_resume=True,
        shown=False,
    ),
    Option(
        "max_errors",
        "--bench-max-errors",
        MAX_ERRORS_HELP,
        kind="int",
        minimum=0,
        ini="agentbench_max_errors",
        metavar="N",
        runfile_group="gates",
        free_on_resume=True,
    ),
    Option(
        "update_baseline",
        "--bench-update-baseline",
        UPDATE_HELP,
        kind="bool",
        default=False,
        ini="agentbench_update_baseline",
        runfile_group="gates",
        free_on_resume=True,
    ),
    Option(
        "allow_incomplete",
        "--bench-allow-incomplete",
        ALLOW_INCOMPLETE_HELP,
        kind="bool",
        default=False,
        ini="agentbench_allow_incomplete",
        runfile_group="gates",
        free_on_resume=True,
    ),
    Option(
        "allow_incomparable",
        "--bench-allow-incomparable",
        "compare with the --bench-baseline even when the two runs are not comparable (another dataset or "
        "dataset version, other grading environments or package versions, another harness, other settings, "
        "answers from another model than asked): without it such a baseline is a usage error (or, for the "
        "served model, known only at the end, a failed drop gate); with it the report names every difference.",
        kind="bool",
        default=False,
        ini="agentbench_allow_incomparable",
        runfile_group="gates",
        free_on_resume=True,
        shown=False,
    ),
    Option(
        "significance",
        "--bench-significance",
        SIGNIFICANCE_HELP,
        kind="float",
        check=check_level,
        ini="agentbench_significance",
        metavar="ALPHA",
        runfile_group="gates",
        free_on_resume=True,
        shown=False,
    ),
    Option(
        "allow_underpowered",
        "--bench-allow-underpowered",
        UNDERPOWERED_HELP,
        kind="bool",
        default=False,
        ini="agentbench_allow_underpowered",
        runfile_group="gates",
        shown=False,
    ),
    Option(
        "gate_score",
        "--bench-gate-score",
        GATE_SCORE_HELP,
        kind="choice",
        choices=SCORES,
        default="automatic",
        ini="agentbench_gate_score",
        runfile_group="gates",
        free_on_resume=True,
        shown=False,
    ),
    Option(
        "resume",
        "--bench-resume",
        RESUME_HELP,
        kind="path",
        check=check_run_folder,
        ini="agentbench_resume",
        metavar="RUN_DIR",
        stored=False,
        help_group="run",
    ),
    Option(
        "resume_merge",
        "--bench-resume-merge",
        "with --bench-resume: a selection (--bench-ids, -k, -m, --deselect) other than the run's is added to "
        "it (the union runs and is reported) instead of being refused.",
        kind="bool",
        default=False,
        ini="agentbench_resume_merge",
        stored=False,
        help_group="run",
        shown=False,
    ),
    Option(
        "replay",
        "--bench-replay",
        "re-score the run in RUN_DIR from its cached model responses only (--bench-cache replay), with its "
        "settings and selection read from RUN_DIR/settings.json; the new run gets its own folder.",
        kind="path",
        check=check_run_folder,
        ini="agentbench_replay",
        metavar="RUN_DIR",
        stored=False,
        help_group="run",
    ),
    Option(
        "progress_interval",
        "--bench-progress-interval",
        PROGRESS_HELP,
        kind="float",
        default=15.0,
        minimum=0,
        ini="agentbench_progress_interval",
        metavar="SECONDS",
        free_on_resume=True,
        help_group="run",
        shown=False,
    ),
)


@dataclass(frozen=True)
class ReportOptions:
    """The report's settings, typed (``view(ReportOptions, opts)``); one field per option of REPORT_OPTIONS."""

    OPTIONS: ClassVar[tuple[Option, ...]] = REPORT_OPTIONS
    fail_under: tuple[str, ...]
    baseline: Path | None
    max_drop: tuple[str, ...]
    fail_over: tuple[str, ...]
    max_errors: int | None
    update_baseline: bool
    allow_incomplete: bool
    allow_incomparable: bool
    significance: float | None
    allow_underpowered: bool
    gate_score: str
    resume: Path | None
    resume_merge: bool
    replay: Path | None
    progress_interval: float


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
    baseline: Path | None
    update_baseline: bool
    significance: float | None
    allow_incomplete: bool = False  # --bench-allow-incomplete: an incomplete run does not fail the gates
    allow_underpowered: bool = (
        False  # --bench-set=allow_underpowered=true: a max-drop gate that cannot see its limit passes
    )
    score: str = "automatic"  # --bench-set gate_score: the score the gates and the baseline comparison read
    fail_over: tuple[Threshold, ...] = ()  # --bench-set fail_over: cost bounds (Threshold.value in USD)
    allow_incomparable: bool = (
        False  # --bench-set=allow_incomparable=true: a baseline that is not comparable is compared
    )

    @property
    def any_gate(self) -> bool:
        return bool(self.fail_under or self.max_drop or self.max_errors is not None or self.fail_over)

    @property
    def alpha(self) -> float:
        """The level the comparison's tests are read at: --bench-set significance, else 0.05."""
        return self.significance or 0.05


def parse_fraction(text: str, what: str) -> float:
    raw = text.strip()
    percent = raw.endswith("%")
    try:
        value = float(raw[:-1] if percent else raw)
    except ValueError:
        raise ConfigError(f"{what}: {text!r} is not a number; write a fraction (0.45) or a percentage (45%)") from None
    if not math.isfinite(value):
        raise ConfigError(f"{what}: {text!r} is not a finite number")
    if percent:
        value /= 100
    elif value > 1:
        raise ConfigError(f"{what}: {text!r} is above 1; metrics are fractions, so write {value / 100:g} or {raw}%")
    if not 0 <= value <= 1:
        raise ConfigError(f"{what}: {text!r} must lie between 0 and 1 (0% and 100%)")
    return value


def parse_thresholds(entries: tuple[str, ...] | list[str], option: str, benchmark: Any) -> list[Threshold]:
    """``METRIC=VALUE`` entries (several per entry, split on commas and spaces) against the benchmark's gates."""
    names = dict(benchmark.gate_metrics)
    out = []
    for entry in entries:
        for part in (p for p in re.split(r"[,\s]+", entry) if p):
            metric, sep, value = part.partition("=")
            metric = metric.strip()
            if not sep or not metric:
                raise ConfigError(f"{option} takes METRIC=VALUE (e.g. main=0.4), got {part!r}")
            if metric not in names and metric not in names.values():
                raise ConfigError(
                    f"unknown {benchmark.name} metric {metric!r} in {option}; valid metrics: "
                    f"{', '.join(names) or '(this benchmark declares none)'}"
                )
            out.append(
                Threshold(metric, names.get(metric, metric), parse_fraction(value, f"{option} {metric}"), value.strip())
            )
    return out


def parse_cost_bounds(entries: tuple[str, ...] | list[str], option: str) -> tuple[Threshold, ...]:
    """``cost=USD`` / ``cost_per_solved=USD`` entries (``$`` allowed) as thresholds in USD."""
    out = []
    for entry in entries:
        for part in (p for p in re.split(r"[,\s]+", entry) if p):
            name, sep, value = part.partition("=")
            name = name.strip()
            if not sep or name not in COST_GATES:
                raise ConfigError(f"{option} takes cost=USD or cost_per_solved=USD (e.g. cost=5), got {part!r}")
            try:
                limit = float(value.strip().lstrip("$"))
            except ValueError:
                limit = math.nan
            if not math.isfinite(limit) or limit < 0:
                raise ConfigError(
                    f"{option} {name}: {value!r} is not an amount in USD; write e.g. {name}=5 or {name}=0.25"
                )
            out.append(Threshold(name, COST_GATES[name], limit, value.strip()))
    return tuple(out)


def named(opts: Mapping[str, Any], name: str, flag: str) -> str:
    """``--bench-fail-under``, or ``--bench-fail-under (file agentbench.yaml:12)`` where another source gave it."""
    origin = opts.origin(name) if hasattr(opts, "origin") else "command line"
    return flag if origin in ("command line", "default") else f"{flag} ({origin})"


def gate_config(opts: Mapping[str, Any], benchmark: Any) -> GateConfig:
    """The gates of this run from the resolved REPORT_OPTIONS, checked now so a typo costs no model calls."""
    gates = view(ReportOptions, opts)
    fail_under = parse_thresholds(gates.fail_under or (), named(opts, "fail_under", "--bench-fail-under"), benchmark)
    max_drop = parse_thresholds(gates.max_drop or (), named(opts, "max_drop", "--bench-max-drop"), benchmark)
    baseline = gates.baseline
    update = bool(gates.update_baseline)
    if max_drop and not baseline:
        raise ConfigError("--bench-max-drop needs --bench-baseline=PATH (an earlier summary.json)")
    if update and not baseline:
        raise ConfigError("--bench-update-baseline needs --bench-baseline=PATH (where to write it)")
    score = gates.gate_score or "automatic"
    if score == "reviewed" and not opts.get("review"):  # --bench-review: a benchmark's option (CORE-Bench)
        raise ConfigError(
            "--bench-set=gate_score=reviewed judges the score with human verdicts applied: give them with "
            "--bench-review=FILE.yaml (see docs/options.md), or leave the gates on the "
            "automatic score"
        )
    fail_over = parse_cost_bounds(gates.fail_over or (), named(opts, "fail_over", "--bench-set fail_over"))
    return GateConfig(
        fail_under,
        max_drop,
        gates.max_errors,
        baseline,
        update,
        gates.significance,
        allow_underpowered=bool(gates.allow_underpowered),
        allow_incomplete=bool(gates.allow_incomplete),
        allow_incomparable=bool(gates.allow_incomparable),
        score=score,
        fail_over=fail_over,
    )
