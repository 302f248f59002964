"""--bench-dataset=v1.1 / v1.1-ood for CORE-Bench, run as a user runs it, on a synthetic set in the published layout.

A scripted client (a user's own ``run_agent``) answers three capsules with answers that the v1.1 rules accept and
v1's reject (an alias, isclose, the widening, 1 for True, floats for ints), and records the workspace it was given.
The run says which data it used everywhere; the pinned manifest, an offline run without it, another difficulty or
split and an unknown set name are usage errors naming the fix; a v1 baseline is refused for a v1.1 run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_agentbench.benchmarks.corebench import capsules, dataset
from pytest_agentbench.core.data import sha256_of

from helpers.bench_runs import SHARED_DATA
from helpers.capsule_factory import build_capsule_archive
from helpers.corebench_v11 import (
    COLOUR_CAPSULE,
    GPU_CAPSULE,
    HIDDEN_EXTRAS,
    LIST_CAPSULE,
    V11_ANSWERS,
    write_v11_data,
)

pytestmark = pytest.mark.e2e

SCRIPTED = f"""
import json, os
from pathlib import Path

import pytest

ANSWERS = {V11_ANSWERS!r}


class Scripted:
    name = "scripted"

    def run_agent(self, workspace, prompt, sample, ctx):
        seen = sorted(p.relative_to(workspace).as_posix() for p in Path(workspace).rglob("*"))
        Path(os.environ["LISTING_DIR"], sample.id + ".json").write_text(json.dumps(seen))
        answers = ANSWERS.get(sample.id)
        if answers is None:  # not a capsule of the synthetic set: the reference answers
            answers = dict(sample.data["results"][0])
        (Path(workspace) / "report.json").write_text(json.dumps(answers))
        return None


@pytest.fixture(scope="session")
def bench_model():
    return Scripted()
"""


@pytest.fixture
def v11(pytester, tmp_path, monkeypatch):
    """``run(*args, data=..., run_id=...)`` -> (result, run folder): the scripted client on the synthetic v1.1 set."""
    data = tmp_path / "data"
    manifest = write_v11_data(data, SHARED_DATA)
    listing = tmp_path / "listing"
    listing.mkdir()
    monkeypatch.setenv("LISTING_DIR", str(listing))
    monkeypatch.setenv("AGENTBENCH_OFFLINE", "1")
    monkeypatch.delenv(capsules.CAPSULE_URL_ENV, raising=False)
    pytester.makeini("[pytest]\n")
    pytester.makeconftest(SCRIPTED)

    def run(*args: str, data_dir: Path = data, run_id: str = "r", custom: bool = True):
        result = pytester.runpytest_subprocess(
            "--bench=core-bench",
            "--model=scripted",
            "--bench-set=model_preflight=off",
            "--bench-env=host",
            f"--bench-data-dir={data_dir}",
            f"--bench-cache-dir={tmp_path / 'cache'}",
            f"--bench-report-dir={tmp_path / 'reports'}",
            f"--bench-run-id={run_id}",
            *(["--bench-set=allow_custom_data=true"] if custom else []),
            "-p",
            "no:cacheprovider",
            *args,
            timeout=600,
        )
        return result, tmp_path / "reports" / "core-bench" / "scripted" / run_id

    run.manifest = manifest
    run.listing = listing
    run.tmp = tmp_path
    return run


def usage_error(result) -> str:
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()[-3000:] + result.stderr.str()[-3000:]
    return result.stderr.str() + result.stdout.str()


def records_of(folder: Path) -> dict[str, dict]:
    lines = (folder / "records.jsonl").read_text().splitlines()
    return {r["id"]: r for r in map(json.loads, lines)}


@pytest.mark.slow
def test_a_v11_run_is_graded_by_the_v11_rules_and_says_which_data_it_used(v11):
    result, folder = v11("--bench-dataset=v1.1")
    assert result.ret == 0, result.stdout.str()[-3000:]
    result.assert_outcomes(passed=3)
    sha = sha256_of(v11.manifest)
    records = records_of(folder)
    assert set(records) == {COLOUR_CAPSULE, GPU_CAPSULE, LIST_CAPSULE}
    for record in records.values():
        assert record["status"] == "pass", record["message"]
        assert (record["dataset"], record["dataset_version"], record["manifest_sha256"]) == ("v1.1", "v1.1", sha)
        assert record["grading"] == "v1.1" and record["difficulty"] == "hard"
    rules = {q["question"][:20]: q["rule"] for r in records.values() for q in r["questions"]}
    assert sorted(set(rules.values())) == ["alias", "bool", "isclose", "list", "widening"]
    # the manifest's gpu flag decides, not REPRODUCING.md (the synthetic capsules' asks for none)
    assert records[GPU_CAPSULE]["gpu_required"] is True and records[LIST_CAPSULE]["gpu_required"] is False

    summary = json.loads((folder / "summary.json").read_text())
    settings = summary["settings"]
    assert (settings["dataset"], settings["dataset_version"], settings["grading"]) == ("v1.1", "v1.1", "v1.1")
    assert settings["data_hashes"] == {"manifest": sha}
    keys = summary["comparability"]["dataset"]
    assert (keys["set"], keys["version"], keys["grading"], keys["hashes"]) == (
        "v1.1",
        "v1.1",
        "v1.1",
        {"manifest": sha},
    )
    out = result.stdout.str()
    assert f"CORE-Bench v1.1 mainline (--bench-dataset=v1.1, manifest sha256 {sha[:12]}" in out
    assert re.search(r"capsules correct: +3/3 \(100\.0%\) +task-level accuracy \(the v1\.1 headline\)", out)
    assert re.search(r"questions correct: +5/5 \(100\.0%\) +question-level accuracy", out)
    # the reports show the rule that decided each verdict
    assert "correct (isclose)" in (folder / "summary.md").read_text()
    assert "rule: alias" in (folder / "report.html").read_text()


@pytest.mark.slow  # the filtering itself: tests/test_corebench_v11_workspace.py, in-process
def test_the_agent_starts_without_results_or_the_hard_filters_files(v11):
    result, _ = v11("--bench-dataset=v1.1", f"--bench-ids={COLOUR_CAPSULE}")
    assert result.ret == 0, result.stdout.str()[-3000:]
    seen = json.loads((v11.listing / f"{COLOUR_CAPSULE}.json").read_text())
    assert not [p for p in seen if "results" in p.split("/")]
    assert not [p for p in seen if p.endswith(".tar.gz")]
    for gone in ["REPRODUCING.md", "code/run", "code/run.sh", "environment", *HIDDEN_EXTRAS]:
        assert gone not in seen, gone
    assert "code/main.py" in seen and "data/values.csv" in seen


@pytest.mark.slow
def test_the_manifests_gpu_flags_mark_items_for_deselection(v11):
    result, _ = v11("--bench-dataset=v1.1", "--collect-only", "-q", "-m", "not gpu")
    out = result.stdout.str()
    assert COLOUR_CAPSULE in out and LIST_CAPSULE in out and GPU_CAPSULE not in out


@pytest.mark.slow
def test_the_pinned_manifest_is_checked(v11):
    text = usage_error(v11("--bench-dataset=v1.1", custom=False)[0])
    assert "checksum mismatch" in text and dataset.DATA_SETS["v1.1"].manifest.sha256 in text


@pytest.mark.slow
def test_offline_a_missing_manifest_names_the_file_its_url_its_hash_and_where_it_goes(v11):
    empty = v11.tmp / "empty"
    (empty / "core_bench").mkdir(parents=True)
    text = usage_error(v11("--bench-dataset=v1.1-ood", data_dir=empty, custom=False)[0])
    pinned = dataset.DATA_SETS["v1.1-ood"].manifest
    assert "core_test.json not found" in text
    assert pinned.url in text and pinned.url.startswith(
        "https://huggingface.co/datasets/agent-evals/core-bench-v1.1-ood/resolve/main/"
    )
    assert pinned.sha256 == "ad09c0cc164fd6d73b3891e2c42e8e04eee28aed861cb5a8e57a2a9f74f668c5"
    assert pinned.sha256 in text and str(empty / "core_bench" / "v1.1-ood" / "core_test.json") in text


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--bench-dataset=v1.1", "--bench-difficulty=medium"), "--bench-dataset=v1.1 is hard-only"),
        (("--bench-dataset=v1.1", "--bench-split=train"), "has one split, test"),
        (("--bench-dataset=v2",), "core-bench data set (--bench-dataset) 'v2'; valid values: v1, v1.1, v1.1-ood"),
    ],
)
@pytest.mark.slow
def test_what_a_v11_run_refuses(v11, args, fragment):
    assert fragment in usage_error(v11(*args)[0])


def test_scicode_keeps_its_own_data_set_choices(pytester, bench):
    text = usage_error(bench("--bench=scicode", "--bench-dataset=v1.1", "--model=oracle"))
    assert "scicode data set (--bench-dataset) 'v1.1'; valid values: official, verified" in text


@pytest.mark.slow  # two whole runs; the gate's refusal is tests/test_comparability.py's fast-loop run
def test_a_v1_baseline_is_refused_for_a_v11_run_unless_allowed(v11, monkeypatch):
    # a v1 run first: the train split's first capsule, staged, reference answers
    v1_capsule = "capsule-7038571"
    build_capsule_archive(v11.tmp / "staged", v1_capsule)
    result, v1_folder = v11(
        f"--bench-data-dir={SHARED_DATA}",
        "--bench-split=train",
        f"--bench-ids={v1_capsule}",
        f"--bench-capsules-dir={v11.tmp / 'staged'}",
        run_id="v1",
        custom=False,
    )
    assert result.ret == 0, result.stdout.str()[-3000:]
    record = records_of(v1_folder)[v1_capsule]
    assert (record["dataset"], record["dataset_version"]) == ("v1", "v1")
    assert record["manifest_sha256"] == dataset.data_files()["train"].sha256 and "grading" not in record
    assert "CORE-Bench v1 train split" in result.stdout.str()

    text = usage_error(v11("--bench-dataset=v1.1", f"--bench-baseline={v1_folder}", run_id="gated")[0])
    assert "dataset" in text
    allowed, _ = v11(
        "--bench-dataset=v1.1", f"--bench-baseline={v1_folder}", "--bench-set=allow_incomparable=true", run_id="allowed"
    )
    assert allowed.ret == 0, allowed.stdout.str()[-3000:]
    assert "comparability.dataset" in allowed.stdout.str()


@pytest.mark.slow  # two whole runs; the v1.1 rules are tests/test_corebench_v11_grading.py's, in-process
def test_a_v1_runs_saved_answers_are_regraded_by_the_v11_rules(v11):
    """A v1 run (on a custom task file holding one capsule of the set and one outside it) fails the capsule by
    v1's rules; its replay with --bench-dataset=v1.1 re-grades the saved answers by v1.1's: it passes, the capsules
    the v1 run never had are skipped, and nothing is fetched or run."""
    from helpers.corebench_v11 import manifest_text, task, tasks

    colour = next(t for t in tasks() if t["capsule_id"] == COLOUR_CAPSULE)
    outside = task("capsule-1111111", "Not in v1.1", {"Report the seed.": 7})
    custom = v11.tmp / "v1_tasks.json"
    custom.write_text(manifest_text([colour, outside]))
    store = v11.manifest.parent / "capsules"
    build_capsule_archive(store, "capsule-1111111")
    data = v11.manifest.parent.parent.parent
    result, v1_folder = v11(
        f"--bench-set=dataset_path={custom}", f"--bench-capsules-dir={store}", run_id="v1", custom=False
    )
    assert result.ret == 1, result.stdout.str()[-3000:]
    assert records_of(v1_folder)[COLOUR_CAPSULE]["status"] == "fail"  # "Green" and 96.125 are wrong by v1's rules

    (v11.listing / f"{COLOUR_CAPSULE}.json").unlink()
    result, folder = v11(f"--bench-replay={v1_folder}", "--bench-dataset=v1.1", f"--bench-data-dir={data}", run_id="rg")
    assert result.ret == 0, result.stdout.str()[-3000:]
    result.assert_outcomes(passed=1, skipped=2)
    records = records_of(folder)
    regraded = records[COLOUR_CAPSULE]
    assert regraded["status"] == "pass" and regraded["dataset"] == "v1.1" and regraded["grading"] == "v1.1"
    assert regraded["regrade"] == {"from": str(v1_folder), "replayed_dataset": "v1", "grading": "v1.1"}
    assert {q["rule"] for q in regraded["questions"]} == {"alias", "isclose"}
    assert "not re-graded" in records[GPU_CAPSULE]["message"] or records[GPU_CAPSULE]["status"] == "skipped"
    assert not (v11.listing / f"{COLOUR_CAPSULE}.json").exists()  # no agent ran
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["settings"]["regrade"]["from"] == str(v1_folder)
    assert summary["comparability"]["replayed"]["dataset"]["name"] == "core-bench"
