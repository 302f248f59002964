"""Once every test case of a step is split: what the child still runs and what the parent still computes.

The child drops the model-independent statements no child code reads (so a child cannot read an expected
value from the test's frame and return it), the parent drops its copies of statements no parent-side part
needs, and inputs the test passes to model calls are watched where the parent reads them (:class:`Watcher`).
"""

from __future__ import annotations

import ast
import copy
import dataclasses
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from ....core import pyast
from ..plan import (
    LEAF_FN,
    RUNTIME,
    AssertPlan,
    FunctionScope,
    MixedStatement,
    TestPlan,
    TrustedStatement,
    flat,
)
from .names import (
    free_names,
)
from .taint import bound_names


@dataclass
class Piece:
    """A piece of a test's child code: text, or an inlined test function (its node and its body's pieces).
    ``part`` is set for a statement that depends on no model code: the parent computes what it binds, and
    the child runs it only when its own code needs the names."""

    source: str
    part: TrustedStatement | None = None
    function: tuple[ast.FunctionDef, list[Piece]] | None = None
    watch: frozenset[str] = frozenset()  # model-independent names it passes to model calls

    def reads(self) -> set[str]:
        if self.function is not None:
            return {self.function[0].name}
        return free_names(pyast.parse(self.source)) if self.source.strip() else set()

    def text(self, watcher: Watcher) -> str:
        """The child's source of the piece, wrapped in the runtime's before/after notes for the watched
        names the parent reads (:class:`Watcher`)."""
        return watcher.wrap(self.source, self.watch)


@dataclass
class Watcher:
    """Numbers a test's checks of model-independent inputs passed to model calls, for the names the parent
    reads (it computes from its own copies of them, whatever the call did to the child's)."""

    test: int
    parent_reads: frozenset[str]
    checks: list[tuple[str, ...]] = field(default_factory=list)

    def wrap(self, source: str, watch: frozenset[str]) -> str:
        names = tuple(sorted(watch & self.parent_reads))
        if not names:
            return source
        self.checks.append(names)
        ids = f"{self.test}, {len(self.checks)}"
        getters = "(" + "".join(f"lambda: {name}, " for name in names) + ")"
        return f"{RUNTIME}.before({ids}, {getters})\n{source}{RUNTIME}.after({ids}, {names!r}, {getters})\n"


def child_keeps(pieces: list[Piece]) -> tuple[set[int], set[int]]:
    """The ids of the pieces the child runs, and of the parent's statements it does without: all but
    model-independent statements binding names no other child code reads (78.1's ``expected_output``:
    only the parent's assertion needs it, so a child cannot read it from the test's frame and return it).
    Flow-insensitive over the step: a name read anywhere keeps every statement that binds or changes it.
    The parent runs what the child does without, needed or not (an error in it fails the test, as
    upstream)."""
    flat: list[Piece] = []
    for piece in pieces:
        flat.extend([piece, *piece.function[1]] if piece.function else [piece])
    reads = {id(piece): piece.reads() for piece in flat}
    kept = {id(piece) for piece in flat}
    changed = True
    while changed:
        changed = False
        for piece in flat:
            if piece.part is None or not piece.part.binds or id(piece) not in kept:
                continue
            others = set().union(*(reads[i] for i in kept if i != id(piece)))
            if not (piece.part.binds | piece.part.touches) & others:
                kept.discard(id(piece))
                changed = True
    return kept, {id(piece.part) for piece in flat if id(piece) not in kept}


def render(pieces: list[Piece], kept: set[int], watcher: Watcher) -> str:
    out = []
    for piece in pieces:
        if piece.function is not None:
            fn, body = piece.function
            statements = [node for inner in body if id(inner) in kept for node in pyast.parse(inner.text(watcher)).body]
            new_fn = copy.copy(fn)
            new_fn.body = statements or [ast.Pass()]
            out.append(ast.unparse(ast.fix_missing_locations(new_fn)) + "\n")
        elif id(piece) in kept:
            out.append(piece.text(watcher))
    return "".join(out)


def prune(tests: list[TestPlan], forced: AbstractSet[int] = frozenset()) -> tuple[tuple[TestPlan, ...], list[set[str]]]:
    """Drop the parent's copies of model-independent statements that no parent-side part needs and the
    child runs anyway (``forced``: the ids of those the child does without): a step's setup is computed
    twice only where an operand depends on it. Also, per test, the names the parent reads in it or needs
    from it for later tests."""
    calls: dict[str, set[str]] = {}
    for test in tests:
        for part in flat(test.parent):
            if isinstance(part, TrustedStatement) and part.calls:
                for name in part.binds:
                    calls.setdefault(name, set()).update(part.calls)
    needed: set[str] = set()
    kept = []
    reads = []
    for test in reversed(tests):
        later = needed
        parts, needed = _prune_parts(test.parent, needed, calls, forced)
        kept.append(dataclasses.replace(test, parent=parts))
        reads.append(later | _parent_reads(parts, calls))
    return tuple(reversed(kept)), list(reversed(reads))


def _parent_reads(parts: Sequence, calls: dict[str, set[str]]) -> set[str]:
    """The names the parent's ``parts`` read (and the globals of the test text's functions they call)."""
    names: set[str] = set()
    for part in flat(parts):
        if isinstance(part, TrustedStatement):
            names |= part.reads
        elif isinstance(part, AssertPlan):
            names |= free_names(pyast.parse(part.expression, mode="eval")) - {LEAF_FN}
        elif isinstance(part, MixedStatement):
            names |= free_names(pyast.parse(part.expression)) - {LEAF_FN}
        else:
            names |= free_names(pyast.parse(part.source))
    return _with_calls(names, calls)


def _prune_parts(
    parts: Sequence, needed: set[str], calls: dict[str, set[str]], forced: AbstractSet[int]
) -> tuple[tuple, set[str]]:
    """Backwards over ``parts``: those to keep, and the names needed before them."""
    kept: list = []
    for part in reversed(parts):
        if isinstance(part, TrustedStatement):
            if not (part.binds & needed or part.touches & needed or id(part) in forced):
                continue
            needed = (needed - part.binds) | _with_calls(part.reads, calls)
        elif isinstance(part, FunctionScope):
            inner, inner_needed = _prune_parts(part.parts, needed - part.local, calls, forced)
            part = dataclasses.replace(part, parts=inner)
            needed = needed | (inner_needed - part.local)
        elif isinstance(part, AssertPlan):
            needed = needed | _with_calls(free_names(pyast.parse(part.expression, mode="eval")) - {LEAF_FN}, calls)
        elif isinstance(part, MixedStatement):
            needed = (needed - part.binds) | _with_calls(free_names(pyast.parse(part.expression)) - {LEAF_FN}, calls)
        else:
            statement = pyast.parse(part.source).body[0]
            needed = (needed - bound_names(statement)) | _with_calls(free_names(statement), calls)
        kept.append(part)
    return tuple(reversed(kept)), needed


def _with_calls(names, calls: dict[str, set[str]]) -> set[str]:
    """``names`` and, for the functions among them, the globals they read when called (transitively)."""
    out, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name not in out:
            out.add(name)
            todo.extend(calls.get(name, ()))
    return out
