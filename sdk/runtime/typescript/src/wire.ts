/**
 * The wire format of DESIGN §2, as core/src/wire.c does it: msgpack arrays — request
 * [0, id, method, params], response [1, id, error, result], notification [2, method,
 * params] — in 4-byte big-endian length-prefixed frames on stdio. Every incoming message
 * is prescanned before msgpack allocates: a container claiming more elements than bytes
 * remain, or nesting deeper than 32, is a protocol_error.
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

/** msgpack -> JavaScript, after the prescan. */
export function unpack(data: Uint8Array): unknown {
  prescan(data);
  try {
    return mpDecode(data);
  } catch {
    throw new AspError("protocol_error", "malformed message: msgpack could not decode it");
  }
}

/** One message body -> Message. protocol_error when it is not an ASP message; a request
 * with a good id but a bad method or params throws invalid_argument. */
export function decodeMessage(data: Uint8Array): Message {
  const o = unpack(data);
  if (!Array.isArray(o) || o.length < 3 || !isUint(o[0]))
    throw new AspError("protocol_error", "not an ASP message: expected [type, ...] array");
  const t = o[0];
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
  let code = e.code;
  if (typeof code !== "string" || !knownCodes.includes(code)) code = "internal";
  let msg = typeof e.message === "string" ? e.message.replace(/\0/g, "?") : "";
  const path = typeof e.path === "string" ? e.path.replace(/\0/g, "?") : undefined;
  const errno = typeof e.errno === "number" && Number.isInteger(e.errno) ? e.errno : undefined;
  if (!msg) msg = `${code} (the responder gave no message)`;
  return new AspError(code as string, msg, { errno, path });
}

/** A request message body. */
export function request(id: number, method: string, params: WireMap): Uint8Array {
  return mpEncode([REQUEST, id, method, params], { useBigInt64: true, ignoreUndefined: true });
}

/** A whole stdio frame: 4-byte big-endian length, then the body. */
export function frame(body: Uint8Array): Uint8Array {
  const out = new Uint8Array(body.length + 4);
  new DataView(out.buffer).setUint32(0, body.length);
  out.set(body, 4);
  return out;
}
