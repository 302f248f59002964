"""SciCode as a pytest-agentbench benchmark: one item per step, scored as upstream scores it."""
from __future__ import annotations

import fcntl
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ...data import DataError, cache_dir, data_dir, find, sha256_of, verify
from ...registry import RunContext, Sample, Task
from . import dataset
from .metrics import summarize

MODES = ("tool_use", "naive")
EXECUTORS = ("fork", "subprocess")
REBUILT_NOTE = "targets rebuilt from ground truth, not the official file"
H5_HELP = ("the official test_data.h5 is missing: download it from {url} (sha256 {sha}) into {where}, "
           "or pass --bench-h5 PATH")


@dataclass
class Generated:
    """The code for one step and how it was obtained."""

    code: str | None
    status: str = "ok"  # ok, parse_error, model_error, truncated
    message: str = ""
    accounting: dict[str, Any] = field(default_factory=dict)
    trajectory: list[dict[str, Any]] = field(default_factory=list)
    response_text: str = ""


@dataclass
class Targets:
    path: Path | None
    kind: str  # official, custom, rebuilt, missing
    message: str = ""


CACHE = pytest.StashKey[dict]()


class SciCode:
    name = "scicode"
    splits = dataset.SPLITS
    default_split = "all"
    group_items = True
    records_file = "steps.jsonl"

    # ---- options -------------------------------------------------------------------------
    def add_options(self, parser: pytest.Parser) -> None:
        group = parser.getgroup("agentbench")
        group.addoption("--bench-h5", dest="bench_h5", default=None,
                        help="SciCode: path to the official test_data.h5 (default: looked up in the data dir).")
        group.addoption("--bench-background", dest="bench_background", action="store_true", default=None,
                        help="SciCode: include the scientific background in prompts (default on).")
        group.addoption("--no-bench-background", dest="bench_background", action="store_false",
                        help="SciCode: leave the background out; the model is asked to write it.")
        group.addoption("--bench-mode", dest="bench_mode", default=None, choices=MODES,
                        help="SciCode harness: tool_use (default; the model may run code) or naive (one call per step).")
        group.addoption("--bench-tool-loops", dest="bench_tool_loops", type=int, default=15,
                        help="SciCode tool_use: most rounds of tool calls per step (default 15).")
        group.addoption("--bench-tool-timeout", dest="bench_tool_timeout", type=float, default=180.0,
                        help="SciCode tool_use: seconds per code_interpreter call (default 180).")
        group.addoption("--bench-overlap", dest="bench_overlap", action="store_true", default=True,
                        help="SciCode: generate the next step while the current one is scored (default on).")
        group.addoption("--no-bench-overlap", dest="bench_overlap", action="store_false",
                        help="SciCode: generate each step only when its item starts.")
        group.addoption("--bench-executor", dest="bench_executor", default=None, choices=EXECUTORS,
                        help="how scoring scripts run: fork (default; a warm fork server) or subprocess "
                             "(a fresh interpreter per step).")
        group.addoption("--bench-memory-limit", dest="bench_memory_limit", type=float, default=4.0,
                        help="address-space limit of each child process in GiB (default 4).")
        parser.addini("agentbench_background", type="bool", default=True,
                      help="SciCode: include the scientific background in prompts (default on).")
        parser.addini("agentbench_mode", default="tool_use",
                      help="SciCode harness: tool_use (default; the model may run code) or naive (one call per step).")

    def settings(self, config: pytest.Config) -> dict[str, Any]:
        split = config.getoption("bench_split") or config.getini("agentbench_split") or self.default_split
        model = config.getoption("agentbench_model", None) or config.getini("agentbench_model")
        if model == "oracle" and split != "validation":
            raise pytest.UsageError(
                "agentbench: --model=oracle answers with the ground-truth code, which only SciCode's validation "
                "split ships; use --bench-split=validation (the test split has no public solutions)")
        background = config.getoption("bench_background")
        if background is None:
            background = config.getini("agentbench_background")
        mode = config.getoption("bench_mode") or config.getini("agentbench_mode")
        if mode not in MODES:
            raise pytest.UsageError(f"agentbench: unknown SciCode mode {mode!r}; valid values: {', '.join(MODES)}")
        out = {"mode": "oracle" if model == "oracle" else mode, "background": bool(background),
               "executor": config.getoption("bench_executor") or "fork",
               "memory_limit_gib": config.getoption("bench_memory_limit")}
        if mode == "tool_use" and model != "oracle":
            out.update(tool_loops=config.getoption("bench_tool_loops"),
                       tool_timeout=config.getoption("bench_tool_timeout"))
        targets = self.resolve_targets(config, split)
        out["targets"] = targets.kind
        if targets.kind == "rebuilt":
            out["notes"] = [REBUILT_NOTE]
        elif targets.kind == "missing":
            out["notes"] = [targets.message]
        elif targets.kind == "custom":
            out["notes"] = [f"custom targets file {targets.path} (checksum not verified)"]
        config.stash[CACHE] = {"targets": targets, "generated": {}, "rebuilt": {}}
        return out

    # ---- data ----------------------------------------------------------------------------
    def verify_data(self, config: pytest.Config) -> bool:
        return not config.getoption("bench_allow_custom_data", False)

    def load_tasks(self, config: pytest.Config, split: str) -> list[Task]:
        root = data_dir(config)
        problems = dataset.load_problems(root, split, verify=self.verify_data(config),
                                         stamp_dir=cache_dir(config))
        return dataset.to_tasks(problems)

    def resolve_targets(self, config: pytest.Config, split: str) -> Targets:
        verified = self.verify_data(config)
        given = config.getoption("bench_h5")
        root = data_dir(config)
        if given:
            path = Path(given).expanduser()
            if not path.is_absolute():
                path = Path(config.invocation_params.dir) / path
            if not path.is_file():
                raise pytest.UsageError(f"agentbench: --bench-h5 {path} does not exist")
            if not verified:
                return Targets(path, "custom")
            try:
                return Targets(verify(path, dataset.H5_FILE, cache_dir(config)), "official")
            except DataError as exc:
                raise pytest.UsageError(
                    f"agentbench: {exc} To score against a file of your own, add --bench-allow-custom-data.") from None
        found = find(root, dataset.H5_FILE)
        if found is not None:
            if not verified:
                return Targets(found, "custom")
            try:
                return Targets(verify(found, dataset.H5_FILE, cache_dir(config)), "official")
            except DataError as exc:
                raise pytest.UsageError(f"agentbench: {exc}") from None
        if split == "validation":
            return Targets(None, "rebuilt")
        where = root / dataset.SUBDIR
        return Targets(None, "missing", H5_HELP.format(url=dataset.H5_FILE.url, sha=dataset.H5_FILE.sha256,
                                                       where=where)
                       + "; for the validation split alone, targets can be rebuilt from ground truth "
                         "(--bench-split=validation)")

    def targets_for(self, config: pytest.Config, problem: dict[str, Any], step_number: str) -> Targets:
        targets: Targets = config.stash[CACHE]["targets"]
        if targets.kind != "rebuilt":
            return targets
        return self.rebuilt_targets(config, problem, step_number)

    def rebuilt_targets(self, config: pytest.Config, problem: dict[str, Any], step_number: str) -> Targets:
        """Targets of a validation problem, rebuilt once per problem into the cache, shared by workers."""
        memo = config.stash[CACHE]["rebuilt"]
        pid = str(problem["problem_id"])
        if pid not in memo:
            memo[pid] = self.build_problem_targets(config, problem)
        path, report = memo[pid]
        status = report.get(step_number, "not rebuilt")
        if status != "ok":
            return Targets(None, "rebuilt", f"could not rebuild the targets of step {step_number}: {status}")
        return Targets(path, "rebuilt")

    def build_problem_targets(self, config: pytest.Config, problem: dict[str, Any]) -> tuple[Path, dict]:
        from . import h5codec
        from .targets import rebuild_targets

        digest = hashlib.sha256(json.dumps(problem, sort_keys=True).encode()).hexdigest()[:16]
        folder = cache_dir(config) / "scicode" / "rebuilt-targets"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{problem['problem_id']}-{digest}.h5"
        report_path = path.with_suffix(".json")
        with open(folder / f".{path.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # xdist workers wait for the one that builds
            if report_path.is_file() and path.is_file():
                return path, json.loads(report_path.read_text())
            report = rebuild_targets([problem], path, timeout=config.getoption("bench_tool_timeout") * 10,
                                     data_dir=data_dir(config))
            tmp = report_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(report))
            tmp.replace(report_path)
            return path, report

    def data_hashes(self, config: pytest.Config, split: str) -> dict[str, str]:
        """sha256 of the problems, prefilled code and targets this run reads (baselines compare them)."""
        verified = self.verify_data(config)
        parts = ("validation", "test") if split == "all" else (split,)
        out = {}
        for f in [*(dataset.PROBLEM_FILES[p] for p in parts), *dataset.PREFILLED_FILES.values()]:
            path = find(data_dir(config), f)
            if path is not None:
                out[f.name] = f.sha256 if verified else sha256_of(path)  # verified files match their pin
        targets: Targets = config.stash[CACHE]["targets"]
        if targets.path is not None:
            out["targets"] = dataset.H5_FILE.sha256 if targets.kind == "official" else sha256_of(targets.path)
        return out

    # ---- running -------------------------------------------------------------------------
    def run_sample(self, sample: Sample, ctx: RunContext) -> dict[str, Any]:
        from .harness import score_step

        return score_step(self, sample, ctx)

    def summarize(self, records: list[dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any]:
        return summarize(records, settings)


benchmark = SciCode()
