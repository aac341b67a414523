// uploadDir and downloadDir (docs/design.md, "Trees as one stream"): a local directory
// into the sandbox and back as one tar stream, through tree_write and tree_read. A tree
// that fits one message is one tree_write; a larger one goes in chunks with a few writes
// in flight at their offsets, the eof and the proc_wait for the result sent together.
// What comes down is unpacked with tar.ts's rules, so a sandbox cannot write outside the
// local target either.
import { AspError } from "./errors.js";
import { Unpacker, pack } from "./tar.js";

const CHUNK_MAX = 4 << 20;
const ENVELOPE = 64 << 10;
const IN_FLIGHT = 4;

/** What a tree held: entries (files, directories, symlinks; the root not counted) and the
 * bytes of its files. */
export interface TreeCounts {
  entries: number;
  bytes: number;
}

export interface TreeOptions {
  /** Glob patterns left out (tree_read's exclude). */
  exclude?: string[];
}

interface Caller {
  _call(name: string, params: unknown): Promise<unknown>;
  _stream(name: string, params: unknown, procFrom: "result" | "params"): Promise<AsyncIterable<Record<string, unknown>> & { proc: number; close(): void }>;
  readonly maxMessage: number;
}

type End = { exit_code: number; signal?: string | null; error?: string; error_code?: string; entries?: number; bytes?: number };

function ended(op: string, r: End): TreeCounts {
  if (r.exit_code === 0) return { entries: r.entries ?? 0, bytes: r.bytes ?? 0 };
  if (r.error_code) throw new AspError(r.error_code, r.error ?? r.error_code);
  if (r.exit_code === -1) throw new AspError("io_error", `${op}: cancelled (${r.signal ?? "signal"})`);
  throw new AspError("io_error", `${op}: the stream failed: ${r.error ?? "no message"}`);
}

/** The stream in pieces of exactly `size` bytes (the last shorter). */
async function* pieces(dir: string, exclude: string[] | undefined, size: number): AsyncGenerator<Uint8Array> {
  let buf = new Uint8Array(0);
  const counts = { entries: 0, bytes: 0 };
  for await (const b of pack(dir, exclude, size, counts)) {
    const joined = new Uint8Array(buf.length + b.length);
    joined.set(buf, 0);
    joined.set(b, buf.length);
    buf = joined;
    while (buf.length >= size) {
      yield buf.slice(0, size);
      buf = buf.slice(size);
    }
  }
  yield buf;
}

export async function uploadDir(c: Caller, sourceDir: string, targetDir: string, options: TreeOptions = {}): Promise<TreeCounts> {
  const m = c.maxMessage || 16 << 20;
  const size = Math.min(CHUNK_MAX, m > 2 * ENVELOPE ? m - ENVELOPE : Math.floor(m / 2));
  const it = pieces(sourceDir, options.exclude, size);
  const first = (await it.next()).value as Uint8Array;
  const second = await it.next();
  const third = second.done || second.value.length ? null : await it.next();
  if (second.done || (third && third.done)) {
    const r = (await c._call("tree_write", { path: targetDir, data: first, eof: true })) as { entries?: number; bytes?: number };
    return { entries: r.entries ?? 0, bytes: r.bytes ?? 0 };
  }
  const { proc } = (await c._call("tree_write", { path: targetDir, data: first })) as { proc: number };
  let offset = first.length;
  const pending: Promise<unknown>[] = [];
  try {
    const send = async (piece: Uint8Array) => {
      if (!piece.length) return;
      while (pending.length >= IN_FLIGHT) await pending.shift();
      pending.push(c._call("proc_write", { proc, data: piece, offset }));
      offset += piece.length;
    };
    await send(second.value as Uint8Array);
    for await (const piece of it) await send(piece);
  } catch (e) {
    await Promise.allSettled(pending);
    await c._call("proc_signal", { proc, signal: "KILL" }).catch(() => undefined);
    throw e;
  }
  const last = c._call("proc_write", { proc, offset, eof: true }).catch(() => undefined); // the end says why
  const result = c._call("proc_wait", { proc }) as Promise<End>; // beside the eof
  const writes = await Promise.allSettled(pending);
  await last;
  const r = await result;
  if (r.exit_code === 0) {
    const failed = writes.find((w) => w.status === "rejected") as PromiseRejectedResult | undefined;
    if (failed) throw failed.reason;
  }
  return ended("uploadDir", r);
}

export async function downloadDir(c: Caller, sourceDir: string, targetDir: string, options: TreeOptions = {}): Promise<TreeCounts> {
  const u = new Unpacker(targetDir, "downloadDir");
  try {
    const params: Record<string, unknown> = { path: sourceDir };
    if (options.exclude?.length) params.exclude = options.exclude;
    const p = await c._stream("tree_read", params, "result");
    let exit: End | undefined;
    try {
      for await (const ev of p) {
        if (ev.event === "output" && ev.stream === "stdout" && ev.data) u.feed(ev.data as Uint8Array);
        else if (ev.event === "exit") exit = ev as unknown as End;
      }
    } catch (e) {
      p.close();
      await c._call("proc_signal", { proc: p.proc, signal: "KILL" }).catch(() => undefined);
      throw e;
    }
    if (!exit) throw new AspError("transport_error", "downloadDir: the stream ended without its exit");
    ended("downloadDir", exit);
    return u.finish();
  } finally {
    u.close();
  }
}
