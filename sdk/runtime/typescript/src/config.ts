/**
 * .asp.json: discovery, strict validation and the view the client reads (DESIGN §4).
 *
 * A port of core/src/config.c and config_locate.c: the same JSON Schema subset is
 * interpreted from the same schema (spec/asp.schema.json, embedded by asp-sdkgen), with
 * the same discovery rules and the same messages, "FILE:LINE:COL: KEY.PATH: what was
 * expected, got what", so a person sees one wording whichever language reads the file.
 */
import * as fs from "node:fs";
import * as os from "node:os";

import { AspError } from "./errors.js";
import { JsonError, type JsonObject, type JsonValue, dumpReal, dumpString, parse as parseJson } from "./json.js";

const CONFIG_MAX_BYTES = 1024 * 1024;
const SECRET_MAX_BYTES = 64 * 1024;
const MESSAGE_MAX = 1024;
const PATH_MAX = 4096;
const SHOW_MAX = 48;
const MAX_STEPS = 8;

const enc = new TextEncoder();
const dec = new TextDecoder("utf-8", { fatal: false });
const byteLength = (s: string) => enc.encode(s).length;

/** glibc's strerror text for the errors file access can give. */
const STRERROR: Record<string, [number, string]> = {
  EPERM: [1, "Operation not permitted"],
  ENOENT: [2, "No such file or directory"],
  EIO: [5, "Input/output error"],
  ENXIO: [6, "No such device or address"],
  EBADF: [9, "Bad file descriptor"],
  EAGAIN: [11, "Resource temporarily unavailable"],
  ENOMEM: [12, "Cannot allocate memory"],
  EACCES: [13, "Permission denied"],
  EBUSY: [16, "Device or resource busy"],
  EEXIST: [17, "File exists"],
  ENOTDIR: [20, "Not a directory"],
  EISDIR: [21, "Is a directory"],
  EINVAL: [22, "Invalid argument"],
  ENFILE: [23, "Too many open files in system"],
  EMFILE: [24, "Too many open files"],
  ETXTBSY: [26, "Text file busy"],
  EFBIG: [27, "File too large"],
  ENOSPC: [28, "No space left on device"],
  EROFS: [30, "Read-only file system"],
  ENAMETOOLONG: [36, "File name too long"],
  ENOTEMPTY: [39, "Directory not empty"],
  ELOOP: [40, "Too many levels of symbolic links"],
};
const ERRNO_CODES: Record<string, string> = {
  ENOENT: "not_found",
  EACCES: "permission_denied",
  EPERM: "permission_denied",
  EEXIST: "already_exists",
  ENOTDIR: "not_a_directory",
  EISDIR: "is_a_directory",
  ENOTEMPTY: "not_empty",
  EINVAL: "invalid_argument",
};

/** As asp_error_set: a message longer than the C buffer ends in "...". */
function cut(msg: string): string {
  const b = enc.encode(msg);
  if (b.length < MESSAGE_MAX) return msg;
  return dec.decode(b.subarray(0, MESSAGE_MAX - 4)).replace(/\uFFFD$/, "") + "...";
}

function error(code: string, msg: string, path?: string): AspError {
  return new AspError(code, cut(msg), path === undefined ? undefined : { path });
}

/** An error of a system call, as asp_error_errno words it: "what: strerror". */
export function osError(e: unknown, what: string, path?: string): AspError {
  const name = (e as NodeJS.ErrnoException)?.code ?? "EIO";
  const known = STRERROR[name];
  const errno = known ? known[0] : -((e as NodeJS.ErrnoException)?.errno ?? 0) || undefined;
  const text = known ? known[1] : String((e as Error)?.message ?? e);
  return new AspError(ERRNO_CODES[name] ?? "io_error", cut(`${what}: ${text}`), { errno, path });
}

/** A bounded string builder: output past the end is dropped, as sbuf does. */
class SBuf {
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
const get = (o: JsonValue | undefined, k: string): JsonValue | undefined =>
  isObj(o) ? o.get(k) : undefined;

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

const PLURAL: Record<string, string> = {
  string: "strings",
  integer: "integers",
  boolean: "booleans",
  object: "objects",
  array: "arrays",
  null: "nulls",
};

function describeType(b: SBuf, s: JsonObject, t: string): void {
  const lo = s.get("minimum"),
    hi = s.get("maximum");
  const minLen = s.get("minLength"),
    pattern = s.get("pattern");
  const minItems = s.get("minItems"),
    items = s.get("items");
  if (t === "null") b.add("null");
  else if (t === "boolean") b.add("true or false");
  else if (t === "integer") {
    b.add("an integer");
    if (lo !== undefined && hi !== undefined) b.add(` from ${lo} to ${hi}`);
    else if (lo !== undefined) b.add(` >= ${lo}`);
    else if (hi !== undefined) b.add(` <= ${hi}`);
  } else if (t === "string") {
    const n = isInt(minLen) ? minLen : 0n;
    if (pattern !== undefined) b.add(`a string matching ${pattern}`);
    else if (n === 1n) b.add("a non-empty string");
    else if (n > 1n) b.add(`a string of at least ${n} characters`);
    else b.add("a string");
  } else if (t === "array") {
    const n = isInt(minItems) ? minItems : 0n;
    if (n === 1n) b.add("a non-empty array");
    else if (n > 1n) b.add(`an array of at least ${n} items`);
    else b.add("an array");
    const it = get(items, "type");
    if (typeof it === "string") b.add(` of ${PLURAL[it] ?? "values"}`);
  } else b.add("an object");
}

function describe(b: SBuf, s: JsonObject): void {
  const t = s.get("type"),
    e = s.get("enum");
  if (s.has("const")) showValue(b, s.get("const") as JsonValue);
  else if (e !== undefined) {
    b.add("one of ");
    (e as JsonValue[]).forEach((v, i) => {
      b.add(i ? ", " : "");
      showValue(b, v);
    });
  } else if (typeof t === "string") describeType(b, s, t);
  else if (Array.isArray(t)) {
    t.forEach((one, i) => {
      b.add(i ? " or " : "");
      describeType(b, s, one as string);
    });
  } else if (s.has("pattern") || s.has("minLength")) describeType(b, s, "string");
  else b.add("any value");
}

// ---- the schema and the checks that keep it and this file in step ------------------------

const KEYWORDS = new Set([
  "$schema", "$comment", "title", "description", "default", "examples", "type", "const",
  "enum", "minimum", "maximum", "minLength", "pattern", "minItems", "prefixItems", "items",
  "properties", "additionalProperties", "required", "propertyNames", "allOf", "if", "then",
]);
const TYPE_NAMES = new Set(["null", "boolean", "integer", "string", "array", "object"]);

function schemaBug(ptr: string, what: string, name = ""): AspError {
  return error("internal", `spec/asp.schema.json at ${ptr || "/"}: ${what}${name}; the validator in the SDK must learn it`);
}

function validType(t: JsonValue | undefined): boolean {
  if (typeof t === "string") return TYPE_NAMES.has(t);
  if (!Array.isArray(t) || t.length === 0) return false;
  return t.every((x) => typeof x === "string" && TYPE_NAMES.has(x));
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

function checkSchema(s: JsonValue, ptr: string): void {
  if (typeof s === "boolean") return;
  if (!isObj(s)) throw schemaBug(ptr, "a schema must be an object or a boolean");
  for (const [k, v] of s) {
    let bad = false;
    if (!KEYWORDS.has(k)) throw schemaBug(ptr, "unsupported keyword ", k);
    if (k === "type") bad = !validType(v);
    else if (k === "minimum" || k === "maximum") bad = !isInt(v);
    else if (k === "minLength" || k === "minItems") bad = !isInt(v) || v < 0n;
    else if (k === "pattern") {
      try {
        if (typeof v !== "string") bad = true;
        else regex(v);
      } catch {
        bad = true;
      }
    } else if (k === "enum") bad = !Array.isArray(v) || v.length === 0;
    else if (k === "required") bad = !Array.isArray(v) || !v.every((x) => typeof x === "string");
    else if (k === "properties") {
      bad = !isObj(v);
      if (!bad) for (const [name, p] of v as JsonObject) checkSchema(p, `${ptr}/properties/${name}`);
    } else if (k === "prefixItems" || k === "allOf") {
      bad = !Array.isArray(v);
      if (!bad) (v as JsonValue[]).forEach((p, i) => checkSchema(p, `${ptr}/${k}/${i}`));
    } else if (["additionalProperties", "items", "propertyNames", "if", "then"].includes(k)) {
      checkSchema(v, `${ptr}/${k}`);
    }
    if (bad) throw schemaBug(ptr, "malformed or unsupported value of ", k);
  }
}

function walk(node: JsonValue | undefined, dotted: string, schema: boolean): JsonValue | undefined {
  for (const seg of dotted.split(".")) {
    const n = schema ? get(node, "properties") : node;
    node = get(n, seg);
    if (node === undefined) return undefined;
  }
  return node;
}

type Kind = "skip" | "transport" | "string" | "local_path" | "uint" | "u64" | "bool" | "hostkey" | "env" | "argv";
const FIELDS: [string, Kind][] = [
  ["version", "skip"], ["transport", "transport"], ["cwd", "string"], ["env", "env"],
  ["timeout_ms", "u64"], ["call_timeout_ms", "uint"], ["ssh.host", "string"], ["ssh.port", "uint"],
  ["ssh.user", "string"], ["ssh.identity_file", "local_path"], ["ssh.identity_env", "string"],
  ["ssh.password_env", "string"], ["ssh.known_hosts", "local_path"],
  ["ssh.host_key_sha256", "string"], ["ssh.host_key", "string"],
  ["ssh.strict_host_key_checking", "hostkey"], ["ssh.connect_timeout_ms", "uint"],
  ["ssh.agent", "string"], ["stdio.command", "argv"], ["http.url", "string"],
  ["http.token_env", "string"], ["http.token_file", "local_path"],
  ["http.ca_file", "local_path"], ["http.websocket", "bool"],
];
const TRANSPORTS = ["stdio", "ssh", "http"];

function checkFields(schema: JsonObject): void {
  const paths = new Set(FIELDS.map(([p]) => p));
  for (const [p] of FIELDS)
    if (walk(schema, p, true) === undefined)
      throw error("internal", `the SDK's config view reads ${p}, which spec/asp.schema.json does not define`);
  const tenum = get(walk(schema, "transport", true), "enum");
  for (const name of Array.isArray(tenum) ? tenum : [])
    if (typeof name !== "string" || !TRANSPORTS.includes(name))
      throw error("internal", `spec/asp.schema.json names a transport the SDK does not know: ${typeof name === "string" ? name : "(not a string)"}`);
  const leaves = (props: JsonObject, prefix: string) => {
    for (const [name, p] of props) {
      const path = prefix ? `${prefix}.${name}` : name;
      const sub = get(p, "properties");
      if (isObj(sub)) leaves(sub, path);
      else if (!paths.has(path))
        throw error("internal", `spec/asp.schema.json defines ${path} but the SDK's config view has no place for it`);
    }
  };
  const props = schema.get("properties");
  if (isObj(props)) leaves(props, "");
}

const schemaCache = new Map<string, JsonObject>();
function loadSchema(text: string, v1 = true): JsonObject {
  let s = schemaCache.get(text);
  if (!s) {
    const name = v1 ? "spec/asp.schema.json" : "spec/asp.v0.schema.json";
    let v: JsonValue;
    try {
      v = parseJson(enc.encode(text));
    } catch (e) {
      const j = e as JsonError;
      throw error("internal", `${name}:${j.line}:${j.column}: ${j.text}`);
    }
    checkSchema(v, "");
    s = v as JsonObject;
    if (v1) checkFields(s); // a v0 file reaches the view only as its version 1 form
    schemaCache.set(text, s);
  }
  return s;
}

// ---- version 0 (core/src/config.c map_v0, docs/decisions.md "Files of the ASP v0 draft") --

/** "version": "0"; also 0 beside "connection", so the v0 schema names the version. */
function isV0(doc: JsonValue): boolean {
  if (!isObj(doc)) return false;
  const v = doc.get("version");
  return v === "0" || (isInt(v) && v === 0n && doc.has("connection"));
}

/** The version 1 document a valid v0 document means, keys in the C core's order. */
function v0ToV1(v0: JsonObject): JsonObject {
  const connV = v0.get("connection");
  const conn: JsonObject = isObj(connV) ? connV : new Map();
  const idV = conn.get("identity");
  const id: JsonObject = isObj(idV) ? idV : new Map();
  const v1: JsonObject = new Map<string, JsonValue>([
    ["version", 1n],
    ["transport", "ssh"],
  ]);
  const ssh: JsonObject = new Map();
  if (v0.has("workspace")) v1.set("cwd", v0.get("workspace") as JsonValue);
  for (const k of ["host", "port", "user"]) if (conn.has(k)) ssh.set(k, conn.get(k) as JsonValue);
  if (id.has("file")) ssh.set("identity_file", id.get("file") as JsonValue);
  if (id.has("env")) ssh.set("identity_env", id.get("env") as JsonValue);
  const hk = conn.get("host_key");
  if (typeof hk !== "string") ssh.set("strict_host_key_checking", "accept-new");
  else ssh.set(hk.startsWith("SHA256:") ? "host_key_sha256" : "host_key", hk);
  v1.set("ssh", ssh);
  return v1;
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

class V {
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
    return error("invalid_argument", `${this.file}:${line}:${col}: ${path}${path ? ": " : ""}${wb.text()}`, this.filePath);
  }
}

function jsonEqual(a: JsonValue | undefined, b: JsonValue | undefined): boolean {
  if (a === null || b === null || typeof a === "boolean" || typeof b === "boolean") return a === b;
  if (typeof a !== typeof b) return false;
  if (isObj(a)) {
    if (!isObj(b) || a.size !== b.size) return false;
    for (const [k, v] of a) if (!b.has(k) || !jsonEqual(v, b.get(k))) return false;
    return true;
  }
  if (Array.isArray(a)) return Array.isArray(b) && a.length === b.length && a.every((x, i) => jsonEqual(x, b[i]));
  if (Array.isArray(b) || isObj(b)) return false;
  return a === b;
}

function typeMatches(t: string, v: JsonValue): boolean {
  if (v === null) return t === "null";
  if (typeof v === "boolean") return t === "boolean";
  if (isInt(v)) return t === "integer";
  if (typeof v === "number") return false; // stricter than JSON Schema: 22.0 is not a port
  if (typeof v === "string") return t === "string";
  if (Array.isArray(v)) return t === "array";
  return t === "object";
}

function valueOk(s: JsonObject, v: JsonValue): boolean {
  const t = s.get("type");
  if (typeof t === "string" && !typeMatches(t, v)) return false;
  if (Array.isArray(t) && !t.some((x) => typeMatches(x as string, v))) return false;
  if (s.has("const") && !jsonEqual(s.get("const"), v)) return false;
  const e = s.get("enum");
  if (Array.isArray(e) && !e.some((x) => jsonEqual(x, v))) return false;
  if (isInt(v)) {
    const lo = s.get("minimum"),
      hi = s.get("maximum");
    if (isInt(lo) && v < lo) return false;
    if (isInt(hi) && v > hi) return false;
  }
  if (typeof v === "string") {
    const ml = s.get("minLength");
    if (isInt(ml) && BigInt([...v].length) < ml) return false;
    const pat = s.get("pattern");
    if (typeof pat === "string" && !regex(pat).test(v)) return false;
  }
  const mi = s.get("minItems");
  if (Array.isArray(v) && isInt(mi) && BigInt(v.length) < mi) return false;
  return true;
}

function validate(v: V, s: JsonValue, inst: JsonValue): void {
  if (s === true) return;
  if (s === false) throw v.fail("value", v.cond ? `not allowed when ${v.cond}` : "not allowed here");
  const so = s as JsonObject;
  if (!valueOk(so, inst)) {
    const want = new SBuf(512),
      got = new SBuf(128);
    describe(want, so);
    showValue(got, inst);
    throw v.fail("value", `expected ${want.text()}, got ${got.text()}`);
  }
  if (isObj(inst)) validateObject(v, so, inst);
  else if (Array.isArray(inst)) validateArray(v, so, inst);
  const all = so.get("allOf");
  if (Array.isArray(all)) for (const sub of all) validate(v, sub, inst);
  if (so.has("if") && so.has("then")) {
    const quiet = v.quiet;
    v.quiet = true;
    let holds = true;
    try {
      validate(v, so.get("if") as JsonValue, inst);
    } catch (e) {
      if (!(e instanceof Invalid) && !(e instanceof AspError)) throw e;
      holds = false;
    }
    v.quiet = quiet;
    if (holds) {
      const saved = v.cond;
      v.cond = describeCondition(so.get("if") as JsonObject);
      try {
        validate(v, so.get("then") as JsonValue, inst);
      } finally {
        v.cond = saved;
      }
    }
  }
}

function validateObject(v: V, s: JsonObject, inst: JsonObject): void {
  const propsV = s.get("properties");
  const props: JsonObject = isObj(propsV) ? propsV : new Map();
  const more = s.get("additionalProperties");
  const names = s.get("propertyNames");
  const required = s.get("required");
  for (const key of inst.keys()) {
    if (more === false && !props.has(key)) {
      const b = new SBuf(512);
      for (const name of props.keys()) b.add((b.length ? ", " : "") + name);
      v.path.push(key);
      const err = v.fail("key", `unknown key (expected one of: ${b.text()})`);
      v.path.pop();
      throw err;
    }
  }
  for (const [key, val] of inst) {
    v.path.push(key);
    try {
      if (isObj(names) && !valueOk(names, key)) {
        const want = new SBuf(512);
        describe(want, names);
        throw v.fail("key", `invalid key: expected ${want.text()}`);
      }
      if (props.has(key)) validate(v, props.get(key) as JsonValue, val);
      else if (isObj(more)) validate(v, more, val);
    } finally {
      v.path.pop();
    }
  }
  for (const name of Array.isArray(required) ? required : []) {
    if (!inst.has(name as string)) {
      v.path.push(name as string);
      const err = v.fail("parent", `required key missing${v.cond ? " when " : ""}${v.cond}`);
      v.path.pop();
      throw err;
    }
  }
}

function validateArray(v: V, s: JsonObject, inst: JsonValue[]): void {
  const prefixV = s.get("prefixItems");
  const prefix = Array.isArray(prefixV) ? prefixV : [];
  const items = s.get("items");
  inst.forEach((val, i) => {
    const sub = i < prefix.length ? prefix[i] : items;
    if (sub === undefined) return;
    v.path.push(i);
    try {
      validate(v, sub, val);
    } finally {
      v.path.pop();
    }
  });
}

function describeCondition(cond: JsonObject): string {
  const b = new SBuf(128);
  const props = cond.get("properties");
  if (isObj(props))
    for (const [name, p] of props) {
      if (!isObj(p) || !p.has("const")) continue;
      b.add(b.length ? ` and ${name} is ` : `${name} is `);
      showValue(b, p.get("const") as JsonValue);
    }
  // A required key the "if" does not also pin to a value: its presence is the condition.
  const req = cond.get("required");
  if (Array.isArray(req))
    for (const k of req) {
      if (typeof k !== "string") continue;
      const p = isObj(props) ? props.get(k) : undefined;
      if (!(isObj(p) && p.has("const"))) b.add(`${b.length ? " and " : ""}${k} is given`);
    }
  return b.text();
}

// ---- paths -------------------------------------------------------------------------------

function join(d: string, name: string): string {
  while (name.startsWith("./")) name = name.slice(2);
  if (name === ".") name = "";
  if (!name) return d;
  return d + (d.endsWith("/") ? "" : "/") + name;
}

function absolute(path: string): string {
  let out: string;
  if (path.startsWith("/")) out = path;
  else {
    let cwd: string;
    try {
      cwd = process.cwd();
    } catch (e) {
      throw osError(e, "cannot get the working directory");
    }
    out = join(cwd, path);
  }
  if (byteLength(out) >= PATH_MAX) throw error("too_large", `path too long: ${path}`, path);
  return out;
}

function homeDir(): string | null {
  const home = process.env.HOME;
  if (home) return home;
  try {
    return os.userInfo().homedir || null;
  } catch {
    return null;
  }
}

function localPath(v: V, base: string, p: string): string {
  let out: string;
  if (p.startsWith("~")) {
    if (p.length > 1 && p[1] !== "/") throw v.fail("value", "only ~/ is expanded, not ~user/; write the full path");
    const home = homeDir();
    if (!home) throw v.fail("value", "cannot expand ~: $HOME is not set");
    out = join(home, p.length > 1 ? p.slice(2) : "");
  } else if (p.startsWith("/")) out = p;
  else out = join(base, p);
  if (byteLength(out) >= PATH_MAX) throw v.fail("value", `path longer than ${PATH_MAX - 1} bytes`);
  return out;
}

// ---- the view ----------------------------------------------------------------------------

/** A loaded, validated .asp.json, as asp_config_view shows it: strings are undefined when
 * absent, schema defaults applied, local paths absolute. */
export interface Config {
  path?: string;
  transport: "stdio" | "ssh" | "http";
  cwd?: string;
  /** In file order. */
  env: [string, string][];
  timeout_ms: number;
  /** Deadline of calls without a time limit of their own. */
  call_timeout_ms: number;
  ssh: Record<string, string | number | boolean>;
  stdio: { command?: string[] };
  http: { url?: string; token_env?: string; token_file?: string; ca_file?: string; websocket?: boolean };
}

function viewBug(path: string): AspError {
  return error("internal", `spec/asp.schema.json lets ${path} hold a value the SDK's config view cannot represent`);
}

function buildField(v: V, path: string, kind: Kind, schema: JsonObject, doc: JsonValue, cfg: Config, base: string): void {
  let val = walk(doc, path, false);
  if (val === undefined) val = get(walk(schema, path, true), "default");
  if (val === undefined || val === null || kind === "skip") return;
  v.path = path.split(".");
  const dot = path.lastIndexOf(".");
  const section = dot >= 0 ? path.slice(0, dot) : "";
  const leaf = path.slice(dot + 1);
  const store = (x: string | number | boolean) => {
    if (section === "ssh") cfg.ssh[leaf] = x;
    else if (section === "http") (cfg.http as Record<string, unknown>)[leaf] = x;
    else (cfg as unknown as Record<string, unknown>)[leaf] = x;
  };
  switch (kind) {
    case "transport":
      if (typeof val !== "string" || !TRANSPORTS.includes(val)) throw viewBug(path);
      cfg.transport = val as Config["transport"];
      return;
    case "string":
      if (typeof val !== "string") throw viewBug(path);
      store(val);
      return;
    case "local_path":
      if (typeof val !== "string") throw viewBug(path);
      store(localPath(v, base, val));
      return;
    case "uint":
    case "u64":
      if (!isInt(val) || val < 0n || (kind === "uint" && val > 0xffffffffn)) throw viewBug(path);
      store(Number(val));
      return;
    case "bool":
      if (typeof val !== "boolean") throw viewBug(path);
      store(val);
      return;
    case "hostkey":
      if (typeof val === "boolean" || val === "accept-new") store(val);
      else throw viewBug(path);
      return;
    case "env":
      if (!isObj(val)) throw viewBug(path);
      cfg.env = [];
      for (const [k, x] of val) {
        if (typeof x !== "string") throw viewBug(path);
        cfg.env.push([k, x]);
      }
      return;
    case "argv": {
      if (!Array.isArray(val) || !val.every((x) => typeof x === "string")) throw viewBug(path);
      const argv = [...(val as string[])];
      if (argv.length && (argv[0].includes("/") || argv[0].startsWith("~"))) {
        v.path.push(0);
        argv[0] = localPath(v, base, argv[0]);
      }
      cfg.stdio.command = argv;
      return;
    }
  }
}

function syntaxError(file: string, filePath: string | undefined, e: JsonError): AspError {
  let text = e.text;
  for (const [jansson, ours] of [
    ["\\u0000 is not allowed without JSON_ALLOW_NUL", "strings may not contain \\u0000"],
    ["NUL byte in object key not supported", "keys may not contain \\u0000"],
  ]) {
    if (text.startsWith(jansson)) {
      text = ours + text.slice(jansson.length);
      break;
    }
  }
  return error("invalid_argument", `${file}:${e.line > 0 ? e.line : 1}:${e.column > 0 ? e.column : 1}: invalid JSON: ${text}`, filePath);
}

/** Validates config bytes. `filename` names the file in messages and its folder is the
 * base of relative paths; undefined means "<memory>" and the working directory. */
export function parseConfig(data: Uint8Array, filename: string | undefined, schemaText: string, v0SchemaText?: string): Config {
  let file = "<memory>",
    base: string;
  if (filename !== undefined) {
    file = absolute(filename);
    base = file.slice(0, file.lastIndexOf("/")) || "/";
  } else {
    try {
      base = process.cwd();
    } catch (e) {
      throw osError(e, "cannot get the working directory");
    }
  }
  if (data.length > CONFIG_MAX_BYTES)
    throw error("too_large", `${file}: ${data.length} bytes, more than a config may hold (${CONFIG_MAX_BYTES}); is it the right file?`, filename);
  const schema = loadSchema(schemaText);
  const filePath = filename !== undefined ? file : undefined;
  let doc: JsonValue;
  try {
    doc = parseJson(data);
  } catch (e) {
    if (e instanceof JsonError) throw syntaxError(file, filePath, e);
    throw e;
  }
  const v = new V(data, file, filePath);
  // A file of the v0 draft is checked against its own schema, then read as what it means.
  if (isV0(doc) && v0SchemaText !== undefined) {
    validate(v, loadSchema(v0SchemaText, false), doc);
    doc = v0ToV1(doc as JsonObject);
  }
  validate(v, schema, doc);
  const cfg: Config = { transport: "stdio", env: [], timeout_ms: 0, call_timeout_ms: 60000, ssh: {}, stdio: {}, http: {} };
  if (filename !== undefined) cfg.path = file;
  for (const [path, kind] of FIELDS) buildField(v, path, kind, schema, doc, cfg, base);
  return cfg;
}

function readFile(path: string, limit: number, what: string): Uint8Array {
  let fd: number;
  try {
    fd = fs.openSync(path, fs.constants.O_RDONLY);
  } catch (e) {
    throw osError(e, `cannot open ${what} ${path}`, path);
  }
  const chunks: Uint8Array[] = [];
  let total = 0;
  try {
    while (total <= limit) {
      const b = new Uint8Array(65536);
      let n: number;
      try {
        n = fs.readSync(fd, b, 0, b.length, null);
      } catch (e) {
        throw osError(e, `cannot read ${what} ${path}`, path);
      }
      if (n === 0) break;
      chunks.push(b.subarray(0, n));
      total += n;
    }
  } finally {
    fs.closeSync(fd);
  }
  if (total > limit) throw error("too_large", `${what} ${path} is larger than ${limit} bytes; is it the right file?`, path);
  const out = new Uint8Array(total);
  let off = 0;
  for (const c of chunks) {
    out.set(c, off);
    off += c.length;
  }
  return out;
}

/** The config's absolute path: $ASP_CONFIG when set and non-empty, else .asp.json in
 * startDir (default: the working directory), then each parent up to /. */
export function findConfig(startDir?: string): string {
  const env = process.env.ASP_CONFIG;
  if (env) {
    let st: fs.Stats;
    try {
      st = fs.statSync(env);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT")
        throw error("not_found", `ASP_CONFIG names ${env}, which does not exist; point it at a .asp.json or unset it`, env);
      throw osError(e, `cannot use ASP_CONFIG=${env}`, env);
    }
    if (st.isDirectory()) throw error("is_a_directory", `ASP_CONFIG names ${env}, a directory; point it at a .asp.json file`, env);
    return absolute(env);
  }
  let start = absolute(startDir ?? ".");
  while (start.length > 1 && start.endsWith("/")) start = start.slice(0, -1);
  let d = start;
  for (;;) {
    const cand = join(d, ".asp.json");
    if (byteLength(cand) >= PATH_MAX) throw error("too_large", `path too long: ${d}`, d);
    try {
      if (!fs.statSync(cand).isDirectory()) return cand;
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code !== "ENOENT" && code !== "ENOTDIR") throw osError(e, `cannot look for ${cand}`, cand);
    }
    if (d === "/") break;
    const i = d.lastIndexOf("/");
    d = i > 0 ? d.slice(0, i) : "/";
  }
  throw error("not_found", `no .asp.json in ${start} or any parent directory; create one with \`asp init\`, or set ASP_CONFIG to its path`, start);
}

/** Reads and validates the config at path, or the one findConfig() finds. */
export function loadConfig(path: string | undefined, schemaText: string, v0SchemaText?: string): Config {
  const p = path ?? findConfig();
  return parseConfig(readFile(p, CONFIG_MAX_BYTES, "config"), p, schemaText, v0SchemaText);
}

/** A secret named by an *_env key or an *_file key, as asp_config_secret reads it;
 * undefined when both are undefined. */
export function readSecret(envName?: string, filePath?: string): string | undefined {
  const value = envName ? process.env[envName] : undefined;
  let s: string;
  if (value !== undefined) s = value;
  else if (filePath) {
    const raw = readFile(filePath, SECRET_MAX_BYTES, "secret file");
    if (raw.includes(0)) throw error("invalid_argument", `secret file ${filePath} holds a NUL byte`, filePath);
    s = dec.decode(raw);
  } else if (envName) {
    throw error("not_found", `environment variable ${envName} is not set; export it with the secret or name a file in the config's *_file key`);
  } else return undefined;
  if (s.endsWith("\n")) s = s.slice(0, -1);
  if (s.endsWith("\r")) s = s.slice(0, -1);
  if (!s) {
    if (value !== undefined) throw error("invalid_argument", `environment variable ${envName} is empty`);
    throw error("invalid_argument", `secret file ${filePath} is empty`, filePath);
  }
  return s;
}
