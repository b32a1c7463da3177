"""A client trickling its request head to a server, a byte at a time, never ending it:
the attack a bounded server must cut off at its deadline (contracts/bounded_http)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def trickling(port: int, head: bytes) -> Iterator[threading.Event]:
    """Sends ``head`` (a request up to the value of a header) to ``port`` on localhost,
    then a byte of that header every 0.1 s until the block ends or the server cuts the
    connection. Yields the event that stops it (set on the way out), for the block to
    pace itself with (``wait``)."""
    slow = socket.create_connection(("127.0.0.1", port), timeout=30)
    stop = threading.Event()

    def trickle() -> None:
        try:
            slow.sendall(head)
            while not stop.wait(0.1):  # one header line that never ends
                slow.sendall(b"a")
        except OSError:
            return

    t = threading.Thread(target=trickle, daemon=True)
    t.start()
    try:
        yield stop
    finally:
        stop.set()
        t.join(5)
        slow.close()
