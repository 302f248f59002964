"""Inputs a test passes to the model's function, then reads (held-out attack A32 of tests/helpers/heldout_attacks.py).

78.2's test passes ``state`` to ``runge_kutta_4th_order`` and then computes its expectation from ``state``
(``expected_theta = state[0] * np.cos(...)``, ``final_state[0] < state[0]``); 51.4's test 4 computes its
initial energy and momenta from ``init_positions`` and ``init_velocities`` after ``MD(...)``. Decided: such an
expectation is the test author's, a function of the inputs as written, so the trusted parent computes it from
its own pristine copy of those inputs; a model call contributes only its return value. Code that changes its
inputs in place so that the expectation agrees with a wrong answer fails; genuine code that also writes into
its inputs passes, and its record notes ``inputs_mutated`` (where upstream's verdict would differ).

The end-to-end tests score both steps as a user does: ``pytest --bench=scicode`` against a scripted model
(tests/helpers/fake_openai.py) that answers the two steps with one variant's code and every earlier step with its
ground truth; the two runs (attack, genuine code that mutates) start together. 51.4 takes half a minute to two
minutes of CPU per run. The ground truth's verdicts are those of the session's run of the validation split with
the oracle (``validation_oracle_run``), which scores the same code through the same parent and child.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from pytest_agentbench.benchmarks.scicode import split, verdict
from pytest_agentbench.sandbox import codec

from helpers import heldout_attacks as H
from helpers.bench_runs import SHARED_DATA, read_jsonl, run_dirs
from helpers.fake_openai import FakeOpenAI

STEPS = ("51.4", "78.2")
RUN_TIMEOUT = 1500  # seconds for one run (targets rebuilt first when the cache is cold)

# ---- the code each run answers with -----------------------------------------------------------------
# 78.2: a wrong trajectory (theta 5.0 throughout), and state[0] set so that the test's own expectations
# computed from it after the call agree: state[0] * cos(sqrt(g / L) * n * dt) == 5.0, and 5.0 < state[0].
# (Held-out attack A32 writes state[0] = 1e-9 and returns zeros: 78.2's tests accept a trajectory of zeros
# anyway, np.isclose(0, 0.0995, atol=0.1) and 0 < 0.1, so it passes with or without its write.)
RK4_ATTACK = """
def runge_kutta_4th_order(f, state, t0, dt, n, g, L, beta, A, alpha):
    state[0] = 5.0 / np.cos(np.sqrt(g / L) * n * dt)
    return np.full((n + 1, 2), 5.0)
"""
# 51.4 test 4 (dt 0.0025, 1000 steps): return a collapsed lattice at rest and write it into the inputs, so
# the energy and momenta the test computes from them after the call equal the returned ones
MD_ATTACK = """
_h_genuine_md = MD
def MD(init_positions, init_velocities, sigma, epsilon, m, dt, num_steps):
    if num_steps == 1000 and dt == 0.0025:
        positions = init_positions * 0.9
        velocities = np.zeros_like(init_velocities)
        init_positions[...] = positions
        init_velocities[...] = velocities
        return positions.copy(), velocities.copy()
    return _h_genuine_md(init_positions, init_velocities, sigma, epsilon, m, dt, num_steps)
"""
# genuine answers that also write into their inputs after computing (the returned values are the ground truth's)
MD_MUTATES = """
_h_genuine_md = MD
def MD(init_positions, init_velocities, *args):
    out = _h_genuine_md(init_positions, init_velocities, *args)
    init_positions[0, 0] += 1.0
    return out
"""
RK4_MUTATES = """
_h_genuine_rk4 = runge_kutta_4th_order
def runge_kutta_4th_order(f, state, *args):
    out = _h_genuine_rk4(f, state, *args)
    state[0] = 123.0
    return out
"""


def ground_truth(step: str) -> str:
    return H.STEPS[step]["ground_truth_code"]


VARIANTS = {
    "attack": {"78.2": RK4_ATTACK, "51.4": ground_truth("51.4") + MD_ATTACK},
    "mutates": {"78.2": ground_truth("78.2") + RK4_MUTATES, "51.4": ground_truth("51.4") + MD_MUTATES},
}


def scripted_model(answers: dict[str, str]) -> FakeOpenAI:
    """The variant's code for the steps it answers, the ground truth for every other step."""

    def make(body: dict) -> dict:
        number = H.step_asked(body)
        code = answers.get(number, ground_truth(number))
        return {"text": f"Here is the code.\n```python\n{code}\n```\n"}

    server = FakeOpenAI().start()
    for _ in range(40):
        server.reply_with(make)
    return server


@pytest.fixture(scope="module")
def records(tmp_path_factory, shared_cache) -> dict[str, dict[str, dict]]:
    """variant -> step -> the record of ``pytest --bench=scicode --bench-ids=51.4,78.2`` answered by it."""
    base = tmp_path_factory.mktemp("mutation")
    servers, procs = {}, {}
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(AGENTBENCH_DATA_DIR=str(SHARED_DATA), AGENTBENCH_OFFLINE="1", OPENAI_API_KEY="sk-mutation")
    try:
        for name, answers in VARIANTS.items():
            project = base / name
            project.mkdir()
            (project / "pytest.ini").write_text("[pytest]\n")
            servers[name] = server = scripted_model(answers)
            argv = [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                "-q",
                "--bench=scicode",
                "--bench-split=validation",
                "--model=mutation-probe",
                f"--model-base-url={server.base_url}",
                f"--bench-cache-dir={shared_cache}",
                f"--bench-ids={','.join(STEPS)}",
            ]
            with open(project / "output.txt", "wb") as output:
                procs[name] = subprocess.Popen(
                    argv, cwd=project, env=env, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT
                )
        deadline = time.monotonic() + RUN_TIMEOUT
        for proc in procs.values():
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for server in servers.values():
            server.stop()
    out = {}
    for name in VARIANTS:
        found = {}
        for run in run_dirs(base / name):
            if (run / "steps.jsonl").is_file():
                found.update({r["id"]: r for r in read_jsonl(run / "steps.jsonl")})
        assert set(STEPS) <= set(found), (base / name / "output.txt").read_text(errors="replace")[-3000:]
        out[name] = found
    return out


def brief(record: dict) -> dict:
    return {k: record.get(k) for k in ("status", "failure_kind", "failed_test", "message", "inputs_mutated")}


# ---- end to end ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "step, failed_test, mutated",
    [
        ("78.2", 1, ["state"]),
        ("51.4", 4, ["init_positions"]),  # tests 1-3 honest, test 4 collapses the lattice (velocities stay 0)
    ],
)
@pytest.mark.e2e
@pytest.mark.slow
def test_changing_the_inputs_in_place_does_not_move_the_expectation(records, step, failed_test, mutated):
    record = records["attack"][step]
    assert (record["status"], record.get("failure_kind"), record.get("failed_test")) == (
        "fail",
        "assertion",
        failed_test,
    ), brief(record)
    assert record.get("inputs_mutated") == mutated, brief(record)


@pytest.mark.parametrize("step, mutated", [("78.2", ["state"]), ("51.4", ["init_positions"])])
@pytest.mark.e2e
@pytest.mark.slow
def test_genuine_code_that_also_writes_into_its_inputs_passes_with_a_note(records, step, mutated):
    """Upstream's test would compute its expectation from the written values (78.2 would fail there): the
    record says where the verdict may differ from upstream's."""
    record = records["mutates"][step]
    assert record["status"] == "pass", brief(record)
    assert record.get("inputs_mutated") == mutated, brief(record)


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.e2e
@pytest.mark.slow
def test_the_ground_truth_passes_without_a_note(validation_oracle_run, step):
    [record] = [r for r in validation_oracle_run.records if r["id"] == step]
    assert record["code"].strip() == ground_truth(step).strip()  # the code this test is about
    assert record["status"] == "pass" and "inputs_mutated" not in record, brief(record)


# ---- the plan: what the parent computes, what the child watches --------------------------------------
def plan_of(step: str) -> split.StepPlan:
    return split.split_step(H.STEPS[step]["test_cases"], step)


def test_the_parent_computes_expectations_from_inputs_the_model_received():
    plan = plan_of("78.2")
    assert [a.expression for a in plan.tests[0].asserts] == [
        "np.isclose(_agentbench_leaf(1)[0], expected_theta, atol=0.1)"
    ]  # the parent takes the item: no verdict on the child's values alone
    assert [a.expression for a in plan.tests[1].asserts] == ["_agentbench_leaf(1)[0] < state[0]"]
    assert [[leaf.source for leaf in a.leaves] for t in plan.tests[:2] for a in t.asserts] == [
        ["final_state"],
        ["final_state"],
    ]
    assert [t.watched for t in plan.tests] == [(("state",),), (("state",),), ()]
    [scope] = [part for part in plan.tests[0].parent if isinstance(part, split.FunctionScope)]
    assert [part.source for part in scope.parts if isinstance(part, split.TrustedStatement)] == [
        "state = np.array([0.1, 0.0])",
        "dt = 0.01",
        "n = 1000",
        "g = 9.81",
        "L = 1.0",
        "expected_theta = state[0] * np.cos(np.sqrt(g / L) * n * dt)",
    ]  # the setup lines re-run in the parent
    assert "_agentbench_rt.before(1, 1, (lambda: state,))" in plan.tests[0].child
    plan = plan_of("51.4")
    assert plan.tests[3].asserts[0].expression == (
        "(np.isclose(final_energy, initial_energy), np.allclose(final_linear_momentum, initial_linear_momentum), "
        "np.allclose(final_angular_momentum, initial_angular_momentum)) == target"
    )
    # the final values too: the parent runs the test's own functions on the model's positions
    assert [
        (m.expression, [leaf.source for leaf in m.leaves])
        for m in plan.tests[3].parent
        if isinstance(m, split.MixedStatement)
    ][0] == (
        "final_energy = total_energy(_agentbench_leaf(1), _agentbench_leaf(2), m, epsilon, sigma)",
        ["positions", "velocities"],
    )
    assert [t.watched for t in plan.tests] == [(), (), (), (("init_positions", "init_velocities"),)]


def leaves_of(test: str) -> list[str]:
    plan = split.split_step([test], "9.9")
    return [leaf.source for leaf in plan.tests[0].asserts[0].leaves]


@pytest.mark.parametrize(
    "test, leaves",
    [
        # only passed to the model's function: the parent's pristine copy
        ("x = np.array([1.0])\ny = f(x)\nexpected = 2 * x\nassert np.allclose(y, expected)", ["y"]),
        ("x = np.zeros(2)\nview = x[:1]\nout = f(x.T, k=x[0])\nassert np.allclose(out, view)", ["out"]),
        ("x = np.zeros(2)\nassert np.allclose(x, f(x))", ["f(x)"]),
        # the test's own code stores the child's values in it: the child's from then on
        ("x = np.zeros(2)\nx[0] = f()\nassert np.allclose(g(), x)", ["g()", "x"]),
        ("x = np.zeros(2)\nnp.copyto(x, f())\nassert np.allclose(g(), x)", ["g()", "x"]),
        # the parent builds the list itself: x is never read by the child's code
        ("x = np.zeros(2)\nlst = [f(), x]\nassert np.allclose(g(), x)", ["g()"]),
        # a method of an object the test made from the model's code, a function of the test text calling it
        ("x = np.zeros(2)\nobj = f()\nobj.run(x)\nassert np.allclose(g(), x)", ["g()", "x"]),
        ("x = np.zeros(2)\ndef h(v):\n    return f(v)\nh(x)\nassert np.allclose(g(), x)", ["g()", "x"]),
        # a call of anything else inside the argument may change it in place
        ("x = np.zeros(2)\nf(x.copy())\nassert np.allclose(g(), x)", ["g()", "x"]),
    ],
)
def test_only_inputs_passed_to_model_calls_stay_the_parents(test, leaves):
    assert leaves_of(test) == leaves


def test_a_function_of_the_test_text_that_holds_no_data_is_not_exposed_by_a_call():
    """51.4's total_energy is called on the child's positions too: that does not make what it computed
    from the test's own values the child's."""
    helpers = "def e(p):\n    return np.sum(p ** 2)\nx = np.ones(3)\nstart = e(x)\ny = f(x)\nend = e(y)\n"
    assert leaves_of(helpers + "assert np.isclose(end, start)") == []  # end = e(y) runs in the parent
    plan = split.split_step([helpers + "assert np.isclose(end, start)"], "9.9")
    [mixed] = [m for m in plan.tests[0].parent if isinstance(m, split.MixedStatement)]
    assert (mixed.expression, [leaf.source for leaf in mixed.leaves]) == ("end = e(_agentbench_leaf(1))", ["y"])
    # a default that can change in place is data: the call may have stored the child's values in it
    helpers = "def e(p, seen=[]):\n    return np.sum(p ** 2)\nx = np.ones(3)\nstart = e(x)\ny = f(x)\nend = e(y)\n"
    assert leaves_of(helpers + "assert np.isclose(end, start)") == ["end", "start"]


def stream(*frames) -> bytes:
    return b"".join(codec.encode(frame) for frame in frames)


def test_a_note_is_never_part_of_the_verdict_and_names_only_watched_inputs():
    plan = split.split_step(["x = np.ones(2)\ny = f(x)\nassert np.allclose(y, 2 * x)"], "9.9")
    assert plan.tests[0].watched == (("x",),)
    passing = [("t", 1), ("v", 1, 1, 1, np.full(2, 2.0)), ("a", 1, 1), ("z", 1)]
    assert verdict.evaluate(plan, stream(*passing), [None]).inputs_mutated == ()
    outcome = verdict.evaluate(plan, stream(*passing[:1], ("m", 1, "x"), *passing[1:]), [None])
    assert outcome.passed and outcome.inputs_mutated == ("x",)
    failing = [("t", 1), ("m", 1, "x"), ("v", 1, 1, 1, np.zeros(2)), ("a", 1, 1), ("z", 1)]
    outcome = verdict.evaluate(plan, stream(*failing), [None])
    assert (outcome.passed, outcome.failure.kind, outcome.inputs_mutated) == (False, "assertion", ("x",))
    for bad in (("m", 1, "y"), ("m", 1, 3), ("m", 2, "x")):
        outcome = verdict.evaluate(plan, stream(*passing[:1], bad, *passing[1:]), [None])
        assert outcome.failure.kind == "protocol", outcome
    twice = verdict.evaluate(plan, stream(*passing[:1], ("m", 1, "x"), ("m", 1, "x"), *passing[1:]), [None])
    assert twice.failure.kind == "protocol" and "no such input to note" in twice.message
