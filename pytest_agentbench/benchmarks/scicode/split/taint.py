"""Which values of a test case the trusted parent computes itself, from the test text alone.

An operand whose value does not depend on the model's code (``expected = np.array([0.0, -(g / L) *
np.sin(0.1)])``) must not come from the child: a child that sends it could send any value, for
example one equal to its own wrong output. :class:`Trust` follows a step's test text statement by
statement and says which names hold *model-independent* values: values the parent can recompute by
running the same statements with its own genuine numpy, math and builtins.

A name is **model-dependent** (the child's) when it

* is not bound by the test text at all (the step's function, earlier steps' functions, whatever the
  dependencies or the model's code define or import);
* is bound by a statement that reads a model-dependent name, calls anything the parent does not
  hold, or does something a second run cannot reproduce (``np.random``, uninitialised memory, files,
  set iteration order, ``id``/``hash``, ...);
* was **exposed to model-dependent code** by the test text itself (read by a statement or an operand
  that runs the child's code other than as an argument of a model call: ``x[0] = f()``,
  ``np.copyto(x, f())``, ``[f(), x]``, a call of a function of the test text or of a method of an
  object the test text bound): the test's own code may have stored the child's values in it, so it
  comes from the child from then on. The same holds for every name that may share the object
  (``y = x``, ``y = x.T``: an *alias class*). Values that cannot change in place (numbers, strings,
  tuples of those) are never exposed this way, nor is code of the test text that holds no test data
  (modules, 51.4's ``total_energy``: :meth:`Trust.pure`).

A name only **passed to a model call** (an argument of a call whose callee the test text does not bind:
the step's function, earlier steps' functions, the dependencies' ``f(state)``) stays model-independent
(:meth:`Trust.passed`): an expression of the test text reading it is the test author's expectation, a
function of the inputs as written, and the parent computes it from its own pristine copy. The model's
call contributes its return value only; a change it makes in place to its arguments is not seen by the
parent (upstream's test would see it: the child notes such a change, see ``split``).

Everything else, including functions the test text defines whose globals are model-independent when
they are called, is model-independent. When unsure, the analysis says model-dependent.

The analysis assumes the model's code does not reach into the test's globals by name (genuine code
does not; hostile code gains nothing, since the parent uses its own values).
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass
from typing import overload

# names the parent's namespace provides: genuine modules
PARENT_MODULES = {"np": "numpy", "numpy": "numpy", "math": "math", "cmath": "cmath"}
# modules the test text may import in the parent too (deterministic, no state shared with the model's code)
IMPORTABLE_MODULES = frozenset({"numpy", "math", "cmath", "itertools", "functools", "operator", "fractions"})
# dotted prefixes (canonical) whose results a second run cannot reproduce: random state shared with the
# model's code, uninitialised memory, the clock, files of the child's folder
IRREPRODUCIBLE = (
    "numpy.random",
    "numpy.empty",
    "numpy.empty_like",
    "numpy.datetime64",
    "numpy.load",
    "numpy.loadtxt",
    "numpy.genfromtxt",
    "numpy.fromfile",
    "numpy.memmap",
    "numpy.save",
    "numpy.savez",
    "numpy.savetxt",
    "numpy.fromregex",
    "numpy.DataSource",
    "numpy.ctypeslib",
    "numpy.lib",
)
# attributes a model-independent expression never uses (writing files; reaching code objects and frames)
FORBIDDEN_ATTRIBUTES = frozenset({"tofile", "dump", "dumps"})
# builtins whose results are reproducible and that run no code but their arguments' (set/frozenset: their
# iteration order of strings depends on the interpreter's hash seed)
SAFE_BUILTINS = frozenset(
    {
        "abs",
        "all",
        "any",
        "ascii",
        "bin",
        "bool",
        "bytes",
        "callable",
        "chr",
        "complex",
        "dict",
        "divmod",
        "enumerate",
        "filter",
        "float",
        "format",
        "hasattr",
        "hex",
        "int",
        "isinstance",
        "issubclass",
        "iter",
        "len",
        "list",
        "map",
        "max",
        "min",
        "next",
        "oct",
        "ord",
        "pow",
        "print",
        "range",
        "repr",
        "reversed",
        "round",
        "slice",
        "sorted",
        "str",
        "sum",
        "tuple",
        "type",
        "zip",
        "True",
        "False",
        "None",
        "Ellipsis",
        "NotImplemented",
        *(
            name
            for name, value in vars(builtins).items()
            if isinstance(value, type) and issubclass(value, BaseException)
        ),
    }
)
# calls whose result is a number or a string when their arguments are (values that cannot change in place)
NUMBER_CALLS = frozenset(
    {
        "int",
        "float",
        "complex",
        "abs",
        "round",
        "len",
        "str",
        "bool",
        "pow",
        "min",
        "max",
        "sum",
        "divmod",
        "ord",
        "chr",
        "repr",
        "hex",
        "oct",
        "bin",
        "format",
    }
)
# node types a model-independent statement never holds (they bind outside their scope, reach the
# interpreter, or iterate in hash order)
_FORBIDDEN_NODES = (
    ast.Set,
    ast.SetComp,
    ast.Global,
    ast.Nonlocal,
    ast.ClassDef,
    ast.Yield,
    ast.YieldFrom,
    ast.Await,
    ast.AsyncFunctionDef,
    ast.AsyncFor,
    ast.AsyncWith,
    ast.Import,
    ast.ImportFrom,
    ast.NamedExpr,
    ast.Assert,
)


# ---- names and scopes ----------------------------------------------------------------------------


def dotted(node: ast.AST) -> str | None:
    """``np.linalg.norm`` for the expression ``np.linalg.norm``; None for anything but a dotted name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


@overload
def canonical(name: str) -> str: ...
@overload
def canonical(name: None) -> None: ...
def canonical(name: str | None) -> str | None:
    """A dotted name with the parent's module aliases resolved (``np.isclose`` -> ``numpy.isclose``)."""
    if name is None:
        return None
    head, _, rest = name.partition(".")
    if head in PARENT_MODULES:
        return PARENT_MODULES[head] + ("." + rest if rest else "")
    return name


def target_names(node: ast.AST) -> set[str]:
    """Names bound by an assignment target."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}


def function_locals(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    args = fn.args
    names = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
    names |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    if isinstance(fn, ast.Lambda):
        return names
    declared_global: set[str] = set()
    for stmt in fn.body:
        names |= bound_names(stmt)
        for node in walk_scope(stmt):
            if isinstance(node, (ast.Global, ast.Nonlocal)):
                declared_global.update(node.names)
    return names - declared_global


def walk_scope(node: ast.AST):
    """ast.walk that does not enter nested function, lambda, class or comprehension scopes."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        for child in ast.iter_child_nodes(current):
            if isinstance(
                child,
                (
                    ast.FunctionDef,
                    ast.AsyncFunctionDef,
                    ast.Lambda,
                    ast.ClassDef,
                    ast.ListComp,
                    ast.SetComp,
                    ast.DictComp,
                    ast.GeneratorExp,
                ),
            ):
                yield child  # the node itself (its name binds here), not its body
                continue
            stack.append(child)


def bound_names(stmt: ast.AST) -> set[str]:
    """Names a statement binds in the scope it runs in."""
    names: set[str] = set()
    for node in walk_scope(stmt):
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


class ScopeError(Exception):
    """A construct whose names cannot be resolved statically (a class body)."""


def free_names(node: ast.AST, bound: frozenset[str] = frozenset()) -> set[str]:
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
            inner = local | function_locals(current)
            body = current.body if isinstance(current.body, list) else [current.body]
            for stmt in body:
                visit(stmt, inner)
            return
        if isinstance(current, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            inner = local
            for number, gen in enumerate(current.generators):
                visit(gen.iter, local if number == 0 else inner)
                inner = inner | target_names(gen.target)
                for cond in gen.ifs:
                    visit(cond, inner)
            if isinstance(current, ast.DictComp):
                visit(current.key, inner)
                visit(current.value, inner)
            else:
                visit(current.elt, inner)
            return
        if isinstance(current, ast.ClassDef):
            raise ScopeError("a class defined in a test case is not supported")
        for child in ast.iter_child_nodes(current):
            visit(child, local)

    visit(node, bound)
    return free


def bound_first(stmt: ast.stmt) -> set[str]:
    """Names a compound statement binds before its body reads them (loop targets, ``with ... as``,
    ``except ... as``)."""
    names: set[str] = set()
    for node in walk_scope(stmt):
        if isinstance(node, ast.For):
            names |= target_names(node.target)
        elif isinstance(node, ast.With):
            for item in node.items:
                if item.optional_vars is not None:
                    names |= target_names(item.optional_vars)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


def may_mutate(stmt: ast.stmt) -> bool:
    """Whether running ``stmt`` may change an object it reads in place (a call, a store into an item or an
    attribute, an augmented assignment, a compound statement)."""
    targets: list[ast.expr]
    value: ast.expr | None
    if isinstance(stmt, ast.Assign):
        targets, value = stmt.targets, stmt.value
    elif isinstance(stmt, ast.AnnAssign):
        targets, value = [stmt.target], stmt.value
    else:
        return not isinstance(stmt, (ast.Pass, ast.Import, ast.ImportFrom))
    plain = all(
        isinstance(n, (ast.Name, ast.Tuple, ast.List, ast.Starred, ast.Store, ast.Load))
        for target in targets
        for n in ast.walk(target)
    )
    return not plain or (value is not None and any(isinstance(n, ast.Call) for n in ast.walk(value)))


def forbidden(node: ast.AST) -> bool:
    """Whether ``node`` holds something a model-independent value never needs (see module docstring)."""
    for inner in ast.walk(node):
        if isinstance(inner, _FORBIDDEN_NODES):
            return True
        if isinstance(inner, ast.Attribute):
            if inner.attr in FORBIDDEN_ATTRIBUTES or inner.attr.startswith("__"):
                return True
            name = canonical(dotted(inner))
            if name is not None and any(name == p or name.startswith(p + ".") for p in IRREPRODUCIBLE):
                return True
    return False


# ---- the analysis --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Binding:
    """A model-independent value bound by the test text."""

    immutable: bool = False  # a number, a string or a tuple of those: it cannot change in place
    calls: frozenset[str] | None = None  # a function of the test text: the globals its body reads
    code: bool = False  # a module, or a ``def`` whose defaults cannot change in place (see Trust.pure)


class Trust:
    """Which names hold model-independent values at one point of a step's test text.

    ``base`` are the parent's own objects (its modules, the safe builtins, the comparison helpers):
    model-independent until the test text binds the name to something else."""

    def __init__(self, base: frozenset[str]):
        self.base = frozenset(base)
        self.bound: dict[str, Binding | None] = {}  # names the test text bound; None: the child's value
        self.aliases: dict[str, frozenset[str]] = {}  # name -> names that may share its object

    def copy(self) -> Trust:
        other = Trust(self.base)
        other.bound = dict(self.bound)
        other.aliases = dict(self.aliases)
        return other

    # ---- questions
    def name(self, name: str, seen: frozenset[str] = frozenset()) -> bool:
        """Whether ``name`` holds a model-independent value here (a function of the test text: when called
        here, which needs every global its body reads to be model-independent here too)."""
        if name not in self.bound:
            return name in self.base
        binding = self.bound[name]
        if binding is None:
            return False
        if binding.calls is not None and name not in seen:
            return all(self.name(inner, seen | {name}) for inner in binding.calls)
        return True

    def expression(self, node: ast.AST, allowed: frozenset[str] | set[str] = frozenset()) -> bool:
        """Whether the parent computes ``node`` to the value the child computes, for genuine code."""
        if forbidden(node):
            return False
        try:
            free = free_names(node)
        except ScopeError:
            return False
        return all(self.name(name) for name in free - set(allowed))

    def statement(self, stmt: ast.stmt) -> bool:
        """Whether the parent can run ``stmt`` with the same effect (an import is decided by the caller)."""
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            outer = [*stmt.args.defaults, *[d for d in stmt.args.kw_defaults if d is not None], *stmt.decorator_list]
            return not forbidden(stmt) and not stmt.decorator_list and all(self.expression(n) for n in outer)
        return self.expression(stmt, bound_first(stmt))

    def mutable(self, name: str) -> bool:
        binding = self.bound.get(name)
        return binding is not None and not binding.immutable and not self.pure(name)

    def pure(self, name: str, seen: frozenset[str] = frozenset()) -> bool:
        """Whether ``name`` is code of the test text that holds no test data: a module it imports, or a ``def``
        whose defaults cannot change in place and whose body reads only the parent's objects and such code
        (51.4's ``total_energy``). Calling it on the child's values cannot change a value of the test text
        except through its arguments, and it shares no object with one: it is never exposed."""
        binding = self.bound.get(name)
        if binding is None or not binding.code or binding.calls is None:
            return False
        for inner in binding.calls - {name} - seen:
            if inner in self.bound:
                if not self.pure(inner, seen | {name}):
                    return False
            elif inner not in self.base:
                return False
        return True

    def closure(self, names) -> set[str]:
        """The bound, model-independent, mutable names that may share an object with one of ``names``."""
        out: set[str] = set()
        for name in names:
            if self.mutable(name):
                out |= self.aliases.get(name, frozenset({name}))
        return {name for name in out if self.mutable(name)}

    def immutable(self, node: ast.AST | None) -> bool:
        """Whether the value of ``node`` cannot change in place (numbers, strings, tuples of those)."""
        if node is None:
            return False
        if isinstance(node, ast.Constant):
            return True
        if isinstance(node, ast.Tuple):
            return all(self.immutable(e) for e in node.elts)
        if isinstance(node, ast.UnaryOp):
            return self.immutable(node.operand)
        if isinstance(node, ast.BinOp):
            return self.immutable(node.left) and self.immutable(node.right)
        if isinstance(node, ast.Subscript):
            return self.immutable(node.value)
        if isinstance(node, ast.Name):
            binding = self.bound.get(node.id)
            return binding is not None and binding.immutable
        if isinstance(node, ast.Call) and not node.keywords:
            name = dotted(node.func)
            if name is None or not self.name(name.split(".")[0]):
                return False
            full = canonical(name)
            numeric = full in NUMBER_CALLS or ("." in full and full.split(".")[0] in ("math", "cmath"))
            return numeric and all(self.immutable(a) for a in node.args)
        return False

    def model_call(self, call: ast.Call) -> bool:
        """Whether ``call`` calls code the test text does not bind (the step's function, earlier steps'
        functions, the dependencies' names, a builtin the child's code rebinds): only its return value is
        the child's. A callee the test text binds (its own function, an object it made) may store the
        child's values in its arguments: such a call is not a model call here."""
        name = dotted(call.func)
        if name is None:
            return False
        head = name.split(".")[0]
        return head not in self.bound and head not in self.base

    def passed(self, node: ast.AST) -> set[str]:
        """The names ``node`` reads only as arguments of model calls (:meth:`model_call`), directly or inside an
        expression that calls nothing else (``f(x)``, ``f(x[0], x.T, 2 * x, *x)``): model-dependent
        code that changes them in place does not make them the child's (the parent uses its own copy).
        A name read anywhere else in ``node`` (a store into it, a method call on it, an argument of a call
        the parent holds or the test text binds, a nested scope) is not among them."""
        passed: set[str] = set()
        other: set[str] = set()

        def visit(current: ast.AST, argument: bool) -> None:
            if isinstance(current, ast.Name):
                (passed if argument and isinstance(current.ctx, ast.Load) else other).add(current.id)
                return
            if isinstance(
                current,
                (
                    ast.FunctionDef,
                    ast.AsyncFunctionDef,
                    ast.Lambda,
                    ast.ClassDef,
                    ast.ListComp,
                    ast.SetComp,
                    ast.DictComp,
                    ast.GeneratorExp,
                ),
            ):
                other.update(n.id for n in ast.walk(current) if isinstance(n, ast.Name))
                return
            if isinstance(current, ast.Call):
                if self.model_call(current):
                    visit(current.func, False)
                    for part in (*current.args, *current.keywords):
                        visit(part, True)
                    return
                for part in ast.iter_child_nodes(current):  # any other call may change what it reads in place
                    visit(part, False)
                return
            for part in ast.iter_child_nodes(current):
                visit(part, argument)

        visit(node, False)
        return passed - other

    def deferred(self, stmt: ast.stmt) -> bool:
        """Whether ``stmt`` binds a function (or something that calls one later): its globals are read when
        it is called, so it is model-independent only while they are."""
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return True
        for node in ast.walk(stmt):
            if isinstance(node, ast.Lambda):
                return True
            if isinstance(node, ast.Call) and (dotted(node.func) or "").split(".")[-1] == "partial":
                return True
        value = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(value, ast.Name):
            binding = self.bound.get(value.id)
            return binding is not None and binding.calls is not None
        return False

    # ---- changes
    def forget(self, names) -> None:
        """``names`` no longer share objects with anything (rebound, or now the child's)."""
        for name in names:
            for other in self.aliases.pop(name, frozenset()):
                if other != name and other in self.aliases:
                    self.aliases[other] = self.aliases[other] - {name}

    def bind(self, stmt: ast.stmt, names: set[str]) -> None:
        """``stmt`` (model-independent) bound ``names``."""
        shared = set(names) | self.closure(free_names(stmt))
        value = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign)) else None
        fixed = value is not None and self.immutable(value)
        calls = frozenset(free_names(stmt)) if self.deferred(stmt) else None
        code = (
            isinstance(stmt, ast.FunctionDef)
            and not stmt.decorator_list
            and all(self.immutable(d) for d in (*stmt.args.defaults, *stmt.args.kw_defaults) if d is not None)
        )
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):  # a module the parent imports too (import_effect "run")
            code, calls = True, frozenset()
        self.forget(names)
        for name in names:
            self.bound[name] = Binding(immutable=fixed, calls=calls, code=code)
        if not fixed:
            group = frozenset(shared)
            for name in group:
                self.aliases[name] = group

    def untrust(self, names) -> None:
        """``names`` now hold the child's values (bound by model-dependent code)."""
        self.forget(names)
        for name in names:
            self.bound[name] = None

    def expose(self, names) -> set[str]:
        """``names`` were read by model-dependent code: what may share their objects becomes the child's."""
        reached = self.closure(names)
        self.untrust(reached)
        return reached

    def bind_parent(self, name: str) -> None:
        """``name`` is bound to an object the parent holds itself (a comparing helper of the test text):
        model-independent, and the parent's copy is never changed by the child's code."""
        self.forget([name])
        self.bound[name] = Binding(immutable=True)

    def reset(self, name: str) -> None:
        """``name`` is the parent's own object again (``import numpy as np``, a comparison helper)."""
        self.forget([name])
        self.bound.pop(name, None)

    def enter_function(self, local: set[str]) -> Trust:
        """The analysis inside a function whose locals are ``local`` (unbound until its body binds them)."""
        inner = self.copy()
        inner.untrust(local)
        return inner

    def leave_function(self, inner: Trust, local: set[str]) -> None:
        """Globals the function's body exposed are the child's here too (and what shares their objects)."""
        self.expose(
            [
                name
                for name, binding in self.bound.items()
                if name not in local and binding is not None and inner.bound.get(name) is None
            ]
        )


def import_effect(stmt: ast.Import | ast.ImportFrom, helpers: frozenset[str]) -> tuple[str, set[str]]:
    """What an import of the test text does to the analysis: ``("parent", names)`` (the parent's own objects
    again, nothing to run), ``("run", names)`` (a module the parent imports too), ``("child", names)``."""
    names = bound_names(stmt)
    if isinstance(stmt, ast.Import):
        if all(
            alias.asname in PARENT_MODULES
            and PARENT_MODULES[alias.asname] == alias.name
            or alias.asname is None
            and alias.name in PARENT_MODULES
            for alias in stmt.names
        ):
            return "parent", names
        if all(
            alias.name.split(".")[0] in IMPORTABLE_MODULES
            and alias.name not in IRREPRODUCIBLE
            and "." not in alias.name
            for alias in stmt.names
        ):
            return "run", names
        return "child", names
    module = stmt.module or ""
    if (
        stmt.level == 0
        and module == "scicode.compare.cmp"
        and all(alias.asname is None and alias.name in helpers for alias in stmt.names)
    ):
        return "parent", names
    if (
        stmt.level == 0
        and module in IMPORTABLE_MODULES
        and all(
            alias.name != "*"
            and not any(
                f"{module}.{alias.name}" == p or f"{module}.{alias.name}".startswith(p + ".") for p in IRREPRODUCIBLE
            )
            for alias in stmt.names
        )
    ):
        return "run", names
    return "child", names
