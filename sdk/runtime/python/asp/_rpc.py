"""The RPC engine of every pipelined connection, written once for the synchronous and
the asyncio clients and for stdio and the WebSocket alike: request ids, the calls
waiting for their answers, the processes followed, what each message from the
responder does, how a connection dies, and the deadline rules of docs/faults.md.

It does no I/O. A connection class (asp._transport, asp._aio_transport) adds reading and
writing; a waiter says how a caller sleeps (a threading.Event or a future); the deadline
rules are a generator, ``deadlines``, whose requests ("wait", "probe", "die") the
synchronous and the asyncio shells carry out."""

import contextlib
import os
import signal as _signal

from . import _wire, _ws
from ._errors import AspError

UINT32_MAX = 0xFFFFFFFF

# Left in `pending` by a call that timed out, so its late answer is told from a stray id.
ABANDONED = object()


def copy_error(e):
    """A fresh AspError per caller, so each gets its own traceback."""
    return AspError(e.code, e.message, errno=e.errno, path=e.path)


def own_limit(method, params):
    """The time limit a call has of its own (exec's and proc_wait's timeout_ms), added to
    call_timeout_ms; None when it has none, so it may wait for ever (then it probes)."""
    if method in ("exec", "proc_wait"):
        t = params.get("timeout_ms") or 0
        return t if t > 0 else None
    return 0


def too_large(n, limit):
    return AspError("too_large", "request of %d bytes is larger than max_message (%d); "
                    "send the data in smaller pieces" % (n, limit))


def explain(err, rc, stderr_tail):
    """A transport error with the responder's exit status and last stderr lines added."""
    what = err.message
    if rc is not None and rc < 0:
        try:
            name = _signal.Signals(-rc).name
        except ValueError:
            name = str(-rc)
        what += "; the responder was killed by %s" % name
    elif rc is not None:
        what += "; the responder exited with status %d" % rc
    tail = [s for s in stderr_tail if s]
    if tail:
        what += "; its last stderr lines: " + " | ".join(tail[-3:])
    return AspError(err.code, what)


class Waiter:
    """One call waiting for its answer. The shells subclass it with the way a caller
    sleeps: _wake is called once, when msg or error is set."""

    __slots__ = ("msg", "error", "on_result")

    def __init__(self, on_result=None):
        self.msg = None
        self.error = None
        self.on_result = on_result

    def resolve(self, msg):
        self.msg = msg
        self._wake()

    def fail(self, err):
        self.error = err
        self._wake()

    def _wake(self):
        raise NotImplementedError

    def answer(self):
        """The response, or the connection's error as a fresh AspError."""
        if self.error is not None:
            raise copy_error(self.error)
        return self.msg


class RpcConn:
    """What one pipelined connection knows, whatever carries its bytes. ``peer`` names
    the other end in messages ("the stdio responder"); ``lock`` guards the tables where
    a reader thread shares them with callers (none is needed on an event loop)."""

    def __init__(self, transport, peer, lock=None):
        self.t = transport
        self.peer = peer
        self.lock = lock if lock is not None else contextlib.nullcontext()
        self.pending = {}
        self.subs = {}  # proc -> [Process]
        self.next_id = 1
        self.dead = None  # the AspError every later call gets
        self.suspect = False  # a call missed its deadline and no answer came since
        self.dying = False  # set first; dead follows once the reason is known
        self.closing = False
        self.hello = None  # the first hello answer: a responder's hello does not change

    # ---- ids and pending calls ----
    def gone(self):
        if self.dead is not None:
            return copy_error(self.dead)
        return AspError("transport_error", "the connection to %s is ending" % self.peer)

    def add(self, waiter):
        with self.lock:
            if self.dying:
                raise self.gone()
            while self.next_id in self.pending or self.next_id == 0:
                self.next_id = self.next_id + 1 if self.next_id < UINT32_MAX else 1
            id_ = self.next_id
            self.next_id = id_ + 1 if id_ < UINT32_MAX else 1
            self.pending[id_] = waiter
            return id_

    def forget(self, id_):
        with self.lock:
            self.pending.pop(id_, None)

    def prepare(self, waiter, method, params, before_send):
        """Registers a call: its id and the encoded request, or raises (too_large, a
        dead connection, a failing before_send hook) with nothing left registered."""
        id_ = self.add(waiter)
        data = _wire.request(id_, method, params)
        limit = self.t.max_message
        if len(data) > limit:
            self.forget(id_)
            raise too_large(len(data), limit)
        if before_send is not None:
            try:
                before_send(self)
            except BaseException:
                self.forget(id_)
                raise
        return id_, data

    def abandon(self, id_, waiter, suspect=True):
        """The call gave up: its late answer will be dropped. Returns whether the
        connection was suspect already, or None when the answer came meanwhile."""
        with self.lock:
            if self.pending.get(id_) is not waiter:
                return None
            self.pending[id_] = ABANDONED
            second = self.suspect
            if suspect:
                self.suspect = True
            return second

    # ---- followers ----
    def subscribe(self, proc, p):
        with self.lock:
            if self.dying:
                raise self.gone()
            self.subs.setdefault(proc, []).append(p)

    def unsubscribe(self, proc, p):
        with self.lock:
            lst = self.subs.get(proc)
            if lst and p in lst:
                lst.remove(p)
                if not lst:
                    del self.subs[proc]

    def route(self, proc, event):
        with self.lock:
            targets = list(self.subs.get(proc, ()))
        for p in targets:
            p._push(event)

    # ---- a message from the responder ----
    def handle(self, body):
        """Does what one message says; returns the AspError that ends the connection,
        or None."""
        try:
            msg = _wire.decode(body)
        except AspError as e:
            return AspError("protocol_error", "%s sent a bad message: %s" % (self.peer,
                                                                             e.message))
        if msg.type == _wire.RESPONSE:
            with self.lock:
                w = self.pending.pop(msg.id, None)
                if w is not None and w is not ABANDONED:
                    self.suspect = False  # the responder answers
            if w is ABANDONED:
                return None  # a late answer to a call that timed out: drop it
            if w is None:
                return AspError("protocol_error", "%s answered request id %d, which no call "
                                "is waiting for; closing the connection" % (self.peer, msg.id))
            if w.on_result is not None and msg.error is None:
                try:
                    w.on_result(msg.result, self)
                except AspError as e:
                    w.fail(e)
                    return None
            w.resolve(msg)
            return None
        if msg.type == _wire.NOTIFY:
            return self.t.on_notify(self, msg.method, msg.params)
        return AspError("protocol_error", "%s sent a request; a responder only answers" %
                        self.peer)

    # ---- the end ----
    def start_dying(self):
        """Marks the connection dying; False when it was already."""
        with self.lock:
            if self.dying:
                return False
            self.dying = True
            return True

    def end_error(self, err):
        """The error of a connection that ended on its own (err None) or for err, before
        the shell adds what it knows (explain)."""
        if err is None:
            return AspError("transport_error", "the client was closed" if self.closing else
                            "%s closed the connection" % self.peer)
        return err

    def fail_all(self, err):
        """Every waiting call and every follower gets err."""
        with self.lock:
            self.dead = err
            pending, self.pending = self.pending, {}
            subs, self.subs = self.subs, {}
        for w in pending.values():
            if w is not ABANDONED:
                w.fail(err)
        for lst in subs.values():
            for p in lst:
                p._fail(err)



class StdioSettings:
    """What a stdio transport is given, checked once for the sync and asyncio ones."""

    carries_notifications = True

    def __init__(self, argv, max_message, on_notify, call_timeout_ms=60000):
        if isinstance(argv, (str, bytes)) or not argv:
            raise AspError("invalid_argument", "stdio needs an argv list, such as "
                           "['asp-agent', '--stdio']")
        self.argv = [os.fsdecode(a) if isinstance(a, bytes) else str(a) for a in argv]
        self.max_message = max_message
        self.on_notify = on_notify
        self.call_timeout_ms = call_timeout_ms or 60000
        self._conn = None
        self._closed = False
        self.describe = "stdio %s" % " ".join(self.argv)

    def closed_error(self):
        """The error of a call after close, or None while open."""
        if self._closed:
            return AspError("transport_error", "the client was closed")
        return None

class WsRpcConn(RpcConn):
    """An RpcConn over a WebSocket (docs/http.md): bytes from the socket go in through
    ``receive``, which says which frames to send back (pongs, the close) and whether the
    connection ends. The shells open the socket and carry the bytes."""

    def __init__(self, transport, lock=None):
        super().__init__(transport, transport.url, lock)
        self.decoder = _ws.Decoder(transport.max_message)

    def receive(self, data):
        """Feeds what the socket read: (frames to send, the AspError that ends the
        connection or None)."""
        out = []
        self.decoder.max_message = self.t.max_message
        try:
            events = self.decoder.feed(data)
        except _ws.WsError as e:
            return [_ws.close_frame(e.code)], AspError("protocol_error", "%s: %s" % (
                self.t.url, e.message))
        for ev in events:
            if ev[0] == "message":
                err = self.handle(ev[1])
                if err is not None:
                    return out + [_ws.close_frame(_ws.PROTOCOL_ERROR)], err
            elif ev[0] == "ping":
                out.append(_ws.frame(_ws.PONG, ev[1]))
            elif ev[0] == "close":
                out.append(_ws.close_frame(ev[1] if ev[1] not in (None, 1005, 1006, 1015)
                                           else _ws.NORMAL))
                return out, self.eof_error(ev[1], ev[2])
        return out, None

    def eof_error(self, code=None, reason=""):
        """The error of a WebSocket that ended, closed by the server or lost."""
        if self.closing:
            return AspError("transport_error", "the client was closed")
        return _ws.closed_error(self.t.url, code, reason)

    @staticmethod
    def message(data):
        """The frames of one outgoing msgpack message."""
        return b"".join(_ws.message(data))


def deadlines(conn, waiter, id_, method, params, explicit_ms):
    """The wait for one call's answer within its deadline (docs/faults.md), as a
    generator of requests for the shell:

    - ("wait", seconds): sleep until the answer or the time; send back whether it came;
    - ("probe", ms): call hello on this connection within ms; send back None, or the
      AspError it raised;
    - ("die", err): end the connection with err (killing the responder).

    call_timeout_ms plus the op's own limit; a miss is timeout and makes the connection
    suspect, a second miss in a row kills it. A call with no limit of its own probes with
    hello instead. Returns once the waiter holds the answer; raises AspError otherwise."""
    ms = conn.t.call_timeout_ms
    own = 0 if explicit_ms else own_limit(method, params)
    limit = explicit_ms or (ms if own is None else own + ms)
    while not (yield ("wait", limit / 1000.0)):
        if explicit_ms:
            if conn.abandon(id_, waiter, suspect=False) is None:
                return
            raise AspError("timeout", "%s: no answer within %d ms" % (method, limit))
        if own is None:
            e = yield ("probe", ms)
            if e is None:
                limit = ms
                continue
            if e.code != "timeout":
                continue  # the connection died: the waiter says how
            if conn.abandon(id_, waiter, suspect=False) is None:
                return
            yield ("die", AspError("transport_error", "%s: the responder did not answer a "
                                   "liveness probe (hello) within call_timeout_ms (%d ms), so "
                                   "the connection is closed (the next call reconnects)" %
                                   (method, ms)))
            raise copy_error(conn.dead or conn.gone())
        second = conn.abandon(id_, waiter)
        if second is None:
            return  # answered just now
        if second:
            yield ("die", AspError("transport_error", "%s: no answer within %d ms, the "
                                   "second missed deadline in a row: the responder is not "
                                   "answering, so the connection is closed (the next call "
                                   "reconnects)" % (method, limit)))
            raise copy_error(conn.dead or conn.gone())
        if own:
            raise AspError("timeout", "%s: no answer within %d ms (its timeout_ms %d + "
                           "call_timeout_ms %d); the connection is suspect: one more "
                           "missed deadline closes it" % (method, limit, own, ms))
        raise AspError("timeout", "%s: no answer within call_timeout_ms (%d ms); the "
                       "connection is suspect: one more missed deadline closes it" %
                       (method, ms))


def http_route(websocket, stream):
    """Where an HTTP client's call goes (docs/http.md, http.websocket): "ws" or "post".
    websocket None (the default) sends streams (spawn, proc_attach) over the WebSocket
    and the rest over POST; True everything over the WebSocket; False nothing."""
    if websocket is True or (stream and websocket is None):
        return "ws"
    return "post"


def streams_refused(name, describe, websocket):
    """The unsupported error of a stream on a transport that carries no notifications."""
    if websocket is False:
        return AspError("unsupported", "%s needs the WebSocket, and %s has http.websocket "
                        "false (POST only): run the process with exec, poll it with "
                        "proc_wait, or drop http.websocket" % (name, describe))
    return AspError("unsupported", "%s needs a transport that carries notifications; %s "
                    "does not: run the process with exec" % (name, describe))


def http_status_error(url, status):
    """The error of a POST answered with a status other than 200, or None for 200."""
    if status == 200:
        return None
    if status == 401:
        return AspError("unauthorized", "%s refused the request (HTTP 401): the token is "
                        "missing or wrong; set the one asp-agent --listen was given "
                        "(http.token_env or http.token_file)" % url)
    if status == 403:
        return AspError("unauthorized", "%s answered 403 Forbidden: something in front of "
                        "asp-agent --listen refused the request; if a gateway wants a header "
                        "of its own, set http.headers" % url)
    if status == 413:
        return AspError("too_large", "%s refused the request as too large (HTTP 413)" % url)
    if status == 400:
        return AspError("protocol_error", "%s could not decode the request (HTTP 400)" % url)
    return AspError("transport_error", "%s answered HTTP %d; is it asp-agent --listen?" % (
        url, status))
