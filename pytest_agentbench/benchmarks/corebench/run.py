"""Running CORE-Bench capsules: one ``CoreBenchRun`` per process, one solver chosen when it opens.

Each capsule is fetched and unpacked, copied into a fresh workspace with the files its difficulty
hides removed, handed to the solver (the oracle writes the reference answers; a user's own client
runs its ``run_agent``; our tool-using agent works in the ``bench_env`` environment), and the
report found there is scored as upstream does. Plain Python: a notebook can run one capsule::

    bench = CoreBench()
    settings = bench.configure(opts, "train")
    run = CoreBenchRun(settings, choose_solver(model, env), data_dir=..., cache_dir=..., run_dir=...)
    record = run.run_sample(sample)
"""
from __future__ import annotations

import json
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ...core.data import DataError
from ...core.io import write_atomic
from ...core.types import Sample
from ...envs import EnvError, EnvSkip
from . import agent as agent_mod
from . import capsules, dataset, prepare, scorer
from .options import agent_limits

NAME = "core-bench"
MAX_SHOWN_WRONG = 3  # questions named in a failing item's message


# --------------------------------------------------------------------------- the run


class CoreBenchRun:
    """CORE-Bench in one process: ``run_sample(sample)`` -> the capsule's record."""

    def __init__(self, settings: Mapping[str, Any], solver: "Solver", *, data_dir: Path, cache_dir: Path,
                 run_dir: Path | None = None, model: Any = None, env: Any = None) -> None:
        self.settings = dict(settings)
        self.solver = solver
        self.data_dir = Path(data_dir)
        self.cache_dir = Path(cache_dir)
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.model = model
        self.env = env
        capsules_dir = self.settings.get("capsules_dir")
        self.store = capsules.archive_store(self.data_dir, self.cache_dir, Path(capsules_dir) if capsules_dir else None)
        self.extract_root = self.cache_dir / "capsules" / "extracted"
        self._templates: dict[str, str] | None = None

    def templates(self) -> dict[str, str]:
        if self._templates is None:
            self._templates = dataset.load_prompts(self.data_dir)
        return self._templates

    def base_record(self, sample: Sample) -> dict[str, Any]:
        written, figure = scorer.question_totals(sample.data["results"])
        settings = self.settings
        return {
            "benchmark": NAME, "task": sample.task_id, "id": sample.id, "split": sample.split, "scored": True,
            "difficulty": settings["difficulty"], "hints": settings["hints"],
            "upstream_abort": settings["upstream_abort"], "gpu_required": None,
            "correct_written": 0, "total_written": written, "correct_figure": 0, "total_figure": figure,
        }

    def run_sample(self, sample: Sample) -> dict[str, Any]:
        task = sample.data
        record = self.base_record(sample)
        try:
            capsule_root = capsules.ensure_capsule(task["capsule_id"], self.store, self.extract_root)
            templates = self.templates()
        except (capsules.CapsuleError, dataset.DatasetError, DataError) as exc:
            return {**record, "status": "env_error", "message": str(exc)}
        record["gpu_required"] = prepare.capsule_needs_gpu(capsule_root)
        prompt = prepare.render_prompt(templates, task, self.settings["difficulty"], self.settings["hints"])
        return {**record, **self.solver.solve(self, sample, capsule_root, prompt)}

    def score(self, task: Mapping[str, Any], submission: scorer.Submission, prompt: str) -> dict[str, Any]:
        """The record fragment of a submission: verdicts, counts, status and message; saves the artifacts."""
        capsule_id = task["capsule_id"]
        if submission.warning:
            warnings.warn(f"core-bench {capsule_id}: {submission.warning}", stacklevel=2)
        score = scorer.score_report(task["results"], submission.report, upstream_abort=self.settings["upstream_abort"])
        out = {**score.to_record(), "report_source": submission.source, "report_warning": submission.warning,
               "status": "pass" if score.all_correct else "fail", "message": failure_message(score, submission)}
        save_artifacts(self.run_dir, capsule_id, prompt, submission)
        return out

    def close(self) -> None:
        """Nothing is held between capsules (each environment is stopped with its item)."""


# --------------------------------------------------------------------------- solvers


class Solver:
    """Turns a prepared capsule into a record fragment (status, verdicts, ...)."""

    def solve(self, run: CoreBenchRun, sample: Sample, capsule_root: Path, prompt: str) -> dict[str, Any]:
        raise NotImplementedError


class LocalSolver(Solver):
    """Works in a temporary workspace on this machine, removed afterwards; subclasses give the answers."""

    def solve(self, run: CoreBenchRun, sample: Sample, capsule_root: Path, prompt: str) -> dict[str, Any]:
        task = sample.data
        capsule_id = task["capsule_id"]
        # a cleanup failure (files the agent made undeletable) must not cost the verdict
        with tempfile.TemporaryDirectory(prefix=f"corebench-{capsule_id}-", ignore_cleanup_errors=True) as tmp:
            workspace = Path(tmp)
            try:
                prepare.prepare_workspace(capsule_root, workspace, capsule_id, run.settings["difficulty"])
            except OSError as exc:
                return {"status": "env_error", "message": f"preparing the workspace failed: {exc}"}
            outcome = self.answer(run, sample, workspace, prompt)
            if "status" in outcome:
                return outcome
            submission = scorer.load_submission(workspace, outcome.get("final_answer"))
        return run.score(task, submission, prompt)

    def answer(self, run: CoreBenchRun, sample: Sample, workspace: Path, prompt: str) -> dict[str, Any]:
        """``{"final_answer": ...}`` (report.json in the workspace wins over it), or a status."""
        raise NotImplementedError


class OracleSolver(LocalSolver):
    """Writes the first reference run as report.json: every capsule must score correct."""

    def answer(self, run: CoreBenchRun, sample: Sample, workspace: Path, prompt: str) -> dict[str, Any]:
        (workspace / scorer.REPORT_NAME).write_text(json.dumps(sample.data["results"][0], indent=2))
        return {"final_answer": None}


@dataclass
class ClientSolver(LocalSolver):
    """A user's own client: ``model.run_agent(workspace=, prompt=, sample=, ctx=)`` (ctx is the run)."""

    model: Any

    def answer(self, run: CoreBenchRun, sample: Sample, workspace: Path, prompt: str) -> dict[str, Any]:
        try:
            return {"final_answer": self.model.run_agent(workspace=workspace, prompt=prompt, sample=sample, ctx=run)}
        except Exception as exc:  # the agent or its model service failed: not a verdict on the answers
            return {"status": "model_error", "message": f"agent failed: {type(exc).__name__}: {exc}"}


@dataclass
class Unsupported(LocalSolver):
    """A model that can do neither: every capsule is an error that says so."""

    message: str

    def answer(self, run: CoreBenchRun, sample: Sample, workspace: Path, prompt: str) -> dict[str, Any]:
        return {"status": "error", "message": self.message}


@dataclass
class Failing(Solver):
    """A setup that cannot run any capsule (e.g. no environment for the agent)."""

    message: str

    def solve(self, run: CoreBenchRun, sample: Sample, capsule_root: Path, prompt: str) -> dict[str, Any]:
        return {"status": "error", "message": self.message}


@dataclass
class AgentSolver(Solver):
    """Our tool-using agent (``agent.CoreAgent``) on a chat client, in the ``bench_env`` environment."""

    model: Any
    factory: Any  # the environment factory: start(workspace, needs_gpu=, name=) -> Environment
    kind: str  # the factory's kind ("host", "docker"), recorded as "env"
    keep_workspaces: bool = False

    def solve(self, run: CoreBenchRun, sample: Sample, capsule_root: Path, prompt: str) -> dict[str, Any]:
        task = sample.data
        capsule_id = task["capsule_id"]
        settings = run.settings
        workspace = Path(tempfile.mkdtemp(prefix=f"corebench-{capsule_id}-"))
        try:
            prepare.prepare_workspace(capsule_root, workspace, capsule_id, settings["difficulty"])
        except OSError as exc:
            shutil.rmtree(workspace, ignore_errors=True)
            return {"status": "env_error", "message": f"preparing the workspace failed: {exc}"}
        kept = self.keep_workspaces
        base: dict[str, Any] = {"env": self.kind}
        if kept:
            base["workspace"] = str(workspace)
        try:
            env = self.factory.start(workspace, needs_gpu=bool(prepare.capsule_needs_gpu(capsule_root)),
                                     name=f"core-bench/{capsule_id}")
        except EnvSkip as exc:
            if not kept:
                shutil.rmtree(workspace, ignore_errors=True)
            return {**base, "status": "skipped", "message": f"{capsule_id} {exc}"}
        except EnvError as exc:
            if not kept:
                shutil.rmtree(workspace, ignore_errors=True)
            return {**base, "status": "env_error", "message": str(exc)}
        questions = list(task["results"][0].keys())
        with env:  # stopped on every way out: the container removed, the host processes killed
            try:
                result = agent_mod.CoreAgent(self.model, env, questions, agent_limits(settings)).run(prompt)
                env.copy_out(workspace)  # report.json and whatever else the agent wrote
            except EnvError as exc:
                return {**base, "status": "env_error", "message": f"environment failed: {exc}"}
            trajectory = agent_mod.write_trajectory(run.run_dir, capsule_id, result,
                                                    {"env": base["env"], "prompt": prompt})
            base.update(end_reason=result.end_reason, generation=result.accounting, trajectory=trajectory)
            if result.end_reason == "model_error":
                return {**base, "status": "model_error", "message": f"agent stopped: {result.message}"}
            submission = scorer.load_submission(workspace, result.final_answer)
        out = {**base, **run.score(task, submission, prompt)}
        if result.end_reason != "submitted":
            ended = f"agent ended without submitting ({result.end_reason}): {result.message}"
            out["message"] = f"{ended}; {out['message']}" if out["message"] else ended
        return out


def choose_solver(model: Any, env: Any) -> Solver:
    """The solver for this model, chosen once per run (in this order):

    * the oracle (``model.is_oracle``): writes the reference answers;
    * a user's own client with ``run_agent(workspace=, prompt=, sample=, ctx=)``;
    * a chat client with ``complete(...)``: our tool-using agent, in the environment factory ``env``;
    * anything else: every capsule is an error saying the model has no CORE-Bench agent.
    """
    if getattr(model, "is_oracle", False):
        return OracleSolver()
    if callable(getattr(model, "run_agent", None)):
        return ClientSolver(model)
    if callable(getattr(model, "complete", None)):
        if env is None or not callable(getattr(env, "start", None)):
            return Failing("the bench_env fixture gave no environment factory with start()")
        return AgentSolver(model, env, kind=getattr(env, "kind", type(env).__name__),
                           keep_workspaces=bool(getattr(env, "keep_workspaces", False)))
    label = getattr(model, "name", None) or type(model).__name__
    return Unsupported(f"model {label} has no CORE-Bench agent yet")


# --------------------------------------------------------------------------- messages and artifacts


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


def save_artifacts(run_dir: Path | None, capsule_id: str, prompt: str, submission: scorer.Submission) -> None:
    """Keep the prompt and the submission next to the run's records, for reading a failure later."""
    if run_dir is None:
        return
    folder = Path(run_dir) / "artifacts" / capsule_id
    try:
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        write_atomic(folder / "prompt.txt", prompt)
        write_atomic(folder / "submission.json", json.dumps(
            {"source": submission.source, "warning": submission.warning, "report": submission.report},
            indent=2, default=repr))
    except OSError as exc:  # artifacts are a convenience; the record holds the verdicts
        warnings.warn(f"core-bench {capsule_id}: could not save artifacts in {folder}: {exc}", stacklevel=2)
