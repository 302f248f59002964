"""End to end: ``pytest --bench=core-bench --model=oracle`` in a child pytest, capsules from 127.0.0.1."""

from __future__ import annotations

import json

import pytest

from pytest_agentbench.benchmarks.corebench import capsules

from helpers.bench_runs import SHARED_DATA  # honours $AGENTBENCH_DATA_DIR
from helpers.capabilities import needs
from helpers.capsule_factory import CapsuleServer, build_capsule_archive
from helpers.fake_openai import FakeOpenAI

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

DATA = SHARED_DATA
SERVED, STAGED, MISSING = "capsule-7038571", "capsule-0201225", "capsule-0220918"  # train capsules


def test_oracle_run_with_served_staged_and_missing_capsules(pytester, tmp_path, monkeypatch):
    www, staged = tmp_path / "www", tmp_path / "staged"
    build_capsule_archive(www, SERVED, gpu=True)
    build_capsule_archive(staged, STAGED)
    with CapsuleServer(www) as server:
        monkeypatch.setenv(capsules.CAPSULE_URL_ENV, server.url)
        monkeypatch.setenv("AGENTBENCH_DATA_DIR", str(DATA))
        result = pytester.runpytest_subprocess(
            "--bench=core-bench",
            "--model=oracle",
            "--bench-split=train",
            "--bench-difficulty=medium",
            f"--bench-ids={SERVED},{STAGED},{MISSING}",
            f"--bench-capsules-dir={staged}",
            f"--bench-report-dir={tmp_path / 'reports'}",
            "--bench-run-id=e2e",
            "-p",
            "no:cacheprovider",
        )
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*capsules correct:*2/3*"])
    records = {
        r["id"]: r
        for r in map(
            json.loads,
            (tmp_path / "reports" / "core-bench" / "oracle" / "e2e" / "records.jsonl").read_text().splitlines(),
        )
    }
    assert records[SERVED]["status"] == records[STAGED]["status"] == "pass"
    assert records[SERVED]["gpu_required"] is True and records[STAGED]["gpu_required"] is False
    assert records[MISSING]["status"] == "env_error"
    assert (
        f"{server.url}/{MISSING}.tar.gz" in records[MISSING]["message"] and str(staged) in records[MISSING]["message"]
    )
    assert [r["path"] for r in server.requests] == [f"/{SERVED}.tar.gz", f"/{MISSING}.tar.gz"]
    assert all(r["difficulty"] == "medium" for r in records.values())


GOOD = ["capsule-7038571", "capsule-0201225", "capsule-0220918"]
CORRUPT, HOSTILE = "capsule-3137115", "capsule-5367566"


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_oracle_scores_every_capsule_at_every_difficulty(pytester, tmp_path, monkeypatch, difficulty):
    """The self-check: the first reference run's answers score correct; a corrupt archive and one with
    a path leaving the capsule each fail their own item only, with a message naming the problem."""
    from helpers.capsule_factory import build_malicious_archive

    staged = tmp_path / "staged"
    for capsule_id in GOOD:
        build_capsule_archive(staged, capsule_id)
    (staged / f"{CORRUPT}.tar.gz").write_bytes(b"\x1f\x8b this is not a gzip stream")
    build_malicious_archive(staged, HOSTILE, "dotdot")
    monkeypatch.setenv("AGENTBENCH_DATA_DIR", str(DATA))
    monkeypatch.setenv(capsules.CAPSULE_URL_ENV, "http://127.0.0.1:9")  # nothing is downloaded here
    result = pytester.runpytest_subprocess(
        "--bench=core-bench",
        "--model=oracle",
        "--bench-split=train",
        f"--bench-difficulty={difficulty}",
        f"--bench-ids={','.join([*GOOD, CORRUPT, HOSTILE])}",
        f"--bench-capsules-dir={staged}",
        f"--bench-report-dir={tmp_path / 'reports'}",
        "--bench-run-id=run",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=3, failed=2)
    records = {
        r["id"]: r
        for r in map(
            json.loads,
            (tmp_path / "reports" / "core-bench" / "oracle" / "run" / "records.jsonl").read_text().splitlines(),
        )
    }
    assert all(records[c]["status"] == "pass" and records[c]["difficulty"] == difficulty for c in GOOD)
    assert records[CORRUPT]["status"] == records[HOSTILE]["status"] == "env_error"
    assert CORRUPT in records[CORRUPT]["message"]
    assert ".." in records[HOSTILE]["message"]


# ---- what is checked before any capsule runs ------------------------------------------------------------------
def test_offline_a_missing_capsule_is_one_usage_error_before_any_item(pytester, tmp_path, monkeypatch):
    """AGENTBENCH_OFFLINE=1 and one capsule neither staged nor cached: exit 4 naming it and where to put it; no
    item runs and nothing is downloaded (the server, which has it, sees no request)."""
    www, staged = tmp_path / "www", tmp_path / "staged"
    build_capsule_archive(www, MISSING)
    build_capsule_archive(staged, STAGED)
    with CapsuleServer(www) as server:
        monkeypatch.setenv(capsules.CAPSULE_URL_ENV, server.url)
        monkeypatch.setenv("AGENTBENCH_DATA_DIR", str(DATA))
        monkeypatch.setenv("AGENTBENCH_OFFLINE", "1")
        result = pytester.runpytest_subprocess(
            "--bench=core-bench",
            "--model=oracle",
            "--bench-split=train",
            f"--bench-ids={STAGED},{MISSING}",
            f"--bench-capsules-dir={staged}",
            f"--bench-report-dir={tmp_path / 'reports'}",
            "--bench-run-id=offline",
            "-p",
            "no:cacheprovider",
        )
    err = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, err[-3000:]
    assert f"1 selected capsule(s) are not in {staged} and downloads are off ($AGENTBENCH_OFFLINE): {MISSING}." in err
    assert f"Put each in {staged}/ as <capsule_id>.tar.gz" in err and "--bench-capsules-dir" in err
    assert server.requests == []
    assert not (tmp_path / "reports" / "core-bench" / "oracle" / "offline" / "records.jsonl").exists()
    assert "PASSED" not in result.stdout.str() and "env_error" not in result.stdout.str()


def test_an_image_the_engine_lacks_and_cannot_pull_is_one_usage_error_before_any_item(pytester, tmp_path, monkeypatch):
    """A real model's agent runs in Docker by default: an image the engine lacks and cannot pull is exit 4 naming
    it and the fixes, before the model preflight and any item (no agent turn is asked for)."""
    needs("docker")
    staged = tmp_path / "staged"
    build_capsule_archive(staged, STAGED)
    monkeypatch.setenv(capsules.CAPSULE_URL_ENV, "http://127.0.0.1:9")  # nothing is downloaded here
    monkeypatch.setenv("AGENTBENCH_DATA_DIR", str(DATA))
    image = "127.0.0.1:9/agentbench-no-such-image:1"  # a registry nobody listens on: the pull fails at once
    with FakeOpenAI() as server:
        result = pytester.runpytest_subprocess(
            "--bench=core-bench",
            "--model=agent-model",
            f"--model-base-url={server.base_url}",
            "--model-api-key=x",
            "--bench-cache=off",
            "--bench-split=train",
            f"--bench-ids={STAGED}",
            f"--bench-capsules-dir={staged}",
            f"--bench-set=docker_image={image}",
            f"--bench-report-dir={tmp_path / 'reports'}",
            "--bench-run-id=image",
            "-p",
            "no:cacheprovider",
        )
    err = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, err[-3000:]
    assert f"docker image '{image}' is not on the engine and pulling it failed" in err, err
    assert f"`docker pull {image}`" in err and "--bench-set=docker_image=IMAGE" in err
    assert server.requests == []  # no agent turn (the preflight is counted apart)
    assert not (tmp_path / "reports" / "core-bench" / "agent-model" / "image" / "records.jsonl").exists()
