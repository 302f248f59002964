"""The comparison in the viewer: a run with a baseline shows the metrics side by side with
deltas and intervals, the gates with their numbers and the flipped items linked to both runs' transcripts;
``compare A B --html OUT`` writes the same section for any two runs. Checked in headless Chromium."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from pytest_agentbench.cli import main as cli
from pytest_agentbench.report.compare import compare
from pytest_agentbench.report.comparison import render_compare_page
from pytest_agentbench.report.html import write_html

from helpers.bench_runs import run_dirs
from helpers.capabilities import needs
from helpers.cdp import Chromium

HOSTILE = "</script><script>alert(1)</script>"
BROKEN = "return 100 + "  # what the mutant model writes into a broken step (scicode_builders.MODEL_CONFTEST)


def flipped_ids(page) -> list[list[str]]:
    return page.evaluate(
        "Array.from(document.querySelectorAll('tr.flip')).map(function(r){return [r.dataset.id, r.className];})"
    )


def href(page, selector: str) -> str:
    return page.evaluate(f"document.querySelector({json.dumps(selector)}).href")


def follow(browser: Chromium, page, selector: str):
    """Open the link ``selector`` names as a user clicking it would land (a fresh load of its target, in the
    browser's one tab: ``page`` is gone afterwards)."""
    return browser.open(href(page, selector))


def item_state(page, key: str) -> dict:
    return page.evaluate(
        f"(function(){{var e=document.getElementById({json.dumps('item-' + key)});"
        "return e?{open:e.open,text:e.innerText}:null;})()"
    )


def assert_deltas(text: str) -> None:
    # A resolves problems 1 and 2 of 3 and passes 4 of 5 steps; B resolves only 3 and passes 3 of 5
    assert re.search(r"main\s+66\.7%\s+\[[^\]]+\]\s+33\.3%\s+\[[^\]]+\]\s+-33\.3 pp\s+\[", text), text[:3000]
    assert re.search(r"subproblem\s+80\.0%\s+\[[^\]]+\]\s+60\.0%\s+\[[^\]]+\]\s+-20\.0 pp\s+\[", text)
    assert re.search(r"items\s+5\s+2\s+1\s+1\s+within noise", text)  # McNemar over the shared steps


@pytest.mark.e2e
@pytest.mark.slow
def test_run_with_a_baseline_and_compare_html_show_deltas_flips_and_both_transcripts(tiny, pytester, tmp_path):
    assert tiny("--bench-run-id=a", broken="3.1").ret == 1
    baseline = next(p for p in run_dirs(pytester.path) if p.name == "a")
    result = tiny(
        "--bench-run-id=b",
        f"--bench-baseline={baseline}",
        "--bench-max-drop=main=10%",
        "--bench-set=significance=0.05",
        "--bench-set=allow_underpowered=true",
        broken="1.2,2.1",
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-3000:]  # the drop is within noise
    run = next(p for p in run_dirs(pytester.path) if p.name == "b")
    html = (run / "report.html").read_text()
    assert "Comparison with the baseline" in html and html.count("<script>") == 1
    assert 'href="../a/report.html#item-1.2"' in html and 'href="#item-1.2"' in html
    out = tmp_path / "pages" / "ab.html"
    assert cli(["compare", str(baseline), str(run / "summary.json"), "--html", str(out)]) == 0
    page_text = out.read_text()
    relative = os.path.relpath(run_dirs(pytester.path)[0].parent, out.parent)
    assert f'href="{relative}/a/report.html#item-1.2"' in page_text
    assert f'href="{relative}/b/report.html#item-1.2"' in page_text
    assert "http://" not in page_text and "https://" not in page_text and " src=" not in page_text
    needs("chromium")
    with Chromium() as browser:
        page = browser.open((run / "report.html").as_uri())
        text = page.text
        assert "Comparison with the baseline" in text
        assert_deltas(text)
        # the gate with its numbers: 66.7% -> 33.3%, its limit, the McNemar p over tasks and the detectable drop
        gate_row = page.evaluate("document.querySelector('table.drop-gates tr:nth-child(2)').innerText")
        assert re.search(
            r"main=10%\s+66\.7%\s+33\.3%\s+33\.3 pp\s+10\.0 pp\s+1 \(tasks\)\s+none over 3 tasks\s+pass", gate_row
        ), gate_row
        assert "smallest drop detectable with 80% power" in text  # the gate's own detail line
        # pass -> fail first, then fail -> pass
        assert flipped_ids(page) == [["1.2", "flip pf"], ["2.1", "flip pf"], ["3.1", "flip fp"]]
        # this run's transcript is on the page: the link opens it
        assert item_state(page, "1.2")["open"] is False
        page.evaluate('document.querySelector(\'tr.flip[data-id="1.2"] a[href="#item-1.2"]\').click()')
        mine = item_state(page, "1.2")
        assert mine["open"] is True and BROKEN in mine["text"]
        # both transcripts side by side in the flipped row
        pair = page.evaluate(
            "(function(){var d=document.querySelector('tr.flip[data-id=\"2.1\"] details.pair');"
            "d.open=true;return d.innerText;})()"
        )
        assert pair.count("2.1") >= 2 and pair.count(BROKEN) == 1, pair
        assert page.errors == [] and page.evaluate("document.scripts.length") == 1
        # the baseline's transcript, on the baseline's own page
        other = follow(browser, page, 'tr.flip[data-id="1.2"] a[href^="../a/"]')
        theirs = item_state(other, "1.2")
        assert theirs["open"] is True and BROKEN not in theirs["text"] and "def " in theirs["text"]
        assert other.errors == []

        cmp = browser.open(out.as_uri())
        text = cmp.text
        assert_deltas(text)
        assert flipped_ids(cmp) == [["1.2", "flip pf"], ["2.1", "flip pf"], ["3.1", "flip fp"]]
        pair = cmp.evaluate(
            "(function(){var d=document.querySelector('tr.flip[data-id=\"1.2\"] details.pair');"
            "d.open=true;return d.innerText;})()"
        )
        assert pair.count(BROKEN) == 1 and "A (model mutant, run a)" in pair and "B (model mutant, run b)" in pair
        assert cmp.errors == []
        links = {side: href(cmp, f'tr.flip[data-id="1.2"] a[href*="/{side}/report.html"]') for side in "ab"}
        for side, broken in (("a", False), ("b", True)):
            state = item_state(browser.open(links[side]), "1.2")
            assert state["open"] is True and (BROKEN in state["text"]) is broken


def summary_of(statuses: dict[str, str], run_id: str) -> dict:
    items = [{"id": i, "task": i.split(".")[0], "status": s, "scored": True} for i, s in statuses.items()]
    return {
        "settings": {"benchmark": "scicode", "split": "validation", "model": f"m{HOSTILE}", "run_id": run_id},
        "metrics": {"main": 0.5, "subproblem": 0.5},
        "items": items,
        "gate_metrics": {"main": "main", "subproblem": "subproblem"},
        "headlines": {"main": "task", "subproblem": "item"},
        "free_settings": [],
    }


def test_compare_html_of_lone_summaries_says_what_is_missing_and_escapes(tmp_path):
    """Baselines saved as a lone summary.json (no records, no report.html): the page says so, and model
    text in settings or records is text, never markup."""
    a = summary_of({"1.1": "pass", "1.2": "pass", "2.1": "fail"}, "a")
    b = summary_of({"1.1": "pass", "1.2": "fail", "2.1": "pass"}, "b")
    for name, summary in (("a", a), ("b", b)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps(summary))
    (tmp_path / "b" / "steps.jsonl").write_text(
        json.dumps({"id": "1.2", "task": "1", "status": "fail", "code": f"x = '{HOSTILE}'"}) + "\n"
    )
    assert cli(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--html", str(tmp_path / "out.html")]) == 0
    page = (tmp_path / "out.html").read_text()
    assert HOSTILE not in page and page.count("<script>") == 1
    assert "A: no report.html on disk" in page and "A: no record of this item on disk" in page
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in page  # B's record, embedded and escaped
    assert page.index('data-id="1.2"') < page.index('data-id="2.1"')  # pass -> fail before fail -> pass
    direct = render_compare_page(
        compare(
            dict(a, _path=str(tmp_path / "a" / "summary.json")), dict(b, _path=str(tmp_path / "b" / "summary.json"))
        ),
        tmp_path / "out.html",
    )
    assert direct == page
    assert (
        cli(
            [
                "compare",
                str(tmp_path / "a"),
                str(tmp_path / "b"),
                "--html",
                str(tmp_path / "b" / "summary.json" / "x.html"),
            ]
        )
        == 2
    )


def attempt_run(folder: Path, run_id: str, failing: set[str]) -> None:
    """A run of two attempts of step 1.1 written as a run writes it: records, summary.json, report.html."""
    records = [
        {
            "id": "1.1",
            "task": "1",
            "attempt": n,
            "status": "fail" if f"{n}" in failing else "pass",
            "scored": True,
            "code": f"def f():\n    return {run_id!r}  # attempt {n}",
        }
        for n in (1, 2)
    ]
    summary = {
        "settings": {"benchmark": "scicode", "split": "validation", "model": "m", "run_id": run_id},
        "metrics": {"main": 0.5},
        "items": [{k: r[k] for k in ("id", "task", "attempt", "status", "scored")} for r in records],
        "gate_metrics": {"main": "main"},
        "headlines": {"main": "task"},
        "free_settings": [],
    }
    folder.mkdir(parents=True)
    (folder / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (folder / "summary.json").write_text(json.dumps(summary))
    write_html(folder, summary, records)


def test_attempts_link_to_their_own_transcripts(tmp_path):
    """With --bench-attempts an item is ``ID[attemptN]``: its link names that attempt's transcript."""
    attempt_run(tmp_path / "a", "a", failing={"2"})
    attempt_run(tmp_path / "b", "b", failing={"1"})
    out = tmp_path / "cmp.html"
    assert cli(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--html", str(out)]) == 0
    page = out.read_text()
    assert 'href="a/report.html#item-1.1%5Battempt1%5D"' in page
    needs("chromium")
    with Chromium() as browser:
        view = browser.open(out.as_uri())
        assert flipped_ids(view) == [["1.1[attempt1]", "flip pf"], ["1.1[attempt2]", "flip fp"]]
        link = href(view, 'tr.flip[data-id="1.1[attempt2]"] a[href^="b/"]')
        target = browser.open(link)
        state = item_state(target, "1.1[attempt2]")
        assert state["open"] is True and "return 'b'  # attempt 2" in state["text"]
        assert target.errors == []


def two_runs(tmp_path: Path, trajectory: str) -> Path:
    """Runs a (item passes) and b (it fails), the record naming a trajectory file holding ``trajectory``;
    returns their comparison page."""
    runs = {}
    for name, status in (("a", "pass"), ("b", "fail")):
        run = tmp_path / name
        run.mkdir()
        (run / "t.json").write_text(trajectory)
        record = {"benchmark": "scicode", "id": "1.1", "task": "1", "status": status, "trajectory": "t.json"}
        settings = {"benchmark": "scicode", "model": name, "run_id": name, "split": "dev"}
        (run / "summary.json").write_text(
            json.dumps({"settings": settings, "metrics": {"main": 0.5}, "items": [record]})
        )
        (run / "steps.jsonl").write_text(json.dumps(record) + "\n")
        runs[name] = run
    out = tmp_path / "cmp.html"
    assert cli(["compare", str(runs["a"]), str(runs["b"]), "--html", str(out)]) == 0
    return out


def test_odd_baseline_record_costs_only_its_transcript(tmp_path, capsys):
    """A record whose trajectory file cannot be read (nested too deep) shows a line saying so on the comparison
    page; the rest is written, and no traceback is printed."""
    page = two_runs(tmp_path, "[" * 100_000 + "]" * 100_000).read_text()
    assert page.count("could not show this item (RecursionError") == 2 and page.rstrip().endswith("</html>")
    assert "Traceback" not in capsys.readouterr().err


def test_a_malformed_link_in_the_address_opens_nothing(tmp_path):
    """``cmp.html#item-%E0%A4%A`` (not valid percent-encoding) is no script error."""
    out = two_runs(tmp_path, json.dumps({"messages": [{"role": "assistant", "content": "hi"}]}))
    needs("chromium")
    with Chromium() as browser:
        view = browser.open(out.as_uri() + "#item-%E0%A4%A")
        assert view.errors == []
