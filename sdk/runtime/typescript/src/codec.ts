/**
 * Interprets the generated field tables (spec.ts): params objects to wire maps, wire maps
 * to result objects. The same rules as core/src/codec.c: senders omit fields equal to
 * their default and absent optional ones; receivers ignore unknown keys, apply defaults
 * for missing optional ones, and name the field that is wrong.
 */
import { AspError } from "./errors.js";
import { type WireMap, isMap, strFromBytes } from "./wire.js";

export type FieldType = "str" | "bin" | "uint" | "int" | "bool" | "strv" | "strmap" | "records" | "record";

export interface FieldDesc {
  name: string;
  type: FieldType;
  optional?: boolean;
  nullable?: boolean;
  /** Present when the spec gives a default. */
  default?: number | boolean | string;
  role?: "path" | "env" | "timeout";
  record?: RecordDesc;
}

export interface RecordDesc {
  /** Names the record in messages: "exec params", "list_entry". */
  label: string;
  fields: FieldDesc[];
  oneOf?: [string, string];
}

export interface OpDesc {
  name: string;
  since: number;
  streaming: boolean;
  params: RecordDesc;
  result: RecordDesc;
}

const UINT64_MAX = (1n << 64n) - 1n;
const UINT32_MAX = 0xffffffff;
const INT32_MIN = -0x80000000;
const INT64_MIN = -(1n << 63n);
const INT64_MAX = (1n << 63n) - 1n;
const enc = new TextEncoder();

const EXPECTED: Record<FieldType, string> = {
  str: "str",
  bin: "bin",
  uint: "uint",
  int: "int",
  bool: "bool",
  strv: "array of str",
  strmap: "map of str to str",
  records: "array of maps",
  record: "map",
};

const mayBeAbsent = (f: FieldDesc) => !!(f.optional || f.nullable || f.default !== undefined);

/** What a value is, in msgpack's words, as codec.c says it. */
export function typeName(v: unknown): string {
  if (v === null || v === undefined) return "nil";
  if (typeof v === "boolean") return "bool";
  if (typeof v === "bigint") return v >= 0n ? "uint" : "negative int";
  if (typeof v === "number") return Number.isInteger(v) ? (v >= 0 ? "uint" : "negative int") : "float";
  if (typeof v === "string") return "str";
  if (v instanceof Uint8Array || v instanceof ArrayBuffer) return "bin";
  if (Array.isArray(v)) return "array";
  if (typeof v === "object") return "map";
  return typeof v;
}

class Bad extends Error {}

function bad(rec: RecordDesc, f: FieldDesc, sub: string, v: unknown): Bad {
  return new Bad(`${rec.label}: field '${f.name}'${sub}: expected ${sub ? "str" : EXPECTED[f.type]}, got ${typeName(v)}`);
}

function isInteger(v: unknown): v is number | bigint {
  return typeof v === "bigint" || (typeof v === "number" && Number.isInteger(v));
}

/** A str argument: a string, or the raw bytes of a path as a Uint8Array. */
const toStr = (v: unknown): string | null =>
  typeof v === "string" ? v : v instanceof Uint8Array ? strFromBytes(v) : null;

function encodeValue(rec: RecordDesc, f: FieldDesc, v: unknown): unknown {
  switch (f.type) {
    case "str": {
      const s = toStr(v);
      if (s === null) throw bad(rec, f, "", v);
      return s;
    }
    case "bin":
      if (v instanceof Uint8Array) return v;
      if (v instanceof ArrayBuffer) return new Uint8Array(v);
      if (typeof v === "string") return enc.encode(v);
      throw bad(rec, f, "", v);
    case "uint":
    case "int": {
      if (!isInteger(v)) throw bad(rec, f, "", v);
      const b = BigInt(v);
      if (f.type === "uint" && b < 0n) throw bad(rec, f, "", v);
      if (f.type === "uint" && b > UINT64_MAX) throw new Bad(`${rec.label}: field '${f.name}': value out of uint64 range`);
      if (f.type === "int" && (b < INT64_MIN || b > INT64_MAX))
        throw new Bad(`${rec.label}: field '${f.name}': value out of int64 range`);
      // msgpack's encoder writes a number outside 32 bits as a float64 (with BigInt
      // support on): a bigint is written as the uint64/int64 the responder reads.
      return typeof v === "number" && v >= INT32_MIN && v <= UINT32_MAX ? v : b;
    }
    case "bool":
      if (typeof v !== "boolean") throw bad(rec, f, "", v);
      return v;
    case "strv":
      if (!Array.isArray(v)) throw bad(rec, f, "", v);
      return v.map((item) => {
        const s = toStr(item);
        if (s === null) throw bad(rec, f, " item", item);
        return s;
      });
    case "strmap": {
      if (!isMap(v)) throw bad(rec, f, "", v);
      const out: Record<string, string> = {};
      for (const [k, item] of Object.entries(v)) {
        const s = toStr(item);
        if (s === null) throw bad(rec, f, " value", item);
        out[k] = s;
      }
      return out;
    }
    case "records":
      if (!Array.isArray(v)) throw bad(rec, f, "", v);
      return v.map((item) => encodeRecord(f.record as RecordDesc, item));
    case "record":
      if (!isMap(v)) throw bad(rec, f, "", v);
      return encodeRecord(f.record as RecordDesc, v);
  }
}

function isDefault(f: FieldDesc, v: unknown): boolean {
  if (f.default === undefined) return false;
  if (f.type === "bin") return (v as Uint8Array).length === 0;
  if (f.type === "uint" || f.type === "int") return BigInt(v as number | bigint) === BigInt(f.default as number);
  return v === f.default;
}

export function encodeRecord(rec: RecordDesc, obj: unknown): WireMap {
  if (!isMap(obj)) throw new Bad(`${rec.label}: expected an object of fields, got ${typeName(obj)}`);
  const known = new Set(rec.fields.map((f) => f.name));
  for (const k of Object.keys(obj))
    if (!known.has(k) && obj[k] !== undefined)
      throw new Bad(`${rec.label}: unknown field '${k}' (expected one of: ${[...known].join(", ")})`);
  const out: WireMap = {};
  for (const f of rec.fields) {
    const v = obj[f.name];
    if (v === undefined || v === null) {
      if (mayBeAbsent(f)) continue;
      throw new Bad(`${rec.label}: missing field '${f.name}'`);
    }
    const w = encodeValue(rec, f, v);
    if (isDefault(f, w)) continue;
    out[f.name] = w;
  }
  if (rec.oneOf) {
    const [a, b] = rec.oneOf;
    if ((a in out) === (b in out)) throw new Bad(`${rec.label}: give exactly one of fields '${a}' and '${b}'`);
  }
  return out;
}

/** Params -> wire map; a wrong argument is invalid_argument naming the field. */
export function encodeParams(rec: RecordDesc, obj: unknown): WireMap {
  try {
    return encodeRecord(rec, obj ?? {});
  } catch (e) {
    if (e instanceof Bad) throw new AspError("invalid_argument", e.message);
    throw e;
  }
}

/** A received integer: a number while it is exact (|v| <= 2^53 - 1), else a bigint
 * (uint64 and int64 arrive as bigint from wire.ts unpack). */
function exactInteger(v: number | bigint): number | bigint {
  if (typeof v === "number") return v;
  return v >= -MAX_SAFE && v <= MAX_SAFE ? Number(v) : v;
}
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/* Received str values arrive as bytes (wire.ts unpack): the table says they are text. */
const text = (v: unknown): unknown => (v instanceof Uint8Array ? strFromBytes(v) : v);

function decodeValue(rec: RecordDesc, f: FieldDesc, v: unknown): unknown {
  switch (f.type) {
    case "str":
      v = text(v);
      if (typeof v !== "string") throw bad(rec, f, "", v);
      return v;
    case "bin":
      if (!(v instanceof Uint8Array)) throw bad(rec, f, "", v);
      return v;
    case "uint":
      if (!isInteger(v) || v < 0) throw bad(rec, f, "", v);
      return exactInteger(v);
    case "int":
      if (!isInteger(v)) throw bad(rec, f, "", v);
      return exactInteger(v);
    case "bool":
      if (typeof v !== "boolean") throw bad(rec, f, "", v);
      return v;
    case "strv":
      if (!Array.isArray(v)) throw bad(rec, f, "", v);
      return v.map((item) => {
        const s = text(item);
        if (typeof s !== "string") throw bad(rec, f, " item", s);
        return s;
      });
    case "strmap": {
      if (!isMap(v)) throw bad(rec, f, "", v);
      const out: Record<string, string> = {};
      for (const [k, item] of Object.entries(v)) {
        const s = text(item);
        if (typeof s !== "string") throw bad(rec, f, " value", s);
        out[k] = s;
      }
      return out;
    }
    case "records":
      if (!Array.isArray(v)) throw bad(rec, f, "", v);
      return v.map((item) => decodeRecordOrThrow(f.record as RecordDesc, item));
    case "record":
      return decodeRecordOrThrow(f.record as RecordDesc, v);
  }
}

function decodeRecordOrThrow(rec: RecordDesc, m: unknown): Record<string, unknown> {
  if (!isMap(m)) throw new Bad(`${rec.label}: expected a map, got ${typeName(m)}`);
  const out: Record<string, unknown> = {};
  for (const f of rec.fields) {
    const has = Object.prototype.hasOwnProperty.call(m, f.name);
    const v = has ? m[f.name] : undefined;
    if (v === undefined || (v === null && mayBeAbsent(f))) {
      if (!has && !mayBeAbsent(f)) throw new Bad(`${rec.label}: missing field '${f.name}'`);
      if (f.default !== undefined) out[f.name] = f.type === "bin" ? new Uint8Array(0) : f.default;
      else if (f.nullable) out[f.name] = null;
      continue;
    }
    out[f.name] = decodeValue(rec, f, v);
  }
  return out;
}

/** A wire map -> the record as a plain object. A map we cannot read is the sender's
 * protocol error (as asp_wire_result_decode says). */
export function decodeRecord(rec: RecordDesc, m: unknown): Record<string, unknown> {
  try {
    return decodeRecordOrThrow(rec, m);
  } catch (e) {
    if (e instanceof Bad) throw new AspError("protocol_error", e.message);
    throw e;
  }
}
