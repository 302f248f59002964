"""No comparison is decided by the child's values alone.

The trusted parent evaluates the test text itself: the helpers the test text defines, library calls,
operators and the comparisons run in the parent on decoded values; only the model's calls (and what reads
the model's objects) come from the child. Names the model's code binds never change what the test text's
own names mean.

* every one of the 1,082 official test cases is verified this way (none is `cannot verify`), and no
  comparison of two or more operands takes them all from the child, except the model's own returned values
  compared with each other (34.3's ``xn == xp``), and no function of the test text runs whole in the child
  (30.3's ``test_gradient`` and 72.1's ``test_neighbor`` call into the model's objects: the parent replays them
  with those calls answered from the child's record); the count of parent-evaluated helper calls is printed;
* end to end, on hand-made data files (``--bench-set=allow_custom_data=true``): a model whose code rebinds builtins
  (``range = range``, ``len = len``, ``from math import *``) and answers wrongly fails, also when its ``len``
  fakes the test's expectation; a wrong 49.4-style answer that patches numpy inside the child so that the
  test's own ``Nbody_Etot`` gives equal energies fails, where a correct one passes with the same patches;
  72.1's helper with a neighbour list whose ``!=`` always says equal fails (the parent compares the decoded
  list), and a 30.3-style gradient check whose model patches ``np.sqrt`` in the child fails when the gradient
  is wrong and passes when it is right.
"""

from __future__ import annotations

import ast
import json

import pytest

from pytest_agentbench.benchmarks.scicode import split
from pytest_agentbench.benchmarks.scicode.split.taint import canonical, dotted
from pytest_agentbench.benchmarks.scicode.verdict import evaluate_here

from helpers.bench_runs import SHARED_DATA
from helpers.scicode_builders import MODEL_CONFTEST, CustomScicode, problem, step


def official_steps() -> list[dict]:
    steps = []
    for name in ("problems_dev.jsonl", "problems_test.jsonl"):
        path = SHARED_DATA / "scicode" / name
        if not path.is_file():
            pytest.fail(f"{path} is missing; set AGENTBENCH_DATA_DIR to the staged upstream data")
        for line in path.read_text().splitlines():
            if line.strip():
                steps.extend(json.loads(line)["sub_steps"])
    return steps


def is_leaf(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == split.LEAF_FN


def comparisons(expression: str):
    """(node, operands) of every comparison of two or more operands in a parent expression."""
    for node in ast.walk(ast.parse(expression, mode="eval")):
        if isinstance(node, ast.Compare):
            yield node, [node.left, *node.comparators]
        elif (
            isinstance(node, ast.Call)
            and canonical(dotted(node.func)) in split.COMPARISON_CALLS
            and len(node.args) >= 2
        ):
            yield node, list(node.args)


def helper_calls(source: str, mode: str, helpers: set[str]) -> int:
    """Calls of a function the test text defines, on an operand from the child, in a parent part (a replayed
    helper, :func:`verdict.replay`, counts too)."""
    return sum(
        1
        for node in ast.walk(ast.parse(source, mode=mode))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and (node.func.id in helpers or node.func.id == split.REPLAY_FN)
        and any(is_leaf(inner) for inner in ast.walk(node))
    )


def calls_test_function(source: str, defined: set[str]) -> bool:
    return any(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in defined
        for node in ast.walk(ast.parse(source, mode="eval"))
    )


@pytest.mark.slow
def test_every_official_test_case_is_verified_by_the_parent(capsys):
    steps = official_steps()
    cases = 0
    child_only: list[str] = []
    helpers_in_parent = 0
    replayed = 0
    in_child: list[str] = []
    mixed = 0
    for s in steps:
        number = s["step_number"]
        plan = split.split_step(s["test_cases"], number)  # SplitError would be `cannot verify`
        defined = {
            node.name
            for code in s["test_cases"]
            for node in ast.walk(ast.parse(code))
            if isinstance(node, ast.FunctionDef)
        }
        for test in plan.tests:
            cases += 1
            assert test.asserts, f"{number} test {test.number}: nothing for the parent to verify"
            for part in test.evaluated:
                statement = isinstance(part, split.MixedStatement)
                mixed += statement
                helpers_in_parent += helper_calls(part.expression, "exec" if statement else "eval", defined)
                replayed += part.expression.count(split.REPLAY_FN + "(")
                # a function of the test text run whole in the child would decide its comparisons there
                in_child += [
                    f"{number}/{test.number}: {leaf.source}"
                    for leaf in part.leaves
                    if leaf.trace is None and calls_test_function(leaf.source, defined)
                ]
                # nor inside a replayed helper: what it reaches through the child's record is the model's
                in_child += [
                    f"{number}/{test.number}: {leaf.source} reaches {sorted(reached)}"
                    for leaf in part.leaves
                    if leaf.trace
                    and (reached := set(ast.literal_eval(ast.parse(leaf.trace, mode="eval").body.args[-1])) & defined)
                ]
                if statement:
                    continue
                for node, operands in comparisons(part.expression):
                    if all(is_leaf(o) for o in operands):
                        sources = {part.leaves[o.args[0].value - 1].source for o in operands}
                        child_only.append(f"{number}/{test.number}: {ast.unparse(node)} {sorted(sources)}")
    assert cases == 1082
    # the one exception: two values 34.3's model call returned, compared with each other (then with target)
    assert child_only == ["34.3/1: _agentbench_leaf(1) == _agentbench_leaf(2) ['xn', 'xp']"], child_only
    assert in_child == [], in_child
    assert helpers_in_parent >= 10 and mixed >= 30 and replayed >= 7  # 30.3's six tests, 72.1's test 4
    with capsys.disabled():
        print(
            f"\nparent-evaluated helper calls on the child's values: {helpers_in_parent} ({replayed} replayed "
            f"with the model's calls from the child's record); statements the parent runs on the child's values: "
            f"{mixed}"
        )


def test_the_energy_check_of_49_4_runs_in_the_parent():
    [s] = [s for s in official_steps() if s["step_number"] == "49.4"]
    plan = split.split_step(s["test_cases"], "49.4")
    test = plan.tests[3]
    [mixed] = [p for p in test.parent if isinstance(p, split.MixedStatement)]
    assert mixed.expression == "Etot1 = Nbody_Etot(_agentbench_leaf(1), mass)"
    assert [leaf.source for leaf in mixed.leaves] == ["uout"]
    assert [a.expression for a in test.asserts] == ["np.isclose(Etot0, Etot1) == target"]
    assert any(isinstance(p, split.TrustedStatement) and p.source.startswith("Etot0 =") for p in test.parent)


def test_builtins_the_models_code_rebinds_leave_the_expectations_in_the_parent():
    """51.4: `range = range`, `len = len` or `from math import *` change nothing in the test's names."""
    [s] = [s for s in official_steps() if s["step_number"] == "51.4"]
    names = split.names_bound_by(
        "import numpy as np", "range = range\nlen = len\nfrom math import *\ndef MD(*a):\n    return 0"
    )
    plain = split.split_step(s["test_cases"], "51.4")
    rebound = split.split_step(
        s["test_cases"], "51.4", code_names=names, required=split.required_names(s["function_header"])
    )
    assert [a.expression for t in rebound.tests for a in t.asserts] == [
        a.expression for t in plain.tests for a in t.asserts
    ]
    assert "initial_energy)" in rebound.tests[3].asserts[0].expression


# ---- end to end, on hand-made data ------------------------------------------------------------------
REBIND = "range = range\nlen = len\nfrom math import *\n"
SUM_TEST = (
    "x = np.array([1.0, 2.0, 3.0])\nexpected = np.sum(x[:len(x)]) * len(range(3))\nassert np.isclose(f(x), expected)"
)
NBODY_TEST = """def Nbody_Etot(uin, mass):
    Ekin = 0.5*np.sum(mass * (uin[:,3]**2 + uin[:,4]**2 + uin[:,5]**2))
    ggrav = 6.67430e-11
    Epot = 0.
    for i in range(len(mass)):
        for j in range(i+1, len(mass)):
            rij = np.sqrt((uin[i,0] - uin[j,0])**2 + (uin[i,1] - uin[j,1])**2 + (uin[i,2] - uin[j,2])**2)
            Epot += -2. * ggrav * mass[i] * mass[j] / rij
    Etot = Ekin + Epot
    return Etot
mass = np.array([1.98855e30, 5.97219e24])
uin = np.array([[0.,0.,0.,0.,0.,0.],[1.49598261e11,0.,0.,0.,29.78e3,0.]])
t0 = 0.
t1 = 365.*24.*60.*60.
dt = 60.*60.
Nbody(uin, mass, dt, t0, t1)
Etot0 = Nbody_Etot(uin, mass)
uout = Nbody(uin, mass, dt, t0, t1)
Etot1 = Nbody_Etot(uout, mass)
assert (np.isclose(Etot0, Etot1)) == target"""
# inside the child, Nbody_Etot then gives 0.0 for any input: equal energies for the child's copy of the test
PATCH_NUMPY = "np.sum = lambda *a, **k: 0.0\nnp.sqrt = lambda *a, **k: float('inf')\n"
NBODY_HEADER = "def Nbody(uin, mass, dt, t0, t1):\n    '''n-body'''"
# 72.1's helper calls the model's function and compares inside itself
NEIGHBOR_TEST = """def test_neighbor():
    N = 10
    inputs = [(0, 0), (9, 9), (0, 5)]
    corrects = [
        [(9, 0), (0, 1), (1, 0), (0, 9)],
        [(8, 9), (9, 0), (0, 9), (9, 8)],
        [(9, 5), (0, 6), (1, 5), (0, 4)]
    ]
    for (i, j), correct in zip(inputs, corrects):
        if neighbor_list((i, j), N) != correct:
            return False
    return True
assert (test_neighbor()) == target"""
NEIGHBOR_HEADER = "def neighbor_list(site, N):\n    '''neighbours'''"
NEIGHBOR_RIGHT = """def neighbor_list(site, N):
    i, j = site
    return [((i - 1) % N, j), (i, (j + 1) % N), ((i + 1) % N, j), (i, (j - 1) % N)]"""
# a list whose `!=` says "equal" to anything: the child's copy of the helper then returns True
NEIGHBOR_FAKE = """class _Agrees(list):
    def __ne__(self, other):
        return False
    def __eq__(self, other):
        return True
def neighbor_list(site, N):
    return _Agrees([(0, 0)])"""
# 30.3's helper calls methods of the model's object, then computes an RMSE with numpy
GRADIENT_TEST = """np.random.seed(0)
def test_gradient(configs, wf, delta):
    nconf, nelec, ndim = configs.shape
    wf_val = wf.value(configs)
    grad_analytic = wf.gradient(configs)
    grad_numeric = np.zeros(grad_analytic.shape)
    for i in range(nelec):
        for d in range(ndim):
            shift = np.zeros(configs.shape)
            shift[:, i, d] += delta
            wf_val_shifted = wf.value(configs + shift)
            grad_numeric[:, i, d] = (wf_val_shifted - wf_val)/(wf_val*delta)
    rmse = np.sqrt(np.sum((grad_numeric - grad_analytic)**2)/(nconf*nelec*ndim))
    return rmse
assert (test_gradient(np.random.randn(5, 2, 3), Gauss(0.5), 1e-6) < 1e-3) == target"""
GAUSS_HEADER = "class Gauss:\n    '''exp(-alpha r^2)'''"
GAUSS = """class Gauss:
    def __init__(self, alpha):
        self.alpha = alpha
    def value(self, configs):
        return np.exp(-self.alpha * np.sum(configs**2, axis=(1, 2)))
    def gradient(self, configs):
        return @GRADIENT@"""
GAUSS_RIGHT = GAUSS.replace("@GRADIENT@", "-2 * self.alpha * configs")
GAUSS_WRONG = GAUSS.replace("@GRADIENT@", "np.zeros(configs.shape)")
# inside the child, the helper's RMSE is then 0.0 whatever the gradient
PATCH_SQRT = "np.sqrt = lambda *a, **k: 0.0\n"
ANSWERS = {
    # wrong answers
    "1.1": REBIND + "def f(x):\n    return 7.0",
    "2.1": REBIND + "def len(x):\n    return 0\ndef f(x):\n    return 0.0",  # fakes the child's expectation
    "3.1": PATCH_NUMPY + "def Nbody(uin, mass, dt, t0, t1):\n    return uin * 2.0",
    # right answers, same lines
    "4.1": REBIND + "def f(x):\n    return 18.0",
    "5.1": PATCH_NUMPY + "def Nbody(uin, mass, dt, t0, t1):\n    return uin.copy()",
    # a right answer on a test case the parent cannot evaluate: `cannot verify`, never a pass
    "6.1": "def f(x):\n    return 1.0",
    # helpers that call into the model's objects (72.1, 30.3): replayed in the parent
    "7.1": NEIGHBOR_RIGHT,
    "8.1": NEIGHBOR_FAKE,  # wrong
    "9.1": PATCH_SQRT + GAUSS_WRONG,  # wrong
    "10.1": PATCH_SQRT + GAUSS_RIGHT,
    # a statement binding what a traced helper returns: the parent's, and the child's own code still has it
    "11.1": "def scale():\n    return 2.0\ndef f(x):\n    return x",
}
TESTS = {
    "6.1": "assert np.allclose(f(target), 1)",
    "7.1": NEIGHBOR_TEST,
    "8.1": NEIGHBOR_TEST,
    "9.1": GRADIENT_TEST,
    "10.1": GRADIENT_TEST,
    "11.1": "def h(v):\n    return v * scale()\nx = h(2.0)\nassert np.isclose(f(x), x)",
}
HEADERS = {"7.1": NEIGHBOR_HEADER, "8.1": NEIGHBOR_HEADER, "9.1": GAUSS_HEADER, "10.1": GAUSS_HEADER}


@pytest.fixture
def custom(pytester, bench, shared_data):
    pytester.makeconftest(MODEL_CONFTEST)  # answers each step with its "ground truth": here ANSWERS
    problems = [
        problem(
            n.split(".")[0],
            [
                step(
                    n,
                    code,
                    [TESTS.get(n, NBODY_TEST if "Nbody" in code else SUM_TEST)],
                    header=HEADERS.get(n, NBODY_HEADER if "Nbody" in code else "def f(x):"),
                )
            ],
        )
        for n, code in ANSWERS.items()
    ]
    custom = CustomScicode(pytester, bench, shared_data)
    custom.write(problems, {n: [True] for n in ANSWERS})
    return lambda *args: custom("--bench-timeout=60", *args)


@pytest.mark.e2e
def test_rebound_builtins_and_patched_libraries_do_not_make_a_wrong_answer_pass(custom):
    result = custom()
    out = result.stdout.str()
    failed = {n for n in ANSWERS if any(line.startswith("FAILED") and f"::{n} " in line for line in out.splitlines())}
    assert failed == {"1.1", "2.1", "3.1", "6.1", "8.1", "9.1"}, out[-3000:]
    assert "11 done (5 pass, 5 fail, 1 eval_error)" in out, out[-3000:]
    assert "AssertionError in `assert test_neighbor() == target`" in out  # the parent's comparison, not the child's
    assert "eval_error: agentbench: cannot verify the tests: step 6.1 test 1 line 1: `f(target)` calls f" in out


# ---- the parent's replay of a traced helper, fed a hand-made record --------------------------------
def neighbor_stream(calls: list[tuple]) -> bytes:
    """A child's stream for NEIGHBOR_TEST whose record says `neighbor_list` was called with each of ``calls``
    ((arguments, returned value)), handle 1 being the model's function."""
    from pytest_agentbench.sandbox import codec

    events = [("global", "neighbor_list", ("h", 1))]
    events += [("call", 1, codec.encode((args, {})), ("d", codec.encode(value))) for args, value in calls]
    frames = [("t", 1), ("v", 1, 1, 1, events), ("a", 1, 1), ("z", 1)]
    return b"".join(codec.encode(frame) for frame in frames)


RIGHT_NEIGHBORS = [
    (((0, 0), 10), [(9, 0), (0, 1), (1, 0), (0, 9)]),
    (((9, 9), 10), [(8, 9), (9, 0), (0, 9), (9, 8)]),
    (((0, 5), 10), [(9, 5), (0, 6), (1, 5), (0, 4)]),
]


@pytest.mark.parametrize(
    "calls, verdict",
    [
        (RIGHT_NEIGHBORS, "pass"),  # what a right model returns: the record supplies nothing but the model's outputs
        (RIGHT_NEIGHBORS[:1] + [(((9, 9), 10), [(0, 0)])] + RIGHT_NEIGHBORS[2:], "AssertionError"),
        # a record of other calls than the helper makes (another site), or of too few
        ([(((1, 1), 10), RIGHT_NEIGHBORS[0][1])] + RIGHT_NEIGHBORS[1:], "ReplayMismatch: event 2"),
        (RIGHT_NEIGHBORS[:2], "ReplayMismatch: the helper made more calls"),
    ],
    ids=["right", "wrong-answer", "other-arguments", "too-few-calls"],
)
def test_the_parent_answers_a_traced_helper_only_from_a_matching_record(calls, verdict):
    plan = split.split_step([NEIGHBOR_TEST], "7.1")
    outcome = evaluate_here(plan, neighbor_stream(calls), [True])
    if verdict == "pass":
        assert outcome.passed, outcome
    else:
        assert not outcome.passed and verdict in outcome.message, outcome
