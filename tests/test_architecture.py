"""The architecture (docs/architecture.md), as checks that cannot pass hollowly.

1. Layering, read from the source with ``ast`` (module-level and function-level imports alike, no
   ignore list): ``{pytest_plugin, cli} -> {report, backends} -> benchmarks -> {envs, models} -> sandbox ->
   core``, imports point down only (the command line, ``cli``, sits beside the plugin and imports neither it nor
   pytest; the back-ends, ``backends``, sit beside the report, so no benchmark imports one), no import cycle
   between any two modules, only ``pytest_plugin`` imports pytest, no private name crosses a module boundary,
   every function-level import says why, the core layers do not know the benchmarks by name, and the trust
   boundary is a module boundary: the modules that run in the untrusted child import nothing from the trusted
   side.
2. Every module of the non-plugin packages imports without pytest, in a fresh interpreter.
3. A third benchmark (tests/toybench), installed as a distribution into a temporary site folder and
   found through its entry point alone, gets collection, reports, gates, a baseline, ``compare`` and
   its own option and marker, with no change to the plugin and no patching of the registry.
4. No test module imports another test module (or conftest.py); helper modules import no test module.

Every rule is also run on a made-up package with known breaches, so a rule that reads nothing fails.
"""

from __future__ import annotations

import ast
import base64
import fcntl
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import textwrap
import tokenize
import zipfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROOT = "pytest_agentbench"
PACKAGE = REPO / ROOT
TESTS = REPO / "tests"
TOYBENCH = TESTS / "toybench"

# Top-level names of pytest and the pytest plugins it runs with: only the plugin package may import them.
PYTEST_MODULES = ("pytest", "_pytest", "pluggy", "xdist")
PLUGIN = f"{ROOT}.pytest_plugin"
# The packages that must not know the benchmarks by name.
BENCHMARK_BLIND = ("core", "sandbox", "envs", "models", "report", "backends", "pytest_plugin")
BENCHMARK_NAME = re.compile(r"sci[-_ ]?code|core[-_ ]?bench", re.IGNORECASE)
# rank: imports point from a higher rank to a lower one; two units of one rank do not import each other, so
# the command line (``cli``) never imports the plugin. The back-ends (``backends``: Slurm's commands and task
# packages) sit beside the report: only the plugin and the command line may use them, and a benchmark states its
# tasks' needs through ``core.jobs`` instead. The package root and ``__main__`` (``python -m``) sit
# on top; nothing imports them.
LAYERS = {
    "pytest_plugin": 6,
    "cli": 6,
    "report": 5,
    "benchmarks": 4,
    "envs": 3,
    "models": 3,
    "sandbox": 2,
    "backends": 5,
    "core": 1,
}
TOP = 7
# The child side of the trust boundary: the modules whose code runs in the untrusted child, beside the model's
# code. A package named ``child`` (benchmarks/scicode/child/) and the modules the child loads from elsewhere
# by file path: the codec that encodes its operands, upstream's comparison helpers the test text imports.
CHILD_PACKAGE = "child"
CHILD_LOADED = ("sandbox.codec", "benchmarks.scicode.compare")


# ---- reading the source ------------------------------------------------------------------------
@dataclass(frozen=True)
class Module:
    name: str  # pytest_agentbench.report.compare
    path: Path
    rel: str  # the path as shown in messages
    is_package: bool


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module, resolved (absolute)
    names: tuple[str, ...]  # names taken with ``from target import ...`` (empty for ``import target``)
    line: int
    end_line: int
    in_function: bool


class Codebase:
    """The modules of one package folder and their import statements, read with ``ast`` (nothing is
    imported, so a module that cannot be imported today is still checked)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.root = folder.name

    # Read on first use, not when the module is imported: collecting the tests does not parse the package.
    @cached_property
    def modules(self) -> dict[str, Module]:
        modules = {}
        for path in sorted(self.folder.rglob("*.py")):
            parts = (self.root, *path.relative_to(self.folder).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            name = ".".join(parts[:-1] if is_package else parts)
            modules[name] = Module(name, path, str(path.relative_to(self.folder.parent)), is_package)
        return modules

    @cached_property
    def sources(self) -> dict[str, str]:
        return {name: m.path.read_text(encoding="utf-8") for name, m in self.modules.items()}

    @cached_property
    def trees(self) -> dict[str, ast.Module]:
        return {name: ast.parse(text, filename=str(self.modules[name].path)) for name, text in self.sources.items()}

    @cached_property
    def imports(self) -> dict[str, list[Import]]:
        return {name: self.imports_of(name) for name in self.modules}

    def absolute(self, module: str, level: int, name: str | None) -> str:
        """The absolute module name of a (possibly relative) ``from`` import."""
        if level == 0:
            return name or ""
        package = module.split(".") if self.modules[module].is_package else module.split(".")[:-1]
        base = package[: len(package) - (level - 1)]
        return ".".join(base + ([name] if name else []))

    def imports_of(self, module: str) -> list[Import]:
        """Every import statement of a module, at any depth, with whether it runs inside a function."""
        out: list[Import] = []

        def visit(node: ast.AST, in_function: bool) -> None:
            for child in ast.iter_child_nodes(node):
                end = getattr(child, "end_lineno", None) or getattr(child, "lineno", 0)
                if isinstance(child, ast.Import):
                    out.extend(Import(module, alias.name, (), child.lineno, end, in_function) for alias in child.names)
                elif isinstance(child, ast.ImportFrom):
                    target = self.absolute(module, child.level, child.module)
                    out.append(
                        Import(module, target, tuple(a.name for a in child.names), child.lineno, end, in_function)
                    )
                visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

        visit(self.trees[module], False)
        return out

    def internal(self, name: str) -> bool:
        return name == self.root or name.startswith(self.root + ".")

    def owning_module(self, name: str) -> str:
        """The longest existing module that ``name`` lies in (an import of a missing module still counts)."""
        parts = name.split(".")
        while parts and ".".join(parts) not in self.modules:
            parts.pop()
        return ".".join(parts) or name

    def edges_of(self, imp: Import) -> list[str]:
        """Package modules an import statement loads: ``from pkg import mod`` loads ``pkg.mod``. (The
        implicit import of a parent package's ``__init__`` is not counted.)"""
        if not self.internal(imp.target):
            return []
        if not imp.names:
            return [self.owning_module(imp.target)]
        found = {
            f"{imp.target}.{n}" if f"{imp.target}.{n}" in self.modules else self.owning_module(imp.target)
            for n in imp.names
        }
        return sorted(found)

    def graph(self) -> dict[str, set[str]]:
        return {name: {t for imp in imps for t in self.edges_of(imp)} for name, imps in self.imports.items()}

    def layer_of(self, module: str) -> tuple[int, str] | None:
        """(rank, unit) of a module. Modules of one unit may import each other (cycles aside); a concrete
        benchmark (unit ``benchmarks.<name>``) may use the benchmark framework (unit ``benchmarks``)."""
        parts = module.split(".")
        if module in (self.root, f"{self.root}.__main__"):
            return TOP, "top"
        if len(parts) < 2 or parts[1] not in LAYERS:
            return None
        unit = parts[1]
        if unit == "benchmarks" and len(parts) >= 3 and (self.folder / "benchmarks" / parts[2]).is_dir():
            unit = f"benchmarks.{parts[2]}"  # a concrete benchmark package
        return LAYERS[parts[1]], unit

    def where(self, imp: Import) -> str:
        return f"{self.modules[imp.source].rel}:{imp.line}"

    def short(self, module: str) -> str:
        return module.removeprefix(self.root + ".")


def allowed(source: tuple[int, str], target: tuple[int, str]) -> bool:
    (rank_s, unit_s), (rank_t, unit_t) = source, target
    if unit_s == unit_t or (unit_s.startswith("benchmarks.") and unit_t == "benchmarks"):
        return True
    return rank_s > rank_t


# ---- the rules (each returns its violations, one line each) ---------------------------------------
def stray_modules(code: Codebase) -> list[str]:
    return [m.rel for name, m in code.modules.items() if code.layer_of(name) is None]


def imports_against_layers(code: Codebase) -> list[str]:
    bad = []
    for imps in code.imports.values():
        for imp in imps:
            source = code.layer_of(imp.source)
            for target in code.edges_of(imp):
                layer = code.layer_of(target)
                if source and layer and not allowed(source, layer):
                    bad.append(
                        f"{code.where(imp)}: {code.short(imp.source)} ({source[1]}) imports "
                        f"{code.short(target)} ({layer[1]})" + (" in a function" if imp.in_function else "")
                    )
    return bad


def strongly_connected(g: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative): the components with more than one module, or a self-import."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    for start in sorted(g):
        if start in index:
            continue
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        work = [(start, iter(sorted(g[start])))]
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in g:
                    continue
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(g[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in g[node]:
                    out.append(sorted(component))
    return out


def a_cycle(g: dict[str, set[str]], component: list[str]) -> list[str]:
    """One shortest cycle through the first module of a component, for the message."""
    members = set(component)
    start = component[0]
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for child in sorted(g[node]):
            if child == start:
                return paths[node] + [start]
            if child in members and child not in paths:
                paths[child] = paths[node] + [child]
                queue.append(child)
    return component


def import_cycles(code: Codebase) -> list[str]:
    g = code.graph()
    out = []
    for component in strongly_connected(g):
        cycle = a_cycle(g, component)
        steps = "; ".join(
            code.modules[a].rel
            + ":"
            + ",".join(
                f"{i.line}{' (function)' if i.in_function else ''}" for i in code.imports[a] if b in code.edges_of(i)
            )
            for a, b in zip(cycle, cycle[1:])
        )
        more = (
            f" (one cycle of a tangle of {len(component)} modules: {', '.join(map(code.short, component))})"
            if len(component) > len(cycle) - 1
            else ""
        )
        out.append(f"{' -> '.join(map(code.short, cycle))}  [{steps}]{more}")
    return sorted(out)


def pytest_imports(code: Codebase) -> list[str]:
    plugin = f"{code.root}.pytest_plugin"
    return [
        f"{code.where(imp)}: {code.short(imp.source)} imports {imp.target}"
        + (" in a function" if imp.in_function else "")
        for imps in code.imports.values()
        for imp in imps
        if imp.target.split(".")[0] in PYTEST_MODULES
        and not (imp.source == plugin or imp.source.startswith(plugin + "."))
    ]


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_names(code: Codebase) -> list[str]:
    """``from x import _y``, and ``mod._y`` where ``mod`` names an imported module of the package."""
    bad = []
    for name, module in code.modules.items():
        for imp in code.imports[name]:
            private = [n for n in imp.names if is_private(n)]
            if private:
                bad.append(f"{code.where(imp)}: imports {', '.join(private)} from {imp.target}")
        aliases = {}  # local name -> package module it is bound to
        for node in ast.walk(code.trees[name]):
            if isinstance(node, ast.Import):
                aliases.update({a.asname: a.name for a in node.names if a.asname and code.internal(a.name)})
            elif isinstance(node, ast.ImportFrom):
                target = code.absolute(name, node.level, node.module)
                aliases.update(
                    {
                        a.asname or a.name: f"{target}.{a.name}"
                        for a in node.names
                        if f"{target}.{a.name}" in code.modules
                    }
                )
        for node in ast.walk(code.trees[name]):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and is_private(node.attr)
            ):
                bad.append(f"{module.rel}:{node.lineno}: uses {code.short(aliases[node.value.id])}.{node.attr}")
    return bad


# pytest's public modules; ``_pytest`` and their private names change between releases without notice
PYTEST_PUBLIC = ("pytest", "xdist", "pluggy")


def owner_name(node: ast.expr) -> str:
    """The last name of what an attribute is read from: ``config`` in ``config._x``, ``item.config._x``."""
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def pytest_private_uses(code: Codebase) -> list[str]:
    """Imports of ``_pytest``, private names imported from pytest/pytest-xdist/pluggy, and private attributes
    read from a pytest config (any name ending in ``config``: ``config._parser``, ``item.config._x``)."""
    bad = []
    for name, module in code.modules.items():
        for imp in code.imports[name]:
            parts = imp.target.split(".")
            private = [n for n in (*parts[1:], *imp.names) if is_private(n)]
            if parts[0] == "_pytest" or (parts[0] in PYTEST_PUBLIC and private):
                bad.append(f"{code.where(imp)}: imports {', '.join(imp.names) or imp.target} from {imp.target}")
        reads = [
            node
            for node in ast.walk(code.trees[name])
            if isinstance(node, ast.Attribute) and is_private(node.attr) and owner_name(node.value).endswith("config")
        ]
        bad += [f"{module.rel}:{node.lineno}: reads {ast.unparse(node)}" for node in sorted(reads, key=line_of)]
    return bad


def line_of(node: ast.expr) -> int:
    return node.lineno


DIRECTIVE = re.compile(r"\b(noqa|type:\s*ignore|pragma|pylint|isort|fmt|ruff)\b[:\s\w,\[\]-]*", re.IGNORECASE)


def comments_of(source: str) -> tuple[dict[int, str], set[int]]:
    """Comment text per line, and the lines that hold nothing but a comment."""
    comments: dict[int, str] = {}
    code_lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
        elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
            code_lines.update(range(tok.start[0], tok.end[0] + 1))
    return comments, set(comments) - code_lines


def unexplained_function_imports(code: Codebase) -> list[str]:
    """The comment on the import's lines, else on the comment-only line right above, must give a reason:
    two words at least once linter directives (noqa, type: ignore) are taken out."""
    bad = []
    for name in code.modules:
        comments, comment_only = comments_of(code.sources[name])
        for imp in code.imports[name]:
            if not imp.in_function:
                continue
            reason = next((comments[n] for n in range(imp.line, imp.end_line + 1) if n in comments), None)
            if reason is None and imp.line - 1 in comment_only:
                reason = comments[imp.line - 1]
            if len(DIRECTIVE.sub("", reason or "").split()) < 2:
                bad.append(
                    f"{code.where(imp)}: import of {imp.target}"
                    + (f" has only the comment {reason!r}" if reason else " has no comment")
                )
    return bad


def string_constants(tree: ast.AST) -> list[ast.Constant]:
    """String literals (parts of f-strings included), docstrings and other bare string statements excluded."""
    bare = {
        id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in bare
    ]


def benchmark_names(code: Codebase) -> list[str]:
    bad = []
    concrete = {name for name in code.modules if (code.layer_of(name) or (0, ""))[1].startswith("benchmarks.")}
    for name, module in code.modules.items():
        if name.split(".")[1:2] not in [[p] for p in BENCHMARK_BLIND]:
            continue
        for node in string_constants(code.trees[name]):
            found = BENCHMARK_NAME.search(node.value)
            if found:
                bad.append(f"{module.rel}:{node.lineno}: {found.group(0)!r} in {node.value[:70]!r}")
        for imp in code.imports[name]:
            hit = [code.short(t) for t in code.edges_of(imp) if t in concrete]
            if hit:
                bad.append(f"{code.where(imp)}: imports {', '.join(hit)}")
    return bad


def child_side(code: Codebase) -> set[str]:
    """The modules of the child side (``CHILD_PACKAGE``, ``CHILD_LOADED``)."""
    loaded = {f"{code.root}.{name}" for name in CHILD_LOADED}
    return {name for name in code.modules if name in loaded or CHILD_PACKAGE in name.split(".")[1:]}


def child_imports_of_trusted(code: Codebase) -> list[str]:
    """Imports, at any depth, of a package module outside the child side by a module of the child side."""
    child = child_side(code)
    bad = []
    for name in sorted(child):
        for imp in code.imports[name]:
            trusted = [code.short(target) for target in code.edges_of(imp) if target not in child]
            if trusted:
                bad.append(
                    f"{code.where(imp)}: {code.short(name)} (child side) imports {', '.join(trusted)}"
                    + (" in a function" if imp.in_function else "")
                )
    return bad


# ---- 1. layering ---------------------------------------------------------------------------------
CODE = Codebase(PACKAGE)


def test_the_package_is_read():
    """Guards the checks below against passing because they read nothing."""
    assert len(CODE.modules) > 30
    for layer in LAYERS:
        assert f"{ROOT}.{layer}" in CODE.modules, f"no {layer}/ package"
    assert sum(len(v) for v in CODE.imports.values()) > 100


def test_every_module_belongs_to_a_layer():
    stray = stray_modules(CODE)
    assert not stray, f"modules outside the layers {', '.join(LAYERS)} (move them into one): {stray}"


def test_imports_point_down_the_layers():
    """{pytest_plugin, cli} -> {report, backends} -> benchmarks -> {envs, models} -> sandbox -> core: an import
    never points up or sideways (the command line never imports the plugin; envs and models are independent; so
    are the report and the back-ends, and so are two benchmarks; no benchmark imports a back-end; the benchmark
    framework, base.py and registry.py, does not import a concrete benchmark). Function-level imports count."""
    bad = imports_against_layers(CODE)
    assert not bad, "imports against the layering:\n" + "\n".join(bad)


def test_no_import_cycles():
    """No two modules import each other, directly or through others; function-level imports count."""
    cycles = import_cycles(CODE)
    assert not cycles, "import cycles (module -> module [file:line of each import]):\n" + "\n".join(cycles)


def test_only_the_plugin_imports_pytest():
    bad = pytest_imports(CODE)
    assert not bad, f"{'/'.join(PYTEST_MODULES)} imported outside pytest_plugin/:\n" + "\n".join(bad)


def test_no_private_names_cross_modules():
    bad = private_names(CODE)
    assert not bad, "private names used across modules:\n" + "\n".join(bad)


def test_function_level_imports_say_why():
    """A function-level import is allowed where it keeps start-up light, with a one-line reason. It is no
    way around a cycle: the cycle check counts it."""
    bad = unexplained_function_imports(CODE)
    assert not bad, "function-level imports without a one-line reason:\n" + "\n".join(bad)


def test_the_core_does_not_know_the_benchmarks_by_name():
    """No "scicode"/"core-bench"/"core_bench" literal (help texts and f-strings included; docstrings and
    comments not) and no import of a concrete benchmark in core/, sandbox/, envs/, models/, report/,
    backends/, pytest_plugin/."""
    bad = benchmark_names(CODE)
    assert not bad, "benchmark names in the benchmark-blind layers:\n" + "\n".join(bad)


def test_the_child_side_imports_nothing_of_the_trusted_side():
    """The trust boundary is a module boundary: what runs in the untrusted child (SciCode's operand runtime,
    the codec, the comparison helpers) imports no module of the package but another of the child side, so a
    reviewer reads those alone to know what runs beside the model's code (the child loads them by file path).
    The trusted side (the plan, the script builder, the verdict) may import them."""
    child = child_side(CODE)
    assert {
        f"{ROOT}.benchmarks.scicode.child",
        f"{ROOT}.benchmarks.scicode.child.runtime",
        *(f"{ROOT}.{name}" for name in CHILD_LOADED),
    } <= child, sorted(child)
    assert len(child) < 10, f"the child side should stay small: {sorted(child)}"
    bad = child_imports_of_trusted(CODE)
    assert not bad, "the child side imports the trusted side:\n" + "\n".join(bad)


def test_the_plugin_uses_only_public_pytest():
    """Nothing from ``_pytest``, no private name imported from pytest, pytest-xdist or pluggy, and no private
    attribute of a config (``config._parser``). What this rule does not see: xdist's undocumented objects, which
    only ``distribution/xdist_compat.py`` touches (docs/testing.md), and a private attribute read through
    ``getattr``."""
    bad = pytest_private_uses(CODE)
    assert not bad, "private pytest API used:\n" + "\n".join(bad)


PRIVATE_PYTEST = (
    "import pytest\nimport _pytest\nfrom _pytest.config.findpaths import determine_setup\nfrom xdist import _x\n\n"
    "def hook(early_config, item, parser):\n"
    "    early_config._parser.parse_known_args([])\n"
    "    return item.config._inicache, early_config.rootpath, item._private, parser.parse_known_args([])\n"
)


def test_the_public_pytest_rule_finds_a_breach(tmp_path):
    """On a made-up plugin with each kind of breach (and public uses beside them that must pass)."""
    folder = tmp_path / ROOT
    (folder / "pytest_plugin").mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    (folder / "pytest_plugin" / "__init__.py").write_text(PRIVATE_PYTEST)
    assert pytest_private_uses(Codebase(folder)) == [
        f"{ROOT}/pytest_plugin/__init__.py:2: imports _pytest from _pytest",
        f"{ROOT}/pytest_plugin/__init__.py:3: imports determine_setup from _pytest.config.findpaths",
        f"{ROOT}/pytest_plugin/__init__.py:4: imports _x from xdist",
        f"{ROOT}/pytest_plugin/__init__.py:7: reads early_config._parser",
        f"{ROOT}/pytest_plugin/__init__.py:8: reads item.config._inicache",
    ]


FAKE_PACKAGE = {
    "__init__.py": "",
    "stray.py": "",
    "core/__init__.py": "",
    "core/a.py": "from ..report import gates\n_hidden = 1\n",
    "core/rec.py": "from . import a as mod\nvalue = mod._hidden\n",
    "sandbox/__init__.py": "",
    "envs/__init__.py": "def f():\n    from ..models import m\n",
    "models/__init__.py": "",
    "models/m.py": (
        "def g():\n    import json  # keeps start-up light\n\n"
        "def h():\n    # only the report needs it\n    import csv\n\n"
        "def i():\n    import zlib  # noqa: F401\n"
    ),
    "benchmarks/__init__.py": "",
    "benchmarks/base.py": "from .toy import thing\n",
    "benchmarks/toy/__init__.py": "from ..base import Benchmark\nfrom ...core import rec\n",
    "report/__init__.py": "",
    "report/gates.py": "import pytest\nfrom ..core.a import _hidden\n",
    "report/names.py": '"""About SciCode."""\nHELP = f"{1} e.g. core_bench"\nOTHER = "plain"  # scicode\n',
    "pytest_plugin/__init__.py": "import pytest\nimport _pytest.nodes\nfrom ..report import gates\n",
    # the command line: may use the report (and name a benchmark), never pytest nor the plugin
    "cli/__init__.py": (
        "from ..report import gates\nfrom ..pytest_plugin import hooks\nHELP = 'scicode'\n\n"
        "def main():\n    import pytest  # why: a breach all the same\n"
    ),
    # the child side: a benchmark's child package and a module it loads (the codec); the trusted side imports it
    "sandbox/codec.py": "import json\n",
    "benchmarks/toy/score.py": "",
    "benchmarks/toy/verdict.py": "from .child import run\n",
    "benchmarks/toy/child/__init__.py": "",
    "benchmarks/toy/child/helper.py": "def load():\n    from ...base import Benchmark  # only when asked for\n",
    "benchmarks/toy/child/run.py": (
        "import json\nfrom . import helper\nfrom ....sandbox import codec\n"
        "from .. import score\nimport pytest_agentbench.core.rec\n"
    ),
}


def test_the_rules_find_what_they_look_for(tmp_path):
    """Each rule, on a made-up package with one known breach of it (a check that finds nothing proves nothing)."""
    folder = tmp_path / ROOT
    for rel, text in FAKE_PACKAGE.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    code = Codebase(folder)
    assert stray_modules(code) == [f"{ROOT}/stray.py"]
    assert imports_against_layers(code) == [
        f"{ROOT}/benchmarks/base.py:1: benchmarks.base (benchmarks) imports benchmarks.toy (benchmarks.toy)",
        f"{ROOT}/cli/__init__.py:2: cli (cli) imports pytest_plugin (pytest_plugin)",
        f"{ROOT}/core/a.py:1: core.a (core) imports report.gates (report)",
        f"{ROOT}/envs/__init__.py:2: envs (envs) imports models.m (models) in a function",
    ]
    cycles = import_cycles(code)
    assert len(cycles) == 2, cycles
    assert cycles[0].startswith("benchmarks.base -> benchmarks.toy -> benchmarks.base"), cycles
    assert cycles[1].startswith("core.a -> report.gates -> core.a"), cycles
    assert pytest_imports(code) == [
        f"{ROOT}/cli/__init__.py:6: cli imports pytest in a function",
        f"{ROOT}/report/gates.py:1: report.gates imports pytest",
    ]
    assert private_names(code) == [
        f"{ROOT}/core/rec.py:2: uses core.a._hidden",
        f"{ROOT}/report/gates.py:2: imports _hidden from {ROOT}.core.a",
    ]
    assert unexplained_function_imports(code) == [
        f"{ROOT}/envs/__init__.py:2: import of {ROOT}.models has no comment",
        f"{ROOT}/models/m.py:9: import of zlib has only the comment 'noqa: F401'",
    ]
    assert benchmark_names(code) == [f"{ROOT}/report/names.py:2: 'core_bench' in ' e.g. core_bench'"]
    assert sorted(child_side(code)) == [
        f"{ROOT}.benchmarks.toy.child",
        f"{ROOT}.benchmarks.toy.child.helper",
        f"{ROOT}.benchmarks.toy.child.run",
        f"{ROOT}.sandbox.codec",
    ]
    assert child_imports_of_trusted(code) == [
        f"{ROOT}/benchmarks/toy/child/helper.py:2: benchmarks.toy.child.helper (child side) imports benchmarks.base"
        " in a function",
        f"{ROOT}/benchmarks/toy/child/run.py:4: benchmarks.toy.child.run (child side) imports benchmarks.toy.score",
        f"{ROOT}/benchmarks/toy/child/run.py:5: benchmarks.toy.child.run (child side) imports core.rec",
    ]
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}, "f": set()}) == [
        ["a", "b", "c"],
        ["e"],
    ]


# ---- 2. no pytest outside the plugin -------------------------------------------------------------
NO_PYTEST_SCRIPT = r'''
import importlib, importlib.abc, json, pkgutil, sys, traceback

ROOT, PLUGIN, PYTEST = sys.argv[1], sys.argv[2], tuple(sys.argv[3].split(","))
chains = []


class Watch(importlib.abc.MetaPathFinder):
    """Notes which package modules were being imported when pytest (or a plugin of it) was asked for."""

    def find_spec(self, name, path=None, target=None):
        if name in PYTEST:
            frame, chain = sys._getframe(1), []
            while frame is not None:
                module = frame.f_globals.get("__name__", "")
                if module.startswith(ROOT) and (not chain or chain[-1] != module):
                    chain.append(module)
                frame = frame.f_back
            chains.append([name] + chain)
        return None


already = sorted(m for m in sys.modules if m.split(".")[0] in PYTEST)
sys.meta_path.insert(0, Watch())
errors, seen = {}, []


def note_error(name):
    errors[name] = traceback.format_exc(limit=-3)


root = importlib.import_module(ROOT)
names = [ROOT] + [f"{ROOT}.{m.name}" for m in pkgutil.iter_modules(root.__path__) if f"{ROOT}.{m.name}" != PLUGIN]
for name in list(names):
    try:
        package = importlib.import_module(name)
    except Exception:
        note_error(name)
        continue
    if name != ROOT and hasattr(package, "__path__"):  # the root's own children are listed above
        for info in pkgutil.walk_packages(package.__path__, name + ".", onerror=note_error):
            names.append(info.name)
for name in names:
    try:
        importlib.import_module(name)
        seen.append(name)
    except Exception:
        note_error(name)
print(json.dumps({"already": already, "imported": seen, "errors": errors, "chains": chains,
                  "loaded": sorted(m for m in sys.modules if m.split(".")[0] in PYTEST)}))
'''


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a child Python: no settings of the pytest run that runs this test."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_", "AGENTBENCH_"))}
    env.update(extra)
    return env


def walk_without_pytest(root: str, pythonpath: Path) -> dict:
    """Run the walk in a fresh interpreter: what it imported, what failed, which pytest modules got loaded."""
    result = subprocess.run(
        [sys.executable, "-c", NO_PYTEST_SCRIPT, root, f"{root}.pytest_plugin", ",".join(PYTEST_MODULES)],
        cwd=pythonpath,
        env=clean_env(PYTHONPATH=str(pythonpath)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_non_plugin_packages_import_without_pytest():
    """Import every module of core, sandbox, envs, models, benchmarks (scicode and corebench included),
    report and the package root in a fresh interpreter: pytest must stay out of ``sys.modules``."""
    out = walk_without_pytest(ROOT, REPO)
    assert out["already"] == [], f"pytest was loaded before any import: {out['already']}"
    expected = {name for name in CODE.modules if not (name == PLUGIN or name.startswith(PLUGIN + "."))}
    missing = sorted(expected - set(out["imported"]) - set(out["errors"]))
    assert not missing, f"modules the walk did not reach: {missing}"
    problems = []
    if out["loaded"]:
        chains = sorted({" <- ".join(chain) for chain in out["chains"]})
        problems.append(
            f"importing the non-plugin packages loaded {out['loaded']}; asked for by "
            f"(module <- importer <- ...):\n  " + "\n  ".join(chains)
        )
    if out["errors"]:
        problems.append(
            "modules that fail to import (so they were not checked):\n  "
            + "\n  ".join(f"{name}: {text.strip().splitlines()[-1]}" for name, text in out["errors"].items())
        )
    assert not problems, "\n".join(problems)


def test_the_walk_finds_a_pytest_import(tmp_path):
    """The walk itself, on a made-up package: a deep module that imports pytest is found and named."""
    for rel, text in {
        "fakepkg/__init__.py": "",
        "fakepkg/core/__init__.py": "",
        "fakepkg/core/deep/__init__.py": "",
        "fakepkg/core/deep/a.py": "from . import b\n",
        "fakepkg/core/deep/b.py": "import pytest\n",
        "fakepkg/pytest_plugin/__init__.py": "import pytest\n",
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    out = walk_without_pytest("fakepkg", tmp_path)
    assert "fakepkg.pytest_plugin" not in out["imported"]
    assert {"fakepkg.core.deep.a", "fakepkg.core.deep.b"} <= set(out["imported"])
    assert "pytest" in out["loaded"]
    assert ["pytest", "fakepkg.core.deep.b", "fakepkg.core.deep.a"] in out["chains"]


# ---- 3. a third benchmark through a real entry point -------------------------------------------
TOY_VERSION = "0.1.0"
TOY_ENTRY_POINTS = "[pytest_agentbench.benchmarks]\ntoy = toybench:benchmark\n"
TOY_IDS = ("t1.1", "t1.2", "t2.1", "t2.2")


def build_toy_wheel(dest: Path) -> Path:
    """A wheel of tests/toybench, written by hand (no build backend, no network): its entry point
    is the one tests/toybench/pyproject.toml declares."""
    dist = f"toybench-{TOY_VERSION}.dist-info"
    files = {
        f"toybench/{p.relative_to(TOYBENCH / 'toybench').as_posix()}": p.read_bytes()
        for p in sorted((TOYBENCH / "toybench").rglob("*.py"))
    }
    files[f"{dist}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: toybench\nVersion: {TOY_VERSION}\nRequires-Dist: pytest-agentbench\n"
    ).encode()
    files[f"{dist}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: test_architecture\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    files[f"{dist}/entry_points.txt"] = TOY_ENTRY_POINTS.encode()
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    files[f"{dist}/RECORD"] = ("\n".join(record + [f"{dist}/RECORD,,"]) + "\n").encode()
    wheel = dest / f"toybench-{TOY_VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return wheel


def test_toy_wheel_matches_its_pyproject():
    text = (TOYBENCH / "pyproject.toml").read_text()
    assert '[project.entry-points."pytest_agentbench.benchmarks"]\ntoy = "toybench:benchmark"' in text


def install_toy(folder: Path) -> Path:
    """tests/toybench installed by pip (offline, from a wheel) into a temporary site folder."""
    wheel = build_toy_wheel(folder)
    site = folder / "site"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "--no-compile",
            "--disable-pip-version-check",
            "--target",
            str(site),
            str(wheel),
        ],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (site / f"toybench-{TOY_VERSION}.dist-info" / "entry_points.txt").is_file()
    return site


@dataclass
class Run:
    args: tuple[str, ...]
    code: int
    out: str

    def __str__(self) -> str:
        return f"$ {' '.join(self.args)}\n(exit {self.code})\n{self.out[-6000:]}"


def run_all(
    site: Path, commands: dict[str, tuple[Path, tuple[str, ...]]], without_site: tuple[str, ...] = ()
) -> dict[str, Run]:
    """Independent commands, side by side, each in a child process that sees the toy distribution through
    PYTHONPATH only (the ones named in ``without_site`` do not see it): ``{key: (folder, python arguments)}``."""

    def env(key: str) -> dict[str, str]:
        return clean_env(PYTHONPATH=os.pathsep.join([str(REPO)] if key in without_site else [str(site), str(REPO)]))

    started = {
        key: subprocess.Popen(
            [sys.executable, *args],
            cwd=folder,
            env=env(key),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for key, (folder, args) in commands.items()
    }
    out = {}
    try:
        for key, process in started.items():
            text, _ = process.communicate(timeout=300)
            out[key] = Run(commands[key][1], process.returncode, text)
    finally:
        for process in started.values():
            if process.poll() is None:
                process.kill()
                process.wait()
    return out


# Plugins of this environment that the toy runs do not need (they only add start-up time).
UNNEEDED = "-p no:cacheprovider -p no:hypothesispytest -p no:benchmark -p no:anyio"


def project(base: Path, name: str, ini: str = "", conftest: str = "") -> Path:
    folder = base / name
    folder.mkdir()
    (folder / "pytest.ini").write_text(f"[pytest]\naddopts = {UNNEEDED}\n{ini}")
    if conftest:
        (folder / "conftest.py").write_text(textwrap.dedent(conftest))
    return folder


# A user's own client: answers every toy question by itself, and one of them wrongly.
OWN_MODEL = """
    import pytest

    class Calculator:
        name = "calculator"

        def answer(self, question):
            return "5" if question == "10 - 4" else str(eval(question))

    @pytest.fixture(scope="session")
    def bench_model():
        return Calculator()
"""


def toy_runs(base: Path) -> dict[str, Run]:
    """The toy runs the tests below read, the independent ones side by side."""
    toy_site = install_toy(base)
    main = project(base, "main")
    ini = project(base, "ini", ini="agentbench_toy_wrong = t2.1\n")
    own = project(base, "own", conftest=OWN_MODEL)
    bench = ("-m", "pytest", "--bench=toy", "--model=oracle", "-v")
    runs: dict[str, Run] = {}
    runs.update(
        run_all(
            toy_site,
            {
                "help": (main, ("-m", "pytest", "--help")),
                # A: everything right; writes the baseline on purpose; a gate that holds.
                "a": (
                    main,
                    (
                        *bench,
                        "--bench-run-id=a",
                        "--strict-markers",
                        "-m",
                        "toy",
                        "--bench-fail-under=toy=100%",
                        "--bench-baseline=baseline",
                        "--bench-update-baseline",
                    ),
                ),
                # C: a planted regression (t2.1) from the toy's ini key; a gate that holds passes the run despite it.
                "c": (ini, (*bench, "--bench-run-id=c", "--bench-fail-under=toy=70%")),
                # D: a user's own model from a conftest.py instead of the oracle.
                "d": (own, ("-m", "pytest", "--bench=toy", "--model=calculator", "--bench-run-id=d", "-v")),
                "bad_option": (main, (*bench, "--toy-wrong=t9.9")),
                "bad_gate": (main, (*bench, "--bench-fail-under=main=0.5")),
                # Without the site folder on the path there is no toy benchmark: only its entry point brings it in.
                "absent": (main, (*bench, "--bench-run-id=absent")),
            },
            without_site=("absent",),
        )
    )
    # B: the regression from the toy's own flag, compared with A's baseline: the drop gate fails.
    runs.update(
        run_all(
            toy_site,
            {
                "b": (
                    main,
                    (
                        *bench,
                        "--bench-run-id=b",
                        "--toy-wrong=t2.1",
                        "--bench-baseline=baseline",
                        "--bench-max-drop=toy=10%",
                        "--bench-fail-under=toy=70%",
                    ),
                )
            },
        )
    )
    runs.update(
        run_all(
            toy_site,
            {
                "compare": (
                    main,
                    ("-m", "pytest_agentbench", "compare", str(run_dir(main, "a")), str(run_dir(main, "b"))),
                )
            },
        )
    )
    return runs


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> dict[str, object]:
    """The toy runs, made once per test session: under xdist the first worker that needs them runs them
    and the others read their results (a file lock in the session's common temporary folder)."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "toy-runs"
    folder.mkdir(exist_ok=True)
    with open(folder.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        results = folder / "runs.json"
        if not results.exists():
            runs = toy_runs(folder)
            results.write_text(json.dumps({key: [list(run.args), run.code, run.out] for key, run in runs.items()}))
        saved = json.loads(results.read_text())
    out: dict[str, object] = {key: Run(tuple(args), code, text) for key, (args, code, text) in saved.items()}
    out.update(main=folder / "main", ini=folder / "ini", own=folder / "own")
    return out


def run_dir(folder: Path, run_id: str) -> Path:
    """reports/toy/<model>/<run id>/ (the model part is the plugin's business)."""
    found = sorted((folder / "reports" / "toy").glob(f"*/{run_id}"))
    return found[0] if found else folder / "reports" / "toy" / "?" / run_id


def summary(folder: Path, run_id: str) -> dict:
    return json.loads((run_dir(folder, run_id) / "summary.json").read_text())


def records(folder: Path, run_id: str) -> list[dict]:
    path = run_dir(folder, run_id) / "toy_records.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.e2e
@pytest.mark.slow
def test_toy_is_found_through_its_entry_point_alone(toy):
    run = toy["absent"]
    assert run.code == 4, run
    assert "unknown benchmark (--bench) 'toy'" in run.out, run


@pytest.mark.e2e
@pytest.mark.slow
def test_toy_option_and_ini_key_appear_in_help(toy):
    run = toy["help"]
    assert run.code == 0, run
    assert "--toy-wrong" in run.out, run
    assert "agentbench_toy_wrong" in run.out, run


@pytest.mark.e2e
@pytest.mark.slow
def test_toy_items_are_collected_and_run(toy):
    run = toy["a"]
    assert run.code == 0, run
    assert re.search(r"\b4 passed\b", run.out), run
    assert "deselected" not in run.out, run  # -m toy selected every item: the marker is registered and set
    for sample in TOY_IDS:
        assert re.search(rf"{re.escape(sample)}\S* PASSED", run.out), (sample, run)


@pytest.mark.e2e
@pytest.mark.slow
def test_toy_reports_are_written(toy):
    main = toy["main"]
    folder = run_dir(main, "a")
    assert {"summary.json", "summary.md", "toy_records.jsonl"} <= {p.name for p in folder.iterdir()}, toy["a"]
    data = summary(main, "a")
    assert data["settings"]["benchmark"] == "toy"
    assert data["settings"]["split"] == "dev"
    assert data["metrics"]["toy_accuracy"] == 1.0
    assert data["metrics"]["toy_task_accuracy"] == 1.0
    assert sorted(i["id"] for i in data["items"]) == list(TOY_IDS)
    assert "## Toy benchmark" in (folder / "summary.md").read_text()
    assert "toy: 4/4 samples right (100.0%), 2/2 tasks solved" in toy["a"].out


@pytest.mark.e2e
@pytest.mark.slow
def test_toy_records_are_deterministic(toy):
    main = toy["main"]
    got = {r["id"]: r for r in records(main, "a")}
    assert sorted(got) == list(TOY_IDS)
    assert {
        k: got["t2.2"][k] for k in ("benchmark", "task", "id", "split", "status", "question", "expected", "answer")
    } == {
        "benchmark": "toy",
        "task": "t2",
        "id": "t2.2",
        "split": "dev",
        "status": "pass",
        "question": "9 // 2",
        "expected": "4",
        "answer": "4",
    }
    wrong = {r["id"]: r for r in records(main, "b")}["t2.1"]
    assert (wrong["status"], wrong["answer"], wrong["message"]) == ("fail", "60", "10 - 4 = 6, answered 60")

    # Runs B (the flag) and C (the ini key) ran the same thing: the same records but for timings and workers.
    def steady(run: list[dict]) -> list[dict]:
        return sorted(
            ({k: v for k, v in r.items() if k not in ("duration", "worker", "started", "finished")} for r in run),
            key=lambda r: r["id"],
        )

    assert steady(records(main, "b")) == steady(records(toy["ini"], "c"))


@pytest.mark.e2e
@pytest.mark.slow
def test_toy_gate_decides_the_exit_code(toy):
    held, failed = toy["c"], toy["b"]
    assert re.search(r"\b3 passed\b", held.out) and re.search(r"\b1 failed\b", held.out), held
    assert held.code == 0, held  # a failed item, but the gate toy >= 70% holds
    assert summary(toy["ini"], "c")["metrics"]["toy_accuracy"] == 0.75
    assert summary(toy["ini"], "c")["settings"]["toy_wrong"] == ["t2.1"]  # from the ini key
    assert failed.code == 1, failed
    assert "--bench-max-drop toy=10%" in failed.out, failed
    md = (run_dir(toy["main"], "b") / "summary.md").read_text()
    assert "--bench-max-drop toy=10%" in md and "FAIL" in md


@pytest.mark.e2e
@pytest.mark.slow
def test_toy_baseline_written_then_compared(toy):
    main = toy["main"]
    baseline = main / "baseline" / "summary.json"
    assert baseline.is_file(), toy["a"]
    data = json.loads(baseline.read_text())
    assert data["settings"]["run_id"] == "a"  # run B compared with it and did not replace it
    assert data["metrics"]["toy_accuracy"] == 1.0
    # toy_wrong is a free setting of the toy benchmark: B differs in it and is still compared.
    assert "refusing" not in toy["b"].out, toy["b"]
    assert "drop 25.0 pp" in toy["b"].out, toy["b"]


@pytest.mark.e2e
@pytest.mark.slow
def test_toy_runs_compare(toy):
    run = toy["compare"]
    assert run.code == 0, run
    assert re.search(r"t2\.1\s+pass -> fail", run.out), run
    assert re.search(r"^toy\s+100\.0%\s+75\.0%", run.out, re.MULTILINE), run  # the toy's gate names
    for headline in ("toy_accuracy", "toy_task_accuracy"):  # the toy's headlines, resampled by compare
        assert f"bootstrap 95% ({headline}," in run.out, run


@pytest.mark.e2e
@pytest.mark.slow
def test_toy_with_a_users_own_model(toy):
    run = toy["d"]
    assert run.code == 1, run
    assert re.search(r"\b3 passed\b", run.out) and re.search(r"\b1 failed\b", run.out), run
    got = {r["id"]: r for r in records(toy["own"], "d")}
    assert got["t2.1"]["answer"] == "5" and got["t2.2"]["answer"] == "4"


@pytest.mark.e2e
@pytest.mark.slow
def test_toy_config_errors_are_usage_errors(toy):
    bad = toy["bad_option"]
    assert bad.code == 4, bad
    assert "--toy-wrong: unknown toy sample t9.9" in bad.out, bad
    gate = toy["bad_gate"]
    assert gate.code == 4, gate
    assert "toy" in gate.out and "toy_tasks" in gate.out, gate  # the valid gate names are the toy's own


# ---- 4. test modules stand alone ------------------------------------------------------------------
def imported_names(source: str) -> list[tuple[int, str]]:
    """(line, dotted name) of every module an import statement names, relative ones with their dots;
    ``from . import x`` and ``from tests import x`` also name ``x``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            out.append((node.lineno, module))
            if not node.module or node.module.split(".")[-1] == "tests":
                out += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return out


def is_test_module(dotted: str, conftest_too: bool = True) -> bool:
    return any(part.startswith("test_") or (conftest_too and part == "conftest") for part in dotted.split(".") if part)


def test_no_test_module_imports_another():
    """Shared builders live in fixtures or helper modules (fake_openai.py, capsule_factory.py, ...): a test
    module imports neither another test module nor conftest.py, and a helper module or conftest.py imports
    no test module (which would make it a test module's import by the back door)."""
    files = sorted([*TESTS.glob("*.py"), *TESTS.glob("helpers/*.py")])
    assert len([f for f in files if f.name.startswith("test_")]) > 10
    bad = []
    for path in files:
        for line, name in imported_names(path.read_text(encoding="utf-8")):
            if is_test_module(name, conftest_too=path.name.startswith("test_")):
                bad.append(f"{path.relative_to(REPO)}:{line}: imports {name}")
    assert not bad, "test modules imported by name:\n" + "\n".join(bad)


def test_test_module_import_check_sees_every_form():
    source = (
        "import test_a\nfrom test_b import x\nfrom .test_c import y\nfrom tests.test_d import z\n"
        "from . import conftest\nimport conftest\nfrom tests import test_e\nimport fake_openai\n"
        "from capsule_factory import make\n"
    )
    flagged = sorted({line for line, name in imported_names(source) if is_test_module(name)})
    assert flagged == [1, 2, 3, 4, 5, 6, 7]
    flagged = sorted({line for line, name in imported_names(source) if is_test_module(name, conftest_too=False)})
    assert flagged == [1, 2, 3, 4, 7]
