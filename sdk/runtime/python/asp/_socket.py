"""Connections opened from inside the sandbox (connect) as socket-like objects:
asp.Client.open_connection returns a Connection, asp.aio.Client.open_connection an
AioConnection. Both wrap the Process that connect returns."""

import socket

from ._errors import AspError

_PIECE = 1 << 20  # bytes per proc_write: well under max_message


class _Reading:
    """The received bytes of a connection, fed by its events (shared by both kinds)."""

    def __init__(self, process):
        self._p = process
        self.proc = process.proc
        self._buf = bytearray()
        self._eof = False
        self._error = None
        self._sent_eof = False
        self.exit = None

    def _feed(self, ev):
        if ev is None:
            self._eof = True
        elif type(ev).__name__ == "OutputEvent":
            self._buf += ev.data
            self._eof = self._eof or bool(getattr(ev, "eof", False))
        else:  # the ExitEvent
            self.exit = ev
            self._eof = True
            if getattr(ev, "error", None):
                self._error = ev.error

    def _take(self, bufsize):
        if not self._buf and self._error:
            raise ConnectionResetError(self._error)
        n = min(bufsize, len(self._buf))
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def _pieces(self, data):
        data = memoryview(data)
        for i in range(0, len(data), _PIECE):
            yield bytes(data[i:i + _PIECE])


class Connection(_Reading):
    """A TCP connection from inside the sandbox, used like a socket: ``recv``,
    ``sendall``, ``shutdown(socket.SHUT_WR)`` (a half-close: the peer sees EOF),
    ``close`` (resets it), ``settimeout``. ``recv`` returns b"" once the peer has shut its
    side; a connection that failed raises ConnectionResetError with the reason.
    ``.proc`` is the handle; ``.exit`` the ExitEvent once it ended."""

    def __init__(self, process):
        super().__init__(process)
        self._timeout = None

    def settimeout(self, seconds):
        self._timeout = seconds

    def recv(self, bufsize):
        while not self._buf and not self._eof:
            try:
                self._feed(self._p.next_event(self._timeout))
            except TimeoutError:
                raise socket.timeout("no bytes from the sandbox in %s s" % self._timeout)
        return self._take(bufsize)

    def sendall(self, data):
        for piece in self._pieces(data):
            self._p.write(piece)

    def send(self, data):
        self.sendall(data)
        return len(data)

    def shutdown(self, how=socket.SHUT_WR):
        if how in (socket.SHUT_WR, socket.SHUT_RDWR) and not self._sent_eof:
            self._sent_eof = True
            self._p.write(b"", eof=True)

    def close(self):
        """Closes the connection (KILL: the peer sees a reset unless it already ended)."""
        if self.exit is None:
            try:
                self._p.signal("KILL")
            except AspError:
                pass  # gone already
        self._p.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class AioConnection(_Reading):
    """The asyncio Connection: ``await recv(n)``, ``await sendall(data)``, ``await
    shutdown()``, ``await close()``, with the same meaning."""

    async def recv(self, bufsize, timeout=None):
        while not self._buf and not self._eof:
            self._feed(await self._p.next_event(timeout))
        return self._take(bufsize)

    async def sendall(self, data):
        for piece in self._pieces(data):
            await self._p.write(piece)

    async def shutdown(self, how=socket.SHUT_WR):
        if how in (socket.SHUT_WR, socket.SHUT_RDWR) and not self._sent_eof:
            self._sent_eof = True
            await self._p.write(b"", eof=True)

    async def close(self):
        if self.exit is None:
            try:
                await self._p.signal("KILL")
            except AspError:
                pass
        self._p.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()
