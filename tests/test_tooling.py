"""Issue 22, "mypy and ruff pass in CI": the type checker and the linter, each with its settings in
pyproject.toml, find nothing in the repository.

- mypy (``[tool.mypy]``): the whole package; core/, sandbox/, envs/, models/ and report/ as strictly as
  ``--strict``.
- ruff (``[tool.ruff]``): lint (``ruff check``) and format (``ruff format --check``) over the repository.

Both are in the ``test`` extra, pinned, so CI and a developer get the same verdicts. Without them a test is
skipped locally and fails under ``CI=true`` (``needs("dev-tool", ...)``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from capabilities import needs

ROOT = Path(__file__).resolve().parent.parent
TOOL_TIMEOUT = 900  # seconds: a cold mypy run of the whole package takes well under a minute on 2 cores


def run_tool(*args: str) -> tuple[int, str]:
    # no file arguments where the tool's settings name them: what is checked comes from pyproject.toml
    proc = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=TOOL_TIMEOUT)
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def test_mypy_passes_on_the_package() -> None:
    needs("dev-tool", "mypy")
    status, output = run_tool("mypy", "--config-file", str(ROOT / "pyproject.toml"))
    assert status == 0, f"mypy found errors (fix them; see [tool.mypy] in pyproject.toml):\n{output}"
    assert "Success: no issues found" in output, output


def test_ruff_finds_nothing_to_lint() -> None:
    needs("dev-tool", "ruff")
    status, output = run_tool("ruff", "check", "--no-cache", ".")
    assert status == 0, f"ruff check found problems (`ruff check --fix .` mends many; see [tool.ruff]):\n{output}"


def test_the_code_is_formatted_as_ruff_formats_it() -> None:
    needs("dev-tool", "ruff")
    status, output = run_tool("ruff", "format", "--check", "--no-cache", ".")
    assert status == 0, f"files ruff would reformat (run `ruff format .`):\n{output}"
