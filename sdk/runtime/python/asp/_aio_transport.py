"""asyncio transports for asp.aio.Client: stdio over asyncio subprocess pipes (one reader
task matching responses to waiting calls by id, calls pipelined over one connection)
and HTTP (the synchronous POST /v1/rpc transport, run in the loop's thread executor).
Deadlines follow the synchronous client's rules (docs/faults.md)."""

import asyncio
import collections
import os
import signal as _signal

from . import _wire
from ._errors import AspError
from ._transport import (_ABANDONED, UINT32_MAX, HttpTransport, _copy, _own_limit,
                         _too_large)


class _Pending:
    __slots__ = ("fut", "on_result")

    def __init__(self, fut, on_result):
        self.fut = fut
        self.on_result = on_result


class _AioStdioConn:
    """One running responder process and the tasks that read its stdout and stderr."""

    def __init__(self, transport):
        self.t = transport
        self.proc = None
        self.pending = {}
        self.subs = {}  # proc -> [AioProcess]
        self.next_id = 1
        self.dead = None
        self.suspect = False
        self.dying = False
        self.closing = False
        self.hello = None  # the first hello answer: a responder's hello does not change
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

    # ---- ids and pending calls ----
    def _gone(self):
        if self.dead is not None:
            return _copy(self.dead)
        return AspError("transport_error", "the connection to the stdio responder is ending")

    def add(self, on_result):
        if self.dying:
            raise self._gone()
        while self.next_id in self.pending or self.next_id == 0:
            self.next_id = self.next_id + 1 if self.next_id < UINT32_MAX else 1
        id_ = self.next_id
        self.next_id = id_ + 1 if id_ < UINT32_MAX else 1
        p = _Pending(asyncio.get_running_loop().create_future(), on_result)
        self.pending[id_] = p
        return id_, p

    def forget(self, id_):
        self.pending.pop(id_, None)

    def abandon(self, id_, p, suspect=True):
        """The call gave up: its late answer will be dropped. Returns whether the
        connection was suspect already, or None when the answer came meanwhile."""
        if p.fut.done() or self.pending.get(id_) is not p:
            return None
        self.pending[id_] = _ABANDONED
        p.fut.cancel()
        second = self.suspect
        if suspect:
            self.suspect = True
        return second

    async def send(self, data):
        try:
            self.proc.stdin.write(data)
            # A responder that reads nothing for call_timeout_ms is stopped or wedged.
            await asyncio.wait_for(self.proc.stdin.drain(), self.t.call_timeout_ms / 1000.0)
        except asyncio.TimeoutError:
            await self.die(AspError("transport_error", "the stdio responder read nothing of a "
                                    "request for %d ms (call_timeout_ms): it is stopped or "
                                    "wedged" % self.t.call_timeout_ms), kill=True)
        except (OSError, ValueError, RuntimeError) as e:
            await self.die(AspError("transport_error", "cannot write to the stdio responder: "
                                    "%s" % (getattr(e, "strerror", None) or e)), kill=True)

    def subscribe(self, proc, p):
        if self.dying:
            raise self._gone()
        self.subs.setdefault(proc, []).append(p)

    def unsubscribe(self, proc, p):
        lst = self.subs.get(proc)
        if lst and p in lst:
            lst.remove(p)
            if not lst:
                del self.subs[proc]

    def route(self, proc, event):
        for p in list(self.subs.get(proc, ())):
            p._push(event)

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
                err = self._handle(body)
        except (OSError, ValueError) as e:
            err = AspError("transport_error", "cannot read from the stdio responder: %s" % (
                getattr(e, "strerror", None) or e))
        await self.die(err, kill=err is not None and err.code == "protocol_error")

    def _handle(self, body):
        try:
            msg = _wire.decode(body)
        except AspError as e:
            return AspError("protocol_error", "the stdio responder sent a bad message: %s" %
                            e.message)
        if msg.type == _wire.RESPONSE:
            p = self.pending.pop(msg.id, None)
            if p is _ABANDONED:
                return None  # a late answer to a call that timed out: drop it
            if p is None:
                return AspError("protocol_error", "the stdio responder answered request id "
                                "%d, which no call is waiting for; closing the connection" %
                                msg.id)
            self.suspect = False  # the responder answers
            if p.on_result is not None and msg.error is None:
                try:
                    p.on_result(msg.result, self)
                except AspError as e:
                    if not p.fut.done():
                        p.fut.set_exception(e)
                    return None
            if not p.fut.done():
                p.fut.set_result(msg)
            return None
        if msg.type == _wire.NOTIFY:
            return self.t.on_notify(self, msg.method, msg.params)
        return AspError("protocol_error", "the stdio responder sent a request; a responder "
                        "only answers")

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
        what = err.message
        if rc is not None and rc < 0:
            try:
                name = _signal.Signals(-rc).name
            except ValueError:
                name = str(-rc)
            what += "; the responder was killed by %s" % name
        elif rc is not None:
            what += "; the responder exited with status %d" % rc
        tail = [s for s in self.stderr_tail if s]
        if tail:
            what += "; its last stderr lines: " + " | ".join(tail[-3:])
        return AspError(err.code, what)

    async def die(self, err, kill=False):
        if self.dying:
            return
        self.dying = True  # first, with no await before it: later calls see it
        closing = self.closing
        if kill:
            await self._terminate()
        if err is None:
            err = AspError("transport_error", "the client was closed" if closing else
                           "the stdio responder closed the connection")
            if not closing:
                err = await self._explain(err)
        elif err.code == "transport_error" and not closing:
            err = await self._explain(err)
        self.dead = err
        pending, self.pending = self.pending, {}
        subs, self.subs = self.subs, {}
        for p in pending.values():
            if p is not _ABANDONED and not p.fut.done():
                p.fut.set_exception(_copy(err))
        for lst in subs.values():
            for p in lst:
                p._fail(err)
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


class AioStdioTransport:
    """Speaks the RPC over a child's stdin/stdout from one event loop. A dead responder
    fails every pending call with transport_error; the next call starts a new one."""

    carries_notifications = True

    def __init__(self, argv, max_message, on_notify, call_timeout_ms=60000):
        if isinstance(argv, (str, bytes)) or not argv:
            raise AspError("invalid_argument", "stdio needs an argv list, such as "
                           "['asp-agent', '--stdio']")
        self.argv = [os.fsdecode(a) if isinstance(a, bytes) else str(a) for a in argv]
        self.max_message = max_message
        self.on_notify = on_notify
        self.call_timeout_ms = call_timeout_ms or 60000
        self._lock = None
        self._conn = None
        self._closed = False
        self.describe = "stdio %s" % " ".join(self.argv)

    async def connection(self):
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._closed:
                raise AspError("transport_error", "the client was closed")
            c = self._conn
            if c is None or c.dying:
                c = _AioStdioConn(self)
                await c.start()
                self._conn = c
            return c

    async def call(self, method, params, on_result=None, before_send=None):
        conn = await self.connection()
        if method == "hello" and conn.hello is not None:
            return conn.hello  # answered once per connection (the liveness probe is not)
        msg = await self._call_on(conn, method, params, on_result, before_send, 0)
        if method == "hello" and msg.error is None:
            conn.hello = msg
        return msg

    async def _call_on(self, conn, method, params, on_result, before_send, explicit_ms):
        id_, p = conn.add(on_result)
        data = _wire.request(id_, method, params)
        if len(data) > self.max_message:
            conn.forget(id_)
            raise _too_large(len(data), self.max_message)
        if before_send is not None:
            try:
                before_send(conn)
            except BaseException:
                conn.forget(id_)
                raise
        await conn.send(_wire.frame(data))
        return await self._await(conn, p, id_, method, params, explicit_ms)

    async def _answer(self, p):
        try:
            return p.fut.result()
        except AspError as e:
            raise _copy(e) from None

    async def _await(self, conn, p, id_, method, params, explicit_ms):
        """As StdioTransport._await: call_timeout_ms plus the op's own limit; a miss is
        timeout and makes the connection suspect, a second miss in a row kills it; a call
        with no limit of its own probes with hello instead."""
        ms = self.call_timeout_ms
        own = 0 if explicit_ms else _own_limit(method, params)
        limit = explicit_ms or (ms if own is None else own + ms)
        while True:
            await asyncio.wait({p.fut}, timeout=limit / 1000.0)
            if p.fut.done() and not p.fut.cancelled():
                return await self._answer(p)
            if explicit_ms:
                if conn.abandon(id_, p, suspect=False) is None:
                    return await self._answer(p)
                raise AspError("timeout", "%s: no answer within %d ms" % (method, limit))
            if own is None:
                try:
                    await self._call_on(conn, "hello", {}, None, None, ms)
                    limit = ms
                    continue
                except AspError as e:
                    if e.code != "timeout":
                        continue  # the connection died: the future says how
                if conn.abandon(id_, p, suspect=False) is None:
                    return await self._answer(p)
                await conn.die(AspError("transport_error", "%s: the responder did not answer "
                                        "a liveness probe (hello) within call_timeout_ms (%d "
                                        "ms), so the connection is closed (the next call "
                                        "reconnects)" % (method, ms)), kill=True)
                raise _copy(conn.dead or conn._gone())
            second = conn.abandon(id_, p)
            if second is None:
                return await self._answer(p)  # answered just now
            if second:
                await conn.die(AspError("transport_error", "%s: no answer within %d ms, the "
                                        "second missed deadline in a row: the responder is "
                                        "not answering, so the connection is closed (the "
                                        "next call reconnects)" % (method, limit)), kill=True)
                raise _copy(conn.dead or conn._gone())
            if own:
                raise AspError("timeout", "%s: no answer within %d ms (its timeout_ms %d + "
                               "call_timeout_ms %d); the connection is suspect: one more "
                               "missed deadline closes it" % (method, limit, own, ms))
            raise AspError("timeout", "%s: no answer within call_timeout_ms (%d ms); the "
                           "connection is suspect: one more missed deadline closes it" %
                           (method, ms))

    async def close(self):
        self._closed = True
        c, self._conn = self._conn, None
        if c is not None:
            await c.close()


class AioHttpTransport:
    """POST /v1/rpc through the synchronous HTTP transport, each call in the loop's
    default thread executor, so calls from many tasks run at once."""

    carries_notifications = False

    def __init__(self, url, token, max_message, ca_file=None, call_timeout_ms=60000):
        self._t = HttpTransport(url, token, max_message, ca_file=ca_file,
                                call_timeout_ms=call_timeout_ms)
        self.describe = self._t.describe

    @property
    def max_message(self):
        return self._t.max_message

    @max_message.setter
    def max_message(self, n):
        self._t.max_message = n

    async def call(self, method, params, on_result=None, before_send=None):
        return await asyncio.get_running_loop().run_in_executor(
            None, self._t.call, method, params, on_result, before_send)

    async def close(self):
        self._t.close()
