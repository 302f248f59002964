"""The trusted side of a SciCode step's scoring: the parent's verdict on what the child sent.

The child (``child/runtime.py``, next to the model's code) sends operand values as frames; here, in the
trusted process that holds the targets, :func:`read_stream` checks every frame against the plan
(:mod:`.plan`, built by :mod:`.split` from the test text alone) and :func:`evaluate` runs each test's parent
side: the statements of the test text it owns, each assertion on the decoded operands, ``target`` and the
operands it computes itself, with genuine numpy (:func:`parent_numpy`) and the comparison helpers of
:mod:`.compare`. A traced helper's calls into the model's objects are answered from the child's record
(:func:`replay`), after checking each is the recorded call (:class:`ReplayMismatch`). The decoding and the
comparisons run in a forked copy of this process bounded in time and memory (``sandbox.integrity``). A
step passes only when every test's every assertion holds here.

An operand that raised in the child fails its test only if the parent needs its value (as a
short-circuited operand upstream is never evaluated).
"""

from __future__ import annotations

import builtins
import cmath
import dataclasses
import importlib
import importlib.util
import math
import types
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...sandbox import codec
from ...sandbox.integrity import Bounded, run_bounded
from ...sandbox.limits import GiB, Limits
from .child.runtime import HANDLE_MARK
from .plan import (
    CMP_HELPERS,
    LEAF_FN,
    REPLAY_FN,
    TARGET,
    AssertPlan,
    FunctionScope,
    Leaf,
    MixedStatement,
    ParentStatement,
    StepPlan,
    TestPlan,
    TrustedStatement,
    short,
)


@dataclass(frozen=True)
class Failure:
    test: int  # 1-based
    kind: str  # see FAILURE_KINDS
    message: str  # ready for a record; ends with "(test N of M)"


FAILURE_KINDS = {
    "assertion": "an assertion is false in the parent",
    "operand_error": "evaluating an operand the parent needs raised in the child",
    "unencodable": "an operand the parent needs could not be encoded",
    "error": "evaluating the assertion (or a statement of the test text) raised in the parent",
    "stopped": "the child stopped (crash, exit, limit) before the test's end",
    "protocol": "the child's operand data is malformed",
    "limit": "the parent's comparisons ran over their time or memory limit",
}


@dataclass(frozen=True)
class StepOutcome:
    passed: bool
    tests: int  # tests in the step
    tests_passed: int  # tests passed in a row from the first
    failure: Failure | None = None
    stream_error: str | None = None  # the stream ended inside a frame or was over its cap
    # model-independent inputs the child noted as changed in place by a model call (the parent computed
    # from its own copies): a note of where the verdict may differ from upstream's, never part of it
    inputs_mutated: tuple[str, ...] = ()

    @property
    def message(self) -> str:
        return self.failure.message if self.failure else ""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StepOutcome:
        failure = data.get("failure")
        return cls(
            passed=bool(data["passed"]),
            tests=int(data["tests"]),
            tests_passed=int(data["tests_passed"]),
            failure=Failure(**failure) if failure else None,
            stream_error=data.get("stream_error"),
            inputs_mutated=tuple(data.get("inputs_mutated", ())),
        )


class _OperandError(Exception):
    def __init__(self, kind: str, text: str, leaf: Leaf) -> None:
        super().__init__(text)
        self.kind = kind
        self.text = text
        self.leaf = leaf


@dataclass
class _Received:
    started: set[int] = field(default_factory=set)
    operands: dict[tuple[int, int, int], tuple[str, Any]] = field(default_factory=dict)  # (t, a, k) -> (tag, payload)
    reached: set[tuple[int, int]] = field(default_factory=set)
    ended: set[int] = field(default_factory=set)
    notes: dict[int, list[str]] = field(default_factory=dict)  # test -> names noted as changed in place, in order

    def inputs_mutated(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(name for test in sorted(self.notes) for name in self.notes[test]))


class BroadcastMismatch(Exception):
    """A comparison whose two operands broadcast to a shape with another number of elements than the larger
    of them: an empty array (numpy calls it close to anything: the broadcast is empty, and ``all`` of
    nothing is True, so code returning ``np.empty((0, 1))`` would pass every ``np.allclose(x, target)``),
    or a small array that blows up against the target (``(8000, 1, 1)`` against ``(10001, 2)``). Genuine
    code returns the target's shape. Not a ValueError: the helpers of compare.py fall back to ``==`` on those."""


# numpy's comparisons that broadcast their two operands: checked in the parent (BroadcastMismatch)
GUARDED_NUMPY = ("allclose", "isclose", "array_equiv")


def _guarded(function: Callable[..., Any], label: str, numpy: Any) -> Callable[..., Any]:
    def compare(a: Any, b: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            shapes = (numpy.shape(a), numpy.shape(b))
            joint = numpy.broadcast_shapes(*shapes)
        except Exception:  # ragged, odd or incompatible values: numpy itself decides, as upstream
            return function(a, b, *args, **kwargs)
        sizes = [math.prod(shape) for shape in shapes]
        if math.prod(joint) != max(sizes):
            why = "an empty operand is close to anything" if 0 in sizes else "larger than either"
            raise BroadcastMismatch(
                f"{label} compared shapes {shapes[0]} and {shapes[1]}, which broadcast to {joint}: {why}"
            )
        return function(a, b, *args, **kwargs)

    compare.__name__ = compare.__qualname__ = function.__name__
    return compare


def parent_numpy() -> types.ModuleType:
    """numpy as the parent's comparisons see it: genuine, but ``allclose``/``isclose``/``array_equiv`` refuse
    operands that broadcast to another number of elements than the larger one has (:class:`BroadcastMismatch`).
    A fresh module object per call."""
    import numpy  # why: only the parent's evaluation needs numpy; building plans and scripts does not

    guarded = types.ModuleType("numpy", numpy.__doc__)
    guarded.__dict__.update(vars(numpy))
    for name in GUARDED_NUMPY:
        setattr(guarded, name, _guarded(getattr(numpy, name), f"np.{name}", numpy))
    return guarded


def parent_compare(numpy_module: types.ModuleType) -> types.ModuleType:
    """A fresh copy of compare.py whose helpers compare with ``numpy_module`` (``cmp_tuple_or_list`` and
    ``are_dicts_close`` call ``np.allclose`` element by element)."""
    from . import compare  # why: it imports numpy at its top

    spec = importlib.util.spec_from_file_location("agentbench_parent_compare", compare.__file__)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {compare.__file__}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.__dict__["np"] = numpy_module  # its helpers read the global np
    return module


def parent_namespace() -> dict[str, Any]:
    """A fresh namespace for a step's parent side: numpy (:func:`parent_numpy`), math, cmath and the cmp
    helpers."""
    numpy = parent_numpy()
    compare = parent_compare(numpy)
    ns: dict[str, Any] = {
        "__builtins__": builtins,
        "__name__": "agentbench_parent",
        "np": numpy,
        "numpy": numpy,
        "math": math,
        "cmath": cmath,
    }
    for name in CMP_HELPERS:
        ns[name] = getattr(compare, name)
    ns[REPLAY_FN] = replay
    return ns


class ReplayMismatch(Exception):
    """The child's record of a traced helper's calls into the model's objects does not match the calls the
    helper makes when the parent runs it: the child ran other code than the test text's."""


class _Record:
    """The child's record of one traced helper's run, consumed in order by the parent's run of it."""

    def __init__(self, events: Any) -> None:
        if type(events) is not list or not all(type(e) is tuple and e and type(e[0]) is str for e in events):
            raise ReplayMismatch("the record of the model's calls is malformed")
        self.events: list[tuple[Any, ...]] = events
        self.position = 0

    def take(self, kind: str, *ids: Any) -> Any:
        """The result of the next recorded event, which must be ``kind`` with ``ids``."""
        if self.position >= len(self.events):
            raise ReplayMismatch(
                f"the helper made more calls into the model's objects than the child recorded "
                f"({len(self.events)} events)"
            )
        event = self.events[self.position]
        self.position += 1
        if (
            len(event) != 2 + len(ids)
            or event[0] != kind
            or any(type(got) is not type(want) or got != want for got, want in zip(event[1:-1], ids))
        ):
            raise ReplayMismatch(
                f"event {self.position} of the child's record is {short(repr(event[:-1]), 120)}, "
                f"the helper made {short(repr((kind, *ids)), 120)}"
            )
        return self.result(event[-1])

    def result(self, tag: Any) -> Any:
        if type(tag) is tuple and len(tag) == 2 and tag[0] == "d" and type(tag[1]) is bytes:
            return codec.decode(tag[1])
        if type(tag) is tuple and len(tag) == 2 and tag[0] == "h" and type(tag[1]) is int:
            return _Handle(self, tag[1])
        raise ReplayMismatch(f"malformed result in the child's record: {short(repr(tag), 120)}")


class _Handle:
    """One of the model's objects (or functions), as the parent's run of a traced helper sees it: reading an
    attribute or calling it answers from the child's record, after checking it is the recorded event (the
    arguments compared as their encodings, bit for bit)."""

    __slots__ = ("_handle", "_record")

    def __init__(self, record: _Record, handle: int) -> None:
        self._record = record
        self._handle = handle

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # protocol lookups (numpy's __array__ ...) are not calls into the model
            raise AttributeError(name)
        return self._record.take("get", self._handle, name)

    def __bool__(self) -> bool:
        raise TypeError("the truth of one of the model's objects is not data the test can compare")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        def mark(value: Any) -> Any:
            return (HANDLE_MARK, value._handle) if type(value) is _Handle else value

        data = codec.encode((tuple(mark(a) for a in args), {n: mark(v) for n, v in kwargs.items()}))
        return self._record.take("call", self._handle, data)


def replay(
    events: Any,
    fn: Any,
    args: list[Any],
    kwargs: dict[str, Any],
    keys: tuple[int | str, ...],
    names: tuple[str, ...],
    modules: tuple[str, ...] = (),
) -> Any:
    """The parent's run of a traced helper ``fn`` (the test text's own function, defined in the parent):
    the arguments at ``keys`` and the globals ``names`` are the child's (data decoded from the record, or
    handles of the model's objects), the globals ``modules`` the parent's own modules; the helper's logic runs
    here with genuine numpy and builtins, and every call into the model's objects is answered from the record.
    A record that does not match (other calls, other arguments, too few calls) fails the assertion
    (:class:`ReplayMismatch`)."""
    record = _Record(events)
    if type(fn) is not types.FunctionType:
        raise ReplayMismatch(f"{fn!r} is not the test's function")
    args, kwargs = list(args), dict(kwargs)
    for key in keys:
        where: Any = args if type(key) is int else kwargs
        where[key] = record.take("arg", key)
    scope = dict(fn.__globals__)
    for name in names:
        scope[name] = record.take("global", name)
    for name in modules:
        scope[name] = importlib.import_module(name)
    run = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    run.__kwdefaults__ = fn.__kwdefaults__
    # events left over are not checked: the parent's own run decides (72.1's helper returns at the first
    # neighbour list that differs in the parent, where a child's copy of it may have gone on)
    return run(*args, **kwargs)


def read_stream(
    stream: bytes, plan: StepPlan, *, max_bytes: int = codec.DEFAULT_MAX_BYTES
) -> tuple[_Received, str | None, str | None]:
    """Decode and check the child's frames: ``(received, stream_error, protocol_error)``."""
    frames, error = codec.decode_stream(stream, max_bytes=plan.stream_cap(max_bytes))
    stream_error = str(error) if error else None
    received = _Received()
    shape = {test.number: {a.number: len(a.leaves) for a in test.evaluated} for test in plan.tests}
    watched = {test.number: (set().union(*test.watched), test.notes()) for test in plan.tests}

    def bad(frame: Any, why: str) -> tuple[_Received, str | None, str | None]:
        return received, stream_error, f"{why}: {short(repr(frame), 120)}"

    for frame in frames:
        if type(frame) is not tuple or not frame or type(frame[0]) is not str:
            return bad(frame, "a frame is not a tagged tuple")
        tag, ids = frame[0], frame[1:]
        arity = {"t": 1, "z": 1, "a": 2, "v": 4, "e": 4, "x": 4, "m": 2}.get(tag)
        if arity is None or len(ids) != arity:
            return bad(frame, "unknown frame")
        numbers = ids[:3] if tag in "vex" else ids[:1] if tag == "m" else ids
        if any(type(n) is not int for n in numbers):
            return bad(frame, "frame ids must be ints")
        test = numbers[0]
        if test not in shape:
            return bad(frame, "no such test")
        if tag == "m":
            names, most = watched[test]
            notes = received.notes.setdefault(test, [])
            if type(ids[1]) is not str or ids[1] not in names or len(notes) >= most:
                return bad(frame, "no such input to note")
            notes.append(ids[1])
            continue
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
        elif tag == "a":
            received.reached.add((test, numbers[1]))
        else:
            (received.started if tag == "t" else received.ended).add(test)
    return received, stream_error, None


def evaluate(
    plan: StepPlan,
    stream: bytes,
    targets: Sequence[Any],
    *,
    max_bytes: int = codec.DEFAULT_MAX_BYTES,
    limits: Limits | None = None,
) -> StepOutcome:
    """Evaluate every test's assertions in a trusted process, bounded by ``limits`` (its timeout and
    memory: by default those of a step, ``Limits()``).

    ``stream`` is everything the child wrote to its channel, ``targets`` one value per test (from the
    h5). The operands are hostile data within the operand cap (arrays that broadcast to huge ones,
    structures that make a comparing helper slow): the decoding and the comparisons run in a forked
    copy of this process with a time limit and a memory budget, which hands back only the outcome.
    Running over either fails the step with the reason. No model code ever runs there: operands are
    data, and the statements it runs are the test text's own."""
    n = len(plan.tests)
    if len(targets) < n:
        raise ValueError(f"step {plan.step}: {len(targets)} targets for {n} tests")
    limits = limits or Limits()
    parent_namespace()  # numpy and the helpers imported once here, not in every bounded copy

    def work(report: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        return evaluate_here(plan, stream, targets, max_bytes=max_bytes, progress=report).to_json()

    bounded = run_bounded(work, timeout=limits.timeout, memory=limits.memory)
    if bounded.ended == "ok":
        return StepOutcome.from_json(bounded.result)
    return _over_limit(bounded, limits, n)


def _over_limit(bounded: Bounded, limits: Limits, n: int) -> StepOutcome:
    """The outcome of a bounded evaluation that did not finish: the test it was in fails with the reason."""
    test = max([r["test"] for r in bounded.reports if isinstance(r.get("test"), int)] or [1])
    where = f"(test {test} of {n})"
    if bounded.ended == "time":
        what = f"comparisons exceeded the time limit of {limits.timeout:g} s (--bench-timeout)"
    elif bounded.ended == "memory":
        what = (
            f"comparisons exceeded the memory limit of {limits.memory / GiB:g} GiB (--bench-set memory_limit)"
            if limits.memory
            else "comparisons ran out of memory"
        )
    elif bounded.ended == "error":
        what = f"comparisons failed: {bounded.why}"
    else:
        what = f"comparisons ended without a verdict ({bounded.ended})"
    return StepOutcome(False, n, test - 1, Failure(test, "limit", f"{what} {where}"))


def evaluate_here(
    plan: StepPlan,
    stream: bytes,
    targets: Sequence[Any],
    *,
    max_bytes: int = codec.DEFAULT_MAX_BYTES,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> StepOutcome:
    """:func:`evaluate` without its bounds, in this process (``progress({"test": k})`` as each test starts).

    Tests run in order in one namespace; the first failing test ends the evaluation, as upstream's
    script stops at the first failing assert. A MemoryError is not a test's failure: it propagates."""
    import numpy  # why: only the parent's evaluation needs numpy; building plans and scripts does not

    n = len(plan.tests)
    if len(targets) < n:
        raise ValueError(f"step {plan.step}: {len(targets)} targets for {n} tests")
    received, stream_error, protocol = read_stream(stream, plan, max_bytes=max_bytes)
    if protocol is not None:
        return StepOutcome(
            False,
            n,
            0,
            Failure(1, "protocol", f"the scoring process sent malformed operand data ({protocol})"),
            stream_error,
        )
    ns = parent_namespace()
    for test in plan.tests:
        if progress is not None:
            progress({"test": test.number})
        where = f"(test {test.number} of {n})"
        failure = None
        ns[TARGET] = targets[test.number - 1]
        with warnings.catch_warnings(), numpy.errstate(divide="warn", over="warn", under="ignore", invalid="warn"):
            warnings.simplefilter("ignore")
            if test.number not in received.started:
                failure = Failure(
                    test.number, "stopped", f"the scoring process stopped before test {test.number} {where}"
                )
            else:
                failure = _run_parts(test.parent, test, received, ns, where)
            if failure is None and test.number not in received.ended:
                failure = Failure(
                    test.number,
                    "stopped",
                    f"the scoring process stopped after the last assertion of test {test.number} {where}",
                )
        if failure is not None:
            return StepOutcome(False, n, test.number - 1, failure, stream_error, received.inputs_mutated())
    return StepOutcome(True, n, n, None, stream_error, received.inputs_mutated())


def _run_parts(
    parts: Sequence[Any], test: TestPlan, received: _Received, ns: dict[str, Any], where: str
) -> Failure | None:
    for part in parts:
        if isinstance(part, FunctionScope):
            failure = _run_parts(part.parts, test, received, dict(ns), where)  # its locals stay local
        elif isinstance(part, (AssertPlan, MixedStatement)):
            failure = _run_assert(part, test, received, ns, where)
        else:
            failure = _run_statement(part, test, ns, where)
        if failure is not None:
            return failure
    return None


def _run_statement(
    part: ParentStatement | TrustedStatement, test: TestPlan, ns: dict[str, Any], where: str
) -> Failure | None:
    t = test.number
    try:
        exec(compile(part.source, f"<test {t}>", "exec"), ns)
    except MemoryError:
        raise
    except Exception as exc:
        if isinstance(part, TrustedStatement):  # the test text itself raised: so does the child, as upstream
            return Failure(t, "error", f"{_exception_text(exc)} (in `{short(part.source, 120)}`) {where}")
        return Failure(t, "error", f"{_exception_text(exc)} {where}")
    return None


def _run_assert(
    part: AssertPlan | MixedStatement, test: TestPlan, received: _Received, ns: dict[str, Any], where: str
) -> Failure | None:
    t = test.number
    statement = isinstance(part, MixedStatement)
    if (t, part.number) not in received.reached:
        what = f"`{short(part.source, 120)}`" if statement else f"assertion {part.number}"
        return Failure(t, "stopped", f"the scoring process stopped before {what} of test {t} {where}")

    def leaf(k: int) -> Any:
        tag, payload = received.operands.get((t, part.number, k), (None, None))
        spec = part.leaves[k - 1]
        if tag == "v":
            return payload
        if tag == "e":
            raise _OperandError("operand_error", str(payload), spec)  # a str: read_stream checked it
        if tag == "x":
            raise _OperandError("unencodable", str(payload), spec)
        raise _OperandError("protocol", "the scoring process reached the assertion without sending this operand", spec)

    ns[LEAF_FN] = leaf
    try:
        if statement:
            exec(compile(part.expression, f"<test {t} statement {part.number}>", "exec"), ns)
            return None
        verdict = eval(compile(part.expression, f"<test {t} assertion {part.number}>", "eval"), ns)
        holds = bool(verdict)
    except _OperandError as exc:
        text = short(exc.leaf.source, 200)
        if exc.kind == "operand_error":
            return Failure(t, exc.kind, f"{exc.text} (evaluating `{text}`) {where}")
        if exc.kind == "unencodable":
            return Failure(t, exc.kind, f"cannot compare `{text}`: {exc.text} {where}")
        return Failure(t, exc.kind, f"the scoring process sent malformed operand data ({exc.text}: `{text}`) {where}")
    except BroadcastMismatch as exc:
        return Failure(t, "assertion", f"AssertionError: {exc} in `{short(part.source, 200)}` {where}")
    except MemoryError:
        raise
    except Exception as exc:
        inside = f" (in `{short(part.source, 120)}`)" if statement else ""
        return Failure(t, "error", f"{_exception_text(exc)}{inside} {where}")
    finally:
        ns.pop(LEAF_FN, None)
    if not holds:
        message = part.message if isinstance(part, AssertPlan) else None
        detail = f": {message}" if message else ""
        return Failure(t, "assertion", f"AssertionError{detail} in `{short(part.source, 200)}` {where}")
    return None


def _exception_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return short(text, 300)


__all__ = [
    "FAILURE_KINDS",
    "GUARDED_NUMPY",
    "BroadcastMismatch",
    "Failure",
    "ReplayMismatch",
    "StepOutcome",
    "evaluate",
    "evaluate_here",
    "parent_compare",
    "parent_namespace",
    "parent_numpy",
    "read_stream",
    "replay",
]
