/**
 * .asp.json validation: walks the tables asp-sdkgen made from spec/asp.schema.json and
 * spec/asp.v0.schema.json (configTables.ts), as core/src/config_schema.c walks the C ones,
 * and finds where a key or value sits in the text, as core/src/config_locate.c does. Every
 * text a message quotes from the schema ("expected ...", the known keys, the condition of
 * an "if") is in the tables; so the words are the C core's, "FILE:LINE:COL: KEY.PATH: what
 * was expected, got what", whichever language reads the file.
 */
import { AspError } from "./errors.js";
import { type JsonObject, type JsonValue, dumpReal, dumpString } from "./json.js";

const MESSAGE_MAX = 1024;
const SHOW_MAX = 48;
const MAX_STEPS = 8;

const enc = new TextEncoder();
const dec = new TextDecoder("utf-8", { fatal: false });
const byteLength = (s: string) => enc.encode(s).length;

/** JSON types, as bits of SchemaNode.types (sdkgen/emit_config.c). */
const NULL = 1,
  BOOLEAN = 2,
  INTEGER = 4,
  STRING = 8,
  ARRAY = 16,
  OBJECT = 32;

/** One schema node; indexes are into the same table, node 0 the whole file. */
export interface SchemaNode {
  types?: number; // JSON type bits; absent: any type
  never?: boolean; // the schema `false`
  values?: (string | number | boolean | null)[]; // const or enum
  min?: number;
  max?: number;
  min_len?: number;
  min_items?: number;
  pattern?: string;
  default?: string | number | boolean | null;
  props?: [string, number][];
  closed?: boolean; // additionalProperties: false
  more?: number; // additionalProperties
  names?: number; // propertyNames
  items?: number;
  if?: number;
  then?: number;
  not?: number; // value assertions the value must fail
  required?: string[];
  prefix?: number[]; // prefixItems
  all?: number[]; // allOf
  expected: string; // everything the node accepts, in words
  keys?: string; // closed: the known keys
  cond?: string; // with if: the "if" in words
}

export interface SchemaTable {
  name: string;
  nodes: SchemaNode[];
}

/** As asp_error_set: a message longer than the C buffer ends in "...". */
export function cut(msg: string): string {
  const b = enc.encode(msg);
  if (b.length < MESSAGE_MAX) return msg;
  return dec.decode(b.subarray(0, MESSAGE_MAX - 4)).replace(/\uFFFD$/, "") + "...";
}

export class SBuf {
  private b: number[] = [];
  constructor(private readonly cap: number) {}
  add(s: string): void {
    if (this.b.length + 1 >= this.cap) return;
    const e = enc.encode(s);
    const room = this.cap - 1 - this.b.length;
    for (let i = 0; i < e.length && i < room; i++) this.b.push(e[i]);
  }
  get length(): number {
    return this.b.length;
  }
  text(): string {
    return dec.decode(new Uint8Array(this.b));
  }
}

const isInt = (v: unknown): v is bigint => typeof v === "bigint";
const isObj = (v: unknown): v is JsonObject => v instanceof Map;

// ---- text for messages -------------------------------------------------------------------

function showString(b: SBuf, s: string): void {
  const d = enc.encode(dumpString(s));
  if (d.length > SHOW_MAX) {
    let n = SHOW_MAX;
    while (n > 1 && (d[n] & 0xc0) === 0x80) n--;
    b.add(dec.decode(d.subarray(0, n)) + '..."');
  } else {
    b.add(dec.decode(d));
  }
}

function showValue(b: SBuf, v: JsonValue): void {
  if (typeof v === "string") showString(b, v);
  else if (v === true) b.add("true");
  else if (v === false) b.add("false");
  else if (isInt(v)) b.add(v.toString());
  else if (typeof v === "number") b.add(dumpReal(v));
  else if (v === null) b.add("null");
  else if (isObj(v)) b.add("an object");
  else b.add(v.length ? "an array" : "[]");
}

const regexCache = new Map<string, RegExp>();
/** A POSIX extended regex as a JavaScript one ('.' matches any character). */
function regex(pattern: string): RegExp {
  let r = regexCache.get(pattern);
  if (!r) {
    r = new RegExp(pattern, "su");
    regexCache.set(pattern, r);
  }
  return r;
}

// ---- where a key or value sits in the text (config_locate.c) -----------------------------

const isWs = (c: number) => c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d;

function skipWs(t: Uint8Array, p: number): number {
  while (p < t.length && isWs(t[p])) p++;
  return p;
}

function skipString(t: Uint8Array, p: number): number {
  for (p++; p < t.length; p++) {
    if (t[p] === 0x5c) p++;
    else if (t[p] === 0x22) return p + 1;
  }
  return t.length;
}

function skipValue(t: Uint8Array, p: number): number {
  const n = t.length;
  if (p >= n) return n;
  if (t[p] === 0x22) return skipString(t, p);
  if (t[p] === 0x7b || t[p] === 0x5b) {
    let depth = 0;
    while (p < n) {
      const c = t[p];
      if (c === 0x22) {
        p = skipString(t, p);
        continue;
      }
      if (c === 0x7b || c === 0x5b) depth++;
      else if ((c === 0x7d || c === 0x5d) && --depth === 0) return p + 1;
      p++;
    }
    return n;
  }
  while (p < n && ![0x2c, 0x5d, 0x7d, 0x20, 0x09, 0x0a, 0x0d].includes(t[p])) p++;
  return p;
}

const isHex = (c: number) => (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66);

function hex4(t: Uint8Array, p: number): number | null {
  if (p > t.length || t.length - p < 4) return null;
  for (let i = 0; i < 4; i++) if (!isHex(t[p + i])) return null;
  return parseInt(String.fromCharCode(t[p], t[p + 1], t[p + 2], t[p + 3]), 16);
}

function utf8Encode(cp: number): number[] {
  if (cp < 0x80) return [cp];
  if (cp < 0x800) return [0xc0 | (cp >> 6), 0x80 | (cp & 0x3f)];
  if (cp < 0x10000) return [0xe0 | (cp >> 12), 0x80 | ((cp >> 6) & 0x3f), 0x80 | (cp & 0x3f)];
  return [0xf0 | (cp >> 18), 0x80 | ((cp >> 12) & 0x3f), 0x80 | ((cp >> 6) & 0x3f), 0x80 | (cp & 0x3f)];
}

function stringEquals(t: Uint8Array, p: number, key: Uint8Array): boolean {
  const n = t.length;
  let k = 0;
  for (p++; p < n && t[p] !== 0x22; ) {
    let b: number[];
    if (t[p] !== 0x5c) {
      b = [t[p++]];
    } else if (p + 1 >= n) {
      return false;
    } else {
      const e = t[p + 1];
      p += 2;
      if (e === 0x75) {
        let cp = hex4(t, p);
        if (cp === null) return false;
        p += 4;
        const lo = p + 1 < n && t[p] === 0x5c && t[p + 1] === 0x75 ? hex4(t, p + 2) : null;
        if (cp >= 0xd800 && cp < 0xdc00 && lo !== null && lo >= 0xdc00 && lo < 0xe000) {
          cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          p += 6;
        }
        b = utf8Encode(cp);
      } else {
        const m: Record<number, number> = { 0x62: 8, 0x66: 12, 0x6e: 10, 0x72: 13, 0x74: 9 };
        b = [m[e] ?? e];
      }
    }
    if (b.length > key.length - k) return false;
    for (let i = 0; i < b.length; i++) if (key[k + i] !== b[i]) return false;
    k += b.length;
  }
  return k === key.length;
}

function findMember(t: Uint8Array, p: number, key: Uint8Array): [number, number] | null {
  const n = t.length;
  for (p++; ; ) {
    p = skipWs(t, p);
    if (p >= n || t[p] !== 0x22) return null;
    const k = p;
    const match = stringEquals(t, p, key);
    p = skipWs(t, skipString(t, p));
    if (p >= n || t[p] !== 0x3a) return null;
    p = skipWs(t, p + 1);
    if (match) return [p, k];
    p = skipWs(t, skipValue(t, p));
    if (p >= n || t[p] !== 0x2c) return null;
    p++;
  }
}

function findElement(t: Uint8Array, p: number, index: number): number | null {
  const n = t.length;
  for (let i = 0, q = p + 1; ; i++) {
    q = skipWs(t, q);
    if (q >= n || t[q] === 0x5d) return null;
    if (i === index) return q;
    q = skipWs(t, skipValue(t, q));
    if (q >= n || t[q] !== 0x2c) return null;
    q++;
  }
}

type Step = string | number;

/** [line, column] of the value at the key path, or of the key when atKey; the deepest
 * value found when the path is not all there. */
export function locate(text: Uint8Array, steps: Step[], atKey: boolean): [number, number] {
  let p = skipWs(text, 0);
  let keyAt = 0;
  let found = true;
  for (const step of steps) {
    let next: number | null = null;
    if (p < text.length && typeof step === "string" && text[p] === 0x7b) {
      const r = findMember(text, p, enc.encode(step));
      if (r) [next, keyAt] = r;
    } else if (p < text.length && typeof step === "number" && text[p] === 0x5b) {
      next = findElement(text, p, step);
    }
    if (next === null) {
      found = false;
      break;
    }
    p = next;
  }
  if (found && atKey && steps.length && typeof steps[steps.length - 1] === "string") p = keyAt;
  p = Math.min(p, text.length);
  let line = 1,
    col = 1;
  for (let q = 0; q < p; q++) {
    if (text[q] === 0x0a) {
      line++;
      col = 1;
    } else if ((text[q] & 0xc0) !== 0x80) col++;
  }
  return [line, col];
}

// ---- the validator -----------------------------------------------------------------------

class Invalid extends Error {}

function plainKey(k: string): boolean {
  if (!k || byteLength(k) > SHOW_MAX) return false;
  return /^[A-Za-z0-9_-]+$/.test(k);
}

/** A document being checked and the key path to the value at hand. */
export class Ctx {
  path: Step[] = [];
  cond = "";
  quiet = false;
  constructor(
    readonly text: Uint8Array,
    readonly file: string,
    readonly filePath: string | undefined,
  ) {}

  fail(where: "value" | "key" | "parent", what: string): Error {
    if (this.quiet) return new Invalid();
    let steps = this.path.slice(0, MAX_STEPS);
    const shown = steps;
    if (where === "parent" && steps.length) steps = steps.slice(0, -1);
    const [line, col] = locate(this.text, steps, where === "key");
    const pb = new SBuf(256);
    shown.forEach((k, i) => {
      if (typeof k === "number") pb.add(`[${k}]`);
      else if (plainKey(k)) pb.add((i ? "." : "") + k);
      else {
        pb.add("[");
        showString(pb, k);
        pb.add("]");
      }
    });
    const path = pb.text();
    const wb = new SBuf(MESSAGE_MAX);
    wb.add(what);
    const msg = cut(`${this.file}:${line}:${col}: ${path}${path ? ": " : ""}${wb.text()}`);
    return new AspError("invalid_argument", msg, this.filePath === undefined ? undefined : { path: this.filePath });
  }
}


/** The type bit of a parsed value; 0 for a real (22.0 is not a port). */
function typeOf(v: JsonValue | number): number {
  if (v === null) return NULL;
  if (typeof v === "boolean") return BOOLEAN;
  if (isInt(v)) return INTEGER;
  if (typeof v === "number") return 0;
  if (typeof v === "string") return STRING;
  return Array.isArray(v) ? ARRAY : OBJECT;
}

function equals(a: string | number | boolean | null, v: JsonValue): boolean {
  if (typeof a === "number") return isInt(v) && v === BigInt(a);
  return typeOf(a) === typeOf(v) && a === v;
}

/** The checks on the value itself, all described by the node's one "expected". */
export function valueOk(nodes: SchemaNode[], n: SchemaNode, v: JsonValue): boolean {
  if (n.types && !(n.types & typeOf(v))) return false;
  if (n.values && !n.values.some((x) => equals(x, v))) return false;
  if (isInt(v)) {
    if (n.min !== undefined && v < BigInt(n.min)) return false;
    if (n.max !== undefined && v > BigInt(n.max)) return false;
  }
  if (typeof v === "string") {
    if (n.min_len !== undefined && [...v].length < n.min_len) return false;
    if (n.pattern !== undefined && !regex(n.pattern).test(v)) return false;
  }
  if (Array.isArray(v) && n.min_items !== undefined && v.length < n.min_items) return false;
  return n.not === undefined || !valueOk(nodes, nodes[n.not], v);
}

function prop(n: SchemaNode, key: string): number | undefined {
  for (const [name, i] of n.props ?? []) if (name === key) return i;
  return undefined;
}

function check(v: Ctx, nodes: SchemaNode[], n: SchemaNode, inst: JsonValue): void {
  if (n.never) throw v.fail("value", v.cond ? `not allowed when ${v.cond}` : "not allowed here");
  if (!valueOk(nodes, n, inst)) {
    const got = new SBuf(128);
    showValue(got, inst);
    throw v.fail("value", `expected ${n.expected}, got ${got.text()}`);
  }
  if (isObj(inst)) checkObject(v, nodes, n, inst);
  else if (Array.isArray(inst)) checkArray(v, nodes, n, inst);
  for (const sub of n.all ?? []) check(v, nodes, nodes[sub], inst);
  if (n.if !== undefined && n.then !== undefined) {
    const quiet = v.quiet;
    v.quiet = true;
    let holds = true;
    try {
      check(v, nodes, nodes[n.if], inst);
    } catch (e) {
      if (!(e instanceof Invalid) && !(e instanceof AspError)) throw e;
      holds = false;
    }
    v.quiet = quiet;
    if (holds) {
      const saved = v.cond;
      v.cond = n.cond ?? "";
      try {
        check(v, nodes, nodes[n.then], inst);
      } finally {
        v.cond = saved;
      }
    }
  }
}

function checkObject(v: Ctx, nodes: SchemaNode[], n: SchemaNode, inst: JsonObject): void {
  // unknown keys first: a typo is the likeliest mistake, and the message lists the keys
  if (n.closed)
    for (const key of inst.keys()) {
      if (prop(n, key) === undefined) {
        v.path.push(key);
        const err = v.fail("key", `unknown key (expected one of: ${n.keys ?? ""})`);
        v.path.pop();
        throw err;
      }
    }
  const names = n.names !== undefined ? nodes[n.names] : undefined;
  for (const [key, val] of inst) {
    v.path.push(key);
    try {
      if (names && !valueOk(nodes, names, key)) throw v.fail("key", `invalid key: expected ${names.expected}`);
      const i = prop(n, key);
      if (i !== undefined) check(v, nodes, nodes[i], val);
      else if (n.more !== undefined) check(v, nodes, nodes[n.more], val);
    } finally {
      v.path.pop();
    }
  }
  for (const name of n.required ?? []) {
    if (!inst.has(name)) {
      v.path.push(name);
      const err = v.fail("parent", `required key missing${v.cond ? " when " : ""}${v.cond}`);
      v.path.pop();
      throw err;
    }
  }
}

function checkArray(v: Ctx, nodes: SchemaNode[], n: SchemaNode, inst: JsonValue[]): void {
  const prefix = n.prefix ?? [];
  inst.forEach((val, i) => {
    const sub = i < prefix.length ? prefix[i] : n.items;
    if (sub === undefined) return;
    v.path.push(i);
    try {
      check(v, nodes, nodes[sub], val);
    } finally {
      v.path.pop();
    }
  });
}

/** Checks doc against a table (V1 or V0 of configTables.ts); throws the AspError v.fail
 * makes on the first problem. */
export function validate(v: Ctx, table: SchemaTable, doc: JsonValue): void {
  check(v, table.nodes, table.nodes[0], doc);
}

/** The node at a dotted path of properties ("ssh.port"), or undefined. */
export function walk(table: SchemaTable, dotted: string): SchemaNode | undefined {
  let n: SchemaNode | undefined = table.nodes[0];
  for (const seg of dotted.split(".")) {
    const i: number | undefined = n ? prop(n, seg) : undefined;
    n = i === undefined ? undefined : table.nodes[i];
  }
  return n;
}
