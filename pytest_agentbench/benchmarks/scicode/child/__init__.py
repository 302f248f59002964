"""The untrusted side of a SciCode step's scoring: the code of this package that runs in the child process,
next to the model's code.

Only :mod:`.runtime` lives here (the operand runtime the tests' child code calls); the child also loads
``sandbox/codec.py`` (it encodes the operands) and ``scicode/compare.py`` (upstream's comparison helpers,
which the test text imports). The child loads each of them by file path, so none of them imports any
module of this package but another child-side one; ``tests/test_architecture.py`` checks that from the
source. Everything that decides a verdict (the plan, the parent's evaluation) is on the trusted side
(``split/``, ``plan.py``, ``script.py``, ``verdict.py``) and may import from here, never the other way.
"""
