"""The machinery under the generated asp.aio.Client: the same config defaults and codec
as the synchronous client (asp._base), over the asyncio transports, and AioProcess, the
async iterator a spawn returns."""

import asyncio
import collections

from . import _codec, _config
from ._aio_transport import AioHttpTransport, AioStdioTransport
from ._base import ClientBase
from ._errors import AspError


class AioProcess:
    """A process started by ``asp.aio.Client.spawn`` (or followed by ``proc_attach``).

    ``async for`` yields its output as ``OutputEvent`` chunks in order, then its
    ``ExitEvent``, then stops. ``write``, ``signal`` and ``wait`` are coroutines calling
    ``proc_write``, ``proc_signal`` and ``proc_wait`` for it. A transport that dies while
    you iterate raises ``AspError`` (transport_error) from the iterator.
    """

    def __init__(self, client, op):
        self._client = client
        self._op = op
        self._conn = None
        self._queue = collections.deque()
        self._wake = asyncio.Event()
        self._ended = False
        self._error = None
        self.proc = None
        self.result = None
        self.exit = None

    def __repr__(self):
        state = "exited %r" % (self.exit,) if self.exit else "running"
        return "<asp.aio.Process %s %s>" % (self.proc, state)

    # called from the connection's reader task
    def _push(self, event):
        if self._ended:
            return
        self._queue.append(event)
        if type(event).__name__ == self._client._spec.STREAM_END_CLASS:
            self.exit = event
            self._ended = True
            self._detach()
        self._wake.set()

    def _fail(self, err):
        if not self._ended:
            self._error = err
            self._ended = True
        self._wake.set()

    def _detach(self):
        if self._conn is not None and self.proc is not None:
            conn, self._conn = self._conn, None
            conn.unsubscribe(self.proc, self)

    async def next_event(self, timeout=None):
        """The next event, or None once the exit has been returned. With a timeout in
        seconds, raises TimeoutError when nothing came in time."""
        while not self._queue and not self._ended:
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except asyncio.TimeoutError:
                raise TimeoutError("no event from process %s in %s s" % (self.proc,
                                                                         timeout)) from None
        if self._queue:
            return self._queue.popleft()
        if self._error is not None:
            e = self._error
            raise AspError(e.code, e.message, errno=e.errno, path=e.path)
        return None

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
            if getattr(ev, "stream", None) == "stdout":
                out += ev.data
            elif getattr(ev, "stream", None) == "stderr":
                err += ev.data
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
        self._ended = True
        self._detach()
        self._wake.set()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        self.close()


class AioClientBase(ClientBase):
    """Shared by the generated asp.aio.Client: see it for the methods."""

    SDK_NAME = "Python (asyncio)"

    # ---- opening ----
    @classmethod
    async def stdio(cls, argv, *, cwd=None, env=None, timeout_ms=0, call_timeout_ms=60000):
        """A client speaking to ``argv`` over its stdin/stdout, as
        ``asp.Client.stdio``; the responder is started before this returns."""
        self = cls.__new__(cls)
        t = AioStdioTransport(argv, cls._spec.MAX_MESSAGE, self._on_notify,
                              call_timeout_ms=call_timeout_ms)
        ClientBase.__init__(self, t, cwd, env, timeout_ms)
        await t.connection()  # start it now, so a bad argv fails here
        return self

    @classmethod
    def http(cls, url, token=None, *, ca_file=None, cwd=None, env=None, timeout_ms=0,
             call_timeout_ms=60000):
        """A client calling ``POST URL/v1/rpc`` of ``asp-agent --listen``, as
        ``asp.Client.http``. HTTP carries no notifications: spawn needs stdio."""
        t = AioHttpTransport(url, token, cls._spec.MAX_MESSAGE, ca_file=ca_file,
                             call_timeout_ms=call_timeout_ms)
        return cls(t, cwd, env, timeout_ms)

    @classmethod
    async def from_config(cls, path=None):
        """A client for the sandbox ``.asp.json`` names, as ``asp.Client.from_config``."""
        cfg = _config.load(path)
        if cfg.transport == "stdio":
            c = await cls.stdio(cfg.stdio_command, cwd=cfg.cwd, env=cfg.env,
                                timeout_ms=cfg.timeout_ms,
                                call_timeout_ms=cfg.call_timeout_ms)
        elif cfg.transport == "http":
            token = _config.secret(cfg.http_token_env, cfg.http_token_file)
            c = cls.http(cfg.http_url, token, ca_file=cfg.http_ca_file, cwd=cfg.cwd,
                         env=cfg.env, timeout_ms=cfg.timeout_ms,
                         call_timeout_ms=cfg.call_timeout_ms)
        else:
            raise AspError("unsupported", "%s: the %s SDK cannot serve transport %s; use the "
                           "asp CLI or the C library" % (cfg.path, cls.SDK_NAME, cfg.transport),
                           path=cfg.path)
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
        op = self._spec.OPS[name]
        wire = _codec.encode_params(op.params, self._apply(op, params))
        msg = await self._transport.call(op.name, wire)
        result = self._result(op, msg)
        if name == "hello" and getattr(result, "max_message", 0):
            self._transport.max_message = result.max_message
        return result

    async def _stream(self, name, params, proc_from):
        op = self._spec.OPS[name]
        if not self._transport.carries_notifications:
            raise AspError("unsupported", "%s needs a transport that carries notifications "
                           "(stdio); %s does not: run the process with exec, or connect "
                           "over stdio" % (name, self._transport.describe))
        wire = _codec.encode_params(op.params, self._apply(op, params))
        p = AioProcess(self, name)
        hooks = {}
        if proc_from == "result":
            def on_result(result, conn):
                proc = result.get("proc") if isinstance(result, dict) else None
                if type(proc) is int and proc >= 0:
                    p.proc, p._conn = proc, conn
                    conn.subscribe(proc, p)
            hooks["on_result"] = on_result
        else:
            p.proc = wire["proc"]

            def before_send(conn):
                p._conn = conn
                conn.subscribe(p.proc, p)
            hooks["before_send"] = before_send
        try:
            msg = await self._transport.call(op.name, wire, **hooks)
            p.result = self._result(op, msg)
        except BaseException:
            p.close()
            raise
        return p
