"""The split's vocabulary and state: which calls compare (they always run in the parent), which only
reduce or reshape a comparison's result, which builtins, library calls, methods and attributes the parent
applies to the child's values itself; the error a test case that cannot be split raises; and what a step's
split carries from one test case to the next (:class:`StepState`, seen by one statement as a :class:`Scope`)."""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field

from ..plan import (
    CMP_HELPERS,
    TARGET,
)
from . import taint
from .taint import PARENT_MODULES, Trust

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


def free_names(node: ast.AST, bound: frozenset[str] = frozenset()) -> set[str]:
    try:
        return taint.free_names(node, bound)
    except taint.ScopeError as exc:
        raise SplitError(str(exc)) from exc


@dataclass
class StepState:
    """What the parent owns so far in a step (a step's tests share one namespace, as upstream)."""

    parent_names: set[str] = field(default_factory=lambda: {TARGET})
    helpers: set[str] = field(default_factory=set)  # comparing helpers defined in the parent
    trust: Trust = field(default_factory=lambda: Trust(PARENT_OBJECTS))
    runnable: set[str] = field(default_factory=set)  # functions of the test text the parent runs on the child's values
    traced: set[str] = field(
        default_factory=set
    )  # functions of the test text the parent replays (:func:`.helpers.is_traced_helper`)


@dataclass(frozen=True)
class Scope:
    parent_names: frozenset[str]  # names whose value only the parent holds (target, unpacked names, comp. vars)
    helpers: frozenset[str]
    trust: Trust  # which names hold model-independent values (the parent computes them itself)
    shadowed: frozenset[str] = frozenset()  # function locals of an inlined test function
    runnable: frozenset[str] = frozenset()  # see StepState.runnable
    traced: frozenset[str] = frozenset()  # see StepState.traced
