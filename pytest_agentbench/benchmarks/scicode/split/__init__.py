"""Split SciCode's official test cases: the untrusted child computes operands, the trusted parent compares.

A test case is Python run after the model's code: setup lines, calls to the step's function and
``assert`` statements that compare with ``target``. Here each test case is split in two:

* the **child** (the process that runs model code) runs the setup lines and, for every assertion,
  evaluates only the *model-dependent operands* of its comparisons (the arguments of
  ``np.allclose``, ``np.isclose``, ``cmp_tuple_or_list``, ... and the operands of ``==``, ``<``,
  ``and``, ``not``, ...), and sends each value through :mod:`pytest_agentbench.sandbox.codec`
  (with the operand runtime of :mod:`..child.runtime`, in a script :func:`..script.build_child_script` writes);
* the **parent** (trusted, holding the targets, genuine numpy and the helpers of
  :mod:`..compare`) evaluates each assertion on the received operand values, ``target`` and the
  operands it computes itself, in a short-lived process bounded in time and memory
  (:func:`..verdict.evaluate`).

This package runs in the trusted process only: it reads the test text and writes the step's plan
(:mod:`..plan`), nothing of the model's.

Rules, so every official test case splits the same way (see :func:`.step.split_step`):

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
* no comparison is decided by the child's values alone (a value the child computed from the model's
  could be faked as easily as a verdict): the child computes only the model's calls and what reads the
  model's objects (attributes, items and methods of values the test text did not
  bind). What the test text does with those values runs in the parent on the decoded values: operators,
  slices and data attributes (``B[:, 0].T @ B[:, 3]`` with ``B`` from the child), numpy/math calls and
  reproducible builtins, and the functions the test text defines that read nothing but those
  (:func:`.helpers.is_runnable_helper`: 49.4's ``Nbody_Etot``, 51.4's ``total_energy``). A statement that applies
  them to the child's values (``Etot1 = Nbody_Etot(uout, mass)``) is a :class:`MixedStatement`: the child
  sends its operands (``uout``), the parent runs it and holds the names it binds;
* the test text sees the genuine builtins and modules whatever the model's code binds (``range = range``,
  ``from math import *``), unless the name is a function the model was asked to write (``required``);
* a function defined in the test text that compares and needs nothing but numpy, math and the
  builtins (10.6 ``are_equivalent``, 31.2 ``test_identity``) runs in the parent; one that calls into the
  model's objects (30.3 ``test_gradient(configs, wf, delta)`` calls ``wf.value``, 72.1 ``test_neighbor()``
  calls ``neighbor_list``) is *traced* (:func:`.helpers.is_traced_helper`): the child runs it with the model's
  objects wrapped and records every call into them (arguments and results, encoded), and the parent runs
  the helper's own code, answering each call into a model's object from the record after checking that
  its encoded arguments are the recorded ones (:func:`..verdict.replay`; a mismatch fails the test);
* a test function holding ``assert`` statements and called once with no arguments
  (78.1 ``def test_case_1(): ... assert ...`` then ``test_case_1()``) is inlined for the parent (its
  assertions are the test's, at the call, in a scope of their own); in the child it stays a
  function, so its locals stay local as upstream.

The child reports (see :mod:`..child.runtime`), per test, ``("t", test)`` when the test starts, one frame per operand
(``("v", test, assertion, operand, value)``, or ``("e", ..., "TypeError: ...")`` when evaluating it
raised, or ``("x", ..., reason)`` when it cannot be encoded), ``("a", test, assertion)`` once every
operand of an assertion was attempted, ``("m", test, name)`` when a model call changed in place an
input the parent computes from (a note), and ``("z", test)`` at the end of the test. An operand that
raised fails its test only if the parent needs its value (as a short-circuited operand upstream is
never evaluated). A step passes only when every test's every assertion holds in the parent.

The package, by concern: :mod:`.names` (which calls compare, which the parent applies, the split's state),
:mod:`.taint` (which names and expressions depend on the model's code), :mod:`.helpers` (the functions a
test case defines: inlined, run, or traced), :mod:`.asserts` (one assertion split into the parent's
expression and the child's operand block), :mod:`.step` (a step's test cases, statement by statement) and
:mod:`.prune` (what each side still runs once the whole step is split). ``docs/scicode-internals.md``
follows one test case through all of it.
"""

from ..plan import (
    LEAF_FN,
    REPLAY_FN,
    AssertPlan,
    FunctionScope,
    MixedStatement,
    ParentStatement,
    StepPlan,
    TestPlan,
    TrustedStatement,
)
from .names import COMPARISON_CALLS, SplitError
from .step import names_bound_by, required_names, split_step

__all__ = [
    "COMPARISON_CALLS",
    "LEAF_FN",
    "REPLAY_FN",
    "AssertPlan",
    "FunctionScope",
    "MixedStatement",
    "ParentStatement",
    "SplitError",
    "StepPlan",
    "TestPlan",
    "TrustedStatement",
    "names_bound_by",
    "required_names",
    "split_step",
]
