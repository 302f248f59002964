"""The operand runtime of a SciCode scoring child (``_agentbench_rt`` in the child's script).

It runs in the untrusted child, beside the model's code, so nothing here decides anything: it only writes
frames to the channel, and the trusted parent checks each one (``verdict.read_stream``). The frames, per
test: ``("t", test)`` when it starts; per operand ``("v", test, assertion, operand, value)``, or ``("e",
..., "TypeError: ...")`` when evaluating it raised, or ``("x", ..., reason)`` when it cannot be encoded;
``("a", test, assertion)`` once every operand of an assertion was attempted; ``("m", test, name)`` when a
model call changed in place an input the parent computes from (a note); ``("z", test)`` at its end.

The child's script loads this file by its path (``script.child_runtime``), and the codec by its path
too: it imports nothing of this package (``tests/test_architecture.py`` checks it).
"""

from __future__ import annotations

import builtins
import hashlib
import importlib.util
import types
from collections.abc import Callable, Sequence
from typing import Any

# an argument that is one of the model's objects, in a recorded call (the parent's replay marks its own alike)
HANDLE_MARK = "\x00agentbench-handle"

Getter = Callable[[], Any]


def load(name: str, path: str) -> types.ModuleType:
    """The module in the file ``path``, run as ``name`` (not entered in ``sys.modules``)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {name} from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def start(
    codec_path: str,
    channel: int | str,
    max_bytes: int,
    control_bytes: int,
    message_chars: int,
    digest_bytes: int,
    traced: bool,
) -> Runtime:
    """The runtime of one step's script: frames go to ``channel`` (an inherited file descriptor number, or a
    file path), operand values within ``max_bytes``, control frames within ``control_bytes``. A plan with a
    traced helper gets the :class:`TracingRuntime`."""
    codec = load("_agentbench_codec", codec_path)
    kind = TracingRuntime if traced else Runtime
    return kind(
        codec,
        channel,
        max_bytes=max_bytes,
        control_bytes=control_bytes,
        message_chars=message_chars,
        digest_bytes=digest_bytes,
    )


class Runtime:
    """What the tests' child code calls: one method per frame."""

    def __init__(
        self,
        codec: types.ModuleType,
        channel: int | str,
        *,
        max_bytes: int,
        control_bytes: int,
        message_chars: int,
        digest_bytes: int,
    ) -> None:
        self._codec = codec
        self._writer = codec.FrameWriter(channel, max_bytes=max_bytes)
        self._max_bytes = max_bytes
        self._control_bytes = control_bytes
        self._message_chars = message_chars
        self._digest_bytes = digest_bytes  # largest encoded input digested to note a change in place
        self._digests: dict[tuple[int, int], list[bytes | None]] = {}

    def _digest(self, getter: Getter) -> bytes | None:
        try:
            return hashlib.sha256(self._codec.encode(getter(), max_bytes=self._digest_bytes)).digest()
        except Exception:  # unbound, unencodable or too large: no note
            return None

    def _control(self, frame: tuple[Any, ...]) -> None:
        self._writer.write_frame(self._codec.encode(frame, max_bytes=self._control_bytes))

    def _describe(self, exc: BaseException) -> str:
        try:
            text = type(exc).__name__ + ": " + str(exc)
        except Exception:
            text = type(exc).__name__
        return text[: self._message_chars]

    def test(self, t: int) -> None:
        self._control(("t", t))

    def value(self, t: int, a: int, k: int, value: Any) -> None:
        try:
            self._writer.send(("v", t, a, k, value))
        except self._codec.CodecError as exc:
            self._control(("x", t, a, k, str(exc)[: self._message_chars]))
        except OSError:
            raise
        except Exception as exc:  # a value whose own methods fail while it is encoded
            self._control(("x", t, a, k, "cannot encode it: " + self._describe(exc)))

    def raised(self, t: int, a: int, k: int, exc: BaseException) -> None:
        self._control(("e", t, a, k, self._describe(exc)))

    def reached(self, t: int, a: int) -> None:
        self._control(("a", t, a))

    def end(self, t: int) -> None:
        self._control(("z", t))

    def before(self, t: int, k: int, getters: Sequence[Getter]) -> None:
        self._digests[(t, k)] = [self._digest(getter) for getter in getters]

    def after(self, t: int, k: int, names: Sequence[str], getters: Sequence[Getter]) -> None:
        for name, first, getter in zip(names, self._digests.pop((t, k), ()), getters):
            if first is not None and self._digest(getter) != first:
                self._control(("m", t, name))


class TracingRuntime(Runtime):
    """The runtime of a plan with a traced helper (30.3's ``test_gradient``): it also runs the helper with the
    model's objects wrapped and keeps the record of every call into them, for the parent to replay."""

    def __init__(self, codec: types.ModuleType, channel: int | str, **sizes: int) -> None:
        super().__init__(codec, channel, **sizes)
        self._returned: dict[int, tuple[list[tuple[Any, ...]], Any]] = {}

    def trace(
        self,
        fn: types.FunctionType,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        keys: Sequence[int | str],
        names: Sequence[str],
    ) -> list[tuple[Any, ...]]:
        """Run the test's helper ``fn`` with the model's objects (the arguments at ``keys``, the globals
        ``names``) wrapped: the record of every call into them, for the parent to replay."""
        codec, max_bytes = self._codec, self._max_bytes
        events: list[tuple[Any, ...]] = []
        handles = [0]

        def wrap(value: Any) -> tuple[tuple[str, Any], Any]:
            try:
                return ("d", codec.encode(value, max_bytes=max_bytes)), value
            except Exception:  # not data: one of the model's objects, called through a handle
                handles[0] += 1
                return ("h", handles[0]), Recorder(value, handles[0])

        def mark(value: Any) -> Any:
            return (HANDLE_MARK, value._agentbench_h) if type(value) is Recorder else value

        def unwrap(value: Any) -> Any:
            return value._agentbench_obj if type(value) is Recorder else value

        class Recorder:
            __slots__ = ("_agentbench_h", "_agentbench_obj")

            def __init__(self, obj: Any, handle: int) -> None:
                self._agentbench_obj = obj
                self._agentbench_h = handle

            def __getattr__(self, name: str) -> Any:
                if name.startswith("__"):
                    raise AttributeError(name)
                tag, out = wrap(getattr(self._agentbench_obj, name))
                events.append(("get", self._agentbench_h, name, tag))
                return out

            def __call__(self, *a: Any, **k: Any) -> Any:
                data = codec.encode(
                    (tuple(mark(x) for x in a), {n: mark(v) for n, v in k.items()}), max_bytes=max_bytes
                )
                tag, out = wrap(self._agentbench_obj(*[unwrap(x) for x in a], **{n: unwrap(v) for n, v in k.items()}))
                events.append(("call", self._agentbench_h, data, tag))
                return out

        positional, named = list(args), dict(kwargs)
        for key in keys:
            where: Any = positional if type(key) is int else named
            tag, where[key] = wrap(where[key])
            events.append(("arg", key, tag))
        scope = dict(fn.__globals__)
        for name in names:
            if name not in scope and not hasattr(builtins, name):
                raise NameError(f"name {name!r} is not defined")
            tag, scope[name] = wrap(scope[name] if name in scope else getattr(builtins, name))
            events.append(("global", name, tag))
        run = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
        run.__kwdefaults__ = fn.__kwdefaults__
        self._returned[id(events)] = (events, run(*positional, **named))
        return events

    def returned(self, events: list[tuple[Any, ...]]) -> Any:
        """What the helper returned in the child (its own code after the statement may need it)."""
        return self._returned[id(events)][1]
