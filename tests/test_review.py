"""Human review of CORE-Bench verdicts (--bench-review, --bench-set gate_score): runs as a user starts them.

A scripted client (a user's own ``run_agent``) answers two train capsules with their reference answers, except
one number of capsule-0201225, for which it reports hostile text: the automatic grader marks that question wrong.
A review file then says it is correct.
"""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path

import pytest
import yaml

from pytest_agentbench.benchmarks.corebench import capsules, dataset
from pytest_agentbench.benchmarks.corebench.review import load_review

from helpers.bench_runs import SHARED_DATA, read_jsonl
from helpers.capabilities import needs
from helpers.capsule_factory import build_capsule_archive
from helpers.cdp import Chromium

HOSTILE = "</textarea><script>alert(1)</script>\x1b[31m\n# not: a key"
WRONG, RIGHT = "capsule-0201225", "capsule-7038571"  # 8 questions (one answered wrong), 1 question
OTHER = "capsule-5367566"  # a train capsule outside the runs' selection

SCRIPTED = f"""
import pytest

class Scripted:
    name = "scripted"

    def run_agent(self, workspace, prompt, sample, ctx):
        answers = dict(sample.data["results"][0])
        if sample.id == {WRONG!r}:
            first = next(iter(answers))
            answers[first] = {HOSTILE!r}  # text for a number: wrong, and hostile in the page and the stub
        return answers


@pytest.fixture(scope="session")
def bench_model():
    return Scripted()
"""


def train_task(capsule: str) -> dict:
    return next(t for t in dataset.load_split(SHARED_DATA, "train") if t["capsule_id"] == capsule)


def wrong_question() -> str:
    return next(iter(train_task(WRONG)["results"][0]))


def review_yaml(*entries: dict) -> str:
    return yaml.safe_dump({"overrides": list(entries)}, sort_keys=False, allow_unicode=True)


def flip(capsule: str = WRONG, question: str | None = None, verdict: str = "correct") -> dict:
    return {
        "capsule": capsule,
        "question": question or wrong_question(),
        "verdict": verdict,
        "reviewer": "ada",
        "reason": "the value is the paper's; the reference runs are off",
    }


@pytest.fixture
def core_run(pytester, tmp_path, monkeypatch):
    """Run the scripted client on WRONG and RIGHT: ``run(*args)`` -> (result, run folder)."""
    staged = tmp_path / "staged"
    for capsule in (WRONG, RIGHT):
        build_capsule_archive(staged, capsule)
    monkeypatch.setenv("AGENTBENCH_DATA_DIR", str(SHARED_DATA))
    monkeypatch.setenv(capsules.CAPSULE_URL_ENV, "http://127.0.0.1:9")  # nothing is downloaded
    pytester.makeini("[pytest]\n")
    pytester.makeconftest(SCRIPTED)

    def run(*args: str, run_id: str = "r") -> tuple[pytest.RunResult, Path]:
        result = pytester.runpytest_subprocess(
            "--bench=core-bench",
            "--model=scripted",
            "--bench-set=model_preflight=off",
            "--bench-split=train",
            f"--bench-ids={WRONG},{RIGHT}",
            "--bench-difficulty=easy",
            "--bench-env=host",
            f"--bench-capsules-dir={staged}",
            f"--bench-report-dir={tmp_path / 'reports'}",
            f"--bench-run-id={run_id}",
            "-p",
            "no:cacheprovider",
            *args,
            timeout=600,
        )
        return result, tmp_path / "reports" / "core-bench" / "scripted" / run_id

    return run


def write(tmp_path: Path, text: str, name: str = "review.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.e2e
@pytest.mark.slow
def test_a_review_flips_one_question_and_the_summary_carries_both_scores(core_run, tmp_path):
    review = write(tmp_path, review_yaml(flip()))
    result, run = core_run(f"--bench-review={review}")
    out = result.stdout.str()
    result.assert_outcomes(passed=1, failed=1)  # the items keep their automatic outcome
    result.stdout.fnmatch_lines(
        [
            "*capsules correct:*1/2 (50.0%)*",
            "*reviewed score (*review.yaml: 1 override(s), 1 verdict(s) changed):*",
            "*capsules correct:*2/2 (100.0%)*",
            "*questions correct:*9/9 (100.0%)*",
        ]
    )
    summary = json.loads((run / "summary.json").read_text())
    automatic, reviewed = summary["scores"]["automatic"]["metrics"], summary["scores"]["reviewed"]["metrics"]
    assert automatic == summary["metrics"] and automatic["capsule_accuracy"] == 0.5
    assert automatic["correct_questions"] == 8 and reviewed["correct_questions"] == 9
    assert reviewed["capsule_accuracy"] == 1.0 and summary["scores"]["reviewed"]["changed_items"] == [WRONG]
    assert summary["settings"]["review"] == str(review)
    items = {i["id"]: i for i in summary["items"]}
    assert items[WRONG]["status"] == "fail" and items[WRONG]["reviewed_status"] == "pass"
    # the record keeps the automatic verdict and adds the override with its provenance
    record = {r["id"]: r for r in read_jsonl(run / "records.jsonl")}[WRONG]
    assert record["status"] == "fail" and record["correct_written"] == 7
    question = next(q for q in record["questions"] if q["question"] == wrong_question())
    assert question["correct"] is False
    assert question["review"] == {
        "verdict": "correct",
        "reviewer": "ada",
        "reason": flip()["reason"],
        "file": str(review),
        "line": 2,
    }
    assert record["review"]["status"] == "pass" and record["review"]["correct_written"] == 8
    markdown = (run / "summary.md").read_text()
    assert (
        "### Scores: automatic and reviewed" in markdown
        and "| capsules correct | 1/2 (50.0%) | 2/2 (100.0%) |" in markdown
    )
    assert f"### {WRONG}: fail (reviewed: pass)" in markdown and "→ reviewed correct (ada:" in markdown
    page = (run / "report.html").read_text()
    assert 'class="reviewed"' in page and "Human review" in page
    assert "warning" not in out.split("agentbench: core-bench results")[-1].lower()


@pytest.mark.e2e
@pytest.mark.slow
def test_gates_judge_the_automatic_score_unless_asked_for_the_reviewed_one(core_run, tmp_path):
    review = write(tmp_path, review_yaml(flip()))
    automatic, run = core_run(f"--bench-review={review}", "--bench-fail-under=accuracy=100%", run_id="auto")
    assert automatic.ret == 1, automatic.stdout.str()[-2000:]
    automatic.stdout.fnmatch_lines(["*FAIL --bench-fail-under accuracy=100%: accuracy = 50.0% < 100.0%*"])
    reviewed, run = core_run(
        f"--bench-review={review}",
        "--bench-fail-under=accuracy=100%",
        "--bench-set=gate_score=reviewed",
        run_id="reviewed",
    )
    assert reviewed.ret == 0, reviewed.stdout.str()[-2000:]
    reviewed.stdout.fnmatch_lines(
        ["*PASS --bench-fail-under accuracy=100% [[]reviewed score]: accuracy = 100.0% >= 100.0%*"]
    )
    assert json.loads((run / "summary.json").read_text())["gates_passed"] is True
    # and a reviewed wrong verdict fails the reviewed gate while the automatic one passes
    against = write(
        tmp_path, review_yaml(flip(RIGHT, next(iter(train_task(RIGHT)["results"][0])), "wrong")), "against.yaml"
    )
    judged, _ = core_run(
        f"--bench-review={against}",
        "--bench-fail-under=accuracy=50%",
        "--bench-set=gate_score=reviewed",
        run_id="against",
    )
    assert judged.ret == 1
    judged.stdout.fnmatch_lines(["*FAIL --bench-fail-under accuracy=50% [[]reviewed score]: accuracy = 0.0% < 50.0%*"])


@pytest.mark.e2e
def test_reviewed_gate_without_a_review_is_a_usage_error(core_run):
    result, run = core_run("--bench-set=gate_score=reviewed", "--bench-fail-under=accuracy=50%")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*--bench-set=gate_score=reviewed *--bench-review=FILE.yaml*"])
    assert not run.exists()


@pytest.mark.parametrize(
    "entry, expected",
    [
        (
            flip("capsule-0000000"),
            "*review.yaml:2 (entry 1): capsule 'capsule-0000000' is not in the CORE-Bench train split*",
        ),
        (
            flip(question="Report the AUC at the sample level"),
            "*review.yaml:2 (entry 1): capsule capsule-0201225 has no "
            "question 'Report the AUC at the sample level'*did you mean*",
        ),
    ],
)
@pytest.mark.e2e
@pytest.mark.slow
def test_a_review_naming_what_the_split_lacks_is_exit_4(core_run, tmp_path, entry, expected):
    review = write(tmp_path, review_yaml(entry))
    result, run = core_run(f"--bench-review={review}")
    assert result.ret == 4, result.stdout.str()[-2000:]
    result.stderr.fnmatch_lines([expected])
    assert not run.exists()  # nothing ran


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "overrides:\n  - capsule: capsule-0201225\n    question: x\n",
            "*review.yaml:2 (entry 1): missing verdict, reviewer, reason*",
        ),
        (
            f"overrides:\n  - {json.dumps(flip())}\n  - {json.dumps({**flip(), 'verdict': 'maybe'})}\n",
            "*review.yaml:3 (entry 2): verdict must be correct or wrong, got 'maybe'*",
        ),
        (
            f"overrides:\n  - {json.dumps(flip())}\n\n  - {json.dumps(flip())}\n",
            "*review.yaml:4 (entry 2): *already reviewed at line 2*",
        ),
        ("overrides: [\n", "*review.yaml:2 is not valid YAML*"),
        ("- capsule: capsule-0201225\n", "*review.yaml:1: the file must be a mapping with one key, `overrides:`*"),
    ],
)
@pytest.mark.e2e
@pytest.mark.slow
def test_a_malformed_review_is_exit_4_naming_file_and_line(core_run, tmp_path, text, expected):
    review = write(tmp_path, text)
    result, _ = core_run(f"--bench-review={review}")
    assert result.ret == 4, result.stdout.str()[-2000:]
    result.stderr.fnmatch_lines([expected])


@pytest.mark.e2e
@pytest.mark.slow
def test_an_override_outside_the_selection_is_ignored_with_a_warning(core_run, tmp_path):
    other = next(iter(train_task(OTHER)["results"][0]))
    review = write(tmp_path, review_yaml(flip(), flip(OTHER, other)))
    result, run = core_run(f"--bench-review={review}", "-n", "2")  # records from xdist workers are reviewed too
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            f"*warning: review *review.yaml: 1 override(s) name capsules outside this run's "
            f"selection and are ignored: {OTHER} (*review.yaml:7 (entry 2))*"
        ]
    )
    summary = json.loads((run / "summary.json").read_text())
    assert summary["scores"]["reviewed"]["ignored"] == [{"capsule": OTHER, "question": other, "line": 7}]
    assert summary["scores"]["reviewed"]["metrics"]["capsule_accuracy"] == 1.0  # the other override still applies
    assert any(OTHER in note for note in summary["notes"])
    assert {r["id"]: r.get("review", {}).get("status") for r in read_jsonl(run / "records.jsonl")} == {
        WRONG: "pass",
        RIGHT: None,
    }


@pytest.mark.e2e
@pytest.mark.slow
def test_resuming_a_finished_run_with_a_review_rewrites_its_reports(core_run, tmp_path):
    result, run = core_run()
    result.assert_outcomes(passed=1, failed=1)
    assert "scores" not in json.loads((run / "summary.json").read_text())
    review = write(tmp_path, review_yaml(flip()))
    resumed, _ = core_run(f"--bench-resume={run}", f"--bench-review={review}")
    assert resumed.ret == 1, resumed.stdout.str()[-2000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["scores"]["reviewed"]["metrics"]["capsule_accuracy"] == 1.0
    assert summary["metrics"]["capsule_accuracy"] == 0.5
    records = read_jsonl(run / "records.jsonl")
    assert len(records) == 2  # nothing ran again; the records gained the override
    assert {r["id"]: r.get("review", {}).get("status") for r in records} == {WRONG: "pass", RIGHT: None}


@pytest.mark.e2e
@pytest.mark.slow
def test_the_export_button_yields_a_review_file_that_loads(core_run, tmp_path):
    review = write(tmp_path, review_yaml(flip(RIGHT, next(iter(train_task(RIGHT)["results"][0])), "wrong")))
    result, run = core_run(f"--bench-review={review}")
    assert result.ret == 1
    page_file = run / "report.html"
    needs("chromium")
    with Chromium() as browser:
        page = browser.open(page_file.as_uri())
        assert "Human review" in page.text and "1 override(s), 1 verdict(s) changed" in page.text
        # the overridden question is marked beside its automatic verdict (inside its item's details)
        assert page.evaluate("document.querySelector('span.reviewed').textContent").startswith("reviewed: wrong by ada")
        page.evaluate(
            "document.getElementById('rv-reviewer').value='Grace \"G\" Hopper';"
            "document.getElementById('rv-copy').click();"
        )
        text = page.evaluate("document.getElementById('rv-stub').value")
        href = page.evaluate("document.getElementById('rv-download').href")
        assert page.evaluate("document.scripts.length") == 1
        assert page.errors == []
    assert urllib.parse.unquote(href.split(",", 1)[1]) == text
    assert "alert(1)" in text and "\x1b" not in text  # the reported value, in a comment YAML accepts
    stub = yaml.safe_load(text)
    entries = {(e["capsule"], e["question"]): e for e in stub["overrides"]}
    # the one question marked wrong, ready to be judged, and the override already made
    assert entries[(WRONG, wrong_question())]["reviewer"] == 'Grace "G" Hopper'
    assert entries[(WRONG, wrong_question())]["verdict"] == "wrong"
    assert entries[(RIGHT, next(iter(train_task(RIGHT)["results"][0])))]["reviewer"] == "ada"
    assert len(entries) == 2
    # it is a review file as --bench-review reads it; as exported it changes no verdict
    exported = write(tmp_path, text, "exported.yaml")
    loaded = load_review(exported, dataset.load_split(SHARED_DATA, "train"), "train")
    assert len(loaded.overrides) == 2
    again, run2 = core_run(f"--bench-review={exported}", run_id="again")
    assert again.ret == 1
    scores = json.loads((run2 / "summary.json").read_text())["scores"]
    assert scores["reviewed"]["metrics"]["capsule_accuracy"] == 0.0  # RIGHT judged wrong, WRONG still wrong
    assert scores["automatic"]["metrics"]["capsule_accuracy"] == 0.5


@pytest.mark.e2e
@pytest.mark.slow
def test_a_run_of_several_attempts_carries_the_mean_reviewed_score(core_run, tmp_path):
    review = write(tmp_path, review_yaml(flip()))
    result, run = core_run(
        f"--bench-review={review}",
        "--bench-attempts=2",
        "--bench-fail-under=accuracy=100%",
        "--bench-set=gate_score=reviewed",
    )
    assert result.ret == 0, result.stdout.str()[-2000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["metrics"]["capsule_accuracy"] == 0.5  # the automatic mean over the two attempts
    assert summary["scores"]["reviewed"]["metrics"]["capsule_accuracy"] == 1.0
    assert summary["scores"]["reviewed"]["overrides"] == 2  # one per attempt


def scored_record(capsule: str, wrong: set[str] = frozenset()) -> dict:
    """The record the grader leaves for ``capsule`` when the questions in ``wrong`` were answered wrong."""
    questions = [
        {
            "question": q,
            "kind": "numeric",
            "figure": "fig" in q,
            "answered": True,
            "submitted": 1.0,
            "expected": [0.0, 2.0],
            "correct": q not in wrong,
            "note": None,
        }
        for q in train_task(capsule)["results"][0]
    ]
    written = [q for q in questions if not q["figure"]]
    return {
        "benchmark": "core-bench",
        "id": capsule,
        "task": capsule,
        "split": "train",
        "scored": True,
        "status": "fail" if wrong else "pass",
        "questions": questions,
        "correct_written": sum(q["correct"] for q in written),
        "total_written": len(written),
        "correct_figure": 0,
        "total_figure": len(questions) - len(written),
    }


def test_max_drop_against_a_baseline_reads_the_reviewed_statuses(tmp_path):
    """--bench-max-drop with --bench-set=gate_score=reviewed compares the reviewed item statuses with the baseline's."""
    from pytest_agentbench.benchmarks.corebench import bench as corebench
    from pytest_agentbench.benchmarks.corebench.review import apply_review
    from pytest_agentbench.report.options import GateConfig, parse_thresholds
    from pytest_agentbench.report.summary import build_summary, judge

    settings = {"benchmark": "core-bench", "split": "train", "model": "m", "run_id": "r"}
    baseline = build_summary([scored_record(WRONG), scored_record(RIGHT)], corebench.benchmark, settings)
    review = load_review(write(tmp_path, review_yaml(flip())), dataset.load_split(SHARED_DATA, "train"), "train")
    records = [
        apply_review(scored_record(WRONG, {wrong_question()}), review),
        apply_review(scored_record(RIGHT), review),
    ]
    verdicts = {}
    for score in ("automatic", "reviewed"):
        summary = build_summary(records, corebench.benchmark, {**settings, "review": review.file})
        gates = GateConfig(
            [],
            parse_thresholds(["accuracy=10%"], "--bench-max-drop", corebench.benchmark),
            None,
            tmp_path / "baseline.json",
            False,
            None,
            score=score,
        )
        verdicts[score] = judge(summary, gates, {**baseline, "_path": "baseline"}, 1)
    automatic, reviewed = verdicts["automatic"], verdicts["reviewed"]
    assert [r.ok for r in automatic.gate_results] == [False] and automatic.exit_code == 1
    assert automatic.comparison.flipped[0]["direction"] == "pass -> fail"
    assert [r.ok for r in reviewed.gate_results] == [True] and reviewed.exit_code == 0
    assert reviewed.gate_results[0].gate.endswith("[reviewed score]") and reviewed.comparison.flipped == []
    assert "accuracy 100.0% -> 100.0%" in reviewed.gate_results[0].detail
