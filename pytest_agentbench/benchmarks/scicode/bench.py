"""SciCode as a pytest-agentbench benchmark: one item per step, scored as upstream scores it.

This module declares what the plugin and the report layer need (options, markers, metrics, headlines,
free settings, records file), checks the options once (``configure``), loads the tasks and opens a
run (``open_run``: the targets are resolved and the solver chosen there, once); ``run.py`` scores.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...core.data import DataError, find, fingerprint, sha256_of
from ...core.errors import ConfigError
from ...core.options import Settings, view
from ...core.records import Record
from ...core.run_options import RunOptions
from ...core.types import Sample, Task
from ...models.concurrency import share
from ...models.options import ModelOptions
from ...models.price import price_of
from ...sandbox.options import SandboxOptions, limits_from, private_folders
from ..base import Benchmark, RunSpec
from . import dataset, verified
from .archive import fetch_h5, offline
from .locate import RebuiltTable, Targets, TargetTable, locate
from .metrics import summarize
from .prompts import load_templates
from .solvers import choose_solver

if TYPE_CHECKING:
    from .gradingenvs import GradingEnv
    from .run import SciCodeRun

from .options import (
    ALL_CATEGORIES,
    AUTO,
    DATASETS,
    OFFICIAL,
    OPTIONS,
    REBUILT,
    VERIFIED,
    SciCodeOptions,
)

REBUILD_TIMEOUT_FACTOR = 10  # rebuilding one problem's targets may take this many tool timeouts
ORACLE_SPLIT = (
    "--model=oracle answers with the ground-truth code, which only SciCode's validation split ships; "
    "use --bench-split=validation (the test split has no public solutions)"
)


class SciCode(Benchmark):
    name = "scicode"
    splits = dataset.SPLITS
    # --bench-dataset: official (upstream's validation and test splits) or verified (SciCode-Verified)
    datasets = DATASETS
    default_dataset = OFFICIAL
    default_split = "all"
    group_items = True
    records_file = "steps.jsonl"
    options = OPTIONS
    markers = {
        "scicode": "a SciCode step (pytest-agentbench)",
        "prefilled": "an official prefilled SciCode step, skipped (pytest-agentbench)",
    }
    gate_metrics = {
        "main": "main",
        "subproblem": "subproblem",
        "validation.main": "validation.main",
        "validation.subproblem": "validation.subproblem",
        "test.main": "test.main",
        "test.subproblem": "test.subproblem",
    }
    headlines = {"main": "task", "subproblem": "item"}
    # How scoring runs, not what is asked or how it is scored: a baseline may differ in these.
    free_settings = frozenset({"executor", "memory_limit_gib", "tool_timeout"})
    # report.html's Categories table: summarize() writes these counts per category
    category_columns = (
        ("main problems resolved", "problems_resolved", "problems", "main"),
        ("subproblems passed", "steps_passed", "steps", "subproblem"),
    )

    def __init__(self) -> None:
        self._located: tuple[Settings, str, Targets] | None = None  # this run's targets, found once
        self._manifest: tuple[Settings, tuple[verified.Manifest, Path]] | None = (
            None  # SciCode-Verified's, checked once
        )
        self.categories: dict[str, str] = {}  # problem id -> category, of the problems loaded

    # ---- settings ----------------------------------------------------------------------------
    def configure(self, opts: Settings, split: str) -> dict[str, Any]:
        sandbox = view(SandboxOptions, opts)
        oracle = view(ModelOptions, opts).model == "oracle"
        label = None
        if is_verified(opts):
            label = self.manifest(opts).label
            split = verified_split(split, oracle)
        narrowed = oracle and split != "validation" and not view(RunOptions, opts).split
        if narrowed:  # no split asked for: the oracle scores the split it can answer, unless a test item is named
            named = oracle_test_ids(opts)
            if named:
                raise ConfigError(f"--bench-ids {','.join(named)} names test-split items: {ORACLE_SPLIT}")
            split = "validation"
        elif oracle and split != "validation":
            raise ConfigError(ORACLE_SPLIT)
        own = view(SciCodeOptions, opts)
        mode = own.mode
        out: dict[str, Any] = {
            "mode": "oracle" if oracle else mode,
            "background": bool(own.background),
            "executor": sandbox.executor,
            "memory_limit_gib": float(sandbox.memory_limit),
        }
        if mode == "tool_use" and not oracle:
            out.update(tool_loops=int(own.tool_loops), tool_timeout=float(own.tool_timeout))
        targets = self.targets(opts, split)
        out["targets"] = targets.kind
        if own.grading_envs:  # built (or found) and self-tested here: a failure is a usage error
            out["grading_envs"] = [env.describe() for env in grading_envs(opts)]
            out["grading_envs_all"] = bool(own.grading_envs_all)
        notes = [targets.note()] if targets.note() else []
        if label is not None:  # only then: an official run records exactly what it did before
            out["dataset"] = label
            out["split"] = split
        elif targets.kind == VERIFIED:
            notes.append(f"targets: SciCode-Verified's corrected {verified.H5_NAME}, for the official problems")
        if narrowed:
            out["split"] = split
            notes.insert(
                0,
                "--model=oracle without --bench-split: narrowed to the validation split "
                "(the test split has no public solutions)",
            )
        if notes:
            out["notes"] = notes
        return out

    def manifest(self, opts: Settings) -> verified.Manifest:
        """SciCode-Verified's manifest and files, checked once per run (DataError at the first mismatch)."""
        if self._manifest is None or self._manifest[0] is not opts:  # a run's own: the files may change between runs
            self._manifest = (opts, verified.load_files(data_dir_of(opts), custom_ok=not verify_data(opts)))
        return self._manifest[1][0]

    def targets(self, opts: Settings, split: str) -> Targets:
        """Where this run's targets come from (checked once per run; ConfigError for a bad file)."""
        if self._located is None or self._located[0] is not opts or self._located[1] != split:
            self._located = (opts, split, find_targets(opts, split))
        return self._located[2]

    # ---- data ------------------------------------------------------------------------------
    def load_tasks(self, opts: Settings, split: str) -> list[Task]:
        if is_verified(opts):
            problems = self.verified_problems(opts, split)
        else:
            problems = dataset.load_problems(
                data_dir_of(opts), split, verify=verify_data(opts), stamp_dir=view(RunOptions, opts).cache_dir
            )
        self.categories.update({str(p["problem_id"]): dataset.category_of(p) for _, p in problems})
        return dataset.to_tasks(select_categories(problems, view(SciCodeOptions, opts).category))

    def verified_problems(self, opts: Settings, split: str) -> list[tuple[str, dict[str, Any]]]:
        """SciCode-Verified's problems (its test split: the only one it has), from files the manifest checked."""
        verified_split(split, view(ModelOptions, opts).model == "oracle")
        self.manifest(opts)
        assert self._manifest is not None
        manifest, path = self._manifest[1]
        problems = dataset.read_jsonl(path)
        verified.check_count(manifest, problems)
        return [("test", problem) for problem in problems]

    def expected_cost(self, sample: Sample) -> float:
        """A step costs its test cases (each runs the step's code once); a prefilled step is never run."""
        if sample.skip_reason:
            return 0.0
        step = (sample.data or {}).get("step") or {}
        return float(max(1, len(step.get("test_cases") or [])))

    def data_hashes(self, opts: Settings, split: str, settings: Mapping[str, Any]) -> dict[str, str]:
        """sha256 of the problems, prefilled code and targets this run reads (baselines compare them)."""
        pinned = verify_data(opts)
        parts = ("validation", "test") if split == "all" else (split,)
        out = {}
        files = [*dataset.PREFILLED_FILES.values()]
        if not is_verified(opts):
            files = [*(dataset.PROBLEM_FILES[p] for p in parts), *files]
        else:  # checked against the manifest (configure): hashed here, they are small
            folder = verified.folder(data_dir_of(opts))
            for name in (verified.PROBLEMS_NAME, verified.MANIFEST_NAME):
                out[f"{verified.SUBDIR}/{name}"] = sha256_of(folder / name)
        for f in files:
            path = find(data_dir_of(opts), f)
            if path is not None:
                # verified files match their pin
                out[f.name] = f.sha256 if pinned and f.sha256 is not None else sha256_of(path)
        targets = self.targets(opts, split)
        if targets.path is not None:
            pin = dataset.H5_FILE.sha256
            if targets.kind == VERIFIED and targets.sha256:
                out["targets"] = targets.sha256
            else:
                out["targets"] = pin if targets.kind == "official" and pin is not None else sha256_of(targets.path)
        return out

    def comparability(self, opts: Settings, split: str, settings: Mapping[str, Any]) -> dict[str, Any]:
        """The dataset (name, version, every file's sha256, the targets' kind), the grading environments (each with
        the package versions it has), the harness and the prompt templates' sha256 (see docs/runs.md)."""
        return {
            "dataset": {
                "name": settings.get("dataset") or "scicode official",
                "revision": dataset.REVISION,
                "targets": settings.get("targets"),
                "hashes": dict(settings.get("data_hashes") or {}),
            },
            "grading_envs": list(settings.get("grading_envs") or [running_env()]),
            "harness": {k: settings[k] for k in ("mode", "background", "tool_loops", "operand_cap") if k in settings},
            "prompts": template_hashes(data_dir_of(opts)),
        }

    # ---- running -------------------------------------------------------------------------
    def open_run(self, spec: RunSpec, model: Any, env: Any) -> SciCodeRun:
        from ...sandbox.executors import warm_executor  # why: scoring loads the sandbox; collecting needs none of it
        from .run import RunSettings, SciCodeRun  # why: as above

        opts = spec.options
        own, model_options = view(SciCodeOptions, opts), view(ModelOptions, opts)
        split = spec.settings["split"]  # the run's own (configure may narrow the one asked for)
        selected = [t for t in spec.tasks if any(s.id in spec.selected for s in t.samples)]
        targets = self.targets(opts, split)
        table: TargetTable | RebuiltTable
        envs = grading_envs(opts, spec.cache_dir) if own.grading_envs else ()  # where this worker runs
        env_tables: dict[str, TargetTable | RebuiltTable] = {}
        if targets.kind == "rebuilt":  # each problem built when its first step reaches this process, untimed
            limits = limits_from(opts, timeout=float(own.tool_timeout) * REBUILD_TIMEOUT_FACTOR)
            problems = [t.data for t in selected]
            table = RebuiltTable(problems, spec.cache_dir, data_dir=spec.data_dir, limits=limits)
            for grading in envs:  # rebuilt in each environment: a target of one is not assumed to hold in another
                env_tables[grading.name] = RebuiltTable(
                    problems, spec.cache_dir, data_dir=spec.data_dir, limits=limits, python=grading.python
                )
        else:
            table = TargetTable(targets)
            env_tables = {grading.name: table for grading in envs}
        prefilled = {}
        if needs_prefilled(selected, spec.selected):
            prefilled = dataset.load_prefilled(spec.data_dir, verify=verify_data(opts), stamp_dir=spec.cache_dir)
        solver = choose_solver(
            model,
            env=env,
            templates=lambda: load_templates(spec.data_dir),
            mode=own.mode,
            background=bool(own.background),
            tool_loops=int(own.tool_loops),
            tool_timeout=float(own.tool_timeout),
            price=price_of(model_options.model_price),
            budget=model_options.max_cost_per_item,
            tool_concurrency=share(int(own.tool_concurrency or cores()), spec.workers),
        )
        settings = RunSettings(
            targets=table,
            executor=view(SandboxOptions, opts).executor,
            overlap=bool(own.overlap),
            prefilled=prefilled,
            selected=frozenset(spec.selected),
            operand_cap=int(own.operand_cap),
            grading_envs=tuple((grading, env_tables[grading.name]) for grading in envs),
            grading_all=bool(own.grading_envs_all),
            # as many chains as this process may have model requests in flight
            connections=spec.connections,
            held=spec.held,
        )
        if not envs:  # this interpreter's fork server scores: it starts while the first step is generated
            warm_executor(settings.executor)
        return SciCodeRun(
            settings,
            solver,
            env,
            limits_from(opts, timeout=float(view(RunOptions, opts).timeout)),
            files=spec.files,
            problems={t.id: t.data for t in spec.tasks},
            reused=spec.reused.values(),
        )

    def summarize(self, records: list[Record], settings: Mapping[str, Any]) -> dict[str, Any]:
        return summarize(records, dict(settings), self.categories)

    def first_call_misses(
        self, opts: Settings, settings: Mapping[str, Any], tasks: list[Task], samples: list[Sample], model: Any
    ) -> list[str]:
        """--bench-replay, before any item: the selected problems whose first model call (the first step that is
        not prefilled, with the prompt this run would build) is not in the response cache."""
        from ...models.probe import FirstCallProbe, FirstCallSeen  # why: it loads openai; only a replay needs it
        from .solvers import ChatSolver  # why: as above (the chat harness imports the client when used)

        wanted = {s.task_id for s in samples if not s.skip_reason}
        chosen = [t for t in tasks if t.id in wanted]
        if not chosen:
            return []
        own = view(SciCodeOptions, opts)
        solver = ChatSolver(
            FirstCallProbe(model),
            templates=load_templates(data_dir_of(opts)),
            run_python=None,
            mode=own.mode,
            background=bool(own.background),
            tool_loops=int(own.tool_loops),
            tool_timeout=float(own.tool_timeout),
        )
        prefilled = None
        missing = []
        for task in chosen:
            previous: list[str] = []
            for step in task.data["sub_steps"]:
                number = str(step["step_number"])
                if number not in dataset.PREFILLED_FILES:
                    break
                if prefilled is None:
                    prefilled = dataset.load_prefilled(
                        data_dir_of(opts), verify=verify_data(opts), stamp_dir=view(RunOptions, opts).cache_dir
                    )
                previous.append(prefilled[number])
            try:
                solver.solve(task.data, len(previous), previous)
            except FirstCallSeen as seen:
                if not seen.found:
                    missing.append(task.id)
        return missing


def grading_envs(opts: Settings, cache_dir: Any = None) -> tuple[GradingEnv, ...]:
    """The environments --bench-set grading_envs names, built or found where this process runs and self-tested in
    the run's sandbox (the run's private folders hidden); a usage error names the one that failed."""
    from . import gradingenvs  # why: it loads the sandbox; only a run with grading environments needs it

    entries = gradingenvs.parse(view(SciCodeOptions, opts).grading_envs)
    return gradingenvs.resolve(entries, cache_dir or view(RunOptions, opts).cache_dir, hidden=private_folders(opts))


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def select_categories(problems: list[tuple[str, dict[str, Any]]], names: Any) -> list[tuple[str, dict[str, Any]]]:
    """The problems of the categories ``names`` (--bench-set category; "all" or nothing keeps every problem).
    An unknown name is a ConfigError listing the categories present."""
    wanted = {str(n).strip() for n in names if str(n).strip()}
    if not wanted or ALL_CATEGORIES in wanted:
        return problems
    present = sorted({dataset.category_of(p) for _, p in problems})
    unknown = sorted(wanted - set(present))
    if unknown:
        raise ConfigError(
            f"unknown SciCode categor{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown)} in "
            f"--bench-set category; categories present: {', '.join(present)} (or all)"
        )
    return [(split, p) for split, p in problems if dataset.category_of(p) in wanted]


def is_verified(opts: Mapping[str, Any]) -> bool:
    """Whether the run is on SciCode-Verified (--bench-dataset=verified)."""
    return view(RunOptions, opts).dataset == VERIFIED


def verified_split(split: str, oracle: bool) -> str:
    """The split of a SciCode-Verified run: its test split (the only one it has); ConfigError for another."""
    if oracle:
        raise ConfigError(
            "--model=oracle answers with the ground-truth code, which SciCode-Verified does not ship (it is a test "
            "split); use --bench-dataset=official --bench-split=validation for the oracle"
        )
    if split == "validation":
        raise ConfigError(
            "--bench-dataset=verified has no validation split (SciCode-Verified audits the test split): use "
            "--bench-split=test (or all), or --bench-dataset=official for the validation split"
        )
    return "test"


def running_env() -> dict[str, str]:
    """Today's single grading environment: the running interpreter and the scientific packages it has."""
    import platform  # why: only a run's comparability keys need these
    from importlib import metadata  # why: as platform

    out = {"name": "default", "python": platform.python_version()}
    for package in ("numpy", "scipy", "sympy", "h5py"):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            out[package] = "not installed"
    return out


def template_hashes(data_dir: Path) -> dict[str, str]:
    """sha256 of each prompt template in the data dir ("missing" for one that is not there yet)."""
    out = {}
    for name, f in dataset.TEMPLATE_FILES.items():
        path = find(data_dir, f)
        out[name] = sha256_of(path) if path is not None else "missing"
    return out


def find_verified(opts: Settings) -> Targets:
    """SciCode-Verified's corrected targets, checked against its manifest; ConfigError when they cannot be had
    (offline and missing included: a run on them never goes on without them). Listing the items hashes nothing."""
    data_dir, cache_dir, h5 = data_dir_of(opts), view(RunOptions, opts).cache_dir, view(SciCodeOptions, opts).h5
    # --bench-set h5 names the dataset's own targets file: an official run's (a replay re-grading it) is not this one
    given = Path(h5) if h5 and is_verified(opts) else None
    if opts.facts.listing_only:
        path = given or verified.folder(data_dir) / verified.H5_NAME
        if path.is_file():
            return Targets(path, VERIFIED)
        return Targets(None, "missing", f"SciCode-Verified's {verified.H5_NAME} is not at {path}")
    try:
        manifest = verified.load_manifest(data_dir, custom_ok=not verify_data(opts))
        path, sha = verified.h5_file(data_dir, manifest, cache_dir, given)
    except DataError as exc:
        raise ConfigError(str(exc)) from None
    return Targets(path, VERIFIED, sha256=sha, stamp=fingerprint(path))


def find_targets(opts: Settings, split: str) -> Targets:
    """The targets --bench-targets asks for (see ``locate``); ConfigError when they cannot be had."""
    own = view(SciCodeOptions, opts)
    choice = own.targets or AUTO
    if choice == VERIFIED or (choice == AUTO and is_verified(opts)):
        return find_verified(opts)
    data_dir, cache_dir, verified = data_dir_of(opts), view(RunOptions, opts).cache_dir, verify_data(opts)
    if choice == REBUILT and is_verified(opts):
        raise ConfigError(
            "--bench-targets=rebuilt: SciCode-Verified ships no ground truth to rebuild its targets from; use "
            "--bench-targets=auto (its corrected targets) or official"
        )
    if choice == REBUILT:
        if own.h5:
            raise ConfigError(
                "--bench-targets=rebuilt rebuilds the targets from the ground truth: leave out "
                "--bench-set h5, or use --bench-targets=auto to score against that file"
            )
        if needs_official(opts, split):
            raise ConfigError(
                "--bench-targets=rebuilt: the test split has no public ground truth to rebuild "
                "its targets from; select validation items (--bench-split=validation) or use "
                "--bench-targets=auto"
            )
        return Targets(None, "rebuilt")

    def fetch() -> Path:
        return fetch_h5(own.data_url, data_dir, cache_dir, verified=verified)

    # auto, offline: a missing file stays missing (each step with code is an eval_error saying where to get
    # it); official: fetched whatever the split, and offline fetch_h5 refuses (a usage error before any item);
    # listing the items (--collect-only) never fetches: what is there is reported, nothing is scored
    listing = opts.facts.listing_only
    if choice != OFFICIAL or listing:
        fetching = not listing and not offline() and needs_official(opts, split)
        return locate(own.h5, data_dir, cache_dir, split, verified=verified, fetch=fetch if fetching else None)
    try:
        return locate(own.h5, data_dir, cache_dir, split, verified=verified, fetch=fetch)
    except ConfigError as exc:
        raise ConfigError(
            f"--bench-targets=official: {exc}"
            + (
                "; for validation items alone, --bench-targets=auto rebuilds the targets from the ground truth"
                if split == "validation"
                else ""
            )
        ) from None


def needs_official(opts: Mapping[str, Any], split: str) -> bool:
    """Whether the run selects a test-split item (whose targets only the official file has)."""
    if split != "all":
        return split == "test"
    ids = [str(i) for i in view(RunOptions, opts).ids or ()]
    if not ids:
        return True
    test = dataset.load_problems(
        data_dir_of(opts), "test", verify=verify_data(opts), stamp_dir=view(RunOptions, opts).cache_dir
    )
    test_ids = {str(p["problem_id"]) for _, p in test}
    return any(i.split(".")[0] in test_ids for i in ids)


def oracle_test_ids(opts: Settings) -> list[str]:
    """The ``--bench-ids`` entries naming test-split items (the oracle cannot answer them)."""
    run = view(RunOptions, opts)
    if not run.ids:
        return []
    try:
        test = {
            str(problem["problem_id"])
            for _, problem in dataset.load_problems(
                data_dir_of(opts), "test", verify=verify_data(opts), stamp_dir=run.cache_dir
            )
        }
    except DataError:  # no test file here: no id can name a test item
        return []
    return [i for i in run.ids if i.split(".")[0] in test]


def verify_data(opts: Mapping[str, Any]) -> bool:
    """Whether data files must match their pinned checksums (not with --bench-set=allow_custom_data=true)."""
    return not view(RunOptions, opts).allow_custom_data


def data_dir_of(opts: Mapping[str, Any]) -> Path:
    """The folder of the upstream data files (--bench-data-dir)."""
    return Path(view(RunOptions, opts).data_dir)


def needs_prefilled(tasks: list[Task], selected: frozenset[str]) -> bool:
    """Whether a selected step comes after an official prefilled step of its problem (it needs that code)."""
    for task in tasks:
        numbers = [str(step["step_number"]) for step in task.data["sub_steps"]]
        for sample in task.samples:
            if sample.id in selected and any(n in dataset.PREFILLED_FILES for n in numbers[: sample.data["index"]]):
                return True
    return False


benchmark = SciCode()
