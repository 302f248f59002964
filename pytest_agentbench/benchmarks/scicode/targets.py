"""Rebuild SciCode validation targets from the ground-truth code.

The official ``test_data.h5`` (about 1 GB) holds, for every step and test case, the value the test
compares with its free variable ``target``. For the validation split (``problems_dev.jsonl``, which
ships ``ground_truth_code``) those values can be recomputed: each test case is parsed, every
comparison against ``target`` / ``target[k]`` is rewritten to *record* the other operand instead
of asserting, and the rewritten tests run after the ground truth in a sandboxed child
(``sandbox.executors.run_python`` under ``Limits``). The recorded values are written with
:mod:`h5codec` in the official layout, then every step's ORIGINAL tests are run against the rebuilt
file (:func:`verify_targets`) to prove the file is self-consistent.

The child scripts share the scoring scripts' pieces (``script.py``): the comparison helpers served as
``scicode.compare.cmp`` and the ``scipy.integrate.simps`` shim.

These targets are rebuilt from the validation ground truth; they are not the official
``test_data.h5`` (values can differ in the last bits, e.g. across numpy/scipy versions).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import h5py

from ...core import pyast
from ...core.data import DATA_DIR_ENV, DataError, find
from ...sandbox.executors import GiB, Limits, run_python
from ...sandbox.interpreter import Python
from . import dataset, h5codec, script

NOT_OFFICIAL_NOTE = "these targets are rebuilt from the validation ground truth; they are not the official test_data.h5"
RECORD_FN = "_agentbench_record"
STDERR_TAIL_LINES = 25
# The recorded targets are a file the child writes, and RLIMIT_FSIZE (Limits.output_cap) counts it.
TARGETS_FILE_CAP = 4 * GiB
# One BLAS thread per child: reproducible sums and no oversubscription when jobs > 1.
CHILD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
# Ground truth runs in a fresh interpreter per step, never on the fork server that later forks the model's
# scoring children: the server keeps the bytes it hands back (the recorded targets) in its heap, which every
# later child inherits. (A fresh process per step also lets --jobs steps really run in parallel.)
GROUND_TRUTH_EXECUTOR = "subprocess"

Progress = Callable[[str, str, float], None]


class RebuildError(Exception):
    """The rebuild cannot start (bad input); the message names the thing to fix."""


class EnvironmentFailure(str):
    """A step's status when its rebuild failed because of the environment, not the ground truth: the child
    could not start, was killed, hit a limit (time, memory, ...) or lacked a module. Such an outcome says
    nothing about what the same inputs give, so it is never cached, and the step is an ``env_error``.
    (A ``str``, so a report of statuses still reads and compares as text.)"""


# What the ground truth raised when the fault is the environment's (a missing module, memory, the file
# system), not the code's: the same inputs elsewhere give another outcome.
ENVIRONMENT_EXCEPTIONS = frozenset({"ImportError", "ModuleNotFoundError", "MemoryError", "OSError"})


def is_environment_failure(status: str) -> bool:
    return isinstance(status, EnvironmentFailure)


# ----------------------------------------------------------------------------------------------
# problems (found by core/data.py, read by dataset.py)


def find_problems_file(data_dir: Path) -> Path:
    """``<data_dir>/scicode/problems_dev.jsonl``, else ``<data_dir>/problems_dev.jsonl``."""
    data_dir = Path(data_dir)
    f = dataset.PROBLEM_FILES["validation"]
    found = find(data_dir, f)
    if found is None:
        raise RebuildError(
            f"{f.name} not found under {data_dir} (looked in {data_dir}/{f.subdir}/ "
            f"and {data_dir}/); pass --data-dir or set {DATA_DIR_ENV}"
        )
    return found


def load_problems(path: Path) -> list[dict]:
    """The problems of one JSONL file, read by ``dataset.read_jsonl`` (a bad line is a RebuildError)."""
    try:
        return dataset.read_jsonl(Path(path))
    except DataError as exc:
        raise RebuildError(str(exc)) from None


def _select_steps(problems: list[dict], steps: Iterable[str] | None) -> list[tuple[dict, int]]:
    """(problem, index of the step in its sub_steps) for every requested step, in file order."""
    wanted = None if steps is None else [str(s).strip() for s in steps if str(s).strip()]
    selected = []
    for problem in problems:
        for index, step in enumerate(problem.get("sub_steps", [])):
            if wanted is None or step["step_number"] in wanted:
                selected.append((problem, index))
    if wanted is not None:
        found = {problem["sub_steps"][i]["step_number"] for problem, i in selected}
        missing = [s for s in wanted if s not in found]
        if missing:
            raise RebuildError(f"unknown step(s) {', '.join(missing)}: not in the given problems")
    return selected


def ground_truth_prefix(problem: dict, index: int, data_dir: Path | None) -> list[tuple[str, str]]:
    """(label, code) of the ground truth of steps 0..index of ``problem``."""
    parts = []
    for step in problem["sub_steps"][: index + 1]:
        number = step["step_number"]
        code = step.get("ground_truth_code")
        if not code:
            code = _prefilled_code(number, data_dir)
        parts.append((f"<ground truth {number}>", code))
    return parts


def _prefilled_code(step_number: str, data_dir: Path | None) -> str:
    # 13.6, 62.1 and 76.3 ship no ground truth; upstream uses prefilled files (test split only).
    f = dataset.PREFILLED_FILES.get(step_number)
    path = find(Path(data_dir), f) if data_dir is not None and f is not None else None
    if path is not None:
        return path.read_text(encoding="utf-8")
    raise RebuildError(
        f"step {step_number} has no ground_truth_code and no {step_number}.txt "
        "prefilled file was found; targets can only be rebuilt for steps with code"
    )


# ----------------------------------------------------------------------------------------------
# rewriting the tests


def _target_key(node: ast.AST):
    """``None`` for ``target``, ``k`` for ``target[k]`` (int constant), else ``False``."""
    if isinstance(node, ast.Name) and node.id == "target":
        return None
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and node.value.id == "target"
        and isinstance(node.slice, ast.Constant)
        and type(node.slice.value) is int
    ):
        return node.slice.value
    return False


def _record_call(value: ast.expr, key) -> ast.Call:
    return ast.Call(func=ast.Name(id=RECORD_FN, ctx=ast.Load()), args=[value, ast.Constant(value=key)], keywords=[])


class _TargetRewriter(ast.NodeTransformer):
    """Turn ``cmp(x, target)`` / ``x == target`` (and ``target[k]`` forms) into ``record(x, k)``."""

    def visit_Call(self, node: ast.Call):
        self.generic_visit(node)
        keys = [_target_key(arg) for arg in node.args]
        target_positions = [i for i, key in enumerate(keys) if key is not False]
        if len(node.args) == 2 and len(target_positions) == 1:
            position = target_positions[0]
            return ast.copy_location(_record_call(node.args[1 - position], keys[position]), node)
        return node

    def visit_Compare(self, node: ast.Compare):
        self.generic_visit(node)
        if len(node.ops) != 1 or not isinstance(node.ops[0], ast.Eq):
            return node
        left_key, right_key = _target_key(node.left), _target_key(node.comparators[0])
        if right_key is not False and left_key is False:
            return ast.copy_location(_record_call(node.left, right_key), node)
        if left_key is not False and right_key is False:
            return ast.copy_location(_record_call(node.comparators[0], left_key), node)
        return node


def rewrite_test_for_recording(test_code: str, where: str = "test") -> str:
    """Source of ``test_code`` with every comparison against ``target`` replaced by a recording.

    Raises :class:`RebuildError` when ``target`` is used in a way that cannot be recorded (the
    value would be ambiguous), naming the line.
    """
    try:
        tree = pyast.parse(test_code)
    except SyntaxError as exc:
        raise RebuildError(f"{where}: test code does not parse ({exc})") from exc
    tree = ast.fix_missing_locations(_TargetRewriter().visit(tree))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "target":
            raise RebuildError(
                f"{where}: line {node.lineno}: `target` is used outside a two-argument comparison "
                "call or an `==` comparison, so the expected value cannot be recorded"
            )
    return ast.unparse(tree)


# ----------------------------------------------------------------------------------------------
# child scripts

# Run in the sandbox; they report through a result file outside its throw-away folder.
_HELPERS = r"""

def _agentbench_finish(ok, error="", kind=""):
    with open(_AGENTBENCH_RESULT, "w") as _fh:
        _agentbench_json.dump({"ok": ok, "error": error, "kind": kind}, _fh)
    _ab_sys.exit(0 if ok else 1)


def _agentbench_run(code, label):
    try:
        exec(compile(code, label, "exec"), globals())
    except BaseException as exc:  # report which block failed, then stop
        _agentbench_tb.print_exc()
        _kinds = [k.__name__ for k in type(exc).__mro__]
        _agentbench_finish(False, label + ": " + type(exc).__name__ + ": " + str(exc)[:500],
                           next((k for k in _kinds if k in _AGENTBENCH_ENV_KINDS), ""))
"""

_RECORDER = r"""
_agentbench_records = []


def _agentbench_record(value, key):
    current = _agentbench_records[-1]
    current.setdefault(key, value)  # the first comparison wins if a test compares twice
    return True


def _agentbench_collect(records, test_number):
    if not records:
        return ()  # the test never compares with `target`: an empty test group, which every reader takes
    keys = list(records)
    if keys == [None]:
        return records[None]
    if None in keys:
        raise ValueError(f"test {{test_number}} compares with both `target` and `target[k]`")
    if sorted(keys) != list(range(len(keys))):
        raise ValueError(f"test {{test_number}} uses target indices {{sorted(keys)}}; expected 0..n-1")
    values = [records[k] for k in sorted(keys)]
    # one indexed value cannot be a 1-tuple in the layout (it would read back unwrapped): a list
    return tuple(values) if len(values) > 1 else values
"""


def _code_block(code: str, label: str) -> str:
    return f"_agentbench_run({code!r}, {label!r})\n"


def _script_header(problem: dict, index: int, data_dir: Path | None, result_path: Path) -> str:
    codec_path = str(Path(h5codec.__file__).resolve())
    parts = [
        "import importlib.util as _ab_util, json as _agentbench_json, sys as _ab_sys, types as _ab_types\n"
        "import traceback as _agentbench_tb\n\n",
        script.LOADER,
        "\n",
        script.COMPARE_BLOCK,
        "\n",
        f"_agentbench_h5codec = _ab_load('agentbench_h5codec', {codec_path!r})\n",
        f"_AGENTBENCH_RESULT = {str(result_path)!r}\n",
        f"_AGENTBENCH_ENV_KINDS = {sorted(ENVIRONMENT_EXCEPTIONS)!r}\n",
        _HELPERS,
    ]
    gt_parts = ground_truth_prefix(problem, index, data_dir)
    all_code = problem.get("required_dependencies", "") + "".join(code for _, code in gt_parts)
    all_code += "".join(problem["sub_steps"][index].get("test_cases", []))
    if "simps" in all_code:
        parts.append(script.SIMPS_SHIM)
    parts.append(_code_block(problem.get("required_dependencies", "") or "", "<required_dependencies>"))
    for label, code in gt_parts:
        parts.append(_code_block(code, label))
    return "".join(parts)


def recording_script(
    problem: dict, index: int, out_file: Path, data_dir: Path | None = None, *, result_path: Path
) -> str:
    """Child script: ground truth, then the tests rewritten to record, then write ``out_file``."""
    step = problem["sub_steps"][index]
    number = step["step_number"]
    parts = [_script_header(problem, index, data_dir, result_path), _RECORDER.format()]
    for test_number, test in enumerate(step["test_cases"], start=1):
        label = f"<step {number} test {test_number}>"
        rewritten = rewrite_test_for_recording(test, f"step {number} test {test_number}")
        parts.append("_agentbench_records.append({})\n")
        parts.append(_code_block(rewritten, label))
    finish = (
        "_agentbench_values = [_agentbench_collect(r, i + 1) for i, r in enumerate(_agentbench_records)]\n"
        f"with _agentbench_h5codec.h5py.File({str(out_file)!r}, 'w') as _agentbench_fh:\n"  # it exists, empty
        f"    _agentbench_h5codec.write_step_targets(_agentbench_fh, {number!r}, _agentbench_values)\n"
    )
    parts.append(_code_block(finish, "<record targets>"))
    parts.append("_agentbench_finish(True)\n")
    return "".join(parts)


def verification_script(
    problem: dict, index: int, h5_path: Path, data_dir: Path | None = None, *, result_path: Path
) -> str:
    """Child script: ground truth, then the ORIGINAL tests with ``target`` read from ``h5_path``."""
    step = problem["sub_steps"][index]
    number = step["step_number"]
    tests = step["test_cases"]
    parts = [_script_header(problem, index, data_dir, result_path)]
    load = (
        f"_agentbench_targets = _agentbench_h5codec.read_step_targets({str(h5_path)!r}, {number!r})\n"
        f"if len(_agentbench_targets) != {len(tests)}:\n"
        f"    raise ValueError(f'the file has {{len(_agentbench_targets)}} targets for step {number}, "
        f"the step has {len(tests)} test cases')\n"
    )
    parts.append(_code_block(load, "<load targets>"))
    for test_number, test in enumerate(tests, start=1):
        parts.append(f"target = _agentbench_targets[{test_number - 1}]\n")
        parts.append(_code_block(test, f"<step {number} test {test_number}>"))
    parts.append("_agentbench_finish(True)\n")
    return "".join(parts)


def child_limits(limits: Limits | None, timeout: float) -> Limits:
    """The limits of one rebuild child: ``limits`` (default: ``timeout`` and the sandbox's defaults) with
    room for the targets file it writes."""
    limits = limits or Limits(timeout=timeout)
    return dataclasses.replace(limits, output_cap=max(limits.output_cap, TARGETS_FILE_CAP))


# The child works in its own folder (under isolation it sees nothing of the parent's): it gets its
# input targets as a file there and hands back its result and recorded targets through ``collect``.
CHILD_RESULT = "result.json"
CHILD_TARGETS = "targets.h5"
RESULT_CAP = 1 << 20


def run_child_script(
    source: str,
    *,
    limits: Limits,
    targets_in: bytes | None = None,
    targets_out: Path | None = None,
    python: Python | None = None,
) -> str:
    """Run ``source`` in the sandbox; ``"ok"`` or a message saying what failed (an :class:`EnvironmentFailure`
    when the environment, not the ground truth, is at fault). ``targets_in`` is put in the child's folder as
    ``targets.h5``; with ``targets_out`` the ``targets.h5`` the child wrote is saved there."""
    collect = {CHILD_RESULT: RESULT_CAP}
    if targets_out is not None:
        collect[CHILD_TARGETS] = limits.output_cap
    files = {CHILD_TARGETS: targets_in} if targets_in is not None else None
    try:
        result = run_python(
            source,
            limits=limits,
            env=CHILD_ENV,
            executor=GROUND_TRUTH_EXECUTOR,
            files=files,
            collect=collect,
            python=python,
        )
    except OSError as exc:  # the interpreter (or the sandbox around it) could not be started
        return EnvironmentFailure(f"the child could not start: {exc}")
    if result.timed_out:
        return EnvironmentFailure(f"timed out after {limits.timeout:g} s")
    outcome = child_outcome(result.files.get(CHILD_RESULT, b""))
    tail = "\n".join(result.stderr.splitlines()[-STDERR_TAIL_LINES:])
    if outcome.get("ok") and result.exit_code == 0:
        if targets_out is not None:
            written = result.files.get(CHILD_TARGETS, b"")
            if not written:
                return EnvironmentFailure("the child reported success but wrote no targets")
            targets_out.write_bytes(written)
        return "ok"
    if result.limit:
        return EnvironmentFailure(f"{result.limit} limit hit: {outcome.get('error') or tail}".strip())
    if outcome.get("error"):
        error = str(outcome["error"])
        return EnvironmentFailure(error) if outcome.get("kind") else error
    # no word from the child: it never started (a hidden interpreter, a sandbox that failed) or was killed
    return EnvironmentFailure(f"child exited with code {result.exit_code}: {tail}".strip())


def child_outcome(raw: bytes) -> dict:
    """What the child wrote to its result file (empty when nothing, or not JSON)."""
    try:
        outcome = json.loads(raw.decode("utf-8")) if raw else {}
    except ValueError:
        return {}
    return outcome if isinstance(outcome, dict) else {}


# ----------------------------------------------------------------------------------------------
# public API


def _run_steps(selected, make_script, jobs, progress, workroot: Path, limits: Limits, python=None) -> dict:
    def run_one(item):
        problem, index = item
        number = problem["sub_steps"][index]["step_number"]
        started = time.monotonic()
        try:
            source, targets_in, targets_out = make_script(problem, index, workroot / f"{number}.h5")
            status = run_child_script(
                source, limits=limits, targets_in=targets_in, targets_out=targets_out, python=python
            )
        except (RebuildError, h5codec.TargetsError) as exc:
            status = str(exc)
        except OSError as exc:  # a file of the rebuild's own could not be written or read
            status = EnvironmentFailure(str(exc))
        if progress is not None:
            progress(number, status, time.monotonic() - started)
        return number, status

    if jobs <= 1:
        results = [run_one(item) for item in selected]
    else:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(run_one, selected))
    return dict(results)


def rebuild_targets(
    problems: list[dict],
    out_path: Path,
    *,
    timeout: float = 600,
    jobs: int = 1,
    progress: Progress | None = None,
    steps: Iterable[str] | None = None,
    data_dir: Path | None = None,
    limits: Limits | None = None,
    python: Python | None = None,
) -> dict:
    """Recompute targets of ``steps`` (default all) from ground truth into ``out_path``, the ground truth run
    by ``python`` (a grading environment's interpreter; default the running one).

    Returns ``{step_number: "ok" | error message}``. Steps that succeed are written (replacing
    the same steps if ``out_path`` already exists; other steps in it are kept), atomically via a
    temporary file and ``os.replace``. ``progress(step, status, seconds)`` is called per step.
    Each step runs under ``limits`` (default: ``timeout`` seconds and the sandbox's other defaults).
    """
    out_path = Path(out_path)
    limits = child_limits(limits, timeout)
    selected = _select_steps(problems, steps)
    if not selected:
        raise RebuildError("no steps to rebuild: the problems list is empty")
    if out_path.exists() and not _is_hdf5(out_path):
        raise RebuildError(f"{out_path} exists and is not an HDF5 file; choose another --out path")
    workroot = Path(tempfile.mkdtemp(prefix="agentbench-targets-"))
    try:

        def make_script(problem, index, step_file):
            return (
                recording_script(problem, index, CHILD_TARGETS, data_dir, result_path=CHILD_RESULT),
                None,
                step_file,
            )

        report = _run_steps(selected, make_script, jobs, progress, workroot, limits, python)
        _merge_step_files(workroot, [s for s, status in report.items() if status == "ok"], out_path)
    finally:
        shutil.rmtree(workroot, ignore_errors=True)
    return report


def verify_targets(
    problems: list[dict],
    h5_path: Path,
    timeout: float = 600,
    *,
    jobs: int = 1,
    progress: Progress | None = None,
    steps: Iterable[str] | None = None,
    data_dir: Path | None = None,
    limits: Limits | None = None,
) -> dict:
    """Run each step's original tests with its ground truth against ``h5_path``.

    Returns ``{step_number: "ok" | error message}``.
    """
    h5_path = Path(h5_path).resolve()
    if not h5_path.is_file():
        raise RebuildError(f"targets file {h5_path} does not exist")
    limits = child_limits(limits, timeout)
    selected = _select_steps(problems, steps)
    workroot = Path(tempfile.mkdtemp(prefix="agentbench-verify-"))
    try:

        def make_script(problem, index, step_file):
            number = str(problem["sub_steps"][index]["step_number"])
            with h5py.File(h5_path, "r") as src, h5py.File(step_file, "w") as dst:
                if number in src:  # only this step's targets go into the child's folder
                    src.copy(src[number], dst, name=number)
            return (
                verification_script(problem, index, CHILD_TARGETS, data_dir, result_path=CHILD_RESULT),
                step_file.read_bytes(),
                None,
            )

        return _run_steps(selected, make_script, jobs, progress, workroot, limits)
    finally:
        shutil.rmtree(workroot, ignore_errors=True)


def _is_hdf5(path: Path) -> bool:
    return path.is_file() and h5py.is_hdf5(str(path))


def _merge_step_files(workroot: Path, steps: list[str], out_path: Path) -> None:
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(f".{out_path.name}.tmp{os.getpid()}")
    try:
        if out_path.exists():
            shutil.copyfile(out_path, tmp)
        with h5py.File(tmp, "a") as dst:
            dst.attrs["agentbench_note"] = NOT_OFFICIAL_NOTE
            for step in steps:
                if step in dst:
                    del dst[step]
                with h5py.File(workroot / f"{step}.h5", "r") as src:
                    src.copy(src[step], dst, name=step)
        os.replace(tmp, out_path)
    finally:
        if tmp.exists():
            tmp.unlink()
