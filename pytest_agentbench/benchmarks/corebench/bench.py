"""CORE-Bench as a pytest-agentbench benchmark: one item per capsule.

The class declares what the plugin and the report layer need (options, markers, gate metrics,
headlines, free settings); ``configure`` checks the options once, ``load_tasks`` reads the split and
``open_run`` chooses the solver once (see ``run.py``). Nothing here imports pytest.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ...core.errors import ConfigError
from ...core.io import natural_key
from ...core.jobs import HARNESS_MIB, TIME_MARGIN, JobRequest
from ...core.options import Settings, view
from ...core.records import Record, RecordLike, as_record
from ...core.records import counts_text as records_counts_text
from ...core.run_options import RunOptions
from ...core.text import printable
from ...core.types import Sample, Task
from ...envs.options import EnvOptions
from ...models.options import ModelOptions
from .. import agents
from ..base import Benchmark, RunSpec
from . import capsules, checks, dataset, page, prepare, reach, regrade, review, scorer
from .agent import CoreAgent
from .options import (
    CORE_BENCH_OPTIONS,
    CoreBenchOptions,
    agent_limits,
    default_env,
    describe_isolation,
    effective_settings,
)
from .run import NAME, CoreBenchRun, RegradeSolver, choose_solver

if TYPE_CHECKING:
    from ...envs import Environment


def agent_of(settings: Mapping[str, Any]) -> agents.AgentChoice:
    """The run's agent (``--bench-agent``) from its settings."""
    return agents.parse_agent(settings.get("agent"), settings.get("agent_command"))


class CoreBench(Benchmark):
    name = NAME
    splits = dataset.SPLITS
    default_split = "test"
    datasets = dataset.DATASETS  # --bench-dataset: v1 (default), v1.1, v1.1-ood
    default_dataset = dataset.V1
    group_items = False
    records_file = "records.jsonl"
    options = CORE_BENCH_OPTIONS
    markers = {
        "core_bench": "a CORE-Bench capsule (pytest-agentbench)",
        "gpu": "a CORE-Bench capsule that needs a GPU (pytest-agentbench)",
    }
    # short gate names (--bench-fail-under NAME=...) -> the metrics keys summarize() returns
    gate_metrics = {
        "accuracy": "capsule_accuracy",
        "written": "written_task_accuracy",
        "vision": "figure_task_accuracy",
        "questions": "question_accuracy",
    }
    headlines = {"accuracy": "item"}  # capsule accuracy: passed capsules over scored ones
    # where commands ran; and the review file, which changes no automatic verdict (a resumed run may add one)
    free_settings = frozenset({"env", "docker_dind", "workspace_root", "isolation", "review"})
    # report.html: the questions of each capsule, and the human review (page.py)
    answer_counts = {
        "written questions": ("correct_written", "total_written"),
        "figure questions": ("correct_figure", "total_figure"),
    }
    item_fields_shown = frozenset({"questions"})
    page_css = page.REVIEW_CSS
    metric_rows = page.METRIC_ROWS
    page_js = page.REVIEW_JS

    def __init__(self) -> None:
        self.split_sizes: dict[str, int] = {}  # capsules per split, from load_tasks (for "N of 45 selected")
        self.review: review.Review | None = None  # --bench-review, checked against the split by load_tasks
        self.manifest_sha256: str | None = None  # a v1.1 set's manifest as read by load_tasks

    def configure(self, opts: Settings, split: str) -> dict[str, Any]:
        """The effective settings of a run, from options already checked by their declarations."""
        if split not in dataset.SPLITS:
            raise ConfigError(f"unknown CORE-Bench split {split!r}; valid: {', '.join(dataset.SPLITS)}")
        settings = effective_settings(opts)
        check_data_set(opts, split)
        if settings["docker_dind"] and settings["env"] != "docker":
            raise ConfigError(
                "--bench-set=docker_dind=true runs medium items in a privileged Docker container: "
                "add --bench-env=docker (and an image with docker.io, --bench-set docker_image)"
            )
        if settings["docker_dind"] and settings["difficulty"] == "medium" and agent_of(settings).external:
            raise ConfigError(
                f"--bench-agent={agent_of(settings).label()} with --bench-set=docker_dind=true: an external agent "
                "runs as an unprivileged user and cannot drive the nested Docker engine that medium items start; "
                "run medium items with the built-in agent (--bench-agent=builtin) or without docker_dind"
            )
        overlap = reach.overlap(settings["workspace_root"], settings["preinstalled_input_dir"])
        if overlap:
            raise ConfigError(overlap)
        settings["isolation"] = describe_isolation(
            {**settings, "model": view(ModelOptions, opts).model, "host_network": view(EnvOptions, opts).host_network}
        )
        custom = view(CoreBenchOptions, opts).dataset_path
        settings["dataset_revision"] = dataset.dataset_revision(Path(custom) if custom else None)
        source = regrade.regrade_source(opts)
        if source is not None:
            settings.update(regrade.regrade_fields(source, settings.get("grading") or "v1"))
            settings["notes"] = [
                f"re-grade: the answers {source} saved, scored by the {settings.get('grading')} rules against "
                f"{settings.get('dataset_label')} for the capsules both have; no agent runs and no model is called"
            ]
        return settings

    def default_env(self, opts: Settings) -> str:
        return default_env(opts)

    # ---- report.html ---------------------------------------------------------------------------
    def page_sections(self, summary: Mapping[str, Any], records: Sequence[RecordLike]) -> list[str]:
        return [page.review_section(summary, records)]  # both scores and the review-file export

    def item_headline(self, record: RecordLike) -> str | None:
        questions = record.get("questions")
        return page.questions_summary(questions) if isinstance(questions, list) and questions else None

    def item_details(self, record: RecordLike) -> list[str]:
        questions = record.get("questions")
        if not isinstance(questions, list) or not questions:
            return []
        return [page.wrong_questions_html(questions), page.questions_html(questions)]

    def job_request(self, samples: list[Sample], opts: Settings) -> JobRequest:
        """A capsule's job: the agent's time and the scoring's, the environment's memory, a GPU when marked."""
        request = super().job_request(samples, opts)
        seconds = float(view(CoreBenchOptions, opts).agent_time) + float(view(RunOptions, opts).timeout) + TIME_MARGIN
        memory = view(EnvOptions, opts).env_memory
        return replace(
            request,
            seconds=seconds,
            memory_mib=max(request.memory_mib, int(memory) // 2**20 + HARNESS_MIB) if memory else request.memory_mib,
        )

    def data_hashes(self, opts: Settings, split: str, settings: Mapping[str, Any]) -> dict[str, str]:
        if self.manifest_sha256 is not None and settings.get("dataset"):  # a v1.1 set: its manifest
            return {"manifest": self.manifest_sha256}
        revision = settings.get("dataset_revision", dataset.UPSTREAM_REV)
        return {"metadata": revision} if revision != dataset.UPSTREAM_REV else {}

    def comparability(self, opts: Settings, split: str, settings: Mapping[str, Any]) -> dict[str, Any]:
        """v1: the keys every benchmark records (unchanged, so earlier v1 runs stay comparable); a v1.1 set: its
        name, release, grading rules and manifest sha256, so a gate refuses a v1 baseline for it (and the other
        way round) unless --bench-set allow_incomparable=true. Every set: the agent as the ``harness``, since the
        agent moves the score as much as the model does (a baseline of another agent, or another version of it, is
        refused unless allowed)."""
        keys = {**super().comparability(opts, split, settings), "harness": {"agent": agent_of(settings).label()}}
        if settings.get("dataset"):
            keys["dataset"].update(
                set=settings["dataset"],
                label=settings.get("dataset_label"),
                version=settings.get("dataset_version"),
                grading=settings.get("grading"),
            )
        return keys

    def load_tasks(self, opts: Mapping[str, Any], split: str) -> list[Task]:
        """Every capsule of ``split`` in upstream order, one sample each (``--bench-data-dir`` holds the data,
        ``--bench-set dataset_path`` replaces the split's file). Capsules already on disk whose REPRODUCING.md
        asks for a GPU get the ``gpu`` marker here, so ``-m "not gpu"`` deselects them."""
        own, run = view(CoreBenchOptions, opts), view(RunOptions, opts)
        chosen = dataset.data_set(run.dataset)
        try:
            custom = own.dataset_path
            # a v1.1 set: its manifest, pinned unless --bench-set allow_custom_data=true
            if chosen.manifest is not None:
                verify = not run.allow_custom_data
                tasks, self.manifest_sha256 = dataset.load_manifest(Path(run.data_dir), chosen, verify=verify)
            else:
                tasks = dataset.read_custom(Path(custom)) if custom else dataset.load_split(Path(run.data_dir), split)
        except dataset.DatasetError as exc:
            raise ConfigError(str(exc)) from None
        self.split_sizes[split] = len(tasks)
        # checked against the whole split (a capsule outside the selection is ignored later, with a warning)
        path = own.review
        self.review = review.load_review(path, tasks, split) if path else None
        folders = local_capsule_folders(opts)
        source = regrade.regrade_source(opts)
        if source is not None:  # a re-grade: the capsules the replayed run has no answers for are skipped
            return [regraded_entry(task, split, source) for task in tasks]
        if chosen.manifest is not None:  # the manifest's gpu flags decide, as in the v1.1 harness
            return [tasks_entry(task, split, gpu=bool(task.get("gpu"))) for task in tasks]
        return [tasks_entry(task, split, gpu=known_gpu(task["capsule_id"], folders)) for task in tasks]

    def check_selection(
        self, opts: Settings, settings: Mapping[str, Any], samples: list[Sample], env: Any
    ) -> list[str]:
        """Before any item: every selected capsule is in the store or downloadable, the agent's image exists
        (a re-grade needs neither)."""
        if regrade.regrade_source(opts) is not None:
            return []
        checks.check_selection(opts, [s.task_id for s in samples if not s.skip_reason], env)
        return []

    def open_run(self, spec: RunSpec, model: Any, env: Any) -> CoreBenchRun:
        split = spec.settings.get("split", "")
        source = regrade.regrade_source(spec.options)
        return CoreBenchRun(
            spec.settings,
            RegradeSolver(source) if source is not None else choose_solver(model, env, agent_of(spec.settings)),
            data_dir=spec.data_dir,
            cache_dir=spec.cache_dir,
            files=spec.files,
            model=model,
            env=env,
            split_size=self.split_sizes.get(split),
        )

    def summarize(self, records: list[Record], settings: Mapping[str, Any]) -> dict[str, Any]:
        return summarize(records, settings, self.review)

    def revise_record(self, record: RecordLike) -> Record:
        """A finished record with this run's review applied (instead of any it was written with; none: the
        record as the automatic grader left it). The controller calls it for every record it writes and for the
        records a resumed run reuses, so workers (remote ones get no paths) need no review file."""
        return Record.from_json(review.apply_review(record, self.review))

    def first_call_misses(
        self, opts: Mapping[str, Any], settings: Mapping[str, Any], tasks: list[Task], samples: list[Any], model: Any
    ) -> list[str]:
        """--bench-replay, before any item: the selected capsules whose agent's first model call (system prompt,
        the capsule's prompt, the tools) is not in the response cache. The workspace is where the run asks for it
        (--bench-set workspace_root): an environment that cannot apply it names a temporary folder in the prompt, so
        such a run could never be replayed anyway."""
        from ...models.probe import FirstCallProbe, FirstCallSeen  # why: it loads openai; only a replay needs it

        if regrade.regrade_source(opts) is not None:  # a re-grade calls no model
            return []
        wanted = {s.task_id for s in samples}
        chosen = [t for t in tasks if t.id in wanted]
        if not chosen:
            return []
        templates = dataset.load_prompts(Path(view(RunOptions, opts).data_dir))
        root = str(settings["workspace_root"])
        stand_in = WorkspaceAt(root)
        probe = FirstCallProbe(model)
        missing = []
        for task in chosen:
            prompt = prepare.render_prompt(templates, task.data, settings["difficulty"], settings["hints"], root=root)
            questions = list(task.data["results"][0].keys())
            try:
                # the probe ends the agent at its first model call, before it uses more of its env than workdir
                CoreAgent(probe, cast("Environment", stand_in), questions, agent_limits(settings)).run(prompt)
            except FirstCallSeen as seen:
                if not seen.found:
                    missing.append(task.id)
        return missing

    def not_run_fields(self, sample: Sample, settings: Mapping[str, Any]) -> dict[str, Any]:
        """A capsule that never ran (an incomplete run) still has its questions: counted as not answered; and
        its difficulty (the run's), so report.html's per-difficulty line counts it as the headline does."""
        written, figure = scorer.question_totals(sample.data["results"])
        return {
            "correct_written": 0,
            "total_written": written,
            "correct_figure": 0,
            "total_figure": figure,
            "split_size": self.split_sizes.get(sample.split),
            "difficulty": settings.get("difficulty"),
            **dataset.record_fields(settings),
        }


def check_data_set(opts: Settings, split: str) -> None:
    """A v1.1 set is its test manifest at the hard difficulty, graded by its own rules: anything else is a
    usage error naming the fix."""
    own = view(CoreBenchOptions, opts)
    chosen = dataset.data_set(view(RunOptions, opts).dataset)
    if chosen.manifest is None:
        return
    flag = f"--bench-dataset={chosen.name}"
    if own.difficulty != "hard":
        raise ConfigError(
            f"{flag} is hard-only ({chosen.label} revises CORE-Bench Hard): leave out --bench-difficulty "
            f"or give --bench-difficulty=hard, or use --bench-dataset=v1 for {own.difficulty}"
        )
    if split != "test":
        raise ConfigError(f"{flag} has one split, test: leave out --bench-split or give --bench-split=test")
    if own.dataset_path and regrade.regrade_source(opts) is None:
        raise ConfigError(
            f"--bench-set dataset_path replaces v1's split file; for {flag} put a manifest at "
            f"<data dir>/{chosen.manifest.subdir}/{chosen.manifest.name} and add --bench-set allow_custom_data=true"
        )
    if own.preinstalled_input_dir:
        raise ConfigError(
            f"--bench-set preinstalled_input_dir is not supported with {flag} yet (the v1.1 workspace is prepared "
            "from the unpacked capsule): leave it out"
        )


class WorkspaceAt:
    """What the agent reads of its environment before its first model call: where the workspace is."""

    def __init__(self, workdir: str) -> None:
        self.workdir = workdir


def local_capsule_folders(opts: Mapping[str, Any]) -> list[Path]:
    """Where unpacked capsules may already be: the store and the extraction cache."""
    run = view(RunOptions, opts)
    data_dir, cache_dir = Path(run.data_dir), Path(run.cache_dir)
    chosen = view(CoreBenchOptions, opts).capsules_dir
    folder = dataset.data_set(run.dataset).capsule_folder
    store = capsules.archive_store(data_dir, cache_dir, Path(chosen) if chosen else None, folder)
    return [store, cache_dir / "capsules" / "extracted"]


def known_gpu(capsule_id: str, folders: list[Path]) -> bool:
    """Whether a capsule already unpacked locally (staged, or unpacked from its tarball as it is now) asks for a
    GPU (unknown ones: decided at run time)."""
    folder = capsules.unpacked_capsule(capsule_id, *folders)
    return folder is not None and bool(prepare.capsule_needs_gpu(folder))


def regraded_entry(task: dict[str, Any], split: str, source: Path) -> Task:
    """A task of a re-grade: skipped, with the reason, when the replayed run saved no answers for it."""
    entry = tasks_entry(task, split, gpu=bool(task.get("gpu")))
    if not regrade.has_saved_submission(source, task["capsule_id"]):
        entry.samples[:] = [replace(s, skip_reason=regrade.not_in_run_reason(source)) for s in entry.samples]
    return entry


def tasks_entry(task: dict[str, Any], split: str, gpu: bool = False) -> Task:
    cid = task["capsule_id"]
    markers = ("core_bench", split, "gpu") if gpu else ("core_bench", split)
    sample = Sample(id=cid, task_id=cid, split=split, markers=markers, data=task)
    return Task(id=cid, split=split, samples=[sample], data=task)


# --------------------------------------------------------------------------- metrics


def _ratio(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


def compute_metrics(records: Sequence[Record]) -> dict[str, Any]:
    """Upstream's aggregates; every counted capsule is in the denominators, errors included.

    Written/figure task accuracy count a capsule once it got all its written (figure) questions
    right, over the capsules that have such questions, as upstream does.
    """
    counted = [r for r in records if r.scored and r.status != "skipped"]
    written_tasks = [r for r in counted if r.get("total_written", 0) > 0]
    figure_tasks = [r for r in counted if r.get("total_figure", 0) > 0]
    correct_w = sum(r.get("correct_written", 0) for r in counted)
    correct_f = sum(r.get("correct_figure", 0) for r in counted)
    total_w = sum(r.get("total_written", 0) for r in counted)
    total_f = sum(r.get("total_figure", 0) for r in counted)
    metrics: dict[str, Any] = {
        "capsules": len(counted),
        "correct_capsules": sum(1 for r in counted if r.status == "pass"),
        "written_tasks": len(written_tasks),
        "correct_written_tasks": sum(1 for r in written_tasks if r.get("correct_written") == r["total_written"]),
        "figure_tasks": len(figure_tasks),
        "correct_figure_tasks": sum(1 for r in figure_tasks if r.get("correct_figure") == r["total_figure"]),
        "questions": total_w + total_f,
        "correct_questions": correct_w + correct_f,
        "written_questions": total_w,
        "correct_written_questions": correct_w,
        "figure_questions": total_f,
        "correct_figure_questions": correct_f,
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


def count_statuses(records: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for record in records:
        status = record.get("status", "error")
        counts[status] = counts.get(status, 0) + 1
    return dict(sorted(counts.items()))


def _fraction(metrics: dict[str, Any], num: str, den: str) -> str:
    if not metrics[den]:
        return "n/a"
    return f"{metrics[num]}/{metrics[den]} ({100 * metrics[num] / metrics[den]:.1f}%)"


def summarize(
    given: Sequence[RecordLike], settings: Mapping[str, Any], reviewed: review.Review | None = None
) -> dict[str, Any]:
    """The metrics, terminal lines and Markdown of a run; with a review (``settings["review"]``), ``scores``
    holds the automatic and the reviewed metrics (``metrics`` stays the automatic one) and ``notes`` the
    overrides this run's selection left out. The records are read as ``Record``s (a JSON object is made one)."""
    records = [as_record(r) for r in given]
    m = compute_metrics(records)
    statuses = records_counts_text(count_statuses(records)) or "none"  # the format of every report
    head = (
        f"{data_set_text(settings)} {settings.get('split', '?')} split, difficulty {settings.get('difficulty', '?')}, "
        f"hints {'on' if settings.get('hints') else 'off'}"
        f"{', upstream abort' if settings.get('upstream_abort') else ''}"
        f"{', agent ' + str(settings['agent']) if settings.get('agent') else ''}"
    )
    size = max((r.get("split_size") or 0 for r in records), default=0)
    if size and len(records) < size:  # -m "not gpu", -k, --bench-ids: say how much of the split this is
        head += f"; {len(records)} of {size} selected"
    revision = settings.get("dataset_revision")
    if revision and str(revision).startswith("custom:"):
        head += f"; custom metadata {settings.get('dataset_path')} ({revision})"
    unisolated = [str(settings.get("isolation") or "")] + [str(r.get("isolation") or "") for r in records]
    unisolated = [text for text in unisolated if text.startswith("none")]
    if unisolated:  # the agent could reach the answers: every report says so
        head += f"; isolation: {unisolated[0]}"
    headline = " (the v1.1 headline)" if settings.get("grading") == "v1.1" else ""
    lines = [
        head,
        f"capsules correct:        {_fraction(m, 'correct_capsules', 'capsules')}  task-level accuracy{headline}",
        f"  written-question tasks {_fraction(m, 'correct_written_tasks', 'written_tasks')}",
        f"  figure-question tasks  {_fraction(m, 'correct_figure_tasks', 'figure_tasks')}",
        f"questions correct:       {_fraction(m, 'correct_questions', 'questions')}  question-level accuracy",
        f"statuses: {statuses}",
    ]
    out: dict[str, Any] = {"metrics": m, "terminal": lines}
    scores = None
    if settings.get("review"):
        scores, notes = review_scores(records, settings, m, reviewed)
        out["scores"] = scores
        lines += review_lines(scores["reviewed"])
        if notes:
            out["notes"] = notes
            lines += [f"warning: {note}" for note in notes]
    out["markdown"] = render_markdown(records, m, lines, scores)
    return out


def data_set_text(settings: Mapping[str, Any]) -> str:
    """The data set as the headline names it: ``CORE-Bench v1``, or a v1.1 set with its manifest's sha256 and
    grading rules."""
    if not settings.get("dataset"):
        return "CORE-Bench v1"
    manifest = (settings.get("data_hashes") or {}).get("manifest") or "?"
    return (
        f"{settings.get('dataset_label')} (--bench-dataset={settings['dataset']}, manifest sha256 {manifest[:12]}, "
        f"{settings.get('grading')} grading rules)"
    )


def review_scores(
    records: list[Record],
    settings: Mapping[str, Any],
    automatic: dict[str, Any],
    reviewed: review.Review | None,
) -> tuple[dict[str, Any], list[str]]:
    """``{"automatic": {"metrics"}, "reviewed": {"metrics", file, overrides, changed, ...}}`` and the warnings:
    overrides naming capsules outside this run's selection (ignored) or capsules that were never scored."""
    views = [as_record(review.reviewed_view(r)) for r in records]
    file = settings.get("review")
    applied = [r["review"] for r in records if isinstance(r.get("review"), dict)]
    notes = []
    out = {
        "file": file,
        "metrics": compute_metrics(views),
        "overrides": sum(int(a.get("overrides") or 0) for a in applied),
        "changed": sum(int(a.get("changed") or 0) for a in applied),
        "changed_items": sorted(
            (
                str(r.get("id"))
                for r in records
                if isinstance(r.get("review"), dict) and r["review"].get("status") != r.get("status")
            ),
            key=natural_key,
        ),
    }
    if reviewed is not None:
        out["sha256"] = reviewed.sha256
        outside = reviewed.outside(str(r.get("task", r.get("id"))) for r in records)
        if outside:
            out["ignored"] = [{"capsule": o.capsule, "question": o.question, "line": o.line} for o in outside]
            named = ", ".join(f"{o.capsule} ({o.where(reviewed.file)})" for o in outside[:10])
            notes.append(
                f"review {reviewed.file}: {len(outside)} override(s) name capsules outside this run's "
                f"selection and are ignored: {named}{' ...' if len(outside) > 10 else ''}"
            )
    unscored = [
        f"{r.get('id')} ({r['review']['why']})"
        for r in records
        if isinstance(r.get("review"), dict) and r["review"].get("not_applied")
    ]
    if unscored:
        notes.append(f"review {file}: overrides not applied to capsules without scored answers: {', '.join(unscored)}")
    return {"automatic": {"metrics": automatic}, "reviewed": out}, notes


def review_lines(scored: Mapping[str, Any]) -> list[str]:
    m = scored["metrics"]
    return [
        f"reviewed score ({scored.get('file')}: {scored.get('overrides', 0)} override(s), "
        f"{scored.get('changed', 0)} verdict(s) changed):",
        f"  capsules correct:        {_fraction(m, 'correct_capsules', 'capsules')}",
        f"  questions correct:       {_fraction(m, 'correct_questions', 'questions')}",
    ]


def _cell(value: Any, limit: int = 80) -> str:
    """A value an agent may have chosen (an answer, a message) as one inert line of Markdown."""
    text = value if isinstance(value, str) else json.dumps(value, default=repr)
    return printable(text, markdown=True, limit=limit)


def _expected_cell(question: dict[str, Any]) -> str:
    expected = question.get("expected")
    if question.get("kind") == "numeric" and isinstance(expected, list) and len(expected) == 2:
        return f"[{expected[0]:.6g}, {expected[1]:.6g}]"
    return _cell(expected)


SCORE_ROWS = (
    ("capsules correct", "correct_capsules", "capsules"),
    ("written-question tasks", "correct_written_tasks", "written_tasks"),
    ("figure-question tasks", "correct_figure_tasks", "figure_tasks"),
    ("questions correct", "correct_questions", "questions"),
)


def scores_markdown(scores: Mapping[str, Any]) -> list[str]:
    """Both scores side by side: the automatic grader's and the reviewed one."""
    auto, rev = scores["automatic"]["metrics"], scores["reviewed"]["metrics"]
    out = [
        "### Scores: automatic and reviewed",
        "",
        f"Review file: `{scores['reviewed'].get('file')}`",
        "",
        "| metric | automatic | reviewed |",
        "|---|---|---|",
    ]
    out += [f"| {name} | {_fraction(auto, num, den)} | {_fraction(rev, num, den)} |" for name, num, den in SCORE_ROWS]
    return out + [""]


def verdict_cell(question: Mapping[str, Any]) -> str:
    verdict = (
        "correct"
        if question.get("correct")
        else "wrong" + (f": {_cell(question['note'], 60)}" if question.get("note") else "")
    )
    if question.get("rule"):  # v1.1 grading: the rule that decided
        verdict += f" ({_cell(question['rule'], 20)})"
    found = question.get("review")
    if isinstance(found, Mapping):
        verdict += (
            f" → reviewed {found.get('verdict')} ({_cell(found.get('reviewer'), 40)}: "
            f"{_cell(found.get('reason'), 120)})"
        )
    return verdict


def render_markdown(
    records: Sequence[Record], metrics: dict[str, Any], lines: list[str], scores: Mapping[str, Any] | None = None
) -> str:
    out = ["## CORE-Bench", "", *[f"- {printable(line.strip(), markdown=True)}" for line in lines], ""]
    if scores:
        out += scores_markdown(scores)
    for record in sorted(records, key=lambda r: natural_key(r.get("id", ""))):
        status = record.get("status", "?")
        gpu = " (GPU)" if record.get("gpu_required") else ""
        applied = record.get("review")
        found = applied if isinstance(applied, dict) else {}
        reviewed = f" (reviewed: {found['status']})" if found.get("overrides") else ""
        heading = printable(f"{record.get('id', '?')}{gpu}: {status}{reviewed}", markdown=True)
        out.append(f"### {heading}")
        if record.get("message"):
            out += ["", _cell(record["message"], 300)]
        questions = record.get("questions") or []
        if questions:
            out += ["", "| question | type | submitted | expected | verdict |", "|---|---|---|---|---|"]
            for q in questions:
                kind = q.get("kind", "?") + (", figure" if q.get("figure") else "")
                submitted = _cell(q.get("submitted")) if q.get("answered") else "(missing)"
                out.append(
                    f"| {_cell(q.get('question', ''))} | {kind} | {submitted} | {_expected_cell(q)} | "
                    f"{verdict_cell(q)} |"
                )
        out.append("")
    return "\n".join(out)


benchmark = CoreBench()
