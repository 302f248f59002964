"""The README and every docs/*.md page name only what exists: each agentbench option (``--bench-*``,
``--model*``, ``--no-bench-*``) and ini key (``agentbench_*``) is one ``pytest --help`` lists, each
``python -m pytest_agentbench COMMAND`` is one its usage lists, each repository file named in a code span
exists, each relative link reaches a file (and a heading, when it names an anchor), every page is reachable
from the README, docs/options.md lists exactly the options ``pytest --help`` shows, the README stays a
ten-minute read, and no file of the repository points at a tracker's issue number instead of saying what and
why (the tracker is not in the repository; another project's issue named with its project, ``SciCode#2``, is
a public reference and allowed)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.bench_runs import REPO

README_MAX_BYTES = 12 * 1024
HELP_GROUP = re.compile(r"^agentbench \((.+)\):$", re.MULTILINE)  # the title of each of the plugin's groups

# An agentbench option anywhere in a page: prose, code spans and command lines alike. `--benchmark-*`
# (pytest-benchmark) and a bare `--bench-` prefix are not matches.
OPTION = re.compile(r"(?<![\w-])--(?:no-)?(?:bench|model)(?:-[a-z0-9]+)*(?![\w-])")
INI_KEY = re.compile(r"(?<![\w.$])agentbench_[a-z][a-z0-9_]*")
COMMAND = re.compile(r"python3? -m pytest_agentbench ([a-z][a-z|-]*)")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)
# a number of this project's tracker: the word issue (or issues) before a number, or a number in parentheses
ISSUE_NUMBER = re.compile(r"\bissues? #?\d+|\(#\d+\)", re.IGNORECASE)
# where a reference could be written: everything of the repository but tools' caches and what runs put in
# data/ and reports/ (their own README.md files are the repository's)
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".cfg", ".ini", ".yaml", ".yml", ".json", ".sh", ".html", ".js", ".css"}
NOT_SOURCE = {".git", "__pycache__", ".mypy_cache", ".ruff_cache", ".venv", "venv", "build", "dist"}
RUN_FOLDERS = {"data", "reports"}


# ---------------------------------------------------------------- what exists


def help_groups(help_text: str) -> dict[str, str]:
    """The text of each of the plugin's groups in ``pytest --help``, by title (``model, cost and budget``)."""
    titles = list(HELP_GROUP.finditer(help_text))
    assert titles, "pytest --help has no group 'agentbench (...)': is the plugin loaded?"
    return {
        title.group(1): re.split(r"^\S.*:\s*$", help_text[title.end() :], maxsplit=1, flags=re.MULTILINE)[0]
        for title in titles  # each group up to the next group's title
    }


def group_options(group: str) -> set[str]:
    return set(re.findall(r"^ {2}(--[a-z0-9-]+)", group, re.MULTILINE))


def help_options(help_text: str) -> tuple[set[str], set[str]]:
    """The options of the plugin's groups in ``pytest --help``, and the plugin's ini keys (those of the options not
    shown as flags, ``--bench-set NAME=VALUE``, too: pytest lists every ini key in its ini-options section)."""
    groups = help_groups(help_text).values()
    options = {o for group in groups for o in group_options(group)}
    ini_keys = set(re.findall(r"^ {2}(agentbench_[a-z0-9_]+) \(", help_text, re.MULTILINE))
    return options, ini_keys


def help_long_options(help_text: str) -> set[str]:
    """Every long option ``pytest --help`` names, of pytest and of every plugin loaded."""
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", help_text))


def help_environment_variables(help_text: str) -> set[str]:
    """The environment variables the plugin's options read, as ``pytest --help`` names them (``[... env $X]``)."""
    group = " ".join(help_groups(help_text).values())
    return set(re.findall(r"env (\$[A-Z][A-Z0-9_]*)", " ".join(group.split())))


def usage_commands(usage: str) -> set[str]:
    """The commands ``python -m pytest_agentbench --help`` lists: the names under "commands:", or an argparse
    parser's sub-command choices (``{compare,init,...}``)."""
    found = {name for choices in re.findall(r"\{([a-z][a-z,-]*)\}", usage) for name in choices.split(",")}
    if "commands:" in usage:
        listing = re.split(r"^\S", usage.split("commands:", 1)[1], maxsplit=1, flags=re.MULTILINE)[0]
        found |= set(re.findall(r"^ {2}([a-z][a-z-]+)", listing, re.MULTILINE))
    assert found, f"no command found in the usage:\n{usage}"
    return found


@pytest.fixture(scope="session")
def command_usage(tmp_path_factory) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pytest_agentbench", "--help"],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        cwd=tmp_path_factory.mktemp("usage"),
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


# ---------------------------------------------------------------- the checker


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", FENCE.sub("", text), re.MULTILINE):
        base, n = slug(heading), 0
        name = base
        while name in found:  # a repeated heading gets -1, -2, ... as on GitHub
            n += 1
            name = f"{base}-{n}"
        found.add(name)
    return found


def repository_paths_named(text: str, repo: Path) -> set[str]:
    """The code spans that name a path in the repository (``tests/test_redteam.py``, ``.ci/run``,
    ``sandbox/jail.py`` inside the package): spans whose first folder is one of the repository's or the
    package's folders. ``data/`` and ``reports/`` are where runs put their files, not the repository's."""
    package = repo / "pytest_agentbench"
    folders = {p.name for p in repo.iterdir() if p.is_dir() and (p.name == ".ci" or not p.name.startswith("."))}
    folders |= {p.name for p in package.iterdir() if p.is_dir() and p.name != "__pycache__"}
    folders -= {"data", "reports"}
    spans = {span.split("::")[0] for span in re.findall(r"`([\w./-]+)`", text)}
    return {s for s in spans if "/" in s and s.split("/")[0] in folders}


def pytest_command_options(text: str) -> set[str]:
    """The long options of the pytest command lines a page shows (``pytest ...``, ``python -m pytest ...``, with
    ``VAR=value`` before them), in code blocks and code spans; comments after `` #`` left out."""
    lines = [
        line
        for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, re.DOTALL | re.MULTILINE)
        for line in block.replace("\\\n", " ").splitlines()
    ]
    lines += re.findall(r"`([^`\n]+)`", FENCE.sub("", text))
    found: set[str] = set()
    for line in lines:
        line = re.split(r"\s#", line, maxsplit=1)[0]
        if re.match(r"\s*([A-Z_][A-Z0-9_]*=\S+\s+)*(python3? -m )?pytest\s", line + " "):
            found |= set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", line))
    return found


def page_problems(
    page: Path,
    options: set[str],
    ini_keys: set[str],
    commands: set[str],
    repo: Path = REPO,
    pytest_options: set[str] | None = None,
) -> list[str]:
    """Every name on ``page`` that does not exist, and every relative link that leads nowhere. With
    ``pytest_options`` (every long option ``pytest --help`` names), the pytest command lines' options too."""
    text = page.read_text(encoding="utf-8")
    problems = [f"{page.name}: option {o} is not in pytest --help" for o in sorted(set(OPTION.findall(text)) - options)]
    if pytest_options is not None:
        problems += [
            f"{page.name}: a pytest command line gives {o}, which pytest --help does not list"
            for o in sorted(pytest_command_options(text) - pytest_options - set(OPTION.findall(text)))
        ]
    problems += [
        f"{page.name}: ini key {k} is not in pytest --help" for k in sorted(set(INI_KEY.findall(text)) - ini_keys)
    ]
    named = {c for found in COMMAND.findall(text) for c in found.split("|") if c}
    problems += [
        f"{page.name}: `python -m pytest_agentbench {c}` is not a command of its usage"
        for c in sorted(named - commands)
    ]
    problems += [
        f"{page.name}: {path} is not a file or folder of the repository"
        for path in sorted(repository_paths_named(text, repo))
        if not ((repo / path).exists() or (repo / "pytest_agentbench" / path).exists())
    ]
    for target in LINK.findall(FENCE.sub("", text)):
        if re.match(r"[a-z]+:", target):  # https:, mailto: ... (not checked: no network in tests)
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            problems.append(f"{page.name}: link {target} leads to no file ({linked})")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text(encoding="utf-8")):
            problems.append(f"{page.name}: link {target} names no heading of {linked.name}")
    return problems


def sections(page: Path) -> dict[str, str]:
    """The text under each ``## heading`` of ``page``, by heading (code marks dropped, lower case)."""
    parts = re.split(r"^## +(.+?) *$", FENCE.sub("", page.read_text(encoding="utf-8")), flags=re.MULTILINE)
    return {heading.replace("`", "").strip().lower(): body for heading, body in zip(parts[1::2], parts[2::2])}


def grouping_problems(page: Path, groups: dict[str, str]) -> list[str]:
    """docs/options.md has a section per group of ``pytest --help``, its heading naming the group's title,
    listing the group's options."""
    found = sections(page)
    problems = []
    for title, text in groups.items():
        body = next((text for heading, text in found.items() if title.lower() in heading), None)
        if body is None:
            problems.append(f"{page.name} has no section whose heading names '{title}', the group of pytest --help")
            continue
        listed = set(OPTION.findall(body))
        problems += [
            f"{page.name}: {o} is not in section '{title}', its group in pytest --help"
            for o in sorted(group_options(text) - listed)
        ]
    return problems


def unreachable_pages(readme: Path, pages: list[Path]) -> list[Path]:
    """The pages no chain of relative links from the README reaches."""
    seen, todo = {readme.resolve()}, [readme.resolve()]
    while todo:
        page = todo.pop()
        for target in LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
            path = target.partition("#")[0]
            if path and not re.match(r"[a-z]+:", path):
                linked = (page.parent / path).resolve()
                if linked.suffix == ".md" and linked.is_file() and linked not in seen:
                    seen.add(linked)
                    todo.append(linked)
    return [p for p in pages if p.resolve() not in seen]


def options_page_problems(page: Path, options: set[str], environment: set[str] = frozenset()) -> list[str]:
    """docs/options.md lists every option of ``pytest --help`` and no other, and every environment variable
    an option reads."""
    text = page.read_text(encoding="utf-8")
    listed = set(OPTION.findall(text))
    return (
        [f"{page.name} does not list {o}" for o in sorted(options - listed)]
        + [f"{page.name} lists {o}, which pytest --help does not" for o in sorted(listed - options)]
        + [f"{page.name} does not name {v}" for v in sorted(environment) if not re.search(re.escape(v) + r"\b", text)]
    )


def issue_numbers(root: Path) -> list[str]:
    """``path:line: text`` for every tracker issue number in the repository's text files (extension-less
    scripts under ``.ci/`` included)."""
    found = []
    for path in sorted(root.rglob("*")):
        parts = path.relative_to(root).parts
        if not path.is_file() or NOT_SOURCE & set(parts) or parts[0].endswith(".egg-info"):
            continue
        if parts[0] in RUN_FOLDERS and parts[1:] != ("README.md",):
            continue
        if path.suffix not in TEXT_SUFFIXES and not (parts[0] == ".ci" and not path.suffix):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if ISSUE_NUMBER.search(line):
                found.append(f"{path.relative_to(root).as_posix()}:{number}: {line.strip()}")
    return found


# ---------------------------------------------------------------- the repository's pages


def doc_pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", doc_pages(), ids=lambda p: p.name)
def test_a_page_names_only_options_commands_and_files_that_exist(page, help_of_pytest, command_usage):
    options, ini_keys = help_options(help_of_pytest)
    assert (
        page_problems(
            page, options, ini_keys, usage_commands(command_usage), pytest_options=help_long_options(help_of_pytest)
        )
        == []
    )


def test_the_options_page_lists_every_option_and_variable_of_pytest_help(help_of_pytest):
    options, _ = help_options(help_of_pytest)
    assert 30 < len(options) <= 40, sorted(options)  # the whole groups were read; --help stays short
    environment = help_environment_variables(help_of_pytest)
    assert {"$AGENTBENCH_DATA_DIR", "$OPENAI_API_KEY"} <= environment, environment
    assert options_page_problems(REPO / "docs" / "options.md", options, environment) == []


def test_pytest_help_groups_the_options_by_concern_as_the_options_page_does(help_of_pytest):
    groups = help_groups(help_of_pytest)
    assert {"selection and data", "model, cost and budget", "reports and gates", "--bench=scicode"} <= set(groups)
    assert all(len(group_options(text)) <= 25 for text in groups.values()), {
        title: len(group_options(text)) for title, text in groups.items()
    }  # no flat list of every option
    assert "--model-params" in group_options(groups["model, cost and budget"])
    assert "--bench-mode" in group_options(groups["--bench=scicode"])
    assert grouping_problems(REPO / "docs" / "options.md", groups) == []


def test_every_docs_page_is_reachable_from_the_readme():
    assert unreachable_pages(REPO / "README.md", doc_pages()[1:]) == []


def test_no_file_names_a_tracker_issue_number_instead_of_saying_why():
    assert issue_numbers(REPO) == []


def test_the_readme_is_a_ten_minute_read():
    size = len((REPO / "README.md").read_bytes())
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes; move detail to a docs/ page"


# ---------------------------------------------------------------- the checker can fail


def test_the_checker_names_what_a_fabricated_page_gets_wrong(tmp_path, help_of_pytest, command_usage):
    options, ini_keys = help_options(help_of_pytest)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "real.md").write_text("# Real page\n\n## Comparing runs\n")
    page = tmp_path / "README.md"
    page.write_text(
        "# Fabricated\n\n## Use it\n\n"
        "Run `pytest --bench=scicode --bench-no-such-option=3 --model=oracle` with ini key `agentbench_nope` "
        "beside `agentbench_split`; `--benchmark-skip` belongs to another plugin. `tests/test_docs.py`, "
        "`sandbox/jail.py` and `.ci/run` exist, `tests/test_gone.py` does not; `data/scicode/` is a run's.\n\n"
        "```bash\npython -m pytest_agentbench compare A B\npython -m pytest_agentbench frobnicate RUN\n"
        "pytest --bench-set=hints=false --model-made-up=1\nDOCKER_HOST=ssh://h pytest -d --tx 2*popen --lf \\\n"
        "    --maxfial=2  # --not-an-option in a comment\ndocker run --rm image\n```\n\n"
        "Or `python -m pytest --junit-xml=out.xml --colour=yes`.\n\n"
        "[ok](docs/real.md#comparing-runs), [here](#use-it), [gone](docs/missing.md), "
        "[bad anchor](docs/real.md#no-such-heading), [web](https://example.org/x)\n"
    )
    assert page_problems(
        page, options, ini_keys, usage_commands(command_usage), pytest_options=help_long_options(help_of_pytest)
    ) == [
        "README.md: option --bench-no-such-option is not in pytest --help",
        "README.md: option --model-made-up is not in pytest --help",
        "README.md: a pytest command line gives --colour, which pytest --help does not list",
        "README.md: a pytest command line gives --maxfial, which pytest --help does not list",
        "README.md: ini key agentbench_nope is not in pytest --help",
        "README.md: `python -m pytest_agentbench frobnicate` is not a command of its usage",
        "README.md: tests/test_gone.py is not a file or folder of the repository",
        f"README.md: link docs/missing.md leads to no file ({tmp_path / 'docs' / 'missing.md'})",
        "README.md: link docs/real.md#no-such-heading names no heading of real.md",
    ]
    orphan = tmp_path / "docs" / "orphan.md"
    orphan.write_text("# Nobody links here\n")
    assert unreachable_pages(page, [tmp_path / "docs" / "real.md", orphan]) == [orphan]


def test_the_issue_number_check_finds_each_form_and_spares_other_projects(tmp_path):
    issue = "issue"  # written apart, so this file does not hold what it looks for
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(f'"""Checks ({issue} 13: fail fast)."""\n# see {issue.title()} #22\n')
    (tmp_path / "CHANGELOG.md").write_text(f"- Fixed the cache ({'#'}41).\n- Fixed {issue}s 19 and 20.\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "fine.md").write_text("SciCode#2 and siegelz/core-bench#40; pytest-xdist #282; point 5\n")
    (tmp_path / ".ci").mkdir()
    (tmp_path / ".ci" / "run").write_text(f"#!/bin/sh\n# {issue} 7\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.md").write_text(f"{issue} 9 in downloaded data\n")
    (tmp_path / "data" / "README.md").write_text(f"Fixed in {issue} 3.\n")
    assert issue_numbers(tmp_path) == [
        f".ci/run:2: # {issue} 7",
        f"CHANGELOG.md:1: - Fixed the cache ({'#'}41).",
        f"CHANGELOG.md:2: - Fixed {issue}s 19 and 20.",
        f"data/README.md:1: Fixed in {issue} 3.",
        f'pkg/mod.py:1: """Checks ({issue} 13: fail fast)."""',
        f"pkg/mod.py:2: # see {issue.title()} #22",
    ]


def test_the_options_check_fails_both_ways(tmp_path, help_of_pytest):
    options, _ = help_options(help_of_pytest)
    page = tmp_path / "options.md"
    page.write_text("\n".join(f"`{o}`" for o in sorted(options - {"--bench-timeout"})) + "\n`--bench-gone`\n")
    assert options_page_problems(page, options, {"$OPENAI_API_KEY", "$AGENTBENCH_DATA_DIR"}) == [
        "options.md does not list --bench-timeout",
        "options.md lists --bench-gone, which pytest --help does not",
        "options.md does not name $AGENTBENCH_DATA_DIR",
        "options.md does not name $OPENAI_API_KEY",
    ]
