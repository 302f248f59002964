"""Split SciCode's official test cases: the untrusted child computes operands, the trusted parent compares.

A test case is Python run after the model's code: setup lines, calls to the step's function and
``assert`` statements that compare with ``target``. Here each test case is split in two:

* the **child** (the process that runs model code) runs the setup lines and, for every assertion,
  evaluates only the *model-dependent operands* of its comparisons (the arguments of
  ``np.allclose``, ``np.isclose``, ``cmp_tuple_or_list``, ... and the operands of ``==``, ``<``,
  ``and``, ``not``, ...), and sends each value through :mod:`pytest_agentbench.sandbox.codec`
  (with the operand runtime of :mod:`.child.runtime`, in a script :func:`.script.build_child_script` writes);
* the **parent** (trusted, holding the targets, genuine numpy and the helpers of
  :mod:`.compare`) evaluates each assertion on the received operand values, ``target`` and the
  operands it computes itself, in a short-lived process bounded in time and memory
  (:func:`.verdict.evaluate`).

This module runs in the trusted process only: it reads the test text and writes the step's plan
(:mod:`.plan`), nothing of the model's.

Rules, so every official test case splits the same way (see :func:`split_step`):

* statements that use ``target`` (``s, v = target``) run only in the parent; the names they bind
  are the parent's;
* comparison calls and operators always run in the parent, also inside a part that does not use
  ``target`` (``(np.isclose(0, B[:, 0].T @ B[:, 3])) == target``, 51.4's tuple of comparisons,
  ``not np.isnan(x).any()``);
* an operand that does not depend on the model's code (``expected = np.array([0.0, -(g / L) *
  np.sin(0.1)])``, constants, ``np.pi``; see :mod:`.taint` for what depends on it) is computed by
  the parent from the test text itself: the statements that define it run in the child (its code
  may need them) *and* in the parent, so a child cannot fake it, e.g. by sending a value equal to
  its own output. That holds also for an input the test passed to a model call before reading it
  (78.2's ``state[0] * np.cos(...)`` after ``runge_kutta_4th_order(..., state, ...)``): the parent
  reads its own pristine copy, and the child notes whether the call changed its copy in place
  (``StepOutcome.inputs_mutated``, a note only, never part of the verdict);
* an operand that mentions a parent name (``target[0]``, ``target.any()``, a name unpacked from
  ``target``, a comprehension variable of a parent-side ``all(... for i in A)``) is evaluated in the
  parent, its parts that depend on the model's code (``A``) come from the child;
* no comparison is decided by the child's values alone (issue 21): the child computes only the model's
  calls and what reads the model's objects (attributes, items and methods of values the test text did not
  bind). What the test text does with those values runs in the parent on the decoded values: operators,
  slices and data attributes (``B[:, 0].T @ B[:, 3]`` with ``B`` from the child), numpy/math calls and
  reproducible builtins, and the functions the test text defines that read nothing but those
  (:func:`_is_runnable_helper`: 49.4's ``Nbody_Etot``, 51.4's ``total_energy``). A statement that applies
  them to the child's values (``Etot1 = Nbody_Etot(uout, mass)``) is a :class:`MixedStatement`: the child
  sends its operands (``uout``), the parent runs it and holds the names it binds;
* the test text sees the genuine builtins and modules whatever the model's code binds (``range = range``,
  ``from math import *``), unless the name is a function the model was asked to write (``required``);
* a function defined in the test text that compares and needs nothing but numpy, math and the
  builtins (10.6 ``are_equivalent``, 31.2 ``test_identity``) runs in the parent; one that calls into the
  model's objects (30.3 ``test_gradient(configs, wf, delta)`` calls ``wf.value``, 72.1 ``test_neighbor()``
  calls ``neighbor_list``) is *traced* (:func:`_is_traced_helper`): the child runs it with the model's
  objects wrapped and records every call into them (arguments and results, encoded), and the parent runs
  the helper's own code, answering each call into a model's object from the record after checking that
  its encoded arguments are the recorded ones (:func:`.verdict.replay`; a mismatch fails the test);
* a test function holding ``assert`` statements and called once with no arguments
  (78.1 ``def test_case_1(): ... assert ...`` then ``test_case_1()``) is inlined for the parent (its
  assertions are the test's, at the call, in a scope of their own); in the child it stays a
  function, so its locals stay local as upstream.

The child reports (see :mod:`.child.runtime`), per test, ``("t", test)`` when the test starts, one frame per operand
(``("v", test, assertion, operand, value)``, or ``("e", ..., "TypeError: ...")`` when evaluating it
raised, or ``("x", ..., reason)`` when it cannot be encoded), ``("a", test, assertion)`` once every
operand of an assertion was attempted, ``("m", test, name)`` when a model call changed in place an
input the parent computes from (a note), and ``("z", test)`` at the end of the test. An operand that
raised fails its test only if the parent needs its value (as a short-circuited operand upstream is
never evaluated). A step passes only when every test's every assertion holds in the parent.
"""

from __future__ import annotations

import ast
import builtins
import copy
import dataclasses
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, cast

from ...core import pyast
from . import taint
from .plan import (
    CMP_HELPERS,
    LEAF_EXC,
    LEAF_FN,
    LEAF_VALUE,
    REPLAY_FN,
    RUNTIME,
    TARGET,
    AssertPlan,
    FunctionScope,
    Leaf,
    MixedStatement,
    ParentStatement,
    StepPlan,
    TestPlan,
    TrustedStatement,
    flat,
    short,
)
from .taint import PARENT_MODULES, Trust, bound_names, canonical, dotted, target_names

# the builtins the parent's namespace provides (with the genuine modules and the cmp helpers)
BUILTIN_NAMES = frozenset(dir(builtins))
# calls that compare (canonical dotted names): they always run in the parent
COMPARISON_CALLS = frozenset(
    {
        *(
            f"numpy.{name}"
            for name in (
                "allclose",
                "isclose",
                "array_equal",
                "array_equiv",
                "equal",
                "not_equal",
                "less",
                "less_equal",
                "greater",
                "greater_equal",
                "isnan",
                "isinf",
                "isfinite",
                "isneginf",
                "isposinf",
                "isreal",
                "iscomplex",
                "isrealobj",
                "iscomplexobj",
            )
        ),
        "math.isclose",
        "math.isnan",
        "math.isinf",
        "math.isfinite",
        "cmath.isclose",
        "cmath.isnan",
        "cmath.isinf",
        "cmath.isfinite",
        *CMP_HELPERS,
    }
)
# calls that only reduce or reshape a comparison's result: in the parent when they wrap one
WRAPPER_CALLS = frozenset(
    {
        "all",
        "any",
        "bool",
        "abs",
        "numpy.abs",
        "numpy.absolute",
        "numpy.all",
        "numpy.any",
        "numpy.logical_and",
        "numpy.logical_or",
        "numpy.logical_not",
        "numpy.logical_xor",
    }
)
WRAPPER_METHODS = frozenset({"all", "any"})
# methods of data values (arrays, lists, dicts, sparse matrices) a parent-side helper may call on its arguments
DATA_METHODS = frozenset(
    {
        "all",
        "any",
        "sum",
        "mean",
        "max",
        "min",
        "copy",
        "reshape",
        "flatten",
        "ravel",
        "astype",
        "tolist",
        "toarray",
        "todense",
        "conj",
        "conjugate",
        "transpose",
        "dot",
        "item",
        "keys",
        "values",
        "items",
        "get",
        "round",
        "std",
        "var",
        "nonzero",
        "argmax",
        "argmin",
        "cumsum",
        "prod",
        "trace",
        "diagonal",
        "squeeze",
        "count",
        "index",
        "tocsr",
        "tocsc",
        "tocoo",
    }
)
# builtins the parent applies to the child's values (reproducible, and they run no code of those values but
# their data methods)
PARENT_BUILTIN_CALLS = frozenset(
    {
        "abs",
        "all",
        "any",
        "bool",
        "complex",
        "dict",
        "divmod",
        "float",
        "int",
        "len",
        "list",
        "max",
        "min",
        "pow",
        "round",
        "sorted",
        "sum",
        "tuple",
        "zip",
        "enumerate",
        "range",
    }
)
# attributes of the test's data values the parent reads itself (arrays, sparse matrices, complex numbers)
DATA_ATTRIBUTES = frozenset({"shape", "ndim", "size", "T", "real", "imag", "dtype"})
# library calls that call back a function they are given (a model's function stays in the child with them)
CALLBACK_CALLS = frozenset(
    {
        "numpy.vectorize",
        "numpy.frompyfunc",
        "numpy.apply_along_axis",
        "numpy.apply_over_axes",
        "numpy.fromfunction",
        "numpy.piecewise",
    }
)
# the parent's own objects: model-independent until the test text binds the name to something else
PARENT_OBJECTS = frozenset(PARENT_MODULES) | taint.SAFE_BUILTINS | frozenset(CMP_HELPERS)


class SplitError(Exception):
    """A test case cannot be split; the message names the step, the test and the construct."""


# ----------------------------------------------------------------------------------------------
# names and scopes


def _free_names(node: ast.AST, bound: frozenset[str] = frozenset()) -> set[str]:
    try:
        return taint.free_names(node, bound)
    except taint.ScopeError as exc:
        raise SplitError(str(exc)) from exc


# ----------------------------------------------------------------------------------------------
# splitting


@dataclass
class _StepState:
    """What the parent owns so far in a step (a step's tests share one namespace, as upstream)."""

    parent_names: set[str] = field(default_factory=lambda: {TARGET})
    helpers: set[str] = field(default_factory=set)  # comparing helpers defined in the parent
    trust: Trust = field(default_factory=lambda: Trust(PARENT_OBJECTS))
    runnable: set[str] = field(default_factory=set)  # functions of the test text the parent runs on the child's values
    traced: set[str] = field(
        default_factory=set
    )  # functions of the test text the parent replays (:func:`_is_traced_helper`)


@dataclass(frozen=True)
class _Scope:
    parent_names: frozenset[str]  # names whose value only the parent holds (target, unpacked names, comp. vars)
    helpers: frozenset[str]
    trust: Trust  # which names hold model-independent values (the parent computes them itself)
    shadowed: frozenset[str] = frozenset()  # function locals of an inlined test function
    runnable: frozenset[str] = frozenset()  # see _StepState.runnable
    traced: frozenset[str] = frozenset()  # see _StepState.traced


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
    state = _StepState(trust=Trust(PARENT_OBJECTS - shadowed))
    split = [_split_test(code, number, state, step) for number, code in enumerate(test_cases, 1)]
    kept, dropped = _child_keeps([piece for _, pieces in split for piece in pieces])
    tests, reads = _prune([test for test, _ in split], forced=dropped)
    out = []
    for test, (_, pieces), parent_reads in zip(tests, split, reads):
        watcher = _Watcher(test.number, frozenset(parent_reads))
        child = _render(pieces, kept, watcher)
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


def _scope(state: _StepState) -> _Scope:
    return _Scope(
        frozenset(state.parent_names),
        frozenset(state.helpers),
        state.trust,
        runnable=frozenset(state.runnable),
        traced=frozenset(state.traced),
    )


def _split_test(code: str, test: int, state: _StepState, step: str) -> tuple[TestPlan, list[_Piece]]:
    where = _where(step, test)
    try:
        tree = pyast.parse(code)
    except SyntaxError as exc:
        raise SplitError(f"{where}: the test case does not parse ({exc})") from exc
    test_functions = _test_functions(tree, where)
    child: list[_Piece] = [_Piece(f"\n# ---- test {test} ----\n{RUNTIME}.test({test})\n")]
    parent: list[Any] = []
    counter = [0]

    def add_assert(node: ast.Assert, scope: _Scope, parts: list) -> _Piece:
        counter[0] += 1
        plan, block, watch = _split_assert(node, test, counter[0], scope, where)
        parts.append(plan)
        return _Piece(block, watch=watch)

    def add_mixed(stmt: ast.Assign, source: str) -> bool:
        """``stmt`` as a :class:`MixedStatement` when the parent can run it on the child's operands."""
        mixed = _split_mixed(stmt, source, test, counter[0] + 1, _scope(state), where)
        if mixed is None:
            return False
        counter[0] += 1
        plan, block, watch = mixed
        parent.append(plan)
        child.append(_Piece(block, watch=watch))
        state.parent_names -= plan.binds
        state.helpers -= plan.binds
        state.runnable -= plan.binds
        state.traced -= plan.binds
        return True

    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name in test_functions:
            continue  # emitted at its call
        if isinstance(stmt, ast.Expr) and _called_test_function(stmt, test_functions):
            fn = test_functions[cast(ast.Name, cast(ast.Call, stmt.value).func).id]  # as checked just above
            piece, scope_part = _inline_test_function(fn, state, add_assert, where)
            child.append(piece)
            child.append(_Piece(_segment(code, stmt) + "\n"))
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
    child.append(_Piece(f"{RUNTIME}.end({test})\n"))
    return TestPlan(number=test, child="", parent=tuple(parent)), child


def _split_statement(stmt: ast.stmt, source: str, state: _StepState, where: str, child: list, parent: list) -> None:
    """A top-level statement other than an assertion: the child's, the parent's, or both."""
    free = _free_names(stmt)
    bound = bound_names(stmt)
    if isinstance(stmt, ast.FunctionDef) and _is_comparing_helper(stmt, state):
        child.append(_Piece(source + "\n"))
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
    if part is not None and isinstance(stmt, ast.FunctionDef) and _is_runnable_helper(stmt, state):
        state.runnable.add(stmt.name)
    elif part is not None and isinstance(stmt, ast.FunctionDef) and _is_traced_helper(stmt):
        state.traced.add(stmt.name)
    child.append(_Piece(source + "\n", part=part, watch=watch))
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
    reads = _free_names(stmt)
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


# ---- what the child keeps ----------------------------------------------------------------------


@dataclass
class _Piece:
    """A piece of a test's child code: text, or an inlined test function (its node and its body's pieces).
    ``part`` is set for a statement that depends on no model code: the parent computes what it binds, and
    the child runs it only when its own code needs the names."""

    source: str
    part: TrustedStatement | None = None
    function: tuple[ast.FunctionDef, list[_Piece]] | None = None
    watch: frozenset[str] = frozenset()  # model-independent names it passes to model calls

    def reads(self) -> set[str]:
        if self.function is not None:
            return {self.function[0].name}
        return _free_names(pyast.parse(self.source)) if self.source.strip() else set()

    def text(self, watcher: _Watcher) -> str:
        """The child's source of the piece, wrapped in the runtime's before/after notes for the watched
        names the parent reads (:class:`_Watcher`)."""
        return watcher.wrap(self.source, self.watch)


@dataclass
class _Watcher:
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


def _child_keeps(pieces: list[_Piece]) -> tuple[set[int], set[int]]:
    """The ids of the pieces the child runs, and of the parent's statements it does without: all but
    model-independent statements binding names no other child code reads (78.1's ``expected_output``:
    only the parent's assertion needs it, so a child cannot read it from the test's frame and return it).
    Flow-insensitive over the step: a name read anywhere keeps every statement that binds or changes it.
    The parent runs what the child does without, needed or not (an error in it fails the test, as
    upstream)."""
    flat: list[_Piece] = []
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


def _render(pieces: list[_Piece], kept: set[int], watcher: _Watcher) -> str:
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


# ---- what the parent keeps ---------------------------------------------------------------------


def _prune(
    tests: list[TestPlan], forced: AbstractSet[int] = frozenset()
) -> tuple[tuple[TestPlan, ...], list[set[str]]]:
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
            names |= _free_names(pyast.parse(part.expression, mode="eval")) - {LEAF_FN}
        elif isinstance(part, MixedStatement):
            names |= _free_names(pyast.parse(part.expression)) - {LEAF_FN}
        else:
            names |= _free_names(pyast.parse(part.source))
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
            needed = needed | _with_calls(_free_names(pyast.parse(part.expression, mode="eval")) - {LEAF_FN}, calls)
        elif isinstance(part, MixedStatement):
            needed = (needed - part.binds) | _with_calls(_free_names(pyast.parse(part.expression)) - {LEAF_FN}, calls)
        else:
            statement = pyast.parse(part.source).body[0]
            needed = (needed - bound_names(statement)) | _with_calls(_free_names(statement), calls)
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


# ---- test functions (def test_case_N(): ... assert ...; test_case_N()) -------------------------


def _contains_assert(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(isinstance(node, ast.Assert) for node in ast.walk(fn))


def _called_test_function(stmt: ast.Expr, test_functions: dict) -> bool:
    call = stmt.value
    return (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Name)
        and call.func.id in test_functions
        and not call.args
        and not call.keywords
    )


def _test_functions(tree: ast.Module, where: str) -> dict[str, ast.FunctionDef]:
    found = {}
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and _contains_assert(stmt):
            name = stmt.name
            if isinstance(stmt, ast.AsyncFunctionDef) or stmt.decorator_list or _function_locals_args(stmt):
                raise SplitError(
                    f"{where}: line {stmt.lineno}: test function {name} must be a plain "
                    "function without arguments or decorators"
                )
            for node in stmt.body:
                if any(isinstance(inner, ast.Assert) for inner in ast.walk(node)) and not isinstance(node, ast.Assert):
                    raise SplitError(
                        f"{where}: line {node.lineno}: an assert inside a block of test "
                        f"function {name} is not supported (only at the top of its body)"
                    )
            for inner_node in ast.walk(stmt):
                if isinstance(inner_node, (ast.Return, ast.Yield, ast.YieldFrom, ast.Global, ast.Nonlocal)):
                    raise SplitError(
                        f"{where}: line {inner_node.lineno}: test function {name} uses "
                        f"`{type(inner_node).__name__.lower()}`, which cannot be inlined"
                    )
            found[name] = stmt
    for name, fn in found.items():
        calls = [s for s in tree.body if isinstance(s, ast.Expr) and _called_test_function(s, {name: fn})]
        uses = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == name]
        if len(calls) != 1 or len(uses) != 1 or calls[0].lineno < fn.lineno:
            raise SplitError(
                f"{where}: test function {name} must be called exactly once, as `{name}()`, after its definition"
            )
    return found


def _function_locals_args(fn: ast.FunctionDef) -> bool:
    args = fn.args
    return bool(args.posonlyargs or args.args or args.kwonlyargs or args.vararg or args.kwarg)


def _inline_test_function(
    fn: ast.FunctionDef, state: _StepState, add_assert, where: str
) -> tuple[_Piece, FunctionScope]:
    """The child's version of a test function (each assert replaced by its operand block) and the
    parent's (its model-independent statements and its assertions, in a scope of their own)."""
    local = taint.function_locals(fn)
    free = _free_names(fn)
    if TARGET in free or free & state.parent_names:
        raise SplitError(
            f"{where}: test function {fn.name} uses the parent's names "
            f"({', '.join(sorted(free & (state.parent_names | {TARGET})))})"
        )
    trust = state.trust.enter_function(local)
    scope = _Scope(frozenset(), frozenset(state.helpers) - local, trust, shadowed=frozenset(local))
    body: list[_Piece] = []
    parts: list = []
    for stmt in fn.body:
        if isinstance(stmt, ast.Assert):
            body.append(add_assert(stmt, scope, parts))
            continue
        part, watch = _trusted_part(stmt, ast.unparse(stmt), trust)
        body.append(_Piece(ast.unparse(stmt) + "\n", part=part, watch=watch))
        if part is not None:
            parts.append(part)
    state.trust.leave_function(trust, local)
    return _Piece("", function=(fn, body)), FunctionScope(fn.name, frozenset(local), tuple(parts))


# ---- comparing helpers -----------------------------------------------------------------------


def _visible(state: _StepState) -> frozenset[str]:
    return frozenset(PARENT_MODULES) | BUILTIN_NAMES | frozenset(CMP_HELPERS) | frozenset(state.helpers)


def _is_comparing_helper(fn: ast.FunctionDef, state: _StepState) -> bool:
    """A function of the test text that compares and needs only what the parent has."""
    if fn.decorator_list:
        return False
    for node in ast.walk(fn):
        if isinstance(
            node,
            (ast.Global, ast.Nonlocal, ast.Import, ast.ImportFrom, ast.Yield, ast.YieldFrom, ast.ClassDef, ast.Await),
        ):
            return False
        if isinstance(node, ast.Name) and node.id == TARGET:
            return False
    allowed = _visible(state) | {fn.name}
    if not _free_names(fn) <= allowed:
        return False
    if _calls_methods_of_arguments(fn):  # may call the model's objects (30.3's wf.value): runs in the child
        return False
    helpers = state.helpers | {fn.name}
    for node in ast.walk(fn):
        if isinstance(node, ast.Compare):
            return True
        if isinstance(node, ast.Call):
            name = canonical(dotted(node.func))
            if name in COMPARISON_CALLS or name in helpers:
                return True
    return False


def _calls_methods_of_arguments(fn: ast.FunctionDef) -> bool:
    """Whether ``fn`` calls a method of one of its arguments other than a data value's (``DATA_METHODS``):
    such a call may reach the model's objects."""
    params = taint.function_locals(fn) - _bound_names_in_body(fn)
    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id in params
        and node.func.attr not in DATA_METHODS
        for node in ast.walk(fn)
    )


def _bound_names_in_body(fn: ast.FunctionDef) -> set[str]:
    names: set[str] = set()
    for stmt in fn.body:
        names |= bound_names(stmt)
    return names


def _is_runnable_helper(fn: ast.FunctionDef, state: _StepState) -> bool:
    """A function of the test text the parent runs on the child's values (49.4's ``Nbody_Etot``, 51.4's
    ``total_energy``): it reads only the parent's modules, reproducible builtins and such functions, and
    calls no method of its arguments but those of data values (30.3's ``test_gradient`` calls
    ``wf.value``, the model's object: it stays in the child)."""
    defaults = [d for d in (*fn.args.defaults, *fn.args.kw_defaults) if d is not None]
    if fn.decorator_list or taint.forbidden(fn) or not all(isinstance(d, ast.Constant) for d in defaults):
        return False  # a default that can change in place is data the child's values may be stored in
    allowed = (
        frozenset(PARENT_MODULES)
        | taint.SAFE_BUILTINS
        | frozenset(CMP_HELPERS)
        | frozenset(state.helpers)
        | frozenset(state.runnable)
        | {fn.name}
    )
    if not _free_names(fn) <= allowed or not all(state.trust.name(name) for name in _free_names(fn) - {fn.name}):
        return False
    return not _calls_methods_of_arguments(fn)


def _is_traced_helper(fn: ast.FunctionDef) -> bool:
    """A function of the test text that calls into the model's objects (30.3's ``test_gradient(configs, wf,
    delta)`` calls ``wf.value``; 72.1's ``test_neighbor()`` calls ``neighbor_list``) and that the parent can
    replay (:func:`.verdict.replay`): plain Python with constant defaults, no handler that could hide a failed call,
    nothing that binds outside its scope or reads state a second run cannot reproduce."""
    defaults = [d for d in (*fn.args.defaults, *fn.args.kw_defaults) if d is not None]
    if fn.decorator_list or taint.forbidden(fn) or not all(isinstance(d, ast.Constant) for d in defaults):
        return False
    return not any(
        isinstance(
            node,
            (ast.Try, getattr(ast, "TryStar", ast.Try), ast.With, ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef),
        )
        or isinstance(node, ast.Name)
        and node.id.startswith("_agentbench")
        for node in ast.walk(fn)
        if node is not fn
    )


# ---- assertions ------------------------------------------------------------------------------


class _AssertSplitter:
    def __init__(self, scope: _Scope, where: str, exposed: frozenset[str] = frozenset()):
        self.scope = scope
        self.where = where
        self.exposed = exposed  # model-independent until this assertion, whose child-side operands read them
        self.leaves: list[ast.expr] = []
        self.traces: dict[int, str] = {}  # leaf number -> the child's recording call (a traced helper's call)

    # which nodes the parent evaluates as comparisons
    def call_name(self, node: ast.Call) -> str | None:
        name = dotted(node.func)
        if name is None:
            return None
        head = name.split(".")[0]
        if head in self.scope.shadowed:  # a local of a test function that shadows np/a helper
            return None
        return canonical(name)

    def is_comparison(self, node: ast.AST, comp_scope: frozenset[str]) -> bool:
        if isinstance(node, (ast.Compare, ast.BoolOp)):
            return True
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return True
        if isinstance(node, ast.Call):
            name = self.call_name(node)
            if name in COMPARISON_CALLS or name in self.scope.helpers:
                return True
            parts = [*node.args, *(k.value for k in node.keywords)]
            parts = [p.value if isinstance(p, ast.Starred) else p for p in parts]
            if name in WRAPPER_CALLS:
                return any(self.is_comparison(p, comp_scope) for p in parts)
            if (
                isinstance(node.func, ast.Attribute)
                and node.func.attr in WRAPPER_METHODS
                and not node.args
                and self.is_comparison(node.func.value, comp_scope)
            ):
                return True
            return False
        if isinstance(node, (ast.Tuple, ast.List)):
            return any(self.is_comparison(e, comp_scope) for e in node.elts)
        if isinstance(node, (ast.GeneratorExp, ast.ListComp, ast.SetComp)):
            return self.is_comparison(node.elt, comp_scope)
        return False

    def transform(self, node: ast.expr, comp_scope: frozenset[str] = frozenset()) -> ast.expr:
        if not self.is_comparison(node, comp_scope):
            return self.operand(node, comp_scope)
        if isinstance(node, ast.Compare):
            return ast.Compare(
                left=self.transform(node.left, comp_scope),
                ops=node.ops,
                comparators=[self.transform(c, comp_scope) for c in node.comparators],
            )
        if isinstance(node, ast.BoolOp):
            return ast.BoolOp(op=node.op, values=[self.transform(v, comp_scope) for v in node.values])
        if isinstance(node, ast.UnaryOp):
            return ast.UnaryOp(op=node.op, operand=self.transform(node.operand, comp_scope))
        if isinstance(node, ast.Call):
            func: ast.expr
            if (
                isinstance(node.func, ast.Attribute)
                and self.call_name(node) not in COMPARISON_CALLS | WRAPPER_CALLS
                and self.call_name(node) not in self.scope.helpers
            ):
                func = ast.Attribute(
                    value=self.transform(node.func.value, comp_scope), attr=node.func.attr, ctx=ast.Load()
                )
            else:
                func = node.func
            args = [
                ast.Starred(value=self.transform(a.value, comp_scope), ctx=ast.Load())
                if isinstance(a, ast.Starred)
                else self.transform(a, comp_scope)
                for a in node.args
            ]
            keywords = [ast.keyword(arg=k.arg, value=self.transform(k.value, comp_scope)) for k in node.keywords]
            return ast.Call(func=func, args=args, keywords=keywords)
        if isinstance(node, (ast.Tuple, ast.List)):
            return type(node)(elts=[self.transform(e, comp_scope) for e in node.elts], ctx=ast.Load())
        # a comprehension whose element compares: iterables from the child, the loop in the parent
        comp = cast("ast.ListComp | ast.SetComp | ast.GeneratorExp", node)  # what is_comparison lets through
        generators = []
        inner = comp_scope
        for number, gen in enumerate(comp.generators):
            if gen.is_async:
                raise SplitError(f"{self.where}: async comprehensions are not supported")
            iterable = self.transform(gen.iter, comp_scope if number == 0 else inner)
            inner = inner | frozenset(target_names(gen.target))
            ifs = [self.transform(cond, inner) for cond in gen.ifs]
            generators.append(ast.comprehension(target=gen.target, iter=iterable, ifs=ifs, is_async=0))
        return type(comp)(elt=self.transform(comp.elt, inner), generators=generators)

    def operand(self, node: ast.expr, comp_scope: frozenset[str]) -> ast.expr:
        """An operand: computed by the parent when it does not depend on the model's code or needs the
        parent's names, else the child's value."""
        for inner in ast.walk(node):
            if isinstance(inner, (ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)):
                raise SplitError(
                    f"{self.where}: `{short(ast.unparse(node))}` uses {type(inner).__name__}, which cannot be split"
                )
        return self.mixed(node, comp_scope)

    def parent_computes(self, node: ast.expr) -> bool:
        """Whether ``node`` does not depend on the model's code (the parent computes it from the test text)."""
        return not (_free_names(node) & self.exposed) and self.scope.trust.expression(node)

    def mixed(self, node: ast.expr, comp_scope: frozenset[str]) -> ast.expr:
        """The parent evaluates ``node``; its largest parts that depend on the model's code and need none
        of the parent's names come from the child (``target[idx]``: ``idx`` from the child)."""
        free = _free_names(node)
        if not free & (self.scope.parent_names | comp_scope):
            if self.parent_computes(node):
                return node
            if not self.parent_applies(node):
                return self.traced(node) or self.leaf(node)
        if isinstance(node, ast.Call):
            func_free = _free_names(node.func)
            if not func_free & (self.scope.parent_names | comp_scope) and not self.parent_computes(node.func):
                raise SplitError(
                    f"{self.where}: `{short(ast.unparse(node))}` calls "
                    f"{short(ast.unparse(node.func))} (the child's) on the parent's values"
                )
        if isinstance(node, (ast.Lambda, ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp)):
            raise SplitError(
                f"{self.where}: `{short(ast.unparse(node))}` mixes the parent's names "
                "and a nested scope, which cannot be split"
            )
        for name, value in ast.iter_fields(node):
            if isinstance(value, ast.expr):
                setattr(node, name, self.mixed(value, comp_scope))
            elif isinstance(value, list):
                setattr(
                    node,
                    name,
                    [
                        self.mixed(v, comp_scope) if isinstance(v, ast.expr) else self._mixed_keyword(v, comp_scope)
                        for v in value
                    ],
                )
        return node

    def parent_applies(self, node: ast.expr) -> bool:
        """Whether the parent evaluates ``node`` itself on the child's values of its parts: an operator, a
        tuple or list display, a call of a library function, a reproducible builtin or a function of the
        test text it runs (:func:`_is_runnable_helper`). Only the model's calls (and what reads the model's
        objects: attributes, items, methods) come from the child. A part that is a name the test text
        never bound (a function or constant of the model's code) keeps the whole call in the child."""
        if isinstance(node, ast.Slice):
            return True
        if (
            isinstance(node, (ast.BinOp, ast.Tuple, ast.List))
            or isinstance(node, ast.UnaryOp)
            and not isinstance(node.op, ast.Not)
        ):
            return not isinstance(node, (ast.Tuple, ast.List)) or not any(isinstance(e, ast.Starred) for e in node.elts)
        if isinstance(node, (ast.Subscript, ast.Attribute)):  # of a value the test text bound: data
            base = node.value
            while isinstance(base, (ast.Subscript, ast.Attribute)):
                if isinstance(base, ast.Attribute) and base.attr not in DATA_ATTRIBUTES:
                    return False
                base = base.value
            return (
                isinstance(base, ast.Name)
                and base.id in self.scope.trust.bound
                and base.id not in self.exposed
                and (not isinstance(node, ast.Attribute) or node.attr in DATA_ATTRIBUTES)
            )
        if not isinstance(node, ast.Call) or not self.parent_callable(node.func):
            return False
        parts = [*node.args, *(k.value for k in node.keywords)]
        parts = [p.value if isinstance(p, ast.Starred) else p for p in parts]
        return not any(
            isinstance(p, ast.Name) and p.id not in self.scope.trust.bound and not self.scope.trust.name(p.id)
            for p in parts
        )

    def parent_callable(self, func: ast.expr) -> bool:
        name = dotted(func)
        if name is None:
            return False
        head = name.split(".")[0]
        if head in self.scope.shadowed or not self.scope.trust.name(head) or head in self.exposed:
            return False
        if "." not in name:
            return name in PARENT_BUILTIN_CALLS or name in self.scope.runnable
        full = canonical(name)
        module = full.split(".")[0]
        return (
            module in ("numpy", "math", "cmath")
            and head in PARENT_MODULES
            and not taint.forbidden(func)
            and full not in CALLBACK_CALLS
        )

    def _mixed_keyword(self, value, comp_scope):
        if isinstance(value, ast.keyword):
            value.value = self.mixed(value.value, comp_scope)
        return value

    def traced(self, node: ast.expr) -> ast.expr | None:
        """A call of a traced helper (:func:`_is_traced_helper`) on operands the child has, or None. The child
        runs the helper with the model's objects wrapped so it records every call into them (arguments and
        results); the parent runs the helper's own logic itself on the operands it computes, on the decoded
        record's values for the others, and answers each call into the model's objects from the record,
        after checking it is the call the record says (:func:`.verdict.replay`)."""
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            return None
        name = node.func.id
        binding = self.scope.trust.bound.get(name)
        if name not in self.scope.traced or name in self.scope.shadowed or binding is None or binding.calls is None:
            return None
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            return None
        names = sorted(n for n in binding.calls - {name} if not self.scope.trust.name(n))
        # a module the dependencies import (64.6's itertools): the parent's own, as for the test text's names
        modules = tuple(n for n in names if n in taint.IMPORTABLE_MODULES)
        names = [n for n in names if n not in modules]
        for other in names:  # another function of the test text would run whole in the child: not traced
            inner = self.scope.trust.bound.get(other)
            if (
                other in self.scope.parent_names
                or other in self.scope.helpers
                or (inner is not None and inner.calls is not None)
                or other.startswith("_agentbench")
            ):
                return None
        parts = [(k, a) for k, a in enumerate(node.args)] + [(k.arg, k.value) for k in node.keywords]
        keys = tuple(key for key, arg in parts if not self.parent_computes(arg))
        self.leaves.append(node)
        number = len(self.leaves)

        def call(func: str, first: ast.expr, parent: bool) -> ast.Call:
            def value(key, arg):
                return ast.Constant(value=None) if parent and key in keys else copy.deepcopy(arg)

            return ast.Call(
                func=ast.Name(id=func, ctx=ast.Load()),
                args=[
                    first,
                    ast.Name(id=name, ctx=ast.Load()),
                    ast.List(elts=[value(k, a) for k, a in enumerate(node.args)], ctx=ast.Load()),
                    ast.Dict(
                        keys=[ast.Constant(value=k.arg) for k in node.keywords],
                        values=[value(k.arg, k.value) for k in node.keywords],
                    ),
                    # a tuple constant is valid at run time (ast.literal_eval gives them); typeshed omits it
                    ast.Constant(value=keys),  # type: ignore[arg-type]
                    ast.Constant(value=tuple(names)),  # type: ignore[arg-type]
                    *([ast.Constant(value=modules)] if parent else []),  # type: ignore[arg-type]
                ],
                keywords=[],
            )

        child = call(f"{RUNTIME}.trace", ast.Constant(value=None), False)
        child.args = child.args[1:]
        self.traces[number] = ast.unparse(ast.fix_missing_locations(child))
        leaf = ast.Call(func=ast.Name(id=LEAF_FN, ctx=ast.Load()), args=[ast.Constant(value=number)], keywords=[])
        return call(REPLAY_FN, leaf, True)

    def leaf(self, node: ast.expr) -> ast.expr:
        number = next(
            (
                k
                for k, leaf in enumerate(self.leaves, 1)
                if isinstance(node, ast.Name) and isinstance(leaf, ast.Name) and leaf.id == node.id
            ),
            None,
        )  # a name crosses once
        if number is None:
            self.leaves.append(node)
            number = len(self.leaves)
        return ast.Call(func=ast.Name(id=LEAF_FN, ctx=ast.Load()), args=[ast.Constant(value=number)], keywords=[])


def _split_assert(
    node: ast.Assert, test: int, number: int, scope: _Scope, where: str
) -> tuple[AssertPlan, str, frozenset[str]]:
    """The parent's assertion, the child's operand block and the model-independent names its operands pass
    to model calls (they stay the parent's). An operand the child evaluates may otherwise expose the test's
    values to the model's code: what may share their objects is the child's too, in this assertion (as
    upstream evaluates it) and after it."""
    stable = _split_until_stable(
        scope, f"{where} line {node.lineno}", lambda splitter: splitter.transform(copy.deepcopy(node.test))
    )
    assert stable is not None  # transform always gives a node, so the split never gives up
    splitter, expression, watch = stable
    expression = ast.unparse(ast.fix_missing_locations(expression))
    leaves = tuple(Leaf(k, ast.unparse(leaf), splitter.traces.get(k)) for k, leaf in enumerate(splitter.leaves, 1))
    message = node.msg.value if isinstance(node.msg, ast.Constant) and isinstance(node.msg.value, str) else None
    plan = AssertPlan(number=number, source=ast.unparse(node), expression=expression, leaves=leaves, message=message)
    return plan, _operand_block(test, number, leaves), watch


def _split_until_stable(
    scope: _Scope, where: str, split: Callable[[_AssertSplitter], Any]
) -> tuple[_AssertSplitter, Any, frozenset[str]] | None:
    """Split again until what the child's operands read is all exposed to the model's code (reading a name
    exposes what may share its objects, which may move more into the child); then mark it exposed.
    ``split(splitter)`` gives the transformed node, or None to give up. Returns the splitter, that node and
    the names passed to model calls whose objects the parent watches."""
    exposed: frozenset[str] = frozenset()
    while True:
        splitter = _AssertSplitter(scope, where, exposed)
        result = split(splitter)
        if result is None:
            return None
        passed = set().union(*(scope.trust.passed(leaf) for leaf in splitter.leaves))
        read = set().union(*(_free_names(leaf) - scope.trust.passed(leaf) for leaf in splitter.leaves))
        reached = scope.trust.closure(read)
        if reached <= exposed:
            scope.trust.expose(read)
            return splitter, result, frozenset(scope.trust.closure(passed))
        exposed = exposed | reached


# what a mixed statement's value never holds: constructs that evaluate parts lazily, in a scope of their
# own, or that bind names
_UNMIXED = (
    ast.Lambda,
    ast.ListComp,
    ast.SetComp,
    ast.DictComp,
    ast.GeneratorExp,
    ast.IfExp,
    ast.BoolOp,
    ast.NamedExpr,
    ast.Await,
    ast.Yield,
    ast.YieldFrom,
    ast.Starred,
)


def _split_mixed(
    stmt: ast.Assign, source: str, test: int, number: int, scope: _Scope, where: str
) -> tuple[MixedStatement, str, frozenset[str]] | None:
    """``name = expression`` that applies the test's own code to the child's values (49.4's ``Etot1 =
    Nbody_Etot(uout, mass)``): the parent runs it on the decoded operands, the child computes only the
    operands. None when the statement is the parent's anyway, the child's alone (its value is one operand,
    ``uout = Nbody(...)``), or has a shape the parent does not run this way."""
    if not all(
        isinstance(n, (ast.Name, ast.Tuple, ast.List, ast.Store)) for target in stmt.targets for n in ast.walk(target)
    ):
        return None
    free = _free_names(stmt)
    if (
        free & scope.parent_names
        or scope.trust.statement(stmt)
        or taint.forbidden(stmt)
        or any(isinstance(n, _UNMIXED) for n in ast.walk(stmt.value))
    ):
        return None

    def applied(splitter: _AssertSplitter) -> ast.expr | None:
        value = splitter.mixed(copy.deepcopy(stmt.value), frozenset())
        if not splitter.leaves or isinstance(value, ast.Call) and dotted(value.func) == LEAF_FN:
            return None  # nothing for the parent to apply
        return value

    split = _split_until_stable(scope, f"{where} line {stmt.lineno}", applied)
    if split is None:
        return None
    splitter, value, watch = split
    bound = frozenset(bound_names(stmt))
    parent_stmt = ast.fix_missing_locations(ast.Assign(targets=stmt.targets, value=value, lineno=stmt.lineno))
    scope.trust.bind(parent_stmt, set(bound))
    leaves = tuple(Leaf(k, ast.unparse(leaf), splitter.traces.get(k)) for k, leaf in enumerate(splitter.leaves, 1))
    plan = MixedStatement(
        number=number, source=short(source, 200), expression=ast.unparse(parent_stmt), leaves=leaves, binds=bound
    )
    return plan, _mixed_block(test, number, leaves, parent_stmt), watch


def _mixed_block(test: int, number: int, leaves: tuple[Leaf, ...], parent_stmt: ast.Assign) -> str:
    """The child's code of a mixed statement: each operand evaluated once and sent, then the statement run
    on those values (its own code may need the names). An operand that raises is reported, then raised
    again, as upstream's script stops there."""
    lines = []
    for leaf in leaves:
        ids = f"{test}, {number}, {leaf.number}"
        lines += [
            "try:",
            f"    {LEAF_VALUE}_{number}_{leaf.number} = ({leaf.child})",
            f"except Exception as {LEAF_EXC}:",
            f"    {RUNTIME}.raised({ids}, {LEAF_EXC})",
            f"    {RUNTIME}.reached({test}, {number})",
            "    raise",
            "else:",
            f"    {RUNTIME}.value({ids}, {LEAF_VALUE}_{number}_{leaf.number})",
        ]
    lines.append(f"{RUNTIME}.reached({test}, {number})")

    class Substitute(ast.NodeTransformer):
        def visit_Call(self, node):
            if isinstance(node.func, ast.Name) and node.func.id == LEAF_FN:
                return ast.Name(id=f"{LEAF_VALUE}_{number}_{node.args[0].value}", ctx=ast.Load())
            if isinstance(node.func, ast.Name) and node.func.id == REPLAY_FN:  # the helper's own return value
                record = self.visit(node.args[0])
                return ast.Call(
                    func=ast.Attribute(value=ast.Name(id=RUNTIME, ctx=ast.Load()), attr="returned", ctx=ast.Load()),
                    args=[record],
                    keywords=[],
                )
            return self.generic_visit(node)

    lines.append(ast.unparse(ast.fix_missing_locations(Substitute().visit(copy.deepcopy(parent_stmt)))))
    return "".join(f"{line}\n" for line in lines)


def _operand_block(test: int, number: int, leaves: tuple[Leaf, ...]) -> str:
    lines = []
    for leaf in leaves:
        ids = f"{test}, {number}, {leaf.number}"
        lines += [
            "try:",
            f"    {LEAF_VALUE} = ({leaf.child})",
            f"except Exception as {LEAF_EXC}:",
            f"    {RUNTIME}.raised({ids}, {LEAF_EXC})",
            "else:",
            f"    {RUNTIME}.value({ids}, {LEAF_VALUE})",
        ]
    lines.append(f"{RUNTIME}.reached({test}, {number})")
    return "".join(f"{line}\n" for line in lines)


__all__ = ["COMPARISON_CALLS", "SplitError", "names_bound_by", "required_names", "split_step"]
