"""CI checks the oldest and the newest supported releases: the compatibility-sensitive tests
(collection and ids, ``-k``/``-m``/``--deselect``/``--lf``, xdist placement, resume) run again in fresh venvs
that pin the lowest supported pytest/pytest-xdist and the newest this project was tested with (the bounds in
pyproject.toml). ``.ci/compat-venv`` builds each venv once (reused while pyproject.toml and constraints.txt are
unchanged); the newest pair is the one constraints.txt pins for the suite itself.

Without ``CI=true`` a venv that cannot be built (no network, no index) skips its case with the reason; under
``CI=true`` that is a failure. ``AGENTBENCH_COMPAT=0`` leaves the matrix out (e.g. a quick local run);
``AGENTBENCH_COMPAT_TESTS="tests/a.py tests/b.py"`` runs those instead of the sensitive list."""

from __future__ import annotations

import os
import subprocess

import pytest
import xdist

from helpers.bench_runs import REPO, SHARED_DATA
from helpers.capabilities import COMPAT_MATRIX, needs

# e2e: it runs pytest in other venvs. Its own bounds (a venv build of up to 1200 s, a run of up to 3000 s) are
# longer than .ci/run's per-test hang guard (--timeout=1800), so it gets a guard to match.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(4500)]

MATRIX = COMPAT_MATRIX
# what depends on pytest's and xdist's behaviour; the remote-worker tests run where their hosts are
SENSITIVE = [
    "tests/test_ids.py",
    "tests/test_xdist_compat.py",
    "tests/test_placement.py",
    "tests/test_distribution_plugins.py",  # the plugins' hook order, the worker input, unconfigure
    "tests/test_replay_resume_selection.py::test_resume_alone_keeps_the_runs_deselect",
    "tests/test_scicode_plugin.py::test_k_and_deselect_work_on_node_ids",
    "tests/test_scicode_plugin.py::test_prefilled_marker_selects_the_three_official_steps",
    "tests/test_scicode_plugin.py::test_last_failed_reruns_only_the_failed_steps",
    # the worker-to-controller delivery through xdist's reports, and xdist's crashed-worker hook; the module's
    # other end-to-end tests send the same deliveries (a cap, core-bench attempts) and its unit tests use no pytest
    "tests/test_controller_writer.py::test_workers_write_nothing_yet_records_files_and_cache_arrive_once",
    "tests/test_controller_writer.py::"
    "test_a_worker_killed_mid_item_leaves_an_error_record_and_resume_runs_exactly_the_lost_items",
    "tests/test_pathargs.py",  # works out the rootdir/configfile by pytest's rules, which change between releases
]
# left out of the venvs (they run in the suite itself): a second real -n 2 run of the placement scheduler, which
# sends the work through the same xdist calls as test_placement.py's first run and differs from it only in the
# plugin's own reading of durations.json
NOT_RELEASE_SENSITIVE = ["tests/test_placement.py::test_durations_of_an_earlier_run_order_the_work"]


# The releases this session itself runs on (constraints.txt pins the newest pair for the suite): every test of the
# suite is that case already, so a venv of the same pair would only run the sensitive tests a second time.
RUNNING = (pytest.__version__, xdist.__version__)


@pytest.mark.skipif(os.environ.get("AGENTBENCH_COMPAT") == "0", reason="AGENTBENCH_COMPAT=0")
@pytest.mark.parametrize("pytest_version, xdist_version", MATRIX, ids=[f"pytest{p}-xdist{x}" for p, x in MATRIX])
def test_the_sensitive_tests_pass_on_the_supported_releases(pytest_version, xdist_version, tmp_path):
    if (pytest_version, xdist_version) == RUNNING:
        pytest.skip(
            f"this session runs on pytest {pytest_version} / pytest-xdist {xdist_version}: the suite is this case"
        )
    python = needs("compat-venv", pytest_version, xdist_version)
    versions = subprocess.run(
        [python, "-c", "import pytest, xdist; print(pytest.__version__, xdist.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert versions == [pytest_version, xdist_version]
    env = {**os.environ, "PYTHONPATH": str(REPO), "AGENTBENCH_DATA_DIR": str(SHARED_DATA), "AGENTBENCH_COMPAT": "0"}
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_ADDOPTS", None)
    chosen = os.environ.get("AGENTBENCH_COMPAT_TESTS", "").split() or SENSITIVE  # e.g. one module, to try the matrix
    left_out = [f"--deselect={test}" for test in NOT_RELEASE_SENSITIVE]
    done = subprocess.run(
        [
            python,
            "-m",
            "pytest",
            *chosen,
            *left_out,
            "-p",
            "no:cacheprovider",
            "-q",
            "-x",
            f"--basetemp={tmp_path / 'tmp'}",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=3000,
    )
    tail = (done.stdout + done.stderr)[-4000:]
    assert done.returncode == 0, f"on pytest {pytest_version} / pytest-xdist {xdist_version}:\n{tail}"
    assert " passed" in tail and "skipped" not in tail.splitlines()[-1], tail
