"""report.html: written by every run, self-contained, hostile output shown as text, readable in a real browser."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from pytest_agentbench.report.highlight import JSON, SHELL, TEXT_LIMIT, code_html, python_segments, regex_segments
from pytest_agentbench.report.html import render_html, wilson

from helpers.bench_runs import read_jsonl, run_dirs
from helpers.capabilities import needs
from helpers.cdp import Chromium, chromium_path
from helpers.fake_openai import FakeOpenAI
from helpers.scicode_builders import CLOSE, problem, step, tiny_problems

HOSTILE = "</script><script>alert(1)</script>"


def test_wilson_interval():
    low, high = wilson(2, 3)
    assert round(low, 4) == 0.2077 and round(high, 4) == 0.9385
    assert wilson(0, 0) is None and wilson(5, 5)[1] == 1.0


def corebench_summary_and_record():
    record = {
        "benchmark": "core-bench",
        "task": "capsule-1",
        "id": "capsule-1",
        "split": "test",
        "status": "fail",
        "scored": True,
        "message": "1/2 questions correct",
        "questions": [
            {
                "question": "fig mean accuracy",
                "kind": "numeric",
                "figure": True,
                "answered": True,
                "submitted": 0.93,
                "expected": [0.9, 0.95],
                "correct": True,
                "note": None,
            },
            {
                "question": "best <model>",
                "kind": "string",
                "figure": False,
                "answered": True,
                "submitted": HOSTILE,
                "expected": "resnet",
                "correct": False,
                "note": None,
            },
        ],
    }
    summary = {
        "settings": {
            "benchmark": "core-bench",
            "model": "m",
            "split": "test",
            "run_id": "r",
            "data_hashes": {"core_test.json": "ab" * 32},
        },
        "metrics": {"capsule_accuracy": 0.0},
        "counts": {"fail": 1},
        "usage": {},
        "gate_metrics": {"accuracy": "capsule_accuracy"},
        "headlines": {"accuracy": "item"},
    }
    return summary, record


def test_corebench_questions_trajectory_and_escaping(tmp_path):
    summary, record = corebench_summary_and_record()
    (tmp_path / "trajectories").mkdir()
    (tmp_path / "trajectories" / "capsule-1.json").write_text(
        json.dumps(
            {
                "capsule": "capsule-1",
                "messages": [
                    {"role": "user", "content": "Run the capsule"},
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "execute_bash", "arguments": '{"cmd": "ls <b>"}'},
                            }
                        ],
                    },
                    {"role": "tool", "name": "execute_bash", "content": [{"type": "text", "text": HOSTILE}]},
                ],
            }
        )
    )
    record["trajectory"] = "trajectories/capsule-1.json"
    page = render_html(
        summary,
        [record, {**record, "id": "capsule-2", "task": "capsule-2", "trajectory": "../../etc/passwd"}],
        tmp_path,
    )
    assert "transcript: 3 messages" in page and "execute_bash" in page
    assert "ls &lt;b&gt;" in re.sub(r"<[^>]+>", "", page)  # the command, highlighted, is the text sent
    assert page.count("transcript: ") == 1  # a record cannot name a file outside its run folder
    assert HOSTILE not in page and "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert page.count("<script>") == 1  # only the page's own filter script
    assert "[0.9, 0.95]" in page and "best &lt;model&gt;" in page and ">correct<" in page and ">wrong<" in page
    assert "ab" * 32 in page  # data hashes
    assert "0/2 · 95% CI 0.0% – 65.8%" in page  # Wilson over the scored capsules
    assert "http://" not in page and "https://" not in page and " src=" not in page  # nothing fetched


def test_notes_follow_the_results_texts_show_whole_and_corebench_metrics_are_labelled(tmp_path):
    summary, record = corebench_summary_and_record()
    summary["metrics"] = {
        "capsules": 2,
        "correct_capsules": 0,
        "capsule_accuracy": 0.0,
        "questions": 4,
        "correct_questions": 1,
        "question_accuracy": 0.25,
        "status_fail": 2,
    }
    slightly_long = "x" * TEXT_LIMIT + "the end of it"
    really_long = "y" * (3 * TEXT_LIMIT)
    records = [
        {**record, "message": slightly_long},
        {**record, "id": "capsule-2", "task": "capsule-2", "message": really_long},
    ]
    page = render_html(summary, records, tmp_path, notes=["targets rebuilt from the ground truth"])
    assert page.index("Headline metrics") < page.index("targets rebuilt from the ground truth")  # results first
    assert '<details class="notes"><summary>1 note(s)' in page  # folded
    assert "the end of it" in page  # 13 characters over the limit: shown, not cut
    assert page.count("more characters") == 1 and "the whole text is in the run&#x27;s records" in page
    metrics = page.split('<table id="metrics">', 1)[1].split("</table>", 1)[0]
    assert '<td>questions right</td><td class="num">1</td><td class="num">4</td><td class="num">25.0%</td>' in (
        metrics
    ), metrics
    assert ">correct_questions<" not in metrics and ">question_accuracy<" not in metrics  # no raw key dump
    assert "<td>status_fail</td>" in metrics  # what no row names, by its key


@pytest.mark.e2e
def test_report_html_in_a_browser(tiny, tmp_path):
    # 3.1's code carries a script-closing comment: the page must show it as text
    problems = tiny_problems(**{"3.1": f"def six():\n    return 6  # {HOSTILE}"})
    (tiny.data / "scicode" / "problems_dev.jsonl").write_text("".join(json.dumps(p) + "\n" for p in problems))
    result = tiny("-q", "--bench-run-id=html", broken="2.2")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()[-2000:]
    run_dir = next(p for p in run_dirs(tiny.data.parent) if p.name == "html")
    page_file = run_dir / "report.html"
    assert page_file.is_file()
    text = page_file.read_text()
    assert HOSTILE not in text and "return 6  # &lt;/script&gt;" in re.sub(r"<[^>]+>", "", text)
    assert '<span class="c"># &lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;</span>' in text  # a comment
    needs("chromium")
    with Chromium() as browser:
        page = browser.open(page_file.as_uri())
        shown = page.text
        assert "Headline metrics" in shown and re.search(r"main\s+66\.7%", shown), shown[:2000]
        assert re.search(r"2/3 · 95% CI 20\.8% – 93\.9% \(Wilson\)", shown)  # problems resolved, with its interval
        assert re.search(r"subproblem\s+80\.0%", shown)
        assert "def add(a, b):" in shown  # the first step's code, shown after load
        # the filters work: only problem 2 has a failed step
        page.evaluate(
            "var s=document.getElementById('f-status'); s.value='fail';"
            "s.dispatchEvent(new Event('change')); document.getElementById('f-open').click();"
        )
        assert page.evaluate("document.getElementById('f-count').textContent") == "1 of 3 shown"
        page.evaluate(
            "var s=document.getElementById('f-status'); s.value='';"
            "s.dispatchEvent(new Event('change')); document.getElementById('f-open').click();"
        )
        shown = page.text
        assert HOSTILE in shown  # the hostile comment is text on the page, never a script
        assert page.evaluate("document.scripts.length") == 1
        # code gets the page's width, not a narrow column beside the item's facts
        share = page.evaluate(
            "Math.max.apply(null, Array.from(document.querySelectorAll('pre.code')).map("
            "function(p){return p.getBoundingClientRect().width;})) / document.getElementById('tasks').clientWidth"
        )
        assert share > 0.4, share  # (0.1 when the task's facts took the width; a 780 px window here)
        shot = page.screenshot(tmp_path / "report.png")
        assert page.errors == []
    assert shot.stat().st_size > 10_000
    keep = os.environ.get("AGENTBENCH_KEEP_SCREENSHOT")  # for a person to look at the page
    if keep:
        shutil.copyfile(shot, keep)


@pytest.mark.e2e
@pytest.mark.slow
def test_scicode_categories_filter_and_summary_in_report_html(tiny, pytester, shared_data):
    """A hand-made dataset with two categories (the official data has one): records carry the category,
    report.html offers both in its category filter and shows both headline metrics per category."""
    problems = tiny_problems()
    for entry, category in zip(problems, ("physics", "physics", "chemistry")):
        entry["category"] = category
    (tiny.data / "scicode" / "problems_dev.jsonl").write_text("".join(json.dumps(p) + "\n" for p in problems))
    result = tiny("-q", "--bench-run-id=cats", broken="1.2")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()[-2000:]
    run_dir = next(p for p in run_dirs(tiny.data.parent) if p.name == "cats")
    records = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]
    assert {r["id"]: r["category"] for r in records} == {
        "1.1": "physics",
        "1.2": "physics",
        "2.1": "physics",
        "2.2": "physics",
        "3.1": "chemistry",
    }
    page = (run_dir / "report.html").read_text()
    select = re.search(r'<select id="f-category">(.*?)</select>', page)
    assert select, page[:3000]
    assert re.findall(r'<option value="([^"]*)">', select.group(1)) == ["", "chemistry", "physics"]
    assert "class=nocat" not in page
    assert page.count('data-category="physics"') == 2 and page.count('data-category="chemistry"') == 1
    assert "<h2>Categories</h2>" in page
    assert "<tr><td>chemistry</td><td>1/1 (100.0%)</td><td>1/1 (100.0%)</td></tr>" in page
    assert "<tr><td>physics</td><td>1/2 (50.0%)</td><td>3/4 (75.0%)</td></tr>" in page
    if chromium_path() is None:
        return  # the page itself is checked in a browser by test_report_html_in_a_browser
    needs("chromium")
    with Chromium() as browser:
        view = browser.open((run_dir / "report.html").as_uri())
        view.evaluate(
            "var s=document.getElementById('f-category'); s.value='physics';s.dispatchEvent(new Event('change'));"
        )
        assert view.evaluate("document.getElementById('f-count').textContent") == "2 of 3 shown"
        assert view.errors == []


@pytest.mark.e2e
@pytest.mark.slow
def test_official_scicode_records_are_unclassified(tiny_run):
    """The session's run of the tiny dataset, whose problems name no category, as the official data's do."""
    assert {r["id"]: r["category"] for r in tiny_run.records} == dict.fromkeys(
        ("1.1", "1.2", "2.1", "2.2", "3.1"), "unclassified"
    )
    page = (tiny_run.path / "report.html").read_text()
    assert re.findall(
        r'<option value="([^"]*)">', re.search(r'<select id="f-category">(.*?)</select>', page).group(1)
    ) == ["", "unclassified"]


TOOL_CODE = 'import math\n\n\ndef six():\n    """Six, checked."""\n    return 6  # the answer\n\nprint(six(), math.pi)'


@pytest.mark.e2e
@pytest.mark.slow
def test_tool_calls_render_as_code_with_tokens_per_turn(bench, pytester, custom_scicode):
    """A tool-use run against a scripted endpoint: the transcript shows the tool call's code decoded from its JSON
    arguments, as numbered, highlighted lines, its output beneath it, and each model turn's tokens and latency."""
    problems = [
        problem("3", [step("3.1", "def six():\n    return 6", [CLOSE.format(call="six()")], header="def six():")])
    ]
    custom_scicode.write(problems, {"3.1": [6]})
    with FakeOpenAI() as server:
        server.reply(
            "Let me check it first.",
            tool_calls=[("code_interpreter", {"code": TOOL_CODE})],
            prompt_tokens=1234,
            completion_tokens=56,
        )
        server.reply("Done:\n```python\ndef six():\n    return 6\n```\n", prompt_tokens=1400, completion_tokens=21)
        result = custom_scicode(
            "--bench-mode=tool_use", "--bench-cache=off", "--bench-run-id=tools", model="scripted", server=server
        )
    assert result.ret == 0, result.stdout.str()[-3000:]
    run_dir = next(p for p in run_dirs(pytester.path) if p.name == "tools")
    [record] = read_jsonl(run_dir / "steps.jsonl")
    turns = json.loads((run_dir / record["trajectory"]).read_text())["turns"]
    assert [(t["message"], t["prompt_tokens"], t["completion_tokens"]) for t in turns] == [(2, 1234, 56), (4, 1400, 21)]
    assert all(t["latency"] > 0 and t["cached"] is False for t in turns)
    page_file = run_dir / "report.html"
    assert "\\n" not in page_file.read_text().split('class="call"', 1)[1].split("</pre>", 1)[0]  # no JSON escapes
    needs("chromium")
    with Chromium() as browser:
        page = browser.open(page_file.as_uri())
        page.evaluate("document.querySelector('details.transcript').open=true")
        call = page.evaluate("""(function(){var c=document.querySelector('.call');
            var pre=c.querySelector('pre.code');
            return {name: c.querySelector('.th b').textContent, code: pre.innerText, lang: pre.dataset.lang,
                    lines: pre.querySelectorAll('.l').length,
                    numbers: Array.prototype.map.call(pre.querySelectorAll('.l'), function(l){
                        return getComputedStyle(l, '::before').content;}),
                    keyword: pre.querySelector('.k').textContent, defined: pre.querySelector('.f').textContent,
                    comment: pre.querySelector('.c').textContent, string: pre.querySelector('.s').textContent,
                    colours: [getComputedStyle(pre.querySelector('.k')).color,
                              getComputedStyle(pre.querySelector('.c')).color],
                    output: c.querySelector('pre.out').innerText};})()""")
        assert call["name"] == "code_interpreter" and call["lang"] == "python"
        assert call["code"] == TOOL_CODE and call["lines"] == 8  # the numbers are not part of the text
        assert call["numbers"] == ["counter(ln)"] * 8, call["numbers"]  # numbered by the page's CSS
        assert (call["keyword"], call["defined"], call["comment"]) == ("import", "six", "# the answer")
        assert call["string"] == '"""Six, checked."""' and call["colours"][0] != call["colours"][1]
        assert "status: ok" in call["output"] and "6 3.14159" in call["output"]
        turns_shown = page.evaluate(
            "Array.prototype.map.call(document.querySelectorAll('.turn.model'),"
            "function(t){return t.querySelector('.th').innerText;})"
        )
        assert len(turns_shown) == 2
        assert re.fullmatch(r"model · turn 1\s+1,234 \+ 56 tokens · \d+\.\d\d s", turns_shown[0]), turns_shown
        assert re.fullmatch(r"model · turn 2\s+1,400 \+ 21 tokens · \d+\.\d\d s", turns_shown[1]), turns_shown
        # the final answer's fenced block and the record's code are code too
        assert (
            page.evaluate("document.querySelectorAll('.turn.model')[1].querySelector('pre.code').innerText")
            == "def six():\n    return 6"
        )
        assert page.evaluate("getComputedStyle(document.querySelector('#tasks th.cost')).display") == "none"  # unknown
        summary_line = page.evaluate("document.querySelector('details.item>summary').innerText")
        assert re.search(r"2,711 tokens \(2 model calls, \d+\.\d\d s\)", summary_line), summary_line
        head = page.evaluate("document.querySelector('details.transcript>summary').innerText")
        assert re.search(r"2 model turns · 1 tool call · 2,634 \+ 77 tokens · \d+\.\d\d s in model calls$", head), head
        assert page.errors == []


LONG_QUESTION = (
    "Report the test accuracy of the ResNet-50 model trained with the augmented data, as shown in the "
    "second panel of Figure 3."
)


def capsule_record(number: int, status: str, duration: float, tokens: int, cost: float | None, **extra) -> dict:
    generation = {"model_calls": 2, "prompt_tokens": tokens - 10, "completion_tokens": 10}
    if cost is not None:
        generation["cost_usd"] = cost
    return {
        "benchmark": "core-bench",
        "task": f"capsule-{number}",
        "id": f"capsule-{number}",
        "split": "test",
        "status": status,
        "scored": True,
        "difficulty": "hard",
        "duration": duration,
        "generation": generation,
        "message": "",
        **extra,
    }


def three_capsules(run_dir: Path) -> tuple[dict, list[dict]]:
    """Three capsules of a hard run: sizes and costs that sort differently, one wrong numeric answer to a long
    question, and a transcript whose tool output holds a word found nowhere else."""
    (run_dir / "trajectories").mkdir()
    (run_dir / "trajectories" / "capsule-3.json").write_text(
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": "Run the capsule"},
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "bash", "arguments": '{"command": "grep -r x ."}'},
                            }
                        ],
                    },
                    {"role": "tool", "tool_call_id": "c1", "content": "exit code: 0\n--- stdout ---\nNEEDLE-42\n"},
                ],
                "turns": [{"message": 1, "prompt_tokens": 30, "completion_tokens": 20, "latency": 1.5, "cached": True}],
            }
        )
    )
    wrong = {
        "question": LONG_QUESTION,
        "kind": "numeric",
        "figure": True,
        "answered": True,
        "submitted": 0.5,
        "expected": [0.9, 0.95],
        "correct": False,
        "note": None,
    }
    right = {**wrong, "question": "How many epochs?", "submitted": 10, "expected": [10, 10], "correct": True}
    records = [
        capsule_record(1, "pass", 30.0, 500, 0.02),
        capsule_record(
            2,
            "fail",
            5.0,
            2000,
            None,
            questions=[right, wrong],
            message=f"1/2 questions correct; wrong: {LONG_QUESTION[:60]!r}: got 0.5",
        ),
        capsule_record(3, "fail", 100.0, 50, 0.5, trajectory="trajectories/capsule-3.json"),
    ]
    summary = {
        "settings": {"benchmark": "core-bench", "model": "m", "split": "test", "run_id": "r"},
        "metrics": {
            "capsule_accuracy": 1 / 3,
            "capsules": 3,
            "correct_capsules": 1,
            "question_accuracy": 0.5,
            "questions": 2,
            "status_fail": 2,
        },
        "counts": {"pass": 1, "fail": 2},
        "usage": {},
        "gate_metrics": {"accuracy": "capsule_accuracy", "questions": "question_accuracy"},
        "headlines": {"accuracy": "item"},
    }
    return summary, records


def test_task_table_sorts_and_searches_and_failures_show_question_and_interval(tmp_path):
    summary, records = three_capsules(tmp_path)
    page_file = tmp_path / "report.html"
    page_file.write_text(render_html(summary, records, tmp_path))
    order = "Array.prototype.map.call(document.querySelectorAll('#tasks>tbody>tr'), function(r){return r.dataset.id;})"
    needs("chromium")
    with Chromium() as browser:
        page = browser.open(page_file.as_uri())

        def click(column: str) -> list[str]:
            page.evaluate(
                f"Array.prototype.find.call(document.querySelectorAll('#tasks th'), function(th){{"
                f"return th.textContent === '{column}';}}).click()"
            )
            return [i.split("-")[1] for i in page.evaluate(order)]

        assert click("duration") == ["2", "1", "3"] and click("duration") == ["3", "1", "2"]
        assert click("tokens") == ["3", "1", "2"]
        assert click("cost") == ["1", "3", "2"] and click("cost") == ["3", "1", "2"]  # unknown last both ways
        assert click("status")[0] == "1"  # pass before fail
        assert click("task") == ["1", "2", "3"]
        assert page.evaluate("getComputedStyle(document.querySelector('#tasks th.cost')).display") != "none"

        def search(text: str) -> tuple[str, list[str]]:
            page.evaluate(
                f"var s=document.getElementById('f-text'); s.value={json.dumps(text)};"
                "s.dispatchEvent(new Event('input'));"
            )
            shown = page.evaluate(
                "Array.prototype.filter.call(document.querySelectorAll('#tasks>tbody>tr'),"
                "function(r){return r.style.display !== 'none';}).map(function(r){return r.dataset.id;})"
            )
            return page.evaluate("document.getElementById('f-count').textContent"), shown

        assert search("needle-42") == ("1 of 3 shown", ["capsule-3"])  # found in a folded transcript's output
        assert search("second panel of figure") == ("1 of 3 shown", ["capsule-2"])  # in a question
        assert search("capsule-1") == ("1 of 3 shown", ["capsule-1"])
        assert search("")[0] == "3 of 3 shown"

        page.evaluate("document.getElementById('item-capsule-2').open = true")
        line = page.evaluate("document.querySelector('#item-capsule-2 li.wrong').innerText")
        assert line == f"wrong: {LONG_QUESTION} — reported 0.5, accepted interval [0.9, 0.95]"
        card = page.evaluate("document.querySelector('.card').innerText")
        assert re.search(
            r"accuracy\s+33\.3%\s+1/3 · 95% CI 6\.1% – 79\.2% \(Wilson\)\s+difficulty hard: 1/3 passed", card
        ), card
        metrics = page.evaluate(
            "Array.prototype.map.call(document.getElementById('metrics').rows,function(r){return r.innerText;})"
        )
        assert metrics[0] == "metric\tcorrect\tof\trate"  # the benchmark's labelled rows, not a key dump
        assert "capsules solved (every question right)\t1\t3\t33.3%" in metrics
        assert not [row for row in metrics if row.startswith(("capsule_accuracy", "correct_capsules"))], metrics
        summary_line = page.evaluate("document.querySelector('#item-capsule-3>summary').innerText")
        assert summary_line == "fail capsule-3 100.0 s · 50 tokens (2 model calls, 1.50 s) · $0.5000"
        assert page.errors == []
        # a link to an item opens it, even when the filters hid its row
        search("capsule-1")
        page.evaluate("location.hash = '#item-capsule-3'")
        assert page.evaluate("document.getElementById('item-capsule-3').open") is True
        assert page.evaluate("document.querySelector('tr[data-id=\"capsule-3\"]').style.display") == ""
        assert page.errors == []


@pytest.mark.parametrize(
    "source",
    [
        'def f(x):\n    """doc\n    more"""\n    return x + 1  # c\n',
        "if x:\n  y\n y\n",  # bad indentation: highlighted up to there
        "x = (1,\n    2",
        "s = '''cut off\nhere",
        "a = '\\\n",
        "\tclass A: pass\r\nprint(A)\r",
        "-" * 5000 + "1",
        "(" * 300 + ")" * 300,
        "é = 1; ok \u2028 \x00 \x1b[31m",
        "",
        f"print('{HOSTILE}')  # {HOSTILE}",
    ],
)
def test_highlighted_code_is_exactly_the_source(source):
    """Whatever the model wrote, the highlighted pieces add up to its text (line ends made one kind), escaped."""
    pieces = python_segments(source)
    assert "".join(text for _, text in pieces) == source
    shown = code_html(source, "python")
    assert HOSTILE not in shown and "<script" not in shown
    inner = shown[shown.index(">") + 1 : shown.rindex("</pre>")]
    expected = source.replace("\r\n", "\n").replace("\r", "\n")
    expected = expected[:-1] if expected.endswith("\n") else expected  # a final line end starts no line
    assert html.unescape(re.sub(r"<[^>]+>", "", inner)) == expected
    assert inner.count('<span class="l">') == (expected.count("\n") + 1 if source else 0)  # one number a line


def test_shell_and_json_highlighting():
    pieces = regex_segments('cd code && python3 main.py --config "a b.json" | tee $OUT  # run', SHELL)
    assert [(c, t) for c, t in pieces if c] == [
        ("k", "cd"),
        ("o", "&&"),
        ("a", "--config"),
        ("s", '"a b.json"'),
        ("o", "|"),
        ("v", "$OUT"),
        ("c", "# run"),
    ]
    assert [(c, t) for c, t in regex_segments('{"k": [1, -2.5e3, true, "v"]}', JSON) if c] == [
        ("f", '"k"'),
        ("m", "1"),
        ("m", "-2.5e3"),
        ("k", "true"),
        ("s", '"v"'),
    ]


def test_odd_records_and_trajectory_files_still_render(tmp_path):
    """A record whose fields have unexpected types, or a trajectory file of another shape, costs its details only."""
    (tmp_path / "t.json").write_text('{"messages": 5, "turns": 7}')
    (tmp_path / "u.json").write_text(
        json.dumps(
            {
                "messages": [
                    {
                        "role": "assistant",
                        "tool_calls": [{"id": "x", "function": {"name": "bash", "arguments": "{not json"}}, 3],
                    }
                ],
                "turns": [{"message": "0"}],
            }
        )
    )
    records = [
        {
            "id": "a",
            "benchmark": "core-bench",  # its questions are CORE-Bench's item details
            "status": "pass",
            "generation": "weird",
            "duration": "x",
            "cost_usd": float("nan"),
            "questions": [1, {"question": "q", "expected": None}],
            "trajectory": "t.json",
        },
        {"id": "b", "status": "fail", "trajectory": "u.json"},
    ]
    page = render_html({"settings": {"benchmark": "x"}}, records, tmp_path)
    assert "transcript: 0 messages" in page and "0/1 questions correct" in page
    assert "arguments (not valid JSON, shown as sent)" in page and "{not json" in page
    assert "nocost" in page.split('id="tasks"', 1)[1].split(">", 1)[0]  # a NaN cost is no cost
    # a number of tool calls instead of a list, integers no float holds, a file nested too deep to read
    (tmp_path / "v.json").write_text(
        json.dumps(
            {
                "messages": [{"role": "assistant", "content": "hi", "tool_calls": 5}],
                "turns": [{"message": 0, "prompt_tokens": 10**400, "latency": 10**400, "completion_tokens": 2}],
            }
        )
    )
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    odd = [
        {
            "id": "c",
            "status": "pass",
            "trajectory": "v.json",
            "duration": 10**400,
            "generation": {"total_tokens": 10**400, "model_calls": 10**400, "cost_usd": 10**400},
        },
        {"id": "d", "status": "fail", "trajectory": "deep.json", "attempt": 2},
    ]
    page = render_html(
        {"settings": {"benchmark": "x"}, "usage": {"tokens": 10**400, "model_calls": 10**400}}, records + odd, tmp_path
    )
    assert "0 + 2 tokens" in page and "0 tool calls" in page  # what cannot be a number counts as none
    fallback = re.search(
        r'<details class="item" id="item-d\[attempt2\]"><summary>d: could not show this item '
        r"\((\w+Error)",
        page,
    )
    assert fallback and fallback.group(1) == "RecursionError", page[-3000:]  # the anchor stays, the page is written
    assert page.rstrip().endswith("</html>")


def test_tool_outputs_follow_their_own_call_when_ids_repeat(tmp_path):
    """A server that sends no call ids gets made-up ones (``call_0`` every turn): each call shows the output
    that answered it, not the last one with that id."""
    messages = [{"role": "user", "content": "go"}]
    for turn in range(3):
        arguments = json.dumps({"cmd": f"echo {turn}"})
        messages += [
            {
                "role": "assistant",
                "content": f"turn {turn}",
                "tool_calls": [{"id": "call_0", "function": {"name": "bash", "arguments": arguments}}],
            },
            {"role": "tool", "tool_call_id": "call_0", "content": f"OUTPUT-{turn}"},
        ]
    (tmp_path / "t.json").write_text(json.dumps({"messages": messages}))
    page = render_html(
        {"settings": {"benchmark": "x"}}, [{"id": "a", "status": "pass", "trajectory": "t.json"}], tmp_path
    )
    calls = page.split('<div class="call">')[1:]
    assert len(calls) == 3
    for turn, call in enumerate(calls):
        assert f"OUTPUT-{turn}" in call and all(f"OUTPUT-{other}" not in call for other in range(3) if other != turn)
    assert "tool output</span>" not in page  # every output is shown once, under its call


def test_turn_usage_counts_positions_in_the_file(tmp_path):
    """``turns[].message`` counts positions in the file's list, an entry that is not an object included."""
    (tmp_path / "t.json").write_text(
        json.dumps(
            {
                "messages": [5, {"role": "assistant", "content": "one"}],
                "turns": [{"message": 1, "prompt_tokens": 11, "completion_tokens": 3, "latency": 2.0}],
            }
        )
    )
    page = render_html(
        {"settings": {"benchmark": "x"}}, [{"id": "a", "status": "pass", "trajectory": "t.json"}], tmp_path
    )
    turn_one = page.split("model · turn 1</span>", 1)[1].split("</div>", 1)[0]
    assert "11 + 3 tokens" in turn_one and "2.00 s" in turn_one
    assert "transcript: 1 messages" in page


def test_replayed_turns_take_no_model_time(tmp_path):
    """A turn replayed from the response cache took no model time in this run: the transcript's seconds in
    model calls leave it out and say how many turns were replayed."""
    (tmp_path / "t.json").write_text(
        json.dumps(
            {
                "messages": [
                    {"role": "assistant", "content": "one"},
                    {"role": "user", "content": "more"},
                    {"role": "assistant", "content": "two"},
                ],
                "turns": [
                    {"message": 0, "prompt_tokens": 11, "completion_tokens": 3, "latency": 2.0},
                    {"message": 2, "prompt_tokens": 17, "completion_tokens": 4, "latency": 5.0, "cached": True},
                ],
            }
        )
    )
    page = render_html(
        {"settings": {"benchmark": "x"}}, [{"id": "a", "status": "pass", "trajectory": "t.json"}], tmp_path
    )
    assert "28 + 7 tokens · 2.00 s in model calls · 1 turn replayed from the cache" in page


def test_incomplete_corebench_card_counts_not_run_capsules_by_difficulty_and_questions(tmp_path):
    """A capsule that never ran still has the run's difficulty and its questions: the card's per-difficulty
    line agrees with the headline, and the written and figure question counts include it as not answered."""
    from types import SimpleNamespace

    from pytest_agentbench.benchmarks.registry import get_benchmark
    from pytest_agentbench.core.types import Sample
    from pytest_agentbench.pytest_plugin.reporter import not_run_fields
    from pytest_agentbench.report.summary import not_run_records

    summary, record = corebench_summary_and_record()
    ran = {
        **record,
        "status": "pass",
        "difficulty": "hard",
        "correct_written": 1,
        "total_written": 1,
        "correct_figure": 1,
        "total_figure": 1,
    }
    sample = Sample(
        id="capsule-2",
        task_id="capsule-2",
        split="test",
        data={"results": [{"fig mean accuracy": 0.9, "best model": "resnet", "epochs": 3}]},
    )
    selected = {
        "benchmark": "core-bench",
        "task": "capsule-2",
        "id": "capsule-2",
        "split": "test",
        "scored": True,
        **not_run_fields(
            SimpleNamespace(
                benchmark=get_benchmark("core-bench"),  # the reporter's call
                settings={"difficulty": "hard"},
            ),
            sample,
        ),
    }
    stand_ins = not_run_records([selected], [ran])
    assert stand_ins[0]["difficulty"] == "hard"
    summary["metrics"]["capsule_accuracy"] = 0.5
    page = render_html(summary, [ran, *stand_ins], tmp_path)
    card = page.split('<div class="cards">', 1)[1].split("</div></div>", 1)[0]
    assert "1/2 · 95% CI" in card and "difficulty hard: 1/2 passed" in card, card
    assert "written questions: 1/3 correct" in card and "figure questions: 1/2 correct" in card, card


def test_a_link_to_an_item_opens_it_and_its_transcript_on_every_click(tmp_path):
    """An in-page link to an item opens the item and its transcript, also when the address already names it
    (a click then changes no hash)."""
    (tmp_path / "t.json").write_text(json.dumps({"messages": [{"role": "assistant", "content": "THE REPLY"}]}))
    records = [
        {"id": "a", "task": "a", "status": "pass"},
        {"id": "b", "task": "b", "status": "fail", "trajectory": "t.json"},
    ]
    page_file = tmp_path / "report.html"
    page_file.write_text(
        render_html({"settings": {"benchmark": "x"}}, records, tmp_path, sections=['<a id="to-b" href="#item-b">b</a>'])
    )
    state = (
        "(function(){var e=document.getElementById('item-b');"
        "return [e.open, e.querySelector('details.transcript').open];})()"
    )
    needs("chromium")
    with Chromium() as browser:
        view = browser.open(page_file.as_uri())
        for _ in range(2):  # the first click changes the hash, the second does not
            view.evaluate(
                "document.getElementById('f-close').click(); document.getElementById('to-b').click();"
                "new Promise(function(done){setTimeout(done, 100);})"
            )
            assert view.evaluate(state) == [True, True]
        assert view.errors == []
