"""A JSON reader that accepts and refuses exactly what the C core's (jansson 2.14 with
JSON_REJECT_DUPLICATES) does, and reports the same line, column and words, so that
.asp.json errors read the same from every SDK. It also keeps what Python's json module
loses: duplicate keys are refused, integers and reals stay apart, object order is kept.

parse(data: bytes) -> value (dict in file order, list, str, int, float, bool, None);
raises JsonError(line, column, text) on bad input.
"""

import sys

_EOF = -1
_ERR = -2

_T_INVALID = -1
_T_EOF = 0
_T_STRING = 256
_T_INTEGER = 257
_T_REAL = 258
_T_TRUE = 259
_T_FALSE = 260
_T_NULL = 261

MAX_DEPTH = 2048  # JSON_PARSER_MAX_DEPTH
TEXT_MAX = 160  # JSON_ERROR_TEXT_LENGTH


class JsonError(Exception):
    def __init__(self, line, column, text):
        super().__init__(text)
        self.line = line
        self.column = column
        self.text = text


def _utf8_first(c):
    if c < 0x80:
        return 1
    if c <= 0xC1:
        return 0
    if c <= 0xDF:
        return 2
    if c <= 0xEF:
        return 3
    if c <= 0xF4:
        return 4
    return 0


def _utf8_full(buf):
    n = len(buf)
    u = buf[0]
    if n == 2:
        value = u & 0x1F
    elif n == 3:
        value = u & 0x0F
    elif n == 4:
        value = u & 0x07
    else:
        return False
    for b in buf[1:]:
        if not 0x80 <= b <= 0xBF:
            return False
        value = (value << 6) + (b & 0x3F)
    if value > 0x10FFFF:
        return False
    if 0xD800 <= value <= 0xDFFF:
        return False
    if (n == 2 and value < 0x80) or (n == 3 and value < 0x800) or (n == 4 and value < 0x10000):
        return False
    return True


class _Lex:
    def __init__(self, data):
        self.data = data
        self.i = 0
        self.buf = b""
        self.bpos = 0
        self.state = 0  # 0 ok, _EOF, _ERR
        self.line = 1
        self.column = 0
        self.last_column = 0
        self.saved = bytearray()
        self.token = _T_INVALID
        self.value = None
        self.depth = 0

    # ---- errors ----
    def error(self, msg, utf8=False):
        saved = bytes(self.saved).split(b"\0", 1)[0]  # a C string ends at NUL
        if saved:
            if len(self.saved) <= 20:
                msg = "%s near '%s'" % (msg, saved.decode("utf-8", "replace"))
        elif self.state != _ERR:
            msg = "%s near end of file" % msg
        enc = msg.encode("utf-8", "replace")
        if len(enc) >= TEXT_MAX:
            msg = enc[:TEXT_MAX - 1].decode("utf-8", "ignore")
        raise JsonError(self.line, self.column, msg)

    # ---- stream ----
    def get(self):
        if self.state:
            return self.state
        if self.bpos >= len(self.buf):
            if self.i >= len(self.data):
                self.state = _EOF
                return _EOF
            c = self.data[self.i]
            self.i += 1
            self.bpos = 0
            if c >= 0x80:
                count = _utf8_first(c)
                if not count:
                    self.state = _ERR
                    self.error("unable to decode byte 0x%x" % c)
                buf = bytearray([c])
                for _ in range(1, count):
                    if self.i < len(self.data):
                        buf.append(self.data[self.i])
                        self.i += 1
                    else:
                        buf.append(0xFF)  # (char)EOF
                if not _utf8_full(buf):
                    self.state = _ERR
                    self.error("unable to decode byte 0x%x" % c)
                self.buf = bytes(buf)
            else:
                self.buf = bytes([c])
        c = self.buf[self.bpos]
        self.bpos += 1
        if c == 0x0A:
            self.line += 1
            self.last_column = self.column
            self.column = 0
        elif _utf8_first(c):
            self.column += 1
        return c

    def unget(self, c):
        if c < 0:
            return
        if c == 0x0A:
            self.line -= 1
            self.column = self.last_column
        elif _utf8_first(c):
            self.column -= 1
        self.bpos -= 1
        if c == 0 and self.bpos == 0:
            # jansson's buffer is a C string: an ungot NUL reads as "empty" and is lost.
            self.buf = b""

    def get_save(self):
        c = self.get()
        if c >= 0:
            self.saved.append(c)
        return c

    def unget_unsave(self, c):
        if c >= 0:
            self.unget(c)
            self.saved.pop()

    def save_cached(self):
        while self.bpos < len(self.buf):
            self.saved.append(self.buf[self.bpos])
            self.bpos += 1

    # ---- tokens ----
    def scan_string(self):
        self.value = None
        self.token = _T_INVALID
        c = self.get_save()
        while c != 0x22:
            if c == _ERR:
                return
            if c == _EOF:
                self.error("premature end of input")
            if 0 <= c <= 0x1F:
                self.unget_unsave(c)
                if c == 0x0A:
                    self.error("unexpected newline")
                self.error("control character 0x%x" % c)
            if c == 0x5C:
                c = self.get_save()
                if c == 0x75:  # u
                    c = self.get_save()
                    for _ in range(4):
                        if not (c >= 0 and chr(c) in "0123456789abcdefABCDEF"):
                            self.error("invalid escape")
                        c = self.get_save()
                elif c >= 0 and chr(c) in '"\\/bfnrt':
                    c = self.get_save()
                else:
                    self.error("invalid escape")
            else:
                c = self.get_save()
        # decode the saved token (between the quotes)
        raw = bytes(self.saved[1:-1])
        out = bytearray()
        p = 0
        while p < len(raw):
            b = raw[p]
            if b != 0x5C:
                out.append(b)
                p += 1
                continue
            e = raw[p + 1]
            if e == 0x75:
                value = int(raw[p + 2:p + 6], 16)
                p += 6
                if 0xD800 <= value <= 0xDBFF:
                    if raw[p:p + 2] == b"\\u":
                        value2 = int(raw[p + 2:p + 6], 16)
                        p += 6
                        if 0xDC00 <= value2 <= 0xDFFF:
                            value = ((value - 0xD800) << 10) + (value2 - 0xDC00) + 0x10000
                        else:
                            self.error("invalid Unicode '\\u%04X\\u%04X'" % (value, value2))
                    else:
                        self.error("invalid Unicode '\\u%04X'" % value)
                elif 0xDC00 <= value <= 0xDFFF:
                    self.error("invalid Unicode '\\u%04X'" % value)
                out += chr(value).encode("utf-8")
            else:
                out.append({0x62: 8, 0x66: 12, 0x6E: 10, 0x72: 13, 0x74: 9}.get(e, e))
                p += 2
        self.value = bytes(out)
        self.token = _T_STRING

    def scan_number(self, c):
        self.token = _T_INVALID
        if c == 0x2D:
            c = self.get_save()
        if c == 0x30:
            c = self.get_save()
            if 0x30 <= c <= 0x39:
                self.unget_unsave(c)
                return False
        elif 0x30 <= c <= 0x39:
            while True:
                c = self.get_save()
                if not 0x30 <= c <= 0x39:
                    break
        else:
            self.unget_unsave(c)
            return False
        if c not in (0x2E, 0x45, 0x65):
            self.unget_unsave(c)
            v = int(bytes(self.saved))
            if v > (1 << 63) - 1:
                self.error("too big integer")
            if v < -(1 << 63):
                self.error("too big negative integer")
            self.token = _T_INTEGER
            self.value = v
            return True
        if c == 0x2E:
            c = self.get()
            if not 0x30 <= c <= 0x39:
                self.unget(c)
                return False
            self.saved.append(c)
            while True:
                c = self.get_save()
                if not 0x30 <= c <= 0x39:
                    break
        if c in (0x45, 0x65):
            c = self.get_save()
            if c in (0x2B, 0x2D):
                c = self.get_save()
            if not 0x30 <= c <= 0x39:
                self.unget_unsave(c)
                return False
            while True:
                c = self.get_save()
                if not 0x30 <= c <= 0x39:
                    break
        self.unget_unsave(c)
        v = float(bytes(self.saved))
        if v in (float("inf"), float("-inf")):
            self.error("real number overflow")
        self.token = _T_REAL
        self.value = v
        return True

    def scan(self):
        self.saved = bytearray()
        self.value = None
        while True:
            c = self.get()
            if c not in (0x20, 0x09, 0x0A, 0x0D):
                break
        if c == _EOF:
            self.token = _T_EOF
            return self.token
        if c == _ERR:
            self.token = _T_INVALID
            return self.token
        self.saved.append(c)
        if c in b"{}[]:,":
            self.token = c
        elif c == 0x22:
            self.scan_string()
        elif 0x30 <= c <= 0x39 or c == 0x2D:
            self.scan_number(c)
        elif (0x41 <= c <= 0x5A) or (0x61 <= c <= 0x7A):
            while True:
                c = self.get_save()
                if not ((0x41 <= c <= 0x5A) or (0x61 <= c <= 0x7A)):
                    break
            self.unget_unsave(c)
            word = bytes(self.saved)
            self.token = {b"true": _T_TRUE, b"false": _T_FALSE, b"null": _T_NULL}.get(
                word, _T_INVALID)
        else:
            self.save_cached()
            self.token = _T_INVALID
        return self.token

    # ---- parser ----
    def parse_object(self):
        obj = {}
        self.scan()
        if self.token == ord("}"):
            return obj
        while True:
            if self.token != _T_STRING:
                self.error("string or '}' expected")
            key = self.value
            if b"\0" in key:
                self.error("NUL byte in object key not supported")
            key = key.decode("utf-8")
            if key in obj:
                self.error("duplicate object key")
            self.scan()
            if self.token != ord(":"):
                self.error("':' expected")
            self.scan()
            obj[key] = self.parse_value()
            self.scan()
            if self.token != ord(","):
                break
            self.scan()
        if self.token != ord("}"):
            self.error("'}' expected")
        return obj

    def parse_array(self):
        arr = []
        self.scan()
        if self.token == ord("]"):
            return arr
        while self.token:
            arr.append(self.parse_value())
            self.scan()
            if self.token != ord(","):
                break
            self.scan()
        if self.token != ord("]"):
            self.error("']' expected")
        return arr

    def parse_value(self):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            self.error("maximum parsing depth reached")
        t = self.token
        if t == _T_STRING:
            if b"\0" in self.value:
                self.error("\\u0000 is not allowed without JSON_ALLOW_NUL")
            v = self.value.decode("utf-8")
        elif t in (_T_INTEGER, _T_REAL):
            v = self.value
        elif t == _T_TRUE:
            v = True
        elif t == _T_FALSE:
            v = False
        elif t == _T_NULL:
            v = None
        elif t == ord("{"):
            v = self.parse_object()
        elif t == ord("["):
            v = self.parse_array()
        elif t == _T_INVALID:
            self.error("invalid token")
        else:
            self.error("unexpected token")
        self.depth -= 1
        return v


def parse(data):
    """Parses one JSON document (an object or array) from bytes."""
    lex = _Lex(bytes(data))
    lex.scan()
    if lex.token not in (ord("["), ord("{")):
        lex.error("'[' or '{' expected")
    # the parser recurses, as jansson's does, up to MAX_DEPTH levels of 2 frames each
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 3 * MAX_DEPTH + 1000))
    try:
        result = lex.parse_value()
    finally:
        sys.setrecursionlimit(limit)
    lex.scan()
    if lex.token != _T_EOF:
        lex.error("end of file expected")
    return result


def dump_string(s):
    """A str as jansson's json_dumps writes it."""
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif o < 0x20:
            out.append({8: "\\b", 12: "\\f", 10: "\\n", 13: "\\r", 9: "\\t"}.get(
                o, "\\u%04X" % o))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def dump_real(x):
    """A real as jansson writes it: %.17g, a ".0" when it looks like an integer, and
    the exponent without '+' and leading zeros."""
    s = "%.17g" % x
    if "." not in s and "e" not in s:
        s += ".0"
    i = s.find("e")
    if i >= 0:
        mant, exp = s[:i], s[i + 1:]
        sign = ""
        if exp.startswith("-"):
            sign, exp = "-", exp[1:]
        elif exp.startswith("+"):
            exp = exp[1:]
        exp = exp.lstrip("0")
        s = mant + "e" + sign + exp
    return s
