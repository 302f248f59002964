"""A step's test cases split statement by statement into a :class:`~..plan.StepPlan`: each top-level
statement goes to the child, the parent or both (:func:`split_step`), with the names the model's code binds
and the functions it was asked to write (:func:`names_bound_by`, :func:`required_names`)."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Sequence
from typing import Any, cast

from ....core import pyast
from ..plan import (
    CMP_HELPERS,
    RUNTIME,
    TARGET,
    FunctionScope,
    ParentStatement,
    StepPlan,
    TestPlan,
    TrustedStatement,
    short,
)
from . import taint
from .asserts import (
    split_assert,
    split_mixed,
)
from .helpers import (
    called_test_function,
    find_test_functions,
    is_comparing_helper,
    is_runnable_helper,
    is_traced_helper,
)
from .names import (
    PARENT_OBJECTS,
    Scope,
    SplitError,
    StepState,
    free_names,
)
from .prune import (
    Piece,
    Watcher,
    child_keeps,
    prune,
    render,
)
from .taint import PARENT_MODULES, Trust, bound_names


def split_step(
    test_cases: Sequence[str],
    step: str = "",
    *,
    code_names: frozenset[str] = frozenset(),
    required: frozenset[str] = frozenset(),
) -> StepPlan:
    """The plan of a step: one :class:`TestPlan` per official test case. Raises :class:`SplitError`
    (the step cannot be verified).

    Names the model's code binds never change what the test text's own names mean: the test text sees
    the genuine builtins and modules (``range = range``, ``len = len`` or ``from math import *`` in the
    model's code change nothing here). The one exception is a function the model was asked to write
    (``required``: the names the step's and earlier steps' function headers define, see
    :func:`required_names`) that has a builtin's name and that the child's code binds (``code_names``,
    :func:`names_bound_by`): the test text then calls the model's. ``np``, ``math``, ``cmath`` and the
    comparison helpers always stay the parent's: its comparisons use its own."""
    asked = frozenset(required)
    bound = asked if "*" in code_names else frozenset(code_names)  # a star import may bind any of them
    shadowed = (bound & asked & PARENT_OBJECTS) - frozenset(PARENT_MODULES) - frozenset(CMP_HELPERS)
    state = StepState(trust=Trust(PARENT_OBJECTS - shadowed))
    split = [_split_test(code, number, state, step) for number, code in enumerate(test_cases, 1)]
    kept, dropped = child_keeps([piece for _, pieces in split for piece in pieces])
    tests, reads = prune([test for test, _ in split], forced=dropped)
    out = []
    for test, (_, pieces), parent_reads in zip(tests, split, reads):
        watcher = Watcher(test.number, frozenset(parent_reads))
        child = render(pieces, kept, watcher)
        out.append(dataclasses.replace(test, child=child, watched=tuple(watcher.checks)))
    return StepPlan(step=str(step), tests=tuple(out))


def required_names(*headers: str) -> frozenset[str]:
    """The functions and classes the model was asked to write: the names the function headers define (a
    header is a ``def`` or ``class`` line with its docstring, and no body)."""
    names: set[str] = set()
    for header in headers:
        for source in (header or "", (header or "") + "\n    pass"):
            try:
                tree = pyast.parse(source)
            except (SyntaxError, ValueError):
                continue
            names |= {
                node.name
                for node in tree.body
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            }
            break
    return frozenset(names)


def names_bound_by(*sources: str) -> frozenset[str]:
    """The module-level names ``sources`` bind (the problem's dependencies, earlier steps' code, the step's
    code); ``"*"`` among them when a star import binds names nobody lists. A source that does not parse
    binds nothing (its script fails anyway)."""
    names: set[str] = set()
    for source in sources:
        try:
            tree = pyast.parse(source or "")
        except (SyntaxError, ValueError):
            continue
        for stmt in tree.body:
            names |= bound_names(stmt)
    return frozenset(names)


def _where(step: str, test: int) -> str:
    return f"step {step} test {test}" if step else f"test {test}"


def _scope(state: StepState) -> Scope:
    return Scope(
        frozenset(state.parent_names),
        frozenset(state.helpers),
        state.trust,
        runnable=frozenset(state.runnable),
        traced=frozenset(state.traced),
    )


def _split_test(code: str, test: int, state: StepState, step: str) -> tuple[TestPlan, list[Piece]]:
    where = _where(step, test)
    try:
        tree = pyast.parse(code)
    except SyntaxError as exc:
        raise SplitError(f"{where}: the test case does not parse ({exc})") from exc
    test_functions = find_test_functions(tree, where)
    child: list[Piece] = [Piece(f"\n# ---- test {test} ----\n{RUNTIME}.test({test})\n")]
    parent: list[Any] = []
    counter = [0]

    def add_assert(node: ast.Assert, scope: Scope, parts: list) -> Piece:
        counter[0] += 1
        plan, block, watch = split_assert(node, test, counter[0], scope, where)
        parts.append(plan)
        return Piece(block, watch=watch)

    def add_mixed(stmt: ast.Assign, source: str) -> bool:
        """``stmt`` as a :class:`MixedStatement` when the parent can run it on the child's operands."""
        mixed = split_mixed(stmt, source, test, counter[0] + 1, _scope(state), where)
        if mixed is None:
            return False
        counter[0] += 1
        plan, block, watch = mixed
        parent.append(plan)
        child.append(Piece(block, watch=watch))
        state.parent_names -= plan.binds
        state.helpers -= plan.binds
        state.runnable -= plan.binds
        state.traced -= plan.binds
        return True

    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name in test_functions:
            continue  # emitted at its call
        if isinstance(stmt, ast.Expr) and called_test_function(stmt, test_functions):
            fn = test_functions[cast(ast.Name, cast(ast.Call, stmt.value).func).id]  # as checked just above
            piece, scope_part = _inline_test_function(fn, state, add_assert, where)
            child.append(piece)
            child.append(Piece(_segment(code, stmt) + "\n"))
            parent.append(scope_part)
            continue
        if isinstance(stmt, ast.Assert):
            child.append(add_assert(stmt, _scope(state), parent))
            continue
        if any(isinstance(node, ast.Assert) for node in ast.walk(stmt)):
            raise SplitError(
                f"{where}: line {stmt.lineno}: an assert inside a `{type(stmt).__name__.lower()}` "
                "block is not supported (only at the top level of a test case or of a test function)"
            )
        if isinstance(stmt, ast.Assign) and add_mixed(stmt, _segment(code, stmt)):
            continue
        _split_statement(stmt, _segment(code, stmt), state, where, child, parent)
    child.append(Piece(f"{RUNTIME}.end({test})\n"))
    return TestPlan(number=test, child="", parent=tuple(parent)), child


def _split_statement(stmt: ast.stmt, source: str, state: StepState, where: str, child: list, parent: list) -> None:
    """A top-level statement other than an assertion: the child's, the parent's, or both."""
    free = free_names(stmt)
    bound = bound_names(stmt)
    if isinstance(stmt, ast.FunctionDef) and is_comparing_helper(stmt, state):
        child.append(Piece(source + "\n"))
        parent.append(ParentStatement(source))
        state.helpers.add(stmt.name)
        state.parent_names.discard(stmt.name)
        state.trust.bind_parent(stmt.name)
        return
    uses_parent = free & state.parent_names
    if uses_parent:
        outside = {name for name in free - state.parent_names if not state.trust.name(name)}
        if not isinstance(stmt, (ast.Assign, ast.AnnAssign)) or outside or taint.forbidden(stmt):
            raise SplitError(
                f"{where}: line {stmt.lineno}: `{short(ast.unparse(stmt))}` uses "
                f"{', '.join(sorted(uses_parent))} (the parent's) together with "
                f"{', '.join(sorted(outside)) or 'a construct'} the parent cannot evaluate"
            )
        parent.append(ParentStatement(source))
        state.parent_names |= bound
        state.helpers -= bound
        state.trust.untrust(bound)  # the parent's alone: the child never has them
        return
    state.parent_names -= bound
    state.helpers -= bound
    state.runnable -= bound
    state.traced -= bound
    part, watch = _trusted_part(stmt, source, state.trust)
    if part is not None and isinstance(stmt, ast.FunctionDef) and is_runnable_helper(stmt, state):
        state.runnable.add(stmt.name)
    elif part is not None and isinstance(stmt, ast.FunctionDef) and is_traced_helper(stmt):
        state.traced.add(stmt.name)
    child.append(Piece(source + "\n", part=part, watch=watch))
    if part is not None:
        parent.append(part)


def _trusted_part(stmt: ast.stmt, source: str, trust: Trust) -> tuple[TrustedStatement | None, frozenset[str]]:
    """Follow ``stmt`` (which the child runs) in the analysis: the parent's copy of it when it does not
    depend on the model's code, and the model-independent names whose objects it passes to model calls
    (the parent keeps its own pristine copies; the child notes whether the call changed them)."""
    bound = bound_names(stmt)
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        effect, names = taint.import_effect(stmt, frozenset(CMP_HELPERS))
        if effect == "parent":  # `import numpy as np`, the cmp helpers: the parent has its own
            for name in names:
                trust.reset(name)
            return None, frozenset()
        if effect == "run":
            trust.bind(stmt, names)
            return TrustedStatement(source, binds=frozenset(names)), frozenset()
        trust.untrust(names)
        return None, frozenset()
    reads = free_names(stmt)
    if trust.statement(stmt):
        touches = trust.closure(reads) if taint.may_mutate(stmt) else set()
        calls = frozenset(reads) if trust.deferred(stmt) else frozenset()
        trust.bind(stmt, bound)
        return TrustedStatement(
            source, binds=frozenset(bound), reads=frozenset(reads), touches=frozenset(touches), calls=calls
        ), frozenset()
    passed = trust.passed(stmt)  # only arguments of model calls: the parent's copies stay pristine
    trust.expose(reads - passed)  # read otherwise by code that runs the child's: it may have changed them
    watch = frozenset(trust.closure(passed) - bound)
    trust.untrust(bound)
    return None, watch


def _segment(code: str, node: ast.stmt) -> str:
    if getattr(node, "decorator_list", None):
        return ast.unparse(node)
    text = ast.get_source_segment(code, node)
    return text if text is not None else ast.unparse(node)


def _inline_test_function(fn: ast.FunctionDef, state: StepState, add_assert, where: str) -> tuple[Piece, FunctionScope]:
    """The child's version of a test function (each assert replaced by its operand block) and the
    parent's (its model-independent statements and its assertions, in a scope of their own)."""
    local = taint.function_locals(fn)
    free = free_names(fn)
    if TARGET in free or free & state.parent_names:
        raise SplitError(
            f"{where}: test function {fn.name} uses the parent's names "
            f"({', '.join(sorted(free & (state.parent_names | {TARGET})))})"
        )
    trust = state.trust.enter_function(local)
    scope = Scope(frozenset(), frozenset(state.helpers) - local, trust, shadowed=frozenset(local))
    body: list[Piece] = []
    parts: list = []
    for stmt in fn.body:
        if isinstance(stmt, ast.Assert):
            body.append(add_assert(stmt, scope, parts))
            continue
        part, watch = _trusted_part(stmt, ast.unparse(stmt), trust)
        body.append(Piece(ast.unparse(stmt) + "\n", part=part, watch=watch))
        if part is not None:
            parts.append(part)
    state.trust.leave_function(trust, local)
    return Piece("", function=(fn, body)), FunctionScope(fn.name, frozenset(local), tuple(parts))
