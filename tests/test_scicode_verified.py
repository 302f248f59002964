"""SciCode-Verified (--bench-dataset=verified) on a small dataset in its repository's layout, with a manifest holding
the real md5 of each file: a missing file offline, a changed JSONL, patch or h5 and a manifest of another version are
refused before any item (exit 4, naming the file and the fix); a run on it is scored and says which data it used.
And re-grading without the model: a replay of an official run against SciCode-Verified's corrected targets."""

from __future__ import annotations

import json
import re

import pytest

from pytest_agentbench.benchmarks.scicode import verified

from helpers.fake_openai import FakeOpenAI
from helpers.scicode_builders import (
    CLOSE,
    MODEL_CONFTEST,
    custom_data_args,
    problem,
    step,
    write_dataset,
    write_verified,
)

pytestmark = pytest.mark.e2e


@pytest.fixture
def vrun(pytester, bench, shared_data, monkeypatch):
    """Run SciCode-Verified's small dataset with the mutant model: vrun(*args, broken="2.2") -> RunResult."""
    pytester.makeconftest(MODEL_CONFTEST)
    data, _ = write_dataset(pytester.path, shared_data)
    write_verified(data)

    def run(*args: str, broken: str = ""):
        monkeypatch.setenv("BREAK_STEPS", broken)
        monkeypatch.setenv("ERROR_STEPS", "")
        return bench(
            "--bench=scicode",
            "--bench-dataset=verified",
            "--model=mutant",
            f"--bench-data-dir={data}",
            # the small dataset is not v2's: its manifest is checked, not v2's pins
            "--bench-set=allow_custom_data=true",
            "--bench-timeout=20",
            *args,
        )

    run.data = data
    run.folder = data / "scicode_verified"
    return run


def usage_error(result) -> str:
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()[-2000:]
    return result.stderr.str() + result.stdout.str()


def test_a_run_on_the_small_dataset_is_scored_and_says_its_dataset(vrun, pytester):
    result = vrun("--bench-run-id=v", broken="2.2")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert "dataset: scicode-verified v2 (custom manifest)" in out  # the header
    run = pytester.path / "reports" / "scicode" / "mutant" / "v"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["settings"]["dataset"] == "scicode-verified v2 (custom manifest)"
    assert summary["settings"]["split"] == "test" and summary["settings"]["targets"] == "verified"
    assert summary["run_counts"]["subproblem_total"] == 5 and summary["run_counts"]["subproblem_correct"] == 4
    assert {i["id"]: i["status"] for i in summary["items"]}["2.2"] == "fail"
    keys = summary["comparability"]
    assert keys["dataset"]["name"] == "scicode-verified v2 (custom manifest)"
    assert keys["dataset"]["targets"] == "verified"
    assert keys["dataset"]["hashes"]["scicode_verified/problems_test.jsonl"]
    assert "| dataset | scicode-verified v2 (custom manifest) |" in (run / "summary.md").read_text()
    assert "scicode-verified v2 (custom manifest)" in (run / "report.html").read_text()
    steps = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()]
    assert {s["targets_source"] for s in steps if s["status"] != "skipped"} == {"verified"}


def test_a_missing_file_offline_is_refused_naming_where_to_get_it(vrun):
    (vrun.folder / "test_data_cleaned.h5").unlink()
    err = usage_error(vrun())
    assert "test_data_cleaned.h5 is missing and downloads are off ($AGENTBENCH_OFFLINE=1)" in err
    assert verified.H5_URL in err
    (vrun.folder / "problems_test.jsonl").unlink()
    err = usage_error(vrun())
    assert "problems_test.jsonl is missing and downloads are off" in err
    assert verified.raw_url("problems_test.jsonl") in err  # the pinned revision's file


def test_a_changed_problems_file_is_refused(vrun):
    path = vrun.folder / "problems_test.jsonl"
    path.write_text(path.read_text() + "\n")
    err = usage_error(vrun())
    assert f"{path} does not match manifest.json (problems_test.jsonl: md5" in err
    assert "delete it so it is downloaded again" in err


def test_a_tampered_target_patch_is_refused(vrun):
    patch = vrun.folder / "targets" / "1.json"
    patch.write_text(patch.read_text().replace("a corrected target", "a changed target"))
    err = usage_error(vrun())
    assert f"{patch} does not match manifest.json (targets/1.json: md5" in err


def test_a_changed_targets_file_is_refused(vrun):
    h5 = vrun.folder / "test_data_cleaned.h5"
    h5.write_bytes(h5.read_bytes() + b"\0")
    err = usage_error(vrun())
    assert f"{h5} does not match manifest.json (test_data_cleaned.h5: md5" in err


def test_a_manifest_of_another_version_needs_custom_data(vrun, bench):
    err = usage_error(
        bench("--bench=scicode", "--bench-dataset=verified", "--model=mutant", f"--bench-data-dir={vrun.data}")
    )
    assert "is not dataset v2's manifest" in err and "--bench-set=allow_custom_data=true" in err
    assert verified.PROBLEMS_MD5 in err and verified.H5_MD5 in err


def test_the_oracle_and_the_validation_split_are_refused(vrun, bench):
    assert "SciCode-Verified does not ship" in usage_error(vrun("--model=oracle"))
    assert "has no validation split" in usage_error(vrun("--bench-split=validation"))


def test_the_v2_pins_make_a_manifest_of_the_dataset(tmp_path):
    raw = {
        "version": "v2",
        "problems_test_jsonl_md5": verified.PROBLEMS_MD5,
        "targets_md5": {},
        "h5_md5": verified.H5_MD5,
    }
    manifest = verified.parse_manifest(tmp_path / "manifest.json", raw)
    assert not manifest.custom and manifest.label == "scicode-verified v2"
    assert verified.parse_manifest(tmp_path / "m.json", {**raw, "version": "v3"}).custom


# ---- re-grading yesterday's answers against other targets, with no model call -----------------------------------
FOUR = [
    problem(
        str(k), [step(f"{k}.1", f"def f{k}():\n    return {k}", [CLOSE.format(call=f"f{k}()")], header=f"def f{k}():")]
    )
    for k in range(1, 5)
]
RIGHT = {f"{k}.1": [k] for k in range(1, 5)}
DEFECT = {**RIGHT, "3.1": [99]}  # an official target that rejects correct code


def right_answer(body: dict) -> dict:
    k = re.findall(r"def f(\d+)\(\)", json.dumps(body["messages"]))[-1]
    return {"text": f"```python\ndef f{k}():\n    return {k}\n```"}


@pytest.mark.slow
def test_a_replay_regrades_against_the_corrected_targets_without_a_model_call(pytester, bench, shared_data):
    data, h5 = write_dataset(pytester.path, shared_data, targets=DEFECT, problems=FOUR)
    write_verified(data, problems=FOUR, targets=RIGHT)
    cache = pytester.path / "cache"
    with FakeOpenAI() as server:
        for _ in range(8):
            server.reply_with(right_answer)
        first = bench(
            *custom_data_args(data, h5, "--bench-mode=naive", model="m", server=server),
            f"--bench-cache-dir={cache}",
            "--bench-run-id=yesterday",
        )
        assert first.ret == pytest.ExitCode.TESTS_FAILED  # 3.1 fails against the defective target
        calls = len(server.requests)
        run = pytester.path / "reports" / "scicode" / "m"
        again = bench(
            f"--bench-replay={run / 'yesterday'}",
            "--bench-targets=verified",
            f"--bench-cache-dir={cache}",
            f"--model-base-url={server.base_url}",
            "--bench-run-id=today",
        )
        assert again.ret == pytest.ExitCode.OK, again.stdout.str()[-3000:]
        assert len(server.requests) == calls  # no model call
    old = json.loads((run / "yesterday" / "summary.json").read_text())
    new = json.loads((run / "today" / "summary.json").read_text())
    assert old["run_counts"]["subproblem_correct"] == 3 and new["run_counts"]["subproblem_correct"] == 4
    assert new["settings"]["targets"] == "verified" and "dataset" not in new["settings"]  # official problems
    assert new["comparability"]["replayed"] == old["comparability"]  # both runs' keys
    assert new["comparability"]["dataset"]["targets"] == "verified"
    assert old["comparability"]["dataset"]["targets"] == "custom"
    assert "SciCode-Verified's corrected test_data_cleaned.h5, for the official problems" in again.stdout.str()
