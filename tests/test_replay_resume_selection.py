"""A resume checks ``--deselect`` like ``-k``/``-m`` (refused with the
difference, or merged with --bench-set=resume_merge=true), and ``--bench-replay RUN_DIR`` with the model's server
gone makes 0 model calls and says how many cache hits it made, in the terminal, summary.md and summary.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.bench_runs import read_jsonl, run_dirs
from helpers.fake_openai import FakeOpenAI

pytestmark = pytest.mark.e2e

NOT_2_2 = "scicode/2::2.2"


def items_of(run: Path) -> list[str]:
    return [i["id"] for i in json.loads((run / "summary.json").read_text())["items"]]


def interrupted(tiny, pytester, run_id: str, *selection: str) -> Path:
    """A run of the tiny dataset with ``selection``, cut after its first two records (as a killed run is)."""
    first = tiny(f"--bench-run-id={run_id}", *selection)
    assert first.ret == pytest.ExitCode.OK, first.stdout.str()
    [run] = [p for p in run_dirs(pytester.path) if p.name == run_id]
    records = run / "steps.jsonl"
    records.write_text("".join(line + "\n" for line in records.read_text().splitlines()[:2]))
    (run / "summary.json").unlink()
    return run


def test_resume_refuses_another_deselect(tiny, bench, pytester):
    run = interrupted(tiny, pytester, "r", f"--deselect={NOT_2_2}")
    stored = json.loads((run / "settings.json").read_text())["_run"]["selection"]
    assert stored["deselect"] == [NOT_2_2]

    other = bench(f"--bench-resume={run}", "--deselect=scicode/3::3.1")
    assert other.ret == pytest.ExitCode.USAGE_ERROR
    error = other.stderr.str()
    assert "this command differs from the run's own settings (settings.json)" in error
    assert f"--deselect: {NOT_2_2} in the run, scicode/3::3.1 now" in error and "--bench-set=resume_merge=true" in error
    dropped = bench(f"--bench-resume={run}", f"--deselect={NOT_2_2}", "--deselect=scicode/3::3.1")
    assert dropped.ret == pytest.ExitCode.USAGE_ERROR
    assert f"--deselect: {NOT_2_2} in the run, {NOT_2_2},scicode/3::3.1 now" in dropped.stderr.str()
    assert [r["id"] for r in read_jsonl(run / "steps.jsonl")] == ["1.1", "1.2"]  # refused before any item ran

    same = bench(f"--bench-resume={run}", f"--deselect={NOT_2_2}")  # the run's own: continues it
    assert same.ret == pytest.ExitCode.OK, same.stdout.str() + same.stderr.str()
    same.assert_outcomes(passed=4, deselected=1)
    assert items_of(run) == ["1.1", "1.2", "2.1", "3.1"]


@pytest.mark.slow
def test_resume_alone_keeps_the_runs_deselect(tiny, bench, pytester):
    run = interrupted(tiny, pytester, "r", f"--deselect={NOT_2_2}")
    resumed = bench(f"--bench-resume={run}")
    assert resumed.ret == pytest.ExitCode.OK, resumed.stdout.str() + resumed.stderr.str()
    resumed.assert_outcomes(passed=4, deselected=1)
    assert "2 finished record(s) reused" in resumed.stdout.str()
    assert items_of(run) == ["1.1", "1.2", "2.1", "3.1"]


@pytest.mark.slow
def test_resume_merge_adds_the_deselected_items_back(tiny, bench, pytester):
    run = interrupted(tiny, pytester, "r", f"--deselect={NOT_2_2}")
    # this command deselects 3.1 instead: the union of both selections is every item (an item stays
    # deselected only when both deselect it)
    merged = bench(f"--bench-resume={run}", "--deselect=scicode/3::3.1", "--bench-set=resume_merge=true")
    assert merged.ret == pytest.ExitCode.OK, merged.stdout.str() + merged.stderr.str()
    merged.assert_outcomes(passed=5)
    assert items_of(run) == ["1.1", "1.2", "2.1", "2.2", "3.1"]  # never narrowed
    assert json.loads((run / "settings.json").read_text())["_run"]["selection"]["deselect"] == []


ADD_AND_TWICE = "```python\ndef add(a, b):\n    return a + b\n\ndef twice(a):\n    return add(a, a)\n```"


@pytest.mark.slow
def test_replay_with_the_server_gone_makes_no_model_call(pytester, bench, custom_scicode, tmp_path):
    cache = tmp_path / "own-cache"  # a cache of its own: the hits counted are this run's responses only
    with FakeOpenAI() as server:
        for _ in range(2):  # steps 1.1 and 1.2, one call each (naive mode)
            server.reply(ADD_AND_TWICE, prompt_tokens=100, completion_tokens=20)
        first = custom_scicode(
            "--bench-ids=1",
            "--bench-mode=naive",
            f"--bench-cache-dir={cache}",
            "--bench-run-id=first",
            model="m",
            server=server,
        )
        assert first.ret == pytest.ExitCode.OK, first.stdout.str()
        assert server.count("/chat/completions") == 2
    first.stdout.fnmatch_lines(["agentbench: 2 done (2 pass) * 2 model calls, 240 tokens, 0 cache hits"])
    [original] = run_dirs(pytester.path)

    # the server is stopped; the cache folder is typed again only because the `bench` fixture types the
    # session's shared one on every command line (a value typed for a replay wins over the run's)
    replay = bench(f"--bench-replay={original}", "--bench-run-id=again", f"--bench-cache-dir={cache}")
    assert replay.ret == pytest.ExitCode.OK, replay.stdout.str() + replay.stderr.str()
    replay.assert_outcomes(passed=2)
    replay.stdout.fnmatch_lines(
        [
            f"agentbench: note: replaying {original}: *",
            "agentbench: 2 done (2 pass) * 0 model calls, 240 tokens, 2 cache hits",
        ]
    )
    again = original.parent / "again"
    summary = json.loads((again / "summary.json").read_text())
    assert summary["settings"]["cache_mode"] == "replay"
    assert summary["usage"]["endpoint_calls"] == 0 and summary["usage"]["cache_hits"] == 2
    assert summary["usage"]["model_calls"] == 2  # every call the harness made, each answered by the cache
    assert "Usage: 0 model calls, 240 tokens, 2 cache hits" in (again / "summary.md").read_text()
    assert [r["generation"]["cache_hits"] for r in read_jsonl(again / "steps.jsonl")] == [1, 1]
    assert summary["metrics"]["subproblem"] == 1.0
    first_summary = json.loads((original / "summary.json").read_text())
    assert first_summary["usage"]["endpoint_calls"] == 2 and first_summary["usage"]["cache_hits"] == 0
