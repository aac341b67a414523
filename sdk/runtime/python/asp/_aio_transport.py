"""asyncio transports for asp.aio.Client over the shared RPC engine (asp._rpc): stdio over
asyncio subprocess pipes (one reader task matching responses to waiting calls by id,
calls pipelined over one connection) and HTTP (the synchronous POST /v1/rpc transport
run in the loop's thread executor, and the WebSocket on asyncio streams for streams:
docs/http.md). Deadlines follow the synchronous client's rules (docs/faults.md)."""

import asyncio
import collections
import concurrent.futures
import os
import signal as _signal

from . import _rpc, _ws
from . import _wire
from ._errors import AspError
from ._transport import HttpTransport


class _Waiter(_rpc.Waiter):
    __slots__ = ("fut",)

    def __init__(self, on_result=None):
        super().__init__(on_result)
        self.fut = asyncio.get_running_loop().create_future()

    def _wake(self):
        if not self.fut.done():
            self.fut.set_result(None)


class _Pipelined:
    """Calls over a pipelined connection (stdio, the WebSocket), as the synchronous
    transports' _Pipelined: its subclass gives ``_open()``, ``_conn`` and
    ``closed_error()``; the connection gives ``send(data)`` and ``die(err, kill)``,
    coroutines."""

    async def connection(self):
        """The connection, opened now (by _open) if there is none or it died."""
        if self._open_lock is None:
            self._open_lock = asyncio.Lock()
        async with self._open_lock:
            err = self.closed_error()
            if err is not None:
                raise err
            c = self._conn
            if c is None or c.dying:
                c = await self._open()
                self._conn = c
            return c

    async def _call_pipelined(self, method, params, on_result, before_send):
        conn = await self.connection()
        if method == "hello" and conn.hello is not None:
            return conn.hello  # answered once per connection (the liveness probe is not)
        msg = await self._call_on(conn, method, params, on_result, before_send, 0)
        if method == "hello" and msg.error is None:
            conn.hello = msg
        return msg

    async def _call_on(self, conn, method, params, on_result, before_send, explicit_ms):
        w = _Waiter(on_result)
        id_, data = conn.prepare(w, method, params, before_send)
        await conn.send(data)
        plan = _rpc.deadlines(conn, w, id_, method, params, explicit_ms)
        reply = None
        while True:
            try:
                what, arg = plan.send(reply)
            except StopIteration:
                return w.answer()
            if what == "wait":
                await asyncio.wait({w.fut}, timeout=arg)
                reply = w.fut.done()
            elif what == "probe":
                try:
                    await self._call_on(conn, "hello", {}, None, None, arg)
                    reply = None
                except AspError as e:
                    reply = e
            else:
                await conn.die(arg, kill=True)
                reply = None


class _AioStdioConn(_rpc.RpcConn):
    """One running responder process and the tasks that read its stdout and stderr."""

    def __init__(self, transport):
        super().__init__(transport, "the stdio responder")
        self.proc = None
        self.stderr_tail = collections.deque(maxlen=8)
        self.reader = None
        self.stderr_task = None

    async def start(self):
        argv = self.t.argv
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, close_fds=True)
        except OSError as e:
            code = "not_found" if e.errno == 2 else "transport_error"
            raise AspError(code, "cannot start the stdio responder %s: %s" % (
                argv[0], e.strerror or e), errno=e.errno) from None
        self.stderr_task = asyncio.ensure_future(self._drain_stderr())
        self.reader = asyncio.ensure_future(self._read_loop())

    async def send(self, data):
        try:
            self.proc.stdin.write(_wire.frame(data))
            # A responder that reads nothing for call_timeout_ms is stopped or wedged.
            await asyncio.wait_for(self.proc.stdin.drain(), self.t.call_timeout_ms / 1000.0)
        except asyncio.TimeoutError:
            await self.die(AspError("transport_error", "the stdio responder read nothing of a "
                                    "request for %d ms (call_timeout_ms): it is stopped or "
                                    "wedged" % self.t.call_timeout_ms), kill=True)
        except (OSError, ValueError, RuntimeError) as e:
            await self.die(AspError("transport_error", "cannot write to the stdio responder: "
                                    "%s" % (getattr(e, "strerror", None) or e)), kill=True)

    # ---- the reader ----
    async def _read_loop(self):
        err = None
        out = self.proc.stdout
        try:
            while err is None:
                try:
                    hdr = await out.readexactly(4)
                except asyncio.IncompleteReadError as e:
                    if e.partial:
                        err = AspError("transport_error", "the stdio responder's output "
                                       "ended inside a frame header")
                    break
                n = int.from_bytes(hdr, "big")
                limit = self.t.max_message
                if n > limit:
                    err = AspError("protocol_error", "the stdio responder sent a message of "
                                   "%d bytes, more than max_message (%d)" % (n, limit))
                    break
                try:
                    body = await out.readexactly(n)
                except asyncio.IncompleteReadError:
                    err = AspError("transport_error", "the stdio responder's output ended "
                                   "inside a message")
                    break
                err = self.handle(body)
        except (OSError, ValueError) as e:
            err = AspError("transport_error", "cannot read from the stdio responder: %s" % (
                getattr(e, "strerror", None) or e))
        await self.die(err, kill=err is not None and err.code == "protocol_error")

    async def _drain_stderr(self):
        try:
            while True:
                line = await self.proc.stderr.readline()
                if not line:
                    break
                self.stderr_tail.append(line.rstrip(b"\n").decode("utf-8", "replace"))
        except (OSError, ValueError):
            pass

    # ---- the end ----
    async def _explain(self, err):
        """Adds the responder's exit status and last stderr lines to a transport error."""
        try:
            rc = await asyncio.wait_for(self.proc.wait(), 1.0)
        except asyncio.TimeoutError:
            rc = None
        if self.stderr_task is not None:
            await asyncio.wait({self.stderr_task}, timeout=0.5)
        return _rpc.explain(err, rc, self.stderr_tail)

    async def die(self, err, kill=False):
        if not self.start_dying():  # first, with no await before it: later calls see it
            return
        if kill:
            await self._terminate()
        explained = err is None or err.code == "transport_error"
        err = self.end_error(err)
        if explained and not self.closing:
            err = await self._explain(err)
        self.fail_all(err)
        try:
            self.proc.stdin.close()
        except (OSError, ValueError, RuntimeError):
            pass

    async def _exited(self, timeout):
        try:
            await asyncio.wait_for(self.proc.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    def _kill(self, sig):
        # os.kill, not Process.terminate: Popen.send_signal polls first, reaping the
        # child behind the loop's child watcher, which then reports status 255.
        try:
            os.kill(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    async def _terminate(self):
        if self.proc.returncode is None:
            self._kill(_signal.SIGTERM)
            if not await self._exited(2.0):
                self._kill(_signal.SIGKILL)
                await self._exited(2.0)

    async def close(self, timeout=5.0):
        self.closing = True
        try:
            self.proc.stdin.close()
        except (OSError, ValueError, RuntimeError):
            pass
        # On EOF the responder answers what is in flight, ends its processes, exits 0.
        done, _ = await asyncio.wait({self.reader}, timeout=timeout)
        if not done or not await self._exited(2.0):
            await self._terminate()
            await asyncio.wait({self.reader}, timeout=2.0)
        if self.stderr_task is not None:
            await asyncio.wait({self.stderr_task}, timeout=1.0)


class AioStdioTransport(_rpc.StdioSettings, _Pipelined):
    """Speaks the RPC over a child's stdin/stdout from one event loop. A dead responder
    fails every pending call with transport_error; the next call starts a new one."""

    _open_lock = None

    async def _open(self):
        c = _AioStdioConn(self)
        await c.start()
        return c

    async def call(self, method, params, on_result=None, before_send=None):
        return await self._call_pipelined(method, params, on_result, before_send)

    async def close(self):
        self._closed = True
        c, self._conn = self._conn, None
        if c is not None:
            await c.close()


class _AioWsConn(_rpc.WsRpcConn):
    """One WebSocket to GET PREFIX/v1/ws on asyncio streams and the task that reads it."""

    def __init__(self, transport):
        super().__init__(transport)
        self.r = self.w = None
        self.reader = None

    async def open(self):
        t = self.t
        try:
            self.r, self.w = await asyncio.wait_for(asyncio.open_connection(
                t.host, t.port, ssl=t.ctx, server_hostname=t.host if t.ctx else None,
                limit=_ws.MAX_HEAD + 1), t.call_timeout_ms / 1000.0)
            req, accept = _ws.handshake(t.host, t.port, t.default_port, t.ws_path, t.token,
                                        extra=t.extra_headers)
            self.w.write(req)
            buf = bytearray()
            end = -1
            while end < 0:
                chunk = await asyncio.wait_for(self.r.read(65536), t.call_timeout_ms / 1000.0)
                if not chunk:
                    raise AspError("transport_error", "%s closed the connection during the "
                                   "WebSocket upgrade" % t.url)
                buf += chunk
                end = _ws.head_end(buf)
            _ws.check_answer(bytes(buf[:end]), bytes(buf[end:]), t.url, accept)
        except BaseException as e:
            if self.w is not None:
                self.w.close()
            if isinstance(e, (OSError, asyncio.TimeoutError)):
                if isinstance(e, asyncio.TimeoutError):
                    e = TimeoutError()
                raise _ws.connect_error(t.url, e, t.ca_file) from None
            raise
        self.reader = asyncio.ensure_future(self._read_loop(bytes(buf[end:])))

    async def _write(self, data):
        self.w.write(data)
        await asyncio.wait_for(self.w.drain(), self.t.call_timeout_ms / 1000.0)

    async def send(self, data):
        try:
            await self._write(self.message(data))
        except asyncio.TimeoutError:
            await self.die(AspError("transport_error", "%s read nothing of a request for %d "
                                    "ms (call_timeout_ms)" % (self.t.url,
                                                              self.t.call_timeout_ms)))
        except (OSError, RuntimeError) as e:
            await self.die(AspError("transport_error", "cannot write to %s: %s" % (
                self.t.url, getattr(e, "strerror", None) or e)))

    async def _read_loop(self, data):
        err = None
        try:
            while True:
                if data:
                    replies, err = self.receive(data)
                    for r in replies:
                        self.w.write(r)
                    if err is not None:
                        break
                data = await self.r.read(262144)
                if not data:
                    err = self.eof_error()
                    break
        except (OSError, RuntimeError) as e:
            err = self.eof_error() if self.closing else AspError(
                "transport_error", "cannot read from %s: %s" % (
                    self.t.url, getattr(e, "strerror", None) or e))
        await self.die(err)

    async def die(self, err, kill=False):
        if not self.start_dying():
            return
        self.fail_all(self.end_error(err))
        self.w.close()

    async def close(self, timeout=5.0):
        self.closing = True
        try:
            self.w.write(_ws.close_frame(_ws.NORMAL))
        except (OSError, RuntimeError):
            pass
        # The server answers with its close frame, then ends the connection.
        await asyncio.wait({self.reader}, timeout=timeout)
        await self.die(None)
        self.reader.cancel()


# A POST holds its thread for as long as the call waits (a proc_wait, a proc_write whose
# offset waits for the writes before it), so the loop's default executor (min(32, cpus +
# 4) threads) would queue the very calls the waiting ones wait for: an upload's writes
# behind its eof. The transport's own pool grows to a thread per call in flight.
HTTP_CALLS_MAX = 1024


class AioHttpTransport(_Pipelined):
    """POST /v1/rpc through the synchronous HTTP transport, each call on a thread of the
    transport's own pool (one kept-alive connection each), so calls from many tasks run
    at once; streams (and with websocket True every call) over one WebSocket on the
    loop, as HttpTransport does."""

    def __init__(self, url, token, max_message, ca_file=None, call_timeout_ms=60000,
                 websocket=None, on_notify=None, headers=()):
        self._t = HttpTransport(url, token, max_message, ca_file=ca_file,
                                call_timeout_ms=call_timeout_ms, websocket=websocket,
                                on_notify=on_notify, headers=headers)
        self._open_lock = None
        self._conn = None  # the WebSocket, opened by the first call that needs it
        self._closed = False
        self._pool = concurrent.futures.ThreadPoolExecutor(HTTP_CALLS_MAX, "asp-http")

    def __getattr__(self, name):
        # url, host, port, ws_path, token, ctx, call_timeout_ms, on_notify, describe...
        return getattr(self._t, name)

    @property
    def max_message(self):
        return self._t.max_message

    @max_message.setter
    def max_message(self, n):
        self._t.max_message = n

    async def _open(self):
        c = _AioWsConn(self)
        await c.open()
        return c

    def closed_error(self):
        if self._closed:
            return AspError("transport_error", "the client was closed")
        return None

    async def call(self, method, params, on_result=None, before_send=None):
        stream = on_result is not None or before_send is not None
        if _rpc.http_route(self._t.websocket, stream) == "ws":
            return await self._call_pipelined(method, params, on_result, before_send)
        if self._closed:
            raise self.closed_error()
        return await asyncio.get_running_loop().run_in_executor(
            self._pool, self._t.call, method, params, on_result, before_send)

    async def close(self):
        self._closed = True
        ws, self._conn = self._conn, None
        self._t.close()
        self._pool.shutdown(wait=False)
        if ws is not None:
            await ws.close()
