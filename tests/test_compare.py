"""``python -m pytest_agentbench compare``: exactly the flipped items of two runs made to differ on known steps,
and unit tests of the comparison on hand-made summaries of a benchmark the report layer does not know."""

from __future__ import annotations

import json
import re

import pytest

from pytest_agentbench.cli import main as cli
from pytest_agentbench.core.errors import ConfigError
from pytest_agentbench.report import declared as declared_module
from pytest_agentbench.report.compare import compare, metric_rows, min_flips, render_markdown, render_text, too_small
from pytest_agentbench.report.declared import DEFAULT_HEADLINES, Declared, declared_in
from pytest_agentbench.report.summary import build_summary

from helpers.bench_runs import run_dirs
from toybench import Toy as ToyBenchmark


@pytest.mark.e2e
@pytest.mark.slow
def test_compare_lists_exactly_the_flipped_items(tiny, pytester, capsys):
    assert tiny("--bench-run-id=a", broken="3.1").ret == 1
    assert tiny("--bench-run-id=b", broken="1.2,2.1").ret == 1
    runs = {p.name: p for p in run_dirs(pytester.path)}
    assert cli(["compare", str(runs["a"]), str(runs["b"] / "summary.json")]) == 0
    out = capsys.readouterr().out
    flipped = [line.split() for line in out.splitlines() if "->" in line and line.startswith("  ")]
    assert flipped == [
        ["1.2", "pass", "->", "fail", "A:", "pass", "B:", "fail"],
        ["2.1", "pass", "->", "fail", "A:", "pass", "B:", "fail"],
        ["3.1", "fail", "->", "pass", "A:", "fail", "B:", "pass"],
    ]
    assert "flipped items (3):" in out
    # main: A resolves 1 and 2 (2/3), B only 3 (1/3); subproblem 4/5 -> 3/5
    assert re.search(r"^main +66\.7% +33\.3% +-33\.3 pp$", out, re.M)
    assert re.search(r"^subproblem +80\.0% +60\.0% +-20\.0 pp$", out, re.M)
    assert "McNemar exact test over items: 2 pass -> fail, 1 fail -> pass, p = 1" in out
    assert "bootstrap 95% (main, resampling tasks)" in out
    assert cli(["compare", "--markdown", str(runs["a"]), str(runs["b"])]) == 0
    md = capsys.readouterr().out
    assert "| 3.1 | 3 | fail -> pass | fail | pass |" in md


def fake_summary(statuses: dict[str, str], **settings) -> dict:
    items = [{"id": i, "task": i.split(".")[0], "status": s, "scored": True} for i, s in statuses.items()]
    return {
        "settings": {"benchmark": "scicode", "split": "validation", "model": "m", **settings},
        "metrics": {},
        "items": items,
    }


def test_mcnemar_and_bootstrap_are_exact_and_deterministic():
    a = fake_summary({f"{t}.{s}": "pass" for t in range(1, 21) for s in (1, 2)})
    b = fake_summary({f"{t}.{s}": ("fail" if t <= 8 and s == 2 else "pass") for t in range(1, 21) for s in (1, 2)})
    first, second = compare(a, b), compare(a, b)
    assert first.mcnemar["item"] == {"worse": 8, "better": 0, "n": 40, "p": pytest.approx(2 * 0.5**8)}
    assert first.mcnemar["task"]["worse"] == 8
    assert first.bootstrap == second.bootstrap  # fixed seed
    main = first.bootstrap["main"]
    assert main["delta"] == pytest.approx(-0.4) and main["delta_ci"][1] < 0  # resampling tasks: a clear drop
    assert main["delta_ci"][0] <= -0.4 <= main["delta_ci"][1]


def test_compare_shows_other_settings_and_refuses_only_other_splits(tmp_path, capsys):
    """Runs of other models or modes are what users compare: the differing settings are shown
    in a table; only different benchmarks or splits are refused."""
    for name, background, model in (("a", True, "oracle"), ("b", False, "gpt-x")):
        (tmp_path / f"{name}.json").write_text(
            json.dumps(fake_summary({"1.1": "pass"}, background=background, model=model))
        )
    assert cli(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    out = capsys.readouterr().out
    assert "settings that differ:" in out
    assert re.search(r"background\s+True\s+False", out) and re.search(r"model\s+oracle\s+gpt-x", out)
    (tmp_path / "c.json").write_text(json.dumps(fake_summary({"1.1": "pass"}, split="test")))
    assert cli(["compare", str(tmp_path / "a.json"), str(tmp_path / "c.json")]) == 2
    assert "different splits (validation vs test)" in capsys.readouterr().err
    assert cli(["compare", str(tmp_path / "a.json"), str(tmp_path / "missing")]) == 2


def test_compare_shows_isolation_only_when_more_than_its_self_test_time_differs(tmp_path, capsys):
    line = (
        "bwrap (privileged): uid 65534, no capabilities, system folders only (read-only), private /tmp, own PID "
        "namespace, no network for scripts; sandbox self-test passed (python3 imports numpy, scipy; {} s)"
    )
    runs = {}
    for name, seconds, model in (("a", "0.4", "m"), ("b", "2.3", "m"), ("c", "2.3", "other")):
        runs[name] = tmp_path / f"{name}.json"
        runs[name].write_text(json.dumps(fake_summary({"1.1": "pass"}, isolation=line.format(seconds), model=model)))
    assert cli(["compare", str(runs["a"]), str(runs["b"])]) == 0
    assert "settings that differ:" not in capsys.readouterr().out  # only the self-test's time differs
    other = fake_summary({"1.1": "pass"}, isolation="none (not requested)", model="m")
    runs["d"] = tmp_path / "d.json"
    runs["d"].write_text(json.dumps(other))
    assert cli(["compare", str(runs["a"]), str(runs["d"])]) == 0
    out = capsys.readouterr().out
    assert "isolation" in out and "no network for scripts; sandbox self-test passed" in out, out  # whole, not cut
    assert re.search(r"^    A: bwrap \(privileged\): uid 65534, .* \(python3 imports numpy, scipy\)$", out, re.M), out
    assert re.search(r"^    B: none \(not requested\)$", out, re.M), out
    assert cli(["compare", str(runs["b"]), str(runs["c"])]) == 0
    assert re.search(r"^  model +m +other$", capsys.readouterr().out, re.M)  # short values stay a table


def test_compare_scores_the_items_both_runs_share(tmp_path, capsys):
    a = fake_summary({"1.1": "pass", "1.2": "pass", "2.1": "fail", "3.1": "pass"})
    b = fake_summary({"1.1": "pass", "1.2": "fail"})
    c = compare(a, b)
    assert c.shared == 2 and c.only_a == ["2.1", "3.1"]
    assert dict((name, (left, right)) for name, left, right in c.metrics) == {
        "main": (1.0, 0.0),
        "subproblem": (1.0, 0.5),
    }  # problem 1 only, on both sides
    text = "\n".join(render_text(c))
    assert "compared on the 2 scored items both runs share (A has 2 more, B has 0 more)" in text


def test_significance_warns_when_the_selection_is_too_small():
    assert min_flips(0.05) == 6 and min_flips(0.01) == 8
    assert too_small({"item": 6, "task": 5}, 0.05) == [
        "only 5 tasks: the exact McNemar test can never reach p < 0.05 (it needs at least 6 flipped tasks); "
        "a drop in a task-level metric cannot be significant"
    ]
    text = "\n".join(render_text(compare(fake_summary({"1.1": "pass"}), fake_summary({"1.1": "fail"}))))
    assert "WARNING: only 1 items: the exact McNemar test can never reach p < 0.05" in text


# ---- hand-made summaries of a benchmark declared only by its summary.json -------------------------
class Toy(ToyBenchmark):
    """The toy benchmark (tests/toybench) with the gates and the summary these tests pin."""

    name = "toy"
    gate_metrics = {"solved": "solved_fraction", "steps": "step_fraction"}
    headlines = {"solved": "task", "steps": "item"}
    free_settings = frozenset({"temperature"})

    def summarize(self, records, settings):
        passed = sum(r["status"] == "pass" for r in records)
        return {
            "metrics": {"step_fraction": passed / len(records)},
            "terminal": [f"{passed} passed"],
            "markdown": "## toy",
            "extra": 1,
        }


def toy_summary(statuses: dict[str, str], metrics: dict | None = None, **settings) -> dict:
    items = [{"id": i, "task": i.split(".")[0], "status": s, "scored": True} for i, s in statuses.items()]
    return {
        "settings": {"benchmark": "toy", "split": "dev", "model": "m", **settings},
        "metrics": metrics or {},
        "items": items,
        **Declared.of(Toy()).to_summary(),
    }


def test_summary_stores_what_compare_needs():
    records = [
        {"id": "2.1", "task": "2", "status": "fail"},
        {"id": "1.1", "task": "1", "status": "pass"},
        {"id": "10.1", "task": "10", "status": "pass", "scored": False},
    ]
    summary = build_summary(records, Toy(), {"benchmark": "toy", "model": "m"})
    assert [i["id"] for i in summary["items"]] == ["1.1", "2.1", "10.1"]  # natural order
    assert summary["gate_metrics"] == {"solved": "solved_fraction", "steps": "step_fraction"}
    assert summary["headlines"] == {"solved": "task", "steps": "item"} and summary["free_settings"] == ["temperature"]
    assert summary["metrics"] == {"step_fraction": 2 / 3} and summary["extra"] == 1
    assert summary["counts"] == {"pass": 2, "fail": 1} and summary.terminal == ["2 passed"]
    assert declared_in(summary) == Declared.of(Toy())


def test_compare_reads_the_benchmark_from_the_summaries():
    a = toy_summary(
        {"1.1": "pass", "1.2": "pass", "2.1": "pass", "3.1": "fail"},
        {"solved_fraction": 2 / 3, "step_fraction": 0.75, "other": 0.5},
        temperature=0,
    )
    b = toy_summary(
        {"1.1": "pass", "1.2": "fail", "2.1": "pass", "3.1": "pass"},
        {"solved_fraction": 2 / 3, "step_fraction": 0.75},
        temperature=1,
    )
    c = compare(a, b)
    assert c.settings_diff == []  # temperature is a free setting of this benchmark
    assert c.metrics == [("solved", 2 / 3, 2 / 3), ("steps", 0.75, 0.75)]  # gate names, not every metric
    assert [(f["id"], f["direction"]) for f in c.flipped] == [("1.2", "pass -> fail"), ("3.1", "fail -> pass")]
    assert c.mcnemar["item"] == {"worse": 1, "better": 1, "n": 4, "p": 1.0}
    assert c.mcnemar["task"] == {"worse": 1, "better": 1, "n": 3, "p": 1.0}
    assert set(c.bootstrap) == {"solved", "steps"}
    assert c.bootstrap["solved"]["unit"] == "task" and c.bootstrap["steps"]["unit"] == "item"
    assert c.unit_of("dev.solved") == "task" and c.unit_of("steps") == "item" and c.unit_of("other") == "item"
    text = "\n".join(render_text(c))
    assert "flipped items (2):" in text and "McNemar exact test over tasks: 1 pass -> fail, 1 fail -> pass" in text
    md = render_markdown(c)
    assert "| 1.2 | 1 | pass -> fail | pass | fail |" in md and "| solved | 66.7% | 66.7% | +0.0 pp |" in md


def test_settings_outside_the_free_ones_are_named():
    a, b = toy_summary({"1.1": "pass"}, mode="x"), toy_summary({"1.1": "pass"}, mode="y", model="other")
    assert compare(a, b).settings_diff == ["mode: x vs y"]


def test_items_on_one_side_only_are_listed_apart():
    c = compare(toy_summary({"1.1": "pass", "2.1": "pass"}), toy_summary({"1.1": "fail", "3.1": "pass"}))
    assert c.only_a == ["2.1"] and c.only_b == ["3.1"] and [f["id"] for f in c.flipped] == ["1.1"]


def test_a_benchmark_without_declarations_gets_default_headlines():
    a = {
        "settings": {"benchmark": "toy"},
        "metrics": {"acc": 0.5, "n": 2},
        "items": [],
        "gate_metrics": {},
        "headlines": {},
        "free_settings": [],
    }
    b = {**a, "metrics": {"acc": 0.25, "n": 2}}
    assert metric_rows(a, b) == [("acc", 0.5, 0.25)]  # float metrics only
    c = compare(a, b)
    assert c.declared.units == dict(DEFAULT_HEADLINES) and c.bootstrap == {}


def test_an_older_summary_is_read_with_the_registered_benchmark(monkeypatch):
    """Summaries written before they stored the benchmark's declarations: found through the registry."""

    def get_benchmark(name):
        if name != "toy":
            raise ConfigError(f"unknown benchmark {name!r}")
        return Toy()

    monkeypatch.setattr(declared_module, "get_benchmark", get_benchmark)
    assert declared_in({"settings": {"benchmark": "toy"}, "metrics": {}, "items": []}) == Declared.of(Toy())
    assert declared_in({"settings": {"benchmark": "gone"}, "metrics": {}, "items": []}) == Declared()


def test_cli_compares_two_summary_files(tmp_path, capsys):
    a = toy_summary({"1.1": "pass", "2.1": "pass"}, {"solved_fraction": 1.0, "step_fraction": 1.0})
    b = toy_summary({"1.1": "pass", "2.1": "fail"}, {"solved_fraction": 0.5, "step_fraction": 0.5})
    for name, summary in (("a", a), ("b", b)):
        (tmp_path / f"{name}.json").write_text(json.dumps(summary))
    assert cli(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^solved +100\.0% +50\.0% +-50\.0 pp$", out, re.M)
    assert "2.1             pass -> fail  A: pass        B: fail" in out
    other = {**b, "settings": {**b["settings"], "benchmark": "other"}}
    (tmp_path / "c.json").write_text(json.dumps(other))
    assert cli(["compare", str(tmp_path / "a.json"), str(tmp_path / "c.json")]) == 2
    assert "the runs are of different benchmarks (toy vs other)" in capsys.readouterr().err
