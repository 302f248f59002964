"""An external agent's install (``benchmarks.agents.install_into_folder``): made once, in whole or not at all."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from pytest_agentbench.benchmarks import agents

CHOICE = agents.AgentChoice("mini-swe-agent", "9.9.9")


def writer(text: str, exit_code: int = 0) -> list[str]:
    """A step writing ``text`` into the folder given as its last argument, then exiting with ``exit_code``."""
    code = f"import sys, pathlib; (pathlib.Path(sys.argv[1]) / 'tool.txt').write_text({text!r}); sys.exit({exit_code})"
    return [sys.executable, "-c", code]


@pytest.fixture
def agents_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(agents.AGENTS_DIR_ENV, str(tmp_path / "agents"))
    return tmp_path / "agents"


def test_an_install_is_made_once_and_reused(agents_dir):
    made: list[Path] = []

    def steps(folder: Path) -> list[list[str]]:
        made.append(folder)
        return [[*writer("first"), str(folder)]]

    folder = agents.install_into_folder(Path("/nonexistent"), CHOICE, "tool==9.9.9", steps, "the index")
    assert folder == agents_dir / "mini-swe-agent-9.9.9"
    assert (folder / "tool.txt").read_text() == "first" and (folder / "installed.json").is_file()
    assert made[0] != folder  # made elsewhere, then renamed into place
    assert agents.install_into_folder(Path("/nonexistent"), CHOICE, "tool==9.9.9", steps, "the index") == folder
    assert len(made) == 1
    assert sorted(p.name for p in agents_dir.iterdir()) == [".mini-swe-agent-9.9.9.lock", "mini-swe-agent-9.9.9"]
    assert folder.stat().st_mode & 0o777 == 0o755  # the sandbox's user reads it


def test_a_failed_install_leaves_nothing_behind(agents_dir):
    def steps(folder: Path) -> list[list[str]]:
        return [[*writer("half"), str(folder)], [*writer("broken", exit_code=3), str(folder)]]

    with pytest.raises(agents.AgentInstallError, match=r"installing tool==9.9.9 failed \(exit 3.*check the index"):
        agents.install_into_folder(Path("/nonexistent"), CHOICE, "tool==9.9.9", steps, "the index")
    assert [p.name for p in agents_dir.iterdir()] == [".mini-swe-agent-9.9.9.lock"]


def test_a_half_made_install_of_an_older_plugin_is_made_again(agents_dir):
    stale = agents_dir / "mini-swe-agent-9.9.9"
    stale.mkdir(parents=True)
    (stale / "tool.txt").write_text("half")  # no installed.json: it never finished
    folder = agents.install_into_folder(
        Path("/nonexistent"), CHOICE, "tool", lambda f: [[*writer("whole"), str(f)]], "the index"
    )
    assert (folder / "tool.txt").read_text() == "whole"


def test_installs_racing_for_one_agent_make_it_once(agents_dir):
    made: list[Path] = []
    results: list[Path] = []

    def steps(folder: Path) -> list[list[str]]:
        made.append(folder)
        return [[*writer("one"), str(folder)]]

    def install() -> None:
        results.append(agents.install_into_folder(Path("/nonexistent"), CHOICE, "tool", steps, "the index"))

    threads = [threading.Thread(target=install) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(made) == 1 and len(set(results)) == 1 and len(results) == 4
