"""CORE-Bench's checks of the selection (its capsules, the agent's image) run before any model call, the model
preflight included, and end as the plugin's own usage error (``ERROR: agentbench: ...``, exit 4) with no results
banner; with AGENTBENCH_OFFLINE=1 the Docker engine is never asked to pull an image."""

from __future__ import annotations

import pytest

from pytest_agentbench.benchmarks.corebench import capsules

from helpers.bench_runs import SHARED_DATA
from helpers.capabilities import needs
from helpers.capsule_factory import build_capsule_archive
from helpers.fake_openai import FakeOpenAI

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

STAGED, MISSING = "capsule-0201225", "capsule-0220918"  # train capsules


def run_agent(pytester, tmp_path, server: FakeOpenAI, *extra: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        "--bench=core-bench",
        "--model=agent-model",
        f"--model-base-url={server.base_url}",
        "--model-api-key=x",
        "--bench-cache=off",
        "--bench-split=train",
        f"--bench-report-dir={tmp_path / 'reports'}",
        "-p",
        "no:cacheprovider",
        *extra,
    )


def assert_usage_error_before_any_call(result: pytest.RunResult, server: FakeOpenAI) -> str:
    out, err = result.stdout.str(), result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, (out + err)[-3000:]
    assert "ERROR: agentbench: CORE-Bench: " in err, err
    assert "_pytest.outcomes.Exit" not in out + err and "results" not in out  # no empty results banner
    assert server.preflights == [] and server.requests == []  # not even the preflight's request
    return err


def test_a_missing_capsule_offline_is_a_usage_error_before_the_preflight(pytester, tmp_path, monkeypatch):
    staged = tmp_path / "staged"
    build_capsule_archive(staged, STAGED)
    monkeypatch.setenv(capsules.CAPSULE_URL_ENV, "http://127.0.0.1:9")
    monkeypatch.setenv("AGENTBENCH_DATA_DIR", str(SHARED_DATA))
    monkeypatch.setenv("AGENTBENCH_OFFLINE", "1")
    with FakeOpenAI() as server:
        result = run_agent(
            pytester, tmp_path, server, f"--bench-ids={STAGED},{MISSING}", f"--bench-capsules-dir={staged}"
        )
    err = assert_usage_error_before_any_call(result, server)
    assert f"1 selected capsule(s) are not in {staged} and downloads are off ($AGENTBENCH_OFFLINE): {MISSING}." in err


def test_offline_an_image_the_engine_lacks_is_not_pulled(pytester, tmp_path, monkeypatch):
    needs("docker")
    staged = tmp_path / "staged"
    build_capsule_archive(staged, STAGED)
    monkeypatch.setenv(capsules.CAPSULE_URL_ENV, "http://127.0.0.1:9")
    monkeypatch.setenv("AGENTBENCH_DATA_DIR", str(SHARED_DATA))
    monkeypatch.setenv("AGENTBENCH_OFFLINE", "1")
    image = "agentbench-no-such-image:offline"  # a pull would ask Docker Hub: offline, it is never asked
    with FakeOpenAI() as server:
        result = run_agent(
            pytester,
            tmp_path,
            server,
            f"--bench-ids={STAGED}",
            f"--bench-capsules-dir={staged}",
            f"--bench-set=docker_image={image}",
        )
    err = assert_usage_error_before_any_call(result, server)
    assert f"docker image '{image}' is not on the engine and pulls are off ($AGENTBENCH_OFFLINE)" in err, err
    assert "docker load" in err and f"docker build -t {image} ." in err and "--bench-set docker_image" in err


def test_narrowed_by_k_the_check_after_collection_is_still_a_plain_usage_error(pytester, tmp_path, monkeypatch):
    staged = tmp_path / "staged"
    build_capsule_archive(staged, STAGED)
    monkeypatch.setenv(capsules.CAPSULE_URL_ENV, "http://127.0.0.1:9")
    monkeypatch.setenv("AGENTBENCH_DATA_DIR", str(SHARED_DATA))
    monkeypatch.setenv("AGENTBENCH_OFFLINE", "1")
    with FakeOpenAI() as server:  # -k keeps the missing capsule: known only after collection
        result = run_agent(
            pytester,
            tmp_path,
            server,
            f"--bench-ids={STAGED},{MISSING}",
            f"--bench-capsules-dir={staged}",
            "-k",
            MISSING,
        )
    out, err = result.stdout.str(), result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, (out + err)[-3000:]
    assert f"ERROR: agentbench: CORE-Bench: 1 selected capsule(s) are not in {staged}" in err, err
    assert "_pytest.outcomes.Exit" not in out + err and "results" not in out
    assert server.requests == []  # no agent turn
