"""CORE-Bench as a pytest-agentbench benchmark: one pytest item per capsule.

An item fetches and unpacks its capsule, copies it into a fresh workspace with the files its
difficulty hides removed, lets the model's agent work there (or, for the oracle, writes the
reference answers), finds the answers and scores them as upstream does.
"""
from __future__ import annotations

import json
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import pytest

from pytest_agentbench.registry import RunContext, Sample, Task

from . import agent as agent_mod
from . import capsules, dataset, prepare, scorer

NAME = "core-bench"
MAX_SHOWN_WRONG = 3  # questions named in a failing item's message

# flag, dest, ini key, help; the CLI wins over the ini key, the ini key over the default
OPTIONS = [
    ("--bench-difficulty", "bench_difficulty", "agentbench_difficulty", "hard",
     "CORE-Bench difficulty: easy (answer from the shipped results/), medium (reproduce with "
     "REPRODUCING.md and environment/ given), hard (reproduce from the code alone). Default hard."),
    ("--bench-capsules-dir", "bench_capsules_dir", "agentbench_capsules_dir", None,
     "CORE-Bench: folder with pre-staged capsules (<capsule_id>.tar.gz or unpacked <capsule_id>/); "
     "missing ones are downloaded into it. Default <data-dir>/core_bench/capsules, or <cache>/capsules "
     "when the data dir is read-only."),
]

AGENT_OPTIONS = [
    ("--bench-agent-steps", "bench_agent_steps", "agentbench_agent_steps", str(agent_mod.DEFAULT_STEPS),
     f"CORE-Bench agent: most model turns per capsule (default {agent_mod.DEFAULT_STEPS})."),
    ("--bench-agent-time", "bench_agent_time", "agentbench_agent_time", f"{agent_mod.DEFAULT_TIME:g}",
     f"CORE-Bench agent: seconds per capsule (default {agent_mod.DEFAULT_TIME:g}, as upstream)."),
    ("--bench-agent-tokens", "bench_agent_tokens", "agentbench_agent_tokens", "",
     "CORE-Bench agent: budget of prompt plus completion tokens per capsule (default: none)."),
    ("--bench-agent-command-timeout", "bench_agent_command_timeout", "agentbench_agent_command_timeout",
     f"{agent_mod.DEFAULT_COMMAND_TIMEOUT:g}",
     f"CORE-Bench agent: default timeout of one bash command in seconds (default "
     f"{agent_mod.DEFAULT_COMMAND_TIMEOUT:g}); the agent may ask for up to ten times more."),
]


def _number(config: pytest.Config, dest: str, ini: str, kind, *, optional: bool = False):
    value = config.getoption(dest, None)
    if value is None:
        value = config.getini(ini)
    if optional and (value is None or str(value).strip() == ""):
        return None
    try:
        number = kind(value)
    except (TypeError, ValueError):
        number = None
    if number is None or number <= 0:
        flag = "--" + dest.replace("_", "-")
        raise pytest.UsageError(f"agentbench: {flag} must be a positive {'integer' if kind is int else 'number'}, "
                                f"got {value!r}")
    return number


def _truthy(value: Any) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


class CoreBench:
    name = NAME
    splits = dataset.SPLITS
    default_split = "test"
    group_items = False
    records_file = "records.jsonl"

    def __init__(self) -> None:
        self._prompts: dict[Path, dict[str, str]] = {}

    # ------------------------------------------------------------------ options and settings

    def add_options(self, parser: pytest.Parser) -> None:
        group = parser.getgroup("agentbench")
        for flag, dest, ini, default, help_text in OPTIONS:
            choices = prepare.DIFFICULTIES if dest == "bench_difficulty" else None
            group.addoption(flag, dest=dest, default=None, choices=choices, help=help_text)
            parser.addini(ini, help=help_text, default=default)
        hints_help = ("CORE-Bench: add short difficulty-specific hints to the task prompt (the same for every "
                      "model); --no-bench-hints gives upstream's prompt alone. Default on.")
        group.addoption("--bench-hints", dest="bench_hints", action="store_true", default=None, help=hints_help)
        group.addoption("--no-bench-hints", dest="bench_hints", action="store_false", default=None,
                        help="CORE-Bench: no hints, only upstream's task prompt.")
        parser.addini("agentbench_hints", help=hints_help, default="true")
        group.addoption("--bench-upstream-abort", dest="bench_upstream_abort", action="store_true", default=None,
                        help="CORE-Bench: score like upstream, which stops reading a report at the first value "
                             "that cannot be compared (e.g. text for a numeric question), so later answers earn "
                             "nothing. Default: such a value fails only its own question.")
        parser.addini("agentbench_upstream_abort", help="CORE-Bench: see --bench-upstream-abort", default="false")
        for flag, dest, ini, default, help_text in AGENT_OPTIONS:
            group.addoption(flag, dest=dest, default=None, help=help_text)
            parser.addini(ini, help=help_text, default=default)
        # the environment options are shared with SciCode; registered once whoever comes first
        from pytest_agentbench.envs import add_env_options

        add_env_options(parser)

    def _option(self, config: pytest.Config, dest: str, ini: str) -> Any:
        value = config.getoption(dest, None)
        return config.getini(ini) if value is None else value

    def settings(self, config: pytest.Config) -> dict[str, Any]:
        difficulty = self._option(config, "bench_difficulty", "agentbench_difficulty") or "hard"
        if difficulty not in prepare.DIFFICULTIES:
            raise pytest.UsageError(f"agentbench: unknown CORE-Bench difficulty {difficulty!r} "
                                    f"(agentbench_difficulty); valid: {', '.join(prepare.DIFFICULTIES)}")
        capsules_dir = self._option(config, "bench_capsules_dir", "agentbench_capsules_dir")
        if capsules_dir:
            path = Path(capsules_dir).expanduser()
            if not path.is_absolute():
                path = Path(config.invocation_params.dir) / path
            if not path.is_dir():
                raise pytest.UsageError(f"agentbench: --bench-capsules-dir {path} is not a folder; create it "
                                        "(capsules are downloaded into it) or fix the path")
            capsules_dir = str(path)
        return {
            "difficulty": difficulty,
            "hints": _truthy(self._option(config, "bench_hints", "agentbench_hints")),
            "upstream_abort": _truthy(self._option(config, "bench_upstream_abort", "agentbench_upstream_abort")),
            "capsules_dir": capsules_dir or None,
            "capsule_url": capsules.capsule_base_url(),
            **self._agent_settings(config),
        }

    def _agent_settings(self, config: pytest.Config) -> dict[str, Any]:
        from pytest_agentbench.envs import env_settings

        try:
            env = env_settings(config)
        except ValueError as exc:
            raise pytest.UsageError(f"agentbench: {exc}") from None
        return {
            "env": env["env"],
            "agent_steps": _number(config, "bench_agent_steps", "agentbench_agent_steps", int),
            "agent_time": _number(config, "bench_agent_time", "agentbench_agent_time", float),
            "agent_tokens": _number(config, "bench_agent_tokens", "agentbench_agent_tokens", int, optional=True),
            "agent_command_timeout": _number(config, "bench_agent_command_timeout",
                                             "agentbench_agent_command_timeout", float),
        }

    # ------------------------------------------------------------------ tasks

    def load_tasks(self, config: pytest.Config, split: str) -> list[Task]:
        from pytest_agentbench.data import data_dir

        try:
            tasks = dataset.load_split(data_dir(config), split)
        except dataset.DatasetError as exc:
            raise pytest.UsageError(f"agentbench: {exc}") from None
        return [tasks_entry(task, split) for task in tasks]

    # ------------------------------------------------------------------ running one capsule

    def _templates(self, data_dir: Path) -> dict[str, str]:
        if data_dir not in self._prompts:
            self._prompts[data_dir] = dataset.load_prompts(data_dir)
        return self._prompts[data_dir]

    def run_sample(self, sample: Sample, ctx: RunContext) -> dict[str, Any]:
        from pytest_agentbench.data import DataError, cache_dir, data_dir

        settings = self.settings(ctx.config)
        task = sample.data
        capsule_id = task["capsule_id"]
        written, figure = scorer.question_totals(task["results"])
        record: dict[str, Any] = {
            "benchmark": NAME, "task": sample.task_id, "id": sample.id, "split": sample.split, "scored": True,
            "difficulty": settings["difficulty"], "hints": settings["hints"],
            "upstream_abort": settings["upstream_abort"], "gpu_required": None,
            "correct_written": 0, "total_written": written, "correct_figure": 0, "total_figure": figure,
        }
        root, cache = data_dir(ctx.config), cache_dir(ctx.config)
        capsules_dir = Path(settings["capsules_dir"]) if settings["capsules_dir"] else None
        store = capsules.archive_store(root, cache, capsules_dir)
        try:
            capsule_root = capsules.ensure_capsule(capsule_id, store, cache / "capsules" / "extracted")
            templates = self._templates(root)
        except (capsules.CapsuleError, dataset.DatasetError, DataError) as exc:
            return {**record, "status": "env_error", "message": str(exc)}
        record["gpu_required"] = prepare.capsule_needs_gpu(capsule_root)
        prompt = prepare.render_prompt(templates, task, settings["difficulty"], settings["hints"])

        model = ctx.model
        if not getattr(model, "is_oracle", False) and not hasattr(model, "run_agent") and hasattr(model, "complete"):
            return {**record, **self._run_agent(sample, ctx, capsule_root, prompt, task, settings)}
        # a cleanup failure (files the agent made undeletable) must not cost the verdict
        with tempfile.TemporaryDirectory(prefix=f"corebench-{capsule_id}-", ignore_cleanup_errors=True) as tmp:
            workspace = Path(tmp)
            try:
                prepare.prepare_workspace(capsule_root, workspace, capsule_id, settings["difficulty"])
            except OSError as exc:
                return {**record, "status": "env_error", "message": f"preparing the workspace failed: {exc}"}
            outcome = self._run_model(sample, ctx, workspace, prompt, task)
            if "status" in outcome:
                return {**record, **outcome}
            submission = scorer.load_submission(workspace, outcome.get("final_answer"))
        return {**record, **self._score(task, submission, settings, ctx.run_dir, capsule_id, prompt)}

    def _run_model(self, sample: Sample, ctx: RunContext, workspace: Path, prompt: str,
                   task: dict[str, Any]) -> dict[str, Any]:
        """The oracle, or a user's own client with ``run_agent``: ``{"final_answer": ...}`` or a status."""
        model = ctx.model
        if getattr(model, "is_oracle", False):
            (workspace / scorer.REPORT_NAME).write_text(json.dumps(task["results"][0], indent=2))
            return {"final_answer": None}
        run_agent = getattr(model, "run_agent", None)
        if run_agent is None:
            label = getattr(model, "name", None) or type(model).__name__
            return {"status": "error", "message": f"model {label} has no CORE-Bench agent yet"}
        try:
            return {"final_answer": run_agent(workspace=workspace, prompt=prompt, sample=sample, ctx=ctx)}
        except Exception as exc:  # the agent or its model service failed: not a verdict on the answers
            return {"status": "model_error", "message": f"agent failed: {type(exc).__name__}: {exc}"}

    def _run_agent(self, sample: Sample, ctx: RunContext, capsule_root: Path, prompt: str, task: dict[str, Any],
                   settings: dict[str, Any]) -> dict[str, Any]:
        """Our tool-using agent in the ``bench_env`` environment; the record fragment of the outcome."""
        from pytest_agentbench.envs import EnvError, EnvSkip

        capsule_id = task["capsule_id"]
        factory = ctx.env
        if factory is None or not hasattr(factory, "start"):
            return {"status": "error", "message": "the bench_env fixture gave no environment factory with start()"}
        workspace = Path(tempfile.mkdtemp(prefix=f"corebench-{capsule_id}-"))
        try:
            prepare.prepare_workspace(capsule_root, workspace, capsule_id, settings["difficulty"])
        except OSError as exc:
            shutil.rmtree(workspace, ignore_errors=True)
            return {"status": "env_error", "message": f"preparing the workspace failed: {exc}"}
        kept = bool(getattr(factory, "keep_workspaces", False))
        base: dict[str, Any] = {"env": getattr(factory, "kind", type(factory).__name__)}
        if kept:
            base["workspace"] = str(workspace)
        try:
            env = factory.start(workspace, needs_gpu=bool(prepare.capsule_needs_gpu(capsule_root)),
                                name=f"core-bench/{capsule_id}")
        except EnvSkip as exc:
            if not kept:
                shutil.rmtree(workspace, ignore_errors=True)
            return {**base, "status": "skipped", "message": f"{capsule_id} {exc}"}
        except EnvError as exc:
            if not kept:
                shutil.rmtree(workspace, ignore_errors=True)
            return {**base, "status": "env_error", "message": str(exc)}
        limits = agent_mod.AgentLimits(steps=settings["agent_steps"], time=settings["agent_time"],
                                       tokens=settings["agent_tokens"],
                                       command_timeout=settings["agent_command_timeout"])
        questions = list(task["results"][0].keys())
        with env:  # stopped on every way out: the container removed, the host processes killed
            try:
                result = agent_mod.CoreAgent(ctx.model, env, questions, limits).run(prompt)
                env.copy_out(workspace)  # report.json and whatever else the agent wrote
            except EnvError as exc:
                return {**base, "status": "env_error", "message": f"environment failed: {exc}"}
            trajectory = agent_mod.write_trajectory(ctx.run_dir, capsule_id, result,
                                                    {"env": base["env"], "prompt": prompt})
            base.update(end_reason=result.end_reason, generation=result.accounting, trajectory=trajectory)
            if result.end_reason == "model_error":
                return {**base, "status": "model_error", "message": f"agent stopped: {result.message}"}
            submission = scorer.load_submission(workspace, result.final_answer)
        out = {**base, **self._score(task, submission, settings, ctx.run_dir, capsule_id, prompt)}
        if result.end_reason != "submitted":
            ended = f"agent ended without submitting ({result.end_reason}): {result.message}"
            out["message"] = f"{ended}; {out['message']}" if out["message"] else ended
        return out

    def _score(self, task: dict[str, Any], submission: scorer.Submission, settings: dict[str, Any],
               run_dir: Any, capsule_id: str, prompt: str) -> dict[str, Any]:
        if submission.warning:
            warnings.warn(f"core-bench {capsule_id}: {submission.warning}", stacklevel=2)
        score = scorer.score_report(task["results"], submission.report, upstream_abort=settings["upstream_abort"])
        out = {**score.to_record(), "report_source": submission.source, "report_warning": submission.warning,
               "status": "pass" if score.all_correct else "fail", "message": failure_message(score, submission)}
        save_artifacts(run_dir, capsule_id, prompt, submission)
        return out

    # ------------------------------------------------------------------ summary

    def summarize(self, records: list[dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any]:
        return summarize(records, settings)


def tasks_entry(task: dict[str, Any], split: str) -> Task:
    cid = task["capsule_id"]
    sample = Sample(id=cid, task_id=cid, split=split, markers=("core_bench", split), data=task)
    return Task(id=cid, split=split, samples=[sample], data=task)


def failure_message(score: scorer.CapsuleScore, submission: scorer.Submission) -> str:
    if score.all_correct:
        return ""
    wrong = [v for v in score.verdicts if not v.correct]
    total = len(score.verdicts)
    shown = "; ".join(f"{v.question[:60]!r}: {v.note or f'got {v.submitted!r}'}" for v in wrong[:MAX_SHOWN_WRONG])
    more = f" (+{len(wrong) - MAX_SHOWN_WRONG} more)" if len(wrong) > MAX_SHOWN_WRONG else ""
    head = f"{total - len(wrong)}/{total} questions correct"
    if submission.warning:
        head += f" [{submission.warning}]"
    return f"{head}; wrong: {shown}{more}"


def save_artifacts(run_dir: Any, capsule_id: str, prompt: str, submission: scorer.Submission) -> None:
    """Keep the prompt and the submission next to the run's records, for reading a failure later."""
    if run_dir is None:
        return
    folder = Path(run_dir) / "artifacts" / capsule_id
    try:
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        (folder / "prompt.txt").write_text(prompt, encoding="utf-8")
        (folder / "submission.json").write_text(
            json.dumps({"source": submission.source, "warning": submission.warning, "report": submission.report},
                       indent=2, default=repr), encoding="utf-8")
    except OSError as exc:  # artifacts are a convenience; the record holds the verdicts
        warnings.warn(f"core-bench {capsule_id}: could not save artifacts in {folder}: {exc}", stacklevel=2)


# --------------------------------------------------------------------------- metrics

def _ratio(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


def compute_metrics(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Upstream's aggregates; every counted capsule is in the denominators, errors included.

    Written/figure task accuracy count a capsule once it got all its written (figure) questions
    right, over the capsules that have such questions, as upstream does.
    """
    counted = [r for r in records if r.get("scored", True) and r.get("status") != "skipped"]
    written_tasks = [r for r in counted if r.get("total_written", 0) > 0]
    figure_tasks = [r for r in counted if r.get("total_figure", 0) > 0]
    correct_w = sum(r.get("correct_written", 0) for r in counted)
    correct_f = sum(r.get("correct_figure", 0) for r in counted)
    total_w = sum(r.get("total_written", 0) for r in counted)
    total_f = sum(r.get("total_figure", 0) for r in counted)
    metrics: dict[str, Any] = {
        "capsules": len(counted),
        "correct_capsules": sum(1 for r in counted if r.get("status") == "pass"),
        "written_tasks": len(written_tasks),
        "correct_written_tasks": sum(1 for r in written_tasks if r.get("correct_written") == r["total_written"]),
        "figure_tasks": len(figure_tasks),
        "correct_figure_tasks": sum(1 for r in figure_tasks if r.get("correct_figure") == r["total_figure"]),
        "questions": total_w + total_f, "correct_questions": correct_w + correct_f,
        "written_questions": total_w, "correct_written_questions": correct_w,
        "figure_questions": total_f, "correct_figure_questions": correct_f,
    }
    ratios = {
        "capsule_accuracy": ("correct_capsules", "capsules"),
        "written_task_accuracy": ("correct_written_tasks", "written_tasks"),
        "figure_task_accuracy": ("correct_figure_tasks", "figure_tasks"),
        "question_accuracy": ("correct_questions", "questions"),
        "written_question_accuracy": ("correct_written_questions", "written_questions"),
        "figure_question_accuracy": ("correct_figure_questions", "figure_questions"),
    }
    for name, (num, den) in ratios.items():
        value = _ratio(metrics[num], metrics[den])
        if value is not None:  # no such questions in this run: the metric does not exist
            metrics[name] = value
    for status, count in count_statuses(records).items():
        metrics[f"status_{status}"] = count
    return metrics


def count_statuses(records: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for record in records:
        status = record.get("status", "error")
        counts[status] = counts.get(status, 0) + 1
    return dict(sorted(counts.items()))


def _fraction(metrics: dict[str, Any], num: str, den: str) -> str:
    if not metrics[den]:
        return "n/a"
    return f"{metrics[num]}/{metrics[den]} ({100 * metrics[num] / metrics[den]:.1f}%)"


def summarize(records: list[dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any]:
    m = compute_metrics(records)
    statuses = ", ".join(f"{k}={v}" for k, v in count_statuses(records).items()) or "none"
    head = (f"CORE-Bench {settings.get('split', '?')} split, difficulty {settings.get('difficulty', '?')}, "
            f"hints {'on' if settings.get('hints') else 'off'}"
            f"{', upstream abort' if settings.get('upstream_abort') else ''}")
    lines = [
        head,
        f"capsules correct:        {_fraction(m, 'correct_capsules', 'capsules')}",
        f"  written-question tasks {_fraction(m, 'correct_written_tasks', 'written_tasks')}",
        f"  figure-question tasks  {_fraction(m, 'correct_figure_tasks', 'figure_tasks')}",
        f"questions correct:       {_fraction(m, 'correct_questions', 'questions')}",
        f"statuses: {statuses}",
    ]
    return {"metrics": m, "terminal": lines, "markdown": render_markdown(records, m, lines)}


def _cell(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=repr)
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _expected_cell(question: dict[str, Any]) -> str:
    expected = question.get("expected")
    if question.get("kind") == "numeric" and isinstance(expected, list) and len(expected) == 2:
        return f"[{expected[0]:.6g}, {expected[1]:.6g}]"
    return _cell(expected)


def render_markdown(records: list[dict[str, Any]], metrics: dict[str, Any], lines: list[str]) -> str:
    out = ["## CORE-Bench", "", *[f"- {line.strip()}" for line in lines], ""]
    for record in sorted(records, key=lambda r: str(r.get("id", ""))):
        status = record.get("status", "?")
        gpu = " (GPU)" if record.get("gpu_required") else ""
        out.append(f"### {record.get('id', '?')}{gpu}: {status}")
        if record.get("message"):
            out += ["", _cell(record["message"], 300)]
        questions = record.get("questions") or []
        if questions:
            out += ["", "| question | type | submitted | expected | verdict |", "|---|---|---|---|---|"]
            for q in questions:
                kind = q.get("kind", "?") + (", figure" if q.get("figure") else "")
                submitted = _cell(q.get("submitted")) if q.get("answered") else "(missing)"
                verdict = "correct" if q.get("correct") else "wrong" + (f": {_cell(q['note'], 60)}" if q.get("note") else "")
                out.append(f"| {_cell(q.get('question', ''))} | {kind} | {submitted} | {_expected_cell(q)} | {verdict} |")
        out.append("")
    return "\n".join(out)


benchmark = CoreBench()
