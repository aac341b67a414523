""".asp.json validation: walks the tables asp-sdkgen made from spec/asp.schema.json and
spec/asp.v0.schema.json (asp._config_tables), as core/src/config_schema.c walks the C ones,
and finds where a key or value sits in the text, as core/src/config_locate.c does. Every
text a message quotes from the schema ("expected ...", the known keys, the condition of an
"if") is in the tables; so the words are the C core's, "FILE:LINE:COL: KEY.PATH: what was
expected, got what", whichever language reads the file.
"""

import re

from . import _json
from ._errors import AspError

MESSAGE_MAX = 1024  # ASP_ERROR_MESSAGE_MAX
SHOW_MAX = 48
MAX_STEPS = 8

# JSON types, as bits of a node's "types" (sdkgen/emit_config.c)
NULL, BOOLEAN, INTEGER, STRING, ARRAY, OBJECT = 1, 2, 4, 8, 16, 32


def _cut(msg):
    """As asp_error_set: a message longer than the C buffer ends in "..."."""
    b = msg.encode("utf-8", "surrogateescape")
    if len(b) < MESSAGE_MAX:
        return msg
    return b[:MESSAGE_MAX - 4].decode("utf-8", "ignore") + "..."


def _is_int(v):
    return type(v) is int


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


class _Invalid(Exception):
    pass


class Ctx:
    """A document being checked and the key path to the value at hand."""

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
        return AspError("invalid_argument", _cut("%s:%d:%d: %s%s%s" % (
            self.file, line, col, path, ": " if path else "", wb.text())), path=self.file_path)


def _plain_key(k):
    if not k or len(k.encode("utf-8")) > SHOW_MAX:
        return False
    return all(c == "_" or c == "-" or ("a" <= c <= "z") or ("A" <= c <= "Z") or
               ("0" <= c <= "9") for c in k)


def type_of(v):
    """The type bit of a parsed value; 0 for a real (22.0 is not a port)."""
    if v is None:
        return NULL
    if isinstance(v, bool):
        return BOOLEAN
    if _is_int(v):
        return INTEGER
    if isinstance(v, float):
        return 0
    if isinstance(v, str):
        return STRING
    return ARRAY if isinstance(v, list) else OBJECT


def _equals(a, v):
    return type_of(a) == type_of(v) and a == v


def _value_ok(nodes, n, v):
    """The checks on the value itself, all described by the node's one "expected"."""
    types = n.get("types")
    if types and not types & type_of(v):
        return False
    values = n.get("values")
    if values is not None and not any(_equals(x, v) for x in values):
        return False
    if _is_int(v) and not isinstance(v, bool):
        if ("min" in n and v < n["min"]) or ("max" in n and v > n["max"]):
            return False
    if isinstance(v, str):
        if "min_len" in n and len(v) < n["min_len"]:
            return False
        if "pattern" in n and not _regex(n["pattern"]).search(v):
            return False
    if isinstance(v, list) and "min_items" in n and len(v) < n["min_items"]:
        return False
    return "not" not in n or not _value_ok(nodes, nodes[n["not"]], v)


def _prop(n, key):
    for name, i in n.get("props", ()):
        if name == key:
            return i
    return None


def _validate(v, nodes, n, inst):
    if n.get("never"):
        raise v.fail("value", "not allowed when %s" % v.cond if v.cond else "not allowed here")
    if not _value_ok(nodes, n, inst):
        got = _SBuf(128)
        _show_value(got, inst)
        raise v.fail("value", "expected %s, got %s" % (n["expected"], got.text()))
    if isinstance(inst, dict):
        _validate_object(v, nodes, n, inst)
    elif isinstance(inst, list):
        _validate_array(v, nodes, n, inst)
    for sub in n.get("all", ()):
        _validate(v, nodes, nodes[sub], inst)
    if "if" in n:
        quiet = v.quiet
        v.quiet = True
        try:
            _validate(v, nodes, nodes[n["if"]], inst)
            holds = True
        except (_Invalid, AspError):
            holds = False
        v.quiet = quiet
        if holds:
            saved = v.cond
            v.cond = n.get("cond", "")
            try:
                _validate(v, nodes, nodes[n["then"]], inst)
            finally:
                v.cond = saved


def _validate_object(v, nodes, n, inst):
    # unknown keys first: a typo is the likeliest mistake, and the message lists the keys
    if n.get("closed"):
        for key in inst:
            if _prop(n, key) is None:
                v.path.append(key)
                err = v.fail("key", "unknown key (expected one of: %s)" % n.get("keys", ""))
                v.path.pop()
                raise err
    names = nodes[n["names"]] if "names" in n else None
    for key, val in inst.items():
        v.path.append(key)
        try:
            if names is not None and not _value_ok(nodes, names, key):
                raise v.fail("key", "invalid key: expected %s" % names["expected"])
            i = _prop(n, key)
            if i is not None:
                _validate(v, nodes, nodes[i], val)
            elif "more" in n:
                _validate(v, nodes, nodes[n["more"]], val)
        finally:
            v.path.pop()
    for name in n.get("required", ()):
        if name not in inst:
            v.path.append(name)
            err = v.fail("parent", "required key missing%s%s" % (
                " when " if v.cond else "", v.cond))
            v.path.pop()
            raise err


def _validate_array(v, nodes, n, inst):
    prefix = n.get("prefix", ())
    for i, val in enumerate(inst):
        sub = prefix[i] if i < len(prefix) else n.get("items")
        if sub is None:
            continue
        v.path.append(i)
        try:
            _validate(v, nodes, nodes[sub], val)
        finally:
            v.path.pop()


def validate(v, table, doc):
    """Checks doc against a table (asp._config_tables.V1 or V0); raises the AspError
    v.fail makes on the first problem."""
    _validate(v, table[1], table[1][0], doc)


def walk(table, dotted):
    """The node at a dotted path of properties ("ssh.port"), or None."""
    nodes = table[1]
    n = nodes[0]
    for seg in dotted.split("."):
        i = _prop(n, seg)
        if i is None:
            return None
        n = nodes[i]
    return n
