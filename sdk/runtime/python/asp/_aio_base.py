"""The machinery under the generated asp.aio.Client: asp._base's client and follower,
with the waiting done by the event loop (the asyncio transports of asp._aio_transport),
and AioProcess, the async iterator a spawn returns."""

import asyncio
import contextlib

from . import _config
from ._aio_transport import AioHttpTransport, AioStdioTransport
from ._base import ClientBase, _Follower


class AioProcess(_Follower):
    """A process started by ``asp.aio.Client.spawn`` (or followed by ``proc_attach``).

    ``async for`` yields its output as ``OutputEvent`` chunks in order, then its
    ``ExitEvent``, then stops. ``write``, ``signal`` and ``wait`` are coroutines calling
    ``proc_write``, ``proc_signal`` and ``proc_wait`` for it. A transport that dies while
    you iterate raises ``AspError`` (transport_error) from the iterator.
    """

    _KIND = "asp.aio.Process"

    def __init__(self, client, op):
        # one event loop: nothing to lock
        super().__init__(client, op, contextlib.nullcontext())
        self._event = asyncio.Event()

    def _wake(self):
        self._event.set()

    async def next_event(self, timeout=None):
        """The next event, or None once the exit has been returned. With a timeout in
        seconds, raises TimeoutError when nothing came in time."""
        while not self._ready():
            self._event.clear()
            try:
                await asyncio.wait_for(self._event.wait(), timeout)
            except asyncio.TimeoutError:
                raise self._timed_out(timeout) from None
        return self._take()

    def __aiter__(self):
        return self

    async def __anext__(self):
        ev = await self.next_event()
        if ev is None:
            raise StopAsyncIteration
        return ev

    async def collect(self):
        """Reads to the end: (stdout bytes, stderr bytes, ExitEvent)."""
        out, err = bytearray(), bytearray()
        async for ev in self:
            self._gather(ev, out, err)
        return bytes(out), bytes(err), self.exit

    async def write(self, data=b"", eof=False):
        """Writes to the process's stdin (proc_write); eof closes it."""
        return await self._client.proc_write(self.proc, data=data, eof=eof)

    async def signal(self, signal="TERM"):
        """Signals the process group (proc_signal)."""
        return await self._client.proc_signal(self.proc, signal)

    async def resize(self, rows, cols):
        """Sets the terminal's window size (proc_resize): for a process spawned with tty."""
        return await self._client.proc_resize(self.proc, rows, cols)

    async def wait(self, timeout_ms=0):
        """Waits for the exit on the responder (proc_wait) and returns its result."""
        return await self._client.proc_wait(self.proc, timeout_ms=timeout_ms)

    def close(self):
        """Stops following the process here; it keeps running in the sandbox."""
        self._stop()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        self.close()


class AioClientBase(ClientBase):
    """Shared by the generated asp.aio.Client: see it for the methods. Everything but
    the awaiting is asp._base.ClientBase's."""

    SDK_NAME = "Python (asyncio)"
    _Process = AioProcess
    _StdioTransport = AioStdioTransport
    _HttpTransport = AioHttpTransport

    async def open_connection(self, port, host=None, timeout_ms=0):
        """connect, as an asp._socket.AioConnection (await recv, sendall, shutdown,
        close)."""
        from ._socket import AioConnection

        return AioConnection(await self.connect(port, host=host, timeout_ms=timeout_ms))

    async def upload_dir(self, source_dir, target_dir, *, exclude=None):
        """As asp.Client.upload_dir: a local directory into the sandbox, one stream."""
        from . import _tree

        return await _tree.aupload(self, source_dir, target_dir, exclude)

    async def download_dir(self, source_dir, target_dir, *, exclude=None):
        """As asp.Client.download_dir: a sandbox directory into a local one, one stream."""
        from . import _tree

        return await _tree.adownload(self, source_dir, target_dir, exclude)

    # ---- opening ----
    @classmethod
    async def stdio(cls, argv, *, cwd=None, env=None, timeout_ms=0, call_timeout_ms=60000):
        """A client speaking to ``argv`` over its stdin/stdout, as
        ``asp.Client.stdio``; the responder is started before this returns."""
        self = cls._stdio_client(argv, cwd, env, timeout_ms, call_timeout_ms)
        await self._transport.connection()  # start it now, so a bad argv fails here
        return self

    @classmethod
    async def from_config(cls, path=None):
        """A client for the sandbox ``.asp.json`` names, as ``asp.Client.from_config``."""
        cfg = _config.load(path)
        opener, args, kw = cls._config_opener(cfg)
        c = opener(*args, **kw)
        if asyncio.iscoroutine(c):
            c = await c
        c.config = cfg
        return c

    async def close(self):
        """Closes the connection: a stdio responder gets EOF, answers what is in flight
        and exits. Calls after close raise transport_error."""
        await self._transport.close()

    def __enter__(self):
        raise TypeError("asp.aio.Client is asynchronous: use `async with`")

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    # ---- calls ----
    async def _call(self, name, params):
        op, wire = self._request(name, params)
        return self._result(op, await self._transport.call(op.name, wire))

    async def _stream(self, name, params, proc_from):
        op, wire, p, hooks = self._follower(name, params, proc_from)
        try:
            p.result = self._result(op, await self._transport.call(op.name, wire, **hooks))
        except BaseException:
            p.close()
            raise
        return p
