"""CORE-Bench scoring rules (upstream's verdicts), finding the submission, and whole items."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from pytest_agentbench.benchmarks.base import RunSpec
from pytest_agentbench.benchmarks.corebench import bench as corebench
from pytest_agentbench.benchmarks.corebench import capsules
from pytest_agentbench.benchmarks.corebench.scorer import (
    load_submission,
    normalize_reported,
    prediction_interval,
    question_totals,
    score_report,
)
from pytest_agentbench.core.records import Record

from helpers.bench_runs import SHARED_DATA  # honours $AGENTBENCH_DATA_DIR
from helpers.capsule_factory import CapsuleServer, build_capsule_archive, corebench_options

DATA = SHARED_DATA

ACC = "Report the test accuracy of the model."
LOSS = "Report the final training loss."
OPT = "Which optimizer was used?"
LST = "Report a Python list of the three thresholds."
FIG = "From fig 2, report the highest F1 score."
FIG_CAPITAL = "From Figure 3, report the number of epochs."  # no lowercase 'fig': a written question

# three reference runs; ACC: mean 2, s 1; LOSS: identical runs (s = 0)
RUNS = [
    {ACC: 1.0, LOSS: 0.5, OPT: "Adam", LST: [0.1, 0.05, 0.01], FIG: 10, FIG_CAPITAL: 20},
    {ACC: 2.0, LOSS: 0.5, OPT: "Adam", LST: [0.1, 0.05, 0.01], FIG: 12, FIG_CAPITAL: 20},
    {ACC: 3.0, LOSS: 0.5, OPT: "Adam", LST: [0.1, 0.05, 0.01], FIG: 17, FIG_CAPITAL: 20},
]
GOOD = {ACC: 2.0, LOSS: 0.5, OPT: "adam", LST: [0.1, 0.05, 0.01], FIG: 13, FIG_CAPITAL: 20}


def verdicts(score):
    return {v.question: v for v in score.verdicts}


# --------------------------------------------------------------------------- intervals


def test_half_width_for_three_runs_is_4_968_s():
    # t(0.975, 2) = 4.3027; * sqrt(1 + 1/3) = 4.9683
    low, high = prediction_interval([1.0, 2.0, 3.0])  # mean 2, s = 1
    assert (high - low) / 2 == pytest.approx(4.968, abs=5e-4)
    assert (low, high) == pytest.approx((2 - 4.96828, 2 + 4.96828), abs=1e-5)
    # FIG runs 10, 12, 17: mean 13, s = sqrt(((-3)^2 + (-1)^2 + 4^2) / 2) = sqrt(13)
    low, high = prediction_interval([10, 12, 17])
    assert (high - low) / 2 == pytest.approx(4.968 * math.sqrt(13), rel=1e-4)
    assert (low + high) / 2 == pytest.approx(13)


def test_numeric_bounds_are_inclusive():
    low, high = prediction_interval([1.0, 2.0, 3.0])
    for value, correct in [
        (high, True),
        (low, True),
        (np.nextafter(high, math.inf), False),
        (np.nextafter(low, -math.inf), False),
        (6.9, True),
        (7.0, False),
        (-2.9, True),
    ]:
        score = score_report(RUNS, {ACC: float(value)})
        assert verdicts(score)[ACC].correct is correct, value
    assert verdicts(score)[ACC].expected == pytest.approx([low, high])


def test_identical_runs_need_the_exact_value():
    assert verdicts(score_report(RUNS, {LOSS: 0.5}))[LOSS].correct
    assert not verdicts(score_report(RUNS, {LOSS: 0.5000001}))[LOSS].correct


def test_all_correct_report_passes_and_counts_figure_questions():
    score = score_report(RUNS, GOOD)
    assert score.all_correct
    assert (score.total_written, score.total_figure) == (5, 1)  # "Figure 3" is written: 'fig' is case-sensitive
    assert (score.correct_written, score.correct_figure) == (5, 1)
    assert question_totals(RUNS) == (5, 1)


# --------------------------------------------------------------------------- value coercion


@pytest.mark.parametrize(
    "value, normalized",
    [
        ("95%", 95.0),
        ("2.5", 2.5),
        (" 3 ", 3.0),
        ("1e-3", 0.001),
        ("12.5 %", 12.5),
        ("abc%", "abc"),
        ("adam", "adam"),
        (4, 4),
        (None, None),
        ([1], [1]),
    ],
)
def test_normalize_reported(value, normalized):
    assert normalize_reported(value) == normalized


def test_percent_and_number_strings_score_as_numbers():
    score = score_report(RUNS, {ACC: "2.5%", FIG: "14", LOSS: "0.5"})
    assert verdicts(score)[ACC].correct and verdicts(score)[FIG].correct and verdicts(score)[LOSS].correct
    assert verdicts(score)[ACC].submitted == "2.5%"  # the record keeps what the agent wrote


def test_string_answers_case_insensitive_without_stripping():
    assert verdicts(score_report(RUNS, {OPT: "ADAM"}))[OPT].correct
    assert not verdicts(score_report(RUNS, {OPT: "Adam "}))[OPT].correct  # trailing space: wrong, as upstream
    assert not verdicts(score_report(RUNS, {OPT: "SGD"}))[OPT].correct


def test_numeric_looking_string_answer_is_compared_after_float_conversion():
    runs = [{"Which seed?": "7"}] * 3
    # upstream turns "7" into 7.0 first, and "7.0" != "7": a quirk kept for identical verdicts
    assert not score_report(runs, {"Which seed?": "7"}).all_correct
    assert score_report(runs, {"Which seed?": "7"}).verdicts[0].kind == "string"


def test_list_answers_need_exact_equality():
    assert verdicts(score_report(RUNS, {LST: [0.1, 0.05, 0.01]}))[LST].correct
    assert not verdicts(score_report(RUNS, {LST: "[0.1, 0.05, 0.01]"}))[LST].correct  # list as a string
    assert not verdicts(score_report(RUNS, {LST: [0.01, 0.05, 0.1]}))[LST].correct
    assert not verdicts(score_report(RUNS, {LST: [0.1, 0.05]}))[LST].correct


def test_missing_and_extra_keys():
    report = {k: v for k, v in GOOD.items() if k != OPT}
    report["Some extra question?"] = "ignored"
    score = score_report(RUNS, report)
    v = verdicts(score)
    assert not v[OPT].correct and v[OPT].note == "missing" and not v[OPT].answered
    assert all(v[q].correct for q in GOOD if q != OPT)
    assert "Some extra question?" not in v
    assert not score.all_correct
    assert (score.correct_written, score.total_written) == (4, 5)


def test_figure_question_wrong_fails_the_capsule():
    score = score_report(RUNS, {**GOOD, FIG: 1000})
    assert score.correct_written == score.total_written and score.correct_figure == 0
    assert not score.all_correct


def test_empty_report_scores_nothing():
    score = score_report(RUNS, {})
    assert not score.all_correct and score.correct_written == 0 and score.correct_figure == 0
    assert score_report(RUNS, None).correct_written == 0


# --------------------------------------------------------------------------- incomparable values


@pytest.mark.parametrize("bad", ["not reported", None, {"value": 2}, [1.0, 2.0]])
def test_incomparable_value_fails_only_its_question_by_default(bad):
    before = score_report(RUNS, {ACC: bad, FIG: 13, OPT: "adam"})  # bad value first
    after = score_report(RUNS, {FIG: 13, OPT: "adam", ACC: bad})  # bad value last
    for score in (before, after):
        v = verdicts(score)
        assert not v[ACC].correct and "cannot be compared" in v[ACC].note
        assert v[FIG].correct and v[OPT].correct
        assert score.aborted_at is None


def test_upstream_abort_stops_at_the_first_incomparable_value():
    # bad value before good ones: nothing after it counts
    score = score_report(RUNS, {OPT: "adam", ACC: "n/a", FIG: 13, LST: [0.1, 0.05, 0.01]}, upstream_abort=True)
    v = verdicts(score)
    assert score.aborted_at == ACC
    assert v[OPT].correct and not v[ACC].correct
    assert not v[FIG].correct and not v[LST].correct and "not scored" in v[FIG].note
    assert (score.correct_written, score.correct_figure) == (1, 0)
    # bad value after the good ones: those keep their credit
    score = score_report(RUNS, {OPT: "adam", FIG: 13, LST: [0.1, 0.05, 0.01], ACC: "n/a"}, upstream_abort=True)
    assert (score.correct_written, score.correct_figure) == (2, 1)


def test_one_number_list_compares_like_upstream_numpy_broadcast():
    assert verdicts(score_report(RUNS, {ACC: [2.0]}))[ACC].correct
    assert not verdicts(score_report(RUNS, {ACC: [99.0]}))[ACC].correct


# --------------------------------------------------------------------------- finding the submission


def _write(path: Path, content) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content))


def test_report_at_root_wins(tmp_path):
    _write(tmp_path / "capsule-1" / "report.json", {"a": 1})
    _write(tmp_path / "report.json", {"a": 2})
    sub = load_submission(tmp_path, final_answer={"a": 3})
    assert (sub.report, sub.source, sub.warning) == ({"a": 2}, "report.json", None)


def test_nested_report_first_in_sorted_walk(tmp_path):
    _write(tmp_path / "capsule-1" / "results" / "report.json", {"a": "results"})
    _write(tmp_path / "capsule-1" / "code" / "report.json", {"a": "code"})
    _write(tmp_path / "capsule-1" / "zz" / "deeper" / "report.json", {"a": "deep"})
    sub = load_submission(tmp_path, final_answer={"a": "final"})
    assert sub.report == {"a": "code"} and sub.source == "capsule-1/code/report.json"


def test_final_answer_fallback(tmp_path):
    assert load_submission(tmp_path, {"a": 1}).report == {"a": 1}
    sub = load_submission(tmp_path, '{"a": 2}')
    assert (sub.report, sub.source, sub.warning) == ({"a": 2}, "final_answer", None)
    assert load_submission(tmp_path, '```json\n{"a": 3}\n```').report == {"a": 3}
    assert load_submission(tmp_path, 'Here is my report: {"a": 4} Done.').report == {"a": 4}
    none = load_submission(tmp_path, None)
    assert none.report == {} and none.source == "none" and "no report.json" in none.warning


@pytest.mark.parametrize(
    "content, fragment",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "not a JSON object (got list)"),
        ('"text"', "got str"),
    ],
)
def test_malformed_report_is_an_empty_submission_with_warning(tmp_path, content, fragment):
    _write(tmp_path / "report.json", content)
    sub = load_submission(tmp_path, final_answer={"a": 1})  # report.json wins even when broken
    assert sub.report == {} and fragment in sub.warning and sub.source == "report.json"


def test_final_answer_without_object(tmp_path):
    sub = load_submission(tmp_path, "I could not finish.")
    assert sub.report == {} and "no JSON object" in sub.warning
    assert "got list" in load_submission(tmp_path, [1, 2]).warning


def test_report_symlinked_outside_workspace_is_ignored(tmp_path):
    outside = tmp_path / "secret.json"
    _write(outside, {"a": "secret"})
    workspace = tmp_path / "ws"
    workspace.mkdir()
    os.symlink(outside, workspace / "report.json")
    assert load_submission(workspace, {"a": "final"}).report == {"a": "final"}


def test_a_report_swapped_after_it_was_found_is_read_only_as_a_regular_file(tmp_path):
    """The agent owns the workspace: between find_report and the read it could put a link to a host file, a
    FIFO (a read that never ends) or an endless device there. Only a regular file itself is read, and never
    more than the cap."""
    from pytest_agentbench.benchmarks.corebench.scorer import MAX_REPORT_BYTES, read_report

    outside = tmp_path / "secret.json"
    _write(outside, {"a": "secret"})
    swapped = tmp_path / "link.json"
    os.symlink(outside, swapped)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    device = tmp_path / "zero.json"
    os.symlink("/dev/zero", device)
    for path in (swapped, fifo, device):
        submission = read_report(path, path.name)
        assert submission.report == {} and submission.report_status == "invalid", (path, submission)
        assert "cannot be read" in submission.warning, submission.warning
    big = tmp_path / "big.json"
    big.write_text(" " * (MAX_REPORT_BYTES + 10) + "{}")
    assert read_report(big, "big.json").report_status == "too large"
    assert read_report(outside, "secret.json").report == {"a": "secret"}  # an ordinary file reads as before


# --------------------------------------------------------------------------- whole items (open_run + run_sample)

CID = "capsule-7038571"


class Oracle:
    is_oracle = True


class Agent:
    """A stand-in agent: writes what it is given and records the prompt and workspace it saw."""

    name = "scripted"

    def __init__(self, report=None, final=None, error=None):
        self.report, self.final, self.error, self.seen = report, final, error, {}

    def run_agent(self, workspace, prompt, sample, ctx):
        self.seen = {
            "prompt": prompt,
            "files": sorted(p.relative_to(workspace).as_posix() for p in workspace.rglob("*") if p.is_file()),
        }
        if self.error:
            raise self.error
        if self.report is not None:
            (workspace / "results").mkdir(parents=True, exist_ok=True)
            (workspace / "results" / "report.json").write_text(json.dumps(self.report))
        return self.final


@pytest.fixture
def item(tmp_path):
    """(a train task's Sample, a capsules dir holding its synthetic capsule)."""
    tasks = corebench.benchmark.load_tasks(corebench_options(DATA, tmp_path / "cache"), "train")
    sample = next(t.samples[0] for t in tasks if t.id == CID)
    staged = tmp_path / "capsules"
    build_capsule_archive(staged, CID, gpu=True)
    return sample, staged


def _run(tmp_path, sample, model, **cli):
    """Run one capsule as the plugin does: options resolved, configured once, a run opened, one sample run."""
    bench = corebench.benchmark
    opts = corebench_options(DATA, tmp_path / "cache", cli=cli)
    spec = RunSpec(
        settings=bench.configure(opts, sample.split),
        options=opts,
        tasks=(),
        selected=frozenset({sample.id}),
        run_dir=tmp_path / "run",
        data_dir=DATA,
        cache_dir=tmp_path / "cache",
    )
    return bench.open_run(spec, model, None).run_sample(sample)


def test_oracle_passes_and_workspace_is_removed(tmp_path, item, monkeypatch):
    sample, staged = item
    # a temp folder of this test's own, so capsules of tests running beside it (xdist) are not counted
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    record = _run(tmp_path, sample, Oracle(), capsules_dir=str(staged))
    assert record["status"] == "pass" and record["message"] == ""
    assert record["benchmark"] == "core-bench" and record["id"] == CID and record["split"] == "train"
    assert record["gpu_required"] is True and record["difficulty"] == "hard"
    assert record["report_source"] == "report.json"
    assert record["correct_written"] == record["total_written"] == 1
    assert not list(Path(tempfile.gettempdir()).glob(f"corebench-{CID}-*"))
    saved = tmp_path / "run" / "artifacts" / CID
    assert "Task: codeocean_hard" in (saved / "prompt.txt").read_text()
    assert isinstance(record, Record)  # typed where it is made (records.sample_record)
    json.dumps(record.to_json())  # its JSON object is plain JSON


def test_agent_sees_hard_workspace_and_nested_report_scores(tmp_path, item):
    sample, staged = item
    answer = sample.data["results"][1]
    agent = Agent(report=answer)
    record = _run(tmp_path, sample, agent, capsules_dir=str(staged), hints=False)
    assert record["status"] == "pass", record["message"]
    assert record["report_source"] == "results/report.json"
    assert record["report_path"] == "/capsule/environment/results/report.json"
    assert (record["report_status"], record["submission_source"]) == ("found", "report")
    assert "REPRODUCING.md" not in agent.seen["files"] and "code/main.py" in agent.seen["files"]
    assert '["Report the average AUC score' in agent.seen["prompt"] and "dict_keys" not in agent.seen["prompt"]
    assert sample.data["task_prompt"] in agent.seen["prompt"] and "Hints:" not in agent.seen["prompt"]


def test_agent_final_answer_and_wrong_answers(tmp_path, item):
    sample, staged = item
    question = next(iter(sample.data["results"][0]))
    record = _run(
        tmp_path, sample, Agent(final=json.dumps({question: "0.1"})), capsules_dir=str(staged), difficulty="easy"
    )
    assert record["status"] == "fail" and record["report_source"] == "final_answer"
    assert record["message"].startswith("0/1 questions correct")
    assert record["questions"][0]["submitted"] == "0.1"


def test_malformed_report_warns_and_fails(tmp_path, item):
    sample, staged = item
    with pytest.warns(UserWarning, match="not a JSON object"):
        record = _run(tmp_path, sample, Agent(report=[1, 2]), capsules_dir=str(staged))
    assert record["status"] == "fail" and "not a JSON object" in record["report_warning"]


def test_model_without_agent_and_failing_agent(tmp_path, item):
    sample, staged = item
    record = _run(tmp_path, sample, SimpleNamespace(name="gpt-x"), capsules_dir=str(staged))
    assert record["status"] == "error" and record["message"] == "model gpt-x has no CORE-Bench agent yet"
    record = _run(tmp_path, sample, Agent(error=TimeoutError("API down")), capsules_dir=str(staged))
    assert record["status"] == "model_error" and "API down" in record["message"]


def test_unavailable_capsule_is_env_error(tmp_path, item, monkeypatch):
    sample, _ = item
    empty = tmp_path / "empty"
    empty.mkdir()
    with CapsuleServer(tmp_path / "www") as server:  # serves nothing: 404
        monkeypatch.setenv(capsules.CAPSULE_URL_ENV, server.url)
        record = _run(tmp_path, sample, Oracle(), capsules_dir=str(empty))
    assert record["status"] == "env_error"
    assert f"{server.url}/{CID}.tar.gz" in record["message"] and str(empty) in record["message"]
    assert record["total_written"] == 1  # still counted in the question totals


def test_summarize_metrics_and_markdown(tmp_path, item):
    sample, staged = item
    good = _run(tmp_path, sample, Oracle(), capsules_dir=str(staged))
    bad = {
        **score_report(RUNS, {**GOOD, FIG: 1000}).to_record(),
        "id": "capsule-2",
        "status": "fail",
        "scored": True,
        "message": "x",
    }
    err = {
        "id": "capsule-3",
        "status": "env_error",
        "scored": True,
        "message": "no capsule",
        "total_written": 2,
        "total_figure": 1,
        "correct_written": 0,
        "correct_figure": 0,
    }
    out = corebench.benchmark.summarize([good, bad, err], {"split": "train", "difficulty": "hard", "hints": True})
    m = out["metrics"]
    assert m["capsule_accuracy"] == pytest.approx(1 / 3)
    assert (m["correct_written_tasks"], m["written_tasks"]) == (2, 3)
    assert (m["correct_figure_tasks"], m["figure_tasks"]) == (0, 2)
    assert (m["correct_questions"], m["questions"]) == (1 + 5, 1 + 6 + 3)
    assert m["status_pass"] == 1 and m["status_fail"] == 1 and m["status_env_error"] == 1
    assert any("capsules correct" in line and "1/3" in line for line in out["terminal"])
    md = out["markdown"]
    assert "### capsule-2: fail" in md and "| From fig 2, report the highest F1 score. | numeric, figure | 1000 |" in md
    assert "[-2.96828, 6.96828]" in md  # ACC's interval
