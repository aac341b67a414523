"""Tar streams, the wire form of a directory tree (docs/design.md, "Trees as one
stream"), as the C library reads and writes them (asp/tar.h, asp/tree.h): a decoder that
refuses what tree_write refuses, the header encoder, a packer of a local directory and an
unpacker into one through a temporary directory. Standard library only."""

import errno
import os
import re
import stat
import time

from ._errors import AspError

BLOCK = 512
PATH_MAX = 4095
PAX_MAX = 64 * 1024
LINKS_MAX = 16 * 1024 * 1024
END = b"\0" * (2 * BLOCK)
FILE, DIR, SYMLINK = "file", "dir", "symlink"
_ZERO = b"\0" * BLOCK
_KINDS = {b"1": "a hard link", b"3": "a character device", b"4": "a block device",
          b"6": "a fifo", b"S": "a sparse file", b"D": "a GNU directory dump",
          b"M": "a multi-volume continuation", b"V": "a volume label"}
_OCTAL_11 = 0o77777777777


def padding(n):
    return (BLOCK - n % BLOCK) % BLOCK


class Member:
    __slots__ = ("type", "path", "link", "mode", "mtime", "size")

    def __init__(self, type, path, link=None, mode=0o644, mtime=0, size=0):
        self.type, self.path, self.link = type, path, link
        self.mode, self.mtime, self.size = mode, mtime, size


def _bad(member, what, code="invalid_argument"):
    if member is not None:
        return AspError(code, "tar stream: member '%s': %s" % (member, what), path=member)
    return AspError(code, "tar stream: %s" % what)


# ---- reading ---------------------------------------------------------------------------

def _num(f, neg=False):
    """An octal (or GNU base-256) header field; None when it does not parse."""
    if f[0] & 0x80:
        minus = f[0] == 0xFF
        if minus and not neg:
            return None
        v = int.from_bytes(bytes([f[0] & 0x7F]) + f[1:], "big")
        if minus:
            v -= 1 << (8 * len(f) - 1)
        return v if -(1 << 63) <= v < (1 << 63) else None
    s = f.lstrip(b" ")
    m = re.match(rb"([0-7]*)([ \0]*)$", s)
    if not m:
        return None
    return int(m.group(1), 8) if m.group(1) else 0


def _checksum_ok(b):
    want = _num(b[148:156])
    if want is None:
        return False
    h = b[:148] + b" " * 8 + b[156:]
    return want == sum(h) or want == sum(x - 256 if x > 127 else x for x in h)


def _field(f):
    i = f.find(b"\0")
    return f if i < 0 else f[:i]


def _normalise(raw):
    """(path, ends with '/'), or raises with why not."""
    if not raw:
        raise ValueError("the name is empty")
    if raw.startswith("/"):
        raise ValueError("the name is absolute: it would leave the target")
    if len(raw.encode("utf-8", "surrogateescape")) > PATH_MAX:
        raise ValueError("the name is longer than 4095 bytes")
    out = []
    for c in raw.split("/"):
        if c == "..":
            raise ValueError("a '..' component would leave the target")
        if len(c.encode("utf-8", "surrogateescape")) > 255:
            raise ValueError("a component is longer than 255 bytes")
        if c and c != ".":
            out.append(c)
    return "/".join(out), raw.endswith("/")


def _dec(b):
    return b.decode("utf-8", "surrogateescape")


class Reader:
    """Feed it bytes; it calls on_member(Member), on_data(bytes), on_file_end() in order
    and raises AspError (invalid_argument naming the member) on a stream that breaks the
    rules, then again on every later call. end() checks the end-of-archive blocks came."""

    def __init__(self, on_member=None, on_data=None, on_file_end=None, skip_special=False):
        self.on_member, self.on_data, self.on_file_end = on_member, on_data, on_file_end
        self.skip_special = skip_special
        self._buf = bytearray()
        self._state = "header"  # header, zero1, data, ext, pad, done
        self._left = 0
        self._pad = 0
        self._ext_kind = None
        self._ext = bytearray()
        self._pending = {}
        self._last = ""
        self._links = set()
        self._link_bytes = 0
        self._error = None
        self.pos = 0
        self.hdr = 0
        self.entries = 0
        self.bytes = 0

    @property
    def done(self):
        return self._state == "done"

    def _fail(self, member, what, code="invalid_argument"):
        if member is None and self._last:
            what = "the header at byte %d (after member '%s'): %s" % (self.hdr, self._last, what)
        elif member is None:
            what = "the header at byte %d: %s" % (self.hdr, what)
        self._error = _bad(member, what, code)
        raise self._error

    def feed(self, data):
        if self._error:
            raise self._error
        mv = memoryview(data)
        i, n = 0, len(mv)
        while i < n or (self._state == "pad" and self._pad == 0):
            st = self._state
            if st == "done":
                return
            if st in ("header", "zero1"):
                k = min(BLOCK - len(self._buf), n - i)
                self._buf += mv[i:i + k]
                i += k
                if len(self._buf) < BLOCK:
                    continue
                blk = bytes(self._buf)
                self._buf.clear()
                try:
                    self._header(blk)
                finally:
                    self.pos += BLOCK
            elif st == "data":
                k = min(self._left, n - i)
                if self.on_data:
                    self.on_data(mv[i:i + k])
                i += k
                self.pos += k
                self._left -= k
                if not self._left:
                    self._state = "pad"
                    if self.on_file_end:
                        self.on_file_end()
            elif st == "ext":
                k = min(self._left, n - i)
                self._ext += mv[i:i + k]
                i += k
                self.pos += k
                self._left -= k
                if not self._left:
                    self._state = "pad"
                    self._ext_done()
            elif st == "pad":
                k = min(self._pad, n - i)
                i += k
                self.pos += k
                self._pad -= k
                if not self._pad:
                    self._state = "header"

    def end(self):
        if self._error:
            raise self._error
        if self._state == "done":
            return
        if self._state == "data":
            self._fail(self._last, "the stream ends inside its data (%d bytes missing): it was "
                       "cut" % self._left)
        if self._last:
            self._fail(self._last, "the stream ends after it without the end-of-archive "
                       "blocks: it was cut")
        self._fail(None, "the stream ends without the end-of-archive blocks: it was cut or "
                   "is empty")

    def _pax(self, glob):
        p, off = bytes(self._ext), 0
        while off < len(p):
            m = re.match(rb"([0-9]{1,8}) ", p[off:off + 9])
            ln = int(m.group(1)) if m else 0
            if not m or ln <= len(m.group(0)) or ln > len(p) - off or p[off + ln - 1] != 0x0A:
                self._fail(None, "a pax record at offset %d of its header does not parse (its "
                           "length must count the whole \"LEN KEY=VALUE\\n\")" % off)
            rec = p[off + len(m.group(0)):off + ln - 1]
            eq = rec.find(b"=")
            if eq <= 0:
                self._fail(None, "a pax record at offset %d of its header has no KEY=" % off)
            key, val = rec[:eq], rec[eq + 1:]
            if key.startswith(b"GNU.sparse."):
                self._fail(None, "a pax header describes a sparse file, which a tree cannot "
                           "hold")
            if glob and key in (b"path", b"linkpath", b"size"):
                self._fail(None, "a global pax header sets '%s' for every member" % _dec(key))
            if key in (b"path", b"linkpath"):
                if len(val) > PATH_MAX or b"\0" in val:
                    self._fail(None, "a pax %s is longer than 4095 bytes or holds a NUL byte"
                               % _dec(key))
                self._pending["pax_" + _dec(key)] = _dec(val) if val else None
            elif key == b"size":
                if not re.fullmatch(rb"[0-9]+", val) or int(val) >= 1 << 63:
                    self._fail(None, "a pax size '%s' is not a number of bytes" % _dec(val[:40]))
                self._pending["size"] = int(val)
            elif key == b"mtime" and not glob:
                m2 = re.fullmatch(rb"(-?)([0-9]+)(\.[0-9]*)?", val)
                if not m2:
                    self._fail(None, "a pax mtime '%s' is not a time" % _dec(val[:40]))
                self._pending["mtime"] = -int(m2.group(2)) if m2.group(1) else int(m2.group(2))
            off += ln

    def _ext_done(self):
        if self._ext_kind in (b"x", b"g"):
            self._pax(self._ext_kind == b"g")
        else:
            nul = self._ext.find(b"\0")
            name = _dec(bytes(self._ext if nul < 0 else self._ext[:nul]))
            self._pending["gnu_name" if self._ext_kind == b"L" else "gnu_link"] = name
        self._ext = bytearray()

    def _header(self, b):
        if self._state == "header" and not self._pending:
            self.hdr = self.pos
        if b == _ZERO:
            if self._state == "zero1":
                self._state = "done"
                return
            if self._pending:
                self._fail(None, "an extended header is followed by the end of the archive, "
                           "not by its member")
            self._state = "zero1"
            return
        if self._state == "zero1":
            self._fail(None, "a lone zero block comes before it (the end of an archive is two)")
        if not _checksum_ok(b):
            self._fail(None, "its checksum is wrong: this is not a tar header (or the stream "
                       "is damaged)")
        t = b[156:157]
        posix = b[257:263] == b"ustar\0" and b[263:265] == b"00"
        size, mtime, mode = _num(b[124:136]), _num(b[136:148], True), _num(b[100:108])
        if size is None or mtime is None or mode is None:
            self._fail(None, "its mode, size or mtime is not a number")
        if t in (b"x", b"g", b"L", b"K"):
            mx = PAX_MAX if t in (b"x", b"g") else PATH_MAX + 1
            if size > mx:
                self._fail(None, "an extended header of %d bytes (more than %d)" % (size, mx))
            self._ext_kind, self._ext, self._left = t, bytearray(), size
            self._pad = padding(size)
            if size:
                self._state = "ext"
            else:
                self._state = "header"
                self._ext_done()
            return
        pend = self._pending
        if pend.get("pax_path") or pend.get("gnu_name"):
            raw = pend.get("pax_path") or pend.get("gnu_name")
            if len(raw.encode("utf-8", "surrogateescape")) > PATH_MAX:
                self._fail(None, "its long name is over 4095 bytes")
        else:
            name, prefix = _dec(_field(b[0:100])), _dec(_field(b[345:500]))
            raw = prefix + "/" + name if posix and prefix else name
        self._last = raw
        try:
            path, slash = _normalise(raw)
        except ValueError as e:
            self._fail(raw, str(e))
        if "mtime" in pend:
            mtime = pend["mtime"]
        sz = pend.get("size", size)
        if t in (b"0", b"\0", b"7"):
            typ = DIR if slash and t != b"7" else FILE
        elif t == b"5":
            typ = DIR
        elif t == b"2":
            typ = SYMLINK
        elif t in (b"3", b"4", b"6") and self.skip_special and not sz:
            self._pending = {}
            self._state = "header"
            return
        elif t in _KINDS:
            self._fail(raw, "it is %s; a tree holds only files, directories and symlinks"
                       % _KINDS[t])
        else:
            self._fail(raw, "its type '%s' is not a file, directory or symlink"
                       % (chr(t[0]) if 0x20 <= t[0] < 0x7F else "?"))
        if typ != FILE and sz:
            self._fail(raw, "a %s with a size of %d bytes (tars disagree on what follows)"
                       % ("directory" if typ == DIR else "symlink", sz))
        if not path and typ != DIR:
            self._fail(raw, "the tree's root can only be a directory")
        if typ == FILE and slash:
            self._fail(raw, "a file whose name ends with '/'")
        link = None
        if typ == SYMLINK:
            link = pend.get("pax_linkpath") or pend.get("gnu_link") or _dec(_field(b[157:257]))
            if len(link.encode("utf-8", "surrogateescape")) > PATH_MAX:
                self._fail(raw, "its link target is over 4095 bytes")
            if not link:
                self._fail(raw, "a symlink with an empty target")
        parts = path.split("/")
        for k in range(1, len(parts) + 1):
            pre = "/".join(parts[:k])
            if pre in self._links:
                self._fail(raw, "it lies %s the symlink '%s' an earlier member made: writing "
                           "it would follow that link" % ("at" if k == len(parts) else "below",
                                                          pre))
        if typ == SYMLINK:
            self._link_bytes += len(path) + 1
            if self._link_bytes > LINKS_MAX:
                self._fail(raw, "the stream makes more symlinks than a tree may (16 MiB of "
                           "names)", "too_large")
            self._links.add(path)
        self._pending = {}
        m = Member(typ, path, link, mode & 0o7777, mtime, sz if typ == FILE else 0)
        if path:
            self.entries += 1
        self.bytes += m.size
        if self.on_member:
            self.on_member(m)
        if typ == FILE and m.size:
            self._left, self._pad, self._state = m.size, padding(m.size), "data"
            return
        if typ == FILE and self.on_file_end:
            self.on_file_end()
        self._state = "header"


# ---- writing ---------------------------------------------------------------------------

def _octal(v, n):
    s = b"%0*o" % (n - 1, v)
    return s + b"\0" if 0 <= v and len(s) == n - 1 else None


def _number(v, n):
    o = _octal(v, n)
    if o is not None:
        return o
    b = (v % (1 << (8 * n))).to_bytes(n, "big")  # base-256, two's complement
    return bytes([0xFF if v < 0 else 0x80]) + b[1:]


def _pax_record(key, val):
    body = len(key) + len(val) + 3  # " key=value\n"
    ln = body + 1
    while len(str(ln)) + body != ln:
        ln += 1
    return b"%d %s=%s\n" % (ln, key, val)


def _blank(typ, mode, mtime):
    h = bytearray(BLOCK)
    h[100:108] = _octal(mode & 0o7777, 8)
    h[108:116] = _octal(0, 8)
    h[116:124] = _octal(0, 8)
    h[136:148] = _number(mtime, 12)
    h[156:157] = typ
    h[257:263] = b"ustar\0"
    h[263:265] = b"00"
    return h


def _checksum(h):
    h[148:156] = b" " * 8
    h[148:155] = b"%06o\0" % sum(h)
    return bytes(h)


def _ustar_name(h, name):
    if len(name) <= 100:
        h[0:len(name)] = name
        return True
    for i in range(len(name) - 1, 0, -1):
        if name[i:i + 1] != b"/":
            continue
        if len(name) - i - 1 > 100:
            break
        if i <= 155 and len(name) - i - 1 > 0:
            h[345:345 + i] = name[:i]
            h[0:len(name) - i - 1] = name[i + 1:]
            return True
    return False


def header(m):
    """A member's header bytes: ustar, after a pax header when ustar cannot hold it."""
    path = m.path.encode("utf-8", "surrogateescape")
    link = (m.link or "").encode("utf-8", "surrogateescape")
    if len(path) > PATH_MAX or len(link) > PATH_MAX:
        raise AspError("invalid_argument", "tar: '%s' is longer than %d bytes"
                       % (m.path[:200], PATH_MAX), path=m.path)
    name = ((path or b".") + b"/") if m.type == DIR else path
    typ = b"5" if m.type == DIR else b"2" if m.type == SYMLINK else b"0"
    size = m.size if m.type == FILE else 0
    h = _blank(typ, m.mode, m.mtime)
    pax = b""
    if not _ustar_name(h, name):
        pax += _pax_record(b"path", name)
    if len(link) > 100:
        pax += _pax_record(b"linkpath", link)
    elif link:
        h[157:157 + len(link)] = link
    if size > _OCTAL_11:
        pax += _pax_record(b"size", b"%d" % size)
    if m.mtime < 0 or m.mtime > _OCTAL_11:
        pax += _pax_record(b"mtime", b"%d" % m.mtime)
    h[124:136] = _number(size, 12)
    ustar = _checksum(h)
    if not pax:
        return ustar
    x = _blank(b"x", 0o644, 0 if m.mtime < 0 or m.mtime > _OCTAL_11 else m.mtime)
    x[0:14] = b"././@PaxHeader"
    x[124:136] = _number(len(pax), 12)
    return _checksum(x) + pax + b"\0" * padding(len(pax)) + ustar


# ---- exclude patterns (glob's syntax) --------------------------------------------------

def _expand(p):
    depth, start = 0, -1
    for i, c in enumerate(p):
        if c == "{":
            if depth == 0:
                start = i
            depth += 1
        elif c == "}" and depth:
            depth -= 1
            if depth == 0:
                alts, d, last = [], 0, start + 1
                for j in range(start + 1, i + 1):
                    if p[j] == "{":
                        d += 1
                    elif p[j] == "}" and d and j != i:
                        d -= 1
                    elif (p[j] == "," and d == 0) or j == i:
                        alts.append(p[last:j])
                        last = j + 1
                out = []
                for a in alts:
                    out += _expand(p[:start] + a + p[i + 1:])
                return out
    return [p]


def _glob_re(p):
    out, i = [], 0
    while i < len(p):
        c = p[i]
        if c == "*" and p[i:i + 2] == "**" and (i == 0 or p[i - 1] == "/") and \
                (i + 2 == len(p) or p[i + 2] == "/"):
            if i + 2 == len(p):
                out.append(".*")
                i += 2
            else:
                out.append("(?:.*/)?")
                i += 3
            continue
        if c == "*":
            while i < len(p) and p[i] == "*":
                i += 1
            out.append("[^/]*")
            continue
        if c == "?":
            out.append("[^/]")
        elif c == "[":
            j = i + 1
            neg = j < len(p) and p[j] in "!^"
            if neg:
                j += 1
            k = j
            while k < len(p) and (p[k] != "]" or k == j):
                k += 1
            if k >= len(p):
                out.append(re.escape("["))
            else:
                body = p[j:k].replace("\\", "\\\\")
                out.append("(?!/)[%s%s]" % ("^" if neg else "", body))
                i = k
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z", re.S)


class Exclude:
    """tree_read's exclude patterns: a pattern without '/' matches a name at any depth."""

    def __init__(self, patterns):
        self._res = []
        for i, p in enumerate(patterns or []):
            if not p:
                raise AspError("invalid_argument", "tree_read: exclude pattern %d is empty" % i)
            alts = _expand(p)
            if len(alts) > 256:
                raise AspError("invalid_argument", "tree_read: the pattern expands to more "
                               "than 256 alternatives")
            for a in alts:
                self._res.append(_glob_re(a if "/" in a else "**/" + a))

    def __bool__(self):
        return bool(self._res)

    def match(self, rel):
        return any(r.match(rel) for r in self._res)

    def covers(self, rel):
        """Whether rel or a directory above it is excluded."""
        parts = rel.split("/")
        return any(self.match("/".join(parts[:k])) for k in range(1, len(parts) + 1))


# ---- a local directory into a stream ---------------------------------------------------

def _seconds(st):
    """The whole seconds of an mtime, as stat's tv_sec (before 1970 too, where int() of
    the float would round toward zero)."""
    return st.st_mtime_ns // 1000000000


def pack(root, exclude=None, chunk=1 << 20, counts=None):
    """Yields the stream of directory `root` in chunks of about `chunk` bytes: root first
    as "./", each directory before its entries, names bytewise; files, directories and
    symlinks (not followed); mode and mtime kept, owners 0. `counts` (a dict) gets entries
    and bytes."""
    ex = Exclude(exclude)
    counts = counts if counts is not None else {}
    counts.update(entries=0, bytes=0)
    out = bytearray()
    st = os.stat(root)
    if not stat.S_ISDIR(st.st_mode):
        raise AspError("not_a_directory", "%s is not a directory" % root, path=str(root))
    out += header(Member(DIR, "", None, st.st_mode & 0o7777, _seconds(st)))
    stack = [("", sorted(os.listdir(root), key=os.fsencode))]
    while stack:
        rel, names = stack[-1]
        if not names:
            stack.pop()
            continue
        nm = names.pop(0)
        r = rel + "/" + nm if rel else nm
        full = os.path.join(root, r)
        if ex and ex.match(r):
            continue
        try:
            st = os.lstat(full)
        except FileNotFoundError:
            continue
        mode, mtime = st.st_mode & 0o7777, _seconds(st)
        if stat.S_ISDIR(st.st_mode):
            try:
                kids = sorted(os.listdir(full), key=os.fsencode)
            except FileNotFoundError:
                continue
            out += header(Member(DIR, r, None, mode, mtime))
            counts["entries"] += 1
            stack.append((r, kids))
        elif stat.S_ISLNK(st.st_mode):
            out += header(Member(SYMLINK, r, os.readlink(full), mode, mtime))
            counts["entries"] += 1
        elif stat.S_ISREG(st.st_mode):
            with open(full, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                out += header(Member(FILE, r, None, mode, mtime, size))
                counts["entries"] += 1
                counts["bytes"] += size
                left = size
                while left:
                    if len(out) >= chunk:
                        yield bytes(out)
                        out.clear()
                    d = f.read(min(left, chunk))
                    if not d:  # it shrank: zeros keep the stream whole
                        d = b"\0" * min(left, chunk)
                    out += d
                    left -= len(d)
                out += b"\0" * padding(size)
        if len(out) >= chunk:
            yield bytes(out)
            out.clear()
    out += END
    yield bytes(out)


# ---- a stream into a local directory ---------------------------------------------------

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_tree(path):
    import shutil

    def onerror(fn, p, exc):
        try:
            os.chmod(os.path.dirname(p), 0o700)
            fn(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=onerror)


def _remove_dead(parent, prefix):
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for nm in names:
        if not nm.startswith(prefix):
            continue
        m = re.match(r"([0-9a-f]+)-", nm[len(prefix):])
        if m and int(m.group(1), 16) != os.getpid() and not _pid_alive(int(m.group(1), 16)):
            _remove_tree(os.path.join(parent, nm))


_seq = [0]


def _make_temp(parent, prefix):
    for _ in range(100):
        _seq[0] += 1
        name = "%s%x-%x" % (prefix, os.getpid(), (_seq[0] ^ time.monotonic_ns() >> 10) & 0xFFFFFFFF)
        try:
            os.mkdir(os.path.join(parent, name), 0o700)
            return name
        except FileExistsError:
            continue
    raise AspError("io_error", "cannot make a temporary directory in %s" % parent)


def _errno_code(e):
    return {errno.ENOENT: "not_found", errno.EACCES: "permission_denied",
            errno.EPERM: "permission_denied", errno.EEXIST: "already_exists",
            errno.ENOTDIR: "not_a_directory", errno.EISDIR: "is_a_directory",
            errno.ENOTEMPTY: "not_empty", errno.EINVAL: "invalid_argument"}.get(e.errno,
                                                                                "io_error")


class Unpacker:
    """A stream into directory `target` (made with its parents when absent), through a
    temporary directory beside it (absent) or inside it (existing), put in place by
    finish(): one rename, or entries moved in one by one after a check that moves nothing
    on a conflict. close() without finish() removes the temporary: nothing reaches
    target. Members are written through directory fds opened without following links."""

    def __init__(self, target, op="download_dir"):
        self.op = op
        t = os.fspath(target)
        while len(t) > 1 and t.endswith("/"):
            t = t[:-1]
        self.target = t
        self.dirs = []
        self.file = None
        self.finished = False
        self.reader = Reader(self._member, self._data, self._file_end)
        if os.path.isdir(t):
            self.exists = True
            self.place = t
            _remove_dead(t, ".asp-tree-")
            self.tmp = _make_temp(t, ".asp-tree-")
        elif os.path.lexists(t):
            raise AspError("not_a_directory", "%s: %s exists and is not a directory"
                           % (op, t), path=t)
        else:
            self.exists = False
            parent, base = os.path.split(t)
            if base in ("", ".", ".."):
                raise AspError("not_found", "%s: %s does not exist" % (op, t), path=t)
            self.place = parent or "."
            self.base = base
            try:
                os.makedirs(self.place, exist_ok=True)
            except OSError as e:
                raise AspError(_errno_code(e), "%s: cannot make the directory %s: %s"
                               % (op, self.place, e.strerror), path=self.place) from None
            prefix = "." + base + ".asp-tree-"
            _remove_dead(self.place, prefix)
            self.tmp = _make_temp(self.place, prefix)
        self.tmp_fd = os.open(os.path.join(self.place, self.tmp), _DIR_FLAGS)

    # -- members
    def _open_dir(self, rel, member):
        fd = os.dup(self.tmp_fd)
        try:
            for c in rel.split("/") if rel else []:
                try:
                    nfd = os.open(c, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    os.mkdir(c, 0o755, dir_fd=fd)
                    nfd = os.open(c, _DIR_FLAGS, dir_fd=fd)
                except (NotADirectoryError, OSError) as e:
                    if e.errno in (errno.ENOTDIR, errno.ELOOP):
                        raise AspError("invalid_argument", "%s: member '%s': '%s' is not a "
                                       "directory: cannot write below it"
                                       % (self.op, member, c), path=member) from None
                    raise
                os.close(fd)
                fd = nfd
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _clear(self, fd, name, rel, kind):
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            raise AspError("invalid_argument", "%s: member '%s': a %s where an earlier member "
                           "made a directory" % (self.op, rel, kind), path=rel)
        os.unlink(name, dir_fd=fd)

    def _member(self, m):
        if not m.path:
            self.dirs.append(("", m.mode, m.mtime))
            return
        parent, _, name = m.path.rpartition("/")
        fd = self._open_dir(parent, m.path)
        try:
            if m.type == DIR:
                try:
                    os.mkdir(name, 0o700, dir_fd=fd)
                except FileExistsError:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    if not stat.S_ISDIR(st.st_mode):
                        raise AspError("invalid_argument", "%s: member '%s': a directory where "
                                       "an earlier member made a file or symlink"
                                       % (self.op, m.path), path=m.path) from None
                self.dirs.append((m.path, m.mode, m.mtime))
                return
            self._clear(fd, name, m.path, "file" if m.type == FILE else "symlink")
            if m.type == SYMLINK:
                os.symlink(m.link, name, dir_fd=fd)
                try:
                    os.utime(name, (m.mtime, m.mtime), dir_fd=fd, follow_symlinks=False)
                except (OSError, NotImplementedError):
                    pass
                return
            ffd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW |
                          getattr(os, "O_CLOEXEC", 0), 0o600, dir_fd=fd)
            self.file = (ffd, m)
        finally:
            os.close(fd)

    def _data(self, b):
        mv = memoryview(b)
        while mv:
            n = os.write(self.file[0], mv)
            mv = mv[n:]

    def _file_end(self):
        ffd, m = self.file
        self.file = None
        try:
            os.fchmod(ffd, m.mode & 0o1777)  # setuid and setgid are not kept
            os.utime(ffd, (m.mtime, m.mtime))
        finally:
            os.close(ffd)

    def feed(self, data):
        try:
            self.reader.feed(data)
        except AspError as e:
            if e.message.startswith("tar stream:"):
                e.message = "%s: %s" % (self.op, e.message)
            raise
        except OSError as e:
            raise AspError(_errno_code(e), "%s: %s" % (self.op, e), path=self.target) from None

    # -- putting it in place
    def _merge(self, src, dst, rel, skip, check):
        for nm in sorted(os.listdir(src)):
            if skip and nm == skip:
                continue
            s, d, r = os.path.join(src, nm), os.path.join(dst, nm), rel + nm
            sd = os.path.isdir(s) and not os.path.islink(s)
            dexists = os.path.lexists(d)
            dd = dexists and os.path.isdir(d) and not os.path.islink(d)
            if sd and dd:
                self._merge(s, d, r + "/", None, check)
                if not check:
                    os.rmdir(s)
            elif sd and dexists:
                raise AspError("not_a_directory", "%s: member '%s' is a directory but %s/%s is "
                               "a file or symlink; remove it first"
                               % (self.op, r, self.target, r), path=r)
            elif not sd and dd:
                raise AspError("is_a_directory", "%s: member '%s' is a file or symlink but "
                               "%s/%s is a directory; remove it first"
                               % (self.op, r, self.target, r), path=r)
            elif not check:
                os.rename(s, d)

    def finish(self):
        """Checks the stream ended well and puts the tree in place: (entries, bytes)."""
        self.feed(b"")
        try:
            self.reader.end()
        except AspError as e:
            e.message = "%s: %s" % (self.op, e.message)
            raise
        tmp_path = os.path.join(self.place, self.tmp)
        fresh = False
        try:
            if not self.exists and not os.path.lexists(self.target):
                os.rename(tmp_path, self.target)
                fresh = True
                self.tmp = None
            else:
                skip = self.tmp if self.exists else None
                self._merge(tmp_path, self.target, "", skip, True)
                self._merge(tmp_path, self.target, "", skip, False)
                os.close(self.tmp_fd)
                self.tmp_fd = -1
                _remove_tree(tmp_path)
                self.tmp = None
            mask = os.umask(0)
            os.umask(mask)
            root_set = False
            for rel, mode, mtime in reversed(self.dirs):
                p = os.path.join(self.target, rel) if rel else self.target
                os.chmod(p, mode & 0o1777)
                os.utime(p, (mtime, mtime))
                root_set = root_set or not rel
            if fresh and not root_set:
                os.chmod(self.target, 0o777 & ~mask)
        except OSError as e:
            raise AspError(_errno_code(e), "%s: putting the tree in place at %s: %s"
                           % (self.op, self.target, e.strerror), path=self.target) from None
        self.finished = True
        return self.reader.entries, self.reader.bytes

    def close(self):
        if self.file:
            os.close(self.file[0])
            self.file = None
        if self.tmp_fd >= 0:
            os.close(self.tmp_fd)
            self.tmp_fd = -1
        if self.tmp:
            _remove_tree(os.path.join(self.place, self.tmp))
            self.tmp = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
