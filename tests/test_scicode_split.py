"""Splitting SciCode's test cases (benchmarks/scicode/split.py): the child computes operands, the parent compares.

* every one of the 1,082 official test cases (both splits) splits, and no child code holds ``target``,
  an ``assert`` or a comparison call;
* the shapes named in issue 11 split as decided there (29.3, 51.4, 78.x, 10.6, 31.2, 30.3, 76.4, ...);
* the parent's evaluation on hand-made operand streams: pass, each kind of failure, hostile streams;
* test-split shapes without public targets, on hand-written genuine values: a scipy.sparse ``kron``
  operator dict (62.2, 62.4, 62.5) and a Symbol-keyed dict (17.1);
* end to end on the validation split: the ground truth passes every step, and a mutated ground truth
  fails exactly the steps that upstream's script composition fails, on the same targets. By default on
  14 fast steps covering the shapes (about a minute of CPU); ``AGENTBENCH_SPLIT_FULL=1`` runs all 50
  steps (about 20 minutes of CPU on 2 cores; all 50 pass and the mutated verdicts match, 45 of 50 fail).

The end-to-end tests need validation targets: they are rebuilt once (``python -m pytest_agentbench
rebuild-targets``) into a cache under the system temp folder, keyed by the data and library versions.
Children run with plain ``subprocess``, outside the sandbox, so these tests check the split itself.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import scipy
import scipy.sparse as sp
import sympy

from bench_runs import SHARED_DATA
from pytest_agentbench.benchmarks.scicode import h5codec, split
from pytest_agentbench.benchmarks.scicode.split import SplitError, evaluate, split_step
from pytest_agentbench.sandbox import codec

SCICODE = SHARED_DATA / "scicode"
TIMEOUT = 900  # seconds per child (51.4 takes minutes on a busy machine)
JOBS = 2


def load(name: str) -> list[dict]:
    path = SCICODE / name
    if not path.is_file():
        pytest.fail(f"{path} is missing; set AGENTBENCH_DATA_DIR to the staged upstream data")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


DEV = load("problems_dev.jsonl")
TEST = load("problems_test.jsonl")
SPLITS = {"validation": DEV, "test": TEST}


def step_of(number: str) -> dict:
    for problem in DEV + TEST:
        for step in problem["sub_steps"]:
            if step["step_number"] == number:
                return step
    raise KeyError(number)


def plan_of(number: str) -> split.StepPlan:
    return split_step(step_of(number)["test_cases"], number)


# ---- every official test case splits ---------------------------------------------------------------
COMPARISON_NAMES = {name.split(".")[-1] for name in split.COMPARISON_CALLS}


@pytest.mark.parametrize("name, steps, cases", [("validation", 50, 167), ("test", 291, 915)])
def test_every_official_test_case_splits(name, steps, cases):
    plans = [split_step(s["test_cases"], s["step_number"]) for p in SPLITS[name] for s in p["sub_steps"]]
    assert len(plans) == steps
    assert sum(len(plan.tests) for plan in plans) == cases  # 167 + 915 = 1,082
    for plan in plans:
        for test in plan.tests:
            assert test.asserts, f"{plan.step} test {test.number} has no assertion left for the parent"
            child = ast.parse(test.child)
            names = {n.id for n in ast.walk(child) if isinstance(n, ast.Name)}
            assert "target" not in names, f"{plan.step} test {test.number}: the child sees `target`"
            assert not any(isinstance(n, ast.Assert) for n in ast.walk(child)), f"{plan.step}: an assert in the child"
            for a in test.asserts:
                assert "target" not in {n.id for leaf in a.leaves for n in ast.walk(ast.parse(leaf.source))
                                        if isinstance(n, ast.Name)}
                for leaf in a.leaves:  # a comparison is never an operand
                    calls = {(n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", ""))
                             for n in ast.walk(ast.parse(leaf.source)) if isinstance(n, ast.Call)}
                    assert not calls & (COMPARISON_NAMES - {"equal"}), (plan.step, leaf.source)
                compile(a.expression, "<parent>", "eval")
            for part in test.parent:
                if isinstance(part, split.ParentStatement):
                    compile(part.source, "<parent>", "exec")


def test_only_the_target_unpacking_statements_run_in_the_parent():
    """1,061 test cases use `target` only inside `assert`; the other 21 only unpack it (issue 11)."""
    unpacking = []
    for problems in SPLITS.values():
        for problem in problems:
            for step in problem["sub_steps"]:
                plan = split_step(step["test_cases"], step["step_number"])
                for test in plan.tests:
                    statements = [p.source for p in test.parent if isinstance(p, split.ParentStatement)
                                  and not p.source.startswith("def ")]
                    if statements:
                        assert all(re.fullmatch(r"[a-z]+(, [a-z]+)* = target", s) for s in statements), statements
                        unpacking.append(f"{step['step_number']}/{test.number}")
    assert len(unpacking) == 21


# ---- the shapes issue 11 names -------------------------------------------------------------------
def leaves(plan: split.StepPlan, test: int = 1, assertion: int = 1) -> list[str]:
    return [leaf.source for leaf in plan.tests[test - 1].asserts[assertion - 1].leaves]


def expression(plan: split.StepPlan, test: int = 1, assertion: int = 1) -> str:
    return plan.tests[test - 1].asserts[assertion - 1].expression


def test_a_comparison_without_target_still_runs_in_the_parent():
    plan = plan_of("29.3")
    assert expression(plan) == "np.isclose(0, _agentbench_leaf(1)) == target"
    assert leaves(plan) == ["B[:, 0].T @ B[:, 3]"]
    plan = plan_of("51.4")
    assert expression(plan, 4) == ("(np.isclose(_agentbench_leaf(1), _agentbench_leaf(2)), np.allclose("
                                   "_agentbench_leaf(3), _agentbench_leaf(4)), np.allclose(_agentbench_leaf(5), "
                                   "_agentbench_leaf(6))) == target")
    assert leaves(plan, 4) == ["final_energy", "initial_energy", "final_linear_momentum", "initial_linear_momentum",
                               "final_angular_momentum", "initial_angular_momentum"]
    assert expression(plan_of("78.2"), 3) == "not np.isnan(_agentbench_leaf(1)).any()"
    assert expression(plan_of("66.6"), 4) == "np.abs(_agentbench_leaf(1) < 2) == target"
    assert expression(plan_of("61.5"), 4) == "np.equal(_agentbench_leaf(1), 0).all() == target"
    assert expression(plan_of("48.4"), 4) == "(_agentbench_leaf(1) > 0).all() == target"
    assert leaves(plan_of("48.4"), 4) == ["chi[omega > omega_res]"]  # a mask computes an operand


def test_test_functions_are_inlined_for_the_parent_and_keep_their_scope_in_the_child():
    plan = plan_of("78.1")
    for number, test in enumerate(plan.tests, 1):
        assert [a.expression for a in test.asserts] == ["np.allclose(_agentbench_leaf(1), _agentbench_leaf(2))"]
        assert test.asserts[0].message == f"Test Case {number} Failed"
        child = ast.parse(test.child)
        [fn] = [n for n in child.body if isinstance(n, ast.FunctionDef)]
        assert fn.name == f"test_case_{number}"
        assert any(isinstance(s, ast.Try) for s in fn.body)  # the operands are evaluated inside the function
        assert ast.unparse(child.body[-2]) == f"test_case_{number}()"
    assert leaves(plan_of("78.2"), 2) == ["final_state[0]", "state[0]"]


def test_helpers_that_only_compare_run_in_the_parent_others_in_the_child():
    plan = plan_of("10.6")
    helpers = [p.source.split("(")[0] for p in plan.tests[0].parent if isinstance(p, split.ParentStatement)]
    assert helpers == ["def isin", "def are_equivalent"]
    assert expression(plan) == "are_equivalent(_agentbench_leaf(1), target)"
    plan = plan_of("31.2")
    assert [p.source for p in plan.tests[0].parent][1:] == ["s, v = target", plan.tests[0].asserts[0].source]
    assert expression(plan) == "test_identity(_agentbench_leaf(1)) == s and np.allclose(_agentbench_leaf(2), v)"
    assert leaves(plan) == ["np.cov(Z)", "Z"]
    # 30.3: test_gradient calls the model's wavefunction object: it runs in the child
    plan = plan_of("30.3")
    assert not [p for p in plan.tests[0].parent if isinstance(p, split.ParentStatement)]
    assert leaves(plan)[0].startswith("test_gradient(np.random.randn(5, 2, 3), MultiplyWF(")
    assert leaves(plan_of("72.1"), 4) == ["test_neighbor()"]  # calls the model's neighbor_list
    assert expression(plan_of("32.3"), 4) == "(_agentbench_leaf(1) < 1e-06, is_symmetric(_agentbench_leaf(2))) == target"


def test_operands_that_need_the_parent_are_evaluated_there():
    assert expression(plan_of("52.4"), 3) == "np.isclose(_agentbench_leaf(1), (0, -1)).any() == target.any()"
    assert expression(plan_of("35.3")) == "all((i > 10 ** 10 for i in _agentbench_leaf(1))) == target"
    assert leaves(plan_of("35.3")) == ["A"]
    assert expression(plan_of("50.4")) == "a == _agentbench_leaf(1) and np.allclose((b, c), _agentbench_leaf(2))"
    assert expression(plan_of("76.4"), 3) == "_agentbench_leaf(1) == None"
    assert expression(plan_of("80.7")) == "_agentbench_leaf(1) == target"
    assert leaves(plan_of("80.7")) == ["(s1, v1)"]  # a tuple stays a tuple (exact types cross)


@pytest.mark.parametrize("tests, match", [
    (["x = f(target)\nassert x"], "uses target"),
    (["for i in range(2):\n    assert f(i) == target"], "inside a `for` block"),
    (["x = 1\nif x:\n    assert f() == 1"], "inside a `if` block"),
    (["def test_1():\n    assert f() == 1\ntest_1()\ntest_1()"], "called exactly once"),
    (["def test_1(x):\n    assert f(x) == 1\ntest_1(2)"], "without arguments"),
    (["def test_1():\n    if f():\n        assert f() == 1\ntest_1()"], "inside a block"),
    (["class A:\n    pass\nassert A() == target"], "class"),
    (["assert np.allclose(f(target), 1)"], "calls f"),
    (["a, b = target", "c = f(a)\nassert c == 1"], "uses a"),
    (["assert (y := f()) == target"], "NamedExpr"),
    (["assert f(\n"], "does not parse"),
])
def test_what_cannot_be_split_is_a_clear_error(tests, match):
    with pytest.raises(SplitError, match=match):
        split_step(tests, "9.9")


def test_the_parent_keeps_names_in_step_order():
    plan = split_step(["a, b = target\nassert a == f(b_child)", "a = 3\nassert np.allclose(a, target)"], "9.9")
    assert expression(plan, 1) == "a == _agentbench_leaf(1)"
    assert expression(plan, 2) == "np.allclose(_agentbench_leaf(1), target)"  # the child rebound `a`
    assert leaves(plan, 2) == ["a"]


# ---- the parent's evaluation on hand-made streams ---------------------------------------------------
def stream(*frames) -> bytes:
    return b"".join(codec.encode(frame) for frame in frames)


def full(test: int, *operands, assertion: int = 1) -> list[tuple]:
    """The frames of a test with one assertion whose operands are ``operands``."""
    return [("t", test), *[("v", test, assertion, k, v) for k, v in enumerate(operands, 1)],
            ("a", test, assertion), ("z", test)]


TWO = split_step(["x = f(1)\nassert np.allclose(x, target)", "assert f(2) == target[0] and g(3) == target[1]"], "9.9")


def test_a_pass_needs_every_assertion_true_in_the_parent():
    outcome = evaluate(TWO, stream(*full(1, np.array([1.0, 2.0])), *full(2, 5, 6)), [np.array([1.0, 2.0]), (5, 6)])
    assert outcome.passed and outcome.tests_passed == 2 and outcome.message == ""
    outcome = evaluate(TWO, stream(*full(1, np.array([1.0, 2.0])), *full(2, 5, 7)), [np.array([1.0, 2.0]), (5, 6)])
    assert not outcome.passed and outcome.tests_passed == 1
    assert outcome.failure.kind == "assertion" and outcome.failure.test == 2
    assert outcome.message == ("AssertionError in `assert f(2) == target[0] and g(3) == target[1]` (test 2 of 2)")


def test_each_failure_kind_has_its_reason():
    targets = [np.array([1.0]), (5, 6)]
    ok1 = full(1, np.array([1.0]))
    cases = {
        "operand_error": [*ok1, ("t", 2), ("e", 2, 1, 1, "ZeroDivisionError: division by zero"),
                          ("v", 2, 1, 2, 6), ("a", 2, 1), ("z", 2)],
        "unencodable": [*ok1, ("t", 2), ("x", 2, 1, 1, "cannot encode a value of type Thing"), ("v", 2, 1, 2, 6),
                        ("a", 2, 1), ("z", 2)],
        "stopped": [*ok1, ("t", 2)],
    }
    messages = {
        "operand_error": "ZeroDivisionError: division by zero (evaluating `f(2)`) (test 2 of 2)",
        "unencodable": "cannot compare `f(2)`: cannot encode a value of type Thing (test 2 of 2)",
        "stopped": "the scoring process stopped before assertion 1 of test 2 (test 2 of 2)",
    }
    for kind, frames in cases.items():
        outcome = evaluate(TWO, stream(*frames), targets)
        assert (outcome.passed, outcome.failure.kind, outcome.message) == (False, kind, messages[kind])
    outcome = evaluate(TWO, stream(*ok1, *full(2, 5, 6)[:-1]), targets)  # no end-of-test marker
    assert outcome.failure.kind == "stopped" and "after the last assertion of test 2" in outcome.message
    outcome = evaluate(TWO, b"", targets)
    assert outcome.failure.kind == "stopped" and outcome.message == "the scoring process stopped before test 1 (test 1 of 2)"
    outcome = evaluate(TWO, stream(*full(1, np.ones((2, 3))), *full(2, 5, 6)), [np.ones((3, 2)), (5, 6)])
    assert outcome.failure.kind == "error" and outcome.failure.test == 1
    assert outcome.message.startswith("ValueError: operands could not be broadcast") and outcome.message.endswith(
        "(test 1 of 2)")


def test_an_operand_the_parent_does_not_need_may_fail_as_upstream_never_evaluates_it():
    plan = split_step(["assert f(1) == target[0] and g(2) == target[1]"], "9.9")
    frames = [("t", 1), ("v", 1, 1, 1, 4), ("e", 1, 1, 2, "ZeroDivisionError: x"), ("a", 1, 1), ("z", 1)]
    assert evaluate(plan, stream(*frames), [(5, 6)]).message == "AssertionError in `assert f(1) == target[0] and " \
                                                                "g(2) == target[1]` (test 1 of 1)"
    plan = split_step(["assert (f(1) > 2 and g(2) < 1) == target"], "9.9")
    frames = [("t", 1), ("v", 1, 1, 1, 1), ("e", 1, 1, 2, "ZeroDivisionError: x"), ("a", 1, 1), ("z", 1)]
    assert evaluate(plan, stream(*frames), [False]).passed  # upstream: f(1) > 2 is False, g(2) never runs


def test_a_parent_side_statement_that_fails_fails_its_test():
    plan = plan_of("31.2")
    frames = [("t", 1), ("v", 1, 1, 1, np.eye(2)), ("v", 1, 1, 2, np.zeros(2)), ("a", 1, 1), ("z", 1)]
    outcome = evaluate(plan, stream(*frames), [(True, np.zeros(2), "extra")] * 3)
    assert outcome.failure.kind == "error" and outcome.message.startswith("ValueError: too many values to unpack")
    assert evaluate(plan, stream(*frames), [(True, np.zeros(2))] * 3).failure.test == 2  # test 1 passed


@pytest.mark.parametrize("frames, why", [
    ([("v", 1, 1, 1, 1), ("v", 1, 1, 1, 1)], "sent twice"),
    ([("v", 7, 1, 1, 1)], "no such test"),
    ([("v", 1, 3, 1, 1)], "no such assertion"),
    ([("v", 1, 1, 9, 1)], "no such operand"),
    ([("v", "1", 1, 1, 1)], "must be ints"),
    ([("e", 1, 1, 1, 5)], "needs a message"),
    ([["t", 1]], "tagged tuple"),
    ([("q", 1)], "unknown frame"),
    ([("t", 1, 2)], "unknown frame"),
])
def test_malformed_streams_fail_the_step(frames, why):
    outcome = evaluate(TWO, stream(*frames), [1, (1, 2)])
    assert not outcome.passed and outcome.failure.kind == "protocol"
    assert outcome.message.startswith("the scoring process sent malformed operand data") and why in outcome.message


def test_a_cut_or_oversized_stream_keeps_what_came_before():
    data = stream(*full(1, np.array([1.0])), *full(2, 5, 6))
    outcome = evaluate(TWO, data[:-5], [np.array([1.0]), (5, 6)])
    assert outcome.failure.kind == "stopped" and outcome.tests_passed == 1 and "truncated" in outcome.stream_error
    outcome = evaluate(TWO, b"\x00" * (TWO.stream_cap(1000) + 1), [1, (1, 2)], max_bytes=1000)
    assert outcome.failure.kind == "stopped" and "over the cap" in outcome.stream_error


def test_an_operand_cannot_smuggle_a_comparison_result():
    """An object that says it equals everything cannot cross: only data does."""
    plan = split_step(["assert f() == target"], "9.9")
    child = f"""
import numpy as np
class Liar:
    def __eq__(self, other):
        return True
def f():
    return Liar()
{plan.child_source()}"""
    outcome, result = run_child(plan, child_code=child, targets=[3.0], wrap=False)
    assert outcome.failure.kind == "unencodable" and "Liar" in outcome.message


# ---- running a real child ------------------------------------------------------------------------
def run_process(source: str, workdir: Path, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    (workdir / "main.py").write_text(source)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PYTEST_", "AGENTBENCH_"))}
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1", MPLBACKEND="Agg",
               PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.Popen([sys.executable, "main.py"], cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env=env, start_new_session=True, text=True, errors="replace")
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return subprocess.CompletedProcess(proc.args, None, out, err + f"\ntimed out after {timeout} s")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run_child(plan, *, targets, code: str = "", dependencies: str = "import numpy as np", previous=(),
              child_code: str | None = None, wrap: bool = True):
    with tempfile.TemporaryDirectory(prefix="agentbench-split-") as tmp:
        work = Path(tmp)
        channel = str(work / "operands.bin")
        if child_code is not None:
            source = split.CHILD_PREAMBLE.format(compare_path=split.COMPARE_PATH) + \
                split.child_runtime(channel) + child_code
        else:
            source = split.build_child_script(plan, dependencies=dependencies, previous_code=list(previous),
                                              code=code, channel=channel)
        result = run_process(source, work)
        data = Path(channel).read_bytes() if Path(channel).is_file() else b""
    return evaluate(plan, data, targets), result


def h5_roundtrip(tmp_path: Path, number: str, values: list) -> list:
    """The targets as the parent gets them: written and read in the official h5 layout."""
    path = tmp_path / "targets.h5"
    h5codec.write_step_targets(path, number, values)
    return h5codec.read_step_targets(path, number)


# 62.x: an operator dict of scipy.sparse kron results (test split, no public targets)
BLOCK_CODE = '''
import numpy as np
from scipy.sparse import kron, identity, csr_matrix
class Block:
    def __init__(self, length, basis_size, operator_dict):
        self.length, self.basis_size, self.operator_dict = length, basis_size, operator_dict
class EnlargedBlock(Block):
    pass
def block_initial(model_d):
    Sz = csr_matrix(np.array([[0.5, 0], [0, -0.5]]))
    Sp = csr_matrix(np.array([[0, 1.0], [0, 0]]))
    return Block(1, model_d, {"H": csr_matrix((model_d, model_d)), "conn_Sz": Sz, "conn_Sp": Sp})
def H_XXZ(Sz1, Sp1, Sz2, Sp2):
    return 0.5 * (kron(Sp1, Sp2.conjugate().T) + kron(Sp1.conjugate().T, Sp2)) + kron(Sz1, Sz2)
def block_enlarged(block, model_d):
    Sz = csr_matrix(np.array([[0.5, 0], [0, -0.5]]))
    Sp = csr_matrix(np.array([[0, 1.0], [0, 0]]))
    ops = block.operator_dict
    I = identity(block.basis_size)
    H = kron(ops["H"], identity(model_d)) + H_XXZ(ops["conn_Sz"], ops["conn_Sp"], Sz, Sp)
    return EnlargedBlock(block.length + 1, block.basis_size * model_d,
                         {"H": H, "conn_Sz": kron(I, Sz), "conn_Sp": kron(I, Sp)})
'''


def genuine_block(enlarged: bool):
    scope: dict = {}
    exec(BLOCK_CODE, scope)
    block = scope["block_initial"](2)
    if enlarged:
        block = scope["block_enlarged"](block, 2)
    return block


@pytest.mark.parametrize("number, enlarged", [("62.2", False), ("62.4", True)])
def test_sparse_kron_operator_dicts_cross_and_compare(tmp_path, number, enlarged):
    plan = plan_of(number)
    block = genuine_block(enlarged)
    if enlarged:
        assert {type(m).__name__ for m in block.operator_dict.values()} - {"csr_matrix"}  # kron gives bsr/coo
    targets = h5_roundtrip(tmp_path, number, [(block.length, block.basis_size, block.operator_dict)])
    outcome, result = run_child(plan, targets=targets, code=BLOCK_CODE,
                                dependencies="import numpy as np\nfrom scipy.sparse import kron, identity")
    assert result.returncode == 0, result.stderr[-2000:]
    assert outcome.passed, outcome.message
    wrong = dict(block.operator_dict, conn_Sz=block.operator_dict["conn_Sz"] * 1.01)
    targets = h5_roundtrip(tmp_path, number, [(block.length, block.basis_size, wrong)])
    outcome, _ = run_child(plan, targets=targets, code=BLOCK_CODE)
    assert not outcome.passed and outcome.failure.kind == "assertion"


def test_sparse_values_as_the_parent_receives_them_compare_in_are_dicts_close(tmp_path):
    """62.5's operands without a child: exact formats after the codec, then the parent's comparison."""
    plan = plan_of("62.5")
    block = genuine_block(True)
    operands = (block.length, block.basis_size, block.operator_dict, -0.75)
    sent = [codec.decode(codec.encode(v)) for v in operands]
    assert [type(v) for v in sent[2].values()] == [type(v) for v in block.operator_dict.values()]
    targets = h5_roundtrip(tmp_path, "62.5", [operands])
    frames = [("t", 1), *[("v", 1, 1, k, v) for k, v in enumerate(sent, 1)], ("a", 1, 1), ("z", 1)]
    assert evaluate(plan, stream(*frames), targets).passed
    frames[3] = ("v", 1, 1, 3, {**sent[2], "H": sent[2]["H"] * 2})
    assert evaluate(plan, stream(*frames), targets).failure.kind == "assertion"


# 17.1: a dict of names to Symbols and a Symbol-keyed dict of values (test split, no public targets)
EJI_CODE = '''
import sympy as sp
import numpy as np
def init_eji_array(energy, energy_vertices):
    energies = [energy] + list(energy_vertices)
    symbols = {}
    value_map = {}
    for i in range(5):
        for j in range(5):
            name = f"e_{j}{i}"
            symbol = sp.Symbol(name)
            symbols[name] = symbol
            value_map[symbol] = energies[j] - energies[i]
    return symbols, value_map
'''


def test_a_symbol_keyed_dict_crosses_and_compares(tmp_path):
    plan = plan_of("17.1")
    scope: dict = {}
    exec(EJI_CODE, scope)
    genuine = [scope["init_eji_array"](*args) for args in ((10, [4, 6, 8, 10]), (1, [1, 2, 3, 4]),
                                                              (2.2, [1.2, 2.2, 3.4, 5.5]))]
    # the official file keeps symbols as their names (the h5 layout has no sympy type)
    as_stored = [({k: str(v) for k, v in names.items()}, {str(k): v for k, v in values.items()})
                 for names, values in genuine]
    targets = h5_roundtrip(tmp_path, "17.1", as_stored)
    outcome, result = run_child(plan, targets=targets, code=EJI_CODE, dependencies="import sympy as sp\nimport numpy as np")
    assert result.returncode == 0, result.stderr[-2000:]
    assert outcome.passed, outcome.message
    sent = codec.decode(codec.encode(genuine[0]))
    assert all(type(k) is sympy.Symbol for k in sent[1]) and all(type(v) is sympy.Symbol for v in sent[0].values())
    names, values = genuine[0]
    wrong = codec.decode(codec.encode((names, {**values, sympy.Symbol("e_10"): 99.0})))
    frames = [("t", 1), ("v", 1, 1, 1, wrong), ("a", 1, 1), ("z", 1)]
    single = split_step(step_of("17.1")["test_cases"][:1], "17.1")
    assert evaluate(single, stream(*frames), targets[:1]).failure.kind == "assertion"


# ---- end to end on the validation split --------------------------------------------------------------
def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:16]


CACHE = Path(tempfile.gettempdir()) / "agentbench-test-cache"
FULL = os.environ.get("AGENTBENCH_SPLIT_FULL") == "1"
# fast steps with every shape of the validation split: `and` of comparisons with target[k] (10.3), a helper
# run in the parent (10.6), a comparison without target (29.3, 38.3), test functions, `<` and `not` (78.x)
QUICK = ("1.1", "10.3", "10.6", "10.10", "19.2", "29.2", "29.3", "38.1", "38.3", "44.1", "70.5", "70.8", "78.1",
         "78.2")
DEV_STEPS = [(problem, index) for problem in DEV for index in range(len(problem["sub_steps"]))
             if FULL or problem["sub_steps"][index]["step_number"] in QUICK]
DEV_IDS = [p["sub_steps"][i]["step_number"] for p, i in DEV_STEPS]
ALL_DEV_IDS = {s["step_number"] for p in DEV for s in p["sub_steps"]}


@pytest.fixture(scope="session")
def dev_targets() -> Path:
    """Validation targets rebuilt from the ground truth, once per data/library version (cached)."""
    key = _digest((SCICODE / "problems_dev.jsonl").read_bytes(), Path(h5codec.__file__).read_bytes(),
                  f"{np.__version__} {scipy.__version__} {sympy.__version__}".encode())
    full = CACHE / f"scicode-dev-targets-{key}.h5"
    path = full if FULL else CACHE / f"scicode-dev-targets-{key}-quick.h5"
    for candidate in (full, path):
        if candidate.is_file():
            return candidate
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = CACHE / f".build-{os.getpid()}.h5"
    env = dict(os.environ, AGENTBENCH_DATA_DIR=str(SHARED_DATA))
    steps = [] if FULL else ["--steps", ",".join(DEV_IDS)]
    proc = subprocess.run([sys.executable, "-m", "pytest_agentbench", "rebuild-targets", "--out", str(tmp),
                           "--no-verify", "--jobs", str(JOBS), *steps], env=env, capture_output=True, text=True)
    steps = set(h5codec.list_steps(tmp)) if tmp.is_file() else set()
    if proc.returncode != 0 or steps != set(DEV_IDS):
        tmp.unlink(missing_ok=True)
        pytest.fail(f"rebuild-targets failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    os.replace(tmp, path)
    return path


MUTATION = '''

def _agentbench_mutate(value):
    import numpy as _np
    if isinstance(value, (bool, _np.bool_, int, _np.integer, str)):
        return value
    if isinstance(value, (float, complex, _np.floating, _np.complexfloating)):
        return value * 1.01
    if isinstance(value, _np.ndarray) and value.dtype.kind in "fc":
        return value * 1.01
    if isinstance(value, tuple):
        return tuple(_agentbench_mutate(v) for v in value)
    if isinstance(value, list):
        return [_agentbench_mutate(v) for v in value]
    return value


_agentbench_original = {name}


def {name}(*args, **kwargs):
    return _agentbench_mutate(_agentbench_original(*args, **kwargs))
'''


def step_code(problem: dict, index: int, mutated: bool) -> str:
    step = problem["sub_steps"][index]
    code = step["ground_truth_code"]
    if mutated:
        name = re.search(r"^\s*def\s+(\w+)", step["function_header"], re.M).group(1)
        code += MUTATION.format(name=name)
    return code


def split_verdict(problem: dict, index: int, h5: Path, mutated: bool) -> tuple[bool, str]:
    step = problem["sub_steps"][index]
    plan = split_step(step["test_cases"], step["step_number"])
    targets = h5codec.read_step_targets(h5, step["step_number"])
    previous = [s["ground_truth_code"] for s in problem["sub_steps"][:index]]
    outcome, result = run_child(plan, targets=targets, code=step_code(problem, index, mutated), previous=previous,
                                dependencies=problem["required_dependencies"])
    passed = outcome.passed and result.returncode == 0
    why = outcome.message or (result.stderr.strip().splitlines() or [""])[-1]
    return passed, why


UPSTREAM_TARGETS = '''
import importlib.util as _u
_spec = _u.spec_from_file_location("_agentbench_h5codec", {codec!r})
_h5 = _u.module_from_spec(_spec)
_spec.loader.exec_module(_h5)
targets = _h5.read_step_targets({h5!r}, {step!r})
'''


def upstream_verdict(problem: dict, index: int, h5: Path, mutated: bool) -> bool:
    """Upstream's composition: dependencies, earlier code, the step's code, then `target = targets[i]` and each
    test case, in one script; it passes when it exits with status 0."""
    step = problem["sub_steps"][index]
    parts = [split.CHILD_PREAMBLE.format(compare_path=split.COMPARE_PATH),
             UPSTREAM_TARGETS.format(codec=h5codec.__file__, h5=str(h5), step=step["step_number"]),
             problem["required_dependencies"], *[s["ground_truth_code"] for s in problem["sub_steps"][:index]],
             step_code(problem, index, mutated)]
    for number, test in enumerate(step["test_cases"]):
        parts.append(f"target = targets[{number}]\n{test}")
    with tempfile.TemporaryDirectory(prefix="agentbench-upstream-") as tmp:
        return run_process("\n".join(parts) + "\n", Path(tmp)).returncode == 0


def run_all(fn, h5: Path, mutated: bool) -> dict:
    with ThreadPoolExecutor(max_workers=JOBS) as pool:
        results = pool.map(lambda item: fn(*item, h5, mutated), DEV_STEPS)
        return dict(zip(DEV_IDS, results))


@pytest.fixture(scope="session")
def genuine_split(dev_targets):
    return run_all(split_verdict, dev_targets, mutated=False)


@pytest.fixture(scope="session")
def mutated_split(dev_targets):
    return run_all(split_verdict, dev_targets, mutated=True)


@pytest.fixture(scope="session")
def mutated_upstream(dev_targets):
    """Upstream's verdicts on the mutated ground truth, cached with the targets they were computed on."""
    key = _digest(dev_targets.read_bytes(), (SCICODE / "problems_dev.jsonl").read_bytes(), MUTATION.encode(),
                  (split.CHILD_PREAMBLE + UPSTREAM_TARGETS).encode(), Path(h5codec.__file__).read_bytes())
    path = CACHE / f"scicode-dev-mutated-upstream-{key}.json"
    if path.is_file():
        cached = json.loads(path.read_text())
        if set(DEV_IDS) <= set(cached):
            return {step: cached[step] for step in DEV_IDS}
    verdicts = run_all(upstream_verdict, dev_targets, mutated=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(verdicts))
    os.replace(tmp, path)
    return verdicts


def test_ground_truth_passes_every_validation_step(genuine_split):
    failed = {step: why for step, (passed, why) in genuine_split.items() if not passed}
    assert len(genuine_split) == (50 if FULL else len(QUICK)) and set(genuine_split) <= ALL_DEV_IDS
    assert not failed, f"ground truth failed under the split: {failed}"


def test_mutated_ground_truth_fails_exactly_the_steps_upstream_fails(mutated_split, mutated_upstream):
    ours = {step: passed for step, (passed, _) in mutated_split.items()}
    assert ours == mutated_upstream, {s: (ours[s], mutated_upstream[s], mutated_split[s][1])
                                      for s in ours if ours[s] != mutated_upstream[s]}
    failing = [s for s, passed in ours.items() if not passed]
    # the mutation is caught broadly (45 of 50 steps), so the comparison means something
    assert len(failing) >= (40 if FULL else 8) and len(failing) < len(ours), failing
    for step in failing:
        assert re.search(r"\(test \d+ of \d+\)$", mutated_split[step][1]), (step, mutated_split[step][1])


# ---- code written to defeat the old scoring, against the split ---------------------------------------
HOSTILE = {
    "replaces np.allclose": ("np.allclose = lambda *a, **k: True\ndef f():\n    return 2.0\n", "assertion"),
    "patches numpy's code": ("np.allclose.__code__ = (lambda *a, **k: True).__code__\ndef f():\n    return 2.0\n",
                             "assertion"),
    "returns the target it cannot see": ("def f():\n    return target\n", "operand_error"),
    "exits 0 at import": ("import sys\nsys.exit(0)\ndef f():\n    return 1.0\n", "stopped"),
    "forges frames then exits": ("import os\n_agentbench_rt.test(1)\n_agentbench_rt.value(1, 1, 1, 2.0)\n"
                                 "_agentbench_rt.reached(1, 1)\n_agentbench_rt.end(1)\nos._exit(0)\n", "assertion"),
    "sends an operand twice": ("_agentbench_rt.value(1, 1, 1, 1.0)\ndef f():\n    return 1.0\n", "protocol"),
    "object equal to all": ("class Eq:\n    def __eq__(self, o):\n        return True\n    __array_priority__ = 99\n"
                            "def f():\n    return Eq()\n", "unencodable"),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_code_that_fakes_a_pass_fails_in_the_parent(name):
    code, kind = HOSTILE[name]
    plan = split_step(["assert np.allclose(f(), target)"], "9.9")
    outcome, result = run_child(plan, targets=[1.0], code=code)
    assert not outcome.passed and outcome.failure.kind == kind, (outcome, result.stderr[-500:])
    assert outcome.message.endswith("(test 1 of 1)") or kind == "protocol"  # a malformed stream fails the step


def test_a_genuine_answer_passes_with_the_same_runner():
    plan = split_step(["assert np.allclose(f(), target)"], "9.9")
    outcome, result = run_child(plan, targets=[1.0], code="def f():\n    return 1.0\n")
    assert outcome.passed and result.returncode == 0


# ---- the plugin scores through the split ------------------------------------------------------------
def test_the_operand_cap_option_reaches_scoring(tiny, pytester):
    from bench_runs import read_jsonl, run_dirs

    result = tiny("--bench-operand-cap=60", "--bench-run-id=capped")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result = tiny("--bench-run-id=default")
    assert result.ret == pytest.ExitCode.OK
    runs = {p.name: p for p in run_dirs(pytester.path)}
    capped = {r["id"]: r for r in read_jsonl(runs["capped"] / "steps.jsonl")}
    assert {r["status"] for r in capped.values()} == {"fail"}
    assert capped["1.1"]["message"] == ("cannot compare `add(1, 2)`: the encoded values exceed the cap of 60 bytes "
                                        "per step (test 1 of 1)")
    assert capped["1.1"]["failure_kind"] == "unencodable"
    passed = {r["id"]: r for r in read_jsonl(runs["default"] / "steps.jsonl")}
    assert {r["status"] for r in passed.values()} == {"pass"} and passed["1.1"]["operands_bytes"] > 0
