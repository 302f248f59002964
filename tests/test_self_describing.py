"""Self-describing runs. A run's settings.json says how it was asked for, so
``--bench-resume DIR`` alone continues it (a different selection or setting is refused with the
difference, or merged on request), ``--bench-replay DIR`` re-scores it from the cache, and summary.json
and summary.md say when, on what and how the run was made."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_agentbench.core.errors import AgentbenchWarning
from pytest_agentbench.core.records import read_records
from pytest_agentbench.pytest_plugin.provenance import command_line, git_commit

from helpers.bench_runs import read_jsonl, run_dirs
from helpers.fake_openai import FakeOpenAI
from helpers.scicode_builders import custom_data_args, write_dataset

REPO = Path(__file__).resolve().parents[1]


def items_of(run: Path) -> list[str]:
    return [i["id"] for i in json.loads((run / "summary.json").read_text())["items"]]


def interrupted(tiny, pytester, *args: str) -> Path:
    """A run of problems 1 and 3 without background, interrupted before its last step (3.1) was written."""
    first = tiny("--bench-run-id=r", "--bench-ids=1,3", "--no-bench-background", *args)
    assert first.ret == pytest.ExitCode.OK, first.stdout.str()
    [run] = run_dirs(pytester.path)
    records = run / "steps.jsonl"
    records.write_text("".join(line + "\n" for line in records.read_text().splitlines()[:2]))
    (run / "summary.json").unlink()
    return run


@pytest.mark.e2e
@pytest.mark.slow
def test_resume_alone_continues_the_run_with_its_settings_and_selection(tiny, bench, pytester):
    run = interrupted(tiny, pytester)
    stored = json.loads((run / "settings.json").read_text())["_run"]
    assert stored["options"]["ids"] == ["1", "3"] and stored["options"]["background"] is False
    resumed = bench(f"--bench-resume={run}", "--bench-set=progress_interval=0")  # a free setting may change
    assert resumed.ret == pytest.ExitCode.OK, resumed.stdout.str() + resumed.stderr.str()
    resumed.assert_outcomes(passed=3)
    assert "2 finished record(s) reused" in resumed.stdout.str()
    assert [r["id"] for r in read_jsonl(run / "steps.jsonl")] == ["1.1", "1.2", "3.1"]
    assert items_of(run) == ["1.1", "1.2", "3.1"]
    assert json.loads((run / "summary.json").read_text())["settings"]["background"] is False


@pytest.mark.slow
@pytest.mark.e2e
def test_resume_refuses_another_selection_or_setting_and_merges_on_request(tiny, bench, pytester):
    run = interrupted(tiny, pytester)
    other = bench(f"--bench-resume={run}", "--bench-ids=2", "--bench-background", "-k", "1")
    assert other.ret == pytest.ExitCode.USAGE_ERROR
    error = other.stderr.str()
    assert "this command differs from the run's own settings (settings.json)" in error
    assert "--bench-ids: 1,3 in the run, 2 now" in error
    assert "--bench-background: False in the run, True now" in error and "-k: (not set) in the run, 1 now" in error
    assert "--bench-set=resume_merge=true" in error
    merged = bench(f"--bench-resume={run}", "--bench-ids=2", "--bench-set=resume_merge=true")
    assert merged.ret == pytest.ExitCode.OK, merged.stdout.str() + merged.stderr.str()
    merged.assert_outcomes(passed=5)
    assert items_of(run) == ["1.1", "1.2", "2.1", "2.2", "3.1"]  # the union, never narrowed
    assert json.loads((run / "settings.json").read_text())["_run"]["options"]["ids"] == ["1", "3", "2"]


@pytest.mark.e2e
def test_a_resume_over_another_mode_advises_a_new_run_not_a_merge(tiny, bench, pytester):
    """--bench-set=resume_merge=true adds a selection; for a setting such as --bench-mode the way out is a new run (the
    finished records were made in the run's mode) or the run's own mode, whether the run gave it or not."""
    run = interrupted(tiny, pytester, "--bench-mode=tool_use")
    given = bench(f"--bench-resume={run}", "--bench-mode=naive")
    assert given.ret == pytest.ExitCode.USAGE_ERROR
    error = " ".join(given.stderr.str().split())
    assert "--bench-mode: tool_use in the run, naive now" in error, error
    assert "--bench-set=resume_merge=true" not in error, error
    assert "to use another setting (--bench-mode), start a new run (leave out --bench-resume)" in error, error
    stored = json.loads((run / "settings.json").read_text())
    del stored["_run"]["options"]["mode"]  # as a run that left the mode at its default records it
    (run / "settings.json").write_text(json.dumps(stored))
    default = bench(f"--bench-resume={run}", "--bench-mode=naive")
    assert default.ret == pytest.ExitCode.USAGE_ERROR
    error = " ".join(default.stderr.str().split())
    assert "mode: tool_use vs naive" in error and "--bench-set=resume_merge=true" not in error, error
    assert "resume with the run's own options, or start a new run (leave out --bench-resume)" in error, error


@pytest.mark.e2e
@pytest.mark.slow
def test_a_torn_records_line_is_the_plugins_own_note_not_a_warning_into_its_code(tiny, pytester):
    run = interrupted(tiny, pytester)
    with (run / "steps.jsonl").open("a") as records:
        records.write('{"id": "3.1", "sta')  # a write the kill cut short
    resumed = tiny(f"--bench-resume={run}", "-W", "default", subprocess=True)
    out = resumed.stdout.str() + resumed.stderr.str()
    assert resumed.ret == pytest.ExitCode.OK, out
    assert f"agentbench: note: dropped torn last line 3 of {run / 'steps.jsonl'}" in out, out
    # (another installed plugin may warn about itself; none of the plugin's own warnings reaches the user)
    assert "AgentbenchWarning" not in out and "warnings summary" not in out and "pytest_agentbench/" not in out, out


def test_a_warning_of_the_plugin_points_at_what_it_concerns(tmp_path):
    records = tmp_path / "steps.jsonl"
    records.write_text('{"id": "1.1", "status": "pass"}\n{"id": "1.2", "sta')
    with pytest.warns(AgentbenchWarning) as caught:
        assert [r["id"] for r in read_records(records)] == ["1.1"]
    [warning] = caught
    assert warning.filename == str(records), warning.filename  # not a line of the plugin's code
    assert "dropped torn last line 2" in str(warning.message)


@pytest.mark.e2e
@pytest.mark.slow
def test_resume_command_of_the_package(tiny, pytester, shared_cache):
    run = interrupted(tiny, pytester)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_agentbench",
            "resume",
            str(run),
            "-p",
            "no:cacheprovider",
            f"--bench-cache-dir={shared_cache}",
            "-q",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert items_of(run) == ["1.1", "1.2", "3.1"]


@pytest.mark.e2e
@pytest.mark.slow
def test_resuming_a_finished_run_says_so_and_starts_nothing(pytester, bench, shared_data):
    """Nothing left to run: no preflight, no worker, no "the rest runs now"; the reports are written again."""
    data, h5 = write_dataset(pytester.path, shared_data)
    with FakeOpenAI() as server:
        server.reply("```python\ndef six():\n    return 6\n```")
        first = bench(
            *custom_data_args(data, h5, "--bench-ids=3.1", "--bench-mode=naive", model="m", server=server),
            "--bench-run-id=done",
        )
        assert first.ret == pytest.ExitCode.OK, first.stdout.str()
        [run] = run_dirs(pytester.path)
        (run / "summary.json").unlink()
        asked, preflights = len(server.requests), len(server.preflights)
        resumed = bench(f"--bench-resume={run}", f"--model-base-url={server.base_url}", "--model-api-key=k", "-n", "2")
        out = resumed.stdout.str()
        assert resumed.ret == pytest.ExitCode.OK, out + resumed.stderr.str()
        assert (len(server.requests), len(server.preflights)) == (asked, preflights)  # no preflight, no call
    assert "all 1 item(s) have a finished record, nothing is left to run" in out, out
    assert "the rest runs now" not in out and "preflight" not in out.lower(), out
    assert not re.search(r"bringing up nodes|created: \d+/\d+ workers|\[gw\d+\]", out), out  # no xdist worker
    assert items_of(run) == ["3.1"]  # the summary written again


@pytest.mark.e2e
@pytest.mark.slow
def test_replay_rescores_a_run_from_its_cached_responses(pytester, bench, custom_scicode):
    with FakeOpenAI() as server:
        server.reply("```python\ndef six():\n    return 6\n```")
        first = custom_scicode(
            "--bench-ids=3.1", "--bench-mode=naive", "--bench-run-id=first", model="m", server=server
        )
        assert first.ret == pytest.ExitCode.OK, first.stdout.str()
    [original] = run_dirs(pytester.path)
    # the server is gone: nothing is retyped, no model is called, the new run has its own folder
    replay = bench(f"--bench-replay={original}", "--bench-run-id=again")
    assert replay.ret == pytest.ExitCode.OK, replay.stdout.str() + replay.stderr.str()
    assert f"replaying {original}" in replay.stdout.str()
    again = original.parent / "again"
    summary = json.loads((again / "summary.json").read_text())
    assert summary["settings"]["cache_mode"] == "replay" and summary["usage"]["cache_hits"] == 1
    assert summary["metrics"]["subproblem"] == 1.0


@pytest.mark.e2e
@pytest.mark.slow
def test_summary_says_when_on_what_and_how_the_run_was_made(tiny, pytester):
    result = tiny("--bench-ids=3")
    assert result.ret == pytest.ExitCode.OK
    [run] = run_dirs(pytester.path)
    info = json.loads((run / "summary.json").read_text())["run"]
    assert set(info) >= {
        "started",
        "ended",
        "duration_s",
        "plugin_version",
        "python",
        "numpy",
        "scipy",
        "git_commit",
        "host_cores",
        "command",
    }
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", info["started"]) and info["started"] <= info["ended"]
    assert info["plugin_version"] and info["numpy"] and info["scipy"] and info["host_cores"] >= 1
    assert "--bench-ids=3" in info["command"] and info["git_commit"] is None  # the test folder is no git checkout
    markdown = (run / "summary.md").read_text()
    assert "## Run" in markdown and "| started |" in markdown and "--bench-ids=3" in markdown


def test_git_commit_and_command_line():
    commit = git_commit(REPO)
    if (REPO / ".git").exists():
        assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", commit)
    assert command_line(["--bench=x", "a b"]).endswith("--bench=x 'a b'")


@pytest.mark.e2e
@pytest.mark.slow
def test_significance_warns_when_the_selection_is_too_small(tiny):
    result = tiny("--bench-set=significance=0.05", "--collect-only")
    assert result.ret == pytest.ExitCode.OK, result.stderr.str()
    out = " ".join(result.stdout.str().split())
    assert "--bench-set significance 0.05: only 5 items: the exact McNemar test can never reach p < 0.05" in out
    assert "only 3 tasks" in out
