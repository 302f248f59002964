"""Every summary records what makes two runs comparable; compare shows what differs, and a gate refuses a baseline
whose dataset, grading environments or harness differ unless --bench-set=allow_incomparable=true (the report then
says so).
A baseline older than these keys still loads: its keys are unknown, said so, and not refused for."""

from __future__ import annotations

import hashlib
import json
import sys
from importlib import metadata
from pathlib import Path

import pytest

from pytest_agentbench.cli.compare import main as compare_command
from pytest_agentbench.core.errors import ConfigError
from pytest_agentbench.report import comparability
from pytest_agentbench.report.baseline import baseline_for_run
from pytest_agentbench.report.comparison.runs import comparison_for_run
from pytest_agentbench.report.html import write_html
from pytest_agentbench.report.summary import judge, write_reports

from helpers.bench_runs import SHARED_DATA
from helpers.records_kit import judged_run, scicode, scicode_gates, scicode_settings, scicode_summary, tiny_records

BASE = {
    "benchmark": "b",
    "dataset": {"name": "d", "hashes": {"x": "1"}},
    "grading_envs": [{"name": "default", "numpy": "2.1.0"}],
    "harness": {"mode": "tool_use"},
    "package": "0.1.0",
}


def test_differences_key_by_key_and_only_strict_keys_make_runs_incomparable():
    other = {**BASE, "dataset": {"name": "d", "hashes": {"x": "2"}}, "package": "0.2.0"}
    rows = comparability.differences(BASE, other)
    assert ("comparability.dataset.hashes.x", "1", "2") in rows
    assert ("comparability.package", "0.1.0", "0.2.0") in rows
    assert comparability.incomparable(BASE, other) == ["dataset.hashes.x: 1 vs 2"]  # the package is shown only
    envs = {**BASE, "grading_envs": [{"name": "default", "numpy": "1.26.4"}]}
    assert comparability.incomparable(BASE, envs)[0].startswith("grading_envs: ")
    assert comparability.incomparable(BASE, {**BASE, "replayed": {"dataset": "z"}}) == []


def test_a_run_without_keys_is_unknown_not_incomparable():
    assert comparability.incomparable(None, BASE) == []
    assert comparability.differences(None, BASE) == [("comparability", "unknown (an older run)", "recorded")]
    assert "records no comparability keys" in comparability.unknown_note(None, BASE)
    assert comparability.unknown_note(BASE, BASE) is None


def test_the_selection_is_its_count_and_digest():
    keys = comparability.with_selection({}, ["2.1", "1.1", "1.1"])
    assert keys["selection"] == {"items": 2, "sha256": hashlib.sha256(b"1.1\n2.1").hexdigest()}


@pytest.mark.e2e
def test_a_summary_records_its_comparability_keys(tiny_run):
    assert tiny_run.returncode == pytest.ExitCode.TESTS_FAILED, tiny_run.tail()  # 2.2 is answered wrongly
    summary = tiny_run.summary
    keys = summary["comparability"]
    assert "comparability" not in summary["settings"]
    assert keys["benchmark"] == "scicode" and keys["split"] == "validation" and keys["time_limit"] == 20.0
    assert keys["package"] == metadata.version("pytest-agentbench")
    assert keys["selection"]["items"] == 5
    assert keys["dataset"]["name"] == "scicode official" and keys["dataset"]["targets"] == "custom"
    assert keys["dataset"]["hashes"] == summary["settings"]["data_hashes"]
    env = keys["grading_envs"][0]
    assert env["numpy"] == metadata.version("numpy") and env["scipy"] == metadata.version("scipy")
    assert env["python"] == ".".join(map(str, sys.version_info[:3]))
    assert keys["harness"]["mode"] == "tool_use" and keys["harness"]["background"] is True
    template = SHARED_DATA / "scicode" / "multistep_template.txt"  # the tiny dataset's copy of it
    assert keys["prompts"]["with_background"] == hashlib.sha256(template.read_bytes()).hexdigest()
    assert "## Comparability" in (tiny_run.path / "summary.md").read_text()


# ---- a baseline graded elsewhere, in-process: what the reporter does with the tiny dataset's records -----------
KEYS = {**BASE, "benchmark": "scicode"}


def other_numpy(data) -> None:
    data["comparability"]["grading_envs"][0]["numpy"] = "1.0.0"


def rewrite(path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def baseline_folder(tmp_path, change) -> Path:
    """A baseline written on purpose by a run of the tiny dataset, then ``change``d in its summary.json."""
    folder = tmp_path / "baseline"
    gates = scicode_gates(tmp_path, baseline=str(folder), update_baseline=True)
    judged_run(tiny_records(), tmp_path / "base-run", gates, exit_status=0, settings=SETTINGS)
    rewrite(folder / "summary.json", change)
    return folder


SETTINGS = scicode_settings(comparability=KEYS)


def reported_run(tmp_path, folder, name: str, **gates) -> tuple[dict, str, str]:
    """A run of the tiny dataset judged against the baseline ``folder`` as the reporter does it (the baseline's
    notes in summary.md and report.html, the comparison's section in the page): summary.json, summary.md, page."""
    config = scicode_gates(tmp_path, baseline=str(folder), max_drop=["main=10%"], **gates)
    baseline, notes = baseline_for_run(
        folder, False, SETTINGS, scicode().free_settings, allow_incomparable=config.allow_incomparable
    )
    run = tmp_path / name
    records = tiny_records()
    summary = scicode_summary(records, SETTINGS)
    verdict = judge(summary, config, baseline, 0)
    assert verdict.exit_code == pytest.ExitCode.OK
    written = write_reports(summary, verdict, run, gates=config, baseline=baseline, notes=notes)
    section = comparison_for_run(verdict.comparison, run, records, gates=config, gate_results=verdict.gate_results)
    page = write_html(run, summary.to_json(), records, notes=notes, sections=[section]).read_text()
    return json.loads((run / "summary.json").read_text()), written.markdown, page


def test_a_gate_refuses_a_baseline_graded_elsewhere_unless_allowed(tmp_path):
    folder = baseline_folder(tmp_path, other_numpy)
    with pytest.raises(ConfigError) as refused:  # the plugin shows it as a usage error
        baseline_for_run(folder, False, SETTINGS, scicode().free_settings)
    assert "not comparable with this run" in str(refused.value) and "grading_envs: " in str(refused.value)
    assert "--bench-set=allow_incomparable=true" in str(refused.value)
    summary, md, page = reported_run(tmp_path, folder, "b", allow_incomparable=True)
    assert "is NOT comparable with this run" in md  # the note, Markdown-escaped:
    assert "compared anyway, as --bench-set=allow\\_incomparable=true asks" in md
    assert "the runs are NOT comparable" in md  # the comparison section too
    assert summary["comparison"]["incomparable"] and summary["comparison"]["incomparable"][0].startswith("grading_envs")
    assert "is NOT comparable" in page


def test_an_old_baseline_without_keys_still_gates_and_says_they_are_unknown(tmp_path):
    folder = baseline_folder(tmp_path, lambda data: data.pop("comparability"))
    _, md, _ = reported_run(tmp_path, folder, "c")
    assert "records no comparability keys" in md


def test_compare_shows_the_keys_that_differ(tmp_path, capsys):
    runs = {}
    for name in ("a", "b"):
        judged_run(tiny_records(), tmp_path / name, settings=SETTINGS, exit_status=0)
        runs[name] = tmp_path / name
    rewrite(runs["b"] / "summary.json", other_numpy)

    def compared() -> str:
        assert compare_command([str(runs["a"]), str(runs["b"])]) == 0
        return capsys.readouterr().out

    out = compared()
    assert "comparability.grading_envs" in out
    assert (
        "WARNING: the runs are NOT comparable (their dataset, grading environments, harness or served model differ)"
        in out
    )
    rewrite(runs["a"] / "summary.json", lambda data: data.pop("comparability"))
    out = compared()
    assert "unknown (an older run)" in out and "A records no comparability keys" in out
