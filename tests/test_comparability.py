"""Every summary records what makes two runs comparable; compare shows what differs, and a gate refuses a baseline
whose dataset, grading environments or harness differ unless --bench-set=allow_incomparable=true (the report then
says so).
A baseline older than these keys still loads: its keys are unknown, said so, and not refused for."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from importlib import metadata

import pytest

from pytest_agentbench.report import comparability

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
def test_a_summary_records_its_comparability_keys(tiny, pytester, shared_data):
    assert tiny("--bench-run-id=one").ret == pytest.ExitCode.OK
    summary = json.loads((pytester.path / "reports" / "scicode" / "mutant" / "one" / "summary.json").read_text())
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
    template = tiny.data / "scicode" / "multistep_template.txt"
    assert keys["prompts"]["with_background"] == hashlib.sha256(template.read_bytes()).hexdigest()
    assert "## Comparability" in (pytester.path / "reports" / "scicode" / "mutant" / "one" / "summary.md").read_text()


def rewrite(path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def other_numpy(data) -> None:
    data["comparability"]["grading_envs"][0]["numpy"] = "1.0.0"


@pytest.mark.slow
@pytest.mark.e2e
def test_a_gate_refuses_a_baseline_graded_elsewhere_unless_allowed(tiny, pytester):
    baseline = pytester.path / "baseline"
    assert tiny(f"--bench-baseline={baseline}", "--bench-update-baseline").ret == pytest.ExitCode.OK
    rewrite(baseline / "summary.json", other_numpy)
    refused = tiny(f"--bench-baseline={baseline}", "--bench-max-drop=main=10%")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    err = refused.stderr.str()
    assert (
        "not comparable with this run" in err
        and "grading_envs: " in err
        and "--bench-set=allow_incomparable=true" in err
    )
    allowed = tiny(
        f"--bench-baseline={baseline}",
        "--bench-max-drop=main=10%",
        "--bench-set=allow_incomparable=true",
        "--bench-run-id=b",
    )
    assert allowed.ret == pytest.ExitCode.OK
    run = pytester.path / "reports" / "scicode" / "mutant" / "b"
    md = (run / "summary.md").read_text()
    assert "is NOT comparable with this run" in md and "--bench-set=allow_incomparable=true" in md
    assert "the runs are NOT comparable" in md  # the comparison section too
    summary = json.loads((run / "summary.json").read_text())
    assert summary["comparison"]["incomparable"] and summary["comparison"]["incomparable"][0].startswith("grading_envs")
    assert "is NOT comparable" in (run / "report.html").read_text()


@pytest.mark.slow
@pytest.mark.e2e
def test_an_old_baseline_without_keys_still_gates_and_says_they_are_unknown(tiny, pytester):
    baseline = pytester.path / "baseline"
    assert tiny(f"--bench-baseline={baseline}", "--bench-update-baseline").ret == pytest.ExitCode.OK
    rewrite(baseline / "summary.json", lambda data: data.pop("comparability"))
    result = tiny(f"--bench-baseline={baseline}", "--bench-max-drop=main=10%", "--bench-run-id=c")
    assert result.ret == pytest.ExitCode.OK
    md = (pytester.path / "reports" / "scicode" / "mutant" / "c" / "summary.md").read_text()
    assert "records no comparability keys" in md


@pytest.mark.slow
@pytest.mark.e2e
def test_compare_shows_the_keys_that_differ(tiny, pytester):
    assert tiny("--bench-run-id=a").ret == pytest.ExitCode.OK
    assert tiny("--bench-run-id=b").ret == pytest.ExitCode.OK
    runs = pytester.path / "reports" / "scicode" / "mutant"
    rewrite(runs / "b" / "summary.json", other_numpy)

    def compare() -> str:
        done = subprocess.run(
            [sys.executable, "-m", "pytest_agentbench", "compare", str(runs / "a"), str(runs / "b")],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    out = compare()
    assert "comparability.grading_envs" in out
    assert (
        "WARNING: the runs are NOT comparable (their dataset, grading environments, harness or served model differ)"
        in out
    )
    rewrite(runs / "a" / "summary.json", lambda data: data.pop("comparability"))
    out = compare()
    assert "unknown (an older run)" in out and "A records no comparability keys" in out
