"""Score gates and baselines: unit tests on hand-made summaries and on the tiny dataset's records judged in-process,
then one pytester run per option (and per exit code 2 to 5) for the exit codes of docs/gates.md.

The pytester runs use the tiny hand-made SciCode dataset of tests/helpers/scicode_builders.py (3 problems,
5 steps) with a model that answers with the ground truth except for the steps named ``broken``
(a wrong answer) or ``errors`` (a model error), so two runs differ on known steps with the same settings;
helpers/records_kit.py makes the records such a run leaves, for the in-process tests.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_agentbench.core.errors import ConfigError
from pytest_agentbench.core.options import OptionError, Sources, resolve
from pytest_agentbench.report.baseline import baseline_for_run, load_summary, summary_path
from pytest_agentbench.report.compare import compare
from pytest_agentbench.report.declared import Declared
from pytest_agentbench.report.gates import GateResult, decide_exit, evaluate, render_markdown
from pytest_agentbench.report.options import REPORT_OPTIONS, GateConfig, gate_config, parse_fraction
from pytest_agentbench.report.summary import judge, judge_without_items

from helpers.bench_runs import run_dirs
from helpers.records_kit import judged_run, scicode, scicode_gates, scicode_settings, tiny_records
from helpers.scicode_builders import MODEL_CONFTEST, TARGETS, write_dataset
from toybench import Toy as ToyBenchmark


def latest_run(pytester) -> Path:
    return max(run_dirs(pytester.path), key=lambda p: p.stat().st_mtime)


# ---- values -------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,value", [("0.45", 0.45), ("45%", 0.45), ("100%", 1.0), ("0", 0.0)])
def test_gate_values_are_fractions_or_percentages(text, value):
    assert parse_fraction(text, "x") == pytest.approx(value)


@pytest.mark.parametrize(
    "text,needle", [("45", "write 0.45 or 45%"), ("abc", "not a number"), ("-1%", "between 0 and 1")]
)
def test_bad_gate_values_say_how_to_write_them(text, needle):
    with pytest.raises(ConfigError, match=needle):  # the plugin shows it as a usage error
        parse_fraction(text, "--bench-fail-under main")


# ---- the options and the gate configuration, without pytest -------------------------------------
class Toy(ToyBenchmark):
    """The toy benchmark (tests/toybench) with the gates these tests pin: the report layer has never heard of it,
    so gates come from its declarations alone."""

    name = "toy"
    gate_metrics = {"solved": "solved_fraction", "steps": "step_fraction"}
    headlines = {"solved": "task", "steps": "item"}
    free_settings = frozenset({"temperature"})


def report_opts(tmp_path: Path, cli: dict | None = None, ini: dict | None = None):
    return resolve(
        REPORT_OPTIONS, Sources(cli=cli or {}, ini=ini or {}, env={}, invocation_dir=tmp_path, rootdir=tmp_path)
    )


def test_report_options_keep_their_flags_and_ini_keys():
    flags = {o.name: (o.spelling, o.ini) for o in REPORT_OPTIONS}
    assert flags["fail_under"] == ("--bench-fail-under", "agentbench_fail_under")
    assert flags["max_drop"] == ("--bench-max-drop", "agentbench_max_drop")
    assert flags["progress_interval"] == ("--bench-set progress_interval", "agentbench_progress_interval")
    assert all(ini == "agentbench_" + name for name, (_, ini) in flags.items())


def test_gate_config_from_command_line_and_ini(tmp_path):
    opts = report_opts(
        tmp_path,
        cli={"fail_under": ["solved=40%", "steps=0.5,solved_fraction=0.3"]},
        ini={"max_drop": ["steps=5%"], "baseline": "ci/base.json", "significance": "0.05"},
    )
    cfg = gate_config(opts, Toy())
    assert [(t.name, t.metric, t.value, t.text) for t in cfg.fail_under] == [
        ("solved", "solved_fraction", 0.4, "40%"),
        ("steps", "step_fraction", 0.5, "0.5"),
        ("solved_fraction", "solved_fraction", 0.3, "0.3"),
    ]
    assert [(t.metric, t.value) for t in cfg.max_drop] == [("step_fraction", pytest.approx(0.05))]
    assert cfg.baseline == tmp_path / "ci" / "base.json" and cfg.significance == 0.05 and cfg.any_gate
    assert cfg.max_errors is None and not cfg.update_baseline
    assert opts.progress_interval == 15.0


@pytest.mark.parametrize(
    "cli,message",
    [
        (
            {"fail_under": ["accuracy=0.5"]},
            "unknown toy metric 'accuracy' in --bench-fail-under; valid metrics: solved, steps",
        ),
        ({"fail_under": ["solved"]}, "--bench-fail-under takes METRIC=VALUE (e.g. main=0.4), got 'solved'"),
        ({"fail_under": ["solved=40"]}, "--bench-fail-under solved: '40' is above 1"),
        ({"max_drop": ["solved=5%"]}, "--bench-max-drop needs --bench-baseline=PATH (an earlier summary.json)"),
        ({"update_baseline": True}, "--bench-update-baseline needs --bench-baseline=PATH (where to write it)"),
    ],
)
def test_gate_config_errors_name_the_fix(tmp_path, cli, message):
    with pytest.raises(ConfigError) as error:
        gate_config(report_opts(tmp_path, cli=cli), Toy())
    assert message in str(error.value)


@pytest.mark.parametrize(
    "cli,needles",
    [
        ({"max_errors": "-1"}, ["--bench-max-errors", "'-1'"]),
        ({"max_errors": "many"}, ["--bench-max-errors", "'many'"]),
        ({"significance": "1"}, ["--bench-set significance", "a level between 0 and 1", "'1'"]),
        ({"progress_interval": "-2"}, ["--bench-set progress_interval", "'-2'"]),
        ({"resume": "nowhere"}, ["--bench-resume", "'nowhere'", "is not a folder; give the run folder"]),
    ],
)
def test_bad_report_values_name_the_option(tmp_path, cli, needles):
    with pytest.raises(OptionError) as error:
        report_opts(tmp_path, cli=cli)
    assert all(needle in str(error.value) for needle in needles), str(error.value)


# ---- evaluating gates on hand-made summaries ------------------------------------------------------
def toy_summary(statuses: dict[str, str], **metrics: float) -> dict:
    items = [{"id": i, "task": i.split(".")[0], "status": s, "scored": True} for i, s in statuses.items()]
    return {
        "settings": {"benchmark": "toy", "split": "dev", "model": "m"},
        "metrics": metrics,
        "items": items,
        **Declared.of(Toy()).to_summary(),
    }


def gates(tmp_path, **cli) -> GateConfig:
    return gate_config(report_opts(tmp_path, cli=cli), Toy())


def test_fail_under_compares_with_float_tolerance(tmp_path):
    summary = toy_summary({"1.1": "pass"}, solved_fraction=0.4, step_fraction=0.79)
    results = evaluate(gates(tmp_path, fail_under=["solved=40%", "steps=0.8"]), summary, None)
    assert [r.line() for r in results] == [
        "PASS --bench-fail-under solved=40%: solved = 40.0% >= 40.0%",
        "FAIL --bench-fail-under steps=0.8: steps = 79.0% < 80.0%",
    ]


def test_fail_under_a_metric_the_run_lacks_fails(tmp_path):
    [result] = evaluate(gates(tmp_path, fail_under=["steps=0.1"]), toy_summary({}, solved_fraction=1.0), None)
    assert not result.ok and result.detail == "metric steps (step_fraction) is not in this run's summary"


@pytest.mark.parametrize("budget,ok", [("1", True), ("0", False)])
def test_max_errors_counts_scored_infrastructure_errors(tmp_path, budget, ok):
    summary = toy_summary({"1.1": "model_error", "1.2": "fail", "2.1": "timeout"})
    summary["items"].append({"id": "3.1", "task": "3", "status": "env_error", "scored": False})
    [result] = evaluate(gates(tmp_path, max_errors=budget), summary, None)
    assert result.ok is ok
    assert result.detail.startswith("1 item(s) ended in model_error/env_error/error")


def test_max_drop_without_a_baseline_holds_with_the_reason(tmp_path):
    cfg = gates(tmp_path, max_drop=["solved=5%"], baseline="b.json", update_baseline=True)
    [result] = evaluate(cfg, toy_summary({}, solved_fraction=0.1), None, "no comparable baseline yet")
    assert result.ok and result.detail == "no comparable baseline yet"


def drop_pair() -> tuple[dict, dict]:
    """Baseline: 10 tasks of 2 steps, all pass; new run: tasks 1 and 2 lose their second step."""
    ids = [f"{t}.{s}" for t in range(1, 11) for s in (1, 2)]
    a = toy_summary({i: "pass" for i in ids}, solved_fraction=1.0, step_fraction=1.0)
    b = toy_summary({i: "fail" if i in ("1.2", "2.2") else "pass" for i in ids}, solved_fraction=0.8, step_fraction=0.9)
    return a, b


def test_max_drop_beyond_the_limit_fails(tmp_path):
    a, b = drop_pair()
    [result] = evaluate(gates(tmp_path, max_drop=["solved=10%"], baseline="b.json"), b, compare(a, b))
    assert not result.ok
    assert result.line() == ("FAIL --bench-max-drop solved=10%: solved 100.0% -> 80.0% (drop 20.0 pp, limit 10.0 pp)")


def test_max_drop_within_the_limit_holds(tmp_path):
    a, b = drop_pair()
    [result] = evaluate(gates(tmp_path, max_drop=["steps=10%"], baseline="b.json"), b, compare(a, b))
    assert result.ok and "drop 10.0 pp, limit 10.0 pp" in result.detail


def test_max_drop_counts_only_a_significant_drop_in_the_metrics_unit(tmp_path):
    a, b = drop_pair()
    # 10 tasks cannot show a 10-point drop (tests/test_gate_power.py): allowed here, to test significance alone
    cfg = gates(tmp_path, max_drop=["solved=10%"], baseline="b.json", significance="0.05", allow_underpowered=True)
    [result] = evaluate(cfg, b, compare(a, b))
    assert result.ok  # two tasks flipped: p = 0.5 over tasks
    assert result.detail.endswith("not significant (McNemar over tasks p = 0.5 >= 0.05), so not counted")
    cfg = gates(tmp_path, max_drop=["solved=10%"], baseline="b.json", significance="0.6", allow_underpowered=True)
    [result] = evaluate(cfg, b, compare(a, b))
    assert not result.ok and result.detail.endswith("significant (McNemar over tasks p = 0.5 < 0.6)")


def test_a_run_without_a_drop_holds_under_a_gate_too_weak_for_its_limit(tmp_path):
    a, _ = drop_pair()
    cfg = gates(tmp_path, max_drop=["solved=10%"], baseline="b.json", significance="0.05")
    [result] = evaluate(cfg, a, compare(a, a))  # compared with its own identical answers
    assert result.ok, result.line()
    assert result.detail.startswith("solved 100.0% -> 100.0% (drop 0.0 pp, limit 10.0 pp); note: this gate cannot")
    assert (
        "over 10 tasks" in result.detail
        and "select more tasks (the whole split) or add --bench-attempts" in result.detail
    )


def test_a_significant_drop_fails_as_such_before_any_power_question(tmp_path):
    """20 tasks, 13 lost and none gained (p = 0.000244): 20 tasks cannot see a 1-point drop, but this one is real."""
    ids = [f"{t}.1" for t in range(1, 21)]
    a = toy_summary({i: "pass" for i in ids}, solved_fraction=1.0)
    b = toy_summary({i: "fail" if int(i.split(".")[0]) <= 13 else "pass" for i in ids}, solved_fraction=0.35)
    cfg = gates(tmp_path, max_drop=["solved=1%"], baseline="b.json", significance="0.05")
    [result] = evaluate(cfg, b, compare(a, b))
    assert not result.ok
    assert result.line() == (
        "FAIL --bench-max-drop solved=1%: significant drop: solved 100.0% -> 35.0% (drop 65.0 pp, limit 1.0 pp); "
        "significant (McNemar over tasks p = 0.000244 < 0.05)"
    )


def test_max_drop_refuses_runs_that_scored_other_items(tmp_path):
    a, b = drop_pair()
    b["items"] = b["items"][:-1]
    [result] = evaluate(gates(tmp_path, max_drop=["solved=50%"], baseline="b.json"), b, compare(a, b))
    assert not result.ok and "(1 only in the baseline, 0 only in this run)" in result.detail


@pytest.mark.parametrize(
    "status,ok,others,expected",
    [
        (0, True, 0, 0),
        (1, True, 0, 0),
        (0, False, 0, 1),
        (1, False, 0, 1),
        (1, True, 1, 1),
        (2, True, 0, 2),
        (3, True, 0, 3),
        (4, False, 0, 4),
        (5, False, 0, 5),
    ],
)
def test_only_exit_codes_0_and_1_are_rewritten(status, ok, others, expected):
    results = [GateResult("g", ok, "d")]
    assert decide_exit(status, results, others) == expected


def test_gates_markdown_names_the_failing_gate():
    md = render_markdown(
        [GateResult("--bench-fail-under a=1", True, "fine"), GateResult("--bench-max-errors 0", False, "2 errors")], 1
    )
    assert md.splitlines() == [
        "## Gates: FAILED (exit code 1)",
        "",
        "| gate | result | detail |",
        "|---|---|---|",
        "| `--bench-fail-under a=1` | pass | fine |",
        "| `--bench-max-errors 0` | **FAIL** | 2 errors |",
    ]


def test_judge_records_the_verdict_in_the_summary(tmp_path):
    a, b = drop_pair()
    verdict = judge(b, gates(tmp_path, max_drop=["solved=10%"], baseline="b.json"), a, exit_status=1)
    assert verdict.exit_before == 1 and verdict.exit_code == 1 and not verdict.gates_passed
    assert b["gates_passed"] is False and b["exit_code"] == 1
    assert [f["id"] for f in b["comparison"]["flipped"]] == ["1.2", "2.2"]
    assert judge(toy_summary({"1.1": "pass"}), None, None, exit_status=1).exit_code == 1  # no gate: pytest's code


def test_a_gated_run_without_items_fails(tmp_path):
    cfg = gates(tmp_path, fail_under=["solved=0"])
    verdict = judge_without_items(cfg, 0)
    assert verdict.exit_code == 1
    assert [r.line() for r in verdict.gate_results] == ["FAIL gates: no benchmark item ran, so no gate can hold"]
    assert judge_without_items(cfg, 5).exit_code == 5  # no tests collected stays 5
    assert judge_without_items(None, 0).exit_code == 0  # without gates pytest's code stands


# ---- the exit-code table ------------------------------------------------------------------------
# In-process: the tiny dataset's records (helpers/records_kit.py) judged as the reporter judges them at the end of
# a session; one pytest run per option below shows the option reaches the verdict, the exit code and the output.
def test_no_gate_keeps_pytest_semantics(tmp_path):
    summary, verdict, written = judged_run(tiny_records(broken="2.2"), tmp_path / "run", None, exit_status=1)
    assert verdict.exit_code == pytest.ExitCode.TESTS_FAILED and summary["exit_code"] == 1
    assert summary["counts"] == {"pass": 4, "fail": 1}
    assert verdict.gate_results == [] and "gates" not in summary  # nothing for the terminal to print either
    assert "## Gates" not in written.markdown


@pytest.mark.e2e
@pytest.mark.slow
def test_gate_passes_although_items_failed(tiny, pytester):
    result = tiny("--bench-fail-under", "main=60%", "--bench-fail-under", "subproblem=0.8", broken="2.2")
    result.assert_outcomes(passed=4, failed=1)
    assert result.ret == pytest.ExitCode.OK
    out = result.stdout.str()
    assert "agentbench gates: passed (exit code 0)" in out
    assert "PASS --bench-fail-under main=60%: main = 66.7% >= 60.0%" in out
    summary = json.loads((latest_run(pytester) / "summary.json").read_text())
    assert summary["gates_passed"] is True and summary["exit_code"] == 0


def test_gate_fails_and_names_the_gate(tmp_path):
    gates = scicode_gates(tmp_path, fail_under=["main=0.5", "subproblem=0.9"])
    _, verdict, _ = judged_run(tiny_records(broken="2.2"), tmp_path / "run", gates)
    assert verdict.exit_code == pytest.ExitCode.TESTS_FAILED
    lines = [r.line() for r in verdict.gate_results]  # what the terminal prints, one line per gate
    assert "FAIL --bench-fail-under subproblem=0.9: subproblem = 80.0% < 90.0%" in lines
    assert any(line.startswith("PASS --bench-fail-under main=0.5") for line in lines), lines
    md = (tmp_path / "run" / "summary.md").read_text()
    assert "## Gates: FAILED (exit code 1)" in md
    assert "| `--bench-fail-under subproblem=0.9` | **FAIL** | subproblem = 80.0% < 90.0% |" in md


@pytest.mark.parametrize("budget,code", [(0, pytest.ExitCode.TESTS_FAILED), (1, pytest.ExitCode.OK)])
def test_errors_over_budget(tmp_path, budget, code):
    _, verdict, _ = judged_run(
        tiny_records(errors="3.1"), tmp_path / "run", scicode_gates(tmp_path, max_errors=str(budget))
    )
    assert verdict.exit_code == code
    assert "1 item(s) ended in model_error/env_error/error" in "\n".join(r.line() for r in verdict.gate_results)


@pytest.mark.e2e
@pytest.mark.slow
def test_errors_within_budget_pass_the_run(tiny):
    result = tiny("--bench-max-errors=1", errors="3.1")
    assert result.ret == pytest.ExitCode.OK  # the model error failed its item: the gate rewrote pytest's 1
    assert "1 item(s) ended in model_error/env_error/error" in result.stdout.str()


@pytest.mark.e2e
def test_baseline_written_on_purpose_a_drop_fails_and_other_data_is_refused(tiny, pytester, shared_data):
    baseline = pytester.path / "ci" / "baseline.json"
    first = tiny(f"--bench-baseline={baseline}", "--bench-update-baseline", "--bench-max-drop=main=10%")
    assert first.ret == pytest.ExitCode.OK
    assert f"baseline updated: {baseline}" in first.stdout.str()
    written = baseline.read_text()
    assert json.loads(written)["metrics"]["main"] == 1.0

    dropped = tiny(f"--bench-baseline={baseline}", "--bench-max-drop=main=10%", broken="2.2,3.1")
    assert dropped.ret == pytest.ExitCode.TESTS_FAILED
    out = dropped.stdout.str()
    assert "FAIL --bench-max-drop main=10%: main 100.0% -> 33.3% (drop 66.7 pp, limit 10.0 pp)" in out
    assert "2.2             pass -> fail" in out and "3.1             pass -> fail" in out
    assert baseline.read_text() == written  # a run never updates its baseline on its own
    md = (latest_run(pytester) / "summary.md").read_text()
    assert "## Comparison with the baseline" in md and "| 2.2 | 2 | pass -> fail | pass | fail |" in md

    _, other_h5 = write_dataset(pytester.path, shared_data, {**TARGETS, "2.2": [9]})
    refused = tiny(f"--bench-baseline={baseline}", "--bench-max-drop=main=0.1", h5_path=other_h5)
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    err = refused.stderr.str()
    assert "refusing to compare with the baseline" in err and "data_hashes.targets:" in err


def baseline_of_tiny(tmp_path: Path, where: Path, **settings) -> dict:
    """A baseline written on purpose by an in-process run of the tiny dataset that passed every step."""
    gates = scicode_gates(tmp_path, baseline=str(where), update_baseline=True)
    _, _, written = judged_run(tiny_records(), tmp_path / "base-run", gates, exit_status=0)
    assert written.baseline == summary_path(where)
    return load_summary(where)


def test_a_drop_within_noise_is_not_counted(tmp_path):
    """Two flipped steps out of five are within noise: counted only when significant, the drop passes."""
    base = baseline_of_tiny(tmp_path, tmp_path / "ci" / "baseline.json")
    gates = scicode_gates(
        tmp_path,
        baseline="ci/baseline.json",
        max_drop=["main=10%"],
        significance="0.05",
        allow_underpowered=True,
    )
    _, verdict, _ = judged_run(tiny_records(broken="2.2,3.1"), tmp_path / "run", gates, baseline=base)
    assert verdict.exit_code == pytest.ExitCode.OK
    [result] = verdict.gate_results
    assert "not significant (McNemar over tasks p = 0.5 >= 0.05), so not counted" in result.line()


def test_a_baseline_folder_with_other_settings_is_refused_naming_the_difference(tmp_path):
    folder = tmp_path / "baseline"
    baseline_of_tiny(tmp_path, folder)
    assert (folder / "summary.json").is_file()  # a folder names where its summary.json goes
    other_targets = scicode_settings(data_hashes={"problems": "a" * 64, "targets": "c" * 64})
    with pytest.raises(ConfigError) as refused:
        baseline_for_run(folder, False, other_targets, scicode().free_settings)
    assert "refusing to compare with the baseline" in str(refused.value)
    assert "data_hashes.targets:" in str(refused.value)
    with pytest.raises(ConfigError, match="background: true vs false"):
        baseline_for_run(folder, False, scicode_settings(background=False), scicode().free_settings)
    assert baseline_for_run(folder, False, scicode_settings(), scicode().free_settings)[0] is not None


# ---- exit codes 2 to 5 pass through --------------------------------------------------------------
def test_usage_error_lists_valid_metrics(tmp_path):
    with pytest.raises(ConfigError) as error:  # the plugin shows it as a usage error (exit 4), as any ConfigError
        scicode_gates(tmp_path, fail_under=["accuracy=0.5"])
    assert "unknown scicode metric 'accuracy' in --bench-fail-under; valid metrics: main, subproblem" in str(
        error.value
    )


@pytest.mark.e2e
@pytest.mark.slow
def test_no_tests_stays_5(tiny):
    result = tiny("--bench-fail-under=main=0", "-k", "no_such_item")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED


@pytest.mark.e2e
@pytest.mark.slow
def test_interrupted_stays_2(tiny, pytester):
    pytester.makeconftest(
        MODEL_CONFTEST
        + """
def pytest_runtest_setup(item):
    if item.name == "2.1":
        raise KeyboardInterrupt
"""
    )
    result = tiny("--bench-fail-under=main=0", subprocess=True)  # in-process, pytester re-raises the interrupt
    assert result.ret == pytest.ExitCode.INTERRUPTED


@pytest.mark.e2e
@pytest.mark.slow
def test_internal_error_stays_3(tiny, pytester):
    pytester.makeconftest(
        MODEL_CONFTEST
        + """
def pytest_runtest_logfinish(nodeid):
    if nodeid.endswith("1.2"):
        raise RuntimeError("a broken plugin")
"""
    )
    result = tiny("--bench-fail-under=main=0")
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR
