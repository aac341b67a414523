"""Transports: stdio (a child process speaking framed msgpack on its stdin/stdout, with
one reader thread matching responses to callers by id) and HTTP (one POST /v1/rpc per
call). Both are safe to use from many threads at once; stdio pipelines every call over
one connection."""

import collections
import http.client
import os
import select
import signal as _signal
import socket
import ssl
import subprocess
import threading
import urllib.parse

from . import _wire
from ._errors import AspError

UINT32_MAX = 0xFFFFFFFF


def _copy(e):
    """A fresh AspError per caller, so each gets its own traceback."""
    return AspError(e.code, e.message, errno=e.errno, path=e.path)


class _Slot:
    __slots__ = ("event", "msg", "error", "on_result")

    def __init__(self, on_result):
        self.event = threading.Event()
        self.msg = None
        self.error = None
        self.on_result = on_result


# Left in `pending` by a call that timed out, so its late answer is told from a stray id.
_ABANDONED = object()
# A write larger than this has a watchdog: a responder that reads nothing of it for
# call_timeout_ms is killed (smaller ones fit in the pipe).
_WATCHED_WRITE = 65536


def _own_limit(method, params):
    """The time limit a call has of its own (exec's and proc_wait's timeout_ms), added to
    call_timeout_ms; None when it has none, so it may wait for ever (then it probes)."""
    if method in ("exec", "proc_wait"):
        t = params.get("timeout_ms") or 0
        return t if t > 0 else None
    return 0


def _too_large(n, limit):
    return AspError("too_large", "request of %d bytes is larger than max_message (%d); "
                    "send the data in smaller pieces" % (n, limit))


class _StdioConn:
    """One running responder process and the reader thread that serves it."""

    def __init__(self, transport):
        self.t = transport
        argv = transport.argv
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, close_fds=True)
        except OSError as e:
            code = "not_found" if e.errno == 2 else "transport_error"
            raise AspError(code, "cannot start the stdio responder %s: %s" % (
                argv[0], e.strerror or e), errno=e.errno) from None
        self.lock = threading.Lock()
        self.wlock = threading.Lock()
        self.pending = {}
        self.subs = {}  # proc -> [Process]
        self.next_id = 1
        self.dead = None  # the AspError every later call gets
        self.suspect = False  # a call missed its deadline and no answer came since
        self.dying = False  # set first; dead follows once the reason is known
        self.closing = False
        self.hello = None  # the first hello answer: a responder's hello does not change
        self.stderr_tail = collections.deque(maxlen=8)
        self.stderr_done = threading.Event()
        threading.Thread(target=self._drain_stderr, name="asp-stdio-stderr",
                         daemon=True).start()
        self.reader = threading.Thread(target=self._read_loop, name="asp-stdio-reader",
                                       daemon=True)
        self.reader.start()

    # ---- ids and pending calls ----
    def _gone(self):
        if self.dead is not None:
            return _copy(self.dead)
        return AspError("transport_error", "the connection to the stdio responder is ending")

    def add(self, slot):
        with self.lock:
            if self.dying:
                raise self._gone()
            while self.next_id in self.pending or self.next_id == 0:
                self.next_id = self.next_id + 1 if self.next_id < UINT32_MAX else 1
            id_ = self.next_id
            self.next_id = id_ + 1 if id_ < UINT32_MAX else 1
            self.pending[id_] = slot
            return id_

    def forget(self, id_):
        with self.lock:
            self.pending.pop(id_, None)

    def abandon(self, id_, suspect=True):
        """The call gave up: its late answer will be dropped. Returns whether the
        connection was suspect already, or None when the answer came meanwhile."""
        with self.lock:
            if id_ not in self.pending:
                return None
            self.pending[id_] = _ABANDONED
            second = self.suspect
            if suspect:
                self.suspect = True
            return second

    def send(self, data):
        watchdog = None
        if len(data) > _WATCHED_WRITE:
            ms = self.t.call_timeout_ms
            watchdog = threading.Timer(ms / 1000.0, lambda: self.die(AspError(
                "transport_error", "the stdio responder read nothing of a request for %d ms "
                "(call_timeout_ms): it is stopped or wedged" % ms), kill=True))
            watchdog.daemon = True
        try:
            with self.wlock:
                if watchdog is not None:
                    watchdog.start()
                self.proc.stdin.write(data)
                self.proc.stdin.flush()
        except (OSError, ValueError) as e:
            self.die(AspError("transport_error", "cannot write to the stdio responder: %s" % (
                getattr(e, "strerror", None) or e)), kill=True)
        finally:
            if watchdog is not None:
                watchdog.cancel()

    def subscribe(self, proc, p):
        with self.lock:
            if self.dying:
                raise self._gone()
            self.subs.setdefault(proc, []).append(p)

    def unsubscribe(self, proc, p):
        with self.lock:
            lst = self.subs.get(proc)
            if lst and p in lst:
                lst.remove(p)
                if not lst:
                    del self.subs[proc]

    # ---- the reader ----
    def _read_exact(self, n):
        out = self.proc.stdout.read(n) if n else b""
        if len(out) != n:
            return None if not out else False
        return out

    def _read_loop(self):
        err = None
        try:
            while err is None:
                hdr = self._read_exact(4)
                if hdr is None:
                    break
                if hdr is False:
                    err = AspError("transport_error", "the stdio responder's output ended "
                                   "inside a frame header")
                    break
                n = int.from_bytes(hdr, "big")
                limit = self.t.max_message
                if n > limit:
                    err = AspError("protocol_error", "the stdio responder sent a message of "
                                   "%d bytes, more than max_message (%d)" % (n, limit))
                    break
                body = self._read_exact(n)
                if not isinstance(body, bytes):
                    err = AspError("transport_error", "the stdio responder's output ended "
                                   "inside a message")
                    break
                err = self._handle(body)
        except (OSError, ValueError) as e:
            err = AspError("transport_error", "cannot read from the stdio responder: %s" % (
                getattr(e, "strerror", None) or e))
        self.die(err, kill=err is not None and err.code == "protocol_error")

    def _handle(self, body):
        try:
            msg = _wire.decode(body)
        except AspError as e:
            return AspError("protocol_error", "the stdio responder sent a bad message: %s" %
                            e.message)
        if msg.type == _wire.RESPONSE:
            with self.lock:
                slot = self.pending.pop(msg.id, None)
                if slot is not None and slot is not _ABANDONED:
                    self.suspect = False  # the responder answers
            if slot is _ABANDONED:
                return None  # a late answer to a call that timed out: drop it
            if slot is None:
                return AspError("protocol_error", "the stdio responder answered request id "
                                "%d, which no call is waiting for; closing the connection" %
                                msg.id)
            if slot.on_result is not None and msg.error is None:
                try:
                    slot.on_result(msg.result, self)
                except AspError as e:
                    slot.error = e
            slot.msg = msg
            slot.event.set()
            return None
        if msg.type == _wire.NOTIFY:
            return self.t.on_notify(self, msg.method, msg.params)
        return AspError("protocol_error", "the stdio responder sent a request; a responder "
                        "only answers")

    def route(self, proc, event):
        with self.lock:
            targets = list(self.subs.get(proc, ()))
        for p in targets:
            p._push(event)

    def _drain_stderr(self):
        try:
            for line in iter(self.proc.stderr.readline, b""):
                self.stderr_tail.append(line.rstrip(b"\n").decode("utf-8", "replace"))
        except (OSError, ValueError):
            pass
        finally:
            self.stderr_done.set()

    # ---- the end ----
    def _explain(self, err):
        """Adds the responder's exit status and last stderr lines to a transport error."""
        try:
            rc = self.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            rc = None
        self.stderr_done.wait(0.5)
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

    def die(self, err, kill=False):
        with self.lock:
            if self.dying:
                return
            self.dying = True
            closing = self.closing
        if kill:
            self._terminate()
        if err is None:
            err = AspError("transport_error", "the client was closed" if closing else
                           "the stdio responder closed the connection")
            if not closing:
                err = self._explain(err)
        elif err.code == "transport_error" and not closing:
            err = self._explain(err)
        with self.lock:
            self.dead = err
            pending, self.pending = self.pending, {}
            subs, self.subs = self.subs, {}
        for slot in pending.values():
            if slot is _ABANDONED:
                continue
            slot.error = err
            slot.event.set()
        for lst in subs.values():
            for p in lst:
                p._fail(err)
        try:
            self.proc.stdin.close()
        except (OSError, ValueError):
            pass

    def _terminate(self):
        if self.proc.poll() is None:
            try:
                self.proc.terminate()
                self.proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            except OSError:
                pass

    def close(self, timeout=5.0):
        with self.lock:
            self.closing = True
        try:
            with self.wlock:
                self.proc.stdin.close()
        except (OSError, ValueError):
            pass
        # On EOF the responder answers what is in flight, ends its processes, exits 0.
        self.reader.join(timeout)
        if self.reader.is_alive():
            self._terminate()
            self.reader.join(2.0)
        self._terminate()
        for f in (self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except (OSError, ValueError):
                pass


class StdioTransport:
    """Speaks the RPC over a child's stdin/stdout. A dead responder fails every pending
    call with transport_error; the next call starts a new one."""

    carries_notifications = True

    def __init__(self, argv, max_message, on_notify, call_timeout_ms=60000):
        if isinstance(argv, (str, bytes)) or not argv:
            raise AspError("invalid_argument", "stdio needs an argv list, such as "
                           "['asp-agent', '--stdio']")
        self.argv = [os.fsdecode(a) if isinstance(a, bytes) else str(a) for a in argv]
        self.max_message = max_message
        self.on_notify = on_notify
        self.call_timeout_ms = call_timeout_ms or 60000
        self._lock = threading.Lock()
        self._conn = None
        self._closed = False
        self.describe = "stdio %s" % " ".join(self.argv)

    def connection(self):
        with self._lock:
            if self._closed:
                raise AspError("transport_error", "the client was closed")
            c = self._conn
            if c is None or c.dying:
                c = self._conn = _StdioConn(self)
            return c

    def call(self, method, params, on_result=None, before_send=None):
        conn = self.connection()
        if method == "hello" and conn.hello is not None:
            return conn.hello  # answered once per connection (the liveness probe is not)
        msg = self._call_on(conn, method, params, on_result, before_send, 0)
        if method == "hello" and msg.error is None:
            conn.hello = msg
        return msg

    def _call_on(self, conn, method, params, on_result, before_send, _explicit_ms):
        slot = _Slot(on_result)
        id_ = conn.add(slot)
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
        conn.send(_wire.frame(data))
        self._await(conn, slot, id_, method, params, _explicit_ms)
        if slot.error is not None:
            raise _copy(slot.error)
        return slot.msg

    def _await(self, conn, slot, id_, method, params, explicit_ms):
        """Waits within the call's deadline (docs/faults.md): call_timeout_ms plus the
        op's own limit; a miss is timeout and makes the connection suspect, a second miss
        in a row kills it. A call with no limit of its own probes with hello instead."""
        ms = self.call_timeout_ms
        own = 0 if explicit_ms else _own_limit(method, params)
        limit = explicit_ms or (ms if own is None else own + ms)
        while not slot.event.wait(limit / 1000.0):
            if explicit_ms:
                if conn.abandon(id_, suspect=False) is None:
                    break
                raise AspError("timeout", "%s: no answer within %d ms" % (method, limit))
            if own is None:
                try:
                    self._call_on(conn, "hello", {}, None, None, ms)
                    limit = ms
                    continue
                except AspError as e:
                    if e.code != "timeout":
                        continue  # the connection died: the slot says how
                if conn.abandon(id_, suspect=False) is None:
                    break
                conn.die(AspError("transport_error", "%s: the responder did not answer a "
                                  "liveness probe (hello) within call_timeout_ms (%d ms), so "
                                  "the connection is closed (the next call reconnects)" %
                                  (method, ms)), kill=True)
                raise _copy(conn.dead or conn._gone())
            second = conn.abandon(id_)
            if second is None:
                break  # answered just now
            if second:
                conn.die(AspError("transport_error", "%s: no answer within %d ms, the second "
                                  "missed deadline in a row: the responder is not answering, "
                                  "so the connection is closed (the next call reconnects)" %
                                  (method, limit)), kill=True)
                raise _copy(conn.dead or conn._gone())
            if own:
                raise AspError("timeout", "%s: no answer within %d ms (its timeout_ms %d + "
                               "call_timeout_ms %d); the connection is suspect: one more "
                               "missed deadline closes it" % (method, limit, own, ms))
            raise AspError("timeout", "%s: no answer within call_timeout_ms (%d ms); the "
                           "connection is suspect: one more missed deadline closes it" %
                           (method, ms))

    def close(self):
        with self._lock:
            self._closed = True
            c, self._conn = self._conn, None
        if c is not None:
            c.close()


class _HTTPConnection(http.client.HTTPConnection):
    """http.client writes a request's headers and body apart: without TCP_NODELAY, Nagle
    and delayed ACKs add ~40 ms to every call."""

    def connect(self):
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _HTTPSConnection(http.client.HTTPSConnection):
    def connect(self):
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class HttpTransport:
    """POST /v1/rpc, one request per call, one kept-alive connection per thread. The
    stdio client's deadlines apply (docs/faults.md): connecting and each send or read
    make progress within call_timeout_ms, and the answer starts within call_timeout_ms
    plus the op's own timeout_ms; an exec or proc_wait without one is probed with hello
    on a connection of its own every call_timeout_ms instead."""

    carries_notifications = False

    def __init__(self, url, token, max_message, ca_file=None, call_timeout_ms=60000):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise AspError("invalid_argument", "http needs a URL like http://127.0.0.1:8722, "
                           "got %r" % url)
        self.url = url
        self.scheme = u.scheme
        self.host = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.path = u.path.rstrip("/") + "/v1/rpc"
        self.token = token
        self.max_message = max_message
        self.ctx = None
        if u.scheme == "https":
            self.ctx = ssl.create_default_context(cafile=ca_file)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._next_id = 0
        self._conns = []
        self._hello = None  # the server's hello answer, kept until a transport_error
        self._closed = False
        self.call_timeout_ms = call_timeout_ms or 60000
        self.describe = url

    def _new_conn(self, keep=True):
        t = self.call_timeout_ms / 1000.0
        if self.scheme == "https":
            c = _HTTPSConnection(self.host, self.port, context=self.ctx, timeout=t)
        else:
            c = _HTTPConnection(self.host, self.port, timeout=t)
        if keep:
            with self._lock:
                self._conns.append(c)
        return c

    def _headers(self):
        headers = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        return headers

    def _probe(self):
        """Whether the server answers hello within call_timeout_ms, on a fresh connection
        (the waiting call's one is busy)."""
        c = self._new_conn(keep=False)
        try:
            c.request("POST", self.path, body=_wire.request(0, "hello", {}),
                      headers=self._headers())
            resp = c.getresponse()
            resp.read(self.max_message + 1)
            return resp.status == 200
        except (OSError, http.client.HTTPException):
            return False
        finally:
            c.close()

    def _await_answer(self, conn, method, params):
        """Waits until the answer starts, within the call's deadline (docs/faults.md)."""
        ms = self.call_timeout_ms
        own = _own_limit(method, params)
        limit = ms if own is None else own + ms
        sock = conn.sock
        while True:
            if sock is None or (hasattr(sock, "pending") and sock.pending()):
                return
            ready, _, _ = select.select([sock], [], [], limit / 1000.0)
            if ready:
                return
            if own is None:
                if self._probe():
                    limit = ms
                    continue
                raise AspError("transport_error", "%s: %s did not answer a liveness probe "
                               "(hello) within call_timeout_ms (%d ms)" % (method, self.url,
                                                                           ms))
            if own:
                raise AspError("timeout", "%s: no answer within %d ms (its timeout_ms %d + "
                               "call_timeout_ms %d)" % (method, limit, own, ms))
            raise AspError("timeout", "%s: no answer within call_timeout_ms (%d ms)" % (
                method, ms))

    def _post(self, body, method="", params=None):
        headers = self._headers()
        conn = getattr(self._local, "conn", None)
        for attempt in (0, 1):
            reused = conn is not None
            if conn is None:
                conn = self._local.conn = self._new_conn()
            try:
                conn.request("POST", self.path, body=body, headers=headers)
                try:
                    self._await_answer(conn, method, params or {})
                except AspError:
                    conn.close()  # the answer may still come: this connection is spent
                    self._local.conn = None
                    raise
                resp = conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError,
                    ConnectionResetError) as e:
                conn.close()
                conn = self._local.conn = None
                if reused and attempt == 0:
                    continue  # a kept-alive connection the server had closed: once more
                raise AspError("transport_error", "cannot reach %s: %s" % (
                    self.url, e.strerror or e)) from None
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                self._local.conn = None
                raise AspError("transport_error", "cannot reach %s: %s" % (
                    self.url, getattr(e, "strerror", None) or e)) from None
            try:
                length = resp.getheader("Content-Length")
                if length is not None and length.isdigit() and int(length) > self.max_message:
                    raise AspError("protocol_error", "the server at %s sent %s bytes, more "
                                   "than max_message (%d)" % (self.url, length,
                                                              self.max_message))
                data = resp.read(self.max_message + 1)
                if len(data) > self.max_message:
                    raise AspError("protocol_error", "the server at %s sent more than "
                                   "max_message (%d) bytes" % (self.url, self.max_message))
                if resp.will_close or not resp.isclosed():
                    conn.close()
                    self._local.conn = None
            except AspError:
                conn.close()
                self._local.conn = None
                raise
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                self._local.conn = None
                raise AspError("transport_error", "cannot read the answer of %s: %s" % (
                    self.url, getattr(e, "strerror", None) or e)) from None
            return resp.status, data
        raise AssertionError("not reached")

    def call(self, method, params, on_result=None, before_send=None):
        if method == "hello" and self._hello is not None and not self._closed:
            return self._hello  # answered once until a call finds the server gone
        try:
            msg = self._call(method, params, on_result)
        except AspError as e:
            if e.code == "transport_error":
                self._hello = None  # perhaps another server now: ask again
            raise
        if method == "hello" and msg.error is None:
            self._hello = msg
        return msg

    def _call(self, method, params, on_result):
        if self._closed:
            raise AspError("transport_error", "the client was closed")
        with self._lock:
            self._next_id = self._next_id + 1 if self._next_id < UINT32_MAX else 1
            id_ = self._next_id
        body = _wire.request(id_, method, params)
        if len(body) > self.max_message:
            raise _too_large(len(body), self.max_message)
        status, data = self._post(body, method, params)
        if status == 401:
            raise AspError("unauthorized", "%s refused the request (HTTP 401): the token is "
                           "missing or wrong; set the one asp-agent --listen was given "
                           "(http.token_env or http.token_file)" % self.url)
        if status == 413:
            raise AspError("too_large", "%s refused the request as too large (HTTP 413)" %
                           self.url)
        if status == 400:
            raise AspError("protocol_error", "%s could not decode the request (HTTP 400)" %
                           self.url)
        if status != 200:
            raise AspError("transport_error", "%s answered HTTP %d; is it asp-agent "
                           "--listen?" % (self.url, status))
        try:
            msg = _wire.decode(data)
        except AspError as e:
            raise AspError("protocol_error", "%s sent a bad message: %s" % (
                self.url, e.message)) from None
        if msg.type != _wire.RESPONSE or msg.id != id_:
            raise AspError("protocol_error", "%s did not answer request %d with its "
                           "response" % (self.url, id_))
        if on_result is not None and msg.error is None:
            on_result(msg.result, None)
        return msg

    def close(self):
        self._closed = True
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            try:
                c.close()
            except OSError:
                pass
