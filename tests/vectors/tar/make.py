#!/usr/bin/python3
"""Writes the tar stream vectors of this folder and cases.json (README.md says what each
is). Run it from anywhere after changing a case: ./make.py. The streams are built with
Python's tarfile where it can say the thing, and patched byte by byte where it cannot."""
import io
import json
import os
import tarfile

here = os.path.dirname(os.path.abspath(__file__))
MTIME = 1700000000
cases = []


def info(name, type=tarfile.REGTYPE, data=b"", mode=0o644, link="", pax=None):
    t = tarfile.TarInfo(name)
    t.type = type
    t.mode = mode
    t.mtime = MTIME
    t.linkname = link
    t.uid = t.gid = 0
    if pax:
        t.pax_headers = pax
    return t, data


def stream(members, fmt=tarfile.USTAR_FORMAT, end=True):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
        for ti, data in members:
            ti.size = len(data) if ti.type == tarfile.REGTYPE else 0
            t.addfile(ti, io.BytesIO(data) if data else None)
    b = buf.getvalue()
    if not end:
        b = b[: len(b) - len(b) % 512]
        while b.endswith(b"\0" * 512):
            b = b[:-512]
    return b


def raw_header(name, typeflag, size, linkname=b""):
    """One ustar header block, checksummed, with any size claimed."""
    h = bytearray(512)
    h[0 : len(name)] = name
    h[100:108] = b"0000644\0"
    h[108:116] = b"0000000\0"
    h[116:124] = b"0000000\0"
    h[124:136] = b"%011o\0" % size
    h[136:148] = b"%011o\0" % MTIME
    h[156:157] = typeflag
    h[157 : 157 + len(linkname)] = linkname
    h[257:263] = b"ustar\0"
    h[263:265] = b"00"
    return checksum(h)


def checksum(h):
    h[148:156] = b" " * 8
    h[148:155] = b"%06o\0" % sum(h)
    return bytes(h)


def pad(data):
    return data + b"\0" * (-len(data) % 512)


END = b"\0" * 1024


def case(name, data, expect, member=None, what=""):
    with open(os.path.join(here, name + ".tar"), "wb") as f:
        f.write(data)
    c = {"file": name + ".tar", "expect": expect, "what": what}
    if member is not None:
        c["member"] = member
    if expect == "ok":
        c["entries"], c["bytes"] = count(data)
    cases.append(c)


def count(data):
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        ms = [m for m in t.getmembers() if m.name not in (".", "./")]
        return len(ms), sum(m.size for m in ms if m.isfile())


case("ok-tree", stream([info("./", tarfile.DIRTYPE, mode=0o755),
                        info("a.txt", data=b"hello\n"),
                        info("sub/", tarfile.DIRTYPE, mode=0o750),
                        info("sub/b.bin", data=bytes(range(256)) * 3, mode=0o600),
                        info("sub/link", tarfile.SYMTYPE, link="../a.txt", mode=0o777),
                        info("empty", data=b"")]),
     "ok", what="a root, files, a directory and a symlink pointing inside")
case("ok-pax-long-name", stream([info("d/" + "n" * 150 + "/" + "f" * 120, data=b"x")],
                                fmt=tarfile.PAX_FORMAT),
     "ok", what="a name longer than ustar holds, in a pax header")
case("ok-gnu-long-name", stream([info("g" * 200, data=b"yy")], fmt=tarfile.GNU_FORMAT),
     "ok", what="a name longer than ustar holds, in a GNU long name (type L)")
case("ok-symlink-out", stream([info("up", tarfile.SYMTYPE, link="../../etc"),
                               info("abs", tarfile.SYMTYPE, link="/etc/passwd")]),
     "ok", what="symlinks pointing out are kept as links: only writing through them is refused")

case("dotdot", stream([info("../escape", data=b"x")]), "invalid_argument", "../escape",
     "a member whose name climbs out of the target")
case("dotdot-inner", stream([info("a/../../escape", data=b"x")]), "invalid_argument",
     "a/../../escape", "a '..' in the middle of a name")
case("absolute", stream([info("/tmp/asp-escape", data=b"x")]), "invalid_argument",
     "/tmp/asp-escape", "an absolute name")
case("symlink-then-file", stream([info("l", tarfile.SYMTYPE, link=".."),
                                  info("l/escape", data=b"x")]),
     "invalid_argument", "l/escape", "a symlink out of the target, then a file written through it")
case("symlink-then-dir", stream([info("l", tarfile.SYMTYPE, link="/tmp"),
                                 info("l/sub/", tarfile.DIRTYPE)]),
     "invalid_argument", "l/sub/", "a symlink, then a directory made through it")
case("symlink-replaced", stream([info("l", tarfile.SYMTYPE, link="/tmp"),
                                 info("l", tarfile.DIRTYPE),
                                 info("l/x", data=b"x")]),
     "invalid_argument", "l", "a symlink, then a directory of the same name (a tar would follow or keep the link)")
case("hardlink", stream([info("a", data=b"x"), info("b", tarfile.LNKTYPE, link="a")]),
     "invalid_argument", "b", "a hard link")
case("hardlink-out", stream([info("b", tarfile.LNKTYPE, link="/etc/passwd")]),
     "invalid_argument", "b", "a hard link to a file outside")
case("chardev", stream([info("null", tarfile.CHRTYPE)]), "invalid_argument", "null",
     "a character device")
case("blockdev", stream([info("sda", tarfile.BLKTYPE)]), "invalid_argument", "sda",
     "a block device")
case("fifo", stream([info("pipe", tarfile.FIFOTYPE)]), "invalid_argument", "pipe", "a fifo")
case("pax-path-dotdot", stream([info("innocent", data=b"x", pax={"path": "../escape"})],
                               fmt=tarfile.PAX_FORMAT),
     "invalid_argument", "../escape", "a pax path that climbs out, behind an innocent ustar name")
rec = b"path=a\0b\n"
rec = b"%d " % (len(rec) + 3) + rec
case("pax-path-nul", raw_header(b"././@PaxHeader", b"x", len(rec)) + pad(rec) +
     raw_header(b"a", b"0", 1) + pad(b"x") + END,
     "invalid_argument", None, "a pax path holding a NUL byte")
bad = b"99 path=liar\n"
case("pax-record-length-lies", raw_header(b"././@PaxHeader", b"x", len(bad)) + pad(bad) +
     raw_header(b"a", b"0", 1) + pad(b"x") + END,
     "invalid_argument", None, "a pax record whose length says more than its header holds")
norec = b"11 pathxyz\n"
case("pax-record-no-key", raw_header(b"././@PaxHeader", b"x", len(norec)) + pad(norec) +
     raw_header(b"a", b"0", 1) + pad(b"x") + END,
     "invalid_argument", None, "a pax record without '='")
sz = b"15 size=12x456\n"
case("pax-size-not-number", raw_header(b"././@PaxHeader", b"x", len(sz)) + pad(sz) +
     raw_header(b"a", b"0", 1) + pad(b"x") + END,
     "invalid_argument", None, "a pax size that is not a number")
case("pax-huge", raw_header(b"././@PaxHeader", b"x", 1 << 30) + b"\0" * 512,
     "invalid_argument", None, "a pax header claiming 1 GiB (more than 64 KiB is refused)")
case("gnu-long-name-huge", raw_header(b"././@LongLink", b"L", 100000) + b"\0" * 512,
     "invalid_argument", None, "a GNU long name of 100000 bytes")
g = b"18 path=elsewhere\n"
case("pax-global-path", raw_header(b"pax_global_header", b"g", len(g)) + pad(g) +
     raw_header(b"a", b"0", 1) + pad(b"x") + END,
     "invalid_argument", None, "a global pax header renaming every member")
case("sparse", raw_header(b"s", b"S", 0) + END, "invalid_argument", "s", "a GNU sparse file")
case("dir-with-size", raw_header(b"d/", b"5", 1024) + b"\0" * 1024 + END,
     "invalid_argument", "d/", "a directory claiming data (tars disagree on what follows)")
h = bytearray(raw_header(b"a", b"0", 1))
h[0] = ord("b")  # the checksum no longer matches
case("bad-checksum", bytes(h) + pad(b"x") + END, "invalid_argument", None,
     "a header whose checksum is wrong")
case("lone-zero-block", stream([info("a", data=b"x")], end=False) + b"\0" * 512 +
     raw_header(b"b", b"0", 1) + pad(b"y") + END,
     "invalid_argument", None, "one zero block, then another member")
full = stream([info("a", data=b"x" * 5000), info("b", data=b"y")])
case("cut-in-data", full[: 512 + 3000], "invalid_argument", "a",
     "a stream cut in the middle of a file's data")
case("cut-before-end", stream([info("a", data=b"x")], end=False), "invalid_argument", "a",
     "a stream of whole members without the end-of-archive blocks")
case("cut-in-header", full[:300], "invalid_argument", None, "a stream cut inside its first header")
case("empty", b"", "invalid_argument", None, "no bytes at all")
case("name-too-long", stream([info("x" * 300, data=b"")], fmt=tarfile.PAX_FORMAT),
     "invalid_argument", "x" * 300, "a component longer than 255 bytes")

with open(os.path.join(here, "cases.json"), "w") as f:
    json.dump({"doc": "Tar streams for tree_write: what each must give (README.md).",
               "cases": cases}, f, indent=1)
    f.write("\n")
