"""The client machinery under the generated asp.Client: transports, the config's
defaults (cwd, env, timeout), and Process, the iterator a spawn returns."""

import collections
import dataclasses
import os
import threading

from . import _codec, _config, _transport, _wire
from ._errors import AspError


def join_path(base, name):
    """A relative sandbox path joined to the config's cwd, as the C client does it."""
    return base + ("" if base.endswith("/") else "/") + name


class _Follower:
    """What a followed process is, whatever waits for it (asp.Process with a thread's
    condition variable, asp.aio.Process with an asyncio event): the events queued in
    order, the exit that ends them, the transport error that cuts them short."""

    _KIND = "asp.Process"

    def __init__(self, client, op, lock):
        self._client = client
        self._op = op
        self._conn = None
        self._lock = lock
        self._queue = collections.deque()
        self._ended = False
        self._error = None
        self.proc = None
        self.result = None
        self.exit = None

    def __repr__(self):
        state = "exited %r" % (self.exit,) if self.exit else "running"
        return "<%s %s %s>" % (self._KIND, self.proc, state)

    def _wake(self):
        raise NotImplementedError

    # called from the connection's reader (a thread, or a task)
    def _push(self, event):
        with self._lock:
            if self._ended:
                return
            self._queue.append(event)
            if type(event).__name__ == self._client._spec.STREAM_END_CLASS:
                self.exit = event
                self._ended = True
                self._detach()
            self._wake()

    def _fail(self, err):
        with self._lock:
            if not self._ended:
                self._error = err
                self._ended = True
            self._wake()

    def _detach(self):
        # lock order: the follower's lock, then the connection's (never the reverse)
        if self._conn is not None and self.proc is not None:
            conn, self._conn = self._conn, None
            conn.unsubscribe(self.proc, self)

    def _ready(self):
        """Whether next_event has something to return (under the lock)."""
        return bool(self._queue) or self._ended

    def _take(self):
        """The next event, None at the end, or the error (under the lock, once ready)."""
        if self._queue:
            return self._queue.popleft()
        if self._error is not None:
            e = self._error
            raise AspError(e.code, e.message, errno=e.errno, path=e.path)
        return None

    def _timed_out(self, timeout):
        return TimeoutError("no event from process %s in %s s" % (self.proc, timeout))

    @staticmethod
    def _gather(ev, out, err):
        if getattr(ev, "stream", None) == "stdout":
            out += ev.data
        elif getattr(ev, "stream", None) == "stderr":
            err += ev.data

    def _stop(self):
        with self._lock:
            self._ended = True
            self._detach()
            self._wake()


class Process(_Follower):
    """A process started by ``Client.spawn`` (or followed by ``Client.proc_attach``).

    Iterating yields its output as ``OutputEvent`` chunks in order, then its
    ``ExitEvent``, then stops. ``write``, ``signal`` and ``wait`` call ``proc_write``,
    ``proc_signal`` and ``proc_wait`` for it. A transport that dies while you iterate
    raises ``AspError`` (transport_error) from the iterator.
    """

    def __init__(self, client, op):
        super().__init__(client, op, threading.Condition())

    def _wake(self):
        self._lock.notify_all()

    def next_event(self, timeout=None):
        """The next event, or None once the exit has been returned. With a timeout in
        seconds, raises TimeoutError when nothing came in time."""
        with self._lock:
            if not self._lock.wait_for(self._ready, timeout):
                raise self._timed_out(timeout)
            return self._take()

    def __iter__(self):
        return self

    def __next__(self):
        ev = self.next_event()
        if ev is None:
            raise StopIteration
        return ev

    def collect(self):
        """Reads to the end: (stdout bytes, stderr bytes, ExitEvent)."""
        out, err = bytearray(), bytearray()
        for ev in self:
            self._gather(ev, out, err)
        return bytes(out), bytes(err), self.exit

    def write(self, data=b"", eof=False):
        """Writes to the process's stdin (proc_write); eof closes it."""
        return self._client.proc_write(self.proc, data=data, eof=eof)

    def signal(self, signal="TERM"):
        """Signals the process group (proc_signal)."""
        return self._client.proc_signal(self.proc, signal)

    def resize(self, rows, cols):
        """Sets the terminal's window size (proc_resize): for a process spawned with tty."""
        return self._client.proc_resize(self.proc, rows, cols)

    def wait(self, timeout_ms=0):
        """Waits for the exit on the responder (proc_wait) and returns its result."""
        return self._client.proc_wait(self.proc, timeout_ms=timeout_ms)

    def close(self):
        """Stops following the process here; it keeps running in the sandbox."""
        self._stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class ClientBase:
    """Shared by every generated Client, synchronous and asyncio (asp._aio_base adds
    only the awaiting): see asp.Client for the methods."""

    _spec = None  # the generated asp._spec module, set by the subclass
    SDK_NAME = "Python"
    _Process = Process
    _StdioTransport = _transport.StdioTransport
    _HttpTransport = _transport.HttpTransport

    def __init__(self, transport, cwd=None, env=None, timeout_ms=0, config=None):
        self._transport = transport
        self.cwd = cwd
        self.env = dict(env or {})
        self.timeout_ms = timeout_ms or 0
        self.config = config

    # ---- opening ----
    @classmethod
    def _stdio_client(cls, argv, cwd, env, timeout_ms, call_timeout_ms):
        self = cls.__new__(cls)
        t = cls._StdioTransport(argv, cls._spec.MAX_MESSAGE, self._on_notify,
                                call_timeout_ms=call_timeout_ms)
        ClientBase.__init__(self, t, cwd, env, timeout_ms)
        return self

    @classmethod
    def stdio(cls, argv, *, cwd=None, env=None, timeout_ms=0, call_timeout_ms=60000):
        """A client speaking to ``argv`` (e.g. ``["asp-agent", "--stdio"]``, or
        ``["docker", "exec", "-i", "box", "asp-agent", "--stdio"]``) over its
        stdin/stdout. ``cwd``, ``env`` and ``timeout_ms`` are defaults applied to every
        call as a config's are; ``call_timeout_ms`` is the deadline of calls without a
        time limit of their own (docs/faults.md)."""
        self = cls._stdio_client(argv, cwd, env, timeout_ms, call_timeout_ms)
        self._transport.connection()  # start it now, so a bad argv fails here
        return self

    @classmethod
    def http(cls, url, token=None, *, ca_file=None, cwd=None, env=None, timeout_ms=0,
             call_timeout_ms=60000, websocket=None, headers=None):
        """A client of ``asp-agent --listen`` at ``url``, with ``Authorization: Bearer
        token`` when a token is given. Calls go as ``POST URL/v1/rpc``; ``spawn`` and
        ``proc_attach``, whose output comes as notifications, over one WebSocket
        (``GET URL/v1/ws``) opened when the first needs it. ``websocket=True`` sends
        every call over the WebSocket, ``False`` none (streams are then unsupported), as
        http.websocket in .asp.json. ``call_timeout_ms`` is the deadline of calls without
        a time limit of their own, as for stdio. ``headers`` (a dict, or name and value
        pairs) go with every request and the upgrade, for a gateway in front of the
        listener, as http.headers in .asp.json."""
        self = cls.__new__(cls)
        t = cls._HttpTransport(url, token, cls._spec.MAX_MESSAGE, ca_file=ca_file,
                               call_timeout_ms=call_timeout_ms, websocket=websocket,
                               on_notify=self._on_notify,
                               headers=_config.check_headers(headers))
        ClientBase.__init__(self, t, cwd, env, timeout_ms)
        return self

    @classmethod
    def _config_opener(cls, cfg):
        """(opener, args, kwargs) for the client a config names."""
        common = {"cwd": cfg.cwd, "env": cfg.env, "timeout_ms": cfg.timeout_ms,
                  "call_timeout_ms": cfg.call_timeout_ms}
        if cfg.transport == "stdio":
            return cls.stdio, (cfg.stdio_command,), common
        if cfg.transport == "http":
            token = _config.secret(cfg.http_token_env, cfg.http_token_file)
            return cls.http, (cfg.http_url, token), dict(
                common, ca_file=cfg.http_ca_file, websocket=cfg.http_websocket,
                headers=_config.headers_of(cfg))
        raise AspError("unsupported", "%s: the %s SDK cannot serve transport %s; use the "
                       "asp CLI or the C library" % (cfg.path, cls.SDK_NAME, cfg.transport),
                       path=cfg.path)

    @classmethod
    def from_config(cls, path=None):
        """A client for the sandbox ``.asp.json`` names: the file at ``path``, else
        ``$ASP_CONFIG``, else ``.asp.json`` in the working directory or a parent."""
        cfg = _config.load(path)
        opener, args, kw = cls._config_opener(cfg)
        c = opener(*args, **kw)
        c.config = cfg
        return c

    @classmethod
    def load_config(cls, path=None):
        """Finds and validates a config without connecting; returns its view."""
        return _config.load(path)

    def open_connection(self, port, host=None, timeout_ms=0):
        """connect, as a socket-like asp._socket.Connection (recv, sendall, shutdown,
        close): a TCP connection opened from inside the sandbox."""
        from ._socket import Connection

        return Connection(self.connect(port, host=host, timeout_ms=timeout_ms))

    def upload_dir(self, source_dir, target_dir, *, exclude=None):
        """Copies the local directory ``source_dir`` into the sandbox directory
        ``target_dir`` (made with its parents when absent, merged into when it exists) as
        one tar stream (tree_write): files, directories and symlinks with their modes and
        mtimes. ``exclude``: glob patterns left out. Returns TreeCounts (entries, bytes).
        A sandbox that refuses the stream, or any failure, leaves nothing there."""
        from . import _tree

        return _tree.upload(self, source_dir, target_dir, exclude)

    def download_dir(self, source_dir, target_dir, *, exclude=None):
        """Copies the sandbox directory ``source_dir`` into the local directory
        ``target_dir`` (made when absent, merged into when it exists; files there of the
        same names are replaced) as one tar stream (tree_read), checked and unpacked
        through a temporary directory: a failure leaves nothing. Returns TreeCounts."""
        from . import _tree

        return _tree.download(self, source_dir, target_dir, exclude)

    def close(self):
        """Closes the connection: a stdio responder gets EOF, answers what is in flight
        and exits. Calls after close raise transport_error."""
        self._transport.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def transport(self):
        """"stdio ARGV..." or the HTTP URL."""
        return self._transport.describe

    @property
    def max_message(self):
        return self._transport.max_message

    # ---- calls ----
    def _apply(self, op, params):
        """The config's defaults: relative paths join cwd, env merges, timeout fills."""
        changes = {}
        for f in op.params.fields:
            v = getattr(params, f.attr)
            if f.role == "path":
                if isinstance(v, (bytes, os.PathLike)):
                    v = os.fsdecode(v)
                if v is None and f.name == "cwd" and self.cwd:
                    changes[f.attr] = self.cwd
                elif isinstance(v, str) and v and self.cwd and not v.startswith("/"):
                    changes[f.attr] = join_path(self.cwd, v)
            elif f.role == "env" and self.env:
                merged = dict(self.env)
                if isinstance(v, dict):
                    merged.update(v)
                    changes[f.attr] = merged
                elif v is None:
                    changes[f.attr] = merged
            elif f.role == "timeout" and self.timeout_ms and not v:
                changes[f.attr] = self.timeout_ms
        return dataclasses.replace(params, **changes) if changes else params

    def _request(self, name, params):
        """(op, wire params) of a call, the config's defaults applied."""
        op = self._spec.OPS[name]
        return op, _codec.encode_params(op.params, self._apply(op, params))

    def _result(self, op, msg):
        """The call's result from its response, or its error raised."""
        if msg.error is not None:
            raise _wire.error_from_map(msg.error, self._spec.ERROR_CODES)
        result = _codec.decode_record(op.result, msg.result)
        if op.name == "hello" and getattr(result, "max_message", 0):
            self._transport.max_message = result.max_message
        return result

    def _follower(self, name, params, proc_from):
        """An op whose process is followed by notifications: spawn (the proc comes in
        the result) or proc_attach (the proc is in the params). Returns (op, wire, the
        Process, the transport hooks that subscribe it to the connection)."""
        if not self._transport.carries_notifications:
            raise self._transport.streams_refused(name)
        op, wire = self._request(name, params)
        p = self._Process(self, name)
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
        return op, wire, p, hooks

    def _call(self, name, params):
        op, wire = self._request(name, params)
        return self._result(op, self._transport.call(op.name, wire))

    def _stream(self, name, params, proc_from):
        op, wire, p, hooks = self._follower(name, params, proc_from)
        try:
            p.result = self._result(op, self._transport.call(op.name, wire, **hooks))
        except BaseException:
            p.close()
            raise
        return p

    def _on_notify(self, conn, method, params):
        desc = self._spec.NOTES.get(method)
        if desc is None:
            return None  # a notification this SDK does not know: ignore it
        try:
            ev = _codec.decode_record(desc, params)
        except AspError as e:
            return AspError("protocol_error", "the responder sent a bad %s notification: %s"
                            % (method, e.message))
        conn.route(getattr(ev, "proc", None), ev)
        return None
