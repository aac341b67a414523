"""Synchronous transports over the shared RPC engine (asp._rpc): stdio (a child process
speaking framed msgpack on its stdin/stdout, one reader thread matching responses to
callers by id) and HTTP (one POST /v1/rpc per call, and a WebSocket GET /v1/ws for
streams, opened when the first one needs it: docs/http.md). All are safe to use from
many threads at once; stdio and the WebSocket pipeline every call over one connection."""

import collections
import http.client
import select
import socket
import ssl
import subprocess
import threading
import urllib.parse

from . import _rpc, _wire, _ws
from ._errors import AspError
from ._rpc import UINT32_MAX, own_limit, too_large

# A write larger than this has a watchdog: a responder that reads nothing of it for
# call_timeout_ms is killed (smaller ones fit in the pipe).
_WATCHED_WRITE = 65536


class _Waiter(_rpc.Waiter):
    __slots__ = ("event",)

    def __init__(self, on_result=None):
        super().__init__(on_result)
        self.event = threading.Event()

    def _wake(self):
        self.event.set()


class _Pipelined:
    """Calls over a pipelined connection (stdio, the WebSocket): its subclass gives
    ``_open()``, ``_open_lock``, ``_conn`` and ``closed_error()``; the connection gives
    ``send(data)`` and ``die(err, kill)``."""

    def connection(self):
        """The connection, opened now (by _open) if there is none or it died."""
        with self._open_lock:
            err = self.closed_error()
            if err is not None:
                raise err
            c = self._conn
            if c is None or c.dying:
                c = self._conn = self._open()
            return c

    def _call_pipelined(self, method, params, on_result, before_send):
        conn = self.connection()
        if method == "hello" and conn.hello is not None:
            return conn.hello  # answered once per connection (the liveness probe is not)
        msg = self._call_on(conn, method, params, on_result, before_send, 0)
        if method == "hello" and msg.error is None:
            conn.hello = msg
        return msg

    def _call_on(self, conn, method, params, on_result, before_send, explicit_ms):
        w = _Waiter(on_result)
        id_, data = conn.prepare(w, method, params, before_send)
        conn.send(data)
        plan = _rpc.deadlines(conn, w, id_, method, params, explicit_ms)
        reply = None
        while True:
            try:
                what, arg = plan.send(reply)
            except StopIteration:
                return w.answer()
            if what == "wait":
                reply = w.event.wait(arg)
            elif what == "probe":
                try:
                    self._call_on(conn, "hello", {}, None, None, arg)
                    reply = None
                except AspError as e:
                    reply = e
            else:
                conn.die(arg, kill=True)
                reply = None


class _StdioConn(_rpc.RpcConn):
    """One running responder process and the reader thread that serves it."""

    def __init__(self, transport):
        super().__init__(transport, "the stdio responder", threading.Lock())
        argv = transport.argv
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, close_fds=True)
        except OSError as e:
            code = "not_found" if e.errno == 2 else "transport_error"
            raise AspError(code, "cannot start the stdio responder %s: %s" % (
                argv[0], e.strerror or e), errno=e.errno) from None
        self.wlock = threading.Lock()
        self.stderr_tail = collections.deque(maxlen=8)
        self.stderr_done = threading.Event()
        threading.Thread(target=self._drain_stderr, name="asp-stdio-stderr",
                         daemon=True).start()
        self.reader = threading.Thread(target=self._read_loop, name="asp-stdio-reader",
                                       daemon=True)
        self.reader.start()

    def send(self, data):
        data = _wire.frame(data)
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
                err = self.handle(body)
        except (OSError, ValueError) as e:
            err = AspError("transport_error", "cannot read from the stdio responder: %s" % (
                getattr(e, "strerror", None) or e))
        self.die(err, kill=err is not None and err.code == "protocol_error")

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
        return _rpc.explain(err, rc, self.stderr_tail)

    def die(self, err, kill=False):
        if not self.start_dying():
            return
        if kill:
            self._terminate()
        explained = err is None or err.code == "transport_error"
        err = self.end_error(err)
        if explained and not self.closing:
            err = self._explain(err)
        self.fail_all(err)
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


class StdioTransport(_rpc.StdioSettings, _Pipelined):
    """Speaks the RPC over a child's stdin/stdout. A dead responder fails every pending
    call with transport_error; the next call starts a new one."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self._open_lock = threading.Lock()

    def _open(self):
        return _StdioConn(self)

    def call(self, method, params, on_result=None, before_send=None):
        return self._call_pipelined(method, params, on_result, before_send)

    def close(self):
        with self._open_lock:
            self._closed = True
            c, self._conn = self._conn, None
        if c is not None:
            c.close()


# Bodies up to this size go out in the same write as the headers.
_ONE_WRITE_MAX = 64 << 10


class _OneWrite:
    """http.client writes a request's headers and body apart. Without TCP_NODELAY, Nagle
    and delayed ACKs add ~40 ms to every call; with it, the server still wakes twice per
    call. So a small body goes out in the headers' write: one write, one wake-up."""

    def connect(self):
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _send_output(self, message_body=None, encode_chunked=False):
        buf = getattr(self, "_buffer", None)
        if (type(message_body) is not bytes or len(message_body) > _ONE_WRITE_MAX
                or encode_chunked or not isinstance(buf, list)):
            return super()._send_output(message_body, encode_chunked)
        buf.extend((b"", message_body))  # the header lines, a blank line, the body
        msg = b"\r\n".join(buf)
        del buf[:]
        self.send(msg)


class _HTTPConnection(_OneWrite, http.client.HTTPConnection):
    pass


class _HTTPSConnection(_OneWrite, http.client.HTTPSConnection):
    pass


class _WsConn(_rpc.WsRpcConn):
    """One WebSocket to GET PREFIX/v1/ws and the reader thread that serves it."""

    def __init__(self, transport):
        super().__init__(transport, threading.Lock())
        self.wlock = threading.Lock()
        t = transport
        sock = None
        try:
            sock = socket.create_connection((t.host, t.port), timeout=t.call_timeout_ms / 1000.0)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if t.ctx is not None:
                sock = t.ctx.wrap_socket(sock, server_hostname=t.host)
            req, accept = _ws.handshake(t.host, t.port, t.default_port, t.ws_path, t.token,
                                        extra=t.extra_headers)
            sock.sendall(req)
            buf = bytearray()
            end = -1
            while end < 0:
                chunk = sock.recv(65536)
                if not chunk:
                    raise AspError("transport_error", "%s closed the connection during the "
                                   "WebSocket upgrade" % t.url)
                buf += chunk
                end = _ws.head_end(buf)
            _ws.check_answer(bytes(buf[:end]), bytes(buf[end:]), t.url, accept)
        except BaseException as e:
            if sock is not None:
                sock.close()
            if isinstance(e, OSError):
                raise _ws.connect_error(t.url, e, t.ca_file) from None
            raise
        self.sock = sock
        self.reader = threading.Thread(target=self._read_loop, args=(bytes(buf[end:]),),
                                       name="asp-ws-reader", daemon=True)
        self.reader.start()

    def _write(self, data):
        with self.wlock:
            self.sock.sendall(data)

    def send(self, data):
        try:
            self._write(self.message(data))
        except OSError as e:
            self.die(AspError("transport_error", "cannot write to %s: %s" % (
                self.t.url, getattr(e, "strerror", None) or e)), kill=True)

    def _read_loop(self, data):
        err = None
        try:
            while True:
                if data:
                    replies, err = self.receive(data)
                    for r in replies:
                        self._write(r)
                    if err is not None:
                        break
                try:
                    data = self.sock.recv(262144)
                except socket.timeout:
                    data = None  # an idle connection: read on
                    continue
                if not data:
                    err = self.eof_error()
                    break
        except OSError as e:
            err = self.eof_error() if self.closing else AspError(
                "transport_error", "cannot read from %s: %s" % (
                    self.t.url, getattr(e, "strerror", None) or e))
        self.die(err)

    def die(self, err, kill=False):
        if not self.start_dying():
            return
        self.fail_all(self.end_error(err))
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if threading.current_thread() is not self.reader:
            self.reader.join(2.0)
        self.sock.close()

    def close(self, timeout=5.0):
        with self.lock:
            self.closing = True
        try:
            self._write(_ws.close_frame(_ws.NORMAL))
        except OSError:
            pass
        # The server answers with its close frame, then ends the connection.
        self.reader.join(timeout)
        self.die(None)
        self.sock.close()


class HttpTransport(_Pipelined):
    """POST /v1/rpc, one request per call, one kept-alive connection per thread, and a
    WebSocket for streams (docs/http.md): with ``websocket`` None spawn and proc_attach
    go over one WebSocket opened when the first needs it (the listener sends a process's
    output to the connection that started or attached it), everything else over POST;
    True sends every call over the WebSocket, False none (streams are then unsupported).

    The stdio client's deadlines apply (docs/faults.md): connecting and each send or read
    make progress within call_timeout_ms, and the answer starts within call_timeout_ms
    plus the op's own timeout_ms; an exec or proc_wait without one is probed with hello
    on a connection of its own every call_timeout_ms instead."""

    def __init__(self, url, token, max_message, ca_file=None, call_timeout_ms=60000,
                 websocket=None, on_notify=None, headers=()):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise AspError("invalid_argument", "http needs a URL like http://127.0.0.1:8722, "
                           "got %r" % url)
        if websocket not in (None, True, False):
            raise AspError("invalid_argument", "websocket is None, True or False")
        self.url = url
        self.scheme = u.scheme
        self.host = u.hostname
        self.default_port = 443 if u.scheme == "https" else 80
        self.port = u.port or self.default_port
        self.path = u.path.rstrip("/") + "/v1/rpc"
        self.ws_path = u.path.rstrip("/") + "/v1/ws"
        self.token = token
        self.extra_headers = list(headers or ())  # [(name, value)], checked by the caller
        self.max_message = max_message
        self.ca_file = ca_file
        self.ctx = None
        if u.scheme == "https":
            self.ctx = ssl.create_default_context(cafile=ca_file)
        self.websocket = websocket
        self.on_notify = on_notify
        self._local = threading.local()
        self._lock = threading.Lock()
        self._next_id = 0
        self._conns = []
        self._conn = None  # the WebSocket, opened by the first call that needs it
        self._open_lock = threading.Lock()
        self._hello = None  # the server's hello answer, kept until a transport_error
        self._closed = False
        self.call_timeout_ms = call_timeout_ms or 60000
        self.describe = url

    @property
    def carries_notifications(self):
        return self.websocket is not False and self.on_notify is not None

    def streams_refused(self, name):
        return _rpc.streams_refused(name, self.url, self.websocket)

    def _open(self):
        return _WsConn(self)

    def closed_error(self):
        if self._closed:
            return AspError("transport_error", "the client was closed")
        return None

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
        headers.update(self.extra_headers)
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
        own = own_limit(method, params)
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
        stream = on_result is not None or before_send is not None
        try:
            if _rpc.http_route(self.websocket, stream) == "ws":
                msg = self._call_pipelined(method, params, on_result, before_send)
            else:
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
            raise too_large(len(body), self.max_message)
        status, data = self._post(body, method, params)
        err = _rpc.http_status_error(self.url, status)
        if err is not None:
            raise err
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
            ws, self._conn = self._conn, None
        for c in conns:
            try:
                c.close()
            except OSError:
                pass
        if ws is not None:
            ws.close()
