"""Known upstream defects of SciCode and CORE-Bench: each claim of the "Known upstream defects" sections of
docs/scicode.md and docs/corebench.md, checked.

Data claims walk the staged upstream files; behaviour claims run the plugin (or the plain-Python scorer)
on the smallest input that shows the defect, so each test fails if this project ever starts to share it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_agentbench.benchmarks.corebench.dataset import load_split
from pytest_agentbench.benchmarks.corebench.scorer import load_submission, score_report
from pytest_agentbench.benchmarks.scicode import dataset
from pytest_agentbench.benchmarks.scicode.extract import extract_code, function_name_of
from pytest_agentbench.benchmarks.scicode.locate import TargetTable
from pytest_agentbench.benchmarks.scicode.prompts import build_prompt, load_templates
from pytest_agentbench.benchmarks.scicode.run import RunSettings, SciCodeRun
from pytest_agentbench.core.run_options import RUN_OPTIONS
from pytest_agentbench.sandbox.limits import Limits

from helpers.bench_runs import SHARED_DATA, read_jsonl, run_dirs
from helpers.fake_openai import FakeOpenAI
from helpers.scicode_builders import CLOSE, MODEL_CONFTEST, problem, step

SCICODE = SHARED_DATA / "scicode"
# What docs/scicode.md's "Known upstream defects" lists; the data walks below must find exactly these.
SIMPS_USERS = {"2": "required_dependencies", "28": "required_dependencies", "57.3": "step_description_prompt"}
CLASS_STEPS = {
    "13.6": "Maxwell",
    "30.1": "Slater",
    "30.2": "Jastrow",
    "30.3": "MultiplyWF",
    "46.1": "Slater",
    "46.2": "Hamiltonian",
    "62.1": "EnlargedBlock",
    "68.1": "Slater",
    "68.2": "Jastrow",
    "68.3": "MultiplyWF",
    "68.4": "Hamiltonian",
}
# upstream's extract_function_name: `def` first, then `class`, anywhere in the header
UPSTREAM_DEF, UPSTREAM_CLASS = re.compile(r"\bdef\s+(\w+)\s*\("), re.compile(r"\bclass\s+(\w+)\s*\(")
LIST_CAPSULE = "capsule-0921079"


def all_problems() -> list[dict]:
    return [*dataset.read_jsonl(SCICODE / "problems_dev.jsonl"), *dataset.read_jsonl(SCICODE / "problems_test.jsonl")]


def all_steps() -> list[dict]:
    return [s for p in all_problems() for s in p["sub_steps"]]


def upstream_function_name(header: str) -> str | None:
    match = UPSTREAM_DEF.search(header) or UPSTREAM_CLASS.search(header)
    return match.group(1) if match else None


# ---- SciCode#2: scipy.integrate.simps is gone from SciPy >= 1.14 --------------------------------------


def test_the_data_calls_simps_exactly_where_the_page_says():
    found = {}
    for p in all_problems():
        if "simps" in p["required_dependencies"]:
            found[p["problem_id"]] = "required_dependencies"
        for s in p["sub_steps"]:
            for field, text in s.items():
                if isinstance(text, str) and "simps" in text:
                    found[s["step_number"]] = field
    assert found == SIMPS_USERS


@pytest.mark.e2e
def test_a_step_importing_simps_passes_with_ground_truth_on_a_scipy_without_it(pytester, custom_scicode):
    import scipy.integrate  # why: SciPy is slow to import at collection; pytester has it loaded (in_process_imports)

    assert not hasattr(scipy.integrate, "simps"), "this SciPy still has simps: the shim is not exercised"
    samples = [1.0, 2.0, 4.0, 8.0]  # an even count: the case where old and new Simpson rules differ
    deps = "import numpy as np\nfrom scipy.integrate import simps"
    problems = [
        problem(
            "9",
            [
                step(
                    "9.1",
                    "def area(y, dx):\n    return simps(np.array(y), dx=dx)",
                    [CLOSE.format(call=f"area({samples}, 0.5)")],
                    header="def area(y, dx):",
                )
            ],
            deps=deps,
        )
    ]
    expected = float(scipy.integrate.simpson(samples, dx=0.5))
    custom_scicode.write(problems, {"9.1": [expected]})
    pytester.makeconftest(MODEL_CONFTEST)
    result = custom_scicode("--bench-timeout=60")
    [record] = read_jsonl(run_dirs(pytester.path)[0] / "steps.jsonl")
    assert record["status"] == "pass", record
    assert result.ret == 0


# ---- SciCode#49/#59/#61: class answers reduced to `__init__` -----------------------------------------


def test_class_steps_are_the_ones_the_page_lists_and_are_named_by_their_class():
    class_steps = {
        s["step_number"]: s["function_header"] for s in all_steps() if s["function_header"].lstrip().startswith("class")
    }
    assert set(class_steps) == set(CLASS_STEPS)
    for number, header in class_steps.items():
        assert upstream_function_name(header) == "__init__", number  # the defect, as upstream has it
        assert function_name_of(header) == CLASS_STEPS[number], number
    # every other header keeps the name upstream finds
    for s in all_steps():
        if s["step_number"] not in CLASS_STEPS:
            assert function_name_of(s["function_header"]) == upstream_function_name(s["function_header"])


COUNTER = """class Counter:
    def __init__(self, start):
        self.value = start

    def incr(self):
        self.value += 1
        return self.value
"""
COUNTER_HEADER = 'class Counter:\n    """A counter. env: class Block"""\n    def __init__(self, start):'
DOUBLE = "def double_incr(start):\n    return 2 * Counter(start).incr()"


@pytest.mark.e2e
@pytest.mark.slow
def test_a_class_answer_is_chosen_and_kept_whole_for_the_next_step(pytester, custom_scicode):
    """The reply shows a usage example before the class: choosing by `__init__` takes the example."""
    problems = [
        problem(
            "5",
            [
                step("5.1", COUNTER, [CLOSE.format(call="Counter(2).incr()")], header=COUNTER_HEADER),
                step("5.2", DOUBLE, [CLOSE.format(call="double_incr(4)")], header="def double_incr(start):"),
            ],
        )
    ]
    custom_scicode.write(problems, {"5.1": [3], "5.2": [10]})
    class_reply = f"Usage:\n```python\nc = Counter(2)\nprint(c.incr())\n```\nThe class:\n```python\n{COUNTER}```\n"
    assert extract_code(class_reply, upstream_function_name(COUNTER_HEADER)).startswith("c = Counter(2)")

    def answer(body: dict) -> dict:
        prompt = json.dumps(body["messages"])
        return {"text": f"```python\n{DOUBLE}\n```" if "def double_incr" in prompt else class_reply}

    with FakeOpenAI() as server:
        for _ in range(4):
            server.reply_with(answer)
        result = custom_scicode("--bench-mode=naive", "--bench-timeout=60", model="m", server=server)
        second = [r for r in server.requests if "def double_incr" in json.dumps(r["body"]["messages"])]
    records = {r["id"]: r for r in read_jsonl(run_dirs(pytester.path)[0] / "steps.jsonl")}
    assert records["5.1"]["status"] == "pass", records["5.1"]
    assert records["5.2"]["status"] == "pass", records["5.2"]
    assert result.ret == 0
    # the next step's prompt carries the whole class, its other methods included
    assert second and "def incr(self)" in json.dumps(second[0]["body"]["messages"])


def test_prefilled_code_is_given_to_later_steps_verbatim_both_classes_of_62_1():
    prefilled = dataset.load_prefilled(SCICODE)
    text = (SCICODE / "62.1.txt").read_text()
    assert re.search(r"^class Block\b", text, re.M) and re.search(r"^class EnlargedBlock\b", text, re.M)
    run = SciCodeRun(
        RunSettings(targets=TargetTable.file(Path("/nonexistent.h5")), prefilled=prefilled),
        solver=None,
        env=None,
        limits=Limits(timeout=1),
    )
    for number in ("13.6", "62.1", "76.3"):
        pid = number.split(".")[0]
        [prob] = [p for p in all_problems() if p["problem_id"] == pid]
        index = [s["step_number"] for s in prob["sub_steps"]].index(number)
        code = run.code_of(prob, index)
        assert code == (SCICODE / f"{number}.txt").read_text()
        if index + 1 < len(prob["sub_steps"]):
            earlier = [run.code_of(prob, j) if j == index else "" for j in range(index + 1)]
            assert code.strip() in build_prompt(
                prob, index + 1, earlier, with_background=True, templates=load_templates(SHARED_DATA)
            )


# ---- SciCode#43: ground truth that fails the official targets ----------------------------------------


@pytest.mark.e2e
@pytest.mark.slow
def test_ground_truth_of_78_3_passes_on_targets_rebuilt_from_it(pytester, bench):
    result = bench("--bench=scicode", "--bench-split=validation", "--model=oracle", "--bench-ids=78.3")
    records = read_jsonl(run_dirs(pytester.path)[0] / "steps.jsonl")
    assert [(r["id"], r["status"]) for r in records] == [("78.3", "pass")], records
    assert "rebuilt" in (run_dirs(pytester.path)[0] / "summary.md").read_text()
    assert result.ret == 0


# ---- the per-step time limit --------------------------------------------------------------------------


def test_the_default_step_time_limit_is_upstreams_1800_seconds():
    [timeout] = [o for o in RUN_OPTIONS if o.name == "timeout"]
    assert timeout.default == 1800.0


# ---- siegelz/core-bench#40: list answers always marked wrong --------------------------------------------


def test_the_list_answer_of_capsule_0921079_is_judged_by_its_value():
    [task] = [t for t in load_split(SHARED_DATA, "test") if t["capsule_id"] == LIST_CAPSULE]
    lists = {q: v for q, v in task["results"][0].items() if isinstance(v, list)}
    assert len(lists) == 1
    [(question, expected)] = lists.items()
    others = {q: v for q, v in task["results"][0].items() if q != question}
    right = score_report(task["results"], {**others, question: list(expected)})
    wrong = score_report(task["results"], {**others, question: list(reversed(expected))})
    verdict = {v.question: v.correct for v in right.verdicts}
    assert verdict[question] is True
    assert {v.question: v.correct for v in wrong.verdicts}[question] is False


# ---- princeton-pli/hal-harness#31: a JSON parse error zeroed every capsule -----------------------------


def test_an_unparseable_report_fails_its_own_capsule_only(tmp_path):
    [first, second] = load_split(SHARED_DATA, "train")[:2]
    broken, good = tmp_path / "broken", tmp_path / "good"
    broken.mkdir(), good.mkdir()
    (broken / "report.json").write_text("")  # upstream's error: "Expecting value: line 1 column 1 (char 0)"
    (good / "report.json").write_text(json.dumps(second["results"][0]))
    bad = load_submission(broken)
    assert bad.report_status == "invalid" and "not valid JSON" in bad.warning
    assert not score_report(first["results"], bad.report).all_correct
    assert score_report(second["results"], load_submission(good).report).all_correct
