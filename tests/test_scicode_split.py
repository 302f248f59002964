"""Splitting SciCode's test cases (benchmarks/scicode/split/): the child computes operands, the parent compares.

* every one of the 1,082 official test cases (both splits) splits, and no child code holds ``target``,
  an ``assert`` or a comparison call;
* the hard shapes of the official tests split as the rules of the split package say (29.3, 51.4, 78.x, 10.6,
  31.2, 30.3, 76.4, ...);
* the parent's evaluation on hand-made operand streams: pass, each kind of failure, hostile streams;
* test-split shapes without public targets, on hand-written genuine values: a scipy.sparse ``kron``
  operator dict (62.2, 62.4, 62.5) and a Symbol-keyed dict (17.1);
* end to end on the validation split: the ground truth passes every step, and a mutated ground truth
  fails exactly the steps that upstream's script composition fails, on the same targets. By default on
  14 fast steps covering the shapes (about a minute of CPU); ``AGENTBENCH_SPLIT_FULL=1`` runs all 50
  steps (about 20 minutes of CPU on 2 cores; all 50 pass and the mutated verdicts match, 45 of 50 fail).

The end-to-end tests need validation targets: they are rebuilt once (``python -m pytest_agentbench
rebuild-targets``) into a cache under the system temp folder, keyed by the data and library versions.
Children run outside the sandbox, so these tests check the split itself: each is forked from one fork
server per module with the scientific stack imported (a fresh ``python main.py`` for what a child imports,
and for the end-to-end runs, which run two at a time).
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
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import scipy
import sympy

from pytest_agentbench.benchmarks.scicode import h5codec, script, split
from pytest_agentbench.benchmarks.scicode import run as scicode_run
from pytest_agentbench.benchmarks.scicode.split import SplitError, split_step
from pytest_agentbench.benchmarks.scicode.verdict import evaluate
from pytest_agentbench.sandbox import codec
from pytest_agentbench.sandbox.forkserver import ForkServer
from pytest_agentbench.sandbox.isolation import Isolation
from pytest_agentbench.sandbox.limits import Limits, MiB
from pytest_agentbench.sandbox.result import ExecResult

from helpers.bench_runs import SHARED_DATA

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


@pytest.mark.parametrize(
    "name, steps, cases",
    [("validation", 50, 167), pytest.param("test", 291, 915, marks=pytest.mark.slow)],  # the test split: ~10 s
)
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
                assert "target" not in {
                    n.id for leaf in a.leaves for n in ast.walk(ast.parse(leaf.source)) if isinstance(n, ast.Name)
                }
                for leaf in a.leaves:  # a comparison is never an operand
                    calls = {
                        (n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", ""))
                        for n in ast.walk(ast.parse(leaf.source))
                        if isinstance(n, ast.Call)
                    }
                    assert not calls & (COMPARISON_NAMES - {"equal"}), (plan.step, leaf.source)
                compile(a.expression, "<parent>", "eval")
            for part in test.parent:
                if isinstance(part, split.ParentStatement):
                    compile(part.source, "<parent>", "exec")


@pytest.mark.slow  # walks the test split too, as the slow case above does
def test_only_the_target_unpacking_statements_run_in_the_parent():
    """1,061 test cases use `target` only inside `assert`; the other 21 only unpack it."""
    unpacking = []
    for problems in SPLITS.values():
        for problem in problems:
            for step in problem["sub_steps"]:
                plan = split_step(step["test_cases"], step["step_number"])
                for test in plan.tests:
                    statements = [
                        p.source
                        for p in test.parent
                        if isinstance(p, split.ParentStatement) and not p.source.startswith("def ")
                    ]
                    if statements:
                        assert all(re.fullmatch(r"[a-z]+(, [a-z]+)* = target", s) for s in statements), statements
                        unpacking.append(f"{step['step_number']}/{test.number}")
    assert len(unpacking) == 21


# ---- the hard shapes --------------------------------------------------------------------------
def leaves(plan: split.StepPlan, test: int = 1, assertion: int = 1) -> list[str]:
    return [leaf.source for leaf in plan.tests[test - 1].asserts[assertion - 1].leaves]


def expression(plan: split.StepPlan, test: int = 1, assertion: int = 1) -> str:
    return plan.tests[test - 1].asserts[assertion - 1].expression


def test_a_comparison_without_target_still_runs_in_the_parent():
    plan = plan_of("29.3")
    # the test text's own arithmetic on the model's value runs in the parent too: no verdict on child values alone
    assert expression(plan) == "np.isclose(0, _agentbench_leaf(1)[:, 0].T @ _agentbench_leaf(1)[:, 3]) == target"
    assert leaves(plan) == ["B"]
    plan = plan_of("51.4")
    # the initial values come from the test's own inputs as written (the parent's pristine copy: held-out attack A32);
    # the final ones the parent computes with the test's own total_energy from the model's positions
    assert expression(plan, 4) == (
        "(np.isclose(final_energy, initial_energy), np.allclose(final_linear_momentum, "
        "initial_linear_momentum), np.allclose(final_angular_momentum, "
        "initial_angular_momentum)) == target"
    )
    mixed = [p for p in plan.tests[3].parent if isinstance(p, split.MixedStatement)]
    assert {name for p in mixed for name in p.binds} >= {
        "final_energy",
        "final_linear_momentum",
        "final_angular_momentum",
    }
    assert expression(plan_of("78.2"), 3) == "not np.isnan(_agentbench_leaf(1)).any()"
    assert expression(plan_of("66.6"), 4) == "np.abs(_agentbench_leaf(1) - energy_ref < 2) == target"
    assert expression(plan_of("61.5"), 4) == (
        "np.equal(np.mod(np.round(_agentbench_leaf(1), decimals=decimal), 1), 0).all() == target"
    )
    assert expression(plan_of("48.4"), 4) == "(_agentbench_leaf(1)[omega > omega_res] > 0).all() == target"
    assert leaves(plan_of("48.4"), 4) == ["chi"]  # the parent applies the mask


def test_test_functions_are_inlined_for_the_parent_and_keep_their_scope_in_the_child():
    plan = plan_of("78.1")
    for number, test in enumerate(plan.tests, 1):
        # `expected_output` depends on no model code: the parent computes it, in the function's own scope
        assert [a.expression for a in test.asserts] == ["np.allclose(_agentbench_leaf(1), expected_output)"]
        assert leaves(plan, number) == ["output"]
        [scope] = [part for part in test.parent if isinstance(part, split.FunctionScope)]
        assert [set(part.binds) for part in scope.parts if isinstance(part, split.TrustedStatement)] == [
            {"g"},
            {"L"},
            {"expected_output"},
        ]  # only what the operand needs (state, t, beta, ... are the child's)
        assert test.asserts[0].message == f"Test Case {number} Failed"
        # and the child never computes it: its code cannot read it from the test's frame and return it
        assert "expected_output" not in test.child and "g = 9.81" in test.child
        child = ast.parse(test.child)
        [fn] = [n for n in child.body if isinstance(n, ast.FunctionDef)]
        assert fn.name == f"test_case_{number}"
        assert any(isinstance(s, ast.Try) for s in fn.body)  # the operands are evaluated inside the function
        assert ast.unparse(child.body[-2]) == f"test_case_{number}()"
    assert leaves(plan_of("78.2"), 2) == ["final_state"]


def test_helpers_that_only_compare_run_in_the_parent_others_in_the_child():
    plan = plan_of("10.6")
    helpers = [p.source.split("(")[0] for p in plan.tests[0].parent if isinstance(p, split.ParentStatement)]
    assert helpers == ["def isin", "def are_equivalent"]
    assert expression(plan) == "are_equivalent(_agentbench_leaf(1), target)"
    plan = plan_of("31.2")
    assert [p.source for p in plan.tests[0].parent][1:] == ["s, v = target", plan.tests[0].asserts[0].source]
    # np.cov runs in the parent; Z crosses once
    assert expression(plan) == "test_identity(np.cov(_agentbench_leaf(1))) == s and np.allclose(_agentbench_leaf(1), v)"
    assert leaves(plan) == ["Z"]
    # 30.3: test_gradient calls the model's wavefunction object: the child records those calls, the parent
    # runs the helper's own logic and answers the calls from the record
    plan = plan_of("30.3")
    assert not [p for p in plan.tests[0].parent if isinstance(p, split.ParentStatement)]
    assert leaves(plan)[0].startswith("test_gradient(np.random.randn(5, 2, 3), MultiplyWF(")
    assert expression(plan) == (
        "np.allclose(_agentbench_replay(_agentbench_leaf(1), test_gradient, [None, None, 0.0001], "
        "{}, (0, 1), (), ()), target)"
    )
    assert plan.tests[0].asserts[0].leaves[0].trace.startswith("_agentbench_rt.trace(test_gradient, [np.random.randn(")
    assert leaves(plan_of("72.1"), 4) == ["test_neighbor()"]  # calls the model's neighbor_list
    assert expression(plan_of("72.1"), 4) == (
        "_agentbench_replay(_agentbench_leaf(1), test_neighbor, [], {}, (), ('neighbor_list',), ()) == target"
    )
    # 64.6's helper reads the module the dependencies import: the parent's own itertools
    assert expression(plan_of("64.6")).startswith("(abs(np.average(")
    # `diff` the parent computes from the model's values with the test's own code
    assert expression(plan_of("32.3"), 4) == "(abs(diff) < 1e-06, is_symmetric(_agentbench_leaf(1))) == target"


def test_operands_that_need_the_parent_are_evaluated_there():
    assert expression(plan_of("52.4"), 3) == "np.isclose(_agentbench_leaf(1)[0], (0, -1)).any() == target.any()"
    assert expression(plan_of("35.3")) == "all((i > 10 ** 10 for i in _agentbench_leaf(1))) == target"
    assert leaves(plan_of("35.3")) == ["A"]
    assert expression(plan_of("50.4")) == (
        "a == _agentbench_leaf(1) and np.allclose((b, c), (_agentbench_leaf(2), _agentbench_leaf(3)))"
    )
    assert expression(plan_of("76.4"), 3) == "_agentbench_leaf(1) == None"
    assert expression(plan_of("80.7")) == "(_agentbench_leaf(1), _agentbench_leaf(2)) == target"
    assert leaves(plan_of("80.7")) == ["s1", "v1"]  # the parent builds the tuple (exact types cross)


@pytest.mark.parametrize(
    "tests, match",
    [
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
    ],
)
def test_what_cannot_be_split_is_a_clear_error(tests, match):
    with pytest.raises(SplitError, match=match):
        split_step(tests, "9.9")


def test_the_parent_keeps_names_in_step_order():
    plan = split_step(
        [
            "a, b = target\nassert a == f(b_child)",
            "a = f(3)\nassert np.allclose(a, target)",
            "a = 3\nassert np.allclose(a, target)",
        ],
        "9.9",
    )
    assert expression(plan, 1) == "a == _agentbench_leaf(1)"
    assert expression(plan, 2) == "np.allclose(_agentbench_leaf(1), target)"  # the child rebound `a`
    assert leaves(plan, 2) == ["a"]
    assert expression(plan, 3) == "np.allclose(a, target)"  # the test text rebound it: both compute it


# ---- operands that do not depend on the model's code are the parent's ------------------------------
@pytest.mark.parametrize(
    "test, expression, child",
    [
        # constants and numpy on constants: the parent computes them from the test text
        (
            "x = np.array([1.0, 2.0])\nexpected = 2 * x\nassert np.allclose(f(), expected)",
            "np.allclose(_agentbench_leaf(1), expected)",
            ["f()"],
        ),
        ("assert np.isclose(f(), np.pi / 2)", "np.isclose(_agentbench_leaf(1), np.pi / 2)", ["f()"]),
        (
            "import itertools\nexpected = list(itertools.product([0, 1], repeat=2))\nassert f() == expected",
            "_agentbench_leaf(1) == expected",
            ["f()"],
        ),
        # a function of the test text whose globals depend on no model code when it is called
        (
            "def h(v):\n    return v * 3\nassert np.isclose(f(), h(2.0))",
            "np.isclose(_agentbench_leaf(1), h(2.0))",
            ["f()"],
        ),
        # passed to the model's function only: the parent computes from its own pristine copy (held-out attack A32)
        (
            "x = np.array([1.0])\ny = f(x)\nexpected = 2 * x\nassert np.allclose(y, expected)",
            "np.allclose(_agentbench_leaf(1), expected)",
            ["y"],
        ),
        (
            "x = np.zeros(2)\nview = x[:1]\nout = f(x)\nassert np.allclose(out, view)",  # an alias of what was passed
            "np.allclose(_agentbench_leaf(1), view)",
            ["out"],
        ),
        (
            "x = np.zeros(2)\nassert np.allclose(x, f(x))",  # passed within the assertion itself
            "np.allclose(x, _agentbench_leaf(1))",
            ["f(x)"],
        ),
        # stored into by the test's own code: the child's from then on
        (
            "x = np.zeros(2)\nx[0] = f()\nassert np.allclose(g(), x)",
            "np.allclose(_agentbench_leaf(1), _agentbench_leaf(2))",
            ["g()", "x"],
        ),
        # a number cannot change in place: passing it changes nothing
        (
            "g = 9.81\nout = f(g)\nexpected = 2 * g\nassert np.isclose(out, expected)",
            "np.isclose(_agentbench_leaf(1), expected)",
            ["out"],
        ),
        # what the parent cannot reproduce, or does not hold, is the child's
        (
            "np.random.seed(0)\nexpected = np.random.rand(3)\nassert np.allclose(f(), expected)",
            "np.allclose(_agentbench_leaf(1), _agentbench_leaf(2))",
            ["f()", "expected"],
        ),
        (
            "expected = list({'a', 'b'})\nassert f() == expected",
            "_agentbench_leaf(1) == _agentbench_leaf(2)",
            ["f()", "expected"],
        ),
        (
            "assert np.isclose(f(), simps([1, 2, 3]))",
            "np.isclose(_agentbench_leaf(1), _agentbench_leaf(2))",
            ["f()", "simps([1, 2, 3])"],
        ),
        ("assert np.isclose(f(), HBAR)", "np.isclose(_agentbench_leaf(1), _agentbench_leaf(2))", ["f()", "HBAR"]),
        # h reads the child's global: the child sends it (recording h's run), the parent runs h
        (
            "def h(v):\n    return v * scale\nscale = f()\nassert np.isclose(g(), h(2.0))",
            "np.isclose(_agentbench_leaf(1), "
            "_agentbench_replay(_agentbench_leaf(2), h, [2.0], {}, (), ('scale',), ()))",
            ["g()", "h(2.0)"],
        ),
        (
            "def test_1():\n    np = f()\n    assert np.allclose(g(), 1)\ntest_1()",  # a local shadows the parent's np
            "_agentbench_leaf(1)",
            ["np.allclose(g(), 1)"],
        ),
    ],
)
def test_operands_that_do_not_depend_on_the_model_are_the_parents(test, expression, child):
    plan = split_step([test], "9.9")
    assert (expression_of(plan), leaves(plan)) == (expression, child)


def expression_of(plan: split.StepPlan) -> str:
    return plan.tests[0].asserts[0].expression


def test_a_builtin_the_childs_code_rebinds_stays_genuine_in_the_test_text():
    """Names the model's code binds never change what the test text's names mean: `from math
    import *` (problems 26 and 56 depend on it) or `def pow` leave the test's `pow` the builtin, unless pow
    is a function the model was asked to write."""
    tests = ["x = pow(2, 3)\nassert f() == x"]
    assert expression_of(split_step(tests, "9.9")) == "_agentbench_leaf(1) == x"
    names = split.names_bound_by("import numpy as np\nfrom math import *")
    assert expression_of(split_step(tests, "9.9", code_names=names)) == "_agentbench_leaf(1) == x"
    names = split.names_bound_by("import numpy as np", "def pow(a, b):\n    return 0", "np = None\n")
    assert expression_of(split_step(tests, "9.9", code_names=names)) == "_agentbench_leaf(1) == x"
    asked = split.required_names("def pow(a, b):\n    pass")
    assert asked == {"pow"}
    assert (
        expression_of(split_step(tests, "9.9", code_names=names, required=asked))
        == "_agentbench_leaf(1) == _agentbench_leaf(2)"
    )
    # np stays the parent's numpy (its comparisons use it too)
    assert (
        expression_of(split_step(["x = np.ones(2)\nassert np.allclose(f(), x)"], "9.9", code_names=names))
        == "np.allclose(_agentbench_leaf(1), x)"
    )


def test_model_independent_names_carry_across_a_steps_tests_until_the_child_binds_them():
    plan = split_step(["k = 3\nassert f() == k", "assert f() == k", "k = f()\nassert g() == k"], "9.9")
    assert [test.asserts[0].expression for test in plan.tests] == [
        "_agentbench_leaf(1) == k",
        "_agentbench_leaf(1) == k",
        "_agentbench_leaf(1) == _agentbench_leaf(2)",
    ]


def test_the_parent_runs_only_the_statements_its_operands_need():
    plan = split_step(["big = np.ones(10)\ny = f(big)\nn = 2\nassert np.allclose(y, target)"], "9.9")
    # `big` only the child needs; `n` nobody: the parent runs it, since the child does without it
    assert [p.source for p in plan.tests[0].parent if isinstance(p, split.TrustedStatement)] == ["n = 2"]
    plan = split_step(["x = np.zeros(3)\nx[0] = 5\ny = g(x)\nassert np.allclose(f(), y)"], "9.9")
    assert [p.source for p in plan.tests[0].parent if isinstance(p, split.TrustedStatement)] == []
    plan = split_step(["x = np.zeros(3)\nx[0] = 5\nassert np.allclose(f(), x)"], "9.9")
    assert [p.source for p in plan.tests[0].parent if isinstance(p, split.TrustedStatement)] == [
        "x = np.zeros(3)",
        "x[0] = 5",
    ]  # a change in place of what an operand needs


def test_the_child_runs_only_the_model_independent_statements_its_own_code_needs():
    plan = split_step(
        [
            "x = np.ones(2)\nk = 2.0\nexpected = k * np.ones(2)\nunused = 1 / 0\nprint(k)\n"
            "assert np.allclose(f(x), expected)"
        ],
        "9.9",
    )
    child = plan.tests[0].child
    assert "x = np.ones(2)" in child and "k = 2.0" in child and "print(k)" in child
    assert "expected =" not in child and "unused" not in child
    # what the child does without, the parent runs, needed or not: an error in the test text still fails
    outcome = evaluate(plan, stream(*full(1, np.ones(2) * 2)), [None])
    assert (outcome.failure.kind, outcome.message) == (
        "error",
        "ZeroDivisionError: division by zero (in `unused = 1 / 0`) (test 1 of 1)",
    )


def test_the_parent_computes_model_independent_operands_itself():
    plan = split_step(["x = np.array([1.0, 2.0])\nexpected = 2 * x\nassert np.allclose(f(), expected)"], "9.9")
    assert evaluate(plan, stream(*full(1, np.array([2.0, 4.0]))), [None]).passed
    outcome = evaluate(plan, stream(*full(1, np.array([0.0, 0.0]))), [None])
    assert (outcome.failure.kind, outcome.message) == (
        "assertion",
        "AssertionError in `assert np.allclose(f(), expected)` (test 1 of 1)",
    )
    # a child that sends the expected value too: there is no such operand
    frames = [("t", 1), ("v", 1, 1, 1, np.zeros(2)), ("v", 1, 1, 2, np.zeros(2)), ("a", 1, 1), ("z", 1)]
    outcome = evaluate(plan, stream(*frames), [None])
    assert outcome.failure.kind == "protocol" and "no such operand" in outcome.message
    plan = split_step(["expected = 1 / 0\nassert f() == expected"], "9.9")  # the test text itself raises
    outcome = evaluate(plan, stream(*full(1, 1.0)), [None])
    assert (outcome.failure.kind, outcome.message) == (
        "error",
        "ZeroDivisionError: division by zero (in `expected = 1 / 0`) (test 1 of 1)",
    )


@pytest.mark.parametrize(
    "test, sent, target",
    [
        ("assert np.allclose(f(), target)", np.empty((0, 1, 1)), np.ones(3)),
        ("assert np.isclose(f(), target).all()", np.zeros((0,)), 2.5),
        (
            "from scicode.compare.cmp import cmp_tuple_or_list\nassert cmp_tuple_or_list(f(), target)",
            [np.empty((0, 1))] * 2,
            (np.ones(3), np.ones(2)),
        ),
        ("assert np.allclose(f(), target)", sympy.zeros(0, 1), np.ones(3)),
    ],
)
def test_an_empty_operand_is_not_close_to_a_non_empty_one(test, sent, target):
    """numpy broadcasts an empty array against anything to an empty result, and `all` of nothing is True:
    code returning `np.empty((0, 1))` would pass every `np.allclose(x, target)` (held-out finding F1)."""
    plan = split_step([test], "9.9")
    outcome = evaluate(plan, stream(*full(1, codec.decode(codec.encode(sent)))), [target])
    assert (outcome.passed, outcome.failure.kind) == (False, "assertion")
    assert re.fullmatch(
        r"AssertionError: np\.(allclose|isclose) compared shapes \(0,[ 0-9,]*\) and \([0-9, ]*\), "
        r"which broadcast to \([0-9, ]*\): an empty operand is close to anything in `.*` "
        r"\(test 1 of 1\)",
        outcome.message,
    ), outcome.message
    assert evaluate(
        split_step(["assert np.allclose(f(), target)"], "9.9"), stream(*full(1, np.zeros(0))), [np.zeros(0)]
    ).passed  # empty against empty: as upstream


def test_a_small_operand_that_blows_up_against_the_target_fails_at_once():
    """A 64 KB operand of shape (8000, 1, 1) broadcasts against a (10001, 2) target to 160 million elements
    (held-out finding F5): the parent refuses it before numpy allocates anything."""
    plan = split_step(["assert np.allclose(f(), target)"], "9.9")
    outcome = evaluate(
        plan,
        stream(*full(1, np.zeros((8000, 1, 1)))),
        [np.zeros((10001, 2))],
        limits=Limits(timeout=60, memory=256 * MiB),
    )
    assert outcome.message == (  # refused by shape, not ended by a limit
        "AssertionError: np.allclose compared shapes (8000, 1, 1) and (10001, 2), which "
        "broadcast to (8000, 10001, 2): larger than either in `assert np.allclose(f(), target)` "
        "(test 1 of 1)"
    )
    assert evaluate(
        plan, stream(*full(1, 0.0)), [np.zeros((10001, 2))]
    ).passed  # a scalar against an array: as upstream


# ---- the parent's comparisons are bounded ----------------------------------------------------------
def test_comparisons_that_run_over_the_memory_limit_fail_the_step():
    """A 64 MB operand (within the operand cap) compared with a target of its shape: decoding it needs more
    than a 48 MiB budget, so the parent's copy runs out of memory. (Above malloc's largest mmap threshold,
    32 MiB, so the array is new address space even in a process with much freed heap.)"""
    big = np.zeros((4000, 2000))
    outcome = evaluate(
        split_step(["assert np.allclose(f(), target)"], "9.9"),
        stream(*full(1, big)),
        [np.zeros((4000, 2000))],
        limits=Limits(timeout=60, memory=48 * MiB),
    )
    assert (outcome.passed, outcome.failure.kind, outcome.message) == (
        False,
        "limit",
        "comparisons exceeded the memory limit of 0.046875 GiB (--bench-set memory_limit) (test 1 of 1)",
    )
    record = scicode_run.split_verdict(ExecResult(exit_code=0, stdout="", stderr="", duration=0.1), outcome, 10)
    assert (record["status"], record["message"], record["failure_kind"]) == ("fail", outcome.message, "limit")


def test_comparisons_that_run_over_the_time_limit_fail_the_step():
    """10.6's are_equivalent is quadratic: a child that sends 20,000 points keeps the parent busy for minutes."""
    plan = split_step(step_of("10.6")["test_cases"][:2], "10.6")
    points = np.random.default_rng(0).random((20000, 3))
    frames = [*full(1, points[:2]), *full(2, points)]
    started = time.monotonic()
    outcome = evaluate(plan, stream(*frames), [points[:2], points[::-1].copy()], limits=Limits(timeout=1))
    assert time.monotonic() - started < 10  # ten times the limit; the unbounded comparison takes minutes
    assert (outcome.passed, outcome.tests_passed, outcome.failure.kind, outcome.message) == (
        False,
        1,
        "limit",
        "comparisons exceeded the time limit of 1 s (--bench-timeout) (test 2 of 2)",
    )


def test_nothing_the_parents_copy_prints_reaches_this_process(capfd):
    plan = split_step(["print('from the test text')\nx = np.ones(2)\nprint(x)\nassert np.allclose(f(), x)"], "9.9")
    assert [p.source for p in plan.tests[0].parent if isinstance(p, split.TrustedStatement)][-1] == "print(x)"
    assert evaluate(plan, stream(*full(1, np.ones(2))), [None]).passed
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")


# ---- the parent's evaluation on hand-made streams ---------------------------------------------------
def stream(*frames) -> bytes:
    return b"".join(codec.encode(frame) for frame in frames)


def full(test: int, *operands, assertion: int = 1) -> list[tuple]:
    """The frames of a test with one assertion whose operands are ``operands``."""
    return [
        ("t", test),
        *[("v", test, assertion, k, v) for k, v in enumerate(operands, 1)],
        ("a", test, assertion),
        ("z", test),
    ]


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
        "operand_error": [
            *ok1,
            ("t", 2),
            ("e", 2, 1, 1, "ZeroDivisionError: division by zero"),
            ("v", 2, 1, 2, 6),
            ("a", 2, 1),
            ("z", 2),
        ],
        "unencodable": [
            *ok1,
            ("t", 2),
            ("x", 2, 1, 1, "cannot encode a value of type Thing"),
            ("v", 2, 1, 2, 6),
            ("a", 2, 1),
            ("z", 2),
        ],
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
    assert (
        outcome.failure.kind == "stopped"
        and outcome.message == "the scoring process stopped before test 1 (test 1 of 2)"
    )
    outcome = evaluate(TWO, stream(*full(1, np.ones((2, 3))), *full(2, 5, 6)), [np.ones((3, 2)), (5, 6)])
    assert outcome.failure.kind == "error" and outcome.failure.test == 1
    assert outcome.message.startswith("ValueError: operands could not be broadcast") and outcome.message.endswith(
        "(test 1 of 2)"
    )


def test_an_operand_the_parent_does_not_need_may_fail_as_upstream_never_evaluates_it():
    plan = split_step(["assert f(1) == target[0] and g(2) == target[1]"], "9.9")
    frames = [("t", 1), ("v", 1, 1, 1, 4), ("e", 1, 1, 2, "ZeroDivisionError: x"), ("a", 1, 1), ("z", 1)]
    assert (
        evaluate(plan, stream(*frames), [(5, 6)]).message == "AssertionError in `assert f(1) == target[0] and "
        "g(2) == target[1]` (test 1 of 1)"
    )
    plan = split_step(["assert (f(1) > 2 and g(2) < 1) == target"], "9.9")
    frames = [("t", 1), ("v", 1, 1, 1, 1), ("e", 1, 1, 2, "ZeroDivisionError: x"), ("a", 1, 1), ("z", 1)]
    assert evaluate(plan, stream(*frames), [False]).passed  # upstream: f(1) > 2 is False, g(2) never runs


def test_a_parent_side_statement_that_fails_fails_its_test():
    plan = plan_of("31.2")
    z = np.array([[1.0, -1.0, 0.0], [1.0, 1.0, -2.0]]) / np.sqrt([[1.0], [3.0]])  # np.cov(z) is the identity
    frames = [("t", 1), ("v", 1, 1, 1, z), ("a", 1, 1), ("z", 1)]
    outcome = evaluate(plan, stream(*frames), [(True, z, "extra")] * 3)
    assert outcome.failure.kind == "error" and outcome.message.startswith("ValueError: too many values to unpack")
    assert evaluate(plan, stream(*frames), [(True, z)] * 3).failure.test == 2  # test 1 passed


@pytest.mark.parametrize(
    "frames, why",
    [
        ([("v", 1, 1, 1, 1), ("v", 1, 1, 1, 1)], "sent twice"),
        ([("v", 7, 1, 1, 1)], "no such test"),
        ([("v", 1, 3, 1, 1)], "no such assertion"),
        ([("v", 1, 1, 9, 1)], "no such operand"),
        ([("v", "1", 1, 1, 1)], "must be ints"),
        ([("e", 1, 1, 1, 5)], "needs a message"),
        ([["t", 1]], "tagged tuple"),
        ([("q", 1)], "unknown frame"),
        ([("t", 1, 2)], "unknown frame"),
    ],
)
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


def test_an_operand_cannot_smuggle_a_comparison_result(warm):
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
    outcome, result = run_child(plan, child_code=child, targets=[3.0], wrap=False, executor=warm)
    assert outcome.failure.kind == "unencodable" and "Liar" in outcome.message


# ---- running a real child ------------------------------------------------------------------------
def run_process(source: str, workdir: Path, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    (workdir / "main.py").write_text(source)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PYTEST_", "AGENTBENCH_"))}
    env.update(
        OMP_NUM_THREADS="1",
        OPENBLAS_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        MPLBACKEND="Agg",
        PYTHONDONTWRITEBYTECODE="1",
    )
    proc = subprocess.Popen(
        [sys.executable, "main.py"],
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
        text=True,
        errors="replace",
    )
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


def run_child(
    plan,
    *,
    targets,
    code: str = "",
    dependencies: str = "import numpy as np",
    previous=(),
    child_code: str | None = None,
    wrap: bool = True,
    executor: ForkServer | None = None,
):
    """The child's operands evaluated against ``targets``, and how the child ended; the child is forked from
    ``executor`` (the module's warm server), else a fresh ``python main.py``."""
    with tempfile.TemporaryDirectory(prefix="agentbench-split-") as tmp:
        work = Path(tmp)
        channel = str(work / "operands.bin")
        if child_code is not None:
            source = script.SHIMS + script.child_runtime(channel) + child_code
        else:
            source = script.build_child_script(
                plan, dependencies=dependencies, previous_code=list(previous), code=code, channel=channel
            )
        result = run_process(source, work) if executor is None else run_forked(executor, source)
        data = Path(channel).read_bytes() if Path(channel).is_file() else b""
    return evaluate(plan, data, targets), result


# What the children import: forked from a server that has imported it, a child starts in milliseconds, not seconds.
CHILD_PRELOAD = ("numpy", "scipy.integrate", "scipy.sparse", "sympy")


@pytest.fixture(scope="module")
def warm():
    """One fork server for the module's children, unsandboxed as ``run_process``'s children are."""
    server = ForkServer(preload=CHILD_PRELOAD, isolation=Isolation(mode="none", why="the split's own tests"))
    server.start()
    yield server
    server.close()


def run_forked(server: ForkServer, source: str) -> subprocess.CompletedProcess:
    """``source`` run as ``main.py`` in a child of ``server``, with no limit but the timeout (as ``run_process``)."""
    result = server.run(source, Limits(timeout=TIMEOUT, memory=None, processes=None, disk=None))
    stderr = result.stderr + (f"\ntimed out after {TIMEOUT} s" if result.timed_out else "")
    return subprocess.CompletedProcess(["main.py"], result.exit_code, result.stdout, stderr)


def h5_roundtrip(tmp_path: Path, number: str, values: list) -> list:
    """The targets as the parent gets them: written and read in the official h5 layout."""
    path = tmp_path / "targets.h5"
    h5codec.write_step_targets(path, number, values)
    return h5codec.read_step_targets(path, number)


# 62.x: an operator dict of scipy.sparse kron results (test split, no public targets)
BLOCK_CODE = """
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
"""


def genuine_block(enlarged: bool):
    scope: dict = {}
    exec(BLOCK_CODE, scope)
    block = scope["block_initial"](2)
    if enlarged:
        block = scope["block_enlarged"](block, 2)
    return block


@pytest.mark.parametrize("number, enlarged", [("62.2", False), ("62.4", True)])
def test_sparse_kron_operator_dicts_cross_and_compare(tmp_path, number, enlarged, warm):
    plan = plan_of(number)
    block = genuine_block(enlarged)
    if enlarged:
        assert {type(m).__name__ for m in block.operator_dict.values()} - {"csr_matrix"}  # kron gives bsr/coo
    targets = h5_roundtrip(tmp_path, number, [(block.length, block.basis_size, block.operator_dict)])
    outcome, result = run_child(
        plan,
        targets=targets,
        code=BLOCK_CODE,
        dependencies="import numpy as np\nfrom scipy.sparse import kron, identity",
        executor=warm,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert outcome.passed, outcome.message
    wrong = dict(block.operator_dict, conn_Sz=block.operator_dict["conn_Sz"] * 1.01)
    targets = h5_roundtrip(tmp_path, number, [(block.length, block.basis_size, wrong)])
    outcome, _ = run_child(plan, targets=targets, code=BLOCK_CODE, executor=warm)
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
EJI_CODE = """
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
"""


def test_a_symbol_keyed_dict_crosses_and_compares(tmp_path, warm):
    plan = plan_of("17.1")
    scope: dict = {}
    exec(EJI_CODE, scope)
    genuine = [
        scope["init_eji_array"](*args) for args in ((10, [4, 6, 8, 10]), (1, [1, 2, 3, 4]), (2.2, [1.2, 2.2, 3.4, 5.5]))
    ]
    # the official file keeps symbols as their names (the h5 layout has no sympy type)
    as_stored = [
        ({k: str(v) for k, v in names.items()}, {str(k): v for k, v in values.items()}) for names, values in genuine
    ]
    targets = h5_roundtrip(tmp_path, "17.1", as_stored)
    outcome, result = run_child(
        plan, targets=targets, code=EJI_CODE, dependencies="import sympy as sp\nimport numpy as np", executor=warm
    )
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
QUICK = ("1.1", "10.3", "10.6", "10.10", "19.2", "29.2", "29.3", "38.1", "38.3", "44.1", "70.5", "70.8", "78.1", "78.2")
DEV_STEPS = [
    (problem, index)
    for problem in DEV
    for index in range(len(problem["sub_steps"]))
    if FULL or problem["sub_steps"][index]["step_number"] in QUICK
]
DEV_IDS = [p["sub_steps"][i]["step_number"] for p, i in DEV_STEPS]
ALL_DEV_IDS = {s["step_number"] for p in DEV for s in p["sub_steps"]}


@pytest.fixture(scope="session")
def dev_targets() -> Path:
    """Validation targets rebuilt from the ground truth, once per data/library version (cached)."""
    key = _digest(
        (SCICODE / "problems_dev.jsonl").read_bytes(),
        Path(h5codec.__file__).read_bytes(),
        f"{np.__version__} {scipy.__version__} {sympy.__version__}".encode(),
    )
    full = CACHE / f"scicode-dev-targets-{key}.h5"
    path = full if FULL else CACHE / f"scicode-dev-targets-{key}-quick.h5"
    for candidate in (full, path):
        if candidate.is_file():
            return candidate
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = CACHE / f".build-{os.getpid()}.h5"
    env = dict(os.environ, AGENTBENCH_DATA_DIR=str(SHARED_DATA))
    steps = [] if FULL else ["--steps", ",".join(DEV_IDS)]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_agentbench",
            "rebuild-targets",
            "--out",
            str(tmp),
            "--no-verify",
            "--jobs",
            str(JOBS),
            *steps,
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    steps = set(h5codec.list_steps(tmp)) if tmp.is_file() else set()
    if proc.returncode != 0 or steps != set(DEV_IDS):
        tmp.unlink(missing_ok=True)
        pytest.fail(f"rebuild-targets failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    os.replace(tmp, path)
    return path


MUTATION = """

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
"""


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
    outcome, result = run_child(
        plan,
        targets=targets,
        code=step_code(problem, index, mutated),
        previous=previous,
        dependencies=problem["required_dependencies"],
    )
    passed = outcome.passed and result.returncode == 0
    why = outcome.message or (result.stderr.strip().splitlines() or [""])[-1]
    return passed, why


UPSTREAM_TARGETS = """
import importlib.util as _u
_spec = _u.spec_from_file_location("_agentbench_h5codec", {codec!r})
_h5 = _u.module_from_spec(_spec)
_spec.loader.exec_module(_h5)
targets = _h5.read_step_targets({h5!r}, {step!r})
"""


def upstream_verdict(problem: dict, index: int, h5: Path, mutated: bool) -> bool:
    """Upstream's composition: dependencies, earlier code, the step's code, then `target = targets[i]` and each
    test case, in one script; it passes when it exits with status 0."""
    step = problem["sub_steps"][index]
    parts = [
        script.SHIMS,
        UPSTREAM_TARGETS.format(codec=h5codec.__file__, h5=str(h5), step=step["step_number"]),
        problem["required_dependencies"],
        *[s["ground_truth_code"] for s in problem["sub_steps"][:index]],
        step_code(problem, index, mutated),
    ]
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
    key = _digest(
        dev_targets.read_bytes(),
        (SCICODE / "problems_dev.jsonl").read_bytes(),
        MUTATION.encode(),
        (script.SHIMS + UPSTREAM_TARGETS).encode(),
        Path(h5codec.__file__).read_bytes(),
    )
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


@pytest.mark.slow
def test_ground_truth_passes_every_validation_step(genuine_split):
    failed = {step: why for step, (passed, why) in genuine_split.items() if not passed}
    assert len(genuine_split) == (50 if FULL else len(QUICK)) and set(genuine_split) <= ALL_DEV_IDS
    assert not failed, f"ground truth failed under the split: {failed}"


@pytest.mark.slow
def test_mutated_ground_truth_fails_exactly_the_steps_upstream_fails(mutated_split, mutated_upstream):
    ours = {step: passed for step, (passed, _) in mutated_split.items()}
    assert ours == mutated_upstream, {
        s: (ours[s], mutated_upstream[s], mutated_split[s][1]) for s in ours if ours[s] != mutated_upstream[s]
    }
    failing = [s for s, passed in ours.items() if not passed]
    # the mutation is caught broadly (45 of 50 steps), so the comparison means something
    assert len(failing) >= (40 if FULL else 8) and len(failing) < len(ours), failing
    for step in failing:
        assert re.search(r"\(test \d+ of \d+\)$", mutated_split[step][1]), (step, mutated_split[step][1])


# ---- code written to defeat the old scoring, against the split ---------------------------------------
HOSTILE = {
    "replaces np.allclose": ("np.allclose = lambda *a, **k: True\ndef f():\n    return 2.0\n", "assertion"),
    "patches numpy's code": (
        "np.allclose.__code__ = (lambda *a, **k: True).__code__\ndef f():\n    return 2.0\n",
        "assertion",
    ),
    "returns the target it cannot see": ("def f():\n    return target\n", "operand_error"),
    "exits 0 at import": ("import sys\nsys.exit(0)\ndef f():\n    return 1.0\n", "stopped"),
    "forges frames then exits": (
        "import os\n_agentbench_rt.test(1)\n_agentbench_rt.value(1, 1, 1, 2.0)\n"
        "_agentbench_rt.reached(1, 1)\n_agentbench_rt.end(1)\nos._exit(0)\n",
        "assertion",
    ),
    "sends an operand twice": ("_agentbench_rt.value(1, 1, 1, 1.0)\ndef f():\n    return 1.0\n", "protocol"),
    "object equal to all": (
        "class Eq:\n    def __eq__(self, o):\n        return True\n    __array_priority__ = 99\n"
        "def f():\n    return Eq()\n",
        "unencodable",
    ),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_code_that_fakes_a_pass_fails_in_the_parent(name, warm):
    code, kind = HOSTILE[name]
    plan = split_step(["assert np.allclose(f(), target)"], "9.9")
    outcome, result = run_child(plan, targets=[1.0], code=code, executor=warm)
    assert not outcome.passed and outcome.failure.kind == kind, (outcome, result.stderr[-500:])
    assert outcome.message.endswith("(test 1 of 1)") or kind == "protocol"  # a malformed stream fails the step


def test_a_genuine_answer_passes_with_the_same_runner(warm):
    plan = split_step(["assert np.allclose(f(), target)"], "9.9")
    outcome, result = run_child(plan, targets=[1.0], code="def f():\n    return 1.0\n", executor=warm)
    assert outcome.passed and result.returncode == 0


def test_the_child_runs_only_the_child_side_of_the_package(tmp_path):
    """The trust boundary in a running child: its script loads three files of this package by their paths
    (the operand runtime of child/, the codec, the comparison helpers: the child side that
    tests/test_architecture.py holds to its import rule) and imports no module of the package, though the
    package is on its path; with a traced helper too. The operands it sends still pass."""
    package = Path(script.__file__).resolve().parents[2]
    traced = split_step([TRACED_TEST], "9.9")
    assert any(leaf.trace for test in traced.tests for part in test.evaluated for leaf in part.leaves)
    for plan, code, targets in (
        (split_step(["assert np.allclose(f(), target)"], "9.9"), "def f():\n    return 1.0\n", [1.0]),
        (traced, TRACED_CODE, [True]),
    ):
        channel = tmp_path / "operands.bin"
        channel.unlink(missing_ok=True)
        source = script.build_child_script(
            plan, dependencies="import numpy as np", previous_code=[], code=code, channel=str(channel)
        )
        paths = [Path(path).resolve() for path in re.findall(r"'(/[^']+\.py)'", source)]
        loaded = sorted(path.relative_to(package.parent).as_posix() for path in paths if path.is_relative_to(package))
        assert loaded == [
            "pytest_agentbench/benchmarks/scicode/child/runtime.py",
            "pytest_agentbench/benchmarks/scicode/compare.py",
            "pytest_agentbench/sandbox/codec.py",
        ]
        probe = (
            "\nimport importlib.util, json, sys\nprint(json.dumps([importlib.util.find_spec('pytest_agentbench') "
            "is not None, sorted(m for m in sys.modules if m.split('.')[0] == 'pytest_agentbench')]))\n"
        )
        result = run_process(source + probe, tmp_path)
        assert result.returncode == 0, result.stderr
        importable, imported = json.loads(result.stdout.strip().splitlines()[-1])
        assert importable and imported == [], result.stdout  # it could have imported the package, and did not
        outcome = evaluate(plan, channel.read_bytes(), targets)
        assert outcome.passed, outcome.message


# a helper of the test text that calls into the model's object (30.3's shape): the child records, the parent replays
TRACED_TEST = """
def check(model, x):
    return np.allclose(model.value(x), 2 * x)
assert check(Model(), np.ones(3)) == target
"""
TRACED_CODE = "class Model:\n    def value(self, x):\n        return 2 * x\n"


EQUAL_VALUES = """
_send, _first = _agentbench_rt.value, {}
def _equal(t, a, k, value):
    _first.setdefault((t, a), value)
    return _send(t, a, k, _first[(t, a)])
_agentbench_rt.value = _equal
"""


def test_a_child_cannot_send_an_expected_value_that_depends_on_no_model_code(warm):
    """78.1 compares the output with `expected_output`, computed from constants and numpy: a child that sends
    every operand equal to its (wrong) output used to pass; the parent now computes the expected value."""
    problem = next(p for p in DEV if p["problem_id"] == "78")
    step = problem["sub_steps"][0]
    plan = split_step(step["test_cases"], "78.1")
    wrong = (
        step["ground_truth_code"] + "\n_genuine = pendulum_derivs\ndef pendulum_derivs(*args):\n"
        "    return _genuine(*args) + 1.0\n"
    )
    outcome, result = run_child(
        plan,
        targets=[None] * 3,
        code=wrong + EQUAL_VALUES,
        dependencies=problem["required_dependencies"],
        executor=warm,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert (outcome.passed, outcome.failure.kind, outcome.message) == (
        False,
        "assertion",
        "AssertionError: Test Case 1 Failed in `assert np.allclose(output, expected_output), "
        "'Test Case 1 Failed'` (test 1 of 3)",
    )
    outcome, _ = run_child(
        plan,
        targets=[None] * 3,
        code=step["ground_truth_code"] + EQUAL_VALUES,
        dependencies=problem["required_dependencies"],
        executor=warm,
    )
    assert outcome.passed, outcome.message


# ---- the plugin scores through the split ------------------------------------------------------------
@pytest.mark.e2e
@pytest.mark.slow
def test_the_operand_cap_option_reaches_scoring(tiny, pytester):
    from helpers.bench_runs import read_jsonl, run_dirs

    result = tiny("--bench-set=operand_cap=60", "--bench-run-id=capped")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result = tiny("--bench-run-id=default")
    assert result.ret == pytest.ExitCode.OK
    runs = {p.name: p for p in run_dirs(pytester.path)}
    capped = {r["id"]: r for r in read_jsonl(runs["capped"] / "steps.jsonl")}
    assert {r["status"] for r in capped.values()} == {"fail"}
    assert capped["1.1"]["message"] == (
        "cannot compare `add(1, 2)`: the encoded values exceed the cap of 60 bytes per step (test 1 of 1)"
    )
    assert capped["1.1"]["failure_kind"] == "unencodable"
    passed = {r["id"]: r for r in read_jsonl(runs["default"] / "steps.jsonl")}
    assert {r["status"] for r in passed.values()} == {"pass"} and passed["1.1"]["operands_bytes"] > 0
