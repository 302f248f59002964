"""A restricted data codec for values that cross from an untrusted child process to the trusted parent.

The child (which runs model code) *encodes*; the parent *decodes*. Decoding never executes anything
from the bytes: no pickle, no ``eval``, no ``sympify``; it only builds values of the types below, and
it is bounded (every length is checked against the input before anything is allocated; nesting is
capped).

Supported values, each decoded to exactly its own type:

* ``None``, ``bool``, ``int`` (any size), ``float`` (bit-exact, nan/inf included), ``complex``,
  ``str``, ``bytes``, ``bytearray``;
* ``list``, ``tuple``, ``dict`` (keys of any supported hashable type), ``set``, ``frozenset``;
* numpy arrays (``numpy.ndarray`` exactly, and ``numpy.matrix``) of plain dtypes (bool, int, uint,
  float, complex, datetime64, timedelta64, fixed-width bytes/str, any byte order), and of ``object``
  dtype whose elements are supported values; numpy scalars with their exact dtype (``np.bool_``
  stays ``np.bool_``, ``np.float32`` stays ``np.float32``);
* scipy.sparse matrices and arrays (csr, csc, coo, bsr, dia, lil, dok; ``*_matrix`` and
  ``*_array`` kept apart), checked on decoding (indices in range, ``indptr`` monotone) so later
  operations on them cannot read out of bounds;
* sympy expressions built from a fixed set of classes (Symbol with its assumptions, Integer,
  Rational, Float, the usual constants, Add, Mul, Pow, elementary functions, relationals,
  And/Or/Not, Piecewise, Tuple, dense matrices), rebuilt with ``evaluate=False`` from a structure
  like ``srepr`` (class name + arguments). An unknown class name is an error.

An instance of a subclass of a builtin type (a namedtuple, ``collections.Counter``/``OrderedDict``,
an ``IntEnum``) crosses as its base type (``tuple``, ``dict``, ``int``): equality with a target is the
base type's, and none of the subclass's methods cross. Anything else (a class instance, a function,
another ndarray subclass such as a masked array, a structured dtype, ...) raises :class:`CodecError`
naming its type. Caps: the bytes encoded per :class:`Encoder` (one per step;
default 256 MiB) and the nesting depth (100); exceeding either raises :class:`CodecError` with the
reason, on both sides. A scipy.sparse value whose dense form would exceed the byte cap is refused
too, because the comparison helpers densify sparse values (``toarray``).

Wire format of one frame::

    b"ABv1" | header length (u64 LE) | buffer length (u64 LE) | header (JSON, UTF-8) | buffer

The header is a tree of JSON lists ``[tag, ...]``; array, bytes and numpy-scalar payloads are
slices (offset, length) of the buffer. Frames concatenate into a stream (:func:`decode_stream`).

This module is loaded by file path inside sandboxed children, so at import it needs only the
standard library; numpy, scipy.sparse and sympy are used when the value (or the frame) needs them.
"""

from __future__ import annotations

import json
import re
import struct
import sys

# typing's constant, not imported: a child loads this module for every step, and needs no more than it uses
TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only (the channel functions import os when they run)
    import os
    from collections.abc import Callable
    from typing import Any, NoReturn

    # a node of a frame's header: [tag, ...] (JSON lists, so its fields are whatever the JSON held)
    Node = list[Any]

MiB = 1 << 20
DEFAULT_MAX_BYTES = 256 * MiB
MAX_DEPTH = 100
MAGIC = b"ABv1"
_PREFIX = struct.Struct("<4sQQ")
PREFIX_SIZE = _PREFIX.size
MAX_NDIM = 32
MAX_FLOAT_PRECISION = 100_000  # bits of a sympy Float
MAX_RATIONAL_DIGITS = 20_000  # hex digits of a sympy Rational's numerator or denominator

_DTYPE_RE = re.compile(
    r"^[<>|=]?(?:b1|[iu][1248]|f(?:2|4|8|10|12|16)|c(?:8|16|20|24|32)"
    r"|[mM]8(?:\[[0-9]{0,6}[a-zA-Z]{1,2}\])?|[SU][1-9][0-9]{0,8})$"
)
_PLAIN_KINDS = "biufcmMSU"
_HEX_INT_RE = re.compile(r"^-?[0-9a-f]+$")

SPARSE_CLASSES = tuple(
    f"{fmt}_{kind}" for kind in ("matrix", "array") for fmt in ("csr", "csc", "coo", "bsr", "dia", "lil", "dok")
)

SYMPY_ASSUMPTIONS = frozenset(
    (
        "algebraic",
        "antihermitian",
        "commutative",
        "complex",
        "composite",
        "even",
        "extended_negative",
        "extended_nonnegative",
        "extended_nonpositive",
        "extended_nonzero",
        "extended_positive",
        "extended_real",
        "finite",
        "hermitian",
        "imaginary",
        "infinite",
        "integer",
        "irrational",
        "negative",
        "noninteger",
        "nonnegative",
        "nonpositive",
        "nonzero",
        "odd",
        "polar",
        "positive",
        "prime",
        "rational",
        "real",
        "transcendental",
        "zero",
    )
)
# class name -> attribute of sympy.S
SYMPY_SINGLETONS = {
    "Zero": "Zero",
    "One": "One",
    "NegativeOne": "NegativeOne",
    "Half": "Half",
    "ImaginaryUnit": "ImaginaryUnit",
    "Pi": "Pi",
    "Exp1": "Exp1",
    "Infinity": "Infinity",
    "NegativeInfinity": "NegativeInfinity",
    "ComplexInfinity": "ComplexInfinity",
    "NaN": "NaN",
    "EulerGamma": "EulerGamma",
    "Catalan": "Catalan",
    "GoldenRatio": "GoldenRatio",
    "TribonacciConstant": "TribonacciConstant",
    "BooleanTrue": "true",
    "BooleanFalse": "false",
    "EmptySet": "EmptySet",
}
# classes rebuilt as cls(*args, evaluate=False)
SYMPY_COMPOUND = (
    "Add",
    "Mul",
    "Pow",
    "exp",
    "log",
    "sin",
    "cos",
    "tan",
    "cot",
    "sec",
    "csc",
    "asin",
    "acos",
    "atan",
    "acot",
    "atan2",
    "sinh",
    "cosh",
    "tanh",
    "coth",
    "asinh",
    "acosh",
    "atanh",
    "Abs",
    "sign",
    "re",
    "im",
    "arg",
    "conjugate",
    "floor",
    "ceiling",
    "Heaviside",
    "DiracDelta",
    "Min",
    "Max",
    "factorial",
    "gamma",
    "erf",
    "erfc",
    "Equality",
    "Unequality",
    "StrictLessThan",
    "LessThan",
    "StrictGreaterThan",
    "GreaterThan",
    "And",
    "Or",
    "Not",
    "Piecewise",
    "ExprCondPair",
    "Tuple",
)
SYMPY_MATRICES = ("MutableDenseMatrix", "ImmutableDenseMatrix")


class CodecError(Exception):
    """A value cannot be encoded, or bytes cannot be decoded; the message says why."""


def _type_name(value: object) -> str:
    kind = type(value)
    module = getattr(kind, "__module__", "") or ""
    name = getattr(kind, "__qualname__", None) or getattr(kind, "__name__", "?")
    return str(name) if module in ("builtins", "") else f"{module}.{name}"


# ----------------------------------------------------------------------------------------------
# optional libraries: only those the child already imported can have produced a value (typed Any: the
# module is looked up at run time, never imported here)


def _numpy() -> Any:
    return sys.modules.get("numpy")


def _sparse_module() -> Any:
    return sys.modules.get("scipy.sparse")


def _sympy() -> Any:
    return sys.modules.get("sympy")


_SYMPY_TABLE: dict[str, Any] | None = None


def _sympy_table() -> dict[str, Any]:
    """class name -> class, for every sympy class the codec knows (sympy must be importable)."""
    global _SYMPY_TABLE
    if _SYMPY_TABLE is None:
        import sympy  # why: only values that hold sympy objects need it
        from sympy.functions.elementary.piecewise import ExprCondPair  # why: as above, sympy values only

        table: dict[str, Any] = {
            "Symbol": sympy.Symbol,
            "Integer": sympy.Integer,
            "Rational": sympy.Rational,
            "Float": sympy.Float,
            "ExprCondPair": ExprCondPair,
            "MutableDenseMatrix": sympy.MutableDenseMatrix,
            "ImmutableDenseMatrix": sympy.ImmutableDenseMatrix,
        }
        for name in SYMPY_COMPOUND:
            if name not in table:
                table[name] = getattr(sympy, name)
        for name, attr in SYMPY_SINGLETONS.items():
            table[name] = type(getattr(sympy.S, attr))
        _SYMPY_TABLE = table
    return _SYMPY_TABLE


# ----------------------------------------------------------------------------------------------
# encoding


class Encoder:
    """Encodes values into frames, counting every byte against one budget (one Encoder per step).

    ``encode`` raises :class:`CodecError` when the value is not supported, nests deeper than
    ``max_depth``, or would bring the bytes encoded so far past ``max_bytes``; a refused value
    consumes nothing of the budget.
    """

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, max_depth: int = MAX_DEPTH) -> None:
        if max_bytes <= 0 or max_depth <= 0:
            raise ValueError("max_bytes and max_depth must be positive")
        self.max_bytes = int(max_bytes)
        self.max_depth = int(max_depth)
        self.used = 0

    def encode(self, value: object) -> bytes:
        state = _EncodeState(self.max_bytes - self.used - PREFIX_SIZE, self.max_depth, self.max_bytes)
        header_obj = state.node(value, 0)
        header = json.dumps(header_obj, ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode("ascii")
        buffer = b"".join(state.chunks)
        total = PREFIX_SIZE + len(header) + len(buffer)
        if self.used + total > self.max_bytes:
            raise CodecError(state.over_cap_message())
        self.used += total
        return _PREFIX.pack(MAGIC, len(header), len(buffer)) + header + buffer


def encode(value: object, *, max_bytes: int = DEFAULT_MAX_BYTES, max_depth: int = MAX_DEPTH) -> bytes:
    """One frame holding ``value`` (a fresh budget of ``max_bytes``)."""
    return Encoder(max_bytes, max_depth).encode(value)


class _EncodeState:
    def __init__(self, room: int, max_depth: int, cap: int) -> None:
        self.room = room  # bytes still allowed (header estimate + buffer)
        self.max_depth = max_depth
        self.cap = cap
        self.chunks: list[bytes] = []
        self.offset = 0

    def over_cap_message(self) -> str:
        mib = f" ({self.cap // MiB} MiB)" if self.cap % MiB == 0 else ""
        return f"the encoded values exceed the cap of {self.cap} bytes per step{mib}"

    def spend(self, n: int) -> None:
        self.room -= n
        if self.room < 0:
            raise CodecError(self.over_cap_message())

    def add_raw(self, raw: bytes) -> list[int]:
        self.spend(len(raw))
        start = self.offset
        self.chunks.append(raw)
        self.offset += len(raw)
        return [start, len(raw)]

    # -- dispatch ------------------------------------------------------------------------------
    def node(self, value: Any, depth: int) -> Node:
        if depth > self.max_depth:
            raise CodecError(f"the value nests deeper than {self.max_depth} levels")
        kind = type(value)
        if value is None:
            self.spend(5)
            return ["n"]
        if kind is bool:
            self.spend(8)
            return ["b", int(value)]
        if kind is int:
            text = _int_text(value)
            self.spend(len(text) + 8)
            return ["i", text]
        if kind is float:
            self.spend(32)
            return ["f", value.hex()]
        if kind is complex:
            self.spend(56)
            return ["c", value.real.hex(), value.imag.hex()]
        if kind is str:
            self.spend(len(value) + 4)  # a lower bound: the real size is checked once the header is built
            return ["s", value]
        if kind is bytes or kind is bytearray:
            return ["y" if kind is bytes else "Y", *self.add_raw(bytes(value))]
        if kind in (list, tuple, set, frozenset):
            tag = _CONTAINER_TAGS[kind]
            self.spend(8 + len(value))
            return [tag, [self.node(item, depth + 1) for item in value]]
        if kind is dict:
            self.spend(8 + 2 * len(value))
            return ["d", [[self.node(k, depth + 1), self.node(v, depth + 1)] for k, v in value.items()]]
        np = _numpy()
        if np is not None:
            if kind is np.ndarray:
                return self.array(value, depth)
            if isinstance(value, np.generic):
                return self.numpy_scalar(value)
        sparse = _sparse_module()
        if sparse is not None and kind.__name__ in SPARSE_CLASSES and getattr(sparse, kind.__name__, None) is kind:
            return self.sparse(value, depth)
        sympy = _sympy()
        if sympy is not None and isinstance(value, (sympy.Basic, sympy.MatrixBase)):
            return ["z", self.sympy_node(value, depth + 1)]
        if np is not None and kind is np.matrix:
            return ["m", *self.array(np.asarray(value), depth)[1:]]
        for base in _DOWNGRADED:
            # a subclass of a builtin (namedtuple, Counter, OrderedDict, IntEnum, ...) crosses as its base
            # type: equality with the target is the base type's, and none of its own methods cross
            if isinstance(value, base) and not (np is not None and isinstance(value, (np.ndarray, np.generic))):
                return self.node(base(value), depth)
        raise CodecError(
            f"cannot encode a value of type {_type_name(value)}: only numbers, str, bytes, "
            "None, numpy arrays of plain dtypes and numpy scalars, list, tuple, dict, set, "
            "scipy.sparse matrices and sympy expressions cross to the scoring process"
        )

    # -- numpy ---------------------------------------------------------------------------------
    def array(self, value: Any, depth: int) -> Node:
        np = _numpy()
        dtype = value.dtype
        if value.ndim > MAX_NDIM:
            raise CodecError(f"cannot encode a numpy array with {value.ndim} dimensions (at most {MAX_NDIM})")
        shape = [int(n) for n in value.shape]
        if dtype == np.dtype(object):
            self.spend(16 + value.size)
            flat = value.reshape(-1)
            return ["A", shape, [self.node(flat[i], depth + 1) for i in range(flat.size)]]
        _check_plain_dtype(dtype, "numpy array")
        if value.nbytes > self.room:  # checked before the bytes are materialised
            raise CodecError(self.over_cap_message())
        raw = np.ascontiguousarray(value).tobytes()
        return ["a", dtype.str, shape, *self.add_raw(raw)]

    def numpy_scalar(self, value: Any) -> Node:
        dtype = value.dtype
        _check_plain_dtype(dtype, f"numpy scalar {_type_name(value)}")
        np = _numpy()
        raw = np.asarray(value).tobytes()
        return ["g", dtype.str, *self.add_raw(raw)]

    # -- scipy.sparse --------------------------------------------------------------------------
    def sparse(self, value: Any, depth: int) -> Node:
        name = type(value).__name__
        fmt = name.split("_")[0]
        if len(value.shape) != 2:
            raise CodecError(f"cannot encode a {len(value.shape)}-dimensional {name}; only 2-D sparse values")
        _check_plain_dtype(value.dtype, name)
        if fmt in ("csr", "csc", "bsr"):
            parts = {"data": value.data, "indices": value.indices, "indptr": value.indptr}
        elif fmt == "dia":
            parts = {"data": value.data, "offsets": value.offsets}
        else:  # coo, and lil/dok through coo
            coo = value if fmt == "coo" else value.tocoo()
            parts = {"data": coo.data, "row": coo.row, "col": coo.col}
        encoded = {key: self.array(_numpy().asarray(array), depth + 1) for key, array in parts.items()}
        return ["p", name, [int(n) for n in value.shape], encoded]

    # -- sympy ---------------------------------------------------------------------------------
    def sympy_node(self, expr: Any, depth: int) -> Node:
        if depth > self.max_depth:
            raise CodecError(f"the value nests deeper than {self.max_depth} levels")
        table = _sympy_table()
        name = type(expr).__name__
        if table.get(name) is not type(expr):
            raise CodecError(
                f"cannot encode the sympy object {_type_name(expr)} ({name}); supported: "
                "symbols, numbers, constants, +, *, **, elementary functions, relationals, "
                "And/Or/Not, Piecewise, Tuple, dense matrices"
            )
        self.spend(16)
        if name == "Symbol":
            assumptions = getattr(expr, "_assumptions_orig", None)
            if assumptions is None:  # older sympy
                assumptions = getattr(expr, "_assumptions0", {})
            assumptions = {str(k): bool(v) for k, v in dict(assumptions).items()}
            self.spend(len(expr.name) * 2 + 24 * len(assumptions))
            return ["Symbol", expr.name, assumptions]
        if name in SYMPY_SINGLETONS:
            return [name]
        if name == "Integer":
            text = _int_text(int(expr.p))
            self.spend(len(text))
            return ["Integer", text]
        if name == "Rational":
            p, q = _int_text(int(expr.p)), _int_text(int(expr.q))
            self.spend(len(p) + len(q))
            return ["Rational", p, q]
        if name == "Float":
            sign, man, exp, bc = expr._mpf_
            man_text = format(int(man), "x")
            self.spend(len(man_text) + 32)
            return ["Float", int(sign), man_text, int(exp), int(bc), int(expr._prec)]
        if name in SYMPY_MATRICES:
            rows, cols = expr.shape
            self.spend(len(expr))
            return [name, int(rows), int(cols), [self.sympy_node(item, depth + 1) for item in list(expr)]]
        return [name, [self.sympy_node(arg, depth + 1) for arg in expr.args]]


_CONTAINER_TAGS: dict[type, str] = {list: "l", tuple: "t", set: "e", frozenset: "E"}
_DOWNGRADED: tuple[type[Any], ...] = (
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    bytearray,
    tuple,
    list,
    dict,
    set,
    frozenset,
)


def _int_text(value: int) -> str:
    # hex: no int<->str digit limit, exact, compact
    return format(value, "x")


def _check_plain_dtype(dtype: Any, what: str) -> None:
    if (
        dtype.kind not in _PLAIN_KINDS
        or dtype.fields is not None
        or dtype.subdtype is not None
        or dtype.hasobject
        or not _DTYPE_RE.match(dtype.str)
    ):
        raise CodecError(
            f"cannot encode a {what} of dtype {dtype!s}: only bool, integer, float, complex, "
            "datetime, fixed-width bytes/str dtypes (or object arrays of supported values)"
        )


# ----------------------------------------------------------------------------------------------
# decoding


def decode(
    data: bytes | bytearray | memoryview, *, max_bytes: int = DEFAULT_MAX_BYTES, max_depth: int = MAX_DEPTH
) -> Any:
    """The value of one frame; ``data`` must be exactly one frame."""
    view = memoryview(data)
    if len(view) > max_bytes:
        raise CodecError(f"the encoded value is {len(view)} bytes, over the cap of {max_bytes} bytes")
    value, end = _decode_frame(view, 0, max_bytes, max_depth)
    if end != len(view):
        raise CodecError(f"{len(view) - end} bytes of trailing data after the frame")
    return value


def decode_stream(
    data: bytes | bytearray | memoryview, *, max_bytes: int = DEFAULT_MAX_BYTES, max_depth: int = MAX_DEPTH
) -> tuple[list[Any], CodecError | None]:
    """Values of a concatenation of frames, in order, as ``(values, error)``.

    Decoding stops at the first bad frame: ``error`` is then the :class:`CodecError` (a stream cut
    short by a killed child ends with a truncated frame), else ``None``. The whole stream counts
    against ``max_bytes``.
    """
    view = memoryview(data)
    values: list[Any] = []
    if len(view) > max_bytes:
        return values, CodecError(f"the operand stream is {len(view)} bytes, over the cap of {max_bytes} bytes")
    position = 0
    while position < len(view):
        try:
            value, position = _decode_frame(view, position, max_bytes, max_depth)
        except CodecError as exc:
            return values, exc
        values.append(value)
    return values, None


def _decode_frame(view: memoryview, start: int, max_bytes: int, max_depth: int) -> tuple[Any, int]:
    if len(view) - start < PREFIX_SIZE:
        raise CodecError(f"truncated frame: {len(view) - start} bytes where a {PREFIX_SIZE}-byte prefix is needed")
    magic, header_len, buffer_len = _PREFIX.unpack_from(view, start)
    if magic != MAGIC:
        raise CodecError("not a codec frame (bad magic bytes)")
    body = start + PREFIX_SIZE
    if header_len > max_bytes or buffer_len > max_bytes or header_len + buffer_len > len(view) - body:
        raise CodecError(
            f"truncated or oversized frame: it announces {header_len} + {buffer_len} bytes, {len(view) - body} remain"
        )
    header = bytes(view[body : body + header_len])
    buffer = view[body + header_len : body + header_len + buffer_len]
    try:
        tree = json.loads(header.decode("ascii"))
    except RecursionError:
        raise CodecError(f"the value nests deeper than {max_depth} levels") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise CodecError(f"malformed frame header ({type(exc).__name__}: {str(exc)[:200]})") from None
    decoder = _Decoder(buffer, max_depth, max_bytes)
    try:
        value = decoder.value(tree, 0)
    except CodecError:
        raise
    except RecursionError:
        raise CodecError(f"the value nests deeper than {max_depth} levels") from None
    except MemoryError:  # not malformed: the decoding process ran out of its budget (it says so itself)
        raise
    except Exception as exc:  # a constructor (numpy, scipy, sympy) refused the parts: malformed input
        raise CodecError(f"malformed value ({type(exc).__name__}: {str(exc)[:200]})") from None
    return value, body + header_len + buffer_len


def _fail(message: str) -> NoReturn:
    raise CodecError(message)


def _is_int(x: object) -> bool:
    return type(x) is int


class _Decoder:
    def __init__(self, buffer: memoryview, max_depth: int, max_bytes: int) -> None:
        self.buffer = buffer
        self.max_depth = max_depth
        self.max_bytes = max_bytes

    def raw(self, offset: Any, length: Any) -> bytes:
        if not (_is_int(offset) and _is_int(length)) or offset < 0 or length < 0 or offset + length > len(self.buffer):
            _fail(f"a payload slice ({offset!r}, {length!r}) lies outside the {len(self.buffer)}-byte buffer")
        return bytes(self.buffer[offset : offset + length])

    def checked_node(self, node: Any, depth: int, malformed: str) -> tuple[str, Node]:
        """``(tag, args)`` of a ``[tag, ...]`` node within the depth cap, else the frame is refused."""
        if depth > self.max_depth:
            _fail(f"the value nests deeper than {self.max_depth} levels")
        if type(node) is not list or not node or type(node[0]) is not str:
            _fail(malformed)
        return node[0], node[1:]

    def value(self, node: Any, depth: int) -> Any:
        tag, args = self.checked_node(node, depth, "malformed node: expected [tag, ...]")
        handler = _HANDLERS.get(tag)
        if handler is None:
            _fail(f"unknown node tag {tag[:20]!r}")
        return handler(self, args, depth)

    # -- scalars -------------------------------------------------------------------------------
    def none(self, args: Node, depth: int) -> Any:
        _arity(args, 0, "None")
        return None

    def boolean(self, args: Node, depth: int) -> Any:
        _arity(args, 1, "bool")
        if args[0] not in (0, 1) or type(args[0]) is not int:
            _fail("malformed bool")
        return bool(args[0])

    def integer(self, args: Node, depth: int) -> Any:
        _arity(args, 1, "int")
        return _parse_int(args[0])

    def floating(self, args: Node, depth: int) -> Any:
        _arity(args, 1, "float")
        return _parse_float(args[0])

    def complex_(self, args: Node, depth: int) -> Any:
        _arity(args, 2, "complex")
        return complex(_parse_float(args[0]), _parse_float(args[1]))

    def string(self, args: Node, depth: int) -> Any:
        _arity(args, 1, "str")
        if type(args[0]) is not str:
            _fail("malformed str")
        return args[0]

    def bytes_(self, args: Node, depth: int) -> Any:
        _arity(args, 2, "bytes")
        return self.raw(*args)

    def bytearray_(self, args: Node, depth: int) -> Any:
        _arity(args, 2, "bytearray")
        return bytearray(self.raw(*args))

    # -- containers ----------------------------------------------------------------------------
    def items(self, args: Node, depth: int, what: str) -> list[Any]:
        _arity(args, 1, what)
        if type(args[0]) is not list:
            _fail(f"malformed {what}")
        return [self.value(item, depth + 1) for item in args[0]]

    def list_(self, args: Node, depth: int) -> Any:
        return self.items(args, depth, "list")

    def tuple_(self, args: Node, depth: int) -> Any:
        return tuple(self.items(args, depth, "tuple"))

    def set_(self, args: Node, depth: int) -> Any:
        return set(_hashable(item, "set element") for item in self.items(args, depth, "set"))

    def frozenset_(self, args: Node, depth: int) -> Any:
        return frozenset(_hashable(item, "frozenset element") for item in self.items(args, depth, "frozenset"))

    def dict_(self, args: Node, depth: int) -> Any:
        _arity(args, 1, "dict")
        if type(args[0]) is not list:
            _fail("malformed dict")
        out: dict[Any, Any] = {}
        for pair in args[0]:
            if type(pair) is not list or len(pair) != 2:
                _fail("malformed dict item")
            key = _hashable(self.value(pair[0], depth + 1), "dict key")
            out[key] = self.value(pair[1], depth + 1)
        return out

    # -- numpy ---------------------------------------------------------------------------------
    def array(self, args: Node, depth: int) -> Any:
        _arity(args, 4, "numpy array")
        dtype_text, shape, offset, length = args
        np = _require_numpy()
        dtype = _parse_dtype(dtype_text)
        shape = _parse_shape(shape)
        count = 1
        for n in shape:
            count *= n
        if count * dtype.itemsize != length:
            _fail(
                f"a numpy array of shape {tuple(shape)} and dtype {dtype_text} needs "
                f"{count * dtype.itemsize} bytes, the frame gives {length!r}"
            )
        raw = self.raw(offset, length)
        return np.frombuffer(raw, dtype=dtype).reshape(shape).copy() if count else np.empty(shape, dtype=dtype)

    def matrix(self, args: Node, depth: int) -> Any:
        value = self.array(args, depth)
        if value.ndim != 2:
            _fail("a numpy matrix must be 2-D")
        return value.view(_require_numpy().matrix)

    def object_array(self, args: Node, depth: int) -> Any:
        _arity(args, 2, "object array")
        np = _require_numpy()
        shape = _parse_shape(args[0])
        if type(args[1]) is not list:
            _fail("malformed object array")
        count = 1
        for n in shape:
            count *= n
        if count != len(args[1]):
            _fail(f"an object array of shape {tuple(shape)} needs {count} elements, the frame gives {len(args[1])}")
        out = np.empty(len(args[1]), dtype=object)
        for index, item in enumerate(args[1]):
            out[index] = self.value(item, depth + 1)
        return out.reshape(shape)

    def numpy_scalar(self, args: Node, depth: int) -> Any:
        _arity(args, 3, "numpy scalar")
        np = _require_numpy()
        dtype = _parse_dtype(args[0])
        if args[2] != dtype.itemsize:
            _fail(f"a numpy scalar of dtype {args[0]} needs {dtype.itemsize} bytes, the frame gives {args[2]!r}")
        return np.frombuffer(self.raw(args[1], args[2]), dtype=dtype)[0]

    # -- scipy.sparse --------------------------------------------------------------------------
    def sparse(self, args: Node, depth: int) -> Any:
        _arity(args, 3, "sparse matrix")
        name, shape, parts = args
        if name not in SPARSE_CLASSES:
            _fail(f"unknown sparse class {str(name)[:40]!r}")
        shape = _parse_shape(shape)
        if len(shape) != 2:
            _fail("a sparse matrix must be 2-D")
        if type(parts) is not dict:
            _fail("malformed sparse matrix")
        np = _require_numpy()
        import scipy.sparse as sparse  # why: only frames holding sparse values need scipy

        fmt, kind = name.split("_")
        wanted = {
            "csr": ("data", "indices", "indptr"),
            "csc": ("data", "indices", "indptr"),
            "bsr": ("data", "indices", "indptr"),
            "dia": ("data", "offsets"),
        }.get(fmt, ("data", "row", "col"))
        if sorted(parts) != sorted(wanted):
            _fail(f"a {name} needs the parts {', '.join(wanted)}")
        arrays = {}
        for key in wanted:
            node = parts[key]
            if type(node) is not list or not node or node[0] != "a":
                _fail(f"part {key} of a {name} must be a plain numpy array")
            arrays[key] = self.value(node, depth + 1)
        data = arrays["data"]
        if data.dtype.kind not in "biufc":
            _fail(f"a {name} cannot hold dtype {data.dtype}")
        rows, cols = shape
        if rows * cols * data.dtype.itemsize > self.max_bytes:
            _fail(
                f"a {name} of shape {rows}x{cols} would take more than the cap of {self.max_bytes} bytes once densified"
            )
        for key in wanted[1:]:
            part = arrays[key]
            if part.dtype.kind not in "iu" or part.ndim != 1:
                _fail(f"part {key} of a {name} must be a 1-D integer array")
        cls = getattr(sparse, name)
        if fmt in ("csr", "csc", "bsr"):
            matrix = self._compressed(sparse, fmt, kind, data, arrays, shape)
        elif fmt == "dia":
            offsets = arrays["offsets"]
            if data.ndim != 2 or data.shape[0] != len(offsets) or len(set(offsets.tolist())) != len(offsets):
                _fail(f"malformed {name}: data must be 2-D with one row per distinct offset")
            matrix = cls((data, offsets), shape=shape)
        else:
            row, col = arrays["row"], arrays["col"]
            if data.ndim != 1 or len(row) != len(data) or len(col) != len(data):
                _fail(f"malformed {name}: data, row and col must be 1-D of one length")
            if len(data) and (row.min() < 0 or col.min() < 0 or row.max() >= rows or col.max() >= cols):
                _fail(f"malformed {name}: an index lies outside the shape {rows}x{cols}")
            coo_cls = getattr(sparse, f"coo_{kind}")
            matrix = coo_cls((data, (row.astype(np.int64), col.astype(np.int64))), shape=shape)
            if fmt == "lil":
                matrix = matrix.tolil()
            elif fmt == "dok":
                matrix = matrix.todok()
        if type(matrix) is not cls:
            matrix = cls(matrix)
        return matrix

    def _compressed(self, sparse: Any, fmt: str, kind: str, data: Any, arrays: dict[str, Any], shape: list[int]) -> Any:
        indices, indptr = arrays["indices"], arrays["indptr"]
        rows, cols = shape
        if fmt == "bsr":
            if data.ndim != 3:
                _fail("malformed bsr: data must be 3-D (blocks)")
            block_rows, block_cols = data.shape[1:]
            if block_rows < 1 or block_cols < 1 or rows % block_rows or cols % block_cols:
                _fail("malformed bsr: the blocksize does not divide the shape")
            major, minor = rows // block_rows, cols // block_cols
        else:
            if data.ndim != 1:
                _fail(f"malformed {fmt}: data must be 1-D")
            major, minor = (rows, cols) if fmt == "csr" else (cols, rows)
        if len(indptr) != major + 1 or len(indices) != len(data):
            _fail(f"malformed {fmt}: indptr needs {major + 1} entries and indices one per stored value")
        if len(indptr) and (indptr[0] != 0 or indptr[-1] != len(indices)):
            _fail(f"malformed {fmt}: indptr must start at 0 and end at the number of stored values")
        if len(indptr) > 1 and (indptr[1:] < indptr[:-1]).any():
            _fail(f"malformed {fmt}: indptr must not decrease")
        if len(indices) and (indices.min() < 0 or indices.max() >= minor):
            _fail(f"malformed {fmt}: an index lies outside the shape")
        cls = getattr(sparse, f"{fmt}_{kind}")
        matrix = cls((data, indices, indptr), shape=shape)
        matrix.check_format(full_check=True)
        return matrix

    # -- sympy ---------------------------------------------------------------------------------
    def sympy(self, args: Node, depth: int) -> Any:
        _arity(args, 1, "sympy value")
        return self.sympy_node(args[0], depth + 1)

    def sympy_node(self, node: Any, depth: int) -> Any:
        name, args = self.checked_node(node, depth, "malformed sympy node")
        try:
            table = _sympy_table()
        except ImportError:
            _fail("the frame holds a sympy value and sympy is not installed")
        cls = table.get(name)
        if cls is None:
            _fail(f"unknown sympy class {name[:60]!r}: not among the classes the codec rebuilds")
        import sympy  # why: sympy values only

        if name == "Symbol":
            _arity(args, 2, "Symbol")
            symbol_name, assumptions = args
            if type(symbol_name) is not str or type(assumptions) is not dict:
                _fail("malformed Symbol")
            for key, value in assumptions.items():
                if key not in SYMPY_ASSUMPTIONS or type(value) is not bool:
                    _fail(f"unknown Symbol assumption {str(key)[:40]!r}")
            return sympy.Symbol(symbol_name, **assumptions)
        if name in SYMPY_SINGLETONS:
            _arity(args, 0, name)
            return getattr(sympy.S, SYMPY_SINGLETONS[name])
        if name == "Integer":
            _arity(args, 1, name)
            return sympy.Integer(_parse_int(args[0]))
        if name == "Rational":
            _arity(args, 2, name)
            if any(type(a) is str and len(a) > MAX_RATIONAL_DIGITS for a in args):
                _fail(f"a Rational with more than {MAX_RATIONAL_DIGITS} hex digits")  # gcd of huge ints is slow
            p, q = _parse_int(args[0]), _parse_int(args[1])
            if q == 0:
                _fail("a Rational with denominator 0")
            return sympy.Rational(p, q)
        if name == "Float":
            _arity(args, 5, name)
            sign, man, exp, bc, prec = args
            if (
                sign not in (0, 1)
                or type(sign) is not int
                or type(man) is not str
                or not re.fullmatch(r"[0-9a-f]+", man)
                or not _is_int(exp)
                or not _is_int(bc)
                or not _is_int(prec)
                or not 1 <= prec <= MAX_FLOAT_PRECISION
                or not 0 <= bc <= MAX_FLOAT_PRECISION
                or abs(exp) > 1 << 40
            ):
                _fail("malformed Float")
            if int(man, 16).bit_length() != bc:
                _fail("malformed Float: bit count does not match the mantissa")
            return sympy.Float((sign, man, exp, bc), precision=prec)
        if name in SYMPY_MATRICES:
            _arity(args, 3, name)
            rows, cols, items = args
            if (
                not (_is_int(rows) and _is_int(cols))
                or rows < 0
                or cols < 0
                or type(items) is not list
                or rows * cols != len(items)
            ):
                _fail(f"malformed {name}")
            values = [self.sympy_node(item, depth + 1) for item in items]
            return cls(rows, cols, values)
        _arity(args, 1, name)
        if type(args[0]) is not list:
            _fail(f"malformed {name}")
        children = [self.sympy_node(item, depth + 1) for item in args[0]]
        if name == "ExprCondPair":  # a plain pair: it takes no `evaluate`
            _arity(children, 2, name)
            return cls(*children)
        return cls(*children, evaluate=False)


def _arity(args: Node, n: int, what: str) -> None:
    if len(args) != n:
        _fail(f"malformed {what}: {len(args)} fields where {n} are expected")


def _parse_int(text: object) -> int:
    if type(text) is not str or not _HEX_INT_RE.match(text):
        _fail("malformed int")
    return int(text, 16)


def _parse_float(text: object) -> float:
    if type(text) is not str or len(text) > 40:
        _fail("malformed float")
    try:
        return float.fromhex(text)
    except (ValueError, OverflowError):
        _fail("malformed float")


def _parse_dtype(text: object) -> Any:
    np = _require_numpy()
    if type(text) is not str or not _DTYPE_RE.match(text):
        _fail(f"dtype {str(text)[:40]!r} is not a plain numpy dtype")
    try:
        dtype = np.dtype(text)
    except TypeError:
        _fail(f"dtype {text!r} is not a numpy dtype here")
    if dtype.kind not in _PLAIN_KINDS or dtype.itemsize <= 0:
        _fail(f"dtype {text!r} is not a plain numpy dtype")
    return dtype


def _parse_shape(shape: Any) -> list[int]:
    if type(shape) is not list or len(shape) > MAX_NDIM or any(not _is_int(n) or n < 0 or n >= 1 << 62 for n in shape):
        _fail("malformed shape")
    return shape


def _hashable(value: Any, what: str) -> Any:
    try:
        hash(value)
    except TypeError:
        _fail(f"a {what} of type {_type_name(value)} is not hashable")
    return value


def _require_numpy() -> Any:
    import numpy  # why: only frames holding numpy values need it

    return numpy


_HANDLERS: dict[str, Callable[[_Decoder, Node, int], Any]] = {
    "n": _Decoder.none,
    "b": _Decoder.boolean,
    "i": _Decoder.integer,
    "f": _Decoder.floating,
    "c": _Decoder.complex_,
    "s": _Decoder.string,
    "y": _Decoder.bytes_,
    "Y": _Decoder.bytearray_,
    "l": _Decoder.list_,
    "t": _Decoder.tuple_,
    "e": _Decoder.set_,
    "E": _Decoder.frozenset_,
    "d": _Decoder.dict_,
    "a": _Decoder.array,
    "m": _Decoder.matrix,
    "A": _Decoder.object_array,
    "g": _Decoder.numpy_scalar,
    "p": _Decoder.sparse,
    "z": _Decoder.sympy,
}


# ----------------------------------------------------------------------------------------------
# the child's side of a channel


class FrameWriter:
    """Writes frames to a file descriptor or a file (the child's end of the operand channel).

    ``send(value)`` encodes with one :class:`Encoder` (so the step's cap covers every frame) and
    writes the frame at once; :class:`CodecError` leaves the channel untouched.
    """

    def __init__(
        self, channel: int | str | os.PathLike[str], max_bytes: int = DEFAULT_MAX_BYTES, max_depth: int = MAX_DEPTH
    ) -> None:
        import os  # why: only the child's writer needs it

        self.encoder = Encoder(max_bytes, max_depth)
        if isinstance(channel, int):
            self.fd = channel
        else:
            self.fd = os.open(channel, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
        self._write = os.write

    def send(self, value: object) -> None:
        self.write_frame(self.encoder.encode(value))

    def write_frame(self, frame: bytes) -> None:
        """Write an already encoded frame (it does not count against this writer's cap)."""
        view = memoryview(frame)
        while view:
            written = self._write(self.fd, view)
            view = view[written:]


def read_capped(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """The bytes of a channel file the child wrote, read safely by the parent.

    The child controls the path's content and may have replaced the file: a symlink is not followed,
    a FIFO or device is not opened for a blocking read, and at most ``max_bytes + 1`` bytes are read
    (so :func:`decode_stream` with the same cap reports "over the cap" instead of the parent reading
    a huge file). A missing file reads as ``b""`` (the child never opened its channel).
    """
    import os  # why: only the parent's channel reader needs it
    import stat  # why: as above

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return b""
    except OSError as exc:  # a symlink (ELOOP), a permission trick, ...
        raise CodecError(f"cannot read the operand channel {path}: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CodecError(f"the operand channel {path} is not a regular file")
        chunks: list[bytes] = []
        size = 0
        while size <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


__all__ = [
    "CodecError",
    "Encoder",
    "FrameWriter",
    "encode",
    "decode",
    "decode_stream",
    "read_capped",
    "DEFAULT_MAX_BYTES",
    "MAX_DEPTH",
]
