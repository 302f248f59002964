"""The top of the repository, as a user of a pytest plugin project expects it: a root
``conftest.py`` for the repository's own tests that cannot change a benchmark run started in the checkout, and
``data/`` and ``reports/`` as the documented default folders, each with a README and its contents ignored."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_touching_names(source: str, namespace: dict[str, object] | None = None) -> list[str]:
    """What a conftest.py defines that could change a benchmark run: ``bench_*`` names (a fixture that replaces
    the plugin's model or environment) and pytest hooks or fixtures of any name, read from the source (top-level
    definitions, assignments and imports) and, when given, from the imported module's namespace."""
    found = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
            if any("fixture" in ast.unparse(d) for d in node.decorator_list):
                found.append(f"fixture {node.name}")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [(a.asname or a.name).split(".")[0] for a in node.names]
        else:
            continue
        found += [name for name in names if name.startswith(("bench", "pytest_")) and name != "pytest_plugins"]
    found += [
        name
        for name in (namespace or {})
        if name.startswith(("bench", "pytest_")) and name != "pytest_plugins" and name not in found
    ]
    return found


def test_the_root_conftest_cannot_change_a_benchmark_run():
    path = REPO / "conftest.py"
    assert path.is_file(), "the repository has a root conftest.py for its own tests"
    spec = importlib.util.spec_from_file_location("root_conftest", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert run_touching_names(path.read_text(encoding="utf-8"), vars(module)) == []
    assert set(module.collect_ignore) == {"data", "reports", "perf"}  # the folders that hold no tests of ours


def test_the_conftest_check_finds_what_it_looks_for():
    source = (
        "import pytest\nfrom x import bench_env\n\n@pytest.fixture\ndef bench_model():\n    pass\n\n"
        "@pytest.fixture(scope='session')\ndef model():\n    pass\n\n"
        "def pytest_collection_modifyitems(items):\n    pass\n\nbench_settings = {}\npytest_plugins = []\n"
    )
    assert run_touching_names(source, {"pytest_configure": None}) == [
        "bench_env",
        "fixture bench_model",
        "bench_model",
        "fixture model",
        "pytest_collection_modifyitems",
        "bench_settings",
        "pytest_configure",
    ]


@pytest.mark.parametrize(("folder", "option"), [("data", "--bench-data-dir"), ("reports", "--bench-report-dir")])
def test_default_folders_have_a_readme_and_ignore_their_contents(folder, option):
    """``data`` and ``reports`` are the defaults of the two options (relative to where pytest starts)."""
    from pytest_agentbench.core.run_options import RUN_OPTIONS

    default = next(o.default for o in RUN_OPTIONS if o.flag == option)
    assert default == folder, f"{option}'s default moved: update {folder}/README.md and this test"
    readme = (REPO / folder / "README.md").read_text(encoding="utf-8")
    assert option in readme
    rules = [
        line.strip()
        for line in (REPO / folder / ".gitignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert rules == ["*", "!.gitignore", "!README.md"]
