"""The Python SDK's trees (docs/design.md, "Trees as one stream"): the shared tar vectors
through asp._tar's decoder (whole and a byte at a time) and unpacker (a refusal leaves
nothing), and through the SDK's tree_write into a real asp-agent (in one message and
split by a proc_write: the same answer, nothing left); upload_dir and download_dir, sync
and asyncio, against a real asp-agent over stdio and over HTTP (asp-agent --listen; with
websocket false an upload by POST alone) (kinds, modes, mtimes before 1970 and
past ustar's, long names and links, a chunked tree, exclude, merging, a conflict, a
symlink out that a later tree would write through, both ways); and a hostile responder
(hostile_tree.py) whose tree_read stream climbs out, which must leave nothing here.

usage: test_tree.py SDK_DIR AGENT TAR_CASES_JSON
"""
import asyncio
import json
import os
import shutil
import stat
import sys
import tempfile

sys.path.insert(0, sys.argv[1])
import asp  # noqa: E402
import asp.aio  # noqa: E402
from asp import _tar  # noqa: E402

AGENT = [os.path.abspath(sys.argv[2]), "--stdio"]
CASES = sys.argv[3]
failures = []
work = tempfile.mkdtemp(prefix="asp-sdk-tree-")


def check(cond, msg):
    print(("ok: " if cond else "FAIL: ") + msg, flush=True)
    if not cond:
        failures.append(msg)


def decode(data, step=None):
    r = _tar.Reader()
    try:
        if step:
            for i in range(0, len(data), step):
                r.feed(data[i:i + step])
        else:
            r.feed(data)
        r.end()
    except asp.AspError as e:
        return e, r
    return None, r


def fresh(name):
    d = os.path.join(work, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


# ---- the shared vectors ----------------------------------------------------------------
doc = json.load(open(CASES))
for c in doc["cases"]:
    data = open(os.path.join(os.path.dirname(CASES), c["file"]), "rb").read()
    for step in (None, 1 if len(data) < 20000 else 511):
        e, r = decode(data, step)
        if c["expect"] == "ok":
            check(e is None and (r.entries, r.bytes) == (c["entries"], c["bytes"]),
                  "%s (step %s): ok, %s entries, %s bytes (%s)"
                  % (c["file"], step, r.entries, r.bytes, e and e.message))
        else:
            check(e is not None and e.code == c["expect"] and
                  (not c.get("member") or c["member"] in e.message),
                  "%s (step %s): %s naming %r (%s)"
                  % (c["file"], step, c["expect"], c.get("member"), e and e.message))
    box = fresh("vec")
    target = os.path.join(box, "t")
    err = None
    u = _tar.Unpacker(target, "test")
    try:
        for i in range(0, len(data), 777):
            u.feed(data[i:i + 777])
        u.finish()
    except asp.AspError as e:
        err = e
    finally:
        u.close()
    want_ok = c["expect"] == "ok"
    check((err is None) == want_ok and os.listdir(box) == (["t"] if want_ok else []) and
          not os.path.exists("/tmp/asp-escape"),
          "%s unpacked: %s, %s left" % (c["file"], err and err.message, os.listdir(box)))


# a stream that names no root: the target made as mkdir would, under the umask
box = fresh("noroot")
old_mask = os.umask(0o027)
try:
    u = _tar.Unpacker(os.path.join(box, "t"), "test")
    u.feed(_tar.header(_tar.Member(_tar.FILE, "f", None, 0o644, 0, 1)) + b"x" + bytes(511) +
           _tar.END)
    u.finish()
    u.close()
finally:
    os.umask(old_mask)
check(os.stat(os.path.join(box, "t")).st_mode & 0o7777 == 0o750,
      "a stream that names no root makes its target under the umask (%o)"
      % (os.stat(os.path.join(box, "t")).st_mode & 0o7777))


# ---- a tree to copy --------------------------------------------------------------------
def make_tree(root):
    os.makedirs(os.path.join(root, "sub", "deeper"))
    os.makedirs(os.path.join(root, "empty-dir"))
    files = {"a.txt": (b"hello\n", 0o644), "run.sh": (b"#!/bin/sh\n", 0o755),
             "sub/secret": (b"s", 0o600), "sub/deeper/" + "n" * 200: (b"long", 0o640)}
    for rel, (data, mode) in files.items():
        p = os.path.join(root, rel)
        with open(p, "wb") as f:
            f.write(data)
        os.chmod(p, mode)
        os.utime(p, (1500000000, 1500000000))
    os.symlink("a.txt", os.path.join(root, "link"))
    os.symlink("../../../etc/passwd", os.path.join(root, "sub", "out"))
    ro = os.path.join(root, "ro")
    os.makedirs(ro)
    open(os.path.join(ro, "f"), "w").write("r")
    os.chmod(ro, 0o555)
    for d in ("sub/deeper", "sub", "empty-dir", "ro", ""):
        os.utime(os.path.join(root, d), (1234567890, 1234567890))


def listing(root):
    out = []
    for dp, dns, fns in os.walk(root):
        for n in sorted(dns + fns):
            p = os.path.join(dp, n)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            if stat.S_ISLNK(st.st_mode):
                out.append((rel, "l", os.readlink(p)))
            elif stat.S_ISDIR(st.st_mode):
                out.append((rel, "d", oct(st.st_mode & 0o7777), st.st_mtime_ns // 10**9))
            else:
                out.append((rel, "f", oct(st.st_mode & 0o7777), st.st_mtime_ns // 10**9,
                            open(p, "rb").read()))
    return sorted(out)


def make_edges(root):
    """What a tree may hold past the common: mtimes before 1970 (one between seconds) and
    past ustar's 11 octal digits, names and a link target longer than ustar holds, a
    newline, UTF-8 and bytes that are not UTF-8 in names, an empty directory of mode 700,
    setuid (not kept)."""
    deep = os.path.join(root, "d" * 120, "deep")
    os.makedirs(deep)
    files = {"past": -100, "past-frac": -1.5, "future": 2**34 + 5, "nl\nname": 1,
             "\u00e9-utf8": 2, os.path.join("d" * 120, "deep", "n" * 200): 3, "setuid": 4}
    for rel, mtime in files.items():
        p = os.path.join(root, rel)
        with open(p, "wb") as f:
            f.write(b"x")
        os.chmod(p, 0o4755 if rel == "setuid" else 0o644)
        os.utime(p, (mtime, mtime))
    os.symlink("t" * 150, os.path.join(root, "longlink"))
    os.symlink("/etc/passwd", os.path.join(root, "abslink"))
    raw = os.path.join(root, os.fsdecode(b"raw-\xff\xfe"))  # not UTF-8, name and target
    with open(raw, "wb") as f:
        f.write(b"r")
    os.symlink(os.fsdecode(b"t\xff"), raw + "-link")
    os.makedirs(os.path.join(root, "emptydir"), 0o700)
    os.chmod(os.path.join(root, "emptydir"), 0o700)


def kept(lst):
    """A listing as a copy keeps it: setuid and setgid dropped."""
    return [(x[0], x[1], oct(int(x[2], 8) & ~0o6000)) + x[3:] if x[1] != "l" else x
            for x in lst]


src = os.path.join(work, "src")
make_tree(src)
edges = os.path.join(work, "edges")
os.makedirs(edges)
make_edges(edges)
big = os.path.join(work, "big")
os.makedirs(big)
for i in range(40):
    with open(os.path.join(big, "f%02d" % i), "wb") as f:
        f.write(os.urandom(300000))


def round_trips(label, up, down):
    box = fresh(label)
    remote = os.path.join(box, "remote/deep")  # parents made
    n = up(src, remote)
    check((n.entries, n.bytes) == (11, 22), "%s: upload_dir counts %s" % (label, n))
    check(listing(remote) == listing(src), "%s: uploaded tree equals the source" % label)
    back = os.path.join(box, "back")
    n = down(remote, back)
    check((n.entries, n.bytes) == (11, 22), "%s: download_dir counts %s" % (label, n))
    check(listing(back) == listing(src), "%s: downloaded tree equals the source" % label)
    check(os.stat(back).st_mtime == 1234567890, "%s: the root's mtime came too" % label)
    n = up(big, os.path.join(box, "big"))
    check(n.entries == 40 and n.bytes == 40 * 300000, "%s: a 12 MB tree in chunks" % label)
    n = down(os.path.join(box, "big"), os.path.join(box, "big2"), exclude=["f1*"])
    check(n.entries == 30 and sorted(os.listdir(os.path.join(box, "big2"))) ==
          sorted(f for f in os.listdir(big) if not f.startswith("f1")),
          "%s: download_dir with exclude" % label)
    check(listing(os.path.join(box, "big2")) ==
          [x for x in listing(big) if not x[0].startswith("f1")],
          "%s: the chunked tree's bytes" % label)
    # merging into an existing directory: a file replaced, the rest kept
    mine = os.path.join(back, "mine.txt")
    open(mine, "w").write("mine")
    open(os.path.join(remote, "a.txt"), "w").write("changed")
    down(remote, back)
    check(open(os.path.join(back, "a.txt")).read() == "changed" and os.path.exists(mine),
          "%s: download_dir merges into an existing directory" % label)
    # a conflict moves nothing
    os.remove(os.path.join(remote, "a.txt"))
    os.makedirs(os.path.join(remote, "a.txt"))
    try:
        down(remote, back)
        check(False, "%s: a directory over a local file is refused" % label)
    except asp.AspError as e:
        check(e.code == "not_a_directory" and
              open(os.path.join(back, "a.txt")).read() == "changed" and
              not any(n.startswith(".asp-tree") for n in os.listdir(back)),
              "%s: a conflict is not_a_directory and moves nothing (%s)" % (label, e.message))
    # the edges, both ways
    n = up(edges, os.path.join(box, "edges"))
    check(listing(os.path.join(box, "edges")) == kept(listing(edges)),
          "%s: edges uploaded as they are (%s)" % (label, n))
    down(os.path.join(box, "edges"), os.path.join(box, "edges2"))
    check(listing(os.path.join(box, "edges2")) == kept(listing(edges)),
          "%s: edges downloaded as they are" % label)
    # a symlink out, then a tree with a directory of its name: nothing goes through it
    outside = fresh(label + "-outside")
    evil = fresh(label + "-evil")
    os.symlink(outside, os.path.join(evil, "l"))
    rt = os.path.join(box, "evil-remote")
    up(evil, rt)
    os.remove(os.path.join(evil, "l"))
    os.makedirs(os.path.join(evil, "l"))
    open(os.path.join(evil, "l", "escape"), "w").write("x")
    try:
        up(evil, rt)
        check(False, "%s: upload_dir through a symlink out is refused" % label)
    except asp.AspError as e:
        check(e.code == "not_a_directory" and "'l'" in e.message and os.listdir(outside) == []
              and os.readlink(os.path.join(rt, "l")) == outside,
              "%s: upload_dir through the sandbox's symlink out is not_a_directory naming it, "
              "nothing written (%s)" % (label, e.message))
    lt = os.path.join(box, "evil-local")
    os.rename(os.path.join(rt, "l"), os.path.join(box, "evil-l"))  # the sandbox turns:
    os.symlink(outside, os.path.join(rt, "l"))  # first a link out comes down,
    down(rt, lt)
    os.remove(os.path.join(rt, "l"))  # then a directory of its name
    shutil.copytree(os.path.join(evil, "l"), os.path.join(rt, "l"))
    try:
        down(rt, lt)
        check(False, "%s: download_dir through a symlink out is refused" % label)
    except asp.AspError as e:
        check(e.code == "not_a_directory" and "'l'" in e.message and os.listdir(outside) == []
              and os.readlink(os.path.join(lt, "l")) == outside and
              not any(n.startswith(".asp-tree") for n in os.listdir(lt)),
              "%s: download_dir through its own symlink out is not_a_directory naming it, "
              "nothing written (%s)" % (label, e.message))
    try:
        up(os.path.join(work, "nonexistent"), os.path.join(box, "x"))
        check(False, "%s: uploading a missing directory fails" % label)
    except (asp.AspError, OSError) as e:
        check(not os.path.exists(os.path.join(box, "x")), "%s: a missing source: %s"
              % (label, e))
    for dp, dns, _ in os.walk(box):
        for d in dns:
            os.chmod(os.path.join(dp, d), 0o755)


with asp.Client.stdio(AGENT) as c:
    round_trips("sync", c.upload_dir, c.download_dir)
    # the shared vectors into a real asp-agent: the same answer as asp._tar's, nothing left
    for v in doc["cases"]:
        data = open(os.path.join(os.path.dirname(CASES), v["file"]), "rb").read()
        for how in ("one message", "split"):
            box = fresh("agent-vec")
            target = os.path.join(box, "t")
            try:
                if how == "one message":
                    r = c.tree_write(target, data=data, eof=True)
                    got = ("ok", r.entries, r.bytes)
                else:
                    h = len(data) // 2
                    r = c.tree_write(target, data=data[:h])
                    try:
                        c.proc_write(r.proc, data=data[h:], offset=h, eof=True)
                    except asp.AspError:
                        pass  # the handle's end says why
                    w = c.proc_wait(r.proc, timeout_ms=20000)
                    got = ("ok", w.entries, w.bytes) if w.exit_code == 0 else (w.error_code,
                                                                                w.error)
            except asp.AspError as e:
                got = (e.code, e.message)
            if v["expect"] == "ok":
                good = got == ("ok", v["entries"], v["bytes"]) and os.listdir(box) == ["t"]
            else:
                good = (got[0] == v["expect"] and v.get("member", "") in got[1] and
                        os.listdir(box) == [])
            check(good and not os.path.exists("/tmp/asp-escape"),
                  "%s through tree_write (%s): %s, %s left" % (v["file"], how, got,
                                                              os.listdir(box)))


async def aio(label, connect):
    c = await connect()
    try:
        loop = asyncio.get_running_loop()

        def up(a, b, exclude=None):
            return asyncio.run_coroutine_threadsafe(c.upload_dir(a, b, exclude=exclude),
                                                    loop).result()

        def down(a, b, exclude=None):
            return asyncio.run_coroutine_threadsafe(c.download_dir(a, b, exclude=exclude),
                                                    loop).result()

        await loop.run_in_executor(None, round_trips, label, up, down)
    finally:
        await c.close()


asyncio.run(aio("asyncio", lambda: asp.aio.Client.stdio(AGENT)))


# ---- over HTTP (asp-agent --listen): tree_write's pieces by POST, tree_read on the WebSocket
async def aio_http(url):
    return asp.aio.Client.http(url)


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from listen_agent import start_agent  # noqa: E402

log = tempfile.NamedTemporaryFile(prefix="asp-sdk-tree-listener-", suffix=".log")
try:
    listener, (host, port) = start_agent(AGENT[0], log)
except SystemExit as e:
    if e.code != 77:
        raise
    listener = None
    print("skip: over HTTP: the agent was built without HTTP support")
if listener is not None:
    url = "http://%s:%d" % (host, port)
    try:
        with asp.Client.http(url) as c:
            round_trips("http", c.upload_dir, c.download_dir)
        asyncio.run(aio("http asyncio", lambda: aio_http(url)))
        with asp.Client.http(url, websocket=False) as c:
            box = fresh("http-post")
            n = c.upload_dir(src, os.path.join(box, "t"))
            check((n.entries, n.bytes) == (11, 22) and
                  listing(os.path.join(box, "t")) == listing(src),
                  "http, websocket false: upload_dir by POST alone (%s)" % (n,))
            try:
                c.download_dir(os.path.join(box, "t"), os.path.join(box, "back"))
                check(False, "http, websocket false: download_dir needs the WebSocket")
            except asp.AspError as e:
                check(e.code == "unsupported" and "WebSocket" in e.message and
                      os.listdir(box) == ["t"],
                      "http, websocket false: download_dir is unsupported naming the "
                      "WebSocket, nothing made (%s)" % e.message)
            for dp, dns, _ in os.walk(box):
                for d in dns:
                    os.chmod(os.path.join(dp, d), 0o755)
    finally:
        listener.terminate()
        listener.wait(30)

# ---- a hostile sandbox: its tree_read stream climbs out --------------------------------
script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hostile_tree.py")
vec = os.path.join(os.path.dirname(CASES), "symlink-then-file.tar")
box = fresh("hostile")
target = os.path.join(box, "t")
with asp.Client.stdio([sys.executable, script, vec]) as c:
    try:
        c.download_dir("/anything", target)
        check(False, "a hostile stream is refused")
    except asp.AspError as e:
        check(e.code == "invalid_argument" and "l/escape" in e.message and
              os.listdir(box) == [] and not os.path.exists(os.path.join(box, "escape")),
              "a hostile tree_read stream is refused naming its member and leaves nothing "
              "(%s)" % e.message)

shutil.rmtree(work, ignore_errors=True)
print("%d failures" % len(failures))
sys.exit(1 if failures else 0)
