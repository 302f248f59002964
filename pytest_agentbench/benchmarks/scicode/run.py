"""Scoring SciCode steps: get the code of the step and of the steps before it, then run the tests.

Step k depends on the code of steps 1..k-1, a data dependency: the code comes from this run's memo
(earlier steps of the same problem ran here; xdist keeps a problem on one worker), else it is
generated now (cheap when the response cache has it). So one step may be scored alone.

Plain Python, no pytest: a notebook can score one step::

    from pytest_agentbench.benchmarks.scicode.run import RunSettings, SciCodeRun
    from pytest_agentbench.benchmarks.scicode.locate import TargetTable
    from pytest_agentbench.benchmarks.scicode.solvers import OracleSolver
    from pytest_agentbench.sandbox.executors import Limits

    run = SciCodeRun(RunSettings(targets=TargetTable.file("targets.h5")), OracleSolver(), env=None,
                     limits=Limits(timeout=60), out_dir=Path("out"))  # or files=<a core.io.RunFiles>
    record = run.run_step(problem, 0)  # {"problem": ..., "step": ..., "status": "pass", ...}
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...core import pyast
from ...core.io import DirectoryFiles, RunFiles, trim
from ...core.records import BLOCKED, BLOCKED_BY_FIELD, BUDGET, Record, RecordLike, as_mapping, sample_record
from ...core.text import printable
from ...core.types import Sample
from ...models.retrytime import in_item_scope
from ...sandbox import codec
from ...sandbox.executors import Limits, run_python
from ...sandbox.integrity import run_failure
from ...sandbox.interpreter import Python
from ...sandbox.result import ExecResult
from ..base import BenchRun
from . import dataset, h5codec, multigrade, script, split, verdict
from .chains import ChainRunner, NotAhead
from .extract import PARSE_FAILURES
from .gradingenvs import GradingEnv
from .locate import RebuiltTable, Targets, TargetTable
from .solvers import Generated, Solver

NAME = "scicode"  # the benchmark's name (--bench), in each record it makes
RECORD_OUTPUT_LIMIT = 4000  # characters of stdout/stderr kept in a record
CHANNEL = "operands.bin"  # the file in the child's work folder its operand values are written to


@dataclass(frozen=True)
class RunSettings:
    """What scoring needs besides the solver, the environment and the limits."""

    targets: TargetTable | RebuiltTable
    executor: str = "fork"  # sandbox executor of the scoring scripts: fork or subprocess
    overlap: bool = True  # generate the steps of the problems held ahead, while earlier steps are scored
    prefilled: Mapping[str, str] = field(default_factory=dict)  # official code of the prefilled steps
    selected: frozenset[str] | None = None  # step ids this run will score (look-ahead stays inside); None: all
    operand_cap: int = codec.DEFAULT_MAX_BYTES  # bytes of encoded operand values a step's child may send
    # --bench-set grading_envs: each environment with its own targets table; empty: the running interpreter alone
    grading_envs: tuple[tuple[GradingEnv, TargetTable | RebuiltTable], ...] = ()
    grading_all: bool = False  # --bench-set=grading_envs_all=true: grade in every environment even after one passed
    connections: int = 1  # chains generated at once (this process's share of --bench-max-connections)
    # The samples this process holds (will run), in its order: their chains start ahead; None: a chain starts at
    # its problem's first step scored here.
    held: Callable[[], Sequence[Sample]] | None = None


class SciCodeRun(BenchRun):
    """One process's SciCode run (the ``BenchRun`` of ``SciCode.open_run``).

    ``env`` is the environment factory (the ``bench_env`` value) the chat solver's tool code runs in;
    ``limits`` bound each scoring script; records are returned, trajectories written through ``files`` (the
    run's ``RunSpec.files``; a notebook may give ``out_dir`` instead: a folder they are written to).
    ``problems`` (task id -> problem dict) lets ``run_sample`` find the problem of a sample; ``reused``: the
    records of an earlier session a resumed run keeps, whose answers the steps run again build on."""

    def __init__(
        self,
        settings: RunSettings,
        solver: Solver,
        env: Any,
        limits: Limits,
        out_dir: Path | None = None,
        *,
        problems: Mapping[str, dict[str, Any]] | None = None,
        files: RunFiles | None = None,
        reused: Iterable[RecordLike] = (),
    ) -> None:
        self.settings = settings
        self.solver = solver
        self.env = env
        self.limits = limits
        self.files = files if files is not None else DirectoryFiles(Path(out_dir or "."))
        self.problems = dict(problems or {})
        self.generated: dict[tuple[str, int, int], Generated | Future] = {}  # (problem, step index, attempt)
        self.lock = threading.RLock()  # the memo is shared with the chains' threads
        self.scored: set[tuple[str, int, int]] = set()  # the generations a record of this run reports
        self.chains: ChainRunner | None = None
        if settings.overlap and getattr(solver, "overlaps", False):  # (a notebook may score given code only)
            self.chains = ChainRunner(
                settings.connections,
                lambda problem, index, previous, attempt: in_item_scope(solver.solve)(
                    problem, index, previous, **sample_of(attempt)
                ),
                settings.prefilled,
                self.generated,
                self.lock,
            )
        self.reuse_answers(reused)

    # ---- the BenchRun protocol ------------------------------------------------------------
    def run_sample(self, sample: Sample) -> Record:
        self.start_held(sample)
        fields = self.run_step(
            self.problems[sample.task_id], sample.data["index"], attempt=sample.attempt, retry=sample.retry
        )
        return sample_record(NAME, sample, fields)

    def prepare_sample(self, sample: Sample) -> None:
        """Have the targets of the sample's step (its problem's targets rebuilt when they must be) before the
        sample is timed: the rebuild is in no step's duration or timeout. Never raises: a failure here happens
        again, and is recorded, when the step asks for its targets."""
        problem = self.problems.get(sample.task_id)
        if problem is None:
            return
        number = str(problem["sub_steps"][sample.data["index"]]["step_number"])
        try:
            if self.settings.grading_envs:
                multigrade.prepare(self.settings.grading_envs, number)
            else:
                self.settings.targets.prepare_step(number)
        except Exception:  # noqa: BLE001 - see the docstring
            pass

    def close(self) -> None:
        if self.chains is not None:
            self.chains.close()

    def unscored(self) -> list[dict[str, Any]]:
        """What the generations no record of this run reports cost (a step generated ahead whose item was not
        scored here: the run stopped, its budget was spent, or it only fed a later step): one accounting each."""
        with self.lock:
            memo = list(self.generated.items())
        out = []
        for key, value in memo:
            done: Any = value
            if isinstance(value, Future):
                done = value.result() if value.done() and not value.cancelled() and not value.exception() else None
            if isinstance(done, Generated) and key not in self.scored and done.accounting.get("model_calls"):
                out.append({"problem": key[0], "index": key[1], "attempt": key[2], **done.accounting})
        return out

    def start_held(self, sample: Sample) -> None:
        """Start the chains of the problems (and attempts) this process holds, in its order, each up to the last
        of its steps held: their generation runs ahead of scoring (chains.py)."""
        if self.chains is None:
            return
        held = list(self.settings.held()) if self.settings.held is not None else []
        last: dict[tuple[str, int], int] = {}
        for s in [sample, *held]:
            if s.skip_reason or s.task_id not in self.problems:
                continue
            key = (s.task_id, s.attempt)
            last[key] = max(last.get(key, -1), int(s.data["index"]))
        for (task_id, attempt), index in last.items():
            self.chains.start(self.problems[task_id], attempt, index)

    # ---- one step -------------------------------------------------------------------------
    def run_step(self, problem: dict[str, Any], index: int, *, attempt: int = 1, retry: int = 0) -> dict[str, Any]:
        """Generate (or reuse) the code of step ``index`` (0-based) of ``problem`` and score it: the record.

        ``attempt`` (--bench-attempts) is an independent sample of the whole problem (its own memo, model
        calls with sample_index attempt-1); ``retry`` > 0 (--bench-set max_retries) first forgets the
        generations of this attempt that failed, so they are asked again (answers in the cache are reused)."""
        step = problem["sub_steps"][index]
        number = str(step["step_number"])
        if retry:
            self.forget_failures(str(problem["problem_id"]), attempt)
            self.settings.targets.forget_failures(str(problem["problem_id"]))
            multigrade.forget_failures(self.settings.grading_envs, str(problem["problem_id"]))
        previous, waited = self.earlier_code(problem, index, attempt)
        if waited is not None:
            return blocked_record(problem, index, *waited)
        generated = self.generate(problem, index, previous, attempt)
        with self.lock:
            self.scored.add((str(problem["problem_id"]), index, attempt))
        record: dict[str, Any] = {
            **step_fields(problem, index),
            "code": generated.code,
            "generation": {"status": generated.status, **generated.accounting},
        }
        if generated.trajectory:
            name = number if attempt == 1 else f"{number}-attempt{attempt}"
            record["trajectory"] = write_trajectory(self.files, name, generated)
        # A reply cut off at the token limit is still scored when the code it holds parses, as upstream
        # scores whatever code it extracts; the record keeps generation.status "truncated".
        usable = generated.status in ("ok", "truncated") and parses(generated.code)
        if not usable:
            if generated.status in ("model_error", BUDGET):
                return {**record, "status": generated.status, "message": printable(generated.message)}
            message = printable(generated.message) or f"the code for step {number} is not valid Python"
            return {**record, "status": "parse_error", "message": message}
        if generated.status == "truncated":
            record["note"] = printable(generated.message)
        self.ahead(problem, index, attempt)
        code = generated.code or ""  # (usable: it parses, so it is there)
        if self.settings.grading_envs:
            return {
                **record,
                **multigrade.grade(
                    number,
                    self.settings.grading_envs,
                    lambda targets, env: self.score(problem, index, previous, code, targets, python=env.python),
                    every=self.settings.grading_all,
                ),
            }
        targets = self.settings.targets.for_step(number)
        record["targets"] = targets.kind
        if targets.path is None:
            return {**record, "status": targets.status, "message": targets.message}
        record["targets_source"] = targets.source  # rebuilt (by this process), cached, official or custom
        return {**record, **self.score(problem, index, previous, code, targets)}

    def score(
        self,
        problem: dict[str, Any],
        index: int,
        previous: list[str],
        code: str,
        targets: Targets,
        python: Python | None = None,
    ) -> dict:
        """Run the step's tests split in two (split/, then verdict.py): the child runs the code and sends the
        operands of every assertion; this process reads the targets (checked against the digest it holds, as they are
        read) and evaluates the assertions in a bounded copy of itself. ``python``: a grading environment's
        interpreter the child runs (then without the ``simps`` shim); default the running one."""
        step = problem["sub_steps"][index]
        number = str(step["step_number"])
        n_tests = len(step["test_cases"])
        try:
            values = targets.read_step(number)
        except h5codec.TargetsError as exc:
            return {"status": "eval_error", "message": f"agentbench: cannot read targets of step {number}: {exc}"}
        if len(values) < n_tests:
            return {
                "status": "eval_error",
                "message": f"agentbench: {targets.path} has {len(values)} targets for step "
                f"{number}, the step has {n_tests} tests",
            }
        try:
            plan = split.split_step(
                step["test_cases"],
                number,
                code_names=split.names_bound_by(problem.get("required_dependencies", ""), *previous, code),
                required=split.required_names(
                    *(s.get("function_header", "") for s in problem["sub_steps"][: index + 1])
                ),
            )
        except split.SplitError as exc:
            return {"status": "eval_error", "message": f"agentbench: cannot verify the tests: {exc}"}
        cap = self.settings.operand_cap
        source = script.build_child_script(
            plan,
            dependencies=problem.get("required_dependencies", ""),
            previous_code=previous,
            code=code,
            channel=CHANNEL,
            max_bytes=cap,
            simps=python is None,
        )
        stream_cap = plan.stream_cap(cap)
        limits = dataclasses.replace(self.limits, output_cap=max(self.limits.output_cap, stream_cap + 1))
        result = run_python(
            source, limits=limits, executor=self.settings.executor, collect={CHANNEL: stream_cap}, python=python
        )
        stream = result.files.get(CHANNEL, b"")
        outcome = verdict.evaluate(plan, stream, values, max_bytes=cap, limits=self.limits)  # bounded like the child
        return split_verdict(result, outcome, len(stream))

    # ---- code of steps ----------------------------------------------------------------------
    def earlier_code(
        self, problem: dict[str, Any], index: int, attempt: int = 1
    ) -> tuple[list[str], tuple[int, Generated] | None]:
        """The code of the steps before ``index``, in order, and the first of them that ended without the model's
        answer (a model error: its code is missing, so a step building on it is blocked, not scored), or None."""
        previous: list[str] = []
        for j in range(index):
            if str(problem["sub_steps"][j]["step_number"]) in dataset.PREFILLED_FILES:
                previous.append(self.code_of(problem, j, attempt))
                continue
            generated = self.generate(problem, j, previous, attempt)
            if generated.status == "model_error":
                return previous, (j, generated)
            previous.append(generated.code or "")
        return previous, None

    def code_of(self, problem: dict[str, Any], index: int, attempt: int = 1) -> str:
        """The code an earlier step contributes: the official code of a prefilled step, else its generated code."""
        number = str(problem["sub_steps"][index]["step_number"])
        if number in dataset.PREFILLED_FILES:
            if number not in self.settings.prefilled:
                raise ValueError(
                    f"step {number} is an official prefilled step: pass its code in "
                    f"RunSettings.prefilled (dataset.load_prefilled)"
                )
            return self.settings.prefilled[number]
        previous = [self.code_of(problem, j, attempt) for j in range(index)]
        return self.generate(problem, index, previous, attempt).code or ""

    def generate(self, problem: dict[str, Any], index: int, previous: list[str], attempt: int = 1) -> Generated:
        key = (str(problem["problem_id"]), index, attempt)
        with self.lock:
            memo = self.generated.get(key)
        if isinstance(memo, Future) and self.chains is not None:  # its chain generates it (or has, meanwhile)
            try:
                memo = self.chains.wait(key, memo)
            except NotAhead:  # its chain stopped before it: generated here, as in the serial order
                memo = None
        if memo is None:
            memo = self.solver.solve(problem, index, previous, **sample_of(attempt))
        assert isinstance(memo, Generated)
        with self.lock:
            self.generated[key] = memo
        return memo

    def reuse_answers(self, records: Iterable[RecordLike]) -> None:
        """Put the answers of kept records in the memo: a step run again (a resumed run's model_error or blocked
        step) builds on the code the kept verdicts scored, not on a new sample (--bench-cache=off) of it. A record
        without the model's answer (an error, a blocked step) leaves its step to be asked again."""
        for record in records:
            generation = as_mapping(record.get("generation"))
            problem = self.problems.get(str(record.get("task")))
            if problem is None or generation.get("status") in (None, "model_error", BLOCKED, BUDGET):
                continue
            numbers = [str(s["step_number"]) for s in problem["sub_steps"]]
            if str(record.get("id")) not in numbers:
                continue
            key = (str(problem["problem_id"]), numbers.index(str(record.get("id"))), int(record.get("attempt") or 1))
            code = record.get("code")
            with self.lock:
                self.generated[key] = Generated(
                    code if isinstance(code, str) else None, str(generation["status"]), accounting={"model_calls": 0}
                )

    def forget_failures(self, problem_id: str, attempt: int) -> None:
        """Drop the memo of this attempt's generations that ended in a model error (a retry asks again)."""
        with self.lock:
            for key, memo in list(self.generated.items()):
                if (
                    key[0] == problem_id
                    and key[2] == attempt
                    and isinstance(memo, Generated)
                    and memo.status == "model_error"
                ):
                    del self.generated[key]

    def ahead(self, problem: dict[str, Any], index: int, attempt: int = 1) -> None:
        """Have the steps after this one generated while it is scored: they need its code, not its verdict. Only
        up to the last step of the problem this run will score, so scoring one step alone never pays for a call
        it does not need."""
        if self.chains is None:
            return
        selected = self.settings.selected
        steps = problem["sub_steps"]
        wanted = [
            j
            for j in range(index + 1, len(steps))
            if str(steps[j]["step_number"]) not in dataset.PREFILLED_FILES
            and (selected is None or str(steps[j]["step_number"]) in selected)
        ]
        if wanted:
            self.chains.start(problem, attempt, wanted[-1])


def step_fields(problem: dict[str, Any], index: int) -> dict[str, Any]:
    """The first fields of a step's record: which problem and step, its category, how many tests."""
    step = problem["sub_steps"][index]
    return {
        "problem": str(problem["problem_id"]),
        "step": str(step["step_number"]),
        "category": dataset.category_of(problem),  # report.html filters on it
        "tests": len(step["test_cases"]),
    }


def blocked_record(problem: dict[str, Any], index: int, earlier: int, waited: Generated) -> dict[str, Any]:
    """The record of a step not run because an earlier step it builds on has no answer of the model: ``blocked``,
    naming that step (``blocked_by``). Scoring it against the missing function would make the endpoint's failure
    the model's; it runs again on --bench-resume and --bench-set max_retries, once the earlier step has its answer."""
    number = str(problem["sub_steps"][index]["step_number"])
    waited_for = str(problem["sub_steps"][earlier]["step_number"])
    return {
        **step_fields(problem, index),
        "code": None,
        "generation": {"status": BLOCKED},
        BLOCKED_BY_FIELD: waited_for,
        "status": BLOCKED,
        "message": f"not run: step {number} builds on step {waited_for}, which ended in {waited.status} "
        "(no answer of the model to build on)",
    }


def sample_of(attempt: int) -> dict[str, int]:
    """The solver's keyword for an attempt after the first (--bench-attempts); none for the first, so a
    solver written before attempts existed (``solve(problem, index, previous)``) still works."""
    return {"sample_index": attempt - 1} if attempt > 1 else {}


def parses(code: str | None) -> bool:
    if not code or not code.strip():
        return False
    try:
        pyast.parse(code)
    except PARSE_FAILURES:  # (MemoryError, RecursionError: code nested too deep is code that does not parse)
        return False
    return True


def split_verdict(result: ExecResult, outcome: verdict.StepOutcome, operands_bytes: int) -> dict[str, Any]:
    """Status of a split scoring run. A pass needs every assertion true in the parent *and* the child's run
    to end normally (exit 0, no limit, as the executor saw it): the exit code alone never passes a step."""
    n_tests = outcome.tests
    out: dict[str, Any] = {
        "returncode": result.exit_code,
        "tests_completed": outcome.tests_passed,
        "stdout": trim(result.stdout, RECORD_OUTPUT_LIMIT),
        "stderr": trim(result.stderr, RECORD_OUTPUT_LIMIT),
        "exec_duration": round(result.duration, 3),
        "operands_bytes": operands_bytes,
    }
    if result.limit:
        out["limit"] = result.limit
    if result.text_repaired:  # undecodable bytes of the child's stdout/stderr, shown as U+FFFD
        out["text_repaired"] = result.text_repaired
    failure = outcome.failure
    if failure is not None:
        out.update(failed_test=failure.test, failure_kind=failure.kind)
    if outcome.stream_error:
        out["stream_error"] = outcome.stream_error
    if outcome.inputs_mutated:  # a note (the child's word): the parent computed from its own copies of these
        out["inputs_mutated"] = list(outcome.inputs_mutated)
    if failure is not None and failure.kind != "stopped":  # upstream's script stops at this first failure
        return {**out, "status": "fail", "message": printable(failure.message)}  # (text the child chose)
    if result.timed_out:
        return {**out, "status": "timeout", "message": f"scoring ran past {result.duration:.0f} s (--bench-timeout)"}
    problem = run_failure(result)
    if problem is None and outcome.passed:
        return {**out, "status": "pass", "message": ""}
    problem = problem or "exited before all tests ran"
    done = outcome.tests_passed
    where = f"test {failure.test} of {n_tests}" if failure is not None else "after the tests"
    if result.exit_code == 0 or result.limit or problem.startswith("generated code"):
        detail = f"{problem} ({done} of {n_tests} tests completed)"
    else:
        detail = f"{last_line(result.stderr) or problem} ({where})"
    return {**out, "status": "fail", "message": detail}


def last_line(text: str) -> str:
    """The child's last non-blank stderr line, its control characters made visible (no escape sequence of
    the model's reaches a record message, the terminal or a report)."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return printable(lines[-1].strip()) if lines else ""


def write_trajectory(files: RunFiles, number: str, generated: Generated) -> str:
    """``trajectories/<step>.json`` through the run's file sink; the relpath the record refers to."""
    return files.write(
        f"trajectories/{number}.json",
        json.dumps(
            {
                "step": number,
                "status": generated.status,
                "messages": generated.trajectory,
                "response": generated.response_text,
                "turns": generated.turns,
            },
            indent=1,
            default=str,
        ),
    )
