"""The scale of every retry pause (core/retrywait.py): what a user keeps (1) and what the tests run with (0)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pytest_agentbench.core.errors import ConfigError
from pytest_agentbench.core.retrywait import RETRY_WAIT_SCALE_ENV, pause_before_retry, retry_wait_scale

from helpers.bench_runs import checkout_python_path


def test_a_user_waits_the_computed_pause(monkeypatch):
    monkeypatch.delenv(RETRY_WAIT_SCALE_ENV)
    assert retry_wait_scale() == 1.0


@pytest.mark.parametrize("value", ["0", "0.5", "1", " 2 "])
def test_a_scale_is_any_number_from_zero(monkeypatch, value):
    monkeypatch.setenv(RETRY_WAIT_SCALE_ENV, value)
    assert retry_wait_scale() == float(value)


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "fast"])
def test_a_bad_scale_names_the_variable_and_the_fix(monkeypatch, value):
    monkeypatch.setenv(RETRY_WAIT_SCALE_ENV, value)
    with pytest.raises(ConfigError, match=rf"{RETRY_WAIT_SCALE_ENV}=.*number >= 0"):
        pause_before_retry(1.0)


def test_the_session_runs_with_no_waits_and_its_children_inherit_it():
    assert os.environ[RETRY_WAIT_SCALE_ENV] == "0"
    # an hour's backoff does not hold the test (it would hang to the suite's guard): the hour is returned unslept,
    # for the retry-time budget to count as spent
    assert pause_before_retry(3600) == 3600
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from pytest_agentbench.core.retrywait import retry_wait_scale; print(retry_wait_scale())",
        ],
        env={**os.environ, "PYTHONPATH": checkout_python_path()},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "0.0"
