"""Every setting of the plugin, described from its declaration: ``python -m pytest_agentbench options``.

For each option: how the command line sets it (its flag, or ``--bench-set NAME=VALUE`` for one not shown in
``pytest --help``), its ini key, environment variable and run-file key, its default and its help, grouped as
``pytest --help`` groups them. ``--markdown`` prints the same as the tables of docs/options.md, which
tests/test_docs.py keeps equal to it.
"""

from __future__ import annotations

from typing import Any

from ..core.options import Option
from .options import SET_OPTION, all_options, help_groups

MARKDOWN_START = "<!-- generated: python -m pytest_agentbench options --markdown -->"
MARKDOWN_END = "<!-- end of generated -->"


def shown_default(option: Option) -> str:
    """The default as a user reads it: none, the value, or that it depends on where the run is."""
    default: Any = option.default
    if callable(default):
        return "(see help)"
    if default is None or default == ():
        return "(none)"
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, tuple):
        return ",".join(map(str, default))
    return str(default)


def where(option: Option) -> list[str]:
    """Every place the option can be set, command line first."""
    places = [option.usage()]
    if option.shown and option.negative_flag:
        places.append(option.negative_flag)
    if option.ini:
        places.append(f"ini {option.ini}")
    if option.env:
        places.append(f"${option.env}")
    if option.runfile_group:
        places.append(f"run file {option.runfile_group}: {option.name}")
    return places


def text_listing(options: tuple[Option, ...]) -> str:
    lines: list[str] = []
    for title, grouped in help_groups((*options, SET_OPTION)).items():
        lines.append(f"{title}:")
        for option in grouped:
            shown = "" if option.shown else "  (not in pytest --help)"
            lines.append(f"  {option.name}{shown}")
            lines.append(f"    set with: {'; '.join(where(option))}")
            lines.append(f"    default:  {shown_default(option)}")
            lines.append(f"    {option.help}")
        lines.append("")
    return "\n".join(lines)


def markdown_listing(options: tuple[Option, ...]) -> str:
    out = [MARKDOWN_START, ""]
    for title, grouped in help_groups((*options, SET_OPTION)).items():
        out += [
            f"### {title[0].upper()}{title[1:]}",
            "",
            "| setting | set with | default | meaning |",
            "|---|---|---|---|",
        ]
        for option in grouped:
            cells = [
                f"`{option.name}`",
                ", ".join(f"`{place}`" for place in where(option)),
                f"`{shown_default(option)}`",
                option.help.replace("|", "\\|").replace("\n", " "),
            ]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    out.append(MARKDOWN_END)
    return "\n".join(out)


def main(argv: list[str]) -> int:
    options = all_options()
    print(markdown_listing(options) if "--markdown" in argv else text_listing(options))
    return 0
