"""Inputs are checked where they enter, before any item runs, and a failed data
lookup leaves nothing behind; the project's tests find the data through $AGENTBENCH_DATA_DIR."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from pytest_agentbench.core.data import DataError, DataFile, download, verify

VALIDATION_STEP = ["--bench=scicode", "--bench-split=validation", "--bench-ids=1.1", "--model=oracle"]


@pytest.mark.parametrize(
    "arg,message",
    [
        ("--bench-timeout=nan", "--bench-timeout must be a positive number, got 'nan'"),
        ("--bench-timeout=inf", "--bench-timeout must be a positive number, got 'inf'"),
        ("--bench-set=memory_limit=0", "--bench-set memory_limit must be a positive number, got '0'"),
        ("--bench-set=memory_limit=-1", "--bench-set memory_limit must be a positive number, got '-1'"),
        ("--bench-set=memory_limit=nan", "--bench-set memory_limit must be a positive number, got 'nan'"),
        ("--bench-ids=,,,", "--bench-ids ',,,' names nothing"),
        ("--bench-set=max_consecutive_errors=-1", "--bench-set max_consecutive_errors must be"),
        ("--bench-difficulty=easy", "--bench-difficulty (a core-bench option) do(es) not apply to --bench=scicode"),
    ],
)
@pytest.mark.e2e
@pytest.mark.slow
def test_bad_input_is_a_usage_error_before_any_item(bench, pytester, arg, message):
    result = bench(*VALIDATION_STEP, arg)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()
    assert not (pytester.path / "reports").exists()


@pytest.mark.e2e
@pytest.mark.slow
def test_shared_options_are_never_refused(bench):
    result = bench(*VALIDATION_STEP, "--bench-env=host", "--bench-set=executor=subprocess", "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.OK, result.stderr.str()


@pytest.mark.e2e
@pytest.mark.slow
def test_report_dir_that_cannot_be_created(bench, pytester):
    blocker = pytester.path / "not-a-folder"
    blocker.write_text("")
    result = bench(*VALIDATION_STEP, f"--bench-report-dir={blocker / 'reports'}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"--bench-report-dir {blocker / 'reports'} cannot be created: {blocker} is a file" in result.stderr.str()
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


def test_checksum_mismatch_names_the_escape_hatch(tmp_path):
    path = tmp_path / "problems.jsonl"
    path.write_text("{}\n")
    with pytest.raises(DataError, match="pass --bench-set=allow_custom_data=true to use it anyway"):
        verify(path, DataFile("problems.jsonl", "http://127.0.0.1:9/p.jsonl", "0" * 64, "scicode"))


def test_failed_download_leaves_no_empty_folders(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dest = tmp_path / "data" / "scicode" / "problems.jsonl"
    with pytest.raises(DataError, match="failed after 1 attempts"):
        download(f"http://127.0.0.1:{port}/problems.jsonl", dest, retries=0)
    assert list(tmp_path.iterdir()) == []


def test_tests_find_the_data_through_the_environment():
    """No test module hard-codes where the upstream data sits: bench_runs.SHARED_DATA honours
    $AGENTBENCH_DATA_DIR, so the suite passes from a clone in any folder."""
    here = Path(__file__).parent
    # the shared data folder in any spelling: joined with /, relative to the checkout or a machine's absolute path
    pattern = re.compile(r"""["']shared["']\s*/\s*["']data["']|shared""" + "/data")
    modules = [*here.glob("*.py"), *here.glob("helpers/*.py")]
    offenders = [p.name for p in modules if p.name != "bench_runs.py" and pattern.search(p.read_text())]
    assert offenders == []
    assert pattern.search('root = "/srv/shared' + '/data"') and pattern.search('REPO.parent / "shared" / ' + '"data"')


@pytest.mark.e2e
def test_failed_data_lookup_creates_no_folders(bench, tmp_path):
    outside = tmp_path / "outside"
    result = bench("--bench=scicode", "--model=oracle", f"--bench-data-dir={outside / 'data'}", "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "not found" in result.stderr.str() and "downloads are off" in result.stderr.str()
    assert not outside.exists()
