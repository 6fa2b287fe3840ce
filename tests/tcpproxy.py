"""A loopback TCP proxy for the tests of D25: it forwards bytes between a client and
one server, and can stop forwarding (as a paused or cut-off host: the kernel still
acknowledges, nothing answers), cut a connection at the moment a PostgreSQL
``COMMIT`` passes, before or after the server got it, stop forwarding right
before a ``COMMIT`` (the transaction's statements delivered, its end never), hold each
new connection's first answer (a slow handshake), or close every connection as a
restarted server does."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Literal

#: psycopg ends a transaction with a simple Query message: 'Q', length 11, "COMMIT\0".
COMMIT = b"Q\x00\x00\x00\x0bCOMMIT\x00"

Cut = Literal["before_commit", "after_commit", "hold_commit"]


class _Link:
    """One client connection and its server connection."""

    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client, self.server = client, server
        self.drop_reply = False  # the server's next answer is dropped, and the link cut
        self.answered = False  # the server has answered on it

    def cut(self) -> None:
        for sock in (self.client, self.server):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class TcpProxy:
    """Listens on a free loopback port and forwards each connection to
    ``127.0.0.1:target_port``; :meth:`pause`, :meth:`resume` and :attr:`cut` change
    what it does. Use as a context manager; every thread stops at the end."""

    def __init__(self, target_port: int) -> None:
        self._target = ("127.0.0.1", target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._forwarding = threading.Event()
        self._forwarding.set()
        self._links: list[_Link] = []
        self._lock = threading.Lock()
        #: Armed: the next COMMIT cuts its connection, then this goes back to None.
        self.cut: Cut | None = None
        self.cuts = 0
        #: Seconds each new connection's first answer from the server is held.
        self.first_answer_delay = 0.0
        self._threads: list[threading.Thread] = []
        self._closed = False

    def __enter__(self) -> TcpProxy:
        self._spawn(self._accept)
        return self

    def __exit__(self, *exc: object) -> None:
        self._closed = True
        self._forwarding.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            for link in self._links:
                link.cut()
        for thread in self._threads:
            thread.join(10)
        for link in self._links:
            link.client.close()
            link.server.close()

    def pause(self) -> None:
        """Stop forwarding, both ways: bytes are accepted and held, as by a host
        whose processes are stopped."""
        self._forwarding.clear()

    def resume(self) -> None:
        """Forward again, the held bytes first."""
        self._forwarding.set()

    @property
    def accepted(self) -> int:
        """Connections accepted so far."""
        with self._lock:
            return len(self._links)

    def close_all(self) -> None:
        """Close every connection accepted so far, both ways, as a server that restarts
        does; new ones are forwarded as before."""
        with self._lock:
            for link in self._links:
                link.cut()

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        thread.start()
        self._threads.append(thread)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._target)
            link = _Link(client, server)
            with self._lock:
                self._links.append(link)
            self._spawn(self._pump, link, True)
            self._spawn(self._pump, link, False)

    def _pump(self, link: _Link, upstream: bool) -> None:
        source, sink = (link.client, link.server) if upstream else (link.server, link.client)
        try:
            while data := source.recv(65536):
                self._forwarding.wait()
                if upstream and self.cut is not None and COMMIT in data:
                    cut, self.cut = self.cut, None
                    self.cuts += 1
                    if cut == "before_commit":
                        link.cut()
                        return
                    if cut == "hold_commit":  # what came before it, then a pause
                        at = data.index(COMMIT)
                        sink.sendall(data[:at])
                        self.pause()
                        self._forwarding.wait()
                        data = data[at:]
                    else:
                        link.drop_reply = True  # the server commits; its answer is lost
                elif not upstream and link.drop_reply:
                    link.cut()
                    return
                elif not upstream and not link.answered:
                    link.answered = True
                    time.sleep(self.first_answer_delay)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            link.cut()
