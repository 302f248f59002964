"""Split SciCode's official test cases: the untrusted child computes operands, the trusted parent compares.

A test case is Python run after the model's code: setup lines, calls to the step's function and
``assert`` statements that compare with ``target``. Here each test case is split in two:

* the **child** (the process that runs model code) runs the setup lines and, for every assertion,
  evaluates only the *operands* of its comparisons (the arguments of ``np.allclose``,
  ``np.isclose``, ``cmp_tuple_or_list``, ... and the operands of ``==``, ``<``, ``and``, ``not``,
  ...), and sends each value through :mod:`pytest_agentbench.sandbox.codec`;
* the **parent** (trusted, holding the targets, genuine numpy and the helpers of
  :mod:`.compare`) evaluates each assertion on the received operand values and ``target``.

Rules, so every official test case splits the same way (see :func:`split_step`):

* statements that use ``target`` (``s, v = target``) run only in the parent; the names they bind
  are the parent's;
* comparison calls and operators always run in the parent, also inside a part that does not use
  ``target`` (``(np.isclose(0, B[:, 0].T @ B[:, 3])) == target``, 51.4's tuple of comparisons,
  ``not np.isnan(x).any()``);
* an operand that mentions a parent name (``target[0]``, ``target.any()``, a name unpacked from
  ``target``, a comprehension variable of a parent-side ``all(... for i in A)``) is evaluated in the
  parent, its parts that mention only child names (``A``) come from the child; an operand made of
  constants only (``0``, ``(0, -1)``, ``10 ** 10``) stays in the parent;
* a function defined in the test text that compares and needs nothing but numpy, math and the
  builtins (10.6 ``are_equivalent``, 31.2 ``test_identity``) runs in the parent; any other
  (30.3 ``test_gradient(configs, wf, delta)``, 72.1 ``test_neighbor()``, which call the model's
  objects) runs in the child and only its result is compared;
* a test function holding ``assert`` statements and called once with no arguments
  (78.1 ``def test_case_1(): ... assert ...`` then ``test_case_1()``) is inlined for the parent (its
  assertions are the test's, at the call); in the child it stays a function, so its locals stay
  local as upstream.

The child reports, per test, ``("t", test)`` when the test starts, one frame per operand
(``("v", test, assertion, operand, value)``, or ``("e", ..., "TypeError: ...")`` when evaluating it
raised, or ``("x", ..., reason)`` when it cannot be encoded), ``("a", test, assertion)`` once every
operand of an assertion was attempted, and ``("z", test)`` at the end of the test. An operand that
raised fails its test only if the parent needs its value (as a short-circuited operand upstream is
never evaluated). A step passes only when every test's every assertion holds in the parent.
"""
from __future__ import annotations

import ast
import builtins
import cmath
import copy
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ...sandbox import codec

# Loaded by path inside the child (importing it here would load numpy for nothing).
COMPARE_PATH = str(Path(__file__).with_name("compare.py"))

TARGET = "target"
LEAF_FN = "_agentbench_leaf"
RUNTIME = "_agentbench_rt"
LEAF_VALUE = "_agentbench_value"
LEAF_EXC = "_agentbench_exc"
MESSAGE_CHARS = 500  # characters of a child's exception text kept in a frame
CONTROL_FRAME_BYTES = 8 * 1024  # cap of one control/error frame; they do not count against the step cap
STREAM_SLACK = 64 * 1024

# names the parent's namespace provides: genuine modules, the cmp helpers, the builtins
PARENT_MODULES = {"np": "numpy", "numpy": "numpy", "math": "math", "cmath": "cmath"}
CMP_HELPERS = ("cmp_tuple_or_list", "are_dicts_close", "are_csc_matrix_close")
BUILTIN_NAMES = frozenset(dir(builtins))
# calls that compare (canonical dotted names): they always run in the parent
COMPARISON_CALLS = frozenset({
    *(f"numpy.{name}" for name in (
        "allclose", "isclose", "array_equal", "array_equiv", "equal", "not_equal", "less", "less_equal",
        "greater", "greater_equal", "isnan", "isinf", "isfinite", "isneginf", "isposinf", "isreal",
        "iscomplex", "isrealobj", "iscomplexobj")),
    "math.isclose", "math.isnan", "math.isinf", "math.isfinite",
    "cmath.isclose", "cmath.isnan", "cmath.isinf", "cmath.isfinite",
    *CMP_HELPERS,
})
# calls that only reduce or reshape a comparison's result: in the parent when they wrap one
WRAPPER_CALLS = frozenset({"all", "any", "bool", "abs", "numpy.abs", "numpy.absolute", "numpy.all", "numpy.any",
                           "numpy.logical_and", "numpy.logical_or", "numpy.logical_not", "numpy.logical_xor"})
WRAPPER_METHODS = frozenset({"all", "any"})
# methods of data values (arrays, lists, dicts, sparse matrices) a parent-side helper may call on its arguments
DATA_METHODS = frozenset({
    "all", "any", "sum", "mean", "max", "min", "copy", "reshape", "flatten", "ravel", "astype", "tolist",
    "toarray", "todense", "conj", "conjugate", "transpose", "dot", "item", "keys", "values", "items", "get",
    "round", "std", "var", "nonzero", "argmax", "argmin", "cumsum", "prod", "trace", "diagonal", "squeeze",
    "count", "index", "tocsr", "tocsc", "tocoo"})
_CONSTANT_NODES = (ast.Constant, ast.Tuple, ast.List, ast.Set, ast.UnaryOp, ast.BinOp, ast.Load,
                   ast.operator, ast.unaryop)


class SplitError(Exception):
    """A test case cannot be split; the message names the step, the test and the construct."""


# ----------------------------------------------------------------------------------------------
# the plan


@dataclass(frozen=True)
class Leaf:
    """One operand the child evaluates and sends."""
    number: int  # 1-based within its assertion
    source: str  # the expression, as the child evaluates it


@dataclass(frozen=True)
class AssertPlan:
    number: int  # 1-based within its test
    source: str  # the original ``assert`` statement (for messages)
    expression: str  # what the parent evaluates; operand k appears as ``_agentbench_leaf(k)``
    leaves: tuple[Leaf, ...]
    message: str | None = None  # the assertion's own message, when it is a constant


@dataclass(frozen=True)
class ParentStatement:
    """A statement only the parent runs (``s, v = target``) or also runs (a comparing helper's ``def``)."""
    source: str


@dataclass(frozen=True)
class TestPlan:
    number: int  # 1-based within the step
    child: str  # the child's source for this test (setup lines, operand blocks, markers)
    parent: tuple[ParentStatement | AssertPlan, ...]  # in the order they run

    @property
    def asserts(self) -> tuple[AssertPlan, ...]:
        return tuple(part for part in self.parent if isinstance(part, AssertPlan))


@dataclass(frozen=True)
class StepPlan:
    step: str
    tests: tuple[TestPlan, ...]

    def child_source(self) -> str:
        """Every test's child code in order; it needs ``_agentbench_rt`` (see :func:`child_runtime`)."""
        return "".join(test.child for test in self.tests)

    def expected_frames(self) -> int:
        return sum(2 + len(test.asserts) + sum(len(a.leaves) for a in test.asserts) for test in self.tests)

    def stream_cap(self, max_bytes: int = codec.DEFAULT_MAX_BYTES) -> int:
        """Most bytes a genuine child sends: operand values within ``max_bytes`` plus control frames."""
        return max_bytes + STREAM_SLACK + CONTROL_FRAME_BYTES * self.expected_frames()


# ----------------------------------------------------------------------------------------------
# names and scopes


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _canonical(name: str | None) -> str | None:
    if name is None:
        return None
    head, _, rest = name.partition(".")
    if head in PARENT_MODULES:
        return PARENT_MODULES[head] + ("." + rest if rest else "")
    return name


def _target_names(node: ast.AST) -> set[str]:
    """Names bound by an assignment target."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}


def _function_locals(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    args = fn.args
    names = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
    names |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    if isinstance(fn, ast.Lambda):
        return names
    declared_global: set[str] = set()
    for stmt in fn.body:
        names |= _bound_names(stmt)
        for node in _walk_scope(stmt):
            if isinstance(node, (ast.Global, ast.Nonlocal)):
                declared_global.update(node.names)
    return names - declared_global


def _walk_scope(node: ast.AST):
    """ast.walk that does not enter nested function, lambda, class or comprehension scopes."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        for child in ast.iter_child_nodes(current):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef,
                                  ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                yield child  # the node itself (its name binds here), not its body
                continue
            stack.append(child)


def _bound_names(stmt: ast.AST) -> set[str]:
    """Names a statement binds in the scope it runs in."""
    names: set[str] = set()
    for node in _walk_scope(stmt):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.NamedExpr):
            names.add(node.target.id)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


def _free_names(node: ast.AST, bound: frozenset[str] = frozenset()) -> set[str]:
    """Names ``node`` reads from the scope around it (nested scopes resolved)."""
    free: set[str] = set()

    def visit(current: ast.AST, local: frozenset[str]) -> None:
        if isinstance(current, ast.Name):
            if isinstance(current.ctx, ast.Load) and current.id not in local:
                free.add(current.id)
            return
        if isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            defaults = [*current.args.defaults, *[d for d in current.args.kw_defaults if d is not None]]
            decorators = getattr(current, "decorator_list", [])
            for part in (*defaults, *decorators):
                visit(part, local)
            inner = local | _function_locals(current)
            body = current.body if isinstance(current.body, list) else [current.body]
            for stmt in body:
                visit(stmt, inner)
            return
        if isinstance(current, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            inner = local
            for number, gen in enumerate(current.generators):
                visit(gen.iter, local if number == 0 else inner)
                inner = inner | _target_names(gen.target)
                for cond in gen.ifs:
                    visit(cond, inner)
            if isinstance(current, ast.DictComp):
                visit(current.key, inner)
                visit(current.value, inner)
            else:
                visit(current.elt, inner)
            return
        if isinstance(current, ast.ClassDef):
            raise SplitError("a class defined in a test case is not supported")
        for child in ast.iter_child_nodes(current):
            visit(child, local)

    visit(node, bound)
    return free


# ----------------------------------------------------------------------------------------------
# splitting


@dataclass
class _StepState:
    """What the parent owns so far in a step (a step's tests share one namespace, as upstream)."""
    parent_names: set[str] = field(default_factory=lambda: {TARGET})
    helpers: set[str] = field(default_factory=set)  # comparing helpers defined in the parent


@dataclass
class _Scope:
    parent_names: frozenset[str]  # names whose value the parent holds (target, unpacked names, comp. vars)
    visible: frozenset[str]  # names the parent can resolve to its own objects (np, builtins, helpers)
    helpers: frozenset[str]
    shadowed: frozenset[str] = frozenset()  # function locals of an inlined test function


def split_step(test_cases: Sequence[str], step: str = "") -> StepPlan:
    """The plan of a step: one :class:`TestPlan` per official test case. Raises :class:`SplitError`."""
    state = _StepState()
    tests = tuple(_split_test(code, number, state, step) for number, code in enumerate(test_cases, 1))
    return StepPlan(step=str(step), tests=tests)


def _where(step: str, test: int) -> str:
    return f"step {step} test {test}" if step else f"test {test}"


def _split_test(code: str, test: int, state: _StepState, step: str) -> TestPlan:
    where = _where(step, test)
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        raise SplitError(f"{where}: the test case does not parse ({exc})") from exc
    test_functions = _test_functions(tree, where)
    child: list[str] = [f"\n# ---- test {test} ----\n{RUNTIME}.test({test})\n"]
    parent: list[ParentStatement | AssertPlan] = []
    counter = [0]

    def add_assert(node: ast.Assert, scope: _Scope, indent: str) -> str:
        counter[0] += 1
        plan, block = _split_assert(node, test, counter[0], scope, where, indent)
        parent.append(plan)
        return block

    for stmt in tree.body:
        scope = _Scope(frozenset(state.parent_names), _visible(state), frozenset(state.helpers))
        if isinstance(stmt, ast.FunctionDef) and stmt.name in test_functions:
            continue  # emitted at its call
        if isinstance(stmt, ast.Expr) and _called_test_function(stmt, test_functions):
            fn = test_functions[stmt.value.func.id]
            child.append(_inline_for_child(fn, scope, add_assert, where) + "\n")
            child.append(_segment(code, stmt) + "\n")
            continue
        if isinstance(stmt, ast.Assert):
            child.append(add_assert(stmt, scope, ""))
            continue
        if any(isinstance(node, ast.Assert) for node in ast.walk(stmt)):
            raise SplitError(f"{where}: line {stmt.lineno}: an assert inside a `{type(stmt).__name__.lower()}` "
                             "block is not supported (only at the top level of a test case or of a test function)")
        free = _free_names(stmt)
        bound = _bound_names(stmt)
        if isinstance(stmt, ast.FunctionDef) and _is_comparing_helper(stmt, state):
            source = _segment(code, stmt)
            child.append(source + "\n")
            parent.append(ParentStatement(source))
            state.helpers.add(stmt.name)
            state.parent_names.discard(stmt.name)
            continue
        uses_parent = free & state.parent_names
        if uses_parent:
            outside = free - state.parent_names - _visible(state)
            if not isinstance(stmt, (ast.Assign, ast.AnnAssign)) or outside:
                raise SplitError(
                    f"{where}: line {stmt.lineno}: `{_short(ast.unparse(stmt))}` uses "
                    f"{', '.join(sorted(uses_parent))} (the parent's) together with "
                    f"{', '.join(sorted(outside)) or 'a construct'} the parent cannot evaluate")
            parent.append(ParentStatement(_segment(code, stmt)))
            state.parent_names |= bound
            state.helpers -= bound
            continue
        child.append(_segment(code, stmt) + "\n")
        state.parent_names -= bound
        state.helpers -= bound
    child.append(f"{RUNTIME}.end({test})\n")
    return TestPlan(number=test, child="".join(child), parent=tuple(parent))


def _visible(state: _StepState) -> frozenset[str]:
    return frozenset(PARENT_MODULES) | BUILTIN_NAMES | frozenset(CMP_HELPERS) | frozenset(state.helpers)


def _segment(code: str, node: ast.stmt) -> str:
    if getattr(node, "decorator_list", None):
        return ast.unparse(node)
    text = ast.get_source_segment(code, node)
    return text if text is not None else ast.unparse(node)


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---- test functions (def test_case_N(): ... assert ...; test_case_N()) -------------------------


def _contains_assert(fn: ast.FunctionDef) -> bool:
    return any(isinstance(node, ast.Assert) for node in ast.walk(fn))


def _called_test_function(stmt: ast.Expr, test_functions: dict) -> bool:
    call = stmt.value
    return (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in test_functions
            and not call.args and not call.keywords)


def _test_functions(tree: ast.Module, where: str) -> dict[str, ast.FunctionDef]:
    found = {}
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and _contains_assert(stmt):
            name = stmt.name
            if isinstance(stmt, ast.AsyncFunctionDef) or stmt.decorator_list or _function_locals_args(stmt):
                raise SplitError(f"{where}: line {stmt.lineno}: test function {name} must be a plain "
                                 "function without arguments or decorators")
            for node in stmt.body:
                if any(isinstance(inner, ast.Assert) for inner in ast.walk(node)) and not isinstance(node, ast.Assert):
                    raise SplitError(f"{where}: line {node.lineno}: an assert inside a block of test "
                                     f"function {name} is not supported (only at the top of its body)")
            for node in ast.walk(stmt):
                if isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom, ast.Global, ast.Nonlocal)):
                    raise SplitError(f"{where}: line {node.lineno}: test function {name} uses "
                                     f"`{type(node).__name__.lower()}`, which cannot be inlined")
            found[name] = stmt
    for name, fn in found.items():
        calls = [s for s in tree.body if isinstance(s, ast.Expr) and _called_test_function(s, {name: fn})]
        uses = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == name]
        if len(calls) != 1 or len(uses) != 1 or calls[0].lineno < fn.lineno:
            raise SplitError(f"{where}: test function {name} must be called exactly once, as `{name}()`, "
                             "after its definition")
    return found


def _function_locals_args(fn: ast.FunctionDef) -> bool:
    args = fn.args
    return bool(args.posonlyargs or args.args or args.kwonlyargs or args.vararg or args.kwarg)


def _inline_for_child(fn: ast.FunctionDef, scope: _Scope, add_assert, where: str) -> str:
    """The child's version of a test function: each assert replaced by its operand block."""
    local = _function_locals(fn)
    if TARGET in _free_names(fn) or _free_names(fn) & scope.parent_names:
        raise SplitError(f"{where}: test function {fn.name} uses the parent's names "
                         f"({', '.join(sorted(_free_names(fn) & scope.parent_names))})")
    inner = _Scope(frozenset(), scope.visible - local, scope.helpers - local, shadowed=frozenset(local))
    body: list[ast.stmt] = []
    for stmt in fn.body:
        if isinstance(stmt, ast.Assert):
            block = add_assert(stmt, inner, "")
            body.extend(ast.parse(block).body)
        else:
            body.append(stmt)
    new_fn = copy.copy(fn)
    new_fn.body = body
    return ast.unparse(ast.fix_missing_locations(new_fn))


# ---- comparing helpers -----------------------------------------------------------------------


def _is_comparing_helper(fn: ast.FunctionDef, state: _StepState) -> bool:
    """A function of the test text that compares and needs only what the parent has."""
    if fn.decorator_list:
        return False
    for node in ast.walk(fn):
        if isinstance(node, (ast.Global, ast.Nonlocal, ast.Import, ast.ImportFrom, ast.Yield, ast.YieldFrom,
                             ast.ClassDef, ast.Await)):
            return False
        if isinstance(node, ast.Name) and node.id == TARGET:
            return False
    allowed = _visible(state) | {fn.name}
    if not _free_names(fn) <= allowed:
        return False
    params = _function_locals(fn) - _bound_names_in_body(fn)
    for node in ast.walk(fn):
        # a method call on an argument that is not a data method may call the model's objects
        # (30.3's wf.value): such a helper runs in the child
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and isinstance(node.func.value, ast.Name) and node.func.value.id in params \
                and node.func.attr not in DATA_METHODS:
            return False
    helpers = state.helpers | {fn.name}
    for node in ast.walk(fn):
        if isinstance(node, ast.Compare):
            return True
        if isinstance(node, ast.Call):
            name = _canonical(_dotted(node.func))
            if name in COMPARISON_CALLS or name in helpers:
                return True
    return False


def _bound_names_in_body(fn: ast.FunctionDef) -> set[str]:
    names: set[str] = set()
    for stmt in fn.body:
        names |= _bound_names(stmt)
    return names


# ---- assertions ------------------------------------------------------------------------------


class _AssertSplitter:
    def __init__(self, scope: _Scope, where: str):
        self.scope = scope
        self.where = where
        self.leaves: list[ast.expr] = []

    # which nodes the parent evaluates as comparisons
    def call_name(self, node: ast.Call) -> str | None:
        name = _dotted(node.func)
        if name is None:
            return None
        head = name.split(".")[0]
        if head in self.scope.shadowed:  # a local of a test function that shadows np/a helper
            return None
        return _canonical(name)

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
            if (isinstance(node.func, ast.Attribute) and node.func.attr in WRAPPER_METHODS
                    and not node.args and self.is_comparison(node.func.value, comp_scope)):
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
            return ast.Compare(left=self.transform(node.left, comp_scope), ops=node.ops,
                               comparators=[self.transform(c, comp_scope) for c in node.comparators])
        if isinstance(node, ast.BoolOp):
            return ast.BoolOp(op=node.op, values=[self.transform(v, comp_scope) for v in node.values])
        if isinstance(node, ast.UnaryOp):
            return ast.UnaryOp(op=node.op, operand=self.transform(node.operand, comp_scope))
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute) and self.call_name(node) not in COMPARISON_CALLS | WRAPPER_CALLS \
                    and self.call_name(node) not in self.scope.helpers:
                func = ast.Attribute(value=self.transform(node.func.value, comp_scope), attr=node.func.attr,
                                     ctx=ast.Load())
            else:
                func = node.func
            args = [ast.Starred(value=self.transform(a.value, comp_scope), ctx=ast.Load())
                    if isinstance(a, ast.Starred) else self.transform(a, comp_scope) for a in node.args]
            keywords = [ast.keyword(arg=k.arg, value=self.transform(k.value, comp_scope)) for k in node.keywords]
            return ast.Call(func=func, args=args, keywords=keywords)
        if isinstance(node, (ast.Tuple, ast.List)):
            return type(node)(elts=[self.transform(e, comp_scope) for e in node.elts], ctx=ast.Load())
        # a comprehension whose element compares: iterables from the child, the loop in the parent
        generators = []
        inner = comp_scope
        for number, gen in enumerate(node.generators):
            if gen.is_async:
                raise SplitError(f"{self.where}: async comprehensions are not supported")
            iterable = self.transform(gen.iter, comp_scope if number == 0 else inner)
            inner = inner | frozenset(_target_names(gen.target))
            ifs = [self.transform(cond, inner) for cond in gen.ifs]
            generators.append(ast.comprehension(target=gen.target, iter=iterable, ifs=ifs, is_async=0))
        return type(node)(elt=self.transform(node.elt, inner), generators=generators)

    def operand(self, node: ast.expr, comp_scope: frozenset[str]) -> ast.expr:
        """An operand: the child's value, or, when it needs the parent's names, evaluated in the parent."""
        for inner in ast.walk(node):
            if isinstance(inner, (ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)):
                raise SplitError(f"{self.where}: `{_short(ast.unparse(node))}` uses "
                                 f"{type(inner).__name__}, which cannot be split")
        free = _free_names(node)
        parent_refs = free & (self.scope.parent_names | comp_scope)
        if not parent_refs:
            return node if _is_constant(node) else self.leaf(node)
        return self.mixed(node, comp_scope)

    def mixed(self, node: ast.expr, comp_scope: frozenset[str]) -> ast.expr:
        """An operand that needs the parent's names: the parent evaluates it, the child sends its
        largest parts that need none (``target[idx]``: ``idx`` from the child)."""
        free = _free_names(node)
        if not free & (self.scope.parent_names | comp_scope):
            if _is_constant(node) or (isinstance(node, (ast.Name, ast.Attribute))
                                      and free <= self.scope.visible and _dotted(node) is not None):
                return node
            if isinstance(node, ast.Name) or not free <= self.scope.visible:
                return self.leaf(node)
            return node  # e.g. np.pi: the parent's own modules
        if isinstance(node, ast.Call):
            func_free = _free_names(node.func)
            if not func_free & (self.scope.parent_names | comp_scope) and not func_free <= self.scope.visible:
                raise SplitError(f"{self.where}: `{_short(ast.unparse(node))}` calls "
                                 f"{_short(ast.unparse(node.func))} (the child's) on the parent's values")
        if isinstance(node, (ast.Lambda, ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp)):
            raise SplitError(f"{self.where}: `{_short(ast.unparse(node))}` mixes the parent's names "
                             "and a nested scope, which cannot be split")
        for name, value in ast.iter_fields(node):
            if isinstance(value, ast.expr):
                setattr(node, name, self.mixed(value, comp_scope))
            elif isinstance(value, list):
                setattr(node, name, [self.mixed(v, comp_scope) if isinstance(v, ast.expr) else
                                     self._mixed_keyword(v, comp_scope) for v in value])
        return node

    def _mixed_keyword(self, value, comp_scope):
        if isinstance(value, ast.keyword):
            value.value = self.mixed(value.value, comp_scope)
        return value

    def leaf(self, node: ast.expr) -> ast.expr:
        self.leaves.append(node)
        return ast.Call(func=ast.Name(id=LEAF_FN, ctx=ast.Load()),
                        args=[ast.Constant(value=len(self.leaves))], keywords=[])


def _is_constant(node: ast.AST) -> bool:
    return all(isinstance(inner, _CONSTANT_NODES) for inner in ast.walk(node))


def _split_assert(node: ast.Assert, test: int, number: int, scope: _Scope, where: str,
                  indent: str) -> tuple[AssertPlan, str]:
    splitter = _AssertSplitter(scope, f"{where} line {node.lineno}")
    expression = splitter.transform(copy.deepcopy(node.test))
    expression = ast.unparse(ast.fix_missing_locations(expression))
    leaves = tuple(Leaf(k, ast.unparse(leaf)) for k, leaf in enumerate(splitter.leaves, 1))
    message = node.msg.value if isinstance(node.msg, ast.Constant) and isinstance(node.msg.value, str) else None
    plan = AssertPlan(number=number, source=ast.unparse(node), expression=expression, leaves=leaves,
                      message=message)
    return plan, _operand_block(test, number, leaves, indent)


def _operand_block(test: int, number: int, leaves: tuple[Leaf, ...], indent: str) -> str:
    lines = []
    for leaf in leaves:
        ids = f"{test}, {number}, {leaf.number}"
        lines += [f"try:", f"    {LEAF_VALUE} = ({leaf.source})",
                  f"except Exception as {LEAF_EXC}:", f"    {RUNTIME}.raised({ids}, {LEAF_EXC})",
                  f"else:", f"    {RUNTIME}.value({ids}, {LEAF_VALUE})"]
    lines.append(f"{RUNTIME}.reached({test}, {number})")
    return "".join(f"{indent}{line}\n" for line in lines)


# ----------------------------------------------------------------------------------------------
# the child's runtime


CHILD_RUNTIME = '''\
def _agentbench_runtime(codec_path, channel, max_bytes, control_bytes):
    import importlib.util
    spec = importlib.util.spec_from_file_location("_agentbench_codec", codec_path)
    codec = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(codec)
    writer = codec.FrameWriter(channel, max_bytes=max_bytes)

    def control(frame):
        writer.write_frame(codec.encode(frame, max_bytes=control_bytes))

    def describe(exc):
        try:
            text = type(exc).__name__ + ": " + str(exc)
        except Exception:
            text = type(exc).__name__
        return text[:{message_chars}]

    class Runtime:
        def test(self, t):
            control(("t", t))

        def value(self, t, a, k, value):
            try:
                writer.send(("v", t, a, k, value))
            except codec.CodecError as exc:
                control(("x", t, a, k, str(exc)[:{message_chars}]))
            except OSError:
                raise
            except Exception as exc:  # a value whose own methods fail while it is encoded
                control(("x", t, a, k, "cannot encode it: " + describe(exc)))

        def raised(self, t, a, k, exc):
            control(("e", t, a, k, describe(exc)))

        def reached(self, t, a):
            control(("a", t, a))

        def end(self, t):
            control(("z", t))

    return Runtime()


_agentbench_rt = _agentbench_runtime({codec_path!r}, {channel!r}, {max_bytes!r}, {control_bytes!r})
del _agentbench_runtime
'''


def child_runtime(channel: int | str, *, max_bytes: int = codec.DEFAULT_MAX_BYTES, codec_path: str | None = None) -> str:
    """Source that defines ``_agentbench_rt`` in the child: it loads the codec by file path and writes
    frames to ``channel`` (an inherited file descriptor number, or a file path). Put it before the
    model's code; the tests' child code (:meth:`StepPlan.child_source`) goes after it."""
    return CHILD_RUNTIME.format(codec_path=codec_path or codec.__file__, channel=channel, max_bytes=int(max_bytes),
                                control_bytes=CONTROL_FRAME_BYTES, message_chars=MESSAGE_CHARS)


# The child needs what upstream's script gives the tests: `scicode.compare.cmp` (test text imports it,
# and child-side helpers may call it) and scipy's removed `simps` (problems 2 and 28).
CHILD_PREAMBLE = '''\
import sys as _agentbench_sys, types as _agentbench_types, importlib.util as _agentbench_util


def _agentbench_load(name, path):
    spec = _agentbench_util.spec_from_file_location(name, path)
    module = _agentbench_util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_agentbench_cmp = _agentbench_load("scicode.compare.cmp", {compare_path!r})
for _agentbench_name in ("scicode", "scicode.compare"):
    _agentbench_sys.modules.setdefault(_agentbench_name, _agentbench_types.ModuleType(_agentbench_name))
_agentbench_sys.modules["scicode.compare.cmp"] = _agentbench_cmp
_agentbench_sys.modules["scicode"].compare = _agentbench_sys.modules["scicode.compare"]
_agentbench_sys.modules["scicode.compare"].cmp = _agentbench_cmp
try:
    import scipy.integrate as _agentbench_integrate
except ImportError:
    pass
else:
    if not hasattr(_agentbench_integrate, "simps"):
        def _agentbench_simps(y, x=None, dx=1.0, axis=-1, even=None):
            return _agentbench_integrate.simpson(y, x=x, dx=dx, axis=axis)
        _agentbench_integrate.simps = _agentbench_simps
del _agentbench_load, _agentbench_name, _agentbench_cmp
'''


def section(title: str, body: str) -> str:
    return f"\n# ---- {title} ----\n{body.rstrip()}\n"


def build_child_script(plan: StepPlan, *, dependencies: str, previous_code: Sequence[str], code: str,
                       channel: int | str, max_bytes: int = codec.DEFAULT_MAX_BYTES, prelude: str = "",
                       epilogue: str = "") -> str:
    """The whole child script of a step: shims, the operand runtime, ``prelude`` (e.g. a tamper guard),
    the problem's dependencies, the earlier steps' code, the step's code, every test's child code, then
    ``epilogue``. No target, no comparison."""
    parts = [CHILD_PREAMBLE.format(compare_path=COMPARE_PATH),
             child_runtime(channel, max_bytes=max_bytes), prelude,
             section("dependencies", dependencies)]
    for number, earlier in enumerate(previous_code, 1):
        parts.append(section(f"earlier step {number}", earlier))
    parts.append(section(f"step {plan.step}", code))
    parts.append(plan.child_source())
    if epilogue:
        parts.append("\n" + epilogue)
    return "".join(parts)


# ----------------------------------------------------------------------------------------------
# the parent's evaluation


@dataclass(frozen=True)
class Failure:
    test: int  # 1-based
    kind: str  # see FAILURE_KINDS
    message: str  # ready for a record; ends with "(test N of M)"


FAILURE_KINDS = {
    "assertion": "an assertion is false in the parent",
    "operand_error": "evaluating an operand the parent needs raised in the child",
    "unencodable": "an operand the parent needs could not be encoded",
    "error": "evaluating the assertion (or a target statement) raised in the parent",
    "stopped": "the child stopped (crash, exit, limit) before the test's end",
    "protocol": "the child's operand data is malformed",
}


@dataclass(frozen=True)
class StepOutcome:
    passed: bool
    tests: int  # tests in the step
    tests_passed: int  # tests passed in a row from the first
    failure: Failure | None = None
    stream_error: str | None = None  # the stream ended inside a frame or was over its cap

    @property
    def message(self) -> str:
        return self.failure.message if self.failure else ""


class _OperandError(Exception):
    def __init__(self, kind: str, text: str, leaf: Leaf):
        super().__init__(text)
        self.kind = kind
        self.text = text
        self.leaf = leaf


@dataclass
class _Received:
    started: set = field(default_factory=set)
    operands: dict = field(default_factory=dict)  # (t, a, k) -> (tag, payload)
    reached: set = field(default_factory=set)
    ended: set = field(default_factory=set)


def parent_namespace() -> dict[str, Any]:
    """A fresh namespace for a step's parent side: genuine numpy, math, cmath and the cmp helpers."""
    import numpy  # why: only the parent's evaluation needs numpy; building plans and scripts does not

    from . import compare  # why: it imports numpy at its top, as above

    ns: dict[str, Any] = {"__builtins__": builtins, "__name__": "agentbench_parent",
                          "np": numpy, "numpy": numpy, "math": math, "cmath": cmath}
    for name in CMP_HELPERS:
        ns[name] = getattr(compare, name)
    return ns


def read_stream(stream: bytes, plan: StepPlan, *, max_bytes: int = codec.DEFAULT_MAX_BYTES):
    """Decode and check the child's frames: ``(received, stream_error, protocol_error)``."""
    frames, error = codec.decode_stream(stream, max_bytes=plan.stream_cap(max_bytes))
    stream_error = str(error) if error else None
    received = _Received()
    shape = {test.number: {a.number: len(a.leaves) for a in test.asserts} for test in plan.tests}

    def bad(frame, why):
        return received, stream_error, f"{why}: {_short(repr(frame), 120)}"

    for frame in frames:
        if type(frame) is not tuple or not frame or type(frame[0]) is not str:
            return bad(frame, "a frame is not a tagged tuple")
        tag, ids = frame[0], frame[1:]
        arity = {"t": 1, "z": 1, "a": 2, "v": 4, "e": 4, "x": 4}.get(tag)
        if arity is None or len(ids) != arity:
            return bad(frame, "unknown frame")
        numbers = ids[:3] if tag in "vex" else ids
        if any(type(n) is not int for n in numbers):
            return bad(frame, "frame ids must be ints")
        test = numbers[0]
        if test not in shape:
            return bad(frame, "no such test")
        if tag in "vexa" and numbers[1] not in shape[test]:
            return bad(frame, "no such assertion")
        if tag in "vex":
            key = tuple(numbers)
            if not 1 <= key[2] <= shape[test][key[1]]:
                return bad(frame, "no such operand")
            if key in received.operands:
                return bad(frame, "an operand was sent twice")
            if tag != "v" and type(ids[3]) is not str:
                return bad(frame, "an error frame needs a message")
            received.operands[key] = (tag, ids[3])
        else:
            {"t": received.started, "a": received.reached, "z": received.ended}[tag].add(
                tuple(numbers) if tag == "a" else test)
    return received, stream_error, None


def evaluate(plan: StepPlan, stream: bytes, targets: Sequence, *,
             max_bytes: int = codec.DEFAULT_MAX_BYTES) -> StepOutcome:
    """Evaluate every test's assertions in this (trusted) process.

    ``stream`` is everything the child wrote to its channel, ``targets`` one value per test (from
    the h5). Tests run in order in one namespace; the first failing test ends the evaluation, as
    upstream's script stops at the first failing assert.
    """
    import numpy  # why: only the parent's evaluation needs numpy; building plans and scripts does not

    n = len(plan.tests)
    if len(targets) < n:
        raise ValueError(f"step {plan.step}: {len(targets)} targets for {n} tests")
    received, stream_error, protocol = read_stream(stream, plan, max_bytes=max_bytes)
    if protocol is not None:
        return StepOutcome(False, n, 0, Failure(1, "protocol", f"the scoring process sent malformed operand "
                                                               f"data ({protocol})"), stream_error)
    ns = parent_namespace()
    for test in plan.tests:
        where = f"(test {test.number} of {n})"
        failure = None
        ns[TARGET] = targets[test.number - 1]
        with warnings.catch_warnings(), numpy.errstate(divide="warn", over="warn", under="ignore", invalid="warn"):
            warnings.simplefilter("ignore")
            if test.number not in received.started:
                failure = Failure(test.number, "stopped", f"the scoring process stopped before test {test.number} "
                                                          f"{where}")
            for part in test.parent if failure is None else ():
                failure = _run_part(part, test, received, ns, where)
                if failure is not None:
                    break
            if failure is None and test.number not in received.ended:
                failure = Failure(test.number, "stopped", f"the scoring process stopped after the last assertion "
                                                          f"of test {test.number} {where}")
        if failure is not None:
            return StepOutcome(False, n, test.number - 1, failure, stream_error)
    return StepOutcome(True, n, n, None, stream_error)


def _run_part(part, test: TestPlan, received: _Received, ns: dict, where: str) -> Failure | None:
    t = test.number
    if isinstance(part, ParentStatement):
        try:
            exec(compile(part.source, f"<test {t}>", "exec"), ns)
        except Exception as exc:
            return Failure(t, "error", f"{_exception_text(exc)} {where}")
        return None
    if (t, part.number) not in received.reached:
        return Failure(t, "stopped", f"the scoring process stopped before assertion {part.number} of test {t} {where}")

    def leaf(k: int):
        tag, payload = received.operands.get((t, part.number, k), (None, None))
        spec = part.leaves[k - 1]
        if tag == "v":
            return payload
        if tag == "e":
            raise _OperandError("operand_error", payload, spec)
        if tag == "x":
            raise _OperandError("unencodable", payload, spec)
        raise _OperandError("protocol", "the scoring process reached the assertion without sending this operand", spec)

    ns[LEAF_FN] = leaf
    try:
        verdict = eval(compile(part.expression, f"<test {t} assertion {part.number}>", "eval"), ns)
        holds = bool(verdict)
    except _OperandError as exc:
        text = _short(exc.leaf.source, 200)
        if exc.kind == "operand_error":
            return Failure(t, exc.kind, f"{exc.text} (evaluating `{text}`) {where}")
        if exc.kind == "unencodable":
            return Failure(t, exc.kind, f"cannot compare `{text}`: {exc.text} {where}")
        return Failure(t, exc.kind, f"the scoring process sent malformed operand data ({exc.text}: `{text}`) {where}")
    except Exception as exc:
        return Failure(t, "error", f"{_exception_text(exc)} {where}")
    finally:
        ns.pop(LEAF_FN, None)
    if not holds:
        detail = f": {part.message}" if part.message else ""
        return Failure(t, "assertion", f"AssertionError{detail} in `{_short(part.source, 200)}` {where}")
    return None


def _exception_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return _short(text, 300)


__all__ = ["SplitError", "Leaf", "AssertPlan", "ParentStatement", "TestPlan", "StepPlan", "StepOutcome", "Failure",
           "FAILURE_KINDS", "split_step", "child_runtime", "build_child_script", "evaluate", "read_stream",
           "parent_namespace"]
