"""Rebuild SciCode validation targets from the ground-truth code.

The official ``test_data.h5`` (about 1 GB) holds, for every step and test case, the value the test
compares with its free variable ``target``. For the validation split (``problems_dev.jsonl``, which
ships ``ground_truth_code``) those values can be recomputed: each test case is parsed, every
comparison against ``target`` / ``target[k]`` is rewritten to *record* the other operand instead
of asserting, and the rewritten tests run after the ground truth in a child process. The recorded
values are written with :mod:`h5codec` in the official layout, then every step's ORIGINAL tests are
run against the rebuilt file (:func:`verify_targets`) to prove the file is self-consistent.

These targets are rebuilt from the validation ground truth; they are not the official
``test_data.h5`` (values can differ in the last bits, e.g. across numpy/scipy versions).
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable

from . import h5codec

DATA_DIR_ENV = "AGENTBENCH_DATA_DIR"
PROBLEMS_FILE = "problems_dev.jsonl"
NOT_OFFICIAL_NOTE = ("these targets are rebuilt from the validation ground truth; "
                     "they are not the official test_data.h5")
RECORD_FN = "_agentbench_record"
STDERR_TAIL_LINES = 25

Progress = Callable[[str, str, float], None]


class RebuildError(Exception):
    """The rebuild cannot start (bad input); the message names the thing to fix."""


# ----------------------------------------------------------------------------------------------
# problems


def find_problems_file(data_dir: Path) -> Path:
    """``<data_dir>/scicode/problems_dev.jsonl``, else ``<data_dir>/problems_dev.jsonl``."""
    data_dir = Path(data_dir)
    for candidate in (data_dir / "scicode" / PROBLEMS_FILE, data_dir / PROBLEMS_FILE):
        if candidate.is_file():
            return candidate
    raise RebuildError(f"{PROBLEMS_FILE} not found under {data_dir} (looked in {data_dir}/scicode/ "
                       f"and {data_dir}/); pass --data-dir or set {DATA_DIR_ENV}")


def load_problems(path: Path) -> list[dict]:
    problems = []
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                problems.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise RebuildError(f"{path} line {number} is not JSON ({exc})") from exc
    return problems


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


def _ground_truth_prefix(problem: dict, index: int, data_dir: Path | None) -> list[tuple[str, str]]:
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
    if data_dir is not None:
        for candidate in (Path(data_dir) / "scicode" / f"{step_number}.txt",
                          Path(data_dir) / f"{step_number}.txt"):
            if candidate.is_file():
                return candidate.read_text(encoding="utf-8")
    raise RebuildError(f"step {step_number} has no ground_truth_code and no {step_number}.txt "
                       "prefilled file was found; targets can only be rebuilt for steps with code")


# ----------------------------------------------------------------------------------------------
# rewriting the tests


def _target_key(node: ast.AST):
    """``None`` for ``target``, ``k`` for ``target[k]`` (int constant), else ``False``."""
    if isinstance(node, ast.Name) and node.id == "target":
        return None
    if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
            and node.value.id == "target" and isinstance(node.slice, ast.Constant)
            and type(node.slice.value) is int):
        return node.slice.value
    return False


def _record_call(value: ast.expr, key) -> ast.Call:
    return ast.Call(func=ast.Name(id=RECORD_FN, ctx=ast.Load()),
                    args=[value, ast.Constant(value=key)], keywords=[])


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
        tree = ast.parse(test_code)
    except SyntaxError as exc:
        raise RebuildError(f"{where}: test code does not parse ({exc})") from exc
    tree = ast.fix_missing_locations(_TargetRewriter().visit(tree))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "target":
            raise RebuildError(
                f"{where}: line {node.lineno}: `target` is used outside a two-argument comparison "
                "call or an `==` comparison, so the expected value cannot be recorded")
    return ast.unparse(tree)


# ----------------------------------------------------------------------------------------------
# child scripts

_PRELUDE = r'''
import importlib.util as _agentbench_ilu
import json as _agentbench_json
import sys as _agentbench_sys
import traceback as _agentbench_tb
import types as _agentbench_types

_agentbench_spec = _agentbench_ilu.spec_from_file_location("agentbench_h5codec", {codec_path!r})
_agentbench_h5codec = _agentbench_ilu.module_from_spec(_agentbench_spec)
_agentbench_spec.loader.exec_module(_agentbench_h5codec)


def _agentbench_finish(ok, error=""):
    with open("result.json", "w") as _fh:
        _agentbench_json.dump({{"ok": ok, "error": error}}, _fh)
    _agentbench_sys.exit(0 if ok else 1)


def _agentbench_run(code, label):
    try:
        exec(compile(code, label, "exec"), globals())
    except BaseException as exc:  # report which block failed, then stop
        _agentbench_tb.print_exc()
        _agentbench_finish(False, label + ": " + type(exc).__name__ + ": " + str(exc)[:500])


def _agentbench_is_sparse(value):
    return type(value).__module__.startswith("scipy.sparse") and hasattr(value, "toarray")


def _agentbench_close(a, b):
    # Verification-only comparison: dense/array closeness, exact equality when that is undefined.
    if _agentbench_is_sparse(a) or _agentbench_is_sparse(b):
        a = a.toarray() if _agentbench_is_sparse(a) else a
        b = b.toarray() if _agentbench_is_sparse(b) else b
    if isinstance(a, dict):
        return isinstance(b, dict) and _agentbench_dicts_close(a, b)
    if isinstance(a, (bool, str)) or isinstance(b, str):
        return a == b
    import numpy as _np
    try:
        return bool(_np.allclose(a, b))
    except (TypeError, ValueError):
        return bool(a == b)


def _agentbench_plain_key(key):
    return str(key) if type(key).__module__.startswith("sympy") else key


def _agentbench_dicts_close(d1, d2, atol=1e-8, rtol=1e-5):
    d1 = {{_agentbench_plain_key(k): v for k, v in d1.items()}}
    d2 = {{_agentbench_plain_key(k): v for k, v in d2.items()}}
    if d1.keys() != d2.keys():
        return False
    return all(_agentbench_close(d1[k], d2[k]) for k in d1)


def _agentbench_seq_close(s1, s2):
    if len(s1) != len(s2):
        return False
    return all(_agentbench_close(a, b) for a, b in zip(s1, s2))


# `from scicode.compare.cmp import ...` in the tests must resolve without the upstream package.
for _agentbench_name in ("scicode", "scicode.compare", "scicode.compare.cmp"):
    _agentbench_sys.modules.setdefault(_agentbench_name, _agentbench_types.ModuleType(_agentbench_name))
_agentbench_sys.modules["scicode.compare.cmp"].cmp_tuple_or_list = _agentbench_seq_close
_agentbench_sys.modules["scicode.compare.cmp"].are_dicts_close = _agentbench_dicts_close
'''

# scipy.integrate.simps was removed in scipy 1.14; ground truth written against older scipy uses it.
_SIMPS_SHIM = r'''
import scipy.integrate as _agentbench_integrate
if not hasattr(_agentbench_integrate, "simps"):
    def _agentbench_simps(y, x=None, dx=1.0, axis=-1, even=None):
        return _agentbench_integrate.simpson(y, x=x, dx=dx, axis=axis)
    _agentbench_integrate.simps = _agentbench_simps
'''

_RECORDER = r'''
_agentbench_records = []


def _agentbench_record(value, key):
    current = _agentbench_records[-1]
    current.setdefault(key, value)  # the first comparison wins if a test compares twice
    return True


def _agentbench_collect(records, test_number):
    if not records:
        return None  # the test never compares with `target`
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
'''


def _code_block(code: str, label: str) -> str:
    return f"_agentbench_run({code!r}, {label!r})\n"


def _script_header(problem: dict, index: int, data_dir: Path | None) -> str:
    codec_path = str(Path(h5codec.__file__).resolve())
    parts = [_PRELUDE.format(codec_path=codec_path)]
    gt_parts = _ground_truth_prefix(problem, index, data_dir)
    all_code = problem.get("required_dependencies", "") + "".join(code for _, code in gt_parts)
    all_code += "".join(problem["sub_steps"][index].get("test_cases", []))
    if "simps" in all_code:
        parts.append(_SIMPS_SHIM)
    parts.append(_code_block(problem.get("required_dependencies", "") or "", "<required_dependencies>"))
    for label, code in gt_parts:
        parts.append(_code_block(code, label))
    return "".join(parts)


def recording_script(problem: dict, index: int, out_file: Path, data_dir: Path | None = None) -> str:
    """Child script: ground truth, then the tests rewritten to record, then write ``out_file``."""
    step = problem["sub_steps"][index]
    number = step["step_number"]
    parts = [_script_header(problem, index, data_dir), _RECORDER.format()]
    for test_number, test in enumerate(step["test_cases"], start=1):
        label = f"<step {number} test {test_number}>"
        rewritten = rewrite_test_for_recording(test, f"step {number} test {test_number}")
        parts.append("_agentbench_records.append({})\n")
        parts.append(_code_block(rewritten, label))
    finish = (
        "_agentbench_values = [_agentbench_collect(r, i + 1) for i, r in enumerate(_agentbench_records)]\n"
        f"_agentbench_h5codec.write_step_targets({str(out_file)!r}, {number!r}, _agentbench_values)\n"
    )
    parts.append(_code_block(finish, "<record targets>"))
    parts.append("_agentbench_finish(True)\n")
    return "".join(parts)


def verification_script(problem: dict, index: int, h5_path: Path, data_dir: Path | None = None) -> str:
    """Child script: ground truth, then the ORIGINAL tests with ``target`` read from ``h5_path``."""
    step = problem["sub_steps"][index]
    number = step["step_number"]
    tests = step["test_cases"]
    parts = [_script_header(problem, index, data_dir)]
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


def _child_env() -> dict:
    env = dict(os.environ)
    # One BLAS thread per child: reproducible sums and no oversubscription when jobs > 1.
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[name] = "1"
    env["MPLBACKEND"] = "Agg"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("PYTHONPATH", None)
    return env


def run_child_script(script: str, timeout: float, workdir: Path) -> str:
    """Run ``script`` with this interpreter in ``workdir`` (own session); ``"ok"`` or a message."""
    workdir.mkdir(parents=True, exist_ok=True)
    script_path = workdir / "script.py"
    script_path.write_text(script, encoding="utf-8")
    with open(workdir / "stdout.txt", "wb") as out, open(workdir / "stderr.txt", "wb") as err:
        proc = subprocess.Popen([sys.executable, "-I", str(script_path)], cwd=workdir,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                env=_child_env(), start_new_session=True)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return f"timed out after {timeout:g} s"
        finally:
            _kill_group(proc)  # leftovers the script may have spawned
    result_file = workdir / "result.json"
    if result_file.is_file():
        result = json.loads(result_file.read_text(encoding="utf-8"))
        if result.get("ok") and proc.returncode == 0:
            return "ok"
        if result.get("error"):
            return result["error"]
    tail = (workdir / "stderr.txt").read_text(encoding="utf-8", errors="replace").splitlines()
    tail_text = "\n".join(tail[-STDERR_TAIL_LINES:])
    return f"child exited with code {proc.returncode}: {tail_text}".strip()


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


# ----------------------------------------------------------------------------------------------
# public API


def _run_steps(selected, make_script, timeout, jobs, progress, workroot: Path) -> dict:
    def run_one(item):
        problem, index = item
        number = problem["sub_steps"][index]["step_number"]
        started = time.monotonic()
        try:
            script = make_script(problem, index, workroot / f"{number}.h5")
            status = run_child_script(script, timeout, workroot / f"work-{number}")
        except (RebuildError, h5codec.TargetsError, OSError) as exc:
            status = str(exc)
        if progress is not None:
            progress(number, status, time.monotonic() - started)
        return number, status

    if jobs <= 1:
        results = [run_one(item) for item in selected]
    else:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(run_one, selected))
    return dict(results)


def rebuild_targets(problems: list[dict], out_path: Path, *, timeout: float = 600, jobs: int = 1,
                    progress: Progress | None = None, steps: Iterable[str] | None = None,
                    data_dir: Path | None = None) -> dict:
    """Recompute targets of ``steps`` (default all) from ground truth into ``out_path``.

    Returns ``{step_number: "ok" | error message}``. Steps that succeed are written (replacing
    the same steps if ``out_path`` already exists; other steps in it are kept), atomically via a
    temporary file and ``os.replace``. ``progress(step, status, seconds)`` is called per step.
    """
    out_path = Path(out_path)
    selected = _select_steps(problems, steps)
    if not selected:
        raise RebuildError("no steps to rebuild: the problems list is empty")
    if out_path.exists() and not _is_hdf5(out_path):
        raise RebuildError(f"{out_path} exists and is not an HDF5 file; choose another --out path")
    workroot = Path(tempfile.mkdtemp(prefix="agentbench-targets-"))
    try:
        def make_script(problem, index, step_file):
            return recording_script(problem, index, step_file, data_dir)

        report = _run_steps(selected, make_script, timeout, jobs, progress, workroot)
        _merge_step_files(workroot, [s for s, status in report.items() if status == "ok"], out_path)
    finally:
        shutil.rmtree(workroot, ignore_errors=True)
    return report


def verify_targets(problems: list[dict], h5_path: Path, timeout: float = 600, *, jobs: int = 1,
                   progress: Progress | None = None, steps: Iterable[str] | None = None,
                   data_dir: Path | None = None) -> dict:
    """Run each step's original tests with its ground truth against ``h5_path``.

    Returns ``{step_number: "ok" | error message}``.
    """
    h5_path = Path(h5_path).resolve()
    if not h5_path.is_file():
        raise RebuildError(f"targets file {h5_path} does not exist")
    selected = _select_steps(problems, steps)
    workroot = Path(tempfile.mkdtemp(prefix="agentbench-verify-"))
    try:
        def make_script(problem, index, _unused):
            return verification_script(problem, index, h5_path, data_dir)

        return _run_steps(selected, make_script, timeout, jobs, progress, workroot)
    finally:
        shutil.rmtree(workroot, ignore_errors=True)


def _is_hdf5(path: Path) -> bool:
    import h5py

    return path.is_file() and h5py.is_hdf5(str(path))


def _merge_step_files(workroot: Path, steps: list[str], out_path: Path) -> None:
    import h5py

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


# ----------------------------------------------------------------------------------------------
# command line


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_agentbench rebuild-targets",
        description="Rebuild SciCode validation targets (test_data.h5 layout) by running the "
                    "ground truth of problems_dev.jsonl, then check every step's tests pass "
                    "against them. " + NOT_OFFICIAL_NOTE[0].upper() + NOT_OFFICIAL_NOTE[1:] + ".")
    parser.add_argument("--data-dir", default=os.environ.get(DATA_DIR_ENV) or "data",
                        help=f"folder holding scicode/{PROBLEMS_FILE} (default ${DATA_DIR_ENV} or ./data)")
    parser.add_argument("--out", required=True, help="HDF5 file to write (existing steps are kept)")
    parser.add_argument("--steps", default=None, help="comma-separated step numbers, e.g. 10.3,6.1")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per step (default 600)")
    parser.add_argument("--jobs", type=int, default=1, help="steps run in parallel (default 1)")
    parser.add_argument("--no-verify", action="store_true", help="skip re-running the original tests")
    return parser


def _print_progress(step: str, status: str, seconds: float) -> None:
    shown = "ok" if status == "ok" else "FAILED: " + status.splitlines()[-1][:300]
    print(f"  {step:>6}  {seconds:6.1f} s  {shown}", flush=True)


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    steps = [s.strip() for s in args.steps.split(",") if s.strip()] if args.steps else None
    data_dir = Path(args.data_dir).expanduser()
    out = Path(args.out).expanduser()
    print(f"note: {NOT_OFFICIAL_NOTE}.")
    started = time.monotonic()
    try:
        problems = load_problems(find_problems_file(data_dir))
        print(f"rebuilding targets into {out}")
        report = rebuild_targets(problems, out, timeout=args.timeout, jobs=max(1, args.jobs),
                                 progress=_print_progress, steps=steps, data_dir=data_dir)
        failed = {s: m for s, m in report.items() if m != "ok"}
        if not args.no_verify and len(failed) < len(report):
            print("verifying: original tests against the rebuilt targets")
            built = [s for s, m in report.items() if m == "ok"]
            checked = verify_targets(problems, out, args.timeout, jobs=max(1, args.jobs),
                                     progress=_print_progress, steps=built, data_dir=data_dir)
            failed.update({s: "verification: " + m for s, m in checked.items() if m != "ok"})
    except (RebuildError, h5codec.TargetsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    elapsed = time.monotonic() - started
    print(f"{len(report) - len(failed)}/{len(report)} steps ok in {elapsed:.0f} s; wrote {out}")
    for step, message in failed.items():
        print(f"FAILED {step}: {message}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
