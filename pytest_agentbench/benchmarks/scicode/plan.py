"""The plan of a SciCode step's split evaluation: what the splitter (:mod:`.split`) hands to the child's script
(:mod:`.script`) and to the trusted verdict (:mod:`.verdict`).

A plan is data built in the trusted process from the test text alone: per test, the child's source (setup
lines and operand blocks that call the runtime of :mod:`.child.runtime`) and the parent's parts (the
statements and assertions the parent runs on the operands the child sends). The names below are the
protocol between the two sides: the child's source calls ``_agentbench_rt``; the parent's expressions read
operand ``k`` as ``_agentbench_leaf(k)`` and replay a traced helper through ``_agentbench_replay``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...sandbox import codec

TARGET = "target"
LEAF_FN = "_agentbench_leaf"
RUNTIME = "_agentbench_rt"
LEAF_VALUE = "_agentbench_value"
REPLAY_FN = "_agentbench_replay"
LEAF_EXC = "_agentbench_exc"
CONTROL_FRAME_BYTES = 8 * 1024  # cap of one control/error frame; they do not count against the step cap
STREAM_SLACK = 64 * 1024

# the comparison helpers of compare.py the parent's namespace provides (the test text imports them)
CMP_HELPERS = ("cmp_tuple_or_list", "are_dicts_close", "are_csc_matrix_close")


def short(text: str, limit: int = 160) -> str:
    """``text`` on one line, cut to ``limit`` characters (for messages)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class Leaf:
    """One operand the child evaluates and sends."""

    number: int  # 1-based within its assertion
    source: str  # the expression, as the test text writes it (for messages)
    # a call of a traced helper (30.3's ``test_gradient(configs, wf, delta)``): what the child evaluates
    # instead, its record of the calls into the model's objects (see :func:`.verdict.replay`)
    trace: str | None = None

    @property
    def child(self) -> str:
        return self.trace or self.source


@dataclass(frozen=True)
class AssertPlan:
    number: int  # 1-based within its test
    source: str  # the original ``assert`` statement (for messages)
    expression: str  # what the parent evaluates; operand k appears as ``_agentbench_leaf(k)``
    leaves: tuple[Leaf, ...]
    message: str | None = None  # the assertion's own message, when it is a constant


@dataclass(frozen=True)
class MixedStatement:
    """A statement of the test text that applies the test's own code (a helper it defines, a library call,
    an operator) to the child's values (49.4's ``Etot1 = Nbody_Etot(uout, mass)``): the parent runs it on
    the decoded operands, so the names it binds are the parent's. Numbered with the assertions (its
    operands travel in the same frames); the child evaluates each operand once, sends it, then runs the
    statement with the operands it computed."""

    number: int
    source: str  # the original statement (for messages)
    expression: str  # what the parent runs; operand k appears as ``_agentbench_leaf(k)``
    leaves: tuple[Leaf, ...]
    binds: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ParentStatement:
    """A statement only the parent runs (``s, v = target``) or also runs (a comparing helper's ``def``)."""

    source: str


@dataclass(frozen=True)
class TrustedStatement:
    """A statement of the test text that does not depend on the model's code (``expected = np.array(
    [0.0, -(g / L) * np.sin(0.1)])``): the child runs it (its own code may need the names) and the parent
    runs it too, so the operands it defines are the parent's. Only those the parent's operands need
    are kept in a plan."""

    source: str
    binds: frozenset[str] = frozenset()
    reads: frozenset[str] = frozenset()
    touches: frozenset[str] = frozenset()  # bound names whose objects it may change in place
    calls: frozenset[str] = frozenset()  # it binds a function: the globals the function reads when called


@dataclass(frozen=True)
class FunctionScope:
    """A test function inlined for the parent (78.1's ``test_case_1``): its parts run in a copy of the
    namespace, so its locals stay local."""

    name: str
    local: frozenset[str]
    parts: tuple[Any, ...]


@dataclass(frozen=True)
class TestPlan:
    number: int  # 1-based within the step
    child: str  # the child's source for this test (setup lines, operand blocks, markers)
    parent: tuple[Any, ...]  # ParentStatement, TrustedStatement, FunctionScope, AssertPlan, in the order they run
    # per check in the child (numbered from 1): the model-independent names passed to model calls there that
    # the parent reads; the child notes ("m", test, name) when a call changed one in place
    watched: tuple[tuple[str, ...], ...] = ()

    @property
    def asserts(self) -> tuple[AssertPlan, ...]:
        return tuple(part for part in flat(self.parent) if isinstance(part, AssertPlan))

    @property
    def evaluated(self) -> tuple[AssertPlan | MixedStatement, ...]:
        """The parts whose operands the child sends: assertions and mixed statements, by number."""
        return tuple(part for part in flat(self.parent) if isinstance(part, (AssertPlan, MixedStatement)))

    def notes(self) -> int:
        """Most ``("m", ...)`` notes a genuine child sends in this test."""
        return sum(len(names) for names in self.watched)


def flat(parts: Sequence[Any]) -> list[Any]:
    """``parts`` with every inlined test function's parts in its place."""
    out: list[Any] = []
    for part in parts:
        out.extend(flat(part.parts) if isinstance(part, FunctionScope) else [part])
    return out


@dataclass(frozen=True)
class StepPlan:
    step: str
    tests: tuple[TestPlan, ...]

    def child_source(self) -> str:
        """Every test's child code in order; it needs ``_agentbench_rt`` (see :func:`.script.child_runtime`)."""
        return "".join(test.child for test in self.tests)

    def expected_frames(self) -> int:
        return sum(
            2 + len(test.evaluated) + sum(len(a.leaves) for a in test.evaluated) + test.notes() for test in self.tests
        )

    def stream_cap(self, max_bytes: int = codec.DEFAULT_MAX_BYTES) -> int:
        """Most bytes a genuine child sends: operand values within ``max_bytes`` plus control frames."""
        return max_bytes + STREAM_SLACK + CONTROL_FRAME_BYTES * self.expected_frames()
