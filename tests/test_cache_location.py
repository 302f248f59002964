"""The response cache lives in one folder per user by default ($XDG_CACHE_HOME/pytest-agentbench, else
~/.cache/pytest-agentbench), so a run started from another folder reuses the answers (and rebuilt targets) of
the first; a `.agentbench_cache/` an earlier release left in the folder is still used, and the run says so; a
run whose answers were replayed from the cache says so in its headline, with the way to get new samples.

The runs are real pytest processes started from two folders, over two one-step SciCode problems, with a
scripted model on 127.0.0.1 that answers each problem once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_agentbench.core.run_options import default_cache_dir, user_cache_dir
from pytest_agentbench.core.text import printable

from helpers.bench_runs import read_jsonl, run_dirs
from helpers.fake_openai import FakeOpenAI
from helpers.scicode_builders import asked_number, custom_data_args, numbered_problems, write_dataset

PROBLEMS, TARGETS = numbered_problems((1, 2))


def right_answer(body: dict) -> dict:
    k = asked_number(body)
    return {"text": f"```python\ndef f{k}():\n    return {k}\n```"}


@pytest.fixture
def server(server):
    for _ in PROBLEMS:  # one answer per problem: a second run that asks again gets an error
        server.reply_with(right_answer)
    return server


def run_in(folder: Path, data: Path, h5: Path, server: FakeOpenAI, **env: str) -> subprocess.CompletedProcess:
    """pytest started in ``folder`` (its own rootdir) as a user starts it, with no --bench-cache-dir."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pytest.ini").write_text("[pytest]\n")
    base = {k: v for k, v in os.environ.items() if k not in ("AGENTBENCH_CACHE_DIR", "XDG_CACHE_HOME")}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            *custom_data_args(data, h5, "--bench-mode=naive", model="m", server=server),
        ],
        cwd=folder,
        env={**base, "AGENTBENCH_ISOLATION": "off", "AGENTBENCH_OFFLINE": "1", **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.e2e
@pytest.mark.slow
def test_a_run_from_another_folder_reuses_the_per_user_cache_and_says_its_answers_are_replayed(
    tmp_path, shared_data, server
):
    data, h5 = write_dataset(tmp_path, shared_data, targets=TARGETS, problems=PROBLEMS)
    env = {"HOME": str(tmp_path / "home"), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    first = run_in(tmp_path / "one", data, h5, server, **env)
    assert first.returncode == 0, first.stdout + first.stderr
    asked = len(server.requests)
    assert asked == 2
    assert (tmp_path / "xdg" / "pytest-agentbench" / "responses-v1").is_dir()
    assert not (tmp_path / "one" / ".agentbench_cache").exists()
    assert "answers replayed" not in first.stdout

    second = run_in(tmp_path / "two", data, h5, server, **env)
    assert second.returncode == 0, second.stdout + second.stderr
    assert len(server.requests) == asked  # every answer came from the first run's cache
    run = run_dirs(tmp_path / "two")[0]
    assert [r["generation"]["answers"] for r in read_jsonl(run / "steps.jsonl")] == ["replayed", "replayed"]
    headline = "answers replayed: 2 of 2 items replayed from the response cache (2 cache hits): these are earlier "
    assert headline in second.stdout and "--bench-cache=off asks the model again" in second.stdout
    markdown = (run / "summary.md").read_text()
    assert headline in markdown and markdown.index(headline) < markdown.index("Run counts")
    assert "answers replayed: 2 of 2 items" in (run / "report.html").read_text()


@pytest.mark.e2e
@pytest.mark.slow
def test_an_earlier_release_s_folder_cache_is_used_and_announced(tmp_path, shared_data, server):
    data, h5 = write_dataset(tmp_path, shared_data, targets=TARGETS, problems=PROBLEMS)
    folder = tmp_path / "project"
    legacy = folder / ".agentbench_cache"
    legacy.mkdir(parents=True)
    result = run_in(folder, data, h5, server, HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(tmp_path / "xdg"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert (legacy / "responses-v1").is_dir() and not (tmp_path / "xdg" / "pytest-agentbench").exists()
    note = f"cache: using {legacy}, the folder-local cache of an earlier release"
    assert note in result.stdout.replace("\n", " ") or note in result.stdout
    run = run_dirs(folder)[0]
    assert printable(note, markdown=True) in (run / "summary.md").read_text()  # a note as summary.md escapes it


def test_the_per_user_folder_follows_xdg_then_home(tmp_path):
    assert user_cache_dir({"XDG_CACHE_HOME": "/x/c", "HOME": "/h"}) == Path("/x/c/pytest-agentbench")
    assert user_cache_dir({"XDG_CACHE_HOME": "relative", "HOME": "/h"}) == Path("/h/.cache/pytest-agentbench")
    assert user_cache_dir({"HOME": "/h"}) == Path("/h/.cache/pytest-agentbench")
    assert default_cache_dir({"HOME": "/h"}, tmp_path) == Path("/h/.cache/pytest-agentbench")
    (tmp_path / ".agentbench_cache").mkdir()
    assert default_cache_dir({"HOME": "/h"}, tmp_path) == tmp_path / ".agentbench_cache"


def test_the_per_user_cache_stays_hidden_from_model_code(tmp_path):
    """The new default is one of the run's private folders: the sandbox masks it (and self-tests with it masked)."""
    from pytest_agentbench.core.options import Sources, resolve
    from pytest_agentbench.core.run_options import RUN_OPTIONS
    from pytest_agentbench.sandbox.options import private_folders

    opts = resolve(
        RUN_OPTIONS,
        Sources(
            cli={}, ini={}, env={"XDG_CACHE_HOME": str(tmp_path / "xdg")}, invocation_dir=tmp_path, rootdir=tmp_path
        ),
    )
    cache = tmp_path / "xdg" / "pytest-agentbench"
    assert opts["cache_dir"] == cache and not str(cache).startswith(sys.prefix)
    assert private_folders(opts)[str(cache)] == "--bench-cache-dir"
