"""Running CORE-Bench capsules: one ``CoreBenchRun`` per process, one solver chosen when it opens.

Each capsule is fetched and unpacked, copied into a fresh workspace with the files its difficulty
hides removed, handed to the solver (the oracle writes the reference answers; a user's own client
runs its ``run_agent``; our tool-using agent works in the ``bench_env`` environment), and the
report found there is scored as upstream does. Plain Python: a notebook can run one capsule::

    bench = CoreBench()
    settings = bench.configure(opts, "train")
    run = CoreBenchRun(settings, choose_solver(model, env), data_dir=..., cache_dir=..., run_dir=...)  # or files=
    record = run.run_sample(sample)
"""

from __future__ import annotations

import json
import shlex
import socket
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core import records as rec
from ...core.data import DataError
from ...core.errors import warn_about
from ...core.io import DirectoryFiles, RunFiles
from ...core.text import printable
from ...core.trees import remove_tree, scratch_folder
from ...core.types import Sample
from ...core.version import package_version
from ...envs import EnvError, EnvFactory, EnvSkip
from ...sandbox.containment import EXTERNAL_AGENT_DOCKER, NO_PYTHON
from ...sandbox.result import ExecResult
from .. import agent_layers, agents
from ..base import BenchRun
from . import agent as agent_mod
from . import capsules, dataset, grading_v11, prepare, reach, regrade, review, scorer
from .options import DEFAULT_WORKSPACE_ROOT, agent_limits

NAME = "core-bench"
MAX_SHOWN_WRONG = 3  # questions named in a failing item's message


# --------------------------------------------------------------------------- the run


class CoreBenchRun(BenchRun):
    """CORE-Bench in one process: ``run_sample(sample)`` -> the capsule's record."""

    def __init__(
        self,
        settings: Mapping[str, Any],
        solver: Solver,
        *,
        data_dir: Path,
        cache_dir: Path,
        run_dir: Path | None = None,
        model: Any = None,
        env: Any = None,
        split_size: int | None = None,
        files: RunFiles | None = None,
    ) -> None:
        self.settings = dict(settings)
        self.settings.setdefault("workspace_root", DEFAULT_WORKSPACE_ROOT)
        self.settings.setdefault("dataset_revision", dataset.UPSTREAM_REV)
        self.split_size = split_size
        self.review: review.Review | None = None  # --bench-review (set by the benchmark when it opens the run)
        self.solver = solver
        self.data_dir = Path(data_dir)
        self.cache_dir = Path(cache_dir)
        self.run_dir = Path(run_dir) if run_dir is not None else None
        # trajectories and artifacts go through the run's file sink only (RunSpec.files), never into run_dir
        self.files = (
            files if files is not None else (DirectoryFiles(self.run_dir) if self.run_dir is not None else None)
        )
        self.model = model
        self.env = env
        capsules_dir = self.settings.get("capsules_dir")
        self.data_set = dataset.data_set(self.settings.get("dataset"))  # --bench-dataset: v1, v1.1, v1.1-ood
        self.store = capsules.archive_store(
            self.data_dir, self.cache_dir, Path(capsules_dir) if capsules_dir else None, self.data_set.capsule_folder
        )
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
            "benchmark": NAME,
            "task": sample.task_id,
            "id": sample.id,
            "split": sample.split,
            "scored": True,
            "difficulty": settings["difficulty"],
            "hints": settings["hints"],
            "upstream_abort": settings["upstream_abort"],
            "gpu_required": None,
            "dataset_revision": settings["dataset_revision"],
            "split_size": self.split_size,
            "workspace_root": settings["workspace_root"],
            "correct_written": 0,
            "total_written": written,
            "correct_figure": 0,
            "total_figure": figure,
            "report_status": None,
            "report_path": None,
            "submission_source": None,
            **dataset.record_fields(settings),
            **({"grading": self.data_set.grading} if self.data_set.grading != "v1" else {}),
        }

    def run_sample(self, sample: Sample) -> rec.Record:
        return rec.sample_record(NAME, sample, self.sample_fields(sample))

    def sample_fields(self, sample: Sample) -> dict[str, Any]:
        """The fields of the sample's record: its settings, the capsule's, the solver's verdict."""
        task = sample.data
        record = self.base_record(sample)
        if isinstance(self.solver, RegradeSolver):  # saved answers only: no capsule, no agent, no model
            return review.apply_review({**record, **self.solver.regrade(self, sample)}, self.review)
        preinstalled = self.settings.get("preinstalled_input_dir")
        try:
            templates = self.templates()
            # preinstalled inputs: the capsule is inside the environment image, nothing is fetched or uploaded
            capsule = (
                None
                if preinstalled
                else capsules.prepare_capsule(
                    task["capsule_id"], self.store, self.extract_root, published=self.data_set.capsule_url
                )
            )
        except (capsules.CapsuleError, dataset.DatasetError, DataError, OSError) as exc:
            return {**record, "status": "env_error", "message": str(exc)}
        capsule_root = None if capsule is None else capsule.folder
        record["capsule_source"] = "preinstalled" if capsule is None else capsule.source
        if capsule is not None and capsule.sha256 is not None:
            record["capsule_sha256"] = capsule.sha256
        if capsule_root is not None:
            record["gpu_required"] = self.needs_gpu(task, capsule_root)
        prompt = prepare.render_prompt(
            templates, task, self.settings["difficulty"], self.settings["hints"], root=self.settings["workspace_root"]
        )
        # --bench-review: the overrides of this capsule beside the automatic verdicts
        return review.apply_review({**record, **self.solver.solve(self, sample, capsule_root, prompt)}, self.review)

    def needs_gpu(self, task: Mapping[str, Any], capsule_root: Path) -> bool | None:
        """Whether the capsule runs with a GPU: a v1.1 set's manifest flag (as its harness decides), else what
        REPRODUCING.md says (None: it does not say)."""
        if self.data_set.manifest is not None:
            return bool(task.get("gpu"))
        return prepare.capsule_needs_gpu(capsule_root)

    def prepare_workspace(self, capsule_root: Path, workspace: Path, capsule_id: str) -> Path:
        """The capsule copied into ``workspace`` as the run's data set prepares it (v1: by difficulty; v1.1: the
        hard workspace with every results/ folder removed)."""
        return prepare.prepare_workspace(
            capsule_root, workspace, capsule_id, self.settings["difficulty"], rules=self.data_set.grading
        )

    def manifest_check(self, sample: Sample, raw: bytes) -> tuple[bool, str | None]:
        """(uses_gpu, None) when the preinstalled manifest fits this item, else (False, why not)."""
        return prepare.check_manifest(
            raw,
            task_id=sample.id,
            split=sample.split,
            difficulty=self.settings["difficulty"],
            revision=dataset.UPSTREAM_REV,
        )

    def score(
        self, task: Mapping[str, Any], submission: scorer.Submission, prompt: str, key: str | None = None
    ) -> dict[str, Any]:
        """The record fragment of a submission: verdicts, counts, status and message; saves the artifacts under
        ``artifacts/<key>/`` (``key``: the sample's, ``capsule-1[attempt2]`` with --bench-attempts; default the
        capsule)."""
        capsule_id = task["capsule_id"]
        if submission.warning:
            warn_about(f"core-bench {capsule_id}: {submission.warning}", f"core-bench/{key or capsule_id}")
        score = self.grade(task, submission.report)
        root = self.settings["workspace_root"]
        out = {
            **score.to_record(),
            "report_source": submission.source,
            "report_warning": submission.warning,
            "report_status": submission.report_status,
            "report_path": f"{root}/{submission.report_path}" if submission.report_path else None,
            "submission_source": submission.submission_source,
            "status": "pass" if score.all_correct else "fail",
            "message": failure_message(score, submission),
        }
        if submission.text_repaired:
            out["text_repaired"] = submission.text_repaired
        save_artifacts(self.files, key or capsule_id, prompt, submission)
        return out

    def grade(self, task: Mapping[str, Any], report: Mapping[str, Any]) -> scorer.CapsuleScore:
        """The capsule's verdicts by the data set's grading rules (v1 or v1.1), upstream's abort when asked for."""
        abort = bool(self.settings["upstream_abort"])
        if self.data_set.grading == "v1.1":
            return grading_v11.score_report_v11(task["results"], report, task["capsule_id"], upstream_abort=abort)
        return scorer.score_report(task["results"], report, upstream_abort=abort)

    def close(self) -> None:
        """Nothing is held between capsules (each environment is stopped with its item)."""


# --------------------------------------------------------------------------- solvers


class Solver:
    """Turns a prepared capsule into a record fragment (status, verdicts, ...)."""

    def solve(self, run: CoreBenchRun, sample: Sample, capsule_root: Path | None, prompt: str) -> dict[str, Any]:
        """``capsule_root`` is None with preinstalled inputs (the capsule is in the environment)."""
        raise NotImplementedError


class LocalSolver(Solver):
    """Works in a temporary workspace on this machine, removed afterwards; subclasses give the answers."""

    def solve(self, run: CoreBenchRun, sample: Sample, capsule_root: Path | None, prompt: str) -> dict[str, Any]:
        task = sample.data
        capsule_id = task["capsule_id"]
        # a cleanup failure (files the agent made undeletable) must not cost the verdict
        extra: dict[str, Any] = {}
        if capsule_root is None:  # preinstalled inputs: this solver's environment is this machine
            capsule_root, extra, problem = preinstalled_here(run, sample)
            if problem:
                return {"status": "env_error", "message": problem}
        with scratch_folder(f"corebench-{capsule_id}-") as workspace:
            try:
                run.prepare_workspace(capsule_root, workspace, capsule_id)
            except OSError as exc:
                return {**extra, "status": "env_error", "message": f"preparing the workspace failed: {exc}"}
            outcome = self.answer(run, sample, workspace, prompt)
            if "status" in outcome:
                return {**extra, **outcome}
            submission = scorer.load_submission(workspace, outcome.get("final_answer"))
        return {**extra, **run.score(task, submission, prompt, key=sample.key)}

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
class RegradeSolver(Solver):
    """Re-grades the answers another run saved (``regrade.py``) by this run's data set and rules."""

    folder: Path

    def regrade(self, run: CoreBenchRun, sample: Sample) -> dict[str, Any]:
        origin = regrade.regrade_fields(self.folder, run.data_set.grading)
        submission, problem = regrade.load_saved(self.folder, sample.key)
        if submission is None:
            return {**origin, "status": "error", "message": problem}
        prompt_file = self.folder / "artifacts" / sample.key / "prompt.txt"
        try:
            prompt = prompt_file.read_text(encoding="utf-8", errors="replace")
        except OSError:
            prompt = ""
        return {**origin, **run.score(sample.data, submission, prompt, key=sample.key)}

    def solve(self, run: CoreBenchRun, sample: Sample, capsule_root: Path | None, prompt: str) -> dict[str, Any]:
        return self.regrade(run, sample)


@dataclass
class Failing(Solver):
    """A setup that cannot run any capsule (e.g. no environment for the agent)."""

    message: str

    def solve(self, run: CoreBenchRun, sample: Sample, capsule_root: Path | None, prompt: str) -> dict[str, Any]:
        return {"status": "error", "message": self.message}


@dataclass
class AgentSolver(Solver):
    """Our tool-using agent (``agent.CoreAgent``) on a chat client, in the ``bench_env`` environment."""

    model: Any
    factory: Any  # the environment factory: start(workspace, needs_gpu=, name=) -> Environment
    kind: str  # the factory's kind ("host", "docker"), recorded as "env"
    keep_workspaces: bool = False

    def isolation(self, nested: bool) -> str:
        """What the record says of the agent's isolation."""
        if nested:
            return "none (privileged)"
        if isinstance(self.factory, EnvFactory):
            return self.factory.describe_isolation()
        return "unknown (a user's environment factory)"

    def solve(self, run: CoreBenchRun, sample: Sample, capsule_root: Path | None, prompt: str) -> dict[str, Any]:
        task = sample.data
        capsule_id = task["capsule_id"]
        settings = run.settings
        root = settings["workspace_root"]
        workspace = Path(tempfile.mkdtemp(prefix=f"corebench-{capsule_id}-"))
        kept = self.keep_workspaces
        nested = bool(settings.get("docker_dind")) and settings["difficulty"] == "medium"
        base: dict[str, Any] = {"env": self.kind, "isolation": self.isolation(nested)}
        if kept:
            base["workspace"] = str(workspace)

        def give_up(status: str, message: str, env: Any = None, unplaced: str = "") -> dict[str, Any]:
            if env is not None:
                env.stop()
            elif not kept:
                remove_tree(workspace)
            out = {**base, "status": status, "message": message}
            return {**out, rec.UNPLACED_FIELD: unplaced} if unplaced else out

        preinstalled = settings.get("preinstalled_input_dir")
        # the host environment runs on this machine: preinstalled inputs are this machine's folder, copied here
        here = capsule_root is None and self.kind == "host"
        if here:
            capsule_root, gpu_fields, problem = preinstalled_here(run, sample)
            if problem:
                return give_up("env_error", problem)
            base.update(gpu_fields)
        if capsule_root is not None:
            try:
                run.prepare_workspace(capsule_root, workspace, capsule_id)
            except OSError as exc:
                return give_up("env_error", f"preparing the workspace failed: {exc}")
            needs_gpu = bool(base["gpu_required"] if here else run.needs_gpu(task, capsule_root))
        else:
            needs_gpu = False  # decided by the manifest, read in the environment
        # every other copy of the capsule stays out of the agent's reach (reach.py)
        copies = reach.capsule_copies(run.store, run.extract_root, capsule_root, preinstalled if here else None)
        reach_options = self.reach_options(task, copies)
        try:
            env = self.start(workspace, needs_gpu, capsule_id, root, nested, reach_options)
            if capsule_root is None:
                uses_gpu, problem, gpu_note = self.copy_preinstalled(run, sample, env)
                if problem:
                    return give_up("env_error", problem, env)
                base.update(gpu_note)
                if uses_gpu:  # the manifest wins: a fresh environment with the GPU, the inputs copied again
                    env.stop()
                    workspace = Path(tempfile.mkdtemp(prefix=f"corebench-{capsule_id}-"))
                    env = self.start(workspace, True, capsule_id, root, nested, reach_options)
                    _, problem, _ = self.copy_preinstalled(run, sample, env)
                    if problem:
                        return give_up("env_error", problem, env)
        except EnvError as exc:
            return give_up("env_error", str(exc), unplaced=exc.unplaced)
        workdir = getattr(env, "workdir", "") or root
        if workdir != root:  # not applied (the host without isolation): prompt and record name the real folder
            base.update(
                workdir=workdir,
                workspace_root_note=getattr(env, "workdir_note", "")
                or f"{root} not applied by the {self.kind} environment; commands ran in {workdir}",
            )
            prompt = prepare.render_prompt(
                run.templates(), task, settings["difficulty"], settings["hints"], root=workdir
            )
        questions = list(task["results"][0].keys())
        with env:  # stopped on every way out: the container removed, the host processes killed
            try:
                result = self.run_agent(run, sample, env, questions, prompt)
                env.copy_out(workspace)  # report.json and whatever else the agent wrote
                base.update(copy_out_fields(env))
            except EnvError as exc:
                return {**base, "status": "env_error", "message": f"environment failed: {exc}"}
            trajectory = agent_mod.write_trajectory(
                run.files, sample.key, result, {"env": base["env"], "prompt": prompt, **self.trajectory_extra(result)}
            )
            base.update(end_reason=result.end_reason, generation=result.accounting, trajectory=trajectory)
            base.update(self.record_fields(result))
            if result.end_reason == "model_error":
                return {**base, "status": "model_error", "message": f"agent stopped: {result.message}"}
            if result.end_reason == rec.BUDGET:  # not scored: upstream's cost cap ended the task unsolved
                return {**base, "status": rec.BUDGET, "message": f"agent stopped: {result.message}"}
            env.end_processes()  # the agent's background jobs could otherwise swap report.json while it is read
            submission = scorer.load_submission(workspace, result.final_answer)
        out = {**base, **run.score(task, submission, prompt, key=sample.key)}
        out = with_tree_bound(out, env)
        if workdir != root and submission.report_path:
            out["report_path"] = f"{workdir}/{submission.report_path}"
        if nested:
            out["nested_docker"] = True
        return with_end_reason(out, result)

    def run_agent(self, run: CoreBenchRun, sample: Sample, env: Any, questions: list[str], prompt: str) -> Any:
        """The agent's run in the started ``env``: an ``agent.AgentResult``."""
        return agent_mod.CoreAgent(
            self.model, env, questions, agent_limits(run.settings), sample_index=sample.attempt - 1
        ).run(prompt)

    def trajectory_extra(self, result: Any) -> dict[str, Any]:
        """What the trajectory file keeps besides the conversation (an external agent's own log)."""
        return {}

    def record_fields(self, result: Any) -> dict[str, Any]:
        """The record's fields of the agent itself: its name and version (the built-in agent's version is the
        plugin's), so every record says which scaffold produced it."""
        return {"agent": {"name": agents.BUILTIN, "version": package_version()}}

    def reach_options(self, task: Mapping[str, Any], copies: tuple[str, ...]) -> dict[str, Any]:
        """What ``start`` keeps from the agent: the capsule's publication hosts (both environments) and, on the
        host, the folders holding other copies of the capsule. A user's own factory gets neither (it decides
        what its agent sees)."""
        if not isinstance(self.factory, EnvFactory):
            return {}
        options: dict[str, Any] = {"blocked_hosts": reach.blocked_hosts(task)}
        if self.kind == "host":
            options["hidden"] = copies
        return options

    def start(
        self,
        workspace: Path,
        needs_gpu: bool,
        capsule_id: str,
        root: str,
        nested: bool,
        reach_options: Mapping[str, Any] | None = None,
    ) -> Any:
        """An environment on ``workspace`` at ``root``; no GPU to be had is an env_error (it counts, as upstream)."""
        options: dict[str, Any] = {"workdir": root, **(reach_options or {})}
        if nested:
            options["nested_docker"] = True
        try:
            return self.factory.start(workspace, needs_gpu=needs_gpu, name=f"core-bench/{capsule_id}", **options)
        except EnvSkip as exc:
            # the host is named: under remote workers, which machine lacked the GPU
            raise EnvError(
                f"{capsule_id} {exc} (host {socket.gethostname()}); deselect GPU capsules with "
                f'-m "not gpu", or resume the run with a host that has one',
                unplaced="gpu",
            ) from None

    @staticmethod
    def copy_preinstalled(run: CoreBenchRun, sample: Sample, env: Any) -> tuple[bool, str | None, dict[str, Any]]:
        """Check the manifest, copy the preinstalled capsule into the environment's fresh workspace (the difficulty
        applied there), then delete the preinstalled folder, so the agent finds no copy with the answers."""
        folder = run.settings["preinstalled_input_dir"]
        try:
            raw = env.read_file(f"{folder}/{prepare.MANIFEST}")
        except (OSError, ValueError) as exc:
            return False, f"preinstalled inputs: cannot read {folder}/{prepare.MANIFEST} in the environment: {exc}", {}
        uses_gpu, problem = run.manifest_check(sample, raw)
        if problem:
            return False, problem, {}
        script = prepare.preinstalled_copy_script(folder, sample.id, run.settings["difficulty"])
        result = env.run(script, 600)
        if result.exit_code != 0:
            return (
                False,
                (
                    f"preinstalled inputs: copying {folder}/{sample.id} into the workspace failed "
                    f"(exit {result.exit_code}): {result.stderr[-500:]}"
                ),
                {},
            )
        probe = env.run(f"cat {shlex.quote(folder)}/{sample.id}/REPRODUCING.md 2>/dev/null", 60)
        said = prepare.needs_gpu(probe.stdout) if probe.exit_code == 0 else None
        remove = getattr(env, "remove_paths", None)
        if not callable(remove):
            return (
                False,
                (
                    f"preinstalled inputs: the {type(env).__name__} environment cannot delete {folder} (no "
                    f"remove_paths), so the agent would find the capsule's results there; use --bench-env=docker "
                    f"or --bench-env=host"
                ),
                {},
            )
        remove([folder])  # (EnvError when it cannot: the item is an env_error)
        return uses_gpu, None, prepare.gpu_evidence(uses_gpu, said)


@dataclass
class ExternalAgentSolver(AgentSolver):
    """An agent CLI someone else wrote (``--bench-agent``, ``benchmarks.agents``), run as model code in the item's
    environment and talking to the item's metering proxy (``models.proxy``) instead of the endpoint."""

    agent: Any = None  # an ``agents.ExternalAgent``
    layer: str | None = None  # in Docker: the image of the agent's layer over the task image

    def solve(self, run: CoreBenchRun, sample: Sample, capsule_root: Path | None, prompt: str) -> dict[str, Any]:
        if self.kind not in ("host", "docker"):
            return {
                "status": "error",
                "message": f"--bench-agent={self.agent.choice.name} runs in --bench-env=host or docker "
                f"(not {self.kind}); pass one of those",
            }
        try:
            if self.kind == "docker":  # (cached on the engine: a look-up after the run's check built it)
                self.layer = agent_layers.ensure_layer(self.factory, self.agent, run.cache_dir)
            else:
                self.agent.install(run.cache_dir)
        except agents.AgentInstallError as exc:
            return {"status": "env_error", "message": f"agent {self.agent.choice.label()}: {exc}"}
        return super().solve(run, sample, capsule_root, prompt)

    def reach_options(self, task: Mapping[str, Any], copies: tuple[str, ...]) -> dict[str, Any]:
        options = super().reach_options(task, copies)
        if options and self.kind == "docker":  # its container: the agent's layer, its user, its proxy's socket
            options.update(kind=EXTERNAL_AGENT_DOCKER, image=self.layer)
        elif options and self.agent.install_dir is not None:  # the install, read-only in the sandbox
            options["readable"] = (str(self.agent.install_dir),)
        return options

    def run_agent(self, run: CoreBenchRun, sample: Sample, env: Any, questions: list[str], prompt: str) -> Any:
        from ...models.proxy import MeteringProxy  # why: with the client, it imports the openai SDK (slow)

        limits = agent_limits(run.settings)
        listen = getattr(env, "loopback_listener", None)
        if not callable(listen):
            raise EnvError(f"the {self.kind} environment cannot give an external agent its model endpoint")
        # (python3 runs the per-command limit: asked before the agent starts, so only the environment answers)
        found = env.run(
            f'command -v python3 >/dev/null || exit 3; d="${{TMPDIR:-/tmp}}/{agents.AGENT_FOLDER}"; '
            'mkdir -p "$d" && cd "$d" && pwd',
            60,
        )
        if found.exit_code == 3:
            raise EnvError(NO_PYTHON)
        folder = found.stdout.strip()
        if found.exit_code != 0 or not folder.startswith("/"):
            raise EnvError(f"cannot make the agent's folder in the environment: {found.stderr.strip()[-300:]}")
        listener = listen()
        # where the agent dials when the listener is relayed to it (a unix socket into its container)
        host, port = getattr(env, "loopback_address", None) or (None, None)
        proxy = MeteringProxy(
            self.model,
            listener=listener,
            host=host,
            port=port,
            sample_index=sample.attempt - 1,
            price=limits.price,
            tokens=limits.tokens,
            cost=limits.cost,
            steps=self.agent.step_limit(limits.steps),
            # a spent budget or a failed endpoint ends the agent at once (in Docker its user's processes only,
            # so that the workspace can still be copied out)
            on_stop=env.end_commands,
            view=self.agent.request_view(),
        )
        setting = agents.AgentSetting(
            base_url=proxy.base_url,
            token=proxy.token,
            model=str(getattr(self.model, "name", "model")),
            prompt_file=f"{folder}/prompt.txt",
            answer_file=f"{folder}/answer.json",
            folder=folder,
            workdir=getattr(env, "workdir", "") or run.settings["workspace_root"],
            time_limit=limits.time,
            command_timeout=limits.command_timeout,
            steps=limits.steps,
        )
        env.write_file(setting.prompt_file, prompt)
        started = time.monotonic()
        with proxy:
            try:
                done = env.run(self.agent.command(setting), limits.time)
            except (OSError, EnvError) as exc:  # the proxy ended the environment's processes under the command
                if not proxy.state:
                    raise
                done = ExecResult(exit_code=None, stdout="", stderr=str(exc))
        accounting = {
            **proxy.accounting,
            "agent_seconds": round(time.monotonic() - started, 3),
            "agent_exit_code": done.exit_code,
            **ended_fields(self.agent.ended_commands(env.read_file, setting)),
        }
        final = None
        if proxy.state:
            reason, message = proxy.state, proxy.message
        else:
            final = self.agent.final_message(env.read_file, setting, done.stdout)
            if done.timed_out:
                reason, message = "time_limit", f"the agent ran out of its {limits.time:g} s"
            elif done.exit_code == 0:
                reason, message = "submitted", ""
            else:
                reason = "agent_error"
                message = f"the agent exited with {done.exit_code}: {printable(done.stderr.strip()[-500:])}"
        self.output = {"stdout": printable(done.stdout[-4000:]), "stderr": printable(done.stderr[-4000:])}
        return agent_mod.AgentResult(
            end_reason=reason,
            final_answer=final,
            message=message,
            accounting=accounting,
            trajectory=proxy.messages,
            turns=proxy.turns,
        )

    def trajectory_extra(self, result: Any) -> dict[str, Any]:
        return {"agent": self.agent.choice.to_record(), "agent_output": getattr(self, "output", {})}

    def record_fields(self, result: Any) -> dict[str, Any]:
        return {"agent": self.agent.choice.to_record()}


def ended_fields(ended: list[dict[str, Any]]) -> dict[str, Any]:
    """The record's evidence of the commands the plugin's per-command limit ended (the agent's command text
    made printable)."""
    shown = [{**entry, "command": printable(str(entry.get("command", "")))} for entry in ended]
    return {"commands_timed_out": len(ended), **({"commands_ended": shown} if shown else {})}


def with_end_reason(out: dict[str, Any], result: Any) -> dict[str, Any]:
    """The scored record, its message led by how the agent ended when it did not submit."""
    if result.end_reason != "submitted":
        ended = f"agent ended without submitting ({result.end_reason}): {result.message}"
        out["message"] = f"{ended}; {out['message']}" if out["message"] else ended
    return out


def with_tree_bound(out: dict[str, Any], env: Any) -> dict[str, Any]:
    """The scored record, failed when the workspace the agent left passed a bound of the walk that copies it
    (``core.trees``): what is past the bound was never looked at, so no verdict can stand on it."""
    past = getattr(getattr(env, "copied", None), "past_bound", None)
    if not past:
        return out
    message = f"the agent's workspace was not taken in whole: {past}"
    return {**out, "status": "fail", "message": f"{message}; {out['message']}" if out.get("message") else message}


def copy_out_fields(env: Any) -> dict[str, Any]:
    """``copy_out`` for the record when the copy left something out: the cap, the bytes kept, what was not
    copied (a user's environment may not say: nothing then)."""
    copied = getattr(env, "copied", None)
    if copied is None or getattr(copied, "complete", True):
        return {}
    return {"copy_out": copied.to_record()}


def preinstalled_here(run: CoreBenchRun, sample: Sample) -> tuple[Path, dict[str, Any], str | None]:
    """Preinstalled inputs on this machine (a solver or environment that runs here): the capsule's folder, the
    record's GPU fields, and None, or why the manifest does not fit."""
    folder = Path(run.settings["preinstalled_input_dir"])
    capsule_root = folder / sample.data["capsule_id"]
    try:
        raw = (folder / prepare.MANIFEST).read_bytes()
    except OSError as exc:
        return capsule_root, {}, f"preinstalled inputs: cannot read {folder / prepare.MANIFEST}: {exc}"
    uses_gpu, problem = run.manifest_check(sample, raw)
    if problem:
        return capsule_root, {}, problem
    return capsule_root, prepare.gpu_evidence(uses_gpu, prepare.capsule_needs_gpu(capsule_root)), None


def choose_solver(model: Any, env: Any, agent: agents.AgentChoice | None = None) -> Solver:
    """The solver for this model, chosen once per run (in this order):

    * the oracle (``model.is_oracle``): writes the reference answers;
    * a user's own client with ``run_agent(workspace=, prompt=, sample=, ctx=)``;
    * a chat client with ``complete(...)``: our tool-using agent, or the external ``agent`` (``--bench-agent``)
      talking to it through a metering proxy, in the environment factory ``env``;
    * anything else: every capsule is an error saying the model has no CORE-Bench agent.
    """
    if getattr(model, "is_oracle", False):
        return OracleSolver()
    if callable(getattr(model, "run_agent", None)):
        return ClientSolver(model)
    if callable(getattr(model, "complete", None)):
        if env is None or not callable(getattr(env, "start", None)):
            return Failing("the bench_env fixture gave no environment factory with start()")
        kind = getattr(env, "kind", type(env).__name__)
        keep = bool(getattr(env, "keep_workspaces", False))
        if agent is not None and agent.external:
            return ExternalAgentSolver(model, env, kind=kind, keep_workspaces=keep, agent=agents.make_agent(agent))
        return AgentSolver(model, env, kind=kind, keep_workspaces=keep)
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


def save_artifacts(files: RunFiles | None, key: str, prompt: str, submission: scorer.Submission) -> None:
    """Keep the prompt and the submission next to the run's records (``artifacts/<key>/``, ``key`` the sample's:
    one folder per attempt), for reading a failure later."""
    if files is None:
        return
    folder = f"artifacts/{key}"
    try:
        files.write(f"{folder}/prompt.txt", prompt)
        files.write(
            f"{folder}/submission.json",
            json.dumps(
                {"source": submission.source, "warning": submission.warning, "report": submission.report},
                indent=2,
                default=repr,
            ),
        )
        if submission.source == "final_answer" and submission.report:  # the answers as report.json would hold them
            files.write(f"{folder}/report.json", json.dumps(submission.report, indent=2, default=repr))
    except (OSError, ValueError) as exc:  # artifacts are a convenience; the record holds the verdicts
        warn_about(f"core-bench {key}: could not save artifacts in {folder}: {exc}", folder)
