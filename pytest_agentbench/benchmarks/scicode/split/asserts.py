"""One assertion, or one statement that applies the test text's code to the child's values, split in two:
the parent's expression, whose model-dependent operands are leaves (``_agentbench_leaf(N)``), and the child's
block that evaluates each leaf and sends its value through the operand runtime."""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable
from typing import Any, cast

from ..plan import (
    LEAF_EXC,
    LEAF_FN,
    LEAF_VALUE,
    REPLAY_FN,
    RUNTIME,
    AssertPlan,
    Leaf,
    MixedStatement,
    short,
)
from . import taint
from .names import (
    CALLBACK_CALLS,
    COMPARISON_CALLS,
    DATA_ATTRIBUTES,
    PARENT_BUILTIN_CALLS,
    WRAPPER_CALLS,
    WRAPPER_METHODS,
    Scope,
    SplitError,
    free_names,
)
from .taint import PARENT_MODULES, bound_names, canonical, dotted, target_names


class AssertSplitter:
    def __init__(self, scope: Scope, where: str, exposed: frozenset[str] = frozenset()):
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
        return not (free_names(node) & self.exposed) and self.scope.trust.expression(node)

    def mixed(self, node: ast.expr, comp_scope: frozenset[str]) -> ast.expr:
        """The parent evaluates ``node``; its largest parts that depend on the model's code and need none
        of the parent's names come from the child (``target[idx]``: ``idx`` from the child)."""
        free = free_names(node)
        if not free & (self.scope.parent_names | comp_scope):
            if self.parent_computes(node):
                return node
            if not self.parent_applies(node):
                return self.traced(node) or self.leaf(node)
        if isinstance(node, ast.Call):
            func_free = free_names(node.func)
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
        test text it runs (:func:`.helpers.is_runnable_helper`). Only the model's calls (and what reads the model's
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
        """A call of a traced helper (:func:`.helpers.is_traced_helper`) on operands the child has, or None. The child
        runs the helper with the model's objects wrapped so it records every call into them (arguments and
        results); the parent runs the helper's own logic itself on the operands it computes, on the decoded
        record's values for the others, and answers each call into the model's objects from the record,
        after checking it is the call the record says (:func:`..verdict.replay`)."""
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


def split_assert(
    node: ast.Assert, test: int, number: int, scope: Scope, where: str
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
    scope: Scope, where: str, split: Callable[[AssertSplitter], Any]
) -> tuple[AssertSplitter, Any, frozenset[str]] | None:
    """Split again until what the child's operands read is all exposed to the model's code (reading a name
    exposes what may share its objects, which may move more into the child); then mark it exposed.
    ``split(splitter)`` gives the transformed node, or None to give up. Returns the splitter, that node and
    the names passed to model calls whose objects the parent watches."""
    exposed: frozenset[str] = frozenset()
    while True:
        splitter = AssertSplitter(scope, where, exposed)
        result = split(splitter)
        if result is None:
            return None
        passed = set().union(*(scope.trust.passed(leaf) for leaf in splitter.leaves))
        read = set().union(*(free_names(leaf) - scope.trust.passed(leaf) for leaf in splitter.leaves))
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


def split_mixed(
    stmt: ast.Assign, source: str, test: int, number: int, scope: Scope, where: str
) -> tuple[MixedStatement, str, frozenset[str]] | None:
    """``name = expression`` that applies the test's own code to the child's values (49.4's ``Etot1 =
    Nbody_Etot(uout, mass)``): the parent runs it on the decoded operands, the child computes only the
    operands. None when the statement is the parent's anyway, the child's alone (its value is one operand,
    ``uout = Nbody(...)``), or has a shape the parent does not run this way."""
    if not all(
        isinstance(n, (ast.Name, ast.Tuple, ast.List, ast.Store)) for target in stmt.targets for n in ast.walk(target)
    ):
        return None
    free = free_names(stmt)
    if (
        free & scope.parent_names
        or scope.trust.statement(stmt)
        or taint.forbidden(stmt)
        or any(isinstance(n, _UNMIXED) for n in ast.walk(stmt.value))
    ):
        return None

    def applied(splitter: AssertSplitter) -> ast.expr | None:
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
