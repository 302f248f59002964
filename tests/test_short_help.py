"""A short ``pytest --help``: the settings a user sets in a normal run have a flag of their own; every other one
(``Option.shown=False``) is set with the one repeatable ``--bench-set NAME=VALUE``, checked by the same
declarations, and its old flag is refused with the new spelling. ``python -m pytest_agentbench options`` lists
every setting, and docs/options.md holds the same listing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_agentbench.core.options import SET_FLAG, OptionError, set_values
from pytest_agentbench.pytest_plugin.listing import MARKDOWN_END, MARKDOWN_START
from pytest_agentbench.pytest_plugin.options import all_options

REPO = Path(__file__).resolve().parents[1]
HIDDEN = "executor"  # an option declared shown=False


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "100"},
    )


def test_an_option_not_shown_has_no_flag_in_help_and_bench_set_has_one(help_of_pytest):
    flags = set(re.findall(r"^ {2}(--[a-z0-9-]+)", help_of_pytest, re.MULTILINE))
    hidden = [o for o in all_options() if not o.shown]
    assert hidden and not {o.flag for o in hidden} & flags
    assert SET_FLAG in flags
    assert {o.flag for o in all_options() if o.shown} <= flags
    assert "agentbench_executor (string)" in help_of_pytest  # its ini key stays


def test_bench_set_names_are_checked_by_the_declarations():
    options = all_options()
    assert set_values(["executor=subprocess", "tool-concurrency=3"], options) == {
        "executor": "subprocess",
        "tool_concurrency": "3",
    }
    with pytest.raises(OptionError, match=r"no setting is called 'executer'; did you mean executor"):
        set_values(["executer=fork"], options)
    with pytest.raises(OptionError, match="write NAME=VALUE"):
        set_values(["executor"], options)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "test_x.py").write_text("def test_x():\n    assert True\n", encoding="utf-8")
    return tmp_path


@pytest.mark.slow
def test_a_removed_flag_is_a_usage_error_naming_its_new_spelling(project):
    done = run("-m", "pytest", "-p", "no:cacheprovider", "--bench-executor=subprocess", "test_x.py", cwd=project)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert "--bench-executor is now --bench-set executor=fork|subprocess (or ini agentbench_executor)" in done.stderr
    done = run("-m", "pytest", "-p", "no:cacheprovider", "--no-bench-overlap", "test_x.py", cwd=project)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR
    assert "--bench-overlap/--no-bench-overlap is now --bench-set overlap=true|false" in done.stderr


@pytest.mark.slow
def test_bench_set_sets_the_option_and_a_typo_names_the_close_ones(project):
    show = "def test_x(pytestconfig):\n    from pytest_agentbench.pytest_plugin.session import settings_of\n"
    show += "    opts = settings_of(pytestconfig)\n    print('executor:', opts.executor, opts.origin('executor'))\n"
    (project / "test_x.py").write_text(show, encoding="utf-8")
    done = run(
        "-m", "pytest", "-p", "no:cacheprovider", "-s", f"{SET_FLAG}=executor=subprocess", "test_x.py", cwd=project
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "executor: subprocess command line" in done.stdout
    base = ("-m", "pytest", "-p", "no:cacheprovider", "--bench=scicode", "--model=oracle", "--collect-only")
    done = run(*base, f"{SET_FLAG}=executer=fork", cwd=project)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR
    assert "no setting is called 'executer'; did you mean executor" in done.stderr
    done = run(*base, f"{SET_FLAG}=executor=threads", cwd=project)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR
    assert "--bench-set executor 'threads' is not a valid value" in done.stderr


def test_the_options_command_lists_every_setting(tmp_path):
    done = run("-m", "pytest_agentbench", "options", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for option in all_options():
        assert f"  {option.name}" in done.stdout
    assert "set with: --bench-set executor=fork|subprocess; ini agentbench_executor" in done.stdout


def test_docs_options_page_holds_the_generated_listing(tmp_path):
    done = run("-m", "pytest_agentbench", "options", "--markdown", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    page = (REPO / "docs" / "options.md").read_text(encoding="utf-8")
    start, end = page.index(MARKDOWN_START), page.index(MARKDOWN_END) + len(MARKDOWN_END)
    assert page[start:end] == done.stdout.strip(), (
        "docs/options.md's generated section differs from the declarations: paste "
        "`python -m pytest_agentbench options --markdown` between its markers"
    )
