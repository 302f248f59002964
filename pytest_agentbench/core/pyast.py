"""``ast.parse`` that threads may call at the same time.

CPython 3.11 keeps the depth counter of its AST constructor in interpreter-wide state, so two threads
parsing at once can corrupt it: one of them gets ``SystemError: AST constructor recursion depth
mismatch`` on perfectly valid code (python/cpython#106905). The plugin parses in more than one thread
(the next step's answer is extracted while this step is scored; targets are rebuilt by a thread pool),
so every parse of the package goes through this one lock.
"""

from __future__ import annotations

import ast
import os
import threading
from typing import Literal, overload

_PARSE_LOCK = threading.Lock()  # process-wide on purpose: the state it protects is the interpreter's


def _fresh_lock_after_fork() -> None:
    # a child forked while another thread held the lock would otherwise wait for it forever
    global _PARSE_LOCK
    _PARSE_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_fresh_lock_after_fork)


@overload
def parse(source: str, mode: Literal["exec"] = "exec") -> ast.Module: ...
@overload
def parse(source: str, mode: Literal["eval"]) -> ast.Expression: ...
def parse(source: str, mode: str = "exec") -> ast.AST:
    with _PARSE_LOCK:
        return ast.parse(source, mode=mode)
