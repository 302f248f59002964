"""Issue 22, "mypy runs in CI on the package": ``python -m mypy`` with the ``[tool.mypy]`` settings of
pyproject.toml (the whole package; core/, sandbox/, envs/, models/ and report/ as strictly as ``--strict``)
finds no error.

Without mypy installed (it is in the ``test`` extra) the test is skipped locally with the reason; under
``CI=true`` that is a failure, as CI installs the extra.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MYPY_TIMEOUT = 900  # seconds: a cold run of the whole package takes well under a minute on 2 cores


def require_mypy() -> None:
    if importlib.util.find_spec("mypy") is not None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail("CI=true and mypy is not installed: CI installs it with the test extra (pip install -e '.[test]')")
    pytest.skip("mypy is not installed (pip install -e '.[test]')")


def test_mypy_passes_on_the_package() -> None:
    require_mypy()
    # no file arguments: the files, the Python version and the per-layer strictness all come from pyproject.toml
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")],
                          cwd=ROOT, capture_output=True, text=True, timeout=MYPY_TIMEOUT)
    output = (proc.stdout + proc.stderr).strip()
    assert proc.returncode == 0, f"mypy found errors (fix them; see [tool.mypy] in pyproject.toml):\n{output}"
    assert "Success: no issues found" in output, output
