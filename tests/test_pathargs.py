"""An option value written with a space must not move pytest's rootdir, ini file and conftest cut-off."""

from __future__ import annotations

import os

import pytest

from pytest_agentbench.pytest_plugin.options import all_options
from pytest_agentbench.pytest_plugin.pathargs import determine_setup

PATH_OPTIONS = sorted((o for o in all_options() if o.kind == "path"), key=lambda o: o.flag)


@pytest.fixture
def outside(pytester: pytest.Pytester):
    """A folder beside the project (not below it), so taking it for a test path moves the rootdir."""
    path = pytester.path.parent / f"{pytester.path.name}-outside"
    path.mkdir()
    return path


def test_every_path_option_is_covered():
    flags = {o.flag for o in PATH_OPTIONS}
    assert {
        "--bench-data-dir",
        "--bench-report-dir",
        "--bench-cache-dir",
        "--bench-resume",
        "--bench-baseline",
        "--bench-h5",
        "--bench-capsules-dir",
    } <= flags


@pytest.mark.parametrize("option", PATH_OPTIONS, ids=lambda o: o.flag)
@pytest.mark.e2e
@pytest.mark.slow
def test_space_form_that_moves_the_rootdir_is_a_usage_error(pytester, outside, option):
    pytester.makeini("[pytest]\nagentbench_run_id = from-ini\n")
    value = outside / "summary.json" if option.exists == "file" else outside
    if option.exists == "file":
        value.write_text("{}")
    result = pytester.runpytest("-p", "no:cacheprovider", option.flag, str(value), "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = result.stderr.str()
    if not option.shown:  # a setting without a flag of its own: its old flag, in either form, names the new spelling
        assert f"{option.flag} is now --bench-set {option.name}=" in text, text
        return
    assert f"'{option.flag} {value}'" in text
    assert f"Write the option with '=': {option.flag}={value}" in text
    assert f"the ini file {pytester.path / 'tox.ini'}" in text or f"the ini file {pytester.path / 'pytest.ini'}" in text
    assert f"conftest.py files under {pytester.path}" in text


@pytest.mark.e2e
def test_a_non_path_value_that_names_a_folder_with_its_own_ini_is_refused(pytester):
    pytester.makeini("[pytest]\n")
    (pytester.path / "scicode").mkdir()
    (pytester.path / "scicode" / "pytest.ini").write_text("[pytest]\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--bench", "scicode", "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "Write the option with '=': --bench=scicode" in result.stderr.str()


@pytest.mark.e2e
@pytest.mark.slow
def test_space_form_from_pytest_addopts_is_refused(pytester, outside, monkeypatch):
    pytester.makeini("[pytest]\n")
    monkeypatch.setenv("PYTEST_ADDOPTS", f"--bench-report-dir {outside}")
    result = pytester.runpytest("-p", "no:cacheprovider", "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"--bench-report-dir={outside}" in result.stderr.str()


@pytest.mark.e2e
@pytest.mark.slow
def test_equals_form_inside_the_project_keeps_ini_key_and_conftest_model(pytester, tiny):
    """`--bench-report-dir=reports` inside the project: the ini key and the conftest's bench_model (which breaks
    step 2.2; the built-in client could not even be built) take effect."""
    pytester.makeini("[pytest]\nagentbench_run_id = from-ini\n")
    (pytester.path / "reports").mkdir()
    result = tiny("--bench-report-dir=reports", broken="2.2")
    result.assert_outcomes(passed=4, failed=1)
    assert (pytester.path / "reports" / "scicode" / "mutant" / "from-ini" / "steps.jsonl").is_file()


@pytest.mark.parametrize("exists", [False, True], ids=["missing", "harmless"])
@pytest.mark.e2e
def test_space_form_of_a_path_option_is_refused_whether_or_not_the_path_exists(pytester, exists):
    """A path that does not exist yet (or one inside the project) leaves pytest's setup alone today, and the same
    command is refused the day it exists: refused always, naming the option and its '=' form."""
    pytester.makeini("[pytest]\n")
    value = pytester.path / "runs" / "my run"
    if exists:
        value.mkdir(parents=True)
    result = pytester.runpytest("-p", "no:cacheprovider", "--bench-resume", str(value), "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    text = result.stderr.str()
    assert f"'--bench-resume {value}': a path option takes its value after '='" in text, text
    assert f"Write the option with '=': --bench-resume='{value}'" in text, text


@pytest.mark.e2e
@pytest.mark.slow
def test_equals_form_outside_the_project_works(pytester, tiny, outside):
    pytester.makeini("[pytest]\nagentbench_run_id = from-ini\n")
    result = tiny(f"--bench-report-dir={outside}", broken="2.2")
    result.assert_outcomes(passed=4, failed=1)
    assert (outside / "scicode" / "mutant" / "from-ini" / "steps.jsonl").is_file()


# (files to write, free arguments, -c, --rootdir): the layouts where pytest's rules differ, including the ones
# that changed between releases (pytest.toml and [tool.pytest] in 9.0, a bare pyproject.toml in 8.1, -c of a
# non-file in 9.2); "{outside}" is a folder beside the project
LAYOUTS = {
    "no-arguments": ({"tox.ini": "[pytest]\n"}, [], None, None),
    "sub-pytest-ini": ({"tox.ini": "[pytest]\n", "sub/pytest.ini": ""}, ["sub"], None, None),
    "node-id": ({"pytest.ini": "", "sub/setup.cfg": "[tool:pytest]\n", "sub/t.py": ""}, ["sub/t.py::t"], None, None),
    "outside": ({"tox.ini": "[pytest]\n"}, ["{outside}"], None, None),
    "tox-ini-without-pytest": ({"sub/tox.ini": "[tox]\n", "sub/setup.py": ""}, ["sub"], None, None),
    "setup-cfg-without-pytest": ({"sub/setup.cfg": "[metadata]\n"}, ["sub"], None, None),
    "bare-pyproject": ({"sub/pyproject.toml": "[project]\nname = 'x'\n"}, ["sub"], None, None),
    "tool-pytest-table": ({"sub/pyproject.toml": "[tool.pytest]\nminversion = '8.0'\n"}, ["sub"], None, None),
    "ini-options": ({"sub/pyproject.toml": "[tool.pytest.ini_options]\n"}, ["sub"], None, None),
    "pytest-toml": ({"pytest.ini": "", "sub/pytest.toml": ""}, ["sub"], None, None),
    "two-folders": ({"a/tox.ini": "[pytest]\n", "b/x": ""}, ["a", "b"], None, None),
    "rootdir": ({"sub/pytest.ini": ""}, ["sub"], None, "{outside}"),
    "config-file": ({"other.ini": "[pytest]\n", "sub/pytest.ini": ""}, ["sub"], "other.ini", None),
    "config-file-not-a-file": ({"sub/pytest.ini": ""}, ["sub"], os.devnull, None),
    "empty-hidden-ini": ({"tox.ini": "[pytest]\n", "sub/.pytest.ini": "", "sub/setup.py": ""}, ["sub"], None, None),
    "hidden-ini": ({"tox.ini": "[pytest]\n", "sub/.pytest.ini": "[pytest]\n"}, ["sub"], None, None),
    "config-file-and-rootdir": ({"other.ini": "[pytest]\n", "sub/x": ""}, ["sub"], "other.ini", "{outside}"),
}


@pytest.mark.parametrize("files, free, inifile, rootdir", LAYOUTS.values(), ids=list(LAYOUTS))
def test_the_setup_is_worked_out_as_pytest_does(pytester, outside, files, free, inifile, rootdir):
    """The rootdir and configfile this plugin works out for an argument list are the ones pytest finds."""
    for rel, text in files.items():
        (pytester.path / rel).parent.mkdir(parents=True, exist_ok=True)
        (pytester.path / rel).write_text(text)
    free = [arg.format(outside=outside) for arg in free]
    rootdir = rootdir and rootdir.format(outside=outside)
    args = [*free, *(["-c", inifile] if inifile else []), *(["--rootdir", rootdir] if rootdir else [])]
    config = pytester.parseconfig(*args)
    assert determine_setup(inifile, free, rootdir, pytester.path) == (config.rootpath, config.inipath)
