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


class Process:
    """A process started by ``Client.spawn`` (or followed by ``Client.proc_attach``).

    Iterating yields its output as ``OutputEvent`` chunks in order, then its
    ``ExitEvent``, then stops. ``write``, ``signal`` and ``wait`` call ``proc_write``,
    ``proc_signal`` and ``proc_wait`` for it. A transport that dies while you iterate
    raises ``AspError`` (transport_error) from the iterator.
    """

    def __init__(self, client, op):
        self._client = client
        self._op = op
        self._conn = None
        self._cv = threading.Condition()
        self._queue = collections.deque()
        self._ended = False
        self._error = None
        self.proc = None
        self.result = None
        self.exit = None

    def __repr__(self):
        state = "exited %r" % (self.exit,) if self.exit else "running"
        return "<asp.Process %s %s>" % (self.proc, state)

    # called from the transport's reader thread
    def _push(self, event):
        with self._cv:
            if self._ended:
                return
            self._queue.append(event)
            if type(event).__name__ == self._client._spec.STREAM_END_CLASS:
                self.exit = event
                self._ended = True
                self._detach()
            self._cv.notify_all()

    def _fail(self, err):
        with self._cv:
            if not self._ended:
                self._error = err
                self._ended = True
            self._cv.notify_all()

    def _detach(self):
        # lock order: Process._cv, then the connection's lock (never the reverse)
        if self._conn is not None and self.proc is not None:
            conn, self._conn = self._conn, None
            conn.unsubscribe(self.proc, self)

    def next_event(self, timeout=None):
        """The next event, or None once the exit has been returned. With a timeout in
        seconds, raises TimeoutError when nothing came in time."""
        with self._cv:
            while not self._queue and not self._ended:
                if not self._cv.wait(timeout):
                    raise TimeoutError("no event from process %s in %s s" % (self.proc,
                                                                             timeout))
            if self._queue:
                return self._queue.popleft()
            if self._error is not None:
                e = self._error
                raise AspError(e.code, e.message, errno=e.errno, path=e.path)
            return None

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
            if getattr(ev, "stream", None) == "stdout":
                out += ev.data
            elif getattr(ev, "stream", None) == "stderr":
                err += ev.data
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
        with self._cv:
            self._ended = True
            self._detach()
            self._cv.notify_all()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class ClientBase:
    """Shared by every generated Client: see asp.Client for the methods."""

    _spec = None  # the generated asp._spec module, set by the subclass
    SDK_NAME = "Python"

    def __init__(self, transport, cwd=None, env=None, timeout_ms=0, config=None):
        self._transport = transport
        self.cwd = cwd
        self.env = dict(env or {})
        self.timeout_ms = timeout_ms or 0
        self.config = config

    # ---- opening ----
    @classmethod
    def stdio(cls, argv, *, cwd=None, env=None, timeout_ms=0, call_timeout_ms=60000):
        """A client speaking to ``argv`` (e.g. ``["asp-agent", "--stdio"]``, or
        ``["docker", "exec", "-i", "box", "asp-agent", "--stdio"]``) over its
        stdin/stdout. ``cwd``, ``env`` and ``timeout_ms`` are defaults applied to every
        call as a config's are; ``call_timeout_ms`` is the deadline of calls without a
        time limit of their own (docs/faults.md)."""
        self = cls.__new__(cls)
        t = _transport.StdioTransport(argv, cls._spec.MAX_MESSAGE, self._on_notify,
                                      call_timeout_ms=call_timeout_ms)
        ClientBase.__init__(self, t, cwd, env, timeout_ms)
        t.connection()  # start it now, so a bad argv fails here
        return self

    @classmethod
    def http(cls, url, token=None, *, ca_file=None, cwd=None, env=None, timeout_ms=0,
             call_timeout_ms=60000):
        """A client calling ``POST URL/v1/rpc`` of ``asp-agent --listen``, with
        ``Authorization: Bearer token`` when a token is given. HTTP carries no
        notifications, so ``spawn`` and ``proc_attach`` need stdio. ``call_timeout_ms``
        is the deadline of calls without a time limit of their own, as for stdio."""
        t = _transport.HttpTransport(url, token, cls._spec.MAX_MESSAGE, ca_file=ca_file,
                                     call_timeout_ms=call_timeout_ms)
        return cls(t, cwd, env, timeout_ms)

    @classmethod
    def from_config(cls, path=None):
        """A client for the sandbox ``.asp.json`` names: the file at ``path``, else
        ``$ASP_CONFIG``, else ``.asp.json`` in the working directory or a parent."""
        cfg = _config.load(path)
        if cfg.transport == "stdio":
            c = cls.stdio(cfg.stdio_command, cwd=cfg.cwd, env=cfg.env,
                          timeout_ms=cfg.timeout_ms, call_timeout_ms=cfg.call_timeout_ms)
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

    @classmethod
    def load_config(cls, path=None):
        """Finds and validates a config without connecting; returns its view."""
        return _config.load(path)

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

    def _result(self, op, msg):
        if msg.error is not None:
            raise _wire.error_from_map(msg.error, self._spec.ERROR_CODES)
        return _codec.decode_record(op.result, msg.result)

    def _call(self, name, params):
        op = self._spec.OPS[name]
        wire = _codec.encode_params(op.params, self._apply(op, params))
        msg = self._transport.call(op.name, wire)
        result = self._result(op, msg)
        if name == "hello" and getattr(result, "max_message", 0):
            self._transport.max_message = result.max_message
        return result

    def _stream(self, name, params, proc_from):
        """An op whose process is followed by notifications: spawn (the proc comes in
        the result) or proc_attach (the proc is in the params)."""
        op = self._spec.OPS[name]
        if not self._transport.carries_notifications:
            raise AspError("unsupported", "%s needs a transport that carries notifications "
                           "(stdio); %s does not: run the process with exec, or connect "
                           "over stdio" % (name, self._transport.describe))
        wire = _codec.encode_params(op.params, self._apply(op, params))
        p = Process(self, name)
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
            msg = self._transport.call(op.name, wire, **hooks)
            p.result = self._result(op, msg)
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

