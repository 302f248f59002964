"""Four small guarantees: a report folder that cannot be written is a usage error before any
work; item retries wait with the client's backoff; the client's retries of one request are counted; a replay
whose cache lacks the first model call of a selected task stops before any item, naming it.

Runs go through pytester as a user runs pytest, against tests/helpers/fake_openai.py (a scripted server on
127.0.0.1) and the staged validation data.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from helpers.bench_runs import SHARED_DATA, read_jsonl, run_dirs
from helpers.fake_openai import FakeOpenAI

pytestmark = pytest.mark.e2e


def model_args(server: FakeOpenAI, *extra: str) -> list[str]:
    return [
        "--bench=scicode",
        "--bench-split=validation",
        "--model=gt-player",
        f"--model-base-url={server.base_url}",
        "--model-api-key=test-key",
        *extra,
    ]


def ground_truth_reply(number: str) -> str:
    """A naive-mode reply holding the ground truth of validation step ``number``."""
    for line in (SHARED_DATA / "scicode" / "problems_dev.jsonl").read_text().splitlines():
        for step in json.loads(line)["sub_steps"]:
            if step["step_number"] == number:
                return f"Here it is.\n```python\n{step['ground_truth_code']}\n```\n"
    raise AssertionError(f"no validation step {number}")


ORACLE = ["--bench=scicode", "--bench-split=validation", "--model=oracle", "--bench-ids=1.1"]


# ---- the report folder ---------------------------------------------------------------------------------
def test_report_dir_on_a_pseudo_file_system_is_a_usage_error(bench):
    result = bench(*ORACLE, "--bench-report-dir=/proc/x")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "--bench-report-dir /proc/x cannot be written" in err and "INTERNALERROR" not in err + result.stdout.str()


@pytest.mark.slow
def test_report_dir_where_writes_fail_is_a_usage_error(bench, tmp_path):
    if os.geteuid() == 0:  # permission bits say nothing for root: a folder where writes fail whatever the bits
        folder = Path("/sys/kernel")
        assert folder.is_dir() and os.access(folder, os.W_OK)  # what a permission check would have trusted
    else:
        folder = tmp_path / "read-only"
        folder.mkdir()
        folder.chmod(0o500)
    try:
        result = bench(*ORACLE, f"--bench-report-dir={folder}")
    finally:
        if os.geteuid() != 0:
            folder.chmod(0o700)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"--bench-report-dir {folder} cannot be written" in result.stderr.str()
    assert not list(folder.glob(".agentbench-write-probe*"))


@pytest.mark.slow
def test_a_writable_report_dir_keeps_no_probe_and_no_empty_folder(bench, pytester):
    result = bench(*ORACLE, "--bench-report-dir=out/reports", "--collect-only")
    assert result.ret == pytest.ExitCode.OK
    assert not (pytester.path / "out").exists()  # --collect-only checks nothing and makes nothing
    result = bench(*ORACLE, "--bench-report-dir=out/reports", "-p", "no:terminal")
    assert result.ret == pytest.ExitCode.OK
    [run] = run_dirs(pytester.path / "out")
    assert not list(run.glob(".agentbench-write-probe*"))


# ---- retries -------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_item_retries_wait_with_the_clients_backoff(bench, pytester, cache_dir, real_retry_waits):
    with FakeOpenAI() as fake:
        fake.always_status = 500
        result = bench(
            *model_args(
                fake,
                "--bench-ids=1.1",
                "--bench-set=model_max_retries=0",
                "--bench-set=model_retry_delay=0.4",
                "--bench-set=max_retries=2",
                f"--bench-cache-dir={cache_dir}",
                "--bench-mode=naive",
            ),
            subprocess=True,
        )
    result.assert_outcomes(failed=1)
    times = [r["at"] for r in fake.requests]
    assert len(times) == 3  # one try and two item retries, one request each
    # the client's backoff: 0.4 s doubling, jittered over the upper half: [0.2, 0.4] then [0.4, 0.8]
    assert times[1] - times[0] >= 0.2 and times[2] - times[1] >= 0.4, times
    [record] = read_jsonl(run_dirs(pytester.path)[0] / "steps.jsonl")
    assert record["status"] == "model_error" and len(record["tries"]) == 3


@pytest.mark.slow
def test_request_retries_are_counted_in_the_record_and_the_usage_line(bench, pytester, cache_dir):
    with FakeOpenAI() as fake:
        fake.fail(times=2, status=429, retry_after=0)
        fake.reply(ground_truth_reply("1.1"))
        pytester.makeini("[pytest]\nagentbench_model_retry_delay = 0\n")
        result = bench(
            *model_args(fake, "--bench-ids=1.1", f"--bench-cache-dir={cache_dir}", "--bench-mode=naive"),
            subprocess=True,
        )
    result.assert_outcomes(passed=1)
    assert fake.count() == 3
    [run] = run_dirs(pytester.path)
    [record] = read_jsonl(run / "steps.jsonl")
    assert record["generation"]["request_retries"] == 2
    assert "1 model calls, 18 tokens, 0 cache hits, 2 request retries" in result.stdout.str()
    assert "2 request retries" in (run / "summary.md").read_text()
    assert json.loads((run / "summary.json").read_text())["usage"]["request_retries"] == 2


# ---- replay ----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_replay_without_the_cached_first_calls_stops_naming_the_tasks(bench, pytester, cache_dir, tmp_path):
    with FakeOpenAI() as fake:
        for _ in range(20):  # the answers' verdicts do not matter here: only what the cache holds
            fake.reply("```python\ndef f():\n    return 1\n```")
        recorded = bench(
            *model_args(
                fake,
                "--bench-ids=1,3.1",
                f"--bench-cache-dir={cache_dir}",
                "--bench-mode=naive",
                "--bench-run-id=recorded",
            ),
            subprocess=True,
        )
        assert recorded.ret == 1 and "model_error" not in recorded.stdout.str(), recorded.stdout.str()[-2000:]
        run = pytester.path / "reports" / "scicode" / "gt-player" / "recorded"
        asked = fake.count()

        empty = tmp_path / "empty-cache"
        empty.mkdir()
        for extra in ((), ("-n", "2")):
            missing = bench(f"--bench-replay={run}", f"--bench-cache-dir={empty}", *extra, subprocess=True)
            assert missing.ret == pytest.ExitCode.USAGE_ERROR, missing.stdout.str()[-2000:]
            out = missing.stdout.str() + missing.stderr.str()
            assert "lacks the first model call of 2 selected task(s): 1, 3" in out
            assert "passed" not in out.splitlines()[-1] and "model_error" not in out
        # the cache of the recorded run holds them: the replay runs, still without a request
        replay = bench(f"--bench-replay={run}", f"--bench-cache-dir={cache_dir}", subprocess=True)
        assert replay.ret == 1 and "model_error" not in replay.stdout.str(), replay.stdout.str()[-2000:]
        assert fake.count() == asked


CAPSULE = "capsule-7038571"


@pytest.mark.slow
def test_corebench_replay_without_the_cached_first_call_stops_naming_the_capsule(pytester, tmp_path, monkeypatch):
    from pytest_agentbench.benchmarks.corebench import dataset

    from helpers.capsule_factory import build_capsule_archive

    monkeypatch.setenv("AGENTBENCH_DATA_DIR", str(SHARED_DATA))
    staged = tmp_path / "staged"
    build_capsule_archive(staged, CAPSULE)
    answers = next(t for t in dataset.load_split(SHARED_DATA, "train") if t["capsule_id"] == CAPSULE)["results"][0]
    cache, empty = tmp_path / "cache", tmp_path / "empty-cache"
    empty.mkdir()
    common = ["-p", "no:cacheprovider", f"--bench-report-dir={tmp_path / 'r'}"]
    with FakeOpenAI() as server:
        server.reply(tool_calls=[("submit", {"answers": answers})])
        recorded = pytester.runpytest_subprocess(
            "--bench=core-bench",
            "--bench-split=train",
            f"--bench-ids={CAPSULE}",
            "--model=agent-model",
            f"--model-base-url={server.base_url}",
            "--model-api-key=x",
            f"--bench-cache-dir={cache}",
            f"--bench-capsules-dir={staged}",
            "--bench-env=host",
            "--bench-run-id=recorded",
            *common,
        )
        assert recorded.ret == 0, recorded.stdout.str()[-2000:]
        run = tmp_path / "r" / "core-bench" / "agent-model" / "recorded"
        asked = len(server.requests)
        missing = pytester.runpytest_subprocess(f"--bench-replay={run}", f"--bench-cache-dir={empty}", *common)
        assert missing.ret == pytest.ExitCode.USAGE_ERROR, missing.stdout.str()[-2000:]
        assert (
            f"lacks the first model call of 1 selected task(s): {CAPSULE}"
            in missing.stdout.str() + missing.stderr.str()
        )
        replay = pytester.runpytest_subprocess(f"--bench-replay={run}", f"--bench-cache-dir={cache}", *common)
        assert replay.ret == 0, replay.stdout.str()[-2000:]
        assert len(server.requests) == asked
