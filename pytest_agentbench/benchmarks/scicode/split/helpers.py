"""The functions a test case defines, classified: a test function holding ``assert`` statements that is
called once (inlined for the parent), a helper that only compares (runs in the parent), one the parent can
run on the child's values, and one that calls into the model's objects (traced in the child, replayed in
the parent)."""

from __future__ import annotations

import ast

from ..plan import (
    CMP_HELPERS,
    TARGET,
)
from . import taint
from .names import (
    BUILTIN_NAMES,
    COMPARISON_CALLS,
    DATA_METHODS,
    SplitError,
    StepState,
    free_names,
)
from .taint import PARENT_MODULES, bound_names, canonical, dotted


def _contains_assert(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(isinstance(node, ast.Assert) for node in ast.walk(fn))


def called_test_function(stmt: ast.Expr, test_functions: dict) -> bool:
    call = stmt.value
    return (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Name)
        and call.func.id in test_functions
        and not call.args
        and not call.keywords
    )


def find_test_functions(tree: ast.Module, where: str) -> dict[str, ast.FunctionDef]:
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
        calls = [s for s in tree.body if isinstance(s, ast.Expr) and called_test_function(s, {name: fn})]
        uses = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == name]
        if len(calls) != 1 or len(uses) != 1 or calls[0].lineno < fn.lineno:
            raise SplitError(
                f"{where}: test function {name} must be called exactly once, as `{name}()`, after its definition"
            )
    return found


def _function_locals_args(fn: ast.FunctionDef) -> bool:
    args = fn.args
    return bool(args.posonlyargs or args.args or args.kwonlyargs or args.vararg or args.kwarg)


def _visible(state: StepState) -> frozenset[str]:
    return frozenset(PARENT_MODULES) | BUILTIN_NAMES | frozenset(CMP_HELPERS) | frozenset(state.helpers)


def is_comparing_helper(fn: ast.FunctionDef, state: StepState) -> bool:
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
    if not free_names(fn) <= allowed:
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


def is_runnable_helper(fn: ast.FunctionDef, state: StepState) -> bool:
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
    if not free_names(fn) <= allowed or not all(state.trust.name(name) for name in free_names(fn) - {fn.name}):
        return False
    return not _calls_methods_of_arguments(fn)


def is_traced_helper(fn: ast.FunctionDef) -> bool:
    """A function of the test text that calls into the model's objects (30.3's ``test_gradient(configs, wf,
    delta)`` calls ``wf.value``; 72.1's ``test_neighbor()`` calls ``neighbor_list``) and that the parent can
    replay (:func:`..verdict.replay`): plain Python with constant defaults, no handler that could hide a failed call,
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
