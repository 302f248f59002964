"""The serving loop of the tests' HTTP servers (the scripted model, the capsule server, the download and web-page
servers): one thread running socketserver's ``serve_forever``, which ``shutdown()`` stops. No pytest import: the
capsule server serves the plain-Python notebook test too, which checks pytest is never imported."""

from __future__ import annotations

import socketserver
import threading

# how often the loop looks for shutdown(): the default 0.5 s was waited out whole at the end of every test (the
# loop had just gone back to waiting after the test's last request)
SHUTDOWN_POLL = 0.01


def serve_in_background(server: socketserver.BaseServer, name: str) -> threading.Thread:
    """Start ``server``'s loop in a daemon thread named ``name``. Its listening socket does not block: a poll that
    finds no connection left by the time the loop accepts (another holder of the socket took it, a spurious
    wake-up) must not hold the loop in accept(), or shutdown() waits for it forever (seen once in a full run: a
    test's teardown hung 30 minutes)."""
    server.socket.setblocking(False)  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, args=(SHUTDOWN_POLL,), name=name, daemon=True)
    thread.start()
    return thread
