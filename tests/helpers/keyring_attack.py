"""The keyring attack of the end-to-end isolation tests, shared by the local run and the Slurm one: three
attempts at SciCode step 3.1 (``def six(): return 6``) where attempt 1 answers right and leaves the answer in
the kernel's keyrings, and attempts 2 and 3 compute nothing and answer with what the keyrings hold (7, a wrong
answer, when they are empty). Where every run has a user namespace of its own, attempts 2 and 3 fail.

The code calls the keyring by its x86-64 system call numbers (Python has no binding): the tests that use it
skip on another architecture."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable

# attempt 1: the right answer, also left in the kernel's keyrings (the user's and the session's) under TAG
STORE = """
def six():
    ctypes = __import__("ctypes")  # (SciCode strips import statements from a reply)
    _libc = ctypes.CDLL(None, use_errno=True)
    for ring in (-4, -3, -5):
        _libc.syscall(248, b"user", b"TAG", b"6", 1, ctypes.c_long(ring))
    return 6
"""
# attempts 2 and 3: compute nothing, answer with what the keyring holds (7, a wrong answer, when it is empty)
READ = """
def six():
    ctypes = __import__("ctypes")  # (SciCode strips import statements from a reply)
    _libc = ctypes.CDLL(None, use_errno=True)
    for ring in (-4, -3, -5):
        key = _libc.syscall(249, b"user", b"TAG", None, ctypes.c_long(ring))
        if key >= 0:
            buf = ctypes.create_string_buffer(8)
            n = _libc.syscall(250, 11, ctypes.c_long(key), buf, 8)  # KEYCTL_READ
            if n > 0:
                return int(buf.raw[:n])
    return 7
"""
# what the scoring child's environment holds, printed into its stdout (a record keeps it) when six() is called
ENVIRON_MARK = "environ-names: "
SHOW_ENVIRON = f'print({ENVIRON_MARK!r} + __import__("json").dumps(sorted(__import__("os").environ)))\n'


def keyring_cheat(tag: str, show_environ: bool = False) -> Callable[[dict], dict]:
    """A scripted reply for FakeOpenAI's ``reply_with``: STORE for the first request, READ for the later ones,
    keyed by ``tag``; ``show_environ``: six() also prints the names in its environment (``environ_names``)."""
    calls: Counter = Counter()

    def make(body: dict) -> dict:
        calls["n"] += 1
        code = (STORE if calls["n"] == 1 else READ).replace("TAG", tag)
        if show_environ:
            code = code.replace("    ctypes = ", "    " + SHOW_ENVIRON + "    ctypes = ", 1)
        return {"text": f"```python\n{code}\n```"}

    return make


def environ_names(stdout: str) -> list[str] | None:
    """The names a ``show_environ`` reply printed (None when it printed none)."""
    for line in stdout.splitlines():
        if line.startswith(ENVIRON_MARK):
            return json.loads(line[len(ENVIRON_MARK) :])
    return None
