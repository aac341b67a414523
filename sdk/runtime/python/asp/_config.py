""".asp.json: discovery, strict validation and the view the client reads (DESIGN section 4).

A port of core/src/config.c and config_locate.c: the same JSON Schema subset is
interpreted from the same schema (spec/asp.schema.json, embedded by asp-sdkgen), with
the same discovery rules and the same messages, "FILE:LINE:COL: KEY.PATH: what was
expected, got what", so a person sees one wording whichever language reads the file.
"""

import errno as _errno
import os
import pwd
import re
import stat as _stat

from . import _json
from ._errors import AspError

CONFIG_MAX_BYTES = 1024 * 1024
SECRET_MAX_BYTES = 64 * 1024
MESSAGE_MAX = 1024  # ASP_ERROR_MESSAGE_MAX
PATH_MAX = 4096
SHOW_MAX = 48
MAX_STEPS = 8

_ERRNO_CODES = {
    _errno.ENOENT: "not_found", _errno.EACCES: "permission_denied",
    _errno.EPERM: "permission_denied", _errno.EEXIST: "already_exists",
    _errno.ENOTDIR: "not_a_directory", _errno.EISDIR: "is_a_directory",
    _errno.ENOTEMPTY: "not_empty", _errno.EINVAL: "invalid_argument",
}


def _cut(msg):
    """As asp_error_set: a message longer than the C buffer ends in "..."."""
    b = msg.encode("utf-8", "surrogateescape")
    if len(b) < MESSAGE_MAX:
        return msg
    return b[:MESSAGE_MAX - 4].decode("utf-8", "ignore") + "..."


def _error(code, msg, path=None):
    return AspError(code, _cut(msg), path=path)


def _os_error(e, what, path=None):
    n = e.errno or _errno.EIO
    return AspError(_ERRNO_CODES.get(n, "io_error"), _cut("%s: %s" % (what, os.strerror(n))),
                    errno=n, path=path)


class _SBuf:
    """A bounded string builder: output past the end is dropped, as sbuf does."""

    def __init__(self, cap):
        self.cap = cap
        self.b = bytearray()

    def add(self, s):
        if len(self.b) + 1 >= self.cap:
            return
        enc = s.encode("utf-8", "surrogateescape")
        self.b += enc[:self.cap - 1 - len(self.b)]

    def __len__(self):
        return len(self.b)

    def text(self):
        return self.b.decode("utf-8", "replace")


# ---- text for messages ------------------------------------------------------------------

def _is_int(v):
    return type(v) is int


def _show_string(b, s):
    d = _json.dump_string(s).encode("utf-8")
    if len(d) > SHOW_MAX:
        n = SHOW_MAX
        while n > 1 and (d[n] & 0xC0) == 0x80:
            n -= 1
        b.add(d[:n].decode("utf-8", "replace") + '..."')
    else:
        b.add(d.decode("utf-8"))


def _show_value(b, v):
    if isinstance(v, str):
        _show_string(b, v)
    elif v is True:
        b.add("true")
    elif v is False:
        b.add("false")
    elif _is_int(v):
        b.add("%d" % v)
    elif isinstance(v, float):
        b.add(_json.dump_real(v))
    elif v is None:
        b.add("null")
    elif isinstance(v, dict):
        b.add("an object")
    else:
        b.add("an array" if v else "[]")


_PLURAL = {"string": "strings", "integer": "integers", "boolean": "booleans",
           "object": "objects", "array": "arrays", "null": "nulls"}


def _describe_type(b, s, t):
    lo, hi = s.get("minimum"), s.get("maximum")
    min_len, pattern = s.get("minLength"), s.get("pattern")
    min_items, items = s.get("minItems"), s.get("items")
    if t == "null":
        b.add("null")
    elif t == "boolean":
        b.add("true or false")
    elif t == "integer":
        b.add("an integer")
        if lo is not None and hi is not None:
            b.add(" from %d to %d" % (lo, hi))
        elif lo is not None:
            b.add(" >= %d" % lo)
        elif hi is not None:
            b.add(" <= %d" % hi)
    elif t == "string":
        n = min_len if _is_int(min_len) else 0
        if pattern is not None:
            b.add("a string matching %s" % pattern)
        elif n == 1:
            b.add("a non-empty string")
        elif n > 1:
            b.add("a string of at least %d characters" % n)
        else:
            b.add("a string")
    elif t == "array":
        n = min_items if _is_int(min_items) else 0
        if n == 1:
            b.add("a non-empty array")
        elif n > 1:
            b.add("an array of at least %d items" % n)
        else:
            b.add("an array")
        if isinstance(items, dict) and isinstance(items.get("type"), str):
            b.add(" of %s" % _PLURAL.get(items["type"], "values"))
    else:
        b.add("an object")


def _describe(b, s):
    c, e, t = s.get("const", _NONE), s.get("enum"), s.get("type")
    if c is not _NONE:
        _show_value(b, c)
    elif e is not None:
        b.add("one of ")
        for i, v in enumerate(e):
            b.add(", " if i else "")
            _show_value(b, v)
    elif isinstance(t, str):
        _describe_type(b, s, t)
    elif isinstance(t, list):
        for i, one in enumerate(t):
            b.add(" or " if i else "")
            _describe_type(b, s, one)
    elif "pattern" in s or "minLength" in s:
        _describe_type(b, s, "string")
    else:
        b.add("any value")


_NONE = object()

# ---- the schema and the checks that keep it and this file in step ----------------------

_KEYWORDS = ("$schema", "$comment", "title", "description", "default", "examples", "type",
             "const", "enum", "minimum", "maximum", "minLength", "pattern", "minItems",
             "prefixItems", "items", "properties", "additionalProperties", "required",
             "propertyNames", "allOf", "if", "then")
_TYPE_NAMES = ("null", "boolean", "integer", "string", "array", "object")


def _schema_bug(ptr, what, name=""):
    return _error("internal", "spec/asp.schema.json at %s: %s%s; the validator in the SDK "
                  "must learn it" % (ptr or "/", what, name))


def _valid_type(t):
    if isinstance(t, str):
        return t in _TYPE_NAMES
    if not isinstance(t, list) or not t:
        return False
    return all(isinstance(x, str) and x in _TYPE_NAMES for x in t)


def _check_schema(s, ptr):
    if isinstance(s, bool):
        return
    if not isinstance(s, dict):
        raise _schema_bug(ptr, "a schema must be an object or a boolean")
    for k, v in s.items():
        bad = False
        if k not in _KEYWORDS:
            raise _schema_bug(ptr, "unsupported keyword ", k)
        if k == "type":
            bad = not _valid_type(v)
        elif k in ("minimum", "maximum"):
            bad = not _is_int(v)
        elif k in ("minLength", "minItems"):
            bad = not _is_int(v) or v < 0
        elif k == "pattern":
            try:
                _regex(v)
            except (re.error, TypeError):
                bad = True
        elif k == "enum":
            bad = not isinstance(v, list) or not v
        elif k == "required":
            bad = not isinstance(v, list) or not all(isinstance(x, str) for x in v)
        elif k == "properties":
            bad = not isinstance(v, dict)
            for name, p in (v.items() if not bad else ()):
                _check_schema(p, "%s/properties/%s" % (ptr, name))
        elif k in ("prefixItems", "allOf"):
            bad = not isinstance(v, list)
            for i, p in enumerate(v if not bad else ()):
                _check_schema(p, "%s/%s/%d" % (ptr, k, i))
        elif k in ("additionalProperties", "items", "propertyNames", "if", "then"):
            _check_schema(v, "%s/%s" % (ptr, k))
        if bad:
            raise _schema_bug(ptr, "malformed or unsupported value of ", k)


_REGEX_CACHE = {}


def _regex(pattern):
    """A POSIX extended regex as Python's re: '$' only at the very end, '.' any byte."""
    r = _REGEX_CACHE.get(pattern)
    if r is None:
        py = pattern[:-1] + r"\Z" if pattern.endswith("$") and not pattern.endswith("\\$") \
            else pattern
        r = re.compile(py, re.DOTALL)
        _REGEX_CACHE[pattern] = r
    return r


def _walk(node, dotted, schema):
    for seg in dotted.split("."):
        if not isinstance(node, dict):
            return None
        node = (node.get("properties") if schema else node)
        if not isinstance(node, dict):
            return None
        node = node.get(seg)
        if node is None:
            return None
    return node


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
    ("http.websocket", "bool"),
)
_TRANSPORTS = ("stdio", "ssh", "http")


def _check_fields(schema):
    paths = set(p for p, _ in _FIELDS)
    for p, _ in _FIELDS:
        if _walk(schema, p, True) is None:
            raise _error("internal", "the SDK's config view reads %s, which "
                         "spec/asp.schema.json does not define" % p)
    tenum = (_walk(schema, "transport", True) or {}).get("enum") or []
    for name in tenum:
        if name not in _TRANSPORTS:
            raise _error("internal", "spec/asp.schema.json names a transport the SDK does "
                         "not know: %s" % (name if isinstance(name, str) else
                                           "(not a string)"))

    def leaves(props, prefix):
        for name, p in props.items():
            path = prefix + "." + name if prefix else name
            sub = p.get("properties") if isinstance(p, dict) else None
            if isinstance(sub, dict):
                leaves(sub, path)
            elif path not in paths:
                raise _error("internal", "spec/asp.schema.json defines %s but the SDK's "
                             "config view has no place for it" % path)
    leaves(schema.get("properties") or {}, "")


_SCHEMA = {}


def _load_schema(text, v1=True):
    s = _SCHEMA.get(text)
    if s is None:
        name = "spec/asp.schema.json" if v1 else "spec/asp.v0.schema.json"
        try:
            s = _json.parse(text.encode("utf-8"))
        except _json.JsonError as e:
            raise _error("internal", "%s:%d:%d: %s" % (name, e.line, e.column, e.text))
        _check_schema(s, "")
        if v1:
            _check_fields(s)  # a v0 file reaches the view only as its version 1 form
        _SCHEMA[text] = s
    return s


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


# ---- where a key or value sits in the text (config_locate.c) ----------------------------

_WS = b" \t\n\r"


def _skip_ws(t, p):
    n = len(t)
    while p < n and t[p] in _WS:
        p += 1
    return p


def _skip_string(t, p):
    n = len(t)
    p += 1
    while p < n:
        if t[p] == 0x5C:
            p += 1
        elif t[p] == 0x22:
            return p + 1
        p += 1
    return n


def _skip_value(t, p):
    n = len(t)
    if p >= n:
        return n
    if t[p] == 0x22:
        return _skip_string(t, p)
    if t[p] in b"{[":
        depth = 0
        while p < n:
            c = t[p]
            if c == 0x22:
                p = _skip_string(t, p)
                continue
            if c in b"{[":
                depth += 1
            elif c in b"}]":
                depth -= 1
                if depth == 0:
                    return p + 1
            p += 1
        return n
    while p < n and t[p] not in b",]} \t\n\r":
        p += 1
    return p


def _string_equals(t, p, key):
    """Whether the string token at p decodes to exactly key (bytes)."""
    n = len(t)
    out = bytearray()
    p += 1
    while p < n and t[p] != 0x22:
        if t[p] != 0x5C:
            out.append(t[p])
            p += 1
        elif p + 1 >= n:
            return False
        else:
            e = t[p + 1]
            p += 2
            if e == 0x75:
                try:
                    cp = int(t[p:p + 4].decode("ascii"), 16) if len(t) - p >= 4 else None
                except ValueError:
                    cp = None
                if cp is None or not all(chr(x) in "0123456789abcdefABCDEF"
                                         for x in t[p:p + 4]):
                    return False
                p += 4
                if 0xD800 <= cp < 0xDC00 and p + 1 < n and t[p] == 0x5C and \
                        t[p + 1] == 0x75 and len(t) - (p + 2) >= 4 and \
                        all(chr(x) in "0123456789abcdefABCDEF" for x in t[p + 2:p + 6]):
                    lo = int(t[p + 2:p + 6].decode("ascii"), 16)
                    if 0xDC00 <= lo < 0xE000:
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00)
                        p += 6
                out += chr(cp).encode("utf-8", "surrogatepass")
            else:
                out.append({0x62: 8, 0x66: 12, 0x6E: 10, 0x72: 13, 0x74: 9}.get(e, e))
        if not key.startswith(bytes(out)):
            return False
    return bytes(out) == key


def _find_member(t, p, key):
    n = len(t)
    p += 1
    while True:
        p = _skip_ws(t, p)
        if p >= n or t[p] != 0x22:
            return None, None
        k = p
        match = _string_equals(t, p, key)
        p = _skip_ws(t, _skip_string(t, p))
        if p >= n or t[p] != 0x3A:
            return None, None
        p = _skip_ws(t, p + 1)
        if match:
            return p, k
        p = _skip_ws(t, _skip_value(t, p))
        if p >= n or t[p] != 0x2C:
            return None, None
        p += 1


def _find_element(t, p, index):
    n = len(t)
    q = p + 1
    i = 0
    while True:
        q = _skip_ws(t, q)
        if q >= n or t[q] == 0x5D:
            return None
        if i == index:
            return q
        q = _skip_ws(t, _skip_value(t, q))
        if q >= n or t[q] != 0x2C:
            return None
        q += 1
        i += 1


def locate(text, steps, at_key):
    """(line, column) of the value at the key path, or of the key when at_key; the
    deepest value found when the path is not all there."""
    p = _skip_ws(text, 0)
    key_at = None
    found = True
    for key in steps:
        nxt = None
        if p < len(text) and isinstance(key, str) and text[p] == 0x7B:
            nxt, key_at = _find_member(text, p, key.encode("utf-8"))
        elif p < len(text) and not isinstance(key, str) and text[p] == 0x5B:
            nxt = _find_element(text, p, key)
        if nxt is None:
            found = False
            break
        p = nxt
    if found and at_key and steps and isinstance(steps[-1], str):
        p = key_at
    p = min(p, len(text))
    line, col = 1, 1
    for c in text[:p]:
        if c == 0x0A:
            line += 1
            col = 1
        elif (c & 0xC0) != 0x80:
            col += 1
    return line, col


# ---- the validator ----------------------------------------------------------------------

class _Invalid(Exception):
    pass


class _V:
    def __init__(self, text, file, file_path):
        self.text = text
        self.file = file
        self.file_path = file_path
        self.path = []
        self.cond = ""
        self.quiet = False

    def steps(self):
        return self.path[:MAX_STEPS]

    def show_path(self, b):
        for i, k in enumerate(self.steps()):
            if not isinstance(k, str):
                b.add("[%d]" % k)
            elif _plain_key(k):
                b.add(("." if i else "") + k)
            else:
                b.add("[")
                _show_string(b, k)
                b.add("]")

    def fail(self, where, what):
        if self.quiet:
            return _Invalid()
        steps = self.steps()
        if where == "parent" and steps:
            steps = steps[:-1]
        line, col = locate(self.text, steps, where == "key")
        pb = _SBuf(256)
        self.show_path(pb)
        path = pb.text()
        wb = _SBuf(MESSAGE_MAX)
        wb.add(what)
        return _error("invalid_argument", "%s:%d:%d: %s%s%s" % (
            self.file, line, col, path, ": " if path else "", wb.text()), self.file_path)


def _plain_key(k):
    if not k or len(k.encode("utf-8")) > SHOW_MAX:
        return False
    return all(c == "_" or c == "-" or ("a" <= c <= "z") or ("A" <= c <= "Z") or
               ("0" <= c <= "9") for c in k)


def _json_equal(a, b):
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a is b
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    return a == b


def _type_matches(t, v):
    if v is None:
        return t == "null"
    if isinstance(v, bool):
        return t == "boolean"
    if _is_int(v):
        return t == "integer"
    if isinstance(v, float):
        return False  # stricter than JSON Schema: 22.0 is not a port
    if isinstance(v, str):
        return t == "string"
    if isinstance(v, list):
        return t == "array"
    return t == "object"


def _value_ok(s, v):
    t = s.get("type")
    if isinstance(t, str) and not _type_matches(t, v):
        return False
    if isinstance(t, list) and not any(_type_matches(x, v) for x in t):
        return False
    c = s.get("const", _NONE)
    if c is not _NONE and not _json_equal(c, v):
        return False
    e = s.get("enum")
    if e is not None and not any(_json_equal(x, v) for x in e):
        return False
    if _is_int(v):
        if _is_int(s.get("minimum")) and v < s["minimum"]:
            return False
        if _is_int(s.get("maximum")) and v > s["maximum"]:
            return False
    if isinstance(v, str):
        if _is_int(s.get("minLength")) and len(v) < s["minLength"]:
            return False
        if "pattern" in s and not _regex(s["pattern"]).search(v):
            return False
    if isinstance(v, list) and _is_int(s.get("minItems")) and len(v) < s["minItems"]:
        return False
    return True


def _validate(v, s, inst):
    if s is True:
        return
    if s is False:
        raise v.fail("value", "not allowed when %s" % v.cond if v.cond else "not allowed here")
    if not _value_ok(s, inst):
        want, got = _SBuf(512), _SBuf(128)
        _describe(want, s)
        _show_value(got, inst)
        raise v.fail("value", "expected %s, got %s" % (want.text(), got.text()))
    if isinstance(inst, dict):
        _validate_object(v, s, inst)
    elif isinstance(inst, list):
        _validate_array(v, s, inst)
    for sub in s.get("allOf") or ():
        _validate(v, sub, inst)
    if "if" in s and "then" in s:
        quiet = v.quiet
        v.quiet = True
        try:
            _validate(v, s["if"], inst)
            holds = True
        except (_Invalid, AspError):
            holds = False
        v.quiet = quiet
        if holds:
            saved = v.cond
            v.cond = _describe_condition(s["if"])
            try:
                _validate(v, s["then"], inst)
            finally:
                v.cond = saved


def _validate_object(v, s, inst):
    props = s.get("properties") or {}
    more = s.get("additionalProperties")
    names = s.get("propertyNames")
    required = s.get("required") or ()
    for key in inst:
        if more is False and key not in props:
            b = _SBuf(512)
            for name in props:
                b.add((", " if len(b) else "") + name)
            v.path.append(key)
            err = v.fail("key", "unknown key (expected one of: %s)" % b.text())
            v.path.pop()
            raise err
    for key, val in inst.items():
        v.path.append(key)
        try:
            if names is not None and not _value_ok(names, key):
                want = _SBuf(512)
                _describe(want, names)
                raise v.fail("key", "invalid key: expected %s" % want.text())
            if key in props:
                _validate(v, props[key], val)
            elif isinstance(more, dict):
                _validate(v, more, val)
        finally:
            v.path.pop()
    for name in required:
        if name not in inst:
            v.path.append(name)
            err = v.fail("parent", "required key missing%s%s" % (
                " when " if v.cond else "", v.cond))
            v.path.pop()
            raise err


def _validate_array(v, s, inst):
    prefix = s.get("prefixItems") or []
    items = s.get("items")
    for i, val in enumerate(inst):
        sub = prefix[i] if i < len(prefix) else items
        if sub is None:
            continue
        v.path.append(i)
        try:
            _validate(v, sub, val)
        finally:
            v.path.pop()


def _describe_condition(cond):
    b = _SBuf(128)
    for name, p in (cond.get("properties") or {}).items():
        if not isinstance(p, dict) or "const" not in p:
            continue
        b.add(("%s is " if not len(b) else " and %s is ") % name)
        _show_value(b, p["const"])
    # a required key the "if" does not also pin to a value: its presence is the condition
    props = cond.get("properties") or {}
    for k in cond.get("required") or ():
        if isinstance(k, str) and not (isinstance(props.get(k), dict) and "const" in props[k]):
            b.add("%s%s is given" % (" and " if len(b) else "", k))
    return b.text()


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

    def as_dict(self):
        return {
            "path": self.path, "transport": self.transport, "cwd": self.cwd,
            "env": [[k, x] for k, x in self.env.items()], "timeout_ms": self.timeout_ms,
            "call_timeout_ms": self.call_timeout_ms,
            "ssh": dict(self.ssh), "stdio": {"command": self.stdio_command},
            "http": {"url": self.http_url, "token_env": self.http_token_env,
                     "token_file": self.http_token_file, "ca_file": self.http_ca_file,
                     "websocket": self.http_websocket},
        }


def _view_bug(path):
    return _error("internal", "spec/asp.schema.json lets %s hold a value the SDK's config "
                  "view cannot represent" % path)


def _build_field(v, path, kind, schema, doc, cfg, base):
    val = _walk(doc, path, False)
    if val is None:
        val = (_walk(schema, path, True) or {}).get("default")
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


def parse(data, filename, schema_text, v0_schema_text=None):
    """Validates config bytes. ``filename`` names the file in messages and its directory
    is the base of relative paths; None means "<memory>" and the working directory. A
    file of the v0 draft ("version": "0") is checked against ``v0_schema_text`` and read
    as the version 1 file it means."""
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
    schema = _load_schema(schema_text)
    file_path = file if filename is not None else None
    try:
        doc = _json.parse(data)
    except _json.JsonError as e:
        raise _syntax_error(file, file_path, e)
    v = _V(bytes(data), file, file_path)
    if _is_v0(doc) and v0_schema_text is not None:
        _validate(v, _load_schema(v0_schema_text, v1=False), doc)
        doc = _v0_to_v1(doc)
    _validate(v, schema, doc)
    cfg = Config()
    cfg.path = file if filename is not None else None
    for path, kind in _FIELDS:
        _build_field(v, path, kind, schema, doc, cfg, base)
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


def load(path, schema_text, v0_schema_text=None):
    """Reads and validates the config at path, or the one find() finds when None."""
    if path is None:
        path = find()
    path = os.fsdecode(path)
    data = _read_file(path, CONFIG_MAX_BYTES, "config")
    return parse(data, path, schema_text, v0_schema_text)


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
