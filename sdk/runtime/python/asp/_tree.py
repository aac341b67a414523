"""upload_dir and download_dir (docs/design.md, "Trees as one stream"): a local directory
into the sandbox and back as one tar stream, through tree_write and tree_read, for the
synchronous client (threads) and the asyncio one. A tree that fits one message is one
tree_write; a larger one goes in chunks with a few writes in flight at their offsets,
the eof and the proc_wait for the result sent together. What comes down is unpacked with
asp._tar's rules, so a sandbox cannot write outside the local target either."""

import asyncio
import concurrent.futures
import dataclasses
import os

from . import _tar
from ._errors import AspError

CHUNK_MAX = 4 << 20
ENVELOPE = 64 << 10
IN_FLIGHT = 4


@dataclasses.dataclass
class TreeCounts:
    """What a tree held: entries (files, directories, symlinks; the root not counted)
    and the bytes of its files."""

    entries: int
    bytes: int


def _chunk(client):
    m = client.max_message or (16 << 20)
    return min(CHUNK_MAX, m - ENVELOPE if m > 2 * ENVELOPE else m // 2)


def _ended(op, r):
    """The result of a finished tree handle (proc_wait or exit) as counts or an error."""
    if r.exit_code == 0:
        return TreeCounts(r.entries or 0, r.bytes or 0)
    if getattr(r, "error_code", None):
        raise AspError(r.error_code, r.error or r.error_code)
    if r.exit_code == -1:
        raise AspError("io_error", "%s: cancelled (%s)" % (op, r.signal or "signal"))
    raise AspError("io_error", "%s: the stream failed: %s" % (op, r.error or "no message"))


def _pieces(source_dir, exclude, size):
    """The stream in pieces of exactly `size` bytes (the last shorter)."""
    buf = bytearray()
    for b in _tar.pack(os.fspath(source_dir), exclude, chunk=size):
        buf += b
        while len(buf) >= size:
            yield bytes(buf[:size])
            del buf[:size]
    yield bytes(buf)


def upload(client, source_dir, target_dir, exclude=None):
    size = _chunk(client)
    it = _pieces(source_dir, exclude, size)
    first = next(it)
    second = next(it, None)
    if second is None or (not second and next(it, None) is None):
        r = client.tree_write(target_dir, data=first, eof=True)
        return TreeCounts(r.entries or 0, r.bytes or 0)
    r = client.tree_write(target_dir, data=first)
    proc, offset = r.proc, len(first)
    pending = []
    with concurrent.futures.ThreadPoolExecutor(IN_FLIGHT) as pool:
        try:
            for piece in _chain(second, it):
                if not piece:
                    continue
                while len(pending) >= IN_FLIGHT:
                    pending.pop(0).result()
                pending.append(pool.submit(client.proc_write, proc, data=piece, offset=offset))
                offset += len(piece)
        except BaseException:
            for f in pending:
                f.cancel()
            try:
                client.proc_signal(proc, "KILL")
            except AspError:
                pass
            raise
        last = pool.submit(client.proc_write, proc, offset=offset, eof=True)
        result = client.proc_wait(proc)  # beside the eof: no round trip of its own
        for f in pending:
            f.result()
        try:
            last.result()
        except AspError:
            pass  # the handle's own end says why
    return _ended("upload_dir", result)


def _chain(first, rest):
    yield first
    yield from rest


def _consume(p, unpacker, ev):
    if getattr(ev, "stream", None) == "stdout" and ev.data:
        unpacker.feed(ev.data)


def download(client, source_dir, target_dir, exclude=None):
    with _tar.Unpacker(target_dir, "download_dir") as u:
        p = client.tree_read(source_dir, exclude=list(exclude) if exclude else None)
        try:
            for ev in p:
                _consume(p, u, ev)
        except BaseException:
            p.close()
            try:
                client.proc_signal(p.proc, "KILL")
            except AspError:
                pass
            raise
        _ended("download_dir", p.exit)
        entries, nbytes = u.finish()
    return TreeCounts(entries, nbytes)


async def aupload(client, source_dir, target_dir, exclude=None):
    size = _chunk(client)
    it = _pieces(source_dir, exclude, size)
    first = next(it)
    second = next(it, None)
    if second is None or (not second and next(it, None) is None):
        r = await client.tree_write(target_dir, data=first, eof=True)
        return TreeCounts(r.entries or 0, r.bytes or 0)
    r = await client.tree_write(target_dir, data=first)
    proc, offset = r.proc, len(first)
    pending = []
    try:
        for piece in _chain(second, it):
            if not piece:
                continue
            while len(pending) >= IN_FLIGHT:
                await pending.pop(0)
            pending.append(asyncio.ensure_future(
                client.proc_write(proc, data=piece, offset=offset)))
            offset += len(piece)
    except BaseException:
        for f in pending:
            f.cancel()
        try:
            await client.proc_signal(proc, "KILL")
        except AspError:
            pass
        raise
    last = asyncio.ensure_future(client.proc_write(proc, offset=offset, eof=True))
    result = await client.proc_wait(proc)
    for f in pending:
        await f
    try:
        await last
    except AspError:
        pass
    return _ended("upload_dir", result)


async def adownload(client, source_dir, target_dir, exclude=None):
    with _tar.Unpacker(target_dir, "download_dir") as u:
        p = await client.tree_read(source_dir, exclude=list(exclude) if exclude else None)
        try:
            async for ev in p:
                _consume(p, u, ev)
        except BaseException:
            p.close()
            try:
                await client.proc_signal(p.proc, "KILL")
            except AspError:
                pass
            raise
        _ended("download_dir", p.exit)
        entries, nbytes = u.finish()
    return TreeCounts(entries, nbytes)
