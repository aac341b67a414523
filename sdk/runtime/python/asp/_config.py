""".asp.json: discovery, the view the client reads, and the few rules a schema cannot say
(docs/design.md, ".asp.json"), as core/src/config.c. The rules themselves are the tables
asp-sdkgen made from spec/asp.schema.json and spec/asp.v0.schema.json
(asp._config_tables), walked by asp._config_check, so a file gets the C core's messages,
word for word.
"""

import errno as _errno
import os
import pwd
import stat as _stat

from . import _config_check, _config_tables, _json
from ._errors import AspError

CONFIG_MAX_BYTES = 1024 * 1024
SECRET_MAX_BYTES = 64 * 1024
PATH_MAX = 4096

_ERRNO_CODES = {
    _errno.ENOENT: "not_found", _errno.EACCES: "permission_denied",
    _errno.EPERM: "permission_denied", _errno.EEXIST: "already_exists",
    _errno.ENOTDIR: "not_a_directory", _errno.EISDIR: "is_a_directory",
    _errno.ENOTEMPTY: "not_empty", _errno.EINVAL: "invalid_argument",
}


_cut = _config_check._cut
_is_int = _config_check._is_int


def _error(code, msg, path=None):
    return AspError(code, _cut(msg), path=path)


def _os_error(e, what, path=None):
    n = e.errno or _errno.EIO
    return AspError(_ERRNO_CODES.get(n, "io_error"), _cut("%s: %s" % (what, os.strerror(n))),
                    errno=n, path=path)


# How each leaf property of the schema lands in the view.
_FIELDS = (
    ("version", "skip"), ("transport", "transport"), ("cwd", "string"), ("env", "env"),
    ("timeout_ms", "u64"), ("call_timeout_ms", "uint"), ("ssh.host", "string"),
    ("ssh.port", "uint"),
    ("ssh.user", "string"), ("ssh.identity_file", "local_path"),
    ("ssh.identity_env", "string"),
    ("ssh.password_env", "string"), ("ssh.known_hosts", "local_path"),
    ("ssh.host_key_sha256", "string"), ("ssh.host_key", "string"),
    ("ssh.strict_host_key_checking", "hostkey"),
    ("ssh.connect_timeout_ms", "uint"), ("ssh.agent", "string"),
    ("stdio.command", "argv"), ("http.url", "string"), ("http.token_env", "string"),
    ("http.token_file", "local_path"), ("http.ca_file", "local_path"),
    ("http.websocket", "bool"), ("http.headers", "headers"),
    ("workspace.local", "local_path"),
    ("workspace.sandbox", "string"),
)
_TRANSPORTS = ("stdio", "ssh", "http")


def _check_fields():
    """The view reads only what the schema defines, and knows every transport it names."""
    for p, _ in _FIELDS:
        if _config_check.walk(_config_tables.V1, p) is None:
            raise _error("internal", "the SDK's config view reads %s, which "
                         "spec/asp.schema.json does not define" % p)
    for name in _config_check.walk(_config_tables.V1, "transport").get("values", ()):
        if name not in _TRANSPORTS:
            raise _error("internal", "spec/asp.schema.json names a transport the SDK does "
                         "not know: %s" % (name if isinstance(name, str) else
                                           "(not a string)"))


def _walk(doc, dotted):
    for seg in dotted.split("."):
        if not isinstance(doc, dict) or seg not in doc:
            return None
        doc = doc[seg]
    return doc


# ---- version 0 (core/src/config.c map_v0, docs/decisions.md "Files of the ASP v0 draft") -

def _is_v0(doc):
    """"version": "0"; also 0 beside "connection", so the v0 schema names the version."""
    if not isinstance(doc, dict):
        return False
    v = doc.get("version")
    return v == "0" or (_is_int(v) and v == 0 and "connection" in doc)


def _v0_to_v1(v0):
    """The version 1 document a valid v0 document means, keys in the C core's order."""
    conn = v0.get("connection") or {}
    ident = conn.get("identity") or {}
    v1 = {"version": 1, "transport": "ssh"}
    ssh = {}
    if "workspace" in v0:
        v1["cwd"] = v0["workspace"]
    for src, dst in ((conn, "host"), (conn, "port"), (conn, "user")):
        if dst in src:
            ssh[dst] = src[dst]
    if "file" in ident:
        ssh["identity_file"] = ident["file"]
    if "env" in ident:
        ssh["identity_env"] = ident["env"]
    hk = conn.get("host_key")
    if hk is None:
        ssh["strict_host_key_checking"] = "accept-new"
    else:
        ssh["host_key_sha256" if hk.startswith("SHA256:") else "host_key"] = hk
    v1["ssh"] = ssh
    return v1


# ---- paths ------------------------------------------------------------------------------

def _join(d, name):
    while name.startswith("./"):
        name = name[2:]
    if name == ".":
        name = ""
    if not name:
        return d
    return d + ("" if d.endswith("/") else "/") + name


def _absolute(path):
    if path.startswith("/"):
        out = path
    else:
        try:
            cwd = os.getcwd()
        except OSError as e:
            raise _os_error(e, "cannot get the working directory")
        out = _join(cwd, path)
    if len(out.encode("utf-8", "surrogateescape")) >= PATH_MAX:
        raise _error("too_large", "path too long: %s" % path, path)
    return out


def _home_dir():
    home = os.environ.get("HOME")
    if home:
        return home
    try:
        d = pwd.getpwuid(os.getuid()).pw_dir
        return d or None
    except KeyError:
        return None


def _local_path(v, base, p):
    if p.startswith("~"):
        if len(p) > 1 and p[1] != "/":
            raise v.fail("value", "only ~/ is expanded, not ~user/; write the full path")
        home = _home_dir()
        if not home:
            raise v.fail("value", "cannot expand ~: $HOME is not set")
        out = _join(home, p[2:] if len(p) > 1 else "")
    elif p.startswith("/"):
        out = p
    else:
        out = _join(base, p)
    if len(out.encode("utf-8", "surrogateescape")) >= PATH_MAX:
        raise v.fail("value", "path longer than %d bytes" % (PATH_MAX - 1))
    return out


# ---- the view ---------------------------------------------------------------------------

class Config:
    """A loaded, validated .asp.json, as asp_config_view shows it: strings are None when
    absent, schema defaults applied, local paths absolute."""

    def __init__(self):
        self.path = None
        self.transport = None
        self.cwd = None
        self.env = {}
        self.timeout_ms = 0
        self.call_timeout_ms = 60000
        self.ssh = {}
        self.stdio_command = None
        self.http_url = None
        self.http_token_env = None
        self.http_token_file = None
        self.http_ca_file = None
        self.http_websocket = None  # absent: POST and a WebSocket for streams
        # http.headers in file order: (name, value, env), one of value and env None
        self.http_headers = []
        # the harness's directory (absolute) and the sandbox directory it stands for, keys
        # "local" and "sandbox" when set (asp.Workspace maps between them)
        self.workspace = {}
        self.document = {}  # the whole validated file, as version 1 (keys the view lacks too)

    def as_dict(self):
        return {
            "path": self.path, "transport": self.transport, "cwd": self.cwd,
            "env": [[k, x] for k, x in self.env.items()], "timeout_ms": self.timeout_ms,
            "call_timeout_ms": self.call_timeout_ms,
            "ssh": dict(self.ssh), "stdio": {"command": self.stdio_command},
            "http": {"url": self.http_url, "token_env": self.http_token_env,
                     "token_file": self.http_token_file, "ca_file": self.http_ca_file,
                     "websocket": self.http_websocket,
                     "headers": [list(h) for h in self.http_headers]},
        }


def _view_bug(path):
    return _error("internal", "spec/asp.schema.json lets %s hold a value the SDK's config "
                  "view cannot represent" % path)


def _build_field(v, path, kind, doc, cfg, base):
    val = _walk(doc, path)
    if val is None:
        val = (_config_check.walk(_config_tables.V1, path) or {}).get("default")
    if val is None or kind == "skip":
        return
    v.path = path.split(".")
    section, _, leaf = path.rpartition(".")
    if kind == "transport":
        if val not in _TRANSPORTS:
            raise _view_bug(path)
        cfg.transport = val
    elif kind == "string":
        if not isinstance(val, str):
            raise _view_bug(path)
        _store(cfg, section, leaf, val)
    elif kind == "local_path":
        if not isinstance(val, str):
            raise _view_bug(path)
        _store(cfg, section, leaf, _local_path(v, base, val))
    elif kind in ("uint", "u64"):
        if not _is_int(val) or val < 0 or (kind == "uint" and val > 0xFFFFFFFF):
            raise _view_bug(path)
        _store(cfg, section, leaf, val)
    elif kind == "bool":
        if not isinstance(val, bool):
            raise _view_bug(path)
        _store(cfg, section, leaf, val)
    elif kind == "hostkey":
        if isinstance(val, bool):
            _store(cfg, section, leaf, val)
        elif val == "accept-new":
            _store(cfg, section, leaf, val)
        else:
            raise _view_bug(path)
    elif kind == "env":
        if not isinstance(val, dict) or not all(isinstance(x, str) for x in val.values()):
            raise _view_bug(path)
        cfg.env = dict(val)
    elif kind == "headers":
        if not isinstance(val, dict):
            raise _view_bug(path)
        for name, x in val.items():
            if isinstance(x, str):
                cfg.http_headers.append((name, x, None))
            elif isinstance(x, dict) and isinstance(x.get("env"), str):
                cfg.http_headers.append((name, None, x["env"]))
            else:
                raise _view_bug(path)
    elif kind == "argv":
        if not isinstance(val, list) or not all(isinstance(x, str) for x in val):
            raise _view_bug(path)
        argv = list(val)
        if argv and ("/" in argv[0] or argv[0].startswith("~")):
            v.path.append(0)
            argv[0] = _local_path(v, base, argv[0])
        cfg.stdio_command = argv


def _store(cfg, section, leaf, val):
    if section == "ssh":
        cfg.ssh[leaf] = val
    elif section == "http":
        setattr(cfg, "http_" + leaf, val)
    elif section == "workspace":
        cfg.workspace[leaf] = val
    else:
        setattr(cfg, leaf, val)


def _syntax_error(file, file_path, e):
    text = e.text
    for jansson, ours in (("\\u0000 is not allowed without JSON_ALLOW_NUL",
                           "strings may not contain \\u0000"),
                          ("NUL byte in object key not supported",
                           "keys may not contain \\u0000")):
        if text.startswith(jansson):
            text = ours + text[len(jansson):]
            break
    return _error("invalid_argument", "%s:%d:%d: invalid JSON: %s" % (
        file, e.line if e.line > 0 else 1, e.column if e.column > 0 else 1, text),
        file_path)


def parse(data, filename):
    """Validates config bytes. ``filename`` names the file in messages and its directory
    is the base of relative paths; None means "<memory>" and the working directory. A
    file of the v0 draft ("version": "0") is checked against the v0 rules and read as the
    version 1 file it means."""
    if filename is not None:
        file = _absolute(filename)
        base = file[:file.rindex("/")] or "/"
    else:
        file = "<memory>"
        try:
            base = os.getcwd()
        except OSError as e:
            raise _os_error(e, "cannot get the working directory")
    if len(data) > CONFIG_MAX_BYTES:
        raise _error("too_large", "%s: %d bytes, more than a config may hold (%d); is it "
                     "the right file?" % (file, len(data), CONFIG_MAX_BYTES), filename)
    _check_fields()
    file_path = file if filename is not None else None
    try:
        doc = _json.parse(data)
    except _json.JsonError as e:
        raise _syntax_error(file, file_path, e)
    v = _config_check.Ctx(bytes(data), file, file_path)
    if _is_v0(doc):
        _config_check.validate(v, _config_tables.V0, doc)
        doc = _v0_to_v1(doc)
    _config_check.validate(v, _config_tables.V1, doc)
    cfg = Config()
    cfg.path = file if filename is not None else None
    cfg.document = doc
    for path, kind in _FIELDS:
        _build_field(v, path, kind, doc, cfg, base)
    return cfg


def _read_file(path, limit, what):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise _os_error(e, "cannot open %s %s" % (what, path), path)
    chunks = []
    total = 0
    try:
        while total <= limit:
            try:
                b = os.read(fd, 65536)
            except InterruptedError:
                continue
            except OSError as e:
                raise _os_error(e, "cannot read %s %s" % (what, path), path)
            if not b:
                break
            chunks.append(b)
            total += len(b)
    finally:
        os.close(fd)
    if total > limit:
        raise _error("too_large", "%s %s is larger than %d bytes; is it the right file?" % (
            what, path, limit), path)
    return b"".join(chunks)


def find(start_dir=None):
    """The config's absolute path: $ASP_CONFIG when set and non-empty, else .asp.json in
    start_dir (None: the working directory), then each parent up to /."""
    env = os.environ.get("ASP_CONFIG")
    if env:
        try:
            st = os.stat(env)
        except OSError as e:
            if e.errno == _errno.ENOENT:
                raise _error("not_found", "ASP_CONFIG names %s, which does not exist; point "
                             "it at a .asp.json or unset it" % env, env)
            raise _os_error(e, "cannot use ASP_CONFIG=%s" % env, env)
        if _stat.S_ISDIR(st.st_mode):
            raise _error("is_a_directory", "ASP_CONFIG names %s, a directory; point it at a "
                         ".asp.json file" % env, env)
        return _absolute(env)
    start = _absolute(start_dir if start_dir is not None else ".")
    while len(start) > 1 and start.endswith("/"):
        start = start[:-1]
    d = start
    while True:
        cand = _join(d, ".asp.json")
        if len(cand.encode("utf-8", "surrogateescape")) >= PATH_MAX:
            raise _error("too_large", "path too long: %s" % d, d)
        try:
            st = os.stat(cand)
            if not _stat.S_ISDIR(st.st_mode):
                return cand
        except OSError as e:
            if e.errno not in (_errno.ENOENT, _errno.ENOTDIR):
                raise _os_error(e, "cannot look for %s" % cand, cand)
        if d == "/":
            break
        i = d.rindex("/")
        d = d[:i] if i > 0 else "/"
    raise _error("not_found", "no .asp.json in %s or any parent directory; create one with "
                 "`asp init`, or set ASP_CONFIG to its path" % start, start)


def load(path):
    """Reads and validates the config at path, or the one find() finds when None."""
    if path is None:
        path = find()
    path = os.fsdecode(path)
    data = _read_file(path, CONFIG_MAX_BYTES, "config")
    return parse(data, path)


def check_headers(headers):
    """Extra HTTP headers as [(name, value)], from a dict or pairs, checked as the schema
    checks http.headers (the names the transport sets itself refused)."""
    nodes = _config_tables.V1[1]
    h = _config_check.walk(_config_tables.V1, "http.headers")
    names, values = nodes[h["names"]], nodes[h["more"]]
    items = list(headers.items()) if isinstance(headers, dict) else list(headers or ())
    for name, value in items:
        if not isinstance(name, str) or not _config_check._value_ok(nodes, names, name):
            raise _error("invalid_argument", "headers: %r: expected %s" % (
                name, names["expected"]))
        if not isinstance(value, str) or not _config_check._value_ok(nodes, values, value):
            raise _error("invalid_argument", "headers: %s: expected %s, got %r" % (
                name, values["expected"], value))
    return items


def headers_of(cfg):
    """http.headers with each {"env": NAME} read from the environment: [(name, value)]."""
    where = cfg.path or "the config"
    out = []
    for name, value, env in cfg.http_headers:
        if env is not None:
            value = os.environ.get(env)
            if value is None:
                raise _error("not_found", "http.headers.%s in %s: environment variable %s is "
                             "not set" % (name, where, env))
            if any((ord(c) < 0x20 and c != "\t") or c == "\x7f" for c in value):
                raise _error("invalid_argument", "http.headers.%s in %s: the variable %s "
                             "holds a control character (a newline?), which a header cannot "
                             "carry" % (name, where, env), cfg.path)
        out.append((name, value))
    return out


def secret(env_name, file_path):
    """A secret named by an *_env key or an *_file key, as asp_config_secret reads it.
    None when both are None."""
    value = os.environ.get(env_name) if env_name else None
    if value is not None:
        s = value
    elif file_path:
        raw = _read_file(file_path, SECRET_MAX_BYTES, "secret file")
        if b"\0" in raw:
            raise _error("invalid_argument", "secret file %s holds a NUL byte" % file_path,
                         file_path)
        s = raw.decode("utf-8", "surrogateescape")
    elif env_name:
        raise _error("not_found", "environment variable %s is not set; export it with the "
                     "secret or name a file in the config's *_file key" % env_name)
    else:
        return None
    if s.endswith("\n"):
        s = s[:-1]
    if s.endswith("\r"):
        s = s[:-1]
    if not s:
        if value is not None:
            raise _error("invalid_argument", "environment variable %s is empty" % env_name)
        raise _error("invalid_argument", "secret file %s is empty" % file_path, file_path)
    return s
