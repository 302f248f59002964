"""The type checker and the linter, each with its settings in pyproject.toml, find nothing in the
repository, and constraints.txt pins the versions they and the rest of the suite run with.

- mypy (``[tool.mypy]``): the whole package; core/, sandbox/, envs/, models/ and report/ as strictly as
  ``--strict``.
- ruff (``[tool.ruff]``): lint (``ruff check``) and format (``ruff format --check``) over the repository.

Both are in the ``test`` extra, and constraints.txt pins them with everything else the tests import, so CI and a
developer's fresh venv get the same verdicts. Without them a test is
skipped locally and fails under ``CI=true`` (``needs("dev-tool", ...)``).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement

from helpers.capabilities import COMPAT_MATRIX, needs

if sys.version_info >= (3, 11):
    import tomllib
else:  # the package declares tomli for these
    import tomli as tomllib

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


def constraint_pins() -> dict[str, str]:
    """constraints.txt's pins that hold on this Python (a marker may restrict a pin to other versions)."""
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate():
                pins[req.name.lower().replace("_", "-")] = str(req.specifier).removeprefix("==")
    return pins


def test_constraints_pin_the_tools_within_the_supported_ranges() -> None:
    pins = constraint_pins()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["test"]]
    for tool in ("pytest", "pytest-xdist", "pytest-timeout", "mypy", "ruff", "numpy", "scipy", "openai"):
        assert tool in pins, f"constraints.txt pins no {tool}: run .ci/update-constraints"
    for req in declared:
        if req.marker is None or req.marker.evaluate():
            name = req.name.lower()
            assert name in pins, f"constraints.txt pins no {name}: run .ci/update-constraints"
            assert req.specifier.contains(pins[name]), f"constraints.txt's {name}=={pins[name]} is outside {req}"
    # the newest end of the compat matrix is what the suite itself runs with, and .ci/run builds the venvs of the
    # others (the suite's own run is the newest case)
    assert COMPAT_MATRIX[-1] == (pins["pytest"], pins["pytest-xdist"])
    built = re.search(r"^for pins in (.*); do$", (ROOT / ".ci" / "run").read_text(), re.MULTILINE)
    assert built and [tuple(p.strip('"').split()) for p in built.group(1).split('" "')] == COMPAT_MATRIX[:-1]
