/**
 * The wire format (docs/design.md, "Wire format"), as core/src/wire.c does it: msgpack
 * arrays — request [0, id, method, params], response [1, id, error, result], notification
 * [2, method, params] — in 4-byte big-endian length-prefixed frames on stdio. Every
 * incoming message is prescanned before msgpack allocates: a container claiming more
 * elements than bytes remain, or nesting deeper than 32, is a protocol_error.
 */
import { decode as mpDecode, encode as mpEncode } from "@msgpack/msgpack";

import { AspError } from "./errors.js";

export const MAX_DEPTH = 32;
export const REQUEST = 0;
export const RESPONSE = 1;
export const NOTIFY = 2;

type Spec = [hdr: number, skip: number, container: boolean];
const FIXED = new Map<number, Spec>([
  [0xc4, [1, 0, false]], [0xd9, [1, 0, false]],
  [0xc5, [2, 0, false]], [0xda, [2, 0, false]],
  [0xc6, [4, 0, false]], [0xdb, [4, 0, false]],
  [0xc7, [1, 1, false]], [0xc8, [2, 1, false]], [0xc9, [4, 1, false]],
  [0xca, [0, 4, false]], [0xcb, [0, 8, false]],
  [0xcc, [0, 1, false]], [0xd0, [0, 1, false]],
  [0xcd, [0, 2, false]], [0xd1, [0, 2, false]],
  [0xce, [0, 4, false]], [0xd2, [0, 4, false]],
  [0xcf, [0, 8, false]], [0xd3, [0, 8, false]],
  [0xd4, [0, 2, false]], [0xd5, [0, 3, false]], [0xd6, [0, 5, false]],
  [0xd7, [0, 9, false]], [0xd8, [0, 17, false]],
  [0xdc, [2, 0, true]], [0xde, [2, 0, true]],
  [0xdd, [4, 0, true]], [0xdf, [4, 0, true]],
]);

function malformed(why: string, at: number): AspError {
  return new AspError("protocol_error", `malformed message: ${why} at byte ${at}`);
}

/** Walks one message without allocating; throws protocol_error when it is unsafe. */
export function prescan(data: Uint8Array): void {
  const n = data.length;
  const pending: number[] = [1];
  let pos = 0;
  while (pending.length) {
    if (pending[pending.length - 1] === 0) {
      pending.pop();
      continue;
    }
    pending[pending.length - 1]--;
    if (pos >= n) throw malformed("truncated", pos);
    const t = data[pos++];
    let skip = 0,
      count = 0,
      container = false;
    if (t <= 0x7f || t >= 0xe0 || t === 0xc0 || t === 0xc2 || t === 0xc3) {
      // fixint, nil, bool
    } else if (t >= 0x80 && t <= 0x8f) {
      count = (t & 0x0f) * 2;
      container = true;
    } else if (t >= 0x90 && t <= 0x9f) {
      count = t & 0x0f;
      container = true;
    } else if (t >= 0xa0 && t <= 0xbf) {
      skip = t & 0x1f;
    } else {
      const spec = FIXED.get(t);
      if (!spec) throw malformed("invalid type byte", pos - 1);
      const [hdr, fixed, isContainer] = spec;
      skip = fixed;
      container = isContainer;
      if (hdr) {
        if (n - pos < hdr) throw malformed("truncated", pos);
        let v = 0;
        for (let i = 0; i < hdr; i++) v = v * 256 + data[pos + i];
        pos += hdr;
        if (container) count = t === 0xde || t === 0xdf ? v * 2 : v;
        else skip += v;
      }
    }
    if (container) {
      if (pending.length > MAX_DEPTH)
        throw new AspError("protocol_error", `malformed message: nested deeper than ${MAX_DEPTH}`);
      if (count > n - pos)
        throw new AspError(
          "protocol_error",
          `malformed message: a container at byte ${pos} claims ${count} elements but only ${n - pos} bytes remain`,
        );
      if (count > 0) pending.push(count);
      continue;
    }
    if (skip > n - pos) throw malformed("truncated", pos);
    pos += skip;
  }
  if (pos !== n) throw malformed("trailing bytes", pos);
}

export type WireMap = Record<string, unknown>;

export interface Message {
  type: number;
  id?: number;
  method?: string;
  params?: WireMap | null;
  error?: WireMap | null;
  result?: WireMap | null;
}

const isUint = (v: unknown): v is number => typeof v === "number" && Number.isInteger(v) && v >= 0;
const isU32 = (v: unknown): v is number => isUint(v) && v <= 0xffffffff;
export const isMap = (v: unknown): v is WireMap =>
  typeof v === "object" && v !== null && !Array.isArray(v) && !(v instanceof Uint8Array);

/*
 * Paths are str holding raw bytes, not always UTF-8 (docs/design.md, "Wire format"). As
 * Python's surrogateescape does, a byte that is not part of valid UTF-8 is the lone
 * surrogate U+DC80..U+DCFF in a JavaScript string, both ways, so every name round-trips.
 */
const strict = new TextDecoder("utf-8", { fatal: true });
const utf8 = new TextEncoder();

/** str bytes -> string; invalid UTF-8 bytes become U+DC80..U+DCFF. */
export function strFromBytes(b: Uint8Array): string {
  try {
    return strict.decode(b);
  } catch {
    // fall through to the byte-by-byte path
  }
  let out = "";
  for (let i = 0; i < b.length; ) {
    const c = b[i];
    const n = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    let ok = n > 0 && i + n <= b.length;
    for (let k = 1; ok && k < n; k++) ok = (b[i + k] & 0xc0) === 0x80;
    if (ok && n > 1) {
      try {
        out += strict.decode(b.subarray(i, i + n));
      } catch {
        ok = false; // overlong, surrogate or out of range
      }
    } else if (ok) {
      out += String.fromCharCode(c);
    }
    if (ok) i += n;
    else out += String.fromCharCode(0xdc00 + b[i++]);
  }
  return out;
}

/** Whether a string holds escaped raw bytes that UTF-8 cannot carry. */
function hasRawBytes(s: string): boolean {
  return /[\udc80-\udcff]/u.test(s);
}

/** string -> str bytes, U+DC80..U+DCFF back to the raw byte. */
export function bytesFromStr(s: string): Uint8Array {
  if (!hasRawBytes(s)) return utf8.encode(s);
  const out: number[] = [];
  let run = "";
  const flush = () => {
    if (run) for (const x of utf8.encode(run)) out.push(x);
    run = "";
  };
  for (const ch of s) {
    const cp = ch.codePointAt(0) as number;
    if (cp >= 0xdc80 && cp <= 0xdcff) {
      flush();
      out.push(cp - 0xdc00);
    } else run += ch;
  }
  flush();
  return new Uint8Array(out);
}

/** msgpack -> JavaScript, after the prescan. str values stay bytes (Uint8Array): the
 * field tables say which are text (see strFromBytes); map keys are strings. */
export function unpack(data: Uint8Array): unknown {
  prescan(data);
  try {
    // uint64 and int64 as bigint: as numbers they would lose digits above 2^53 (codec.ts
    // turns the exact ones back into numbers).
    return mpDecode(data, { rawStrings: true, useBigInt64: true });
  } catch {
    throw new AspError("protocol_error", "malformed message: msgpack could not decode it");
  }
}

const text = (v: unknown): unknown => (v instanceof Uint8Array ? strFromBytes(v) : v);

/** A 64-bit encoding of a small integer (legal msgpack) as the number it is. */
const small = (v: unknown): unknown =>
  typeof v === "bigint" && v >= -MAX_SAFE && v <= MAX_SAFE ? Number(v) : v;
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/** One message body -> Message. protocol_error when it is not an ASP message; a request
 * with a good id but a bad method or params throws invalid_argument. */
export function decodeMessage(data: Uint8Array): Message {
  const o = unpack(data);
  if (Array.isArray(o)) {
    o[0] = small(o[0]);
    if (o.length === 4) o[1] = small(o[1]);
  }
  if (!Array.isArray(o) || o.length < 3 || !isUint(o[0]))
    throw new AspError("protocol_error", "not an ASP message: expected [type, ...] array");
  const t = o[0];
  if (t === REQUEST || t === NOTIFY) o[t === REQUEST ? 2 : 1] = text(o[t === REQUEST ? 2 : 1]);
  if (t === REQUEST) {
    if (o.length !== 4 || !isU32(o[1]))
      throw new AspError("protocol_error", "malformed request: expected [0, uint32 id, method, params]");
    if (typeof o[2] !== "string") throw new AspError("invalid_argument", `request ${o[1]}: method must be a str`);
    if (!isMap(o[3]) && o[3] !== null)
      throw new AspError("invalid_argument", `request ${o[1]}: params must be a map`);
    return { type: REQUEST, id: o[1], method: o[2], params: o[3] as WireMap | null };
  }
  if (t === RESPONSE) {
    if (o.length !== 4 || !isU32(o[1]))
      throw new AspError("protocol_error", "malformed response: expected [1, uint32 id, error, result]");
    const [, id, err, res] = o;
    if (!isMap(err) && err !== null)
      throw new AspError("protocol_error", `malformed response ${id}: error must be nil or a map`);
    if (!isMap(res) && (res !== null || err === null))
      throw new AspError("protocol_error", `malformed response ${id}: result must be a map`);
    return { type: RESPONSE, id: id as number, error: err as WireMap | null, result: res as WireMap | null };
  }
  if (t === NOTIFY) {
    if (o.length !== 3 || typeof o[1] !== "string" || !isMap(o[2]))
      throw new AspError("protocol_error", "malformed notification: expected [2, method, params]");
    return { type: NOTIFY, method: o[1], params: o[2] };
  }
  throw new AspError("protocol_error", `not an ASP message: unknown type ${t}`);
}

/** A response's error map -> AspError, as asp_wire_error_decode reads it. */
export function errorFromMap(e: WireMap, knownCodes: readonly string[]): AspError {
  let code = text(e.code);
  if (typeof code !== "string" || !knownCodes.includes(code)) code = "internal";
  const m = text(e.message), p = text(e.path);
  let msg = typeof m === "string" ? m.replace(/\0/g, "?") : "";
  const path = typeof p === "string" ? p.replace(/\0/g, "?") : undefined;
  const en = small(e.errno);
  const errno = typeof en === "number" && Number.isInteger(en) ? en : undefined;
  if (!msg) msg = `${code} (the responder gave no message)`;
  return new AspError(code as string, msg, { errno, path });
}

const ENCODE = { useBigInt64: true, ignoreUndefined: true } as const;

function strHeader(n: number): number[] {
  if (n < 32) return [0xa0 | n];
  if (n < 0x100) return [0xd9, n];
  if (n < 0x10000) return [0xda, n >> 8, n & 0xff];
  return [0xdb, (n >>> 24) & 0xff, (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff];
}

function containerHeader(n: number, fix: number, h16: number, h32: number): number[] {
  if (n < 16) return [fix | n];
  if (n < 0x10000) return [h16, n >> 8, n & 0xff];
  return [h32, (n >>> 24) & 0xff, (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff];
}

function anyRawBytes(v: unknown): boolean {
  if (typeof v === "string") return hasRawBytes(v);
  if (Array.isArray(v)) return v.some(anyRawBytes);
  if (isMap(v)) return Object.entries(v).some(([k, x]) => hasRawBytes(k) || anyRawBytes(x));
  return false;
}

/* msgpack encodes JavaScript strings as UTF-8, which has no room for raw bytes: a value
 * holding some is composed here, its containers' headers and raw strings written
 * directly and every other value encoded by msgpack. */
function compose(v: unknown, out: Uint8Array[]): void {
  if (typeof v === "string" && hasRawBytes(v)) {
    const b = bytesFromStr(v);
    out.push(new Uint8Array(strHeader(b.length)), b);
  } else if (Array.isArray(v) && anyRawBytes(v)) {
    out.push(new Uint8Array(containerHeader(v.length, 0x90, 0xdc, 0xdd)));
    for (const x of v) compose(x, out);
  } else if (isMap(v) && anyRawBytes(v)) {
    const entries = Object.entries(v).filter(([, x]) => x !== undefined);
    out.push(new Uint8Array(containerHeader(entries.length, 0x80, 0xde, 0xdf)));
    for (const [k, x] of entries) {
      compose(k, out);
      compose(x, out);
    }
  } else {
    out.push(mpEncode(v, ENCODE));
  }
}

/** A request message body. */
export function request(id: number, method: string, params: WireMap): Uint8Array {
  const msg = [REQUEST, id, method, params];
  if (!anyRawBytes(params)) return mpEncode(msg, ENCODE);
  const parts: Uint8Array[] = [];
  compose(msg, parts);
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.length;
  }
  return out;
}

/** A whole stdio frame: 4-byte big-endian length, then the body. */
export function frame(body: Uint8Array): Uint8Array {
  const out = new Uint8Array(body.length + 4);
  new DataView(out.buffer).setUint32(0, body.length);
  out.set(body, 4);
  return out;
}
