"""A network path that a fault harness (or a test) can cut and restore."""

from __future__ import annotations

import socket
import threading
from contextlib import suppress
from urllib.parse import urlsplit, urlunsplit


class Outage:
    """
    A TCP forwarder to a server that can be cut and restored.

    ``down()`` closes every connection through it and refuses new ones;
    ``up()`` accepts again.

    The client sees a real outage (its connections reset, new ones refused)
    while the server itself keeps running for everyone else.
    """

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 5672)
        self._parts = parts
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._open = threading.Event()
        self._open.set()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        """The broker's URL through this forwarder (same credentials and vhost)."""
        credentials = self._parts.netloc.rpartition("@")[0]
        netloc = f"{credentials}@127.0.0.1:{self.port}" if credentials else f"127.0.0.1:{self.port}"
        return urlunsplit(self._parts._replace(netloc=netloc))

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            if not self._open.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        for s in (source, sink):
            with suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def down(self) -> None:
        """Cut every connection and refuse new ones."""
        self._open.clear()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for s in sockets:
            with suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def up(self) -> None:
        """Accept connections again."""
        self._open.set()

    def close(self) -> None:
        """Stop forwarding."""
        self._stop = True
        self.down()
        self._server.close()
