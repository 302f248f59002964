"""The restricted data codec (sandbox/codec.py): exact round trips, caps, and hostile bytes."""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
import sympy

from pytest_agentbench.sandbox import codec
from pytest_agentbench.sandbox.codec import CodecError, Encoder, FrameWriter, decode, decode_stream, encode

X = sympy.Symbol("x", real=True)
Y = sympy.Symbol("y")


def roundtrip(value, **kw):
    return decode(encode(value, **kw), **kw)


def same(a, b) -> bool:
    """Equal *and* of exactly the same types, all the way down."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        if a.dtype != b.dtype or a.shape != b.shape or type(a) is not type(b):
            return False
        if a.dtype == object:
            return all(same(x, y) for x, y in zip(a.ravel(), b.ravel()))
        return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    if isinstance(a, np.generic):
        return a.dtype == b.dtype and (a == b or (a != a and b != b))
    if sp.issparse(a):
        return (
            a.format == b.format
            and a.dtype == b.dtype
            and a.shape == b.shape
            and np.array_equal(a.toarray(), b.toarray())
        )
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b) or (math.isnan(a) and math.isnan(b))
    if isinstance(a, complex):
        return same(a.real, b.real) and same(a.imag, b.imag)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return (
            list(a) == list(b)
            and all(same(a[k], b[k]) for k in a)
            and all(type(k1) is type(k2) for k1, k2 in zip(a, b))
        )
    if isinstance(a, (sympy.Basic, sympy.MatrixBase)):
        return a == b and sympy.srepr(a) == sympy.srepr(b)
    return a == b


SCALARS = [
    None,
    True,
    False,
    0,
    -5,
    2**300,
    -(3**200),
    1.5,
    -0.0,
    float("inf"),
    float("-inf"),
    float("nan"),
    5e-324,
    1 + 2j,
    complex(float("nan"), -0.0),
    "",
    "héllo \u2603 \U0001f600",
    "lone \ud800 surrogate",
    b"",
    b"\x00\xffab",
    bytearray(b"q"),
]
NUMPY = [
    np.arange(12.0).reshape(3, 4),
    np.array([True, False]),
    np.arange(6).reshape(2, 3).T,
    np.array([1, 2], dtype=">i4"),
    np.array([1.5], dtype=np.float16),
    np.array([1 + 1j], dtype=np.complex64),
    np.array([1.1], dtype=np.longdouble),
    np.array(["ab", "c"]),
    np.array([b"x", b"yz"]),
    np.array(["2020-01-01"], dtype="datetime64[D]"),
    np.array([3], dtype="timedelta64[s]"),
    np.empty((0, 3)),
    np.zeros((2, 0, 4), dtype=np.uint8),
    np.array(7.0),
    np.array([np.nan, -np.inf]),
    np.array([[1, 2], [3]], dtype=object),
    np.array([None, "a", (1, 2)], dtype=object),
    np.float64(1.5),
    np.float32(1.5),
    np.bool_(True),
    np.bool_(False),
    np.int8(-3),
    np.uint64(2**63),
    np.complex128(1j),
    np.longdouble(1.1),
    np.str_("abc"),
    np.bytes_(b"ab"),
    np.datetime64("2020-01-01"),
    np.float64("nan"),
]
SPARSE = [
    sp.csr_matrix(np.eye(3)),
    sp.csc_matrix(np.arange(6.0).reshape(2, 3)),
    sp.coo_matrix(([1.0, 2.0], ([0, 1], [2, 0])), shape=(2, 3)),
    sp.bsr_matrix(np.ones((4, 4)), blocksize=(2, 2)),
    sp.dia_matrix(np.eye(3)),
    sp.lil_matrix(np.eye(2)),
    sp.dok_matrix(np.eye(2)),
    sp.csr_array(np.eye(2)),
    sp.coo_array(np.eye(2)),
    sp.dok_array(np.eye(2)),
    sp.kron(sp.csr_matrix([[0, 1], [1, 0]]), sp.identity(2), format="csr"),
    sp.kron(sp.csr_matrix([[0.5, 0], [0, -0.5]]), sp.identity(2)),  # scipy's default format: bsr
    sp.csr_matrix((2, 2), dtype=complex),
]
SYMPY = [
    X,
    Y,
    sympy.Symbol("n", integer=True, positive=True),
    sympy.Integer(5),
    sympy.Integer(-(2**100)),
    sympy.Rational(1, 3),
    sympy.Float("0.1", 30),
    sympy.Float(2.5),
    sympy.Float(0),
    sympy.pi,
    sympy.E,
    sympy.I,
    sympy.oo,
    -sympy.oo,
    sympy.zoo,
    sympy.nan,
    sympy.S.Half,
    sympy.S.true,
    sympy.sin(X) ** 2 + sympy.Rational(1, 3) * Y - sympy.pi * sympy.I + sympy.Float("1.5"),
    sympy.sqrt(2) * sympy.exp(-(X**2)) / (1 + Y),
    sympy.Piecewise((X, X > 1), (Y, True)),
    sympy.Eq(X, Y),
    sympy.And(X > 1, Y < 2),
    sympy.Abs(X - Y),
    sympy.Max(X, 3),
    sympy.Tuple(1, X),
    sympy.Matrix([[X, 1], [2, Y]]),
    sympy.ImmutableMatrix([[X]]),
]
CONTAINERS = [
    [1, (2, 3)],
    (1,),
    (),
    [],
    {},
    {1: 2, "a": [3], (1, 2): None, 2.5: "x", None: 0, b"k": 1},
    {X: 1.0, Y: 2.0},
    {"e": X, "f": sympy.Symbol("e_21")},
    {1, 2, "a"},
    frozenset({"a", (1, 2)}),
    {np.float64(1.0): "np key"},
    [np.float64(1.0), np.array([1, 2]), (np.bool_(True), True)],
    ({"H": sp.csr_matrix(np.eye(2)), "conn_Sz": sp.kron(np.eye(2), sp.csr_matrix([[0.5, 0], [0, -0.5]]))},),
]


def stable_id(value) -> str:
    """A test id that is the same in every process (a set's repr follows hash randomization)."""
    if isinstance(value, (set, frozenset)):
        return f"{type(value).__name__}({sorted(map(repr, value))})"
    return repr(value)


@pytest.mark.parametrize("value", SCALARS + NUMPY + SPARSE + SYMPY + CONTAINERS, ids=stable_id)
def test_round_trip_keeps_value_and_exact_type(value):
    back = roundtrip(value)
    assert same(back, value), (value, back)


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.asmatrix, on purpose
def test_subclasses_of_builtins_cross_as_their_base_type_and_matrix_as_matrix():
    import collections
    import enum

    Point = collections.namedtuple("Point", "x y")

    class Level(enum.IntEnum):
        HIGH = 3

    class Liar(float):
        def __eq__(self, other):
            return True

    for value, base in [
        (Point(1, 2), (1, 2)),
        (collections.Counter("aab"), {"a": 2, "b": 1}),
        (collections.OrderedDict(b=1, a=2), {"b": 1, "a": 2}),
        (Level.HIGH, 3),
        (collections.defaultdict(list, k=[1]), {"k": [1]}),
        (Liar(2.5), 2.5),
    ]:
        back = roundtrip(value)
        assert same(back, base), (value, back)
    assert roundtrip(Liar(2.5)) != 3.0  # its own __eq__ stayed in the child
    matrix = np.asmatrix(np.arange(4.0).reshape(2, 2))
    assert same(roundtrip(matrix), matrix) and type(roundtrip(matrix)) is np.matrix


def test_decoded_arrays_are_writable_copies():
    back = roundtrip(np.arange(4))
    back[0] = 9  # np.frombuffer alone would give a read-only view of the frame
    assert back.flags.owndata or back.base is not None


def test_a_symbol_keyed_dict_compares_as_upstream():
    # 17.1: (names -> symbols, symbols -> values) against targets whose symbols are strings
    from pytest_agentbench.benchmarks.scicode.compare import cmp_tuple_or_list

    e = {f"e_{j}{i}": sympy.Symbol(f"e_{j}{i}") for i in range(2) for j in range(2)}
    values = {e[k]: float(n) for n, k in enumerate(e)}
    back = roundtrip((e, values))
    assert all(type(k) is sympy.Symbol for k in back[1])
    target = ({k: k for k in e}, {k: float(n) for n, k in enumerate(e)})
    assert cmp_tuple_or_list(back, target)
    assert not cmp_tuple_or_list(back, (target[0], {**target[1], "e_00": 7.0}))


# ---- refusals while encoding ---------------------------------------------------------------------
class Thing:
    pass


@pytest.mark.parametrize(
    "value, named",
    [
        (Thing(), "Thing"),
        (lambda: 1, "function"),
        (np.ma.array([1]), "numpy.ma.MaskedArray"),
        (np.zeros(2, dtype=[("a", "i4")]), "dtype"),
        (sympy.Function("f")(X), "sympy"),
        (range(3), "range"),
        ([1, {2: Thing()}], "Thing"),
        (np.array([Thing()], dtype=object), "Thing"),
        (np.rec.array([(1,)]), "recarray"),
        (sympy.Dummy("d"), "Dummy"),
        (type, "type"),
    ],
)
def test_unencodable_values_name_their_type(value, named):
    with pytest.raises(CodecError, match="cannot encode") as err:
        encode(value)
    assert named in str(err.value)


def test_nesting_deeper_than_the_cap_is_refused_on_both_sides():
    deep = []
    for _ in range(codec.MAX_DEPTH + 1):
        deep = [deep]
    with pytest.raises(CodecError, match="nests deeper than 100 levels"):
        encode(deep)
    ok = []
    for _ in range(codec.MAX_DEPTH):
        ok = [ok]
    assert same(roundtrip(ok), ok)
    frame = encode(ok)
    with pytest.raises(CodecError, match="nests deeper than 10 levels"):
        decode(frame, max_depth=10)
    expr = X
    for _ in range(codec.MAX_DEPTH + 1):
        expr = sympy.sin(expr, evaluate=False)
    with pytest.raises(CodecError, match="nests deeper"):
        encode(expr)


def test_the_byte_cap_counts_every_value_of_a_step():
    enc = Encoder(max_bytes=10_000)
    enc.encode(np.zeros(500))  # 4000 bytes of payload
    enc.encode(np.zeros(500))
    with pytest.raises(CodecError, match=r"exceed the cap of 10000 bytes per step"):
        enc.encode(np.zeros(500))
    used = enc.used
    enc.encode(1.0)  # a refused value consumed nothing
    assert enc.used > used
    with pytest.raises(CodecError, match="exceed the cap"):
        encode("x" * 200, max_bytes=100)
    with pytest.raises(CodecError, match="exceed the cap"):
        encode(list(range(50)), max_bytes=100)
    with pytest.raises(CodecError, match=r"exceed the cap of 268435456 bytes per step \(256 MiB\)"):
        Encoder().encode(np.broadcast_to(np.zeros(1), (33 * (1 << 20),)))  # 264 MiB, never materialised
    assert codec.DEFAULT_MAX_BYTES == 256 * (1 << 20)


def test_a_sparse_matrix_too_big_to_densify_is_refused():
    huge = sp.csr_matrix(([1.0], ([0], [0])), shape=(1 << 20, 1 << 20))
    frame = encode(huge)  # small on the wire...
    with pytest.raises(CodecError, match="once densified"):
        decode(frame)  # ...but the comparison helpers would call toarray()


# ---- hostile bytes ------------------------------------------------------------------------------
def frame(header, buffer: bytes = b"") -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<4sQQ", codec.MAGIC, len(text), len(buffer)) + text + buffer


GOOD = encode({"a": np.arange(10.0), "b": [1, 2.5, "s"], "c": X + 1})


@pytest.mark.parametrize("cut", [0, 3, 19, 20, 30, len(GOOD) - 1])
def test_truncated_frames_are_refused(cut):
    with pytest.raises(CodecError):
        decode(GOOD[:cut])


@pytest.mark.parametrize(
    "data, match",
    [
        (b"XXXX" + GOOD[4:], "bad magic"),
        (GOOD + b"\x00", "trailing data"),
        (struct.pack("<4sQQ", codec.MAGIC, 1 << 62, 0), "oversized"),
        (struct.pack("<4sQQ", codec.MAGIC, 4, 1 << 40) + b'["n"]', "oversized"),
        (frame(["a", "<f8", [10], 0, 80], b"\x00" * 40), "outside the 40-byte buffer"),
        (frame(["a", "<f8", [10], 0, 40], b"\x00" * 40), "needs 80 bytes"),
        (frame(["a", "<f8", [1 << 40, 1 << 40], 0, 8], b"\x00" * 8), "needs"),
        (frame(["a", "<f8", [-1], 0, 8], b"\x00" * 8), "malformed shape"),
        (frame(["a", "|O", [1], 0, 8], b"\x00" * 8), "not a plain numpy dtype"),
        (frame(["a", "V8", [1], 0, 8], b"\x00" * 8), "not a plain numpy dtype"),
        (frame(["a", "<f8", [1], -8, 8], b"\x00" * 8), "outside"),
        (frame(["a", "<f8", [1], True, 8], b"\x00" * 8), "outside"),
        (frame(["g", "<f8", 0, 4], b"\x00" * 8), "needs 8 bytes"),
        (frame(["A", [3], [["n"]]]), "needs 3 elements"),
        (frame(["i", "12z"]), "malformed int"),
        (frame(["f", "not-a-float"]), "malformed float"),
        (frame(["b", 2]), "malformed bool"),
        (frame(["q"]), "unknown node tag"),
        (frame({"n": 1}), "malformed node"),
        (frame(["l", [["n"], ["n", 1]]]), "malformed None"),
        (frame(["d", [[["l", []], ["n"]]]]), "not hashable"),
        (frame(["e", [["a", "<f8", [1], 0, 8]]], b"\x00" * 8), "not hashable"),
        (frame(["y", 0, 5], b"abc"), "outside"),
        (frame(["s", 5]), "malformed str"),
        (b"ABv1" + struct.pack("<QQ", 3, 0) + b"\xff\xfe[", "malformed frame header"),
        (frame(["z", ["Function", [["Symbol", "x", {}]]]]), "unknown sympy class 'Function'"),
        (frame(["z", ["eval", []]]), "unknown sympy class 'eval'"),
        (frame(["z", ["__import__", [["Symbol", "os", {}]]]]), "unknown sympy class"),
        (frame(["z", ["Symbol", "x", {"evil": True}]]), "unknown Symbol assumption"),
        (frame(["z", ["Symbol", "x", {"positive": True, "negative": True}]]), "malformed value"),
        (frame(["z", ["Rational", "1", "0"]]), "denominator 0"),
        (frame(["z", ["Rational", "f" * 30_000, "3"]]), "more than 20000 hex digits"),
        (frame(["z", ["Float", 0, "5", 0, 3, 10**9]]), "malformed Float"),
        (frame(["z", ["Float", 0, "5", 0, 9, 53]]), "bit count"),
        (frame(["z", ["MutableDenseMatrix", 2, 2, [["Zero"]]]]), "malformed MutableDenseMatrix"),
        (
            frame(
                [
                    "p",
                    "csr_matrix",
                    [2, 2],
                    {
                        "data": ["a", "<f8", [1], 0, 8],
                        "indices": ["a", "<i8", [1], 8, 8],
                        "indptr": ["a", "<i8", [3], 16, 24],
                    },
                ],
                struct.pack("<d", 1.0) + struct.pack("<q", 99) + struct.pack("<3q", 0, 1, 1),
            ),
            "outside the shape",
        ),
        (
            frame(
                [
                    "p",
                    "csr_matrix",
                    [2, 2],
                    {
                        "data": ["a", "<f8", [1], 0, 8],
                        "indices": ["a", "<i8", [1], 8, 8],
                        "indptr": ["a", "<i8", [3], 16, 24],
                    },
                ],
                struct.pack("<d", 1.0) + struct.pack("<q", 0) + struct.pack("<3q", 0, 5, 1),
            ),
            "indptr",
        ),
        (
            frame(
                [
                    "p",
                    "coo_matrix",
                    [2, 2],
                    {"data": ["a", "<f8", [1], 0, 8], "row": ["a", "<i8", [1], 8, 8], "col": ["a", "<i8", [1], 16, 8]},
                ],
                struct.pack("<d", 1.0) + struct.pack("<q", -1) + struct.pack("<q", 0),
            ),
            "outside the shape",
        ),
        (frame(["p", "evil_matrix", [2, 2], {}]), "unknown sparse class"),
        (frame(["p", "csr_matrix", [2, 2], {"data": ["n"]}]), "needs the parts"),
    ],
)
def test_malicious_frames_raise_codec_error(data, match):
    with pytest.raises(CodecError, match=match):
        decode(data)


def test_deeply_nested_json_is_refused_without_crashing():
    for depth in (101, 5000, 200_000):
        header = b'["l",[' * depth + b'["n"]' + b"]]" * depth
        data = b"ABv1" + struct.pack("<QQ", len(header), 0) + header
        with pytest.raises(CodecError, match="nests deeper"):
            decode(data)


def test_a_huge_announced_int_is_refused():
    header = b'["a","<f8",[' + b"9" * 5000 + b"],0,0]"
    with pytest.raises(CodecError):
        decode(b"ABv1" + struct.pack("<QQ", len(header), 0) + header)


def test_random_garbage_never_escapes_as_another_exception():
    rng = np.random.default_rng(0)
    for _ in range(300):
        data = bytearray(GOOD)
        for _ in range(rng.integers(1, 6)):
            data[rng.integers(0, len(data))] = rng.integers(0, 256)
        try:
            decode(bytes(data))
        except CodecError:
            pass


def test_decoding_never_runs_code(tmp_path):
    flag = tmp_path / "ran"
    attempts = [
        frame(["z", ["Symbol", f"__import__('os').system('touch {flag}')", {}]]),
        frame(["s", f"__import__('os').system('touch {flag}')"]),
    ]
    for data in attempts:
        value = decode(data)
        str(value), repr(value), hash(value)
    assert not flag.exists()


# ---- streams and the child's writer ---------------------------------------------------------------
def test_a_stream_decodes_frame_by_frame_and_reports_a_cut():
    frames = [encode(("t", 1)), encode(("v", 1, 1, 1, np.arange(3))), encode(("z", 1))]
    values, error = decode_stream(b"".join(frames))
    assert error is None and len(values) == 3 and same(values[1][4], np.arange(3))
    values, error = decode_stream(b"".join(frames)[:-3])
    assert len(values) == 2 and "truncated" in str(error)
    values, error = decode_stream(b"".join(frames), max_bytes=10)
    assert values == [] and "over the cap" in str(error)


def test_the_writer_in_a_child_that_has_only_the_standard_library(tmp_path):
    """The child loads the codec by file path; a value made without numpy needs no numpy."""
    out = tmp_path / "frames.bin"
    script = f"""
import importlib.util, sys
spec = importlib.util.spec_from_file_location("c", {codec.__file__!r})
c = importlib.util.module_from_spec(spec); spec.loader.exec_module(c)
w = c.FrameWriter({str(out)!r}, max_bytes=1000)
w.send((1, 2.5, "x", [None, True], {{"k": b"v"}}))
try:
    w.send("y" * 5000)
except c.CodecError as e:
    w.send(str(e))
assert "numpy" not in sys.modules and "sympy" not in sys.modules
"""
    subprocess.run([sys.executable, "-I", "-c", script], check=True)
    values, error = decode_stream(out.read_bytes())
    assert error is None
    assert values[0] == (1, 2.5, "x", [None, True], {"k": b"v"}) and "exceed the cap of 1000 bytes" in values[1]


def test_frame_writer_to_a_descriptor(tmp_path):
    path = tmp_path / "fd.bin"
    with open(path, "wb") as fh:
        writer = FrameWriter(fh.fileno())
        writer.send([1, 2])
        writer.write_frame(encode("control"))
    values, error = decode_stream(path.read_bytes())
    assert values == [[1, 2], "control"] and error is None


def test_the_parent_reads_a_channel_file_safely(tmp_path):
    good = tmp_path / "operands.bin"
    good.write_bytes(b"x" * 100)
    assert codec.read_capped(good, 1000) == b"x" * 100
    assert codec.read_capped(good, 10) == b"x" * 11  # one byte over: decode_stream then says "over the cap"
    assert codec.read_capped(tmp_path / "missing.bin", 10) == b""
    secret = tmp_path / "secret"
    secret.write_text("targets")
    (tmp_path / "link.bin").symlink_to(secret)
    with pytest.raises(CodecError, match="cannot read the operand channel"):
        codec.read_capped(tmp_path / "link.bin", 1000)
    fifo = tmp_path / "fifo.bin"
    os.mkfifo(fifo)
    with pytest.raises(CodecError, match="not a regular file"):
        codec.read_capped(fifo, 1000)  # never blocks waiting for a writer
