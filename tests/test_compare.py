"""``python -m pytest_agentbench compare``: exactly the flipped items of two runs made to differ on known steps."""
from __future__ import annotations

import json
import re

import pytest
import scipy.stats  # noqa: F401  loaded before pytester's in-process runs, which cannot re-import numpy's C parts
from matplotlib.backends import backend_agg  # noqa: F401  (same reason)

from conftest import run_dirs
from pytest_agentbench.__main__ import main as cli
from pytest_agentbench.report.compare import compare
from test_gates import tiny  # noqa: F401  (a fixture)


def test_compare_lists_exactly_the_flipped_items(tiny, pytester, capsys):
    assert tiny("--bench-run-id=a", broken="3.1").ret == 1
    assert tiny("--bench-run-id=b", broken="1.2,2.1").ret == 1
    runs = {p.name: p for p in run_dirs(pytester.path)}
    assert cli(["compare", str(runs["a"]), str(runs["b"] / "summary.json")]) == 0
    out = capsys.readouterr().out
    flipped = [line.split() for line in out.splitlines() if "->" in line and line.startswith("  ")]
    assert flipped == [["1.2", "pass", "->", "fail", "A:", "pass", "B:", "fail"],
                       ["2.1", "pass", "->", "fail", "A:", "pass", "B:", "fail"],
                       ["3.1", "fail", "->", "pass", "A:", "fail", "B:", "pass"]]
    assert "flipped items (3):" in out
    # main: A resolves 1 and 2 (2/3), B only 3 (1/3); subproblem 4/5 -> 3/5
    assert re.search(r"^main +66\.7% +33\.3% +-33\.3 pp$", out, re.M)
    assert re.search(r"^subproblem +80\.0% +60\.0% +-20\.0 pp$", out, re.M)
    assert "McNemar exact test over items: 2 pass -> fail, 1 fail -> pass, p = 1" in out
    assert "bootstrap 95% (main, resampling tasks)" in out
    assert cli(["compare", "--markdown", str(runs["a"]), str(runs["b"])]) == 0
    md = capsys.readouterr().out
    assert "| 3.1 | 3 | fail -> pass | fail | pass |" in md


def fake_summary(statuses: dict[str, str], **settings) -> dict:
    items = [{"id": i, "task": i.split(".")[0], "status": s, "scored": True} for i, s in statuses.items()]
    return {"settings": {"benchmark": "scicode", "split": "validation", "model": "m", **settings},
            "metrics": {}, "items": items}


def test_mcnemar_and_bootstrap_are_exact_and_deterministic():
    a = fake_summary({f"{t}.{s}": "pass" for t in range(1, 21) for s in (1, 2)})
    b = fake_summary({f"{t}.{s}": ("fail" if t <= 8 and s == 2 else "pass") for t in range(1, 21) for s in (1, 2)})
    first, second = compare(a, b), compare(a, b)
    assert first.mcnemar["item"] == {"worse": 8, "better": 0, "n": 40, "p": pytest.approx(2 * 0.5 ** 8)}
    assert first.mcnemar["task"]["worse"] == 8
    assert first.bootstrap == second.bootstrap  # fixed seed
    main = first.bootstrap["main"]
    assert main["delta"] == pytest.approx(-0.4) and main["delta_ci"][1] < 0  # resampling tasks: a clear drop
    assert main["delta_ci"][0] <= -0.4 <= main["delta_ci"][1]


def test_compare_refuses_runs_with_other_settings(tmp_path, capsys):
    for name, background in (("a", True), ("b", False)):
        (tmp_path / f"{name}.json").write_text(json.dumps(fake_summary({"1.1": "pass"}, background=background)))
    assert cli(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 2
    assert "refusing to compare runs made with different settings: background: true vs false" in capsys.readouterr().err
    assert cli(["compare", "--force", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    assert cli(["compare", str(tmp_path / "a.json"), str(tmp_path / "missing")]) == 2
