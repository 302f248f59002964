"""Listeners on this machine for the network tests (test_host_network.py, test_isolation.py): a loopback TCP
listener, an abstract unix socket, and a TCP listener on one of the machine's non-loopback addresses, which
stands in for the internet (no other address is ever contacted)."""

from __future__ import annotations

import socket
import subprocess
import threading


def machine_addresses() -> list[str]:
    """This machine's IPv4 addresses other than loopback (``ip -4 addr``)."""
    try:
        out = subprocess.run(
            ["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.split()[3].split("/")[0] for line in out.splitlines() if len(line.split()) > 3]


class Listener:
    """A listening socket on this machine that greets and counts whoever connects."""

    def __init__(self, family: int, address) -> None:
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.bind(address)
        self.sock.listen(8)
        self.accepted = 0
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.sendall(b"HELLO")
            conn.close()

    def close(self) -> None:
        self.sock.close()
