// Tar streams, the wire form of a directory tree (docs/design.md, "Trees as one stream"),
// as the C library reads and writes them (asp/tar.h, asp/tree.h): a decoder that refuses
// what tree_write refuses, the header encoder, a packer of a local directory and an
// unpacker into one through a temporary directory. Names are UTF-8.
import * as fs from "node:fs";
import * as path from "node:path";
import { AspError } from "./errors.js";
import { bytesFromStr, strFromBytes } from "./wire.js";

export const BLOCK = 512;
const PATH_MAX = 4095;
const PAX_MAX = 64 * 1024;
const LINKS_MAX = 16 * 1024 * 1024;
const OCTAL_11 = 0o77777777777;
export const END = new Uint8Array(2 * BLOCK);
const KINDS: Record<string, string> = {
  "1": "a hard link",
  "3": "a character device",
  "4": "a block device",
  "6": "a fifo",
  S: "a sparse file",
  D: "a GNU directory dump",
  M: "a multi-volume continuation",
  V: "a volume label",
};

export type MemberType = "file" | "dir" | "symlink";
export interface Member {
  type: MemberType;
  path: string;
  link?: string;
  mode: number;
  mtime: number;
  size: number;
}

export function padding(n: number): number {
  return (BLOCK - (n % BLOCK)) % BLOCK;
}

// Names are the SDK's strings of raw bytes (wire.ts): a byte that is not UTF-8 is U+DC80..
// U+DCFF, both in the stream and on the local disk, so every name round-trips.
const utf8 = new TextDecoder("utf-8");
const enc = new TextEncoder();
const byteLen = (s: string) => bytesFromStr(s).length;

/** A path as the file system takes it: its bytes, raw ones included. */
const fsName = (p: string): Buffer => Buffer.from(bytesFromStr(p));

/** A directory's names, every byte kept. */
function namesOf(dir: string): string[] {
  return fs.readdirSync(fsName(dir), { encoding: "buffer" }).map(strFromBytes);
}

function bad(member: string | null, what: string, code = "invalid_argument"): AspError {
  if (member !== null) return new AspError(code, `tar stream: member '${member}': ${what}`, { path: member });
  return new AspError(code, `tar stream: ${what}`);
}

// ---- reading ---------------------------------------------------------------------------

/** An octal (or GNU base-256) header field; null when it does not parse. */
function num(f: Uint8Array, neg = false): number | null {
  if (f[0] & 0x80) {
    const minus = f[0] === 0xff;
    if (minus && !neg) return null;
    let v = BigInt(f[0] & 0x7f);
    for (let i = 1; i < f.length; i++) v = (v << 8n) | BigInt(f[i]);
    if (minus) v -= 1n << BigInt(8 * f.length - 1);
    if (v > BigInt(Number.MAX_SAFE_INTEGER) || v < -BigInt(Number.MAX_SAFE_INTEGER)) return null;
    return Number(v);
  }
  let i = 0;
  while (i < f.length && f[i] === 0x20) i++;
  let v = 0;
  let digits = 0;
  for (; i < f.length && f[i] >= 0x30 && f[i] <= 0x37; i++, digits++) v = v * 8 + (f[i] - 0x30);
  for (; i < f.length; i++) if (f[i] !== 0x20 && f[i] !== 0) return null;
  return v;
}

function checksumOk(b: Uint8Array): boolean {
  const want = num(b.subarray(148, 156));
  if (want === null) return false;
  let u = 0;
  let s = 0;
  for (let i = 0; i < BLOCK; i++) {
    const c = i >= 148 && i < 156 ? 0x20 : b[i];
    u += c;
    s += c > 127 ? c - 256 : c;
  }
  return want === u || want === s;
}

function field(f: Uint8Array): string {
  const z = f.indexOf(0);
  return strFromBytes(z < 0 ? f : f.subarray(0, z));
}

function isZero(b: Uint8Array): boolean {
  for (let i = 0; i < b.length; i++) if (b[i]) return false;
  return true;
}

function normalise(raw: string): [string, boolean] {
  if (!raw) throw new Error("the name is empty");
  if (raw.startsWith("/")) throw new Error("the name is absolute: it would leave the target");
  if (byteLen(raw) > PATH_MAX) throw new Error("the name is longer than 4095 bytes");
  const out: string[] = [];
  for (const c of raw.split("/")) {
    if (c === "..") throw new Error("a '..' component would leave the target");
    if (byteLen(c) > 255) throw new Error("a component is longer than 255 bytes");
    if (c && c !== ".") out.push(c);
  }
  return [out.join("/"), raw.endsWith("/")];
}

export interface ReaderCallbacks {
  member?: (m: Member) => void;
  data?: (d: Uint8Array) => void;
  fileEnd?: () => void;
}

/** Feed it bytes; it calls the callbacks in order and throws AspError (invalid_argument
 * naming the member) on a stream that breaks the rules, then again on every later call.
 * end() checks the end-of-archive blocks came. */
export class TarReader {
  entries = 0;
  bytes = 0;
  private buf = new Uint8Array(BLOCK);
  private have = 0;
  private state: "header" | "zero1" | "data" | "ext" | "pad" | "done" = "header";
  private left = 0;
  private pad = 0;
  private extKind = "";
  private ext: Uint8Array[] = [];
  private pending: Record<string, string | number | undefined> = {};
  private last = "";
  private links = new Set<string>();
  private linkBytes = 0;
  private error: AspError | null = null;
  private pos = 0;
  private hdr = 0;

  constructor(
    private readonly cb: ReaderCallbacks = {},
    private readonly skipSpecial = false,
  ) {}

  get done(): boolean {
    return this.state === "done";
  }

  private fail(member: string | null, what: string, code = "invalid_argument"): never {
    if (member === null)
      what = this.last ? `the header at byte ${this.hdr} (after member '${this.last}'): ${what}` : `the header at byte ${this.hdr}: ${what}`;
    this.error = bad(member, what, code);
    throw this.error;
  }

  feed(data: Uint8Array): void {
    if (this.error) throw this.error;
    let i = 0;
    const n = data.length;
    while (i < n || (this.state === "pad" && this.pad === 0)) {
      switch (this.state) {
        case "done":
          return;
        case "header":
        case "zero1": {
          const k = Math.min(BLOCK - this.have, n - i);
          this.buf.set(data.subarray(i, i + k), this.have);
          this.have += k;
          i += k;
          if (this.have < BLOCK) break;
          this.have = 0;
          try {
            this.header(this.buf);
          } finally {
            this.pos += BLOCK;
          }
          break;
        }
        case "data": {
          const k = Math.min(this.left, n - i);
          this.cb.data?.(data.subarray(i, i + k));
          i += k;
          this.pos += k;
          this.left -= k;
          if (!this.left) {
            this.state = "pad";
            this.cb.fileEnd?.();
          }
          break;
        }
        case "ext": {
          const k = Math.min(this.left, n - i);
          this.ext.push(data.slice(i, i + k));
          i += k;
          this.pos += k;
          this.left -= k;
          if (!this.left) {
            this.state = "pad";
            this.extDone();
          }
          break;
        }
        case "pad": {
          const k = Math.min(this.pad, n - i);
          i += k;
          this.pos += k;
          this.pad -= k;
          if (!this.pad) this.state = "header";
          break;
        }
      }
    }
  }

  end(): void {
    if (this.error) throw this.error;
    if (this.state === "done") return;
    if (this.state === "data") this.fail(this.last, `the stream ends inside its data (${this.left} bytes missing): it was cut`);
    if (this.last) this.fail(this.last, "the stream ends after it without the end-of-archive blocks: it was cut");
    this.fail(null, "the stream ends without the end-of-archive blocks: it was cut or is empty");
  }

  private extBytes(): Uint8Array {
    const total = this.ext.reduce((a, b) => a + b.length, 0);
    const out = new Uint8Array(total);
    let o = 0;
    for (const b of this.ext) {
      out.set(b, o);
      o += b.length;
    }
    return out;
  }

  private paxRecords(glob: boolean): void {
    const p = this.extBytes();
    let off = 0;
    while (off < p.length) {
      let i = off;
      let len = 0;
      while (i < p.length && p[i] >= 0x30 && p[i] <= 0x39 && i - off < 8) len = len * 10 + (p[i++] - 0x30);
      if (i === off || i >= p.length || p[i] !== 0x20 || len <= i - off + 1 || len > p.length - off || p[off + len - 1] !== 0x0a)
        this.fail(null, `a pax record at offset ${off} of its header does not parse (its length must count the whole "LEN KEY=VALUE\\n")`);
      const rec = p.subarray(i + 1, off + len - 1);
      const eq = rec.indexOf(0x3d);
      if (eq <= 0) this.fail(null, `a pax record at offset ${off} of its header has no KEY=`);
      const key = utf8.decode(rec.subarray(0, eq));
      const val = rec.subarray(eq + 1);
      const sval = strFromBytes(val);
      if (key.startsWith("GNU.sparse.")) this.fail(null, "a pax header describes a sparse file, which a tree cannot hold");
      if (glob && (key === "path" || key === "linkpath" || key === "size")) this.fail(null, `a global pax header sets '${key}' for every member`);
      if (key === "path" || key === "linkpath") {
        if (val.length > PATH_MAX || val.includes(0)) this.fail(null, `a pax ${key} is longer than 4095 bytes or holds a NUL byte`);
        this.pending["pax_" + key] = val.length ? sval : undefined;
      } else if (key === "size") {
        if (!/^[0-9]+$/.test(sval) || sval.length > 18) this.fail(null, `a pax size '${sval.slice(0, 40)}' is not a number of bytes`);
        this.pending.size = Number(sval);
      } else if (key === "mtime" && !glob) {
        const m = /^(-?)([0-9]+)(\.[0-9]*)?$/.exec(sval);
        if (!m) this.fail(null, `a pax mtime '${sval.slice(0, 40)}' is not a time`);
        this.pending.mtime = (m[1] ? -1 : 1) * Number(m[2]);
      }
      off += len;
    }
  }

  private extDone(): void {
    if (this.extKind === "x" || this.extKind === "g") this.paxRecords(this.extKind === "g");
    else {
      const b = this.extBytes();
      const z = b.indexOf(0);
      this.pending[this.extKind === "L" ? "gnu_name" : "gnu_link"] = strFromBytes(z < 0 ? b : b.subarray(0, z));
    }
    this.ext = [];
  }

  private header(b: Uint8Array): void {
    const pending = Object.keys(this.pending).length > 0;
    if (this.state === "header" && !pending) this.hdr = this.pos;
    if (isZero(b)) {
      if (this.state === "zero1") {
        this.state = "done";
        return;
      }
      if (pending) this.fail(null, "an extended header is followed by the end of the archive, not by its member");
      this.state = "zero1";
      return;
    }
    if (this.state === "zero1") this.fail(null, "a lone zero block comes before it (the end of an archive is two)");
    if (!checksumOk(b)) this.fail(null, "its checksum is wrong: this is not a tar header (or the stream is damaged)");
    const t = String.fromCharCode(b[156]);
    const posix = utf8.decode(b.subarray(257, 263)) === "ustar\0" && b[263] === 0x30 && b[264] === 0x30;
    const size = num(b.subarray(124, 136));
    const mtime = num(b.subarray(136, 148), true);
    const mode = num(b.subarray(100, 108));
    if (size === null || mtime === null || mode === null) this.fail(null, "its mode, size or mtime is not a number");
    if (t === "x" || t === "g" || t === "L" || t === "K") {
      const max = t === "x" || t === "g" ? PAX_MAX : PATH_MAX + 1;
      if (size > max) this.fail(null, `an extended header of ${size} bytes (more than ${max})`);
      this.extKind = t;
      this.ext = [];
      this.left = size;
      this.pad = padding(size);
      if (size) this.state = "ext";
      else {
        this.state = "header";
        this.extDone();
      }
      return;
    }
    const pend = this.pending;
    let raw: string;
    const long = (pend.pax_path ?? pend.gnu_name) as string | undefined;
    if (long) {
      if (byteLen(long) > PATH_MAX) this.fail(null, "its long name is over 4095 bytes");
      raw = long;
    } else {
      const name = field(b.subarray(0, 100));
      const prefix = field(b.subarray(345, 500));
      raw = posix && prefix ? `${prefix}/${name}` : name;
    }
    this.last = raw;
    let p: string;
    let slash: boolean;
    try {
      [p, slash] = normalise(raw);
    } catch (e) {
      this.fail(raw, (e as Error).message);
    }
    const mt = pend.mtime !== undefined ? (pend.mtime as number) : mtime;
    const sz = pend.size !== undefined ? (pend.size as number) : size;
    let type: MemberType;
    if (t === "0" || t === "\0" || t === "7") type = slash && t !== "7" ? "dir" : "file";
    else if (t === "5") type = "dir";
    else if (t === "2") type = "symlink";
    else if ((t === "3" || t === "4" || t === "6") && this.skipSpecial && !sz) {
      this.pending = {};
      this.state = "header";
      return;
    } else if (KINDS[t]) this.fail(raw, `it is ${KINDS[t]}; a tree holds only files, directories and symlinks`);
    else this.fail(raw, `its type '${b[156] >= 0x20 && b[156] < 0x7f ? t : "?"}' is not a file, directory or symlink`);
    if (type !== "file" && sz) this.fail(raw, `a ${type === "dir" ? "directory" : "symlink"} with a size of ${sz} bytes (tars disagree on what follows)`);
    if (!p && type !== "dir") this.fail(raw, "the tree's root can only be a directory");
    if (type === "file" && slash) this.fail(raw, "a file whose name ends with '/'");
    let link: string | undefined;
    if (type === "symlink") {
      link = ((pend.pax_linkpath ?? pend.gnu_link) as string | undefined) || field(b.subarray(157, 257));
      if (byteLen(link) > PATH_MAX) this.fail(raw, "its link target is over 4095 bytes");
      if (!link) this.fail(raw, "a symlink with an empty target");
    }
    const parts = p.split("/");
    for (let k = 1; k <= parts.length; k++) {
      const pre = parts.slice(0, k).join("/");
      if (this.links.has(pre))
        this.fail(raw, `it lies ${k === parts.length ? "at" : "below"} the symlink '${pre}' an earlier member made: writing it would follow that link`);
    }
    if (type === "symlink") {
      this.linkBytes += p.length + 1;
      if (this.linkBytes > LINKS_MAX) this.fail(raw, "the stream makes more symlinks than a tree may (16 MiB of names)", "too_large");
      this.links.add(p);
    }
    this.pending = {};
    const m: Member = { type, path: p, link, mode: mode & 0o7777, mtime: mt, size: type === "file" ? sz : 0 };
    if (p) this.entries++;
    this.bytes += m.size;
    this.cb.member?.(m);
    if (type === "file" && m.size) {
      this.left = m.size;
      this.pad = padding(m.size);
      this.state = "data";
      return;
    }
    if (type === "file") this.cb.fileEnd?.();
    this.state = "header";
  }
}

// ---- writing ---------------------------------------------------------------------------

function putOctal(h: Uint8Array, at: number, n: number, v: number): boolean {
  if (v < 0) return false;
  const s = v.toString(8).padStart(n - 1, "0");
  if (s.length > n - 1) return false;
  h.set(enc.encode(s), at);
  h[at + n - 1] = 0;
  return true;
}

function putNumber(h: Uint8Array, at: number, n: number, v: number): void {
  if (putOctal(h, at, n, v)) return;
  let u = BigInt(v);
  if (u < 0n) u += 1n << BigInt(8 * n);
  for (let i = n - 1; i > 0; i--) {
    h[at + i] = Number(u & 0xffn);
    u >>= 8n;
  }
  h[at] = v < 0 ? 0xff : 0x80;
}

function blank(type: string, mode: number, mtime: number): Uint8Array {
  const h = new Uint8Array(BLOCK);
  putOctal(h, 100, 8, mode & 0o7777);
  putOctal(h, 108, 8, 0);
  putOctal(h, 116, 8, 0);
  putNumber(h, 136, 12, mtime);
  h[156] = type.charCodeAt(0);
  h.set(enc.encode("ustar\0"), 257);
  h.set(enc.encode("00"), 263);
  return h;
}

function checksum(h: Uint8Array): Uint8Array {
  h.fill(0x20, 148, 156);
  let sum = 0;
  for (let i = 0; i < BLOCK; i++) sum += h[i];
  h.set(enc.encode(sum.toString(8).padStart(6, "0") + "\0"), 148);
  return h;
}

function paxRecord(key: string, val: Uint8Array): Uint8Array {
  const body = key.length + val.length + 3;
  let len = body + 1;
  while (String(len).length + body !== len) len++;
  const head = enc.encode(`${len} ${key}=`);
  const out = new Uint8Array(len);
  out.set(head, 0);
  out.set(val, head.length);
  out[len - 1] = 0x0a;
  return out;
}

function ustarName(h: Uint8Array, name: Uint8Array): boolean {
  if (name.length <= 100) {
    h.set(name, 0);
    return true;
  }
  for (let i = name.length - 1; i > 0; i--) {
    if (name[i] !== 0x2f) continue;
    if (name.length - i - 1 > 100) break;
    if (i <= 155 && name.length - i - 1 > 0) {
      h.set(name.subarray(0, i), 345);
      h.set(name.subarray(i + 1), 0);
      return true;
    }
  }
  return false;
}

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((a, b) => a + b.length, 0));
  let o = 0;
  for (const b of parts) {
    out.set(b, o);
    o += b.length;
  }
  return out;
}

/** A member's header bytes: ustar, after a pax header when ustar cannot hold it. */
export function tarHeader(m: Member): Uint8Array {
  const p = bytesFromStr(m.path);
  const link = bytesFromStr(m.link ?? "");
  if (p.length > PATH_MAX || link.length > PATH_MAX) throw new AspError("invalid_argument", `tar: '${m.path.slice(0, 200)}' is longer than ${PATH_MAX} bytes`, { path: m.path });
  const name = m.type === "dir" ? bytesFromStr((m.path || ".") + "/") : p;
  const size = m.type === "file" ? m.size : 0;
  const h = blank(m.type === "dir" ? "5" : m.type === "symlink" ? "2" : "0", m.mode, m.mtime);
  const pax: Uint8Array[] = [];
  if (!ustarName(h, name)) pax.push(paxRecord("path", name));
  if (link.length > 100) pax.push(paxRecord("linkpath", link));
  else if (link.length) h.set(link, 157);
  if (size > OCTAL_11) pax.push(paxRecord("size", enc.encode(String(size))));
  if (m.mtime < 0 || m.mtime > OCTAL_11) pax.push(paxRecord("mtime", enc.encode(String(m.mtime))));
  putNumber(h, 124, 12, size);
  checksum(h);
  if (!pax.length) return h;
  const data = concat(pax);
  const x = blank("x", 0o644, m.mtime < 0 || m.mtime > OCTAL_11 ? 0 : m.mtime);
  x.set(enc.encode("././@PaxHeader"), 0);
  putNumber(x, 124, 12, data.length);
  checksum(x);
  return concat([x, data, new Uint8Array(padding(data.length)), h]);
}

// ---- exclude patterns (glob's syntax) --------------------------------------------------

function expand(p: string): string[] {
  let depth = 0;
  let start = -1;
  for (let i = 0; i < p.length; i++) {
    if (p[i] === "{") {
      if (depth === 0) start = i;
      depth++;
    } else if (p[i] === "}" && depth && --depth === 0) {
      const alts: string[] = [];
      let d = 0;
      let last = start + 1;
      for (let j = start + 1; j <= i; j++) {
        if (p[j] === "{") d++;
        else if (p[j] === "}" && d && j !== i) d--;
        else if ((p[j] === "," && d === 0) || j === i) {
          alts.push(p.slice(last, j));
          last = j + 1;
        }
      }
      return alts.flatMap((a) => expand(p.slice(0, start) + a + p.slice(i + 1)));
    }
  }
  return [p];
}

function globRe(p: string): RegExp {
  let out = "";
  for (let i = 0; i < p.length; i++) {
    const c = p[i];
    if (c === "*" && p[i + 1] === "*" && (i === 0 || p[i - 1] === "/") && (i + 2 === p.length || p[i + 2] === "/")) {
      if (i + 2 === p.length) {
        out += ".*";
        i += 1;
      } else {
        out += "(?:.*/)?";
        i += 2;
      }
      continue;
    }
    if (c === "*") {
      while (p[i + 1] === "*") i++;
      out += "[^/]*";
    } else if (c === "?") out += "[^/]";
    else if (c === "[") {
      let j = i + 1;
      const neg = p[j] === "!" || p[j] === "^";
      if (neg) j++;
      let k = j;
      while (k < p.length && (p[k] !== "]" || k === j)) k++;
      if (k >= p.length) out += "\\[";
      else {
        out += `(?!/)[${neg ? "^" : ""}${p.slice(j, k).replace(/\\/g, "\\\\")}]`;
        i = k;
      }
    } else out += c.replace(/[.+^${}()|[\]\\]/g, "\\$&");
  }
  return new RegExp(`^${out}$`, "s");
}

/** tree_read's exclude patterns: a pattern without '/' matches a name at any depth. */
export class Exclude {
  private res: RegExp[] = [];
  constructor(patterns?: string[]) {
    (patterns ?? []).forEach((p, i) => {
      if (!p) throw new AspError("invalid_argument", `tree_read: exclude pattern ${i} is empty`);
      const alts = expand(p);
      if (alts.length > 256) throw new AspError("invalid_argument", "tree_read: the pattern expands to more than 256 alternatives");
      for (const a of alts) this.res.push(globRe(a.includes("/") ? a : "**/" + a));
    });
  }
  get any(): boolean {
    return this.res.length > 0;
  }
  match(rel: string): boolean {
    return this.res.some((r) => r.test(rel));
  }
}

// ---- a local directory into a stream ---------------------------------------------------

const byBytes = (a: string, b: string) => Buffer.compare(fsName(a), fsName(b));
const readNames = async (dir: string) => (await fs.promises.readdir(fsName(dir), { encoding: "buffer" })).map(strFromBytes).sort(byBytes);

/** The stream of directory `root` in chunks of about `chunk` bytes: root first as "./",
 * each directory before its entries, names bytewise; files, directories and symlinks
 * (not followed); mode and mtime kept, owners 0. `counts` gets entries and bytes. */
export async function* pack(root: string, exclude: string[] | undefined, chunk: number, counts: { entries: number; bytes: number }): AsyncGenerator<Uint8Array> {
  const ex = new Exclude(exclude);
  counts.entries = counts.bytes = 0;
  let out: Uint8Array[] = [];
  let outLen = 0;
  const put = (b: Uint8Array) => {
    out.push(b);
    outLen += b.length;
  };
  const take = () => {
    const b = concat(out);
    out = [];
    outLen = 0;
    return b;
  };
  const st = await fs.promises.stat(fsName(root));
  if (!st.isDirectory()) throw new AspError("not_a_directory", `${root} is not a directory`, { path: root });
  put(tarHeader({ type: "dir", path: "", mode: st.mode & 0o7777, mtime: Math.floor(st.mtimeMs / 1000), size: 0 }));
  const stack: { rel: string; names: string[] }[] = [{ rel: "", names: await readNames(root) }];
  while (stack.length) {
    const top = stack[stack.length - 1];
    const nm = top.names.shift();
    if (nm === undefined) {
      stack.pop();
      continue;
    }
    const rel = top.rel ? `${top.rel}/${nm}` : nm;
    if (ex.any && ex.match(rel)) continue;
    const full = path.join(root, rel);
    let s: fs.Stats;
    try {
      s = await fs.promises.lstat(fsName(full));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") continue;
      throw e;
    }
    const mode = s.mode & 0o7777;
    const mtime = Math.floor(s.mtimeMs / 1000);
    if (s.isDirectory()) {
      const kids = await readNames(full);
      put(tarHeader({ type: "dir", path: rel, mode, mtime, size: 0 }));
      counts.entries++;
      stack.push({ rel, names: kids });
    } else if (s.isSymbolicLink()) {
      const link = strFromBytes(await fs.promises.readlink(fsName(full), { encoding: "buffer" }));
      put(tarHeader({ type: "symlink", path: rel, link, mode, mtime, size: 0 }));
      counts.entries++;
    } else if (s.isFile()) {
      const fh = await fs.promises.open(fsName(full), "r");
      try {
        const size = (await fh.stat()).size;
        put(tarHeader({ type: "file", path: rel, mode, mtime, size }));
        counts.entries++;
        counts.bytes += size;
        let left = size;
        while (left) {
          if (outLen >= chunk) yield take();
          const want = Math.min(left, chunk);
          const b = new Uint8Array(want);
          const { bytesRead } = await fh.read(b, 0, want, null);
          put(bytesRead ? b.subarray(0, bytesRead) : b); // shrank: zeros keep the stream whole
          left -= bytesRead || want;
        }
        put(new Uint8Array(padding(size)));
      } finally {
        await fh.close();
      }
    }
    if (outLen >= chunk) yield take();
  }
  put(END);
  yield take();
}

// ---- a stream into a local directory ---------------------------------------------------

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}

function removeDead(parent: string, prefix: string): void {
  let names: string[];
  try {
    names = namesOf(parent);
  } catch {
    return;
  }
  for (const nm of names) {
    if (!nm.startsWith(prefix)) continue;
    const m = /^([0-9a-f]+)-/.exec(nm.slice(prefix.length));
    if (m && parseInt(m[1], 16) !== process.pid && !pidAlive(parseInt(m[1], 16))) fs.rmSync(fsName(path.join(parent, nm)), { recursive: true, force: true });
  }
}

let seq = 0;
function makeTemp(parent: string, prefix: string, mode = 0o700): string {
  for (let i = 0; i < 100; i++) {
    const name = `${prefix}${process.pid.toString(16)}-${((++seq ^ Date.now()) >>> 0).toString(16)}`;
    try {
      fs.mkdirSync(fsName(path.join(parent, name)), mode);
      return name;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
    }
  }
  throw new AspError("io_error", `cannot make a temporary directory in ${parent}`);
}

const ERRNO: Record<string, string> = {
  ENOENT: "not_found",
  EACCES: "permission_denied",
  EPERM: "permission_denied",
  EEXIST: "already_exists",
  ENOTDIR: "not_a_directory",
  EISDIR: "is_a_directory",
  ENOTEMPTY: "not_empty",
  EINVAL: "invalid_argument",
};
function fromErrno(op: string, e: unknown, where: string): AspError {
  if (e instanceof AspError) return e;
  const x = e as NodeJS.ErrnoException;
  return new AspError(ERRNO[x.code ?? ""] ?? "io_error", `${op}: ${where}: ${x.message}`, { path: where });
}

/** An mtime in seconds as Node's utimes take it: a number below 0 means "now" to them, so
 * an mtime before 1970 goes as a Date (which holds +-8.64e12 s). */
function when(s: number): number | Date {
  return s >= 0 ? s : new Date(Math.max(s, -8.64e12) * 1000);
}

function lkind(p: string): "none" | "dir" | "other" {
  try {
    return fs.lstatSync(fsName(p)).isDirectory() ? "dir" : "other";
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return "none";
    throw e;
  }
}

/** A stream into directory `target` (made with its parents when absent), through a
 * temporary directory beside it (absent) or inside it (existing), put in place by
 * finish(): one rename, or entries moved in one by one after a check that moves nothing on
 * a conflict. close() without finish() removes the temporary. The temporary is fresh and
 * the decoder refuses every member at or below a symlink of the stream, so writing by path
 * never follows a link. */
export class Unpacker {
  private readonly target: string;
  private readonly exists: boolean;
  private readonly place: string;
  private readonly base: string = "";
  private tmp: string | null;
  private readonly reader: TarReader;
  private readonly dirs: [string, number, number][] = [];
  private file: { fd: number; m: Member } | null = null;
  private rootMode = 0o755;

  constructor(target: string, private readonly op = "downloadDir") {
    let t = target;
    while (t.length > 1 && t.endsWith("/")) t = t.slice(0, -1);
    this.target = t;
    this.reader = new TarReader({ member: (m) => this.member(m), data: (d) => this.data(d), fileEnd: () => this.fileEnd() });
    const kind = lkind(t) === "other" && fs.statSync(fsName(t), { throwIfNoEntry: false })?.isDirectory() ? "dir" : lkind(t);
    if (kind === "dir") {
      this.exists = true;
      this.place = t;
      removeDead(t, ".asp-tree-");
      this.tmp = makeTemp(t, ".asp-tree-");
    } else if (kind === "other") {
      throw new AspError("not_a_directory", `${op}: ${t} exists and is not a directory`, { path: t });
    } else {
      this.exists = false;
      this.base = path.basename(t);
      if (!this.base || this.base === "." || this.base === "..") throw new AspError("not_found", `${op}: ${t} does not exist`, { path: t });
      this.place = path.dirname(t);
      try {
        fs.mkdirSync(fsName(this.place), { recursive: true });
      } catch (e) {
        throw fromErrno(op, e, this.place);
      }
      const prefix = `.${this.base}.asp-tree-`;
      removeDead(this.place, prefix);
      // Made as mkdir makes a directory (under the umask), its mode kept for a stream that
      // names no root, then private while it fills.
      this.tmp = makeTemp(this.place, prefix, 0o777);
      try {
        this.rootMode = fs.statSync(fsName(this.tmpPath)).mode & 0o777;
        fs.chmodSync(fsName(this.tmpPath), 0o700);
      } catch (e) {
        fs.rmSync(fsName(this.tmpPath), { recursive: true, force: true });
        throw fromErrno(op, e, this.tmpPath);
      }
    }
  }

  private get tmpPath(): string {
    return path.join(this.place, this.tmp as string);
  }

  private member(m: Member): void {
    if (!m.path) {
      this.dirs.push(["", m.mode, m.mtime]);
      return;
    }
    const full = path.join(this.tmpPath, m.path);
    const parent = path.dirname(m.path);
    if (parent !== ".") {
      let at = this.tmpPath;
      for (const c of parent.split("/")) {
        at = path.join(at, c);
        const k = lkind(at);
        if (k === "none") fs.mkdirSync(fsName(at), 0o755);
        else if (k === "other") throw new AspError("invalid_argument", `${this.op}: member '${m.path}': '${c}' is not a directory: cannot write below it`, { path: m.path });
      }
    }
    const k = lkind(full);
    if (m.type === "dir") {
      if (k === "other") throw new AspError("invalid_argument", `${this.op}: member '${m.path}': a directory where an earlier member made a file or symlink`, { path: m.path });
      if (k === "none") fs.mkdirSync(fsName(full), 0o700);
      this.dirs.push([m.path, m.mode, m.mtime]);
      return;
    }
    if (k === "dir") throw new AspError("invalid_argument", `${this.op}: member '${m.path}': a ${m.type} where an earlier member made a directory`, { path: m.path });
    if (k === "other") fs.unlinkSync(fsName(full));
    if (m.type === "symlink") {
      fs.symlinkSync(fsName(m.link as string), fsName(full));
      try {
        fs.lutimesSync(fsName(full), when(m.mtime), when(m.mtime));
      } catch {
        /* where links have no times */
      }
      return;
    }
    const fd = fs.openSync(fsName(full), fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW, 0o600);
    this.file = { fd, m };
  }

  private data(d: Uint8Array): void {
    let o = 0;
    while (o < d.length) o += fs.writeSync((this.file as { fd: number }).fd, d, o, d.length - o);
  }

  private fileEnd(): void {
    const { fd, m } = this.file as { fd: number; m: Member };
    this.file = null;
    try {
      fs.fchmodSync(fd, m.mode & 0o1777); // setuid and setgid are not kept
      fs.futimesSync(fd, when(m.mtime), when(m.mtime));
    } finally {
      fs.closeSync(fd);
    }
  }

  feed(data: Uint8Array): void {
    try {
      this.reader.feed(data);
    } catch (e) {
      if (e instanceof AspError && e.message.startsWith("tar stream:")) throw new AspError(e.code, `${this.op}: ${e.message}`, { path: e.path });
      throw fromErrno(this.op, e, this.target);
    }
  }

  private merge(src: string, dst: string, rel: string, skip: string | null, check: boolean): void {
    for (const nm of namesOf(src).sort(byBytes)) {
      if (skip && nm === skip) continue;
      const s = path.join(src, nm);
      const d = path.join(dst, nm);
      const r = rel + nm;
      const sk = lkind(s);
      const dk = lkind(d);
      if (sk === "dir" && dk === "dir") {
        this.merge(s, d, r + "/", null, check);
        if (!check) fs.rmdirSync(fsName(s));
      } else if (sk === "dir" && dk === "other")
        throw new AspError("not_a_directory", `${this.op}: member '${r}' is a directory but ${this.target}/${r} is a file or symlink; remove it first`, { path: r });
      else if (sk !== "dir" && dk === "dir")
        throw new AspError("is_a_directory", `${this.op}: member '${r}' is a file or symlink but ${this.target}/${r} is a directory; remove it first`, { path: r });
      else if (!check) fs.renameSync(fsName(s), fsName(d));
    }
  }

  /** Checks the stream ended well and puts the tree in place: {entries, bytes}. */
  finish(): { entries: number; bytes: number } {
    try {
      this.reader.end();
    } catch (e) {
      throw new AspError((e as AspError).code, `${this.op}: ${(e as AspError).message}`, { path: (e as AspError).path });
    }
    try {
      let fresh = false;
      if (!this.exists && lkind(this.target) === "none") {
        fs.renameSync(fsName(this.tmpPath), fsName(this.target));
        fresh = true;
        this.tmp = null;
      } else {
        const skip = this.exists ? this.tmp : null;
        this.merge(this.tmpPath, this.target, "", skip, true);
        this.merge(this.tmpPath, this.target, "", skip, false);
        fs.rmSync(fsName(this.tmpPath), { recursive: true, force: true });
        this.tmp = null;
      }
      let rootSet = false;
      for (const [rel, mode, mtime] of [...this.dirs].reverse()) {
        const p = rel ? path.join(this.target, rel) : this.target;
        fs.chmodSync(fsName(p), mode & 0o1777);
        fs.utimesSync(fsName(p), when(mtime), when(mtime));
        rootSet ||= !rel;
      }
      if (fresh && !rootSet) fs.chmodSync(fsName(this.target), this.rootMode); // made 0700 as a temporary
    } catch (e) {
      throw fromErrno(this.op, e, this.target);
    }
    return { entries: this.reader.entries, bytes: this.reader.bytes };
  }

  close(): void {
    if (this.file) {
      fs.closeSync(this.file.fd);
      this.file = null;
    }
    if (this.tmp) {
      const p = this.tmpPath;
      this.tmp = null;
      try {
        fs.rmSync(fsName(p), { recursive: true, force: true });
      } catch {
        /* a read-only directory inside: made writable, then again */
        fixModes(p);
        fs.rmSync(fsName(p), { recursive: true, force: true });
      }
    }
  }
}

function fixModes(p: string): void {
  try {
    if (!fs.lstatSync(fsName(p)).isDirectory()) return;
    fs.chmodSync(fsName(p), 0o700);
    for (const n of namesOf(p)) fixModes(path.join(p, n));
  } catch {
    /* gone meanwhile */
  }
}
