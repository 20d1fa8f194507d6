"""A loopback TCP proxy that a test or a benchmark can take down and bring back, to give a store an
outage of its object storage without touching the server behind it:

    with TcpProxy(s3.port) as proxy:             # 127.0.0.1:proxy.port -> 127.0.0.1:s3.port
        env = {**s3.env, "AWS_ENDPOINT_URL": proxy.endpoint}
        ...
        proxy.stop()                             # connections dropped, new ones refused
        proxy.start()                            # listening again on the same port

Threads, not asyncio (the callers are synchronous): one accepting thread, one thread per connection
moving bytes both ways with `select`. Loopback only.
"""

from __future__ import annotations

import select
import socket
import threading
from typing import Any

from workbench.errors import StoreError

_POLL_S = 0.2


class TcpProxy:
    """Forwards 127.0.0.1:`port` (a free one when None) to `target_host`:`target_port`."""

    def __init__(self, target_port: int, *, target_host: str = "127.0.0.1", port: int | None = None) -> None:
        if target_host not in ("127.0.0.1", "localhost", "::1"):
            raise StoreError(f"TcpProxy: target {target_host!r}: loopback only")
        self.target = (target_host, int(target_port))
        self.port = int(port or 0)
        self._stop = threading.Event()
        self._listener: socket.socket | None = None
        self._threads: list[threading.Thread] = []
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.up = False

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Listen (again, on the same port) and forward."""
        if self.up:
            return
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", self.port))
        except OSError as exc:
            sock.close()
            raise StoreError(f"TcpProxy: cannot listen on 127.0.0.1:{self.port}: {exc.strerror}") from exc
        sock.listen(64)
        sock.settimeout(_POLL_S)
        self.port = int(sock.getsockname()[1])
        self._listener, self._stop = sock, threading.Event()
        self._threads = [threading.Thread(target=self._accept, args=(sock, self._stop), name="tcpproxy", daemon=True)]
        self._threads[0].start()
        self.up = True

    def stop(self) -> None:
        """Refuse new connections and drop the open ones (as a server that went away)."""
        if not self.up:
            return
        self._stop.set()
        for thread in list(self._threads):
            thread.join(5)
        self._threads = []
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        with self._lock:
            for conn in list(self._conns):
                _close(conn)
            self._conns.clear()
        self.up = False

    def __enter__(self) -> "TcpProxy":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _accept(self, sock: socket.socket, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                client, _ = sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._conns.update((client, upstream))
            thread = threading.Thread(target=self._pump, args=(client, upstream, stop), name="tcpproxy-conn",
                                      daemon=True)
            self._threads.append(thread)
            thread.start()

    def _pump(self, a: socket.socket, b: socket.socket, stop: threading.Event) -> None:
        peer = {a: b, b: a}
        try:
            while not stop.is_set():
                ready, _, _ = select.select([a, b], [], [], _POLL_S)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    peer[sock].sendall(data)
        except (OSError, ValueError):
            return
        finally:
            with self._lock:
                for sock in (a, b):
                    self._conns.discard(sock)
                    _close(sock)


def _close(sock: Any) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
